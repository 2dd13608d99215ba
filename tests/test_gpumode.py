"""GPU MODE reference-kernels problems run as they are: secret seeds in place of the declared
ones, output buffers poisoned, the other inputs checked, check_implementation in the judge
beside krung's metrics, benchmarks ranked as task.yml says."""

from __future__ import annotations

import random
import shutil

import pytest
import torch

from krung.judge.problem.gpumode import Sizes, _outcome, shared_modules, support_dirs
from krung.judge.problem.unseen import unseen_cases
from tests.conftest import GPUMODE, declared, write

CHECKS = "static,compile,run,correctness"  # enough for a version that fails


def test_run_a_gpumode_problem_with_its_submission(krung):
    result = krung("run", GPUMODE / "vectoradd_py", GPUMODE / "vectoradd_py" / "submission.py",
                   "--rungs", f"{CHECKS},benchmark", "--json")
    assert result.code == 0, result.stderr
    run = result.json()
    assert run["problem"] == "vectoradd_py" and run["ok"] is True
    assert run["env"]["problem_format"] == "gpumode" and run["env"]["ranking_by"] == "geom"
    rungs = {r["name"]: r for r in run["rungs"]}
    correctness = rungs["correctness"]["figures"]
    cases = [declared(row["case"]) for row in correctness["per_case"]]
    assert cases[:4] == ["size=1", "size=127", "size=128", "size=129"]  # no declared seed
    # then the unseen cases, and on a CPU the bench cases' shapes
    assert correctness["unseen_cases"] >= 1 and any(
        "(unseen)" in row["case"] for row in correctness["per_case"])
    bench = rungs["benchmark"]["figures"]
    assert bench["ranking_by"] == "geom"
    assert bench["score_us"] == pytest.approx(bench["geomean_us"])


@pytest.mark.parametrize("problem, version, rung, error_type, words", [
    # the last row of the output buffer is never written: the poison shows
    ("vectoradd_py", "wrong_tail", "run", "NonFinite", "NaN/Inf"),
    # writes its input a besides the output buffer
    ("vectoradd_py", "wrong_writes_input", "run", "InputMutated", "input [0][0] was changed"),
    # inside krung's float32 tolerance, outside the problem's own 1e-6
    ("vectoradd_py", "wrong_close", "correctness", "Mismatch",
     "the problem's own check failed: 1 mismatched elements"),
    # a check that answers a bare False (where the first failing case is a single row, krung
    # names no first mismatch beside it)
    ("rowsoftmax_py", "wrong_temperature", "correctness", "Mismatch",
     "the problem's own check failed"),
    # reads the column-major input as row-major (the layout travels with the data)
    ("matmul_py", "wrong_row_major", "correctness", "Mismatch", "mismatched elements"),
])
def test_wrong_submissions_fail_where_they_are_wrong(krung, problem, version, rung, error_type,
                                                    words):
    result = krung("run", GPUMODE / problem, GPUMODE / problem / "solutions" / f"{version}.py",
                   "--rungs", CHECKS, "--json")
    assert result.code == 1, result.stderr
    failed = next(r for r in result.json()["rungs"] if r["status"] == "failed")
    assert (failed["name"], failed["error_type"]) == (rung, error_type)
    assert words in failed["error"]


def reference_as_version(problem, tmp_path):
    """The honest baseline GPU MODE's repository always has: the reference itself, with
    `custom_kernel = ref_kernel` (a copy: a version must not import reference.py)."""
    path = tmp_path / "honest" / f"{problem.name}.py"
    path.parent.mkdir(exist_ok=True)
    path.write_text((problem / "reference.py").read_text() + "\n\ncustom_kernel = ref_kernel\n")
    return path


def test_output_buffers_are_found_where_the_reference_returns_a_new_tensor(krung, tmp_path):
    """As pmpp_v2/prefixsum_py: the data carries a float32 buffer, the reference ignores it
    and returns a new float64 tensor. The buffer is found (krung took it for an input and
    rejected the problem: its contents are whatever the allocator had), and GPU MODE's own
    submission, float32 written into it, passes: the problem's check decides what it takes,
    in the timed calls as in the checked ones (the benchmark rung once held the float32
    output to the reference's float64: OutputContract)."""
    problem = GPUMODE / "prefixsum_py"
    for version in (problem / "submission.py", reference_as_version(problem, tmp_path)):
        result = krung("run", problem, version, "--rungs", CHECKS + ",determinism,benchmark",
                       "--json")
        assert result.code == 0, result.stdout + result.stderr
        rungs = {r["name"]: r for r in result.json()["rungs"]}
        assert rungs["correctness"]["figures"]["passed"] >= 5  # declared and unseen cases
        assert rungs["determinism"]["status"] == "ok"
        assert rungs["benchmark"]["status"] == "ok", rungs["benchmark"]


@pytest.mark.parametrize("version, rung, error_type, words", [
    # the buffer half written: the poison shows in the other half
    ("wrong_half_written", "run", "NonFinite", "NaN/Inf values where the reference is finite"),
    # an exclusive scan: the problem's own check refuses it
    ("wrong_exclusive", "correctness", "Mismatch", "the problem's own check failed"),
])
def test_wrong_prefix_sums_are_rejected(krung, version, rung, error_type, words):
    problem = GPUMODE / "prefixsum_py"
    result = krung("run", problem, problem / "solutions" / f"{version}.py", "--rungs", CHECKS,
                   "--json")
    assert result.code == 1, result.stderr
    failed = next(r for r in result.json()["rungs"] if r["status"] == "failed")
    assert (failed["name"], failed["error_type"]) == (rung, error_type)
    assert words in failed["error"]


def test_a_check_that_runs_out_of_gpu_memory_is_not_the_versions_mismatch(krung, tmp_path):
    """bioml/trimul at its declared sizes beside other problems on an 80 GB GPU: its own check
    ran out of memory in the judge, and krung said the honest version mismatched. The check's
    out-of-memory error is krung's (exit 3; a suite runs such a job again alone), never a
    verdict on the output."""
    problem = shutil.copytree(GPUMODE, tmp_path / "gpumode") / "vectoradd_py"  # utils.py too
    size = random.randint(2, 9) * 2**30
    reference = problem / "reference.py"
    reference.write_text(reference.read_text().replace(
        "    expected = ref_kernel(data)\n",
        "    raise torch.cuda.OutOfMemoryError(\n"
        f"        'CUDA out of memory. Tried to allocate {size} bytes')\n"))
    result = krung("run", problem, problem / "submission.py", "--rungs", CHECKS, "--json")
    assert result.code == 3, result.stdout + result.stderr  # krung's error, not the version's
    run = result.json()
    assert "not the version: OutOfMemoryError" in run["error"]
    failed = next(r for r in run["rungs"] if r["status"] == "failed")
    assert failed["name"] == "correctness" and failed["error_type"] != "Mismatch"
    assert f"Tried to allocate {size} bytes" in failed["error"]


def test_a_problem_nondeterministic_by_design_skips_the_determinism_check(krung):
    """The reference draws noise from torch's global generator; its own check accepts any
    output near the input. Correctness passes by the check, and determinism is skipped,
    saying why, instead of failing every version."""
    problem = GPUMODE / "dither_py"
    result = krung("run", problem, problem / "submission.py", "--rungs", CHECKS + ",determinism",
                   "--json")
    assert result.code == 0, result.stdout + result.stderr
    rungs = {r["name"]: r for r in result.json()["rungs"]}
    assert rungs["correctness"]["status"] == "ok"
    assert rungs["determinism"]["status"] == "skipped"
    assert "the reference itself is nondeterministic by design" in rungs["determinism"]["reason"]


def test_scale_shrinks_the_sizes_that_vary_among_the_cases(krung):
    problem = GPUMODE / "vectoradd_py"
    result = krung("run", problem, problem / "submission.py", "--rungs", CHECKS, "--json",
                   env={"KRUNG_SCALE": "0.5"})
    assert result.code == 0, result.stdout + result.stderr
    run = result.json()
    assert run["problem"] == "vectoradd_py@scale0.5"
    assert run["env"]["scaled_sizes"] == {"size": "1..320 -> 1..160"}
    cases = [declared(row["case"]) for row in run["rungs"][3]["figures"]["per_case"]]
    assert cases[:2] == ["size=1", "size=64"]  # 127, 128 and 129 all become 64


def test_a_patched_check_in_the_version_changes_nothing(krung):
    """The version imports reference.py under a disguised name and makes its
    check_implementation accept anything; the judge runs its own copy, and the output buffer
    it returns unwritten holds the poison."""
    cheat = GPUMODE / "vectoradd_py" / "solutions" / "cheat_patch_check.py"
    result = krung("run", GPUMODE / "vectoradd_py", cheat, "--rungs", CHECKS, "--json")
    assert result.code == 1
    rungs = {r["name"]: r for r in result.json()["rungs"]}
    assert rungs["static"]["status"] == "ok"  # the disguise gets past the source check
    assert rungs["run"]["error_type"] == "NonFinite"


def test_importing_the_reference_is_refused_and_task_is_allowed(krung, version):
    honest = version("honest", """
        from task import input_t, output_t
        def custom_kernel(data: input_t) -> output_t:
            return data["x"]
    """)
    importer = version("importer", """
        from reference import ref_kernel
        def custom_kernel(data):
            return ref_kernel(data)
    """)
    problem = GPUMODE / "rowsoftmax_py"
    assert krung("run", problem, honest, "--rungs", "static").code == 0
    refused = krung("run", problem, importer, "--rungs", "static", "--json")
    assert refused.json()["rungs"][0]["error_type"] == "ImportsReference"


def test_task_timeouts_cap_krungs(krung, tmp_path, version):
    shutil.copytree(GPUMODE, tmp_path / "gm")
    task = tmp_path / "gm" / "vectoradd_py" / "task.yml"
    task.write_text(task.read_text().replace("test_timeout: 60", "test_timeout: 2"))
    slow = version("slow", """
        import time
        def custom_kernel(data):
            a, b, c = data
            if a.numel() > 1:
                time.sleep(30)
            c.copy_(a + b)
            return c
    """)
    result = krung("run", tmp_path / "gm" / "vectoradd_py", slow, "--rungs", CHECKS, "--json",
                   timeout=120)
    assert result.code == 1, result.stderr
    failed = next(r for r in result.json()["rungs"] if r["status"] == "failed")
    assert failed["error_type"] == "Timeout" and "within 2 s" in failed["error"]


def test_broken_gpumode_problems_name_their_defects(krung, tmp_path, version):
    shutil.copytree(GPUMODE, tmp_path / "gm")
    folder = tmp_path / "gm" / "rowsoftmax_py"
    reference = folder / "reference.py"
    reference.write_text(reference.read_text().replace(
        "torch.Generator(device=device()).manual_seed(seed)",
        "torch.Generator(device=device()).manual_seed(7)"))
    v = version("v", "def custom_kernel(data):\n    return data['x']\n")
    result = krung("run", folder, v)
    assert result.code == 2
    assert "generate_input(**case) ignores its seed" in result.stderr
    assert "seed a generator from the `seed` argument" in result.stderr

    task = folder / "task.yml"
    task.write_text(task.read_text().replace('ranking_by: "mean"', 'ranking_by: "best"')
                    .replace("benchmarks:", "old_benchmarks:"))
    result = krung("run", folder, v)
    assert result.code == 2
    assert "task.yml has no `benchmarks` list" in result.stderr
    assert "ranking_by 'best' is not one of last, mean, geom" in result.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the problem runs")
def test_a_problem_that_hard_codes_cuda_says_so_on_a_cpu(krung, tmp_path, version):
    """GPU MODE's own problems make their data on `cuda`: on a CPU the error says that, and
    what to do, rather than torch's word about its CUDA library."""
    shutil.copytree(GPUMODE, tmp_path / "gm")
    reference = tmp_path / "gm" / "vectoradd_py" / "reference.py"
    reference.write_text(reference.read_text().replace("device()", '"cuda"'))
    result = krung("run", tmp_path / "gm" / "vectoradd_py",
                   GPUMODE / "vectoradd_py" / "submission.py", "--device", "cpu")
    assert result.code == 2
    assert "generate_input(**case) makes its data on CUDA, and this machine has no GPU" in \
        result.stderr
    assert "the problem hard-codes `cuda`: run it on a machine with an NVIDIA GPU" in \
        result.stderr


def test_a_multi_gpu_problem_is_named_as_one(krung, tmp_path, version):
    folder = tmp_path / "gm" / "allgather_py"
    shutil.copytree(GPUMODE / "vectoradd_py", folder)
    shutil.copy(GPUMODE / "utils.py", tmp_path / "gm" / "utils.py")
    reference = folder / "reference.py"
    reference.write_text(reference.read_text().replace(
        "def generate_input(size: int, seed: int)",
        "def generate_input(rank: int, world_size: int, size: int, seed: int)"))
    result = krung("run", folder, version("v", "def custom_kernel(data):\n    return data\n"))
    assert result.code == 2
    assert "generate_input takes a `rank`: a multi-GPU problem" in result.stderr


def test_data_holding_objects_of_the_problems_own_class_is_explained(krung, tmp_path, version):
    """As amd/mla-decode: the data holds a dataclass of weights and an nn.Module cache. They
    cannot cross to the version's process without pickle; the error says so (it was an
    InternalError about JSON before)."""
    folder = tmp_path / "gm" / "configured_py"
    shutil.copytree(GPUMODE / "vectoradd_py", folder)
    shutil.copy(GPUMODE / "utils.py", tmp_path / "gm" / "utils.py")
    reference = folder / "reference.py"
    reference.write_text(reference.read_text().replace(
        "    return a, b, c\n", "    return Config(size), a, b, c\n").replace(
        "    a, b, c = data\n", "    _, a, b, c = data\n") + (
        "\n\nclass Config:\n    def __init__(self, size):\n        self.size = size\n"))
    result = krung("run", folder, version("v", "def custom_kernel(data):\n    return data[3]\n"))
    assert result.code == 2, result.stdout + result.stderr
    assert "generate_input(**case) returns a Config (at [0][0])" in result.stderr
    assert "never pickled" in result.stderr


def test_unseen_sizes_are_awkward_unless_the_task_names_a_multiple():
    """Every listed size a multiple of 64 or 128: the unseen ones are odd all the same (a
    version that skips the tail must fail), except where task.yml's size_multiples promises
    a multiple, which they keep."""
    declared = [{"m": 64, "n": 128, "k": 128, "heads": 4},
                {"m": 128, "n": 256, "k": 256, "heads": 4},
                {"m": 192, "n": 512, "k": 512, "heads": 4}]
    rng = random.Random(random.randrange(1 << 30))
    sizes = Sizes(declared)
    assert sizes.granules == {"m": 1, "n": 1, "k": 1}  # heads never varies: a constant
    promised = Sizes(declared, {"k": 128})
    assert promised.granules == {"m": 1, "n": 1, "k": 128}
    for case in declared:
        moved = sizes.derive(dict(case), rng)
        assert moved is not None and moved["heads"] == 4
        assert all(moved[key] % 2 == 1 for key in "mnk")
        kept = promised.derive(dict(case), rng)
        assert kept["m"] % 2 == 1 and kept["n"] % 2 == 1
        assert kept["k"] % 128 == 0 and kept["k"] != case["k"]


def test_neighbouring_sizes_still_give_two_distinct_unseen_cases():
    """1023, 1024 and 1025 (prefixsum's sizes) often have the same awkward neighbour: the
    second unseen case draws again rather than dropping out."""
    declared = [{"size": 1023}, {"size": 1024}, {"size": 1025}]
    sizes = Sizes(declared)
    for seed in random.sample(range(1 << 30), 200):
        unseen = unseen_cases(declared, seed, sizes.derive)
        assert len(unseen) == 2 and unseen[0] != unseen[1], (seed, unseen)
        assert not any(case in declared for case in unseen)


def test_check_answers_in_every_shape_gpu_mode_uses():
    assert _outcome((True, "")) == (True, "")
    assert _outcome((False, "3 mismatched")) == (False, "3 mismatched")
    assert _outcome(False) == (False, "")
    assert _outcome(torch.tensor(True)) == (True, "")
    assert _outcome("") == (True, "")
    assert _outcome("mismatch at 3") == (False, "mismatch at 3")
    assert _outcome(["ERROR AT (0,)", "ERROR AT (1,)"]) == (False, "ERROR AT (0,) ERROR AT (1,)")
    assert _outcome([]) == (True, "")
    assert _outcome(None) == (True, "")


def test_files_task_yml_brings_from_elsewhere_are_importable(tmp_path):
    task = {"files": [{"name": "submission.py", "source": "@SUBMISSION@"},
                      {"name": "task.py", "source": "task.py"},
                      {"name": "utils.py", "source": "../utils.py"},
                      {"name": "reference.py", "source": "reference.py"},
                      {"name": "eval.py", "source": "../eval.py"}]}
    folder = tmp_path / "p" / "x_py"
    for path in (folder / "task.py", tmp_path / "p" / "utils.py", folder / "reference.py"):
        write(path, "\n")
    assert support_dirs(folder, task) == [folder.resolve(), (tmp_path / "p").resolve()]
    assert shared_modules(folder, task) == ["task", "utils"]  # not reference, eval, submission


@pytest.mark.gpu
@pytest.mark.parametrize("problem", ["vectoradd_py", "rowsoftmax_py", "matmul_py", "prefixsum_py",
                                     "dither_py"])
def test_gpu_gpumode_submissions_pass(krung, problem):
    """Data made on the GPU travels by CUDA IPC: tuples, dicts, the column-major input of
    matmul (its submission refuses any other layout), the output buffer of vectoradd."""
    result = krung("run", GPUMODE / problem, GPUMODE / problem / "submission.py", "--device",
                   "cuda", "--json")
    assert result.code == 0, result.stderr
    run = result.json()
    assert run["env"]["device"] == "cuda"
    bench = {r["name"]: r for r in run["rungs"]}["benchmark"]["figures"]
    assert bench["timer"] in ("cupti", "events") and bench["score_us"] > 0


@pytest.mark.gpu
@pytest.mark.parametrize("version, rung, error_type", [
    ("wrong_tail", "run", "NonFinite"),
    ("wrong_writes_input", "run", "InputMutated"),
    ("cheat_patch_check", "run", "NonFinite"),
])
def test_gpu_gpumode_poisoned_buffers_and_input_checks(krung, version, rung, error_type):
    result = krung("run", GPUMODE / "vectoradd_py",
                   GPUMODE / "vectoradd_py" / "solutions" / f"{version}.py", "--device", "cuda",
                   "--rungs", CHECKS, "--json")
    assert result.code == 1, result.stderr
    failed = next(r for r in result.json()["rungs"] if r["status"] == "failed")
    assert (failed["name"], failed["error_type"]) == (rung, error_type)


def test_describe_knows_the_bytes_of_every_case():
    from krung.judge.problem.catalog import describe_problem

    about = describe_problem(GPUMODE / "vectoradd_py")
    cases = about["test_cases"] + about["bench_cases"]
    # three float32 (size, size) tensors per case, each made for the answer
    assert {c["label"]: c["bytes_moved"] for c in cases} == {
        f"size={n}": 3 * 4 * n * n for n in (1, 127, 128, 129, 256, 320)}
    assert about["warnings"] == []


CUDA_SUBMISSION = '''
"""vectoradd in CUDA C++ through load_inline, with GPU MODE's types from task.py."""
from task import input_t, output_t
from torch.utils.cpp_extension import load_inline

CUDA = r"""
__global__ void add_kernel(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
torch::Tensor add(torch::Tensor a, torch::Tensor b, torch::Tensor c) {
    int n = c.numel();
    add_kernel<<<(n + 255) / 256, 256>>>(a.data_ptr<float>(), b.data_ptr<float>(),
                                         c.data_ptr<float>(), n);
    return c;
}
"""
_ext = load_inline("gpumode_add", cpp_sources="torch::Tensor add(torch::Tensor a, "
                   "torch::Tensor b, torch::Tensor c);", cuda_sources=CUDA, functions=["add"])


def custom_kernel(data: input_t) -> output_t:
    a, b, c = data
    return _ext.add(a, b, c)
'''


@pytest.mark.slow  # Triton's sm_90 build, then nvcc over torch's headers
def test_a_version_outside_the_problem_folder_imports_task_in_the_build_process(krung,
                                                                               tmp_path):
    """The build process (artifacts; the CPU compile of CUDA C++) adds the problem's import
    paths, as the worker does: a submission kept elsewhere still imports task.py."""
    pytest.importorskip("triton")
    copy = tmp_path / "elsewhere" / "submission.py"
    copy.parent.mkdir()
    shutil.copy(GPUMODE / "vectoradd_py" / "submission.py", copy)
    result = krung("run", GPUMODE / "vectoradd_py", copy, "--rungs",
                   f"{CHECKS},artifacts", "--json")
    rungs = {r["name"]: r for r in result.json()["rungs"]}
    assert rungs["artifacts"]["status"] == "ok", rungs["artifacts"]
    assert rungs["artifacts"]["figures"]["kernels"] == 1
    if shutil.which("nvcc") is None:
        return
    cuda = write(tmp_path / "elsewhere" / "cuda_submission.py", CUDA_SUBMISSION)
    result = krung("run", GPUMODE / "vectoradd_py", cuda, "--rungs", "static,compile",
                   "--json")
    compiled = {r["name"]: r for r in result.json()["rungs"]}["compile"]
    assert compiled["status"] == "ok", compiled
    assert compiled["figures"]["per_kernel"][0]["case"] == "gpumode_add:add_kernel"


def test_data_drawn_from_torchs_global_generator_is_seeded_from_the_case(krung, tmp_path):
    """As bioml/trimul: generate_input seeds its own generator for the input but draws the
    weights from torch's global one. krung seeds that from the case's seed too, so the
    problem loads (it was refused as not deterministic) and its baseline passes."""
    problem = tmp_path / "globalrng_py"
    shutil.copytree(GPUMODE / "vectoradd_py", problem)
    shutil.copy(GPUMODE / "utils.py", tmp_path)  # beside the problem, as in the set
    reference = problem / "reference.py"
    reference.write_text(reference.read_text().replace(
        "    b = torch.randn(size, size, device=device(), generator=gen)\n",
        "    b = torch.randn(size, size, device=device())  # torch's global generator\n"))
    result = krung("run", problem, problem / "submission.py", "--rungs", CHECKS + ",determinism",
                   "--json")
    assert result.code == 0, result.stdout + result.stderr
    assert all(r["status"] == "ok" for r in result.json()["rungs"])
