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
METHOD = 2  # 2: matmul peaks are the faster of two sizes
# What a calibration is kept under in the store (with its measurement method).
CALIBRATION_KEY = ("device_name", "driver", "torch", "cuda", "method")

# The ceilings, in the order they are printed: (name, what was measured, kind).
CEILINGS = (
    ("dram", "DRAM copy bandwidth (bytes read + written)", "bytes"),
    ("l2", "L2 copy bandwidth (bytes read + written)", "bytes"),
    ("fp32", "fp32 matmul, cuBLAS, TF32 off", "flops"),
    ("tf32", "tf32 matmul, cuBLAS", "flops"),
    ("fp16", "fp16 matmul, cuBLAS", "flops"),
    ("bf16", "bf16 matmul, cuBLAS", "flops"),
    ("fp8", "fp8 e4m3 matmul, torch._scaled_mm", "flops"),
)


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
    sheet = datasheet_for(device_name)
    flops = record.get("flops_per_s") or {}
    unsupported = record.get("unsupported") or {}
    rows = []
    for name, what, kind in CEILINGS:
        if name == "dram":
            measured = record.get("dram_bytes_per_s")
            listed = sheet.dram_bytes_per_s if sheet else None
        elif name == "l2":
            measured, listed = record.get("l2_bytes_per_s"), None  # datasheets leave it out
        else:
            measured = flops.get(name)
            listed = sheet.flops_per_s.get(name) if sheet else None
        row: dict[str, Any] = {
            "ceiling": name, "what": what, "unit": "B/s" if kind == "bytes" else "FLOP/s",
            "measured": measured, "datasheet": listed,
            "pct_of_datasheet": 100 * measured / listed if measured and listed else None,
        }
        if name in unsupported:
            row["note"] = unsupported[name]
        rows.append(row)
    return rows
