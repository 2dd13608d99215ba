"""Calibration: the device's measured ceilings, kept in the store per device, driver and
library versions, and shown beside the datasheet.

`krung.host.calibrate` measures in a child process (`python -m
krung.judge.rungs.roofline.ceilings`), so the caller never imports torch and a broken CUDA
context cannot take it down. The roofline rung, in the judge, runs the same measurement in its
own process when the store has no calibration for its device. Either way a calibration is
measured once per key and then read back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from krung.judge.device import datasheet_for
from krung.judge.rungs.roofline.model import Ceilings

# Bump when the measurement changes: calibrations taken the old way are then measured again.
METHOD = 3  # 2: matmul peaks are the faster of two sizes; 3: the pipes and shared memory
# What a calibration is kept under in the store (with its measurement method).
CALIBRATION_KEY = ("device_name", "driver", "torch", "cuda", "method")

# The ceilings, in the order they are printed: (name, what was measured, unit).
CEILINGS = (
    ("dram", "DRAM copy bandwidth (bytes read + written)", "B/s"),
    ("l2", "L2 bandwidth (a read kernel, or copies within the L2)", "B/s"),
    ("smem", "shared memory read bandwidth, LDS.128", "B/s"),
    ("fp32", "fp32 matmul, cuBLAS, TF32 off", "FLOP/s"),
    ("tf32", "tf32 matmul, cuBLAS", "FLOP/s"),
    ("fp16", "fp16 matmul, cuBLAS", "FLOP/s"),
    ("bf16", "bf16 matmul, cuBLAS", "FLOP/s"),
    ("fp8", "fp8 e4m3 matmul, torch._scaled_mm", "FLOP/s"),
    ("fma", "FP32 FMA pipe (FFMA, no tensor cores)", "FLOP/s"),
    ("hfma2", "FP16 pipe outside the tensor cores (HFMA2)", "FLOP/s"),
    ("mufu", "special function unit (MUFU.EX2: exp2, rsqrt, sin, ...)", "op/s"),
    ("int", "INT32 pipe (IMAD, 2 operations each)", "op/s"),
)
PIPE_NAMES = ("smem", "fma", "hfma2", "mufu", "int")


def key_of(env: dict[str, Any]) -> dict[str, Any]:
    """What a calibration is kept under: the device, its driver, torch and CUDA versions, and
    the measurement method. Figures from any other combination may differ."""
    key: dict[str, Any] = {name: str(env.get(name) or "") for name in CALIBRATION_KEY
                           if name != "method"}
    key["method"] = METHOD
    return key


def find(entries: list[dict[str, Any]], key: dict[str, Any]) -> dict[str, Any] | None:
    """The kept calibration with exactly this key, or None."""
    return next((e for e in entries if e.get("key") == key), None)


@dataclass
class Calibration:
    """One device's measured ceilings (`record`, see krung.judge.rungs.roofline.ceilings) and its key."""

    key: dict[str, Any]
    record: dict[str, Any]
    measured_at: str
    cached: bool = False  # read from the store rather than measured by this call

    @classmethod
    def from_entry(cls, entry: dict[str, Any], cached: bool) -> Calibration:
        return cls(entry["key"], entry["record"], entry["measured_at"], cached)

    def entry(self) -> dict[str, Any]:
        return {"key": self.key, "record": self.record, "measured_at": self.measured_at}

    def ceilings(self) -> Ceilings:
        return Ceilings.from_record(self.record)

    def beside_datasheet(self) -> list[dict[str, Any]]:
        """Each ceiling measured, its datasheet value where krung knows the GPU, and the
        ratio; a ceiling this GPU cannot measure says why."""
        return beside_datasheet(self.record, self.key["device_name"])

    def to_json(self) -> dict[str, Any]:
        return {**self.entry(), "cached": self.cached, "ceilings": self.beside_datasheet()}


def beside_datasheet(record: dict[str, Any], device_name: str) -> list[dict[str, Any]]:
    """Per ceiling: what was measured, the datasheet's figure, their ratio, and the figure
    the roofline uses (`used`): the measured one, or the datasheet's where a pipe could not
    be measured (`from` says which, `note` why)."""
    sheet = datasheet_for(device_name)
    flops = record.get("flops_per_s") or {}
    pipes = record.get("pipes_per_s") or {}
    pipes_from = record.get("pipes_from") or {}
    unsupported = record.get("unsupported") or {}
    rows = []
    for name, what, unit in CEILINGS:
        listed = None
        if name == "dram":
            used = record.get("dram_bytes_per_s")
            listed = sheet.dram_bytes_per_s if sheet else None
        elif name == "l2":
            used = record.get("l2_bytes_per_s")  # datasheets leave it out
        elif name in PIPE_NAMES:
            used = pipes.get(name)
            listed = sheet.pipes_per_s.get(name) if sheet else None
        else:
            used = flops.get(name)
            listed = sheet.flops_per_s.get(name) if sheet else None
        source = pipes_from.get(name, "measured") if used else None
        measured = used if source == "measured" else None
        row: dict[str, Any] = {
            "ceiling": name, "what": what, "unit": unit, "measured": measured,
            "datasheet": listed, "used": used, "from": source,
            "pct_of_datasheet": 100 * measured / listed if measured and listed else None,
        }
        if name in unsupported:
            row["note"] = unsupported[name]
        elif source and source != "measured":
            row["note"] = source
        rows.append(row)
    return rows
