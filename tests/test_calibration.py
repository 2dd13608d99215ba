"""`krung calibrate` where there is no GPU: it says why it cannot measure, and it lists the
calibrations kept in the store beside the datasheet. (The measurement itself is in
test_gpu_roofline.py.)"""

from __future__ import annotations

import pytest

from krung import calibrations
from krung.host.store import Store
from tests.conftest import cuda_available
from tests.recorded import H200_RECORD

KEY = {"device_name": "NVIDIA H200", "driver": "570.133.20", "torch": "2.13.0+cu128",
       "cuda": "12.8", "method": 1}


@pytest.mark.skipif(cuda_available(), reason="on a GPU, calibrate measures")
def test_calibrate_without_a_gpu_says_so(krung):
    result = krung("calibrate")
    assert result.code == 2
    assert result.stderr.splitlines() == [
        "UsageError: calibration needs a CUDA GPU, and torch sees none",
        "hint: run `krung calibrate` on the machine whose GPU you evaluate on (with a CUDA "
        "build of torch); without a GPU there is no roofline"]


def test_kept_calibrations_are_listed_beside_the_datasheet(krung, store):
    empty = krung("calibrate", "--list")
    assert empty.code == 0
    assert empty.stdout.strip() == "no calibrations in this store: run `krung calibrate` on a GPU"
    db = Store(store)
    record = {**H200_RECORD, "unsupported": {"fp8": "torch._scaled_mm failed here: x"},
              "clock": {"warning": "the GPU was throttling (sw_power_cap) after the "
                                   "measurement"}}
    record["flops_per_s"] = {k: v for k, v in record["flops_per_s"].items() if k != "fp8"}
    db.save_calibration({"key": KEY, "record": record,
                         "measured_at": "2026-12-01T10:00:00+00:00"})
    db.close()
    shown = krung("calibrate", "--list")
    assert shown.code == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == ("NVIDIA H200  driver 570.133.20  torch 2.13.0+cu128  CUDA 12.8  "
                        "(kept in the store, 2026-12-01T10:00:00+00:00)")
    rows = {line.split()[0]: line.split() for line in lines[2:] if line.strip()}
    assert rows["dram"][1:6] == ["4.3", "TB/s", "4.8", "TB/s", "90%"]
    assert rows["l2"][1:5] == ["9.6", "TB/s", "-", "-"]
    assert rows["bf16"][1:6] == ["790", "TFLOP/s", "989", "TFLOP/s", "80%"]
    assert rows["fp8"][1:6] == ["-", "1.98e+03", "TFLOP/s", "-", "torch._scaled_mm"]
    assert lines[-1].startswith("warning: the GPU was throttling (sw_power_cap)")

    data = krung("calibrate", "--list", "--json").json()
    assert len(data) == 1 and data[0]["key"] == KEY and data[0]["cached"] is True
    ceilings = {row["ceiling"]: row for row in data[0]["ceilings"]}
    assert ceilings["tf32"]["measured"] == 378e12 and ceilings["tf32"]["datasheet"] == 495e12
    kept = calibrations(store=store)
    assert kept[0].ceilings().flops_per_s["bf16"] == 790e12
    assert kept[0].ceilings().l2_size_bytes == 50 * 2**20


L2_KERNEL_CHECK = """
import torch
from krung.judge.rungs.roofline.ceilings import l2_read_kernel
from krung.worker.interpreter import fix_scalar_index

fix_scalar_index()  # as the worker does: `range(steps)` under numpy 2.4 and Triton 3.6

blocks, block, programs, steps = 5, 8, 3, 7
source = torch.randn(blocks * block, generator=torch.Generator().manual_seed({seed}))
out = torch.empty(programs * block)
l2_read_kernel()[(programs,)](source, out, blocks, steps, BLOCK=block, num_warps=8)
rows = source.view(blocks, block)
want = torch.stack([sum(rows[(p + s) % blocks] for s in range(steps))
                    for p in range(programs)]).flatten()
print(torch.allclose(out, want, rtol=1e-5, atol=1e-5), float((out - want).abs().max()))
"""


def test_the_l2_kernel_reads_the_blocks_it_counts(tmp_path):
    """The L2 measurement counts programs x steps blocks read: under Triton's interpreter,
    each program's sum is exactly that of the blocks it should have read."""
    import os
    import random
    import subprocess
    import sys

    code = L2_KERNEL_CHECK.format(seed=random.randrange(1 << 30))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, TRITON_INTERPRET="1"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[0] == "True", done.stdout
