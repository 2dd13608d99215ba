"""Record Nsight Compute figures of the built-in problems in the shape of
tests/data/ncu_limiter.json, with the limiter rules they fire: recorded ncu figures for the
limiter's tests, from a GPU.

    python benchmarks/ncu_fixtures.py [OUT.json]

Each built-in version climbs the default ladder and the profile (`--rungs +profile`) in a
store of its own; for the case the profile ran on, it prints the bench row, the profile's
figures, the problem's work and the roofline's limiter rules and text.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VERSIONS = [("vector_add", "triton_blocked.py"), ("softmax", "triton_rowwise.py"),
            ("rmsnorm", "triton_rowwise.py"), ("matmul", "triton_grouped_tiles.py")]


def record(store: Path, problem: str, version: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "krung", "run", problem,
         str(ROOT / "problems" / problem / "solutions" / version), "--rungs", "+profile",
         "--json"], capture_output=True, text=True, timeout=900,
        env=dict(os.environ, KRUNG_STORE=str(store), KRUNG_DEVICE="cuda"))
    run = json.loads(done.stdout)
    rungs = {r["name"]: r for r in run["rungs"]}
    profile = rungs["profile"]
    if profile["status"] != "ok":
        return {"what": f"{problem}/{version}", "profile": profile["status"],
                "error": profile.get("error") or profile.get("reason")}
    case = profile["figures"]["case"]
    bench = next(r for r in rungs["benchmark"]["figures"]["per_case"] if r["case"] == case)
    row = next(r for r in rungs["roofline"]["figures"]["per_case"] if r["case"] == case)
    keep = ("kernel", "duration_ns", "compute_pct", "memory_pct", "dram_pct",
            "dram_read_bytes", "dram_write_bytes", "achieved_occupancy_pct",
            "theoretical_occupancy_pct", "launches", "top_stalls")
    return {
        "what": f"{problem}/{version}, case {case}, on {run['device']}",
        "flops": row["flops"], "bytes_moved": row["bytes_moved"], "median_us": bench["median_us"],
        "bench": {k: bench[k] for k in ("kernels_per_call", "launch_bound", "host_median_us",
                                        "sm_mhz_timed", "sm_max_mhz") if k in bench},
        "profile": {"case": case, "per_kernel": [{k: kernel[k] for k in keep if k in kernel}
                                                 for kernel in profile["figures"]["per_kernel"]]},
        "compute_ceiling": row.get("compute_ceiling"), "ceiling_chosen_by":
            row.get("ceiling_chosen_by"), "pct": row.get("pct"),
        "rules": row.get("limiter_rules"), "limiter": row.get("limiter"),
    }


def main() -> None:
    found = {}
    with tempfile.TemporaryDirectory() as folder:
        store = Path(folder) / "krung.db"
        for problem, version in VERSIONS:
            found[f"{problem}_{version.removesuffix('.py')}"] = record(store, problem, version)
            print(json.dumps(found[f"{problem}_{version.removesuffix('.py')}"], indent=1),
                  flush=True)
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(json.dumps({"cases": found}, indent=1) + "\n")


if __name__ == "__main__":
    main()
