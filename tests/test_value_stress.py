"""Value stress (krung.judge.problem.value_stress): checked and timed inputs whose values leave
the generator's distribution. What each stress does to a draw, what it leaves alone, and, end
to end, versions right only on the generator's values: caught with the stress named, and
passing with KRUNG_VALUE_STRESS=off (so the stress is what catches them), beside honest
versions of the same problems that pass."""

from __future__ import annotations

import json
import random
import textwrap

import pytest
import torch

from krung.judge.problem.value_stress import STRESSES, meaningless, rounded_apart, stressed

BY_NAME = {s.name: s for s in STRESSES}


def draw(*shape, dtype=torch.float32, seed=None):
    generator = torch.Generator().manual_seed(seed if seed is not None else
                                              torch.seed() % (1 << 31))
    return torch.randn(*shape, generator=generator).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_scaled_magnitudes_are_exact_powers_of_two(dtype):
    x = draw(37, 129, dtype=dtype)
    up = stressed((x,), BY_NAME["magnitudes x8"], set(), seed=1)[0]
    down = stressed((x,), BY_NAME["magnitudes /8"], set(), seed=1)[0]
    assert up.dtype == down.dtype == dtype and up.shape == x.shape
    assert torch.equal(up.float(), x.float() * 8)
    normal = x.float().abs() >= 8 * torch.finfo(dtype).tiny  # /8 stays out of subnormals
    assert normal.float().mean() > 0.99
    assert torch.equal((down.float() * 8)[normal], x.float()[normal])


def test_the_ramp_keeps_the_start_small_and_makes_the_end_large():
    x = draw(4096)
    ramped = stressed((x,), BY_NAME["ramped"], set(), seed=2)[0]
    ratio = ramped / x
    assert torch.equal(ratio[:400], torch.full((400,), 2.0 ** -4))
    assert torch.equal(ratio[-400:], torch.full((400,), 2.0 ** 4))
    assert bool((ratio[1:] >= ratio[:-1]).all())  # rising, in whole powers of two


def test_sorted_and_ties_keep_the_values_and_make_duplicates():
    x = draw(64, 33)
    ordered = stressed((x,), BY_NAME["sorted"], set(), seed=3)[0]
    assert torch.equal(ordered.flatten(), x.flatten().sort().values)
    upper = torch.triu(draw(30, 30, dtype=torch.float64))  # zeros are structure: kept
    before = upper.clone()
    ordered = stressed((upper,), BY_NAME["sorted"], set(), seed=3)[0]
    assert torch.equal(upper, before) and torch.equal(ordered.tril(-1), upper.tril(-1))
    assert torch.equal(ordered[ordered != 0], upper[upper != 0].sort().values)
    tied = stressed((x,), BY_NAME["ties"], set(), seed=3)[0]
    assert tied.unique().numel() < 20 < x.unique().numel()
    assert float((tied - x).abs().max()) <= float(x.std()) / 4 + 1e-6


def test_skewed_indices_keep_their_values_and_concentrate_them():
    bins = 300
    index = torch.randint(0, bins, (5000,))
    skewed = stressed((index, draw(5000)), BY_NAME["skewed indices"], set(), seed=4)
    assert torch.equal(skewed[1], skewed[1])  # the floats are not this stress's
    assert set(skewed[0].tolist()) <= set(index.tolist())
    assert int(skewed[0].bincount().max()) >= 0.7 * 5000


def test_strides_are_kept_and_expanded_tensors_left_alone():
    transposed = draw(48, 32).T
    moved = stressed((transposed,), BY_NAME["ramped"], set(), seed=6)[0]
    assert moved.stride() == transposed.stride() and not torch.equal(moved, transposed)
    expanded = draw(1, 64).expand(16, 64)
    assert stressed((expanded,), BY_NAME["magnitudes x8"], set(), seed=6) is None


def test_what_no_stress_moves():
    permutation = torch.randperm(500)
    offsets = torch.randint(0, 9, (300,)).cumsum(0)
    mask = (torch.rand(1000) > 0.5).float()
    symmetric = draw(40, 40)
    symmetric = symmetric + symmetric.T
    one = draw(1)
    buffer = draw(64)
    inputs = (permutation, offsets, mask, torch.rand(50) > 0.5, one, buffer)
    for stress in STRESSES:
        assert stressed(inputs, stress, {5}, seed=5) is None, stress.name
    for stress in (BY_NAME["ramped"], BY_NAME["sorted"]):  # they move values around
        assert stressed((symmetric,), stress, set(), seed=5) is None
    assert stressed((symmetric,), BY_NAME["magnitudes x8"], set(), seed=5) is not None


def test_float8_is_stressed_in_float32_and_float4_is_left_as_drawn():
    """torch compares float8 for equality only and has no arithmetic on float4 (two values
    a byte): float8 is judged and moved through float32, float4 stays as drawn."""
    x = draw(48, 70, dtype=torch.float8_e4m3fn)
    up = stressed((x,), BY_NAME["magnitudes x8"], set(), seed=7)[0]
    assert up.dtype == x.dtype and torch.equal(up.float(), (x.float() * 8).to(x.dtype).float())
    ordered = stressed((x,), BY_NAME["sorted"], set(), seed=7)[0].float()  # zeros kept
    wide = x.float()
    assert torch.equal(ordered == 0, wide == 0)
    assert torch.equal(ordered[ordered != 0], wide[wide != 0].sort().values)
    rows = x.float().sort(dim=-1).values.to(x.dtype)  # sorted along its rows: structure
    assert stressed((rows,), BY_NAME["sorted"], set(), seed=7) is None
    packed = torch.randint(0, 256, (32, 16), dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    for stress in STRESSES:
        assert stressed((packed,), stress, set(), seed=7) is None, stress.name
    assert torch.equal(rounded_apart((packed,), set(), seed=7)[0].view(torch.uint8),
                       packed.view(torch.uint8))


FLOAT8_PROBLEM = '''
    """y = x widened from float8 and scaled per column by s."""
    import torch

    test_cases = [{"m": 64, "n": 48, "dtype": "float8_e4m3fn"},
                  {"m": 130, "n": 70, "dtype": "float8_e4m3fn"}]
    bench_cases = [{"m": 256, "n": 256, "dtype": "float8_e4m3fn"}]

    def reference(x, s):
        return x.float() * s

    def make_inputs(case, seed, device):
        g = torch.Generator(device=device).manual_seed(seed)
        x = torch.randn(case["m"], case["n"], generator=g, device=device)
        return (x.to(torch.float8_e4m3fn), torch.rand(case["n"], generator=g, device=device) + 0.5)

    def flops(case):
        return case["m"] * case["n"]

    def bytes_moved(case):
        return 5 * case["m"] * case["n"]
'''


def test_a_float8_problem_climbs_the_default_ladder_with_its_stresses(krung, tmp_path, version):
    """A float8 input once made krung's own check fail (torch cannot order float8 values):
    every stress was skipped as not applicable, and the benchmark rung's timed input changes
    ended the run as krung's error."""
    folder = _write(tmp_path, "float8_scale", textwrap.dedent(FLOAT8_PROBLEM))
    result = krung("run", folder, version("float8_scale", "def kernel(x, s):\n"
                                          "    return x.float() * s\n"), "--json")
    assert result.code == 0, result.stdout[-3000:] + result.stderr
    rungs = {r["name"]: r for r in result.json()["rungs"]}
    assert rungs["benchmark"]["status"] == "ok"
    correctness = rungs["correctness"]["figures"]
    assert not correctness.get("value_stress_skipped"), correctness
    assert {name.split(" (")[0] for name in correctness["value_stress"]} == \
        {s.name for s in STRESSES if s.floats is not None}


def test_a_reference_that_overflows_or_returns_tied_indices_decides_nothing():
    assert meaningless(BY_NAME["magnitudes x8"], [torch.tensor([1.0, float("inf")])])
    assert meaningless(BY_NAME["ties"], [draw(4), torch.tensor([0, 3])])
    assert meaningless(BY_NAME["sorted"], [draw(4), torch.tensor([0, 3])]) is None
    assert meaningless(BY_NAME["magnitudes x8"], [draw(8)]) is None


# Three problems a version can get right on the generator's values only.
RMSNORM = """
import torch

def reference(x):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)

def make_inputs(case, seed, device):
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(case["rows"], case["cols"], generator=g, device=device)
    return (x.to(getattr(torch, case["dtype"])),)

test_cases = [{"rows": 3, "cols": 131072, "dtype": "bfloat16"},
              {"rows": 2, "cols": 262144, "dtype": "bfloat16"}]
bench_cases = [{"rows": 8, "cols": 131072, "dtype": "bfloat16"}]

def derive_case(case, rng):  # unseen cases move the rows only: rows this wide keep RMS ~ 1
    return {**case, "rows": rng.randint(2, 11)}

def flops(case):
    return 3 * case["rows"] * case["cols"]

def bytes_moved(case):
    return 4 * case["rows"] * case["cols"]
"""

SOFTPLUS = """
import torch

def reference(x):
    return torch.nn.functional.softplus(x)

def make_inputs(case, seed, device):
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(case["n"], generator=g, device=device),)

test_cases = [{"n": 4099, "dtype": "float32"}, {"n": 65536, "dtype": "float32"}]
bench_cases = [{"n": 1 << 16, "dtype": "float32"}]

def flops(case):
    return 4 * case["n"]

def bytes_moved(case):
    return 8 * case["n"]
"""

HISTOGRAM = """
import torch

def reference(index):
    return torch.bincount(index, minlength=256)

def make_inputs(case, seed, device):
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randint(0, 256, (case["n"],), generator=g, device=device),)

test_cases = [{"n": 20000, "dtype": "int64"}, {"n": 4097, "dtype": "int64"}]
bench_cases = [{"n": 1 << 16, "dtype": "int64"}]

def flops(case):
    return case["n"]

def bytes_moved(case):
    return 8 * case["n"]
"""

VERSIONS = {
    # (problem, version right only on the generator's values, honest version, the stress
    # that catches it)
    "identity_norm": (RMSNORM, """
        def kernel(x):  # randn rows this wide have an RMS within a percent of 1
            return x.clone()
    """, """
        import torch
        def kernel(x):
            xf = x.float()
            return (xf / torch.sqrt(xf.square().mean(-1, keepdim=True) + 1e-6)).to(x.dtype)
    """, "magnitudes"),
    "sniffed_clamp": (SOFTPLUS, """
        import torch
        def kernel(x):
            if float(x[:256].abs().max()) < 8:  # the generator's range: clamp, a cheaper path
                x = x.clamp(-8, 8)
            return torch.nn.functional.softplus(x)
    """, """
        import torch
        def kernel(x):
            return torch.where(x > 20, x, torch.log1p(torch.exp(x.clamp(max=20))))
    """, "ramped"),
    "balanced_capacity": (HISTOGRAM, """
        import torch
        def kernel(index):  # room for 4x the mean count per bin, as if the bins were balanced
            return torch.bincount(index, minlength=256).clamp(max=index.numel() // 64 + 16)
    """, """
        import torch
        def kernel(index):
            counts = torch.zeros(256, dtype=torch.int64)
            return counts.index_add_(0, index, torch.ones_like(index))
    """, "skewed indices"),
}


def _write(tmp_path, name, problem):
    folder = tmp_path / name
    folder.mkdir(exist_ok=True)
    (folder / "problem.py").write_text(problem)
    return folder


@pytest.mark.parametrize("name", sorted(VERSIONS))
def test_a_version_right_only_on_the_generators_values_fails_with_the_stress_named(
        krung, tmp_path, version, name):
    problem, cheat, _, caught_by = VERSIONS[name]
    folder = _write(tmp_path, name, problem)
    path = version(name, textwrap.dedent(cheat))
    rungs = "static,compile,run,correctness"
    # The cases at their sizes: shrunk for the interpreter's sake, the norm's rows would be
    # too narrow for an RMS near 1 (torch versions, fast at any size).
    whole = {"KRUNG_CPU_CHECK_BUDGET": "0"}
    result = krung("run", folder, path, "--json", "--rungs", rungs, env=whole)
    assert result.code == 1, result.stdout + result.stderr
    failed = next(r for r in result.json()["rungs"] if r["status"] == "failed")
    assert (failed["name"], failed["error_type"]) == ("correctness", "Mismatch"), failed
    assert all("(stress: " in case for case in failed["figures"]["failed_cases"]), failed
    assert f"(stress: {caught_by}" in failed["error"], failed["error"]
    assert "right on the generator's values but not on these" in failed["hint"], failed
    # Without the stress it passes: the generator's values alone cannot tell it.
    unstressed = krung("run", folder, path, "--json", "--rungs", rungs,
                       env={**whole, "KRUNG_VALUE_STRESS": "off"})
    assert unstressed.code == 0, unstressed.stdout[-2000:] + unstressed.stderr


@pytest.mark.parametrize("name", sorted(VERSIONS))
def test_honest_versions_pass_every_stress_checked_and_timed(krung, tmp_path, version, name):
    problem, _, honest, _ = VERSIONS[name]
    folder = _write(tmp_path, name, problem)
    result = krung("run", folder, version(f"honest_{name}", textwrap.dedent(honest)), "--json",
                   "--rungs", "static,compile,run,correctness,benchmark")
    assert result.code == 0, result.stdout[-3000:] + result.stderr
    rungs = {r["name"]: r for r in result.json()["rungs"]}
    ran = rungs["correctness"]["figures"]["value_stress"]
    stressed_rows = [r for r in rungs["correctness"]["figures"]["per_case"] if "stress" in r]
    assert len(stressed_rows) == len(ran) >= 1 and all(r["passed"] for r in stressed_rows)
    timed = rungs["benchmark"]["figures"]["per_case"][0]
    assert len(timed["value_stress"]) == 2, json.dumps(timed)  # one per round


def test_the_summary_counts_the_stresses_apart_from_the_listed_cases():
    from krung.host.report import _listed_and_unseen

    rows = ([{"case": f"n={n}"} for n in (3, 5)] + [{"case": "n=7 (unseen)"}]
            + [{"case": "n=5 (stress: ties)", "stress": "ties"}])
    figures = {"cases": len(rows), "unseen_cases": 1, "seeds": 3, "per_case": rows}
    assert _listed_and_unseen(figures) == ("2 listed + 1 unseen, 3 seeds each; "
                                           "1 value stress(es), 1 seed")


def test_a_stress_the_problems_own_check_rejects_the_reference_on_is_skipped_and_said(
        krung, tmp_path):
    """A GPU MODE check that holds outputs to a range the generator's values keep (as a
    Cholesky check holds its factor's diagonal positive, which ties can break): on scaled-up
    values the reference's own outputs fail it, so that stress decides nothing."""
    import shutil

    from tests.conftest import GPUMODE

    folder = tmp_path / "gm" / "bounded_py"
    shutil.copytree(GPUMODE / "vectoradd_py", folder)
    shutil.copy(GPUMODE / "utils.py", tmp_path / "gm" / "utils.py")
    reference = folder / "reference.py"
    reference.write_text(reference.read_text().replace(
        "    return compare(output, expected, rtol=1e-6, atol=1e-6)",
        "    if float(output.abs().max()) > 30:\n"
        "        return False, 'outputs out of the range the task promises'\n"
        "    return compare(output, expected, rtol=1e-6, atol=1e-6)"))
    # The cases at their sizes: 129x129 sums of two randn reach past 30/8 (all but surely),
    # where a case the CPU budget shrank to a few elements might not.
    result = krung("run", folder, folder / "submission.py", "--json", "--rungs",
                   "static,compile,run,correctness", env={"KRUNG_CPU_CHECK_BUDGET": "0"})
    figures = _correctness_figures(result)
    skipped = figures["value_stress_skipped"]
    assert "magnitudes x8" in skipped and "the problem's own check rejects the reference's " \
        "outputs on these values (the problem's own check failed: outputs out of the range" \
        in skipped, skipped
    assert "magnitudes /8" in " ".join(figures["value_stress"])


def test_a_stress_past_the_tolerance_for_rounding_is_skipped_and_said(krung):
    """GPU MODE's matmul test problem checks with atol 1e-4, set for the generator's
    magnitudes: `magnitudes x8` multiplies a float32 matmul's rounding by 64, and the honest
    submission failed the benchmark's timed check (seed below: make test, stop 39) on an output
    near zero. The reference on inputs a few units in the last place apart passes the check
    on the generator's values and fails it on the stressed ones, so the stress is skipped,
    said, and the honest version passes."""
    from tests.conftest import GPUMODE

    problem = GPUMODE / "matmul_py"
    result = krung("run", problem, problem / "submission.py", "--seed", "8535186141892247548",
                   "--json", env={"OMP_NUM_THREADS": "1"})
    figures = _correctness_figures(result)
    skipped = figures["value_stress_skipped"]
    assert "magnitudes x8" in skipped and "the problem's tolerance covers rounding on the " \
        "generator's values, not on these" in skipped, skipped
    assert "magnitudes /8" in " ".join(figures["value_stress"])  # exact: kept


def _correctness_figures(result) -> dict:
    """A run that passed: its correctness rung's figures."""
    assert result.code == 0, result.stdout[-3000:] + result.stderr
    return next(r for r in result.json()["rungs"] if r["name"] == "correctness")["figures"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_rounded_apart_moves_each_value_a_few_ulps_up_or_down_piece_by_piece(dtype):
    """Every value moved by ROUNDING_ULPS units of float32 (of float64 for float64), up and
    down both, the same for one seed; worked out in pieces (a 5M-element input spans two),
    the output buffers and a transposed input's layout kept."""
    from krung.judge.problem.value_stress import ROUNDING_ULPS

    generator = torch.Generator().manual_seed(random.randrange(2**31))
    x = (torch.rand(5_000_003, generator=generator, dtype=torch.float64) + 1).to(dtype)
    buffer = torch.randn(3, 4, generator=generator)
    t = torch.randn(64, 48, generator=generator).t()
    seed = random.randrange(2**31)
    moved, kept, turned = rounded_apart((x, buffer, t), {1}, seed)
    assert kept is buffer and turned.stride() == t.stride()
    assert torch.equal(moved, rounded_apart((x, buffer, t), {1}, seed)[0])
    unit = torch.finfo(torch.float64 if dtype == torch.float64 else torch.float32).eps
    ratio = moved.double() / x.double() - 1
    if dtype == torch.bfloat16:  # rounds back to the same values
        assert torch.equal(moved, x)
    else:
        steps = ratio / (ROUNDING_ULPS * unit)
        assert float((steps.abs() - 1).abs().max()) < 0.3
        assert 0.45 < float((steps > 0).double().mean()) < 0.55
    assert not torch.equal(turned, t)
