"""Nsight Compute over the version's kernels, and its report as a compact summary per kernel.

The profile rung starts a fresh worker under `ncu`, which profiles only the kernels launched
inside the NVTX range the worker pushes around one call of the version (`--nvtx-include`), as
many launches as one call makes (at most LAUNCH_COUNT), with `--clock-control none` by default
(the GPU's own clocks, as the benchmark saw them; KRUNG_PROFILE_CLOCK_CONTROL=base locks
them). The sections are the `fast` set unless KRUNG_PROFILE_SET=full asks for more: each
section adds replay passes, and every pass restores the memory the kernel writes. The report is read with
Nsight Compute's own Python module, `ncu_report` (in `extras/python` next to the ncu binary),
in a child process (`python -m krung.judge.rungs.profile.ncu REPORT`) so its native library never loads into
the judge; where an install has no `extras/python`, from ncu's own CSV export of the report.
"""

from __future__ import annotations

import csv
import glob
import io
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

NVTX_RANGE = "krung_version"
LAUNCH_COUNT = 32
# The sections per set. `fast` collects what krung reads: duration and the compute, memory
# and DRAM throughputs (SpeedOfLight; the roofline's limiter reads these), achieved and
# theoretical occupancy (Occupancy), registers, block, grid and shared memory (LaunchStats)
# and the stall reasons (WarpStateStats), with the rule findings of each. `full` adds
# MemoryWorkloadAnalysis, the costliest in replay passes, for its own rule findings and for
# reading the report in Nsight Compute.
SECTIONS = {
    "fast": ("SpeedOfLight", "Occupancy", "LaunchStats", "WarpStateStats"),
    "full": ("SpeedOfLight", "MemoryWorkloadAnalysis", "Occupancy", "LaunchStats",
             "WarpStateStats"),
}
# Summary figures no section above collects (DRAM traffic is in no section's header).
EXTRA_METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum",
                 "sm__cycles_elapsed.avg.per_second")
PERMISSION_ERROR = "ERR_NVGPUCTRPERM"
PERMISSION_HINT = (
    "the driver lets only administrators read GPU performance counters: run krung as root "
    "(or with sudo), or allow everyone with `options nvidia NVreg_RestrictProfilingToAdminUsers"
    "=0` in a file under /etc/modprobe.d/ and a reboot; in a container, start it with "
    "--cap-add=SYS_ADMIN")

# Summary figure -> ncu metric.
METRICS = {
    "duration_ns": "gpu__time_duration.sum",
    "compute_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "memory_pct": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram_pct": "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram_read_bytes": "dram__bytes_read.sum",
    "dram_write_bytes": "dram__bytes_write.sum",
    "achieved_occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "theoretical_occupancy_pct": "sm__maximum_warps_per_active_cycle_pct",
    "registers": "launch__registers_per_thread",
    "block_size": "launch__block_size",
    "grid_size": "launch__grid_size",
    "static_smem_bytes": "launch__shared_mem_per_block_static",
    "dynamic_smem_bytes": "launch__shared_mem_per_block_dynamic",
    "sm_mhz": "sm__cycles_elapsed.avg.per_second",
}
_STALL = re.compile(r"^smsp__average_warps?_issue_stalled_(\w+?)_per_issue_active\.ratio$")
TOP_STALLS = 3


def find_ncu() -> str | None:
    """ncu on PATH, in the CUDA toolkit, or in a standalone Nsight Compute install."""
    found = shutil.which("ncu")
    if found:
        return found
    for pattern in ("/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu",
                    "/usr/local/cuda/nsight-compute*/ncu"):
        matches = sorted(glob.glob(pattern))
        if matches:
            return matches[-1]
    return None


# Where Nsight Compute installs put `extras/python`, when ncu on PATH is a wrapper script
# (the CUDA toolkit's bin/ncu is one) rather than a link to the real binary.
REPORT_MODULE_GLOBS = ("/usr/local/cuda*/nsight-compute*/extras/python",
                       "/opt/nvidia/nsight-compute/*/extras/python",
                       "/usr/lib/nsight-compute*/extras/python")


def report_module_dir(ncu: str) -> Path | None:
    """Where `ncu_report.py` is: `extras/python` beside the real ncu binary, or in one of
    the usual install folders (the newest first)."""
    real = Path(os.path.realpath(ncu)).parent
    near = [folder / "extras" / "python" for folder in (real, *real.parents[:2])]
    usual = [Path(p) for pattern in REPORT_MODULE_GLOBS
             for p in sorted(glob.glob(pattern), reverse=True)]
    return next((c for c in (*near, *usual) if (c / "ncu_report.py").is_file()), None)


def command(ncu: str, report: Path, *, profile_set: str = "fast", clock_control: str = "none",
            source_counters: bool = False, launch_count: int = LAUNCH_COUNT) -> list[str]:
    """The ncu prefix for the worker: only the version's kernels, a bounded number."""
    sections = [*SECTIONS[profile_set], *(("SourceCounters",) if source_counters else ())]
    args = [ncu, "--target-processes", "all", "--nvtx", "--nvtx-include", f"{NVTX_RANGE}/",
            *kernel_filter(launch_count), "--clock-control", clock_control,
            "--export", str(report), "--force-overwrite", "--metrics", ",".join(EXTRA_METRICS)]
    for section in sections:
        args += ["--section", section]
    return args


def kernel_filter(launches_per_call: float | None) -> list[str]:
    """Which launches ncu profiles: as many as one call of the version makes (the benchmark
    counted them), counted inside the NVTX range only, so the warm-up call before the range
    costs nothing; LAUNCH_COUNT at most, and where the count is unknown. A kernel launched
    more than once in the call is summarised once (`first_per_kernel`).

    Not `--kernel-id :::1` (the first invocation of every kernel name): its invocation
    number may count the warm-up call's launches too (the documentation does not say, and
    others combining it with an NVTX filter found it profiled nothing), and then it would
    never select a launch inside the range. benchmarks/profile_rung.py shows what the
    installed ncu does."""
    if not launches_per_call or launches_per_call <= 0:
        count = LAUNCH_COUNT
    else:
        count = min(LAUNCH_COUNT, math.ceil(launches_per_call))
    return ["--launch-count", str(count)]


def first_per_kernel(kernels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The first profiled launch of each kernel name, in launch order, with how many launches
    of it were profiled (`launches`)."""
    first: dict[str, dict[str, Any]] = {}
    for kernel in kernels:
        name = str(kernel.get("kernel"))
        if name in first:
            first[name]["launches"] += 1
        else:
            first[name] = {**kernel, "launches": 1}
    return list(first.values())


def read_report(ncu: str, report: Path, timeout: float = 300) -> list[dict[str, Any]]:
    """The per-kernel summaries of a report, read by ncu_report in a child process."""
    module_dir = report_module_dir(ncu)
    if module_dir is None:  # an install without extras/python: ncu's own CSV export
        return read_report_csv(ncu, report, timeout)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(module_dir), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    done = subprocess.run([sys.executable, "-m", "krung.judge.rungs.profile.ncu", str(report)],
                          capture_output=True, text=True, timeout=timeout, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"reading {report.name} with ncu_report failed: "
                           f"{done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout)


def read_report_csv(ncu: str, report: Path, timeout: float = 300) -> list[dict[str, Any]]:
    """The same summaries from `ncu --import REPORT --csv --page raw` (no rule findings: only
    ncu_report gives those)."""
    done = subprocess.run([ncu, "--import", str(report), "--csv", "--page", "raw",
                           "--print-units", "base"],
                          capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"ncu --import {report.name} --csv failed: "
                           f"{(done.stderr or done.stdout).strip()[-2000:]}")
    return summarise_csv(done.stdout)


def summarise_csv(text: str) -> list[dict[str, Any]]:
    """Per-kernel summaries from ncu's raw-page CSV: a header, a units row, a row a kernel."""
    lines = [line for line in text.splitlines() if line.startswith('"')]
    rows = [r for r in csv.DictReader(io.StringIO("\n".join(lines)))
            if r.get("ID", "").strip().isdigit()]  # not the units row
    return [summarise_row(row) for row in rows]


def summarise_row(row: dict[str, str]) -> dict[str, Any]:
    """One kernel's summary from its CSV row (metric name -> printed value)."""
    values = {name: _csv_number(text) for name, text in row.items() if name}
    found: dict[str, Any] = {"kernel": row.get("Kernel Name", "?")}
    for key, metric in METRICS.items():
        if metric in values:
            found[key] = values[metric]
    return _finish_summary(found, values, findings=[])


def _csv_number(text: str | None) -> Any:
    try:
        value = float((text or "").replace(",", ""))
    except ValueError:
        return None
    return int(value) if value.is_integer() and abs(value) < 2**53 else value


def summarise_report(path: str) -> list[dict[str, Any]]:
    """Runs in the child process, with ncu_report importable."""
    import ncu_report

    context = ncu_report.load_report(path)
    kernels = []
    for r in range(context.num_ranges()):
        rng = context.range_by_idx(r)
        for a in range(rng.num_actions()):
            kernels.append(summarise_action(rng.action_by_idx(a)))
    return kernels


def summarise_action(action: Any) -> dict[str, Any]:
    names = set(action.metric_names())
    found: dict[str, Any] = {"kernel": action.name()}
    for key, metric in METRICS.items():
        if metric in names:
            found[key] = _value(action.metric_by_name(metric))
    stall_values = {name: _value(action.metric_by_name(name)) for name in names
                    if _STALL.match(name)}
    return _finish_summary(found, stall_values, _findings(action))


def _finish_summary(found: dict[str, Any], metrics: dict[str, Any],
                    findings: list[str]) -> dict[str, Any]:
    """The clock in MHz, the top stall reasons among `metrics`, and the findings."""
    if found.get("sm_mhz") is not None:
        found["sm_mhz"] = round(found["sm_mhz"] / 1e6)
    stalls = []
    for name, value in metrics.items():
        match = _STALL.match(name)
        if match and match.group(1) != "selected" and "not_issued" not in name and value:
            stalls.append((value, match.group(1)))
    stalls.sort(reverse=True)
    found["top_stalls"] = [{"reason": reason, "cycles_per_issue": round(value, 3)}
                           for value, reason in stalls[:TOP_STALLS]]
    found["findings"] = findings
    return found


def _value(metric: Any) -> Any:
    if metric is None:
        return None
    value = metric.value() if hasattr(metric, "value") else metric.as_double()
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value


def _findings(action: Any) -> list[str]:
    """ncu's own rule findings, one line each, the largest estimated speedup first:
    `[RuleId] title: message (est. speedup 12.3%)`. The dicts are
    {rule_identifier, name, section_identifier, rule_message: {title, message, type},
    speedup_estimation: {type, speedup}}; some ncu releases give the inner dicts as text."""
    try:
        results = list(action.rule_results_as_dicts())
    except Exception:  # an ncu_report without rule results
        return []
    found = []
    for result in results:
        result = _literal(result)
        message = _literal(result.get("rule_message")) or {}
        text = " ".join(str(message.get("message") or "").split())
        kind = str(message.get("type") or "").upper()
        if not text or kind.endswith("OK"):
            continue
        speedup = (_literal(result.get("speedup_estimation")) or {}).get("speedup")
        title = message.get("title") or result.get("name") or ""
        line = f"[{result.get('rule_identifier') or result.get('name')}] {title}: {text}"
        if isinstance(speedup, (int, float)) and speedup > 0:
            line += f" (est. speedup {speedup:.1f}%)"
        found.append((speedup if isinstance(speedup, (int, float)) else -1, line[:500]))
    found.sort(key=lambda item: -item[0])
    return [line for _, line in found]


def _literal(value: Any) -> Any:
    if isinstance(value, str):
        import ast

        try:
            return ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return {}
    return value if isinstance(value, dict) else {}


def main(argv: list[str] | None = None) -> None:
    args = argv if argv is not None else sys.argv[1:]
    sys.stdout.write(json.dumps(summarise_report(args[0]), default=str))


if __name__ == "__main__":
    main()
