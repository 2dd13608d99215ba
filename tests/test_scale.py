"""Executors: many evaluations through the local pool, a packed job, a real sshd on loopback,
and a local Ray instance. Every run lands in the caller's store, crashes included."""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import krung
from krung.host.scale import Job
from krung.host.scale.job import pack, receive, unpack
from krung.host.store import Store
from krung.protocol.results import Run
from krung.protocol.settings import Settings
from tests.conftest import GOOD, TAIL_BUG

SEGFAULT = "import ctypes\ndef kernel(x):\n    return ctypes.string_at(0)\n"
# Says which GPU slot it was given (its stdout goes to the run's worker.log).
SAYS_SLOT = """
import os
print("slot", os.environ.get("CUDA_VISIBLE_DEVICES"), flush=True)
def kernel(x):
    return x * 2 + 1
"""
CORRECTNESS = "static,compile,run,correctness"


@pytest.fixture
def settings(store) -> Settings:
    return Settings.from_env().replace(store=store, device="cpu")  # the tests' judge forks


def test_local_pool_records_every_version_crashes_included(scale_problem, version, settings):
    versions = [version("good", GOOD), version("tail", TAIL_BUG), version("segv", SEGFAULT),
                version("good2", GOOD)]
    executor = krung.make_executor("local", workers=2)
    assert executor.slots == 2
    seen = []
    outcomes = krung.run_batch(str(scale_problem), versions, executor, settings,
                               rungs=CORRECTNESS, on_outcome=lambda o, i, n: seen.append((i, n)))
    assert seen == [(1, 4), (2, 4), (3, 4), (4, 4)]
    by_name = {Path(o.job.solution).stem: o.run for o in outcomes}
    assert by_name["good"].ok and by_name["good2"].ok
    assert by_name["tail"].rung("correctness").error_type == "Mismatch"
    assert by_name["segv"].rung("compile").error_type == "WorkerCrashed"
    stored = Store(settings.store).history("scale")
    assert sorted(r.run_id for r in stored) == sorted(r.run_id for r in by_name.values())


def test_evaluations_at_once_share_the_cores_out(scale_problem, version, settings,
                                                 monkeypatch):
    """Two slots without GPUs: each evaluation's worker (and judge) gets half the cores for
    torch's threads, at least one; one slot, or an OMP_NUM_THREADS the caller set, as is."""
    from krung.host.scale.local import cpu_share

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    cores = len(os.sched_getaffinity(0))
    assert cpu_share(1) is None and cpu_share(2) == max(1, cores // 2)
    assert cpu_share(3 * cores) == 1
    says = version("threads", "import torch\nprint('threads', torch.get_num_threads(), "
                              "flush=True)\ndef kernel(x):\n    return x * 2 + 1\n")
    executor = krung.make_executor("local", workers=2)
    outcomes = list(executor.map([Job(str(scale_problem), str(says), rungs="static,compile")]
                                 * 2, settings))
    store = Store(settings.store)
    for outcome in outcomes:
        log = (store.artifacts_dir(outcome.run.run_id) / "worker.log").read_text()
        assert log.split("threads", 1)[1].split()[0] == str(max(1, cores // 2)), log
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert cpu_share(2) is None


def test_gpu_slots_pin_each_evaluation(scale_problem, version, settings):
    versions = [version(f"slot{i}", SAYS_SLOT) for i in range(4)]
    executor = krung.make_executor("local", gpus=["0", "1"])
    outcomes = list(executor.map([Job(str(scale_problem), str(v), rungs="static,compile")
                                  for v in versions], settings))
    assert {slot_said(settings, outcome) for outcome in outcomes} == {"0", "1"}


def slot_said(settings: Settings, outcome) -> str:
    """The GPU slot a SAYS_SLOT version's worker printed (its stdout is the run's worker.log)."""
    log = (Store(settings.store).artifacts_dir(outcome.run.run_id) / "worker.log").read_text()
    return log.split("slot", 1)[1].split()[0]


def test_a_crash_beside_another_job_on_its_gpu_is_run_again_alone(scale_problem, version,
                                                                   settings):
    """Two slots on one GPU: a worker that died (as a failed cuMemAlloc or the OOM killer
    leave it) may have died of its neighbour's memory, so it runs again, alone; a failure on
    the merits (a mismatch) is not repeated."""
    versions = [version("segv", SEGFAULT), version("tail", TAIL_BUG), version("good", GOOD)]
    executor = krung.make_executor("local", gpus=["0"], per_gpu=2)
    outcomes = list(executor.map([Job(str(scale_problem), str(v), rungs=CORRECTNESS)
                                  for v in versions], settings))
    assert sorted(Path(o.job.solution).stem for o in outcomes) == ["good", "segv", "tail"]
    stems = [Path(r.solution).stem for r in Store(settings.store).history("scale")]
    assert sorted(stems) == ["good", "segv", "segv", "tail"]


def test_slots_sharing_gpus_whose_memory_is_told_take_the_gpu_with_room(
        scale_problem, version, settings, tmp_path, monkeypatch):
    """nvidia-smi (a stand-in script: this machine has no GPU) tells two GPUs, the second
    three to five times the first: three slots on each, and jobs whose need is not known
    (a third of a GPU each) take the GPU with the most memory free, all three the second
    (a queue of slots would have given the first GPU's); a crash beside them runs again
    alone."""
    small = random.uniform(10_000, 40_000)
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(f"#!/bin/sh\nprintf '0, {small:.0f}\\n1, {small * random.uniform(3.5, 5):.0f}"
                   "\\n'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}{os.pathsep}{os.environ['PATH']}")
    versions = [version(f"slot{i}", SAYS_SLOT) for i in range(2)] + [version("segv", SEGFAULT)]
    executor = krung.make_executor("local", gpus=["0", "1"], per_gpu=3)
    outcomes = list(executor.map([Job(str(scale_problem), str(v), rungs="static,compile")
                                  for v in versions], settings))
    assert {slot_said(settings, outcome) for outcome in outcomes
            if "slot" in Path(outcome.job.solution).stem} == {"1"}
    stems = [Path(r.solution).stem for r in Store(settings.store).history("scale")]
    assert sorted(stems) == ["segv", "segv", "slot0", "slot1"]


def test_a_gpu_named_twice_is_one_slot(scale_problem, version, settings):
    executor = krung.make_executor("local", gpus=["0", "0"])
    assert executor.gpus == ["0"] and executor.slots == 1  # not two benchmarks on GPU 0
    versions = [version(f"twice{i}", SAYS_SLOT) for i in range(2)]
    outcomes = list(executor.map([Job(str(scale_problem), str(v), rungs="static,compile")
                                  for v in versions], settings))
    assert [o.run is not None and o.run.ok for o in outcomes] == [True, True]


@pytest.mark.gpu
def test_workers_without_gpus_benchmark_in_turn(scale_problem, version, store):
    """On a machine with a GPU, --workers 3 without --gpus runs three evaluations at once on
    GPU 0; their benchmarks take the GPU in turn (krung.judge.gpu_lock), and all pass."""
    settings = Settings(store=store, device="cuda")
    good = version("good", GOOD)
    executor = krung.make_executor("local", workers=3)
    outcomes = list(executor.map([Job(str(scale_problem), str(good),
                                      rungs=CORRECTNESS + ",benchmark")] * 3, settings))
    assert all(o.run is not None and o.run.ok for o in outcomes)
    assert all(o.run.rung("benchmark").figures["geomean_us"] > 0 for o in outcomes)


def test_a_missing_version_is_an_outcome_not_an_abort(scale_problem, version, settings,
                                                      tmp_path):
    jobs = [Job(str(scale_problem), str(tmp_path / "nope.py"), rungs="static"),
            Job(str(scale_problem), str(version("good", GOOD)), rungs="static")]
    outcomes = list(krung.make_executor("local").map(jobs, settings))
    missing = next(o for o in outcomes if o.run is None)
    assert "no version file" in missing.error and missing.hint
    assert sum(o.run is not None and o.run.ok for o in outcomes) == 1


def test_a_packed_job_runs_elsewhere_with_krung_shipped_and_comes_back(
        scale_problem, version, settings, tmp_path):
    job = Job(str(scale_problem), str(version("good", GOOD)), rungs=CORRECTNESS, seed=11)
    remote = tmp_path / "elsewhere"
    unpack(pack(job, settings), remote)
    assert (remote / "src" / "krung" / "worker" / "serve.py").is_file()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(remote / "src")  # only the shipped krung
    done = subprocess.run([sys.executable, "-m", "krung.host.scale.job", str(remote)], env=env,
                          capture_output=True, text=True, timeout=300, cwd=remote)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    store = Store(settings.store)
    run = receive(result, job, store, where="test")
    assert run.ok and run.seed == 11
    back = store.get(run.run_id)
    assert back.solution == str(Path(job.solution).resolve())
    assert back.env["evaluated_on"] == "test"
    assert (store.artifacts_dir(run.run_id) / "worker.log").is_file()
    # The same run imported again gets a fresh id instead of overwriting the first.
    again = store.import_run(Run.from_json(result["run"]))
    assert again.run_id != run.run_id


@pytest.fixture
def sshd(tmp_path):
    """A real sshd on a free loopback port, with a key only this test knows."""
    server = shutil.which("sshd") or "/usr/sbin/sshd"
    if not Path(server).exists():
        pytest.skip("no sshd here (Debian package openssh-server)")
    keys = tmp_path / "ssh"
    keys.mkdir()
    for name in ("host", "user"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / name)],
                       check=True)
    shutil.copy(keys / "user.pub", keys / "authorized_keys")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = keys / "sshd_config"
    config.write_text(f"Port {port}\nListenAddress 127.0.0.1\nHostKey {keys / 'host'}\n"
                      f"AuthorizedKeysFile {keys / 'authorized_keys'}\nPidFile {keys / 'pid'}\n"
                      "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                      "UsePAM no\nStrictModes no\nPermitRootLogin yes\n"
                      "AcceptEnv PYTHONPATH\n")
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation directory
    log = keys / "sshd.log"
    with open(log, "wb") as sink:
        process = subprocess.Popen([server, "-D", "-e", "-f", str(config)], stderr=sink)
    options = ["-i", str(keys / "user"), "-p", str(port), "-o", "StrictHostKeyChecking=no",
               "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR"]
    target = f"{os.environ.get('USER', 'root')}@127.0.0.1"
    for _ in range(50):
        if subprocess.run(["ssh", *options, target, "true"], capture_output=True).returncode == 0:
            break
        time.sleep(0.2)
    else:
        process.kill()
        pytest.fail(f"sshd did not come up: {log.read_text()[-1000:]}")
    yield target, options
    process.kill()
    process.wait()


def test_ssh_executor_evaluates_on_the_remote_host(sshd, scale_problem, version, settings):
    target, options = sshd
    executor = krung.make_executor("ssh", remote=target, ssh_options=options,
                                   python=sys.executable, workers=2)
    versions = [version("good", GOOD), version("tail", TAIL_BUG)]
    outcomes = krung.run_batch(str(scale_problem), versions, executor, settings,
                               rungs=CORRECTNESS)
    runs = {Path(o.job.solution).stem: o.run for o in outcomes}
    assert runs["good"].ok and not runs["tail"].ok
    for run in runs.values():
        stored = Store(settings.store).get(run.run_id)
        assert stored.env["evaluated_on"] == f"ssh:{target}"
        assert stored.source.strip() in (GOOD.strip(), TAIL_BUG.strip())


def test_ssh_executor_explains_an_unreachable_host(scale_problem, version, settings):
    executor = krung.make_executor("ssh", remote="nobody@127.0.0.1",
                                   ssh_options=["-p", "1", "-o", "ConnectTimeout=5"])
    outcome = next(executor.map([Job(str(scale_problem), str(version("good", GOOD)))],
                                settings))
    assert outcome.run is None
    assert outcome.error.startswith("RemoteFailed: ssh nobody@127.0.0.1 exited with 255")
    assert "without a password" in outcome.hint


# Local Ray clusters one at a time (`make test` runs tests in parallel, --dist loadgroup), in
# `make test-all`: a local cluster's start (its dashboard and workers) is 10-15 s of CPU each.
@pytest.mark.slow
@pytest.mark.xdist_group("ray")
def test_ray_executor_on_a_local_instance(scale_problem, version, settings):
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        executor = krung.make_executor("ray")
        versions = [version("good", GOOD), version("segv", SEGFAULT)]
        outcomes = krung.run_batch(str(scale_problem), versions, executor, settings,
                                   rungs=CORRECTNESS)
    finally:
        ray.shutdown()
    runs = {Path(o.job.solution).stem: o.run for o in outcomes}
    assert runs["good"].ok
    assert runs["segv"].rung("compile").error_type == "WorkerCrashed"
    assert Store(settings.store).get(runs["good"].run_id).env["evaluated_on"] == "ray:local"


@pytest.mark.slow
@pytest.mark.xdist_group("ray")
def test_ray_reserves_a_gpu_for_an_auto_device_job_on_a_cluster_with_gpus(scale_problem,
                                                                       version, store):
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False)
    try:  # a GPU resource Ray counts (none need exist): a task holding it is given GPU 0
        outcomes = krung.run_batch(str(scale_problem), [version("says", SAYS_SLOT)],
                                   krung.make_executor("ray"), Settings(store=store),
                                   rungs="static,compile")
    finally:
        ray.shutdown()
    (outcome,) = outcomes
    assert outcome.run is not None, outcome.error
    log = (Store(store).artifacts_dir(outcome.run.run_id) / "worker.log").read_text()
    assert "slot 0" in log  # the task asked for one GPU and Ray gave it GPU 0


def test_batch_command_prints_progress_and_the_table(krung, scale_problem, version):
    versions = [version("good", GOOD), version("tail", TAIL_BUG)]
    result = krung("batch", scale_problem, *versions, "--rungs", CORRECTNESS, "--workers", "2")
    said = result.stdout + result.stderr
    assert result.code == 1, said  # one of the two fails
    lines = result.stdout.splitlines()
    assert lines[0] == f"batch: 2 version(s) of {scale_problem}, local executor, 2 at once"
    assert {line.split()[0] for line in lines[1:3]} == {"[1/2]", "[2/2]"}, said
    assert "1/2 passed" in result.stdout, said
    data = krung("batch", scale_problem, versions[0], "--rungs", "static", "--json").json()
    assert data["passed"] == 1 and data["outcomes"][0]["run"]["ok"]


@pytest.mark.gpu
def test_two_correctness_workers_share_one_gpu(scale_problem, version, store):
    """The queue with one GPU: two evaluations at once on GPU 0 (correctness only), each
    pinned to it and recorded with its UUID; a crash among them is a failed run."""
    settings = Settings(store=store, device="cuda")
    versions = [version(f"good{i}", GOOD) for i in range(4)] + [version("segv", SEGFAULT)]
    executor = krung.make_executor("local", gpus=["0"], per_gpu=2)
    assert executor.slots == 2
    start = time.perf_counter()
    outcomes = krung.run_batch(str(scale_problem), versions, executor, settings,
                               rungs=CORRECTNESS)
    print(f"5 versions, 2 slots on one GPU: {time.perf_counter() - start:.1f} s")
    runs = {Path(o.job.solution).stem: o.run for o in outcomes}
    assert all(runs[f"good{i}"].ok for i in range(4))
    assert runs["segv"].rung("compile").error_type == "WorkerCrashed"
    assert {r.env.get("visible_devices") for r in runs.values()} == {"0"}
    assert len({r.env.get("device_uuid") for r in runs.values()}) == 1


def test_a_packed_gpumode_job_takes_the_files_above_it_and_the_helpers_beside_it(tmp_path,
                                                                                settings):
    from tests.conftest import GPUMODE

    versions = tmp_path / "versions"
    versions.mkdir()
    (versions / "helper.py").write_text("def add(a, b, c):\n    return c.copy_(a + b)\n")
    (versions / "v.py").write_text("from helper import add\n\n\ndef custom_kernel(data):\n"
                                   "    return add(*data)\n")
    job = Job(str(GPUMODE / "vectoradd_py"), str(versions / "v.py"), rungs=CORRECTNESS)
    remote = tmp_path / "elsewhere"
    unpack(pack(job, settings), remote)
    assert (remote / "problem" / "utils.py").is_file()  # task.yml's ../utils.py
    assert (remote / "version" / "helper.py").is_file()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(remote / "src")
    done = subprocess.run([sys.executable, "-m", "krung.host.scale.job", str(remote)], env=env,
                          capture_output=True, text=True, timeout=300, cwd=remote)
    assert done.returncode == 0, done.stderr
    run = receive(json.loads(done.stdout.strip().splitlines()[-1]), job, Store(settings.store),
                  where="test")
    assert run.ok, [r.error for r in run.rungs if r.error]


def test_a_broken_problem_over_ssh_reads_as_it_does_here(sshd, tmp_path, version, settings):
    from tests.conftest import GPUMODE

    shutil.copytree(GPUMODE, tmp_path / "gm")
    task = tmp_path / "gm" / "rowsoftmax_py" / "task.yml"
    task.write_text(task.read_text().replace("benchmarks:", "old_benchmarks:"))
    job = Job(str(task.parent), str(version("v", "def custom_kernel(data):\n    return 1\n")),
              rungs=CORRECTNESS)
    target, options = sshd
    executor = krung.make_executor("ssh", remote=target, ssh_options=options,
                                   python=sys.executable)
    (remote,) = executor.map([job], settings)
    (here,) = krung.make_executor("local").map([job], settings)
    assert remote.run is None and here.run is None
    assert remote.error.startswith("ProblemError: problem ")
    assert "task.yml has no `benchmarks` list" in remote.error
    assert (remote.error, remote.hint) == (here.error, here.hint)


def test_packed_runs_bring_back_their_folders_parent_and_take_the_ceilings(
        scale_problem, version, settings, tmp_path):
    import base64

    from krung.host.scale.job import run_packed

    ceilings = {"key": {"device_name": "NVIDIA H200", "driver": "570.1", "torch": "2.13.0",
                        "cuda": "13.0", "method": "v1"},
                "record": {"dram_bytes_per_s": 4.3e12}, "measured_at": "2026-12-01T10:00:00"}
    Store(settings.store).save_calibration(ceilings)
    path = str(version("tri", TRITON))
    # The second run only has to find the first as its parent: no artifacts rung (seconds of
    # Triton compiling for sm_90a) there.
    jobs = [Job(str(scale_problem), path, rungs=f"{CORRECTNESS},artifacts"),
            Job(str(scale_problem), path, rungs=CORRECTNESS)]
    ids = []
    for turn, job in enumerate(jobs):
        remote = tmp_path / f"elsewhere{turn}"
        unpack(pack(job, settings), remote)
        result = run_packed(remote)
        assert Store(remote / "store" / "krung.db").calibrations() == [ceilings]
        assert result["calibrations"] == []  # nothing new was measured there
        sent = [name for name in result["files"] if name.startswith("artifacts/")]
        assert bool(sent) == (turn == 0), "the artifacts rung's folder (PTX for sm_90a) came back"
        run = receive(result, job, Store(settings.store), where="test")
        folder = Store(settings.store).artifacts_dir(run.run_id)
        assert all((folder / name).read_bytes() == base64.b64decode(result["files"][name])
                   for name in sent)
        if turn == 0:
            assert run.rung("artifacts").ok, run.rung("artifacts").error
        assert (folder / "worker.log").is_file()
        ids.append(run.run_id)
    assert Store(settings.store).get(ids[1]).parent == ids[0]  # the previous run, found here
    for name in ("../escape.txt", "/tmp/escape.txt"):
        result["files"] = {name: base64.b64encode(b"x").decode()}
        with pytest.raises(krung.UsageError, match="outside its artifact folder"):
            receive(result, job, Store(settings.store), where="test")


TRITON = """
import torch
import triton
import triton.language as tl


@triton.jit
def twice_plus_one(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2 + 1, mask=mask)


def kernel(x):
    out = torch.empty_like(x)
    twice_plus_one[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
    return out
"""
