"""Device facts: clock telemetry (NVML through nvidia-ml-py, where it is installed) and the
datasheet peaks of common GPUs.

A timing taken while the GPU throttled is not the kernel's fault: the benchmark rung reads
the SM clock and the reasons NVML gives for holding it down, before and after each bench
case, and warns when they show throttling.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

# NVML's clock event ("throttle") reason bits that mean the clock was held down by something
# other than the work itself.
_THROTTLES = {
    0x8: "hw_slowdown",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
}
# The board's power limit: heavy work (a bf16 matmul) lowers its own clock to stay under it,
# so a clock held down by it is the speed that work really gets, not a fault of the reading.
_POWER_CAP = {0x4: "sw_power_cap"}
POWER_CAPPED_FLOOR = 0.7  # of the maximum SM clock: below it, a clock warning all the same
# Below this share of the board's top clock (NVML's), the clock a case's samples ran at
# (the timer's markers, which read up to ~1% above NVML on the H200) is named beside its time.
SLOW_CLOCK = 0.95
_INFORMATIONAL = {0x1: "idle", 0x2: "applications_clocks", 0x10: "sync_boost",
                  0x100: "display_clocks"}


def _nvml_handle() -> Any:
    import pynvml
    import torch

    pynvml.nvmlInit()
    try:  # the device torch uses, whatever CUDA_VISIBLE_DEVICES says
        uuid = torch.cuda.get_device_properties(torch.cuda.current_device()).uuid
        return pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}".encode())
    except Exception:
        return pynvml.nvmlDeviceGetHandleByIndex(0)


def clock_state() -> dict[str, Any] | None:
    """SM clock, its maximum, temperature, power and the active clock reasons; None when
    NVML is not available (no nvidia-ml-py, or no NVIDIA driver)."""
    try:
        import pynvml

        handle = _nvml_handle()
        reasons_fn = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
        bits = int(reasons_fn(handle))
        return {
            "sm_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
            "sm_max_mhz": pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM),
            "temp_c": pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
            "power_w": round(pynvml.nvmlDeviceGetPowerUsage(handle) / 1000, 1),
            "throttle": [name for bit, name in _THROTTLES.items() if bits & bit],
            "power_capped": bool(bits & 0x4),
            "reasons": [name for bit, name in {**_THROTTLES, **_POWER_CAP,
                                               **_INFORMATIONAL}.items() if bits & bit],
        }
    except Exception:  # NVML missing or unusable: telemetry is optional
        return None


def clock_warning(before: dict[str, Any] | None, after: dict[str, Any] | None) -> str | None:
    """Why the figures taken between two readings may be low-clocked, or None. The power cap
    alone is no reason: the work measured holds the clock down itself."""
    if not after:
        return None
    if after["throttle"]:
        return f"the GPU was throttling ({', '.join(after['throttle'])}) after the measurement"
    # Under the power cap heavy math runs slower (an H200 bf16 matmul: 665 TFLOP/s at 8192^3
    # against 793 at 4096^3, 16% less); a clock far lower than that is something else.
    floor = POWER_CAPPED_FLOOR if after.get("power_capped") else 0.9
    if after["sm_mhz"] < floor * after["sm_max_mhz"]:
        return (f"the SM clock was {after['sm_mhz']} MHz after the measurement, below "
                f"{floor:.0%} of its {after['sm_max_mhz']} MHz maximum")
    if before and before["throttle"]:
        return f"the GPU was throttling ({', '.join(before['throttle'])}) before the measurement"
    return None


# Datasheet peaks of common GPUs: DRAM bandwidth, and dense (not sparse) math throughput per
# precision (tensor cores; fp32 on the CUDA cores). Keyed by the name torch reports, matched
# as a whole word and the longest key first, so "H100 PCIe" wins over "H100" and "L4" does
# not match an L40S. They are leads, not measurements: `krung calibrate` measures the real
# ceilings; these bound how fast any correct kernel could be, and are printed beside them.
PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp8", "int8")
# The pipes outside the tensor cores, per SM and clock, by architecture (the CUDA
# programming guide's table of arithmetic instruction throughput; NVIDIA's Hopper, Ampere and
# Ada whitepapers): FP32 FMA (FLOP: 2 per FFMA), packed FP16 HFMA2 (FLOP: 4 per HFMA2), MUFU
# transcendentals (exp2, rsqrt, sin, ... : operations), INT32 IMAD (operations: 2 per IMAD)
# and shared memory (bytes: 32 banks of 4 bytes). Hopper at 132 SMs and 1980 MHz: FP32 66.9
# TFLOP/s, FP16 non-tensor 133.8, INT32 33.5 TOPS, MUFU 4.2 Top/s, shared memory 33.4 TB/s.
PIPES = ("fma", "hfma2", "mufu", "int", "smem")
PER_SM_PER_CLOCK: dict[str, dict[str, float]] = {
    "hopper": {"fma": 256, "hfma2": 512, "mufu": 16, "int": 128, "smem": 128},
    "ampere": {"fma": 128, "hfma2": 512, "mufu": 16, "int": 128, "smem": 128},  # A100 (8.0)
    "ada": {"fma": 256, "hfma2": 256, "mufu": 16, "int": 128, "smem": 128},
}


@dataclass(frozen=True)
class Datasheet:
    name: str
    dram_bytes_per_s: float
    flops_per_s: dict[str, float]  # by precision; a precision the GPU lacks is absent
    # Per pipe (PIPES), derived from the SM count, the boost clock and the architecture's
    # rate per SM and clock; empty for a GPU whose figures krung does not know.
    pipes_per_s: dict[str, float] = field(default_factory=dict)

    @property
    def top_flops_per_s(self) -> float:
        return max(self.flops_per_s.values())


def _sheet(name: str, dram_tb: float, fp32: float, tf32: float, half: float,
           fp8: float | None, int8: float, sms: int | None = None,
           boost_mhz: float | None = None, arch: str | None = None) -> Datasheet:
    """One GPU's figures, in TB/s and dense TFLOP/s (fp16 and bf16 run at the same rate);
    its pipes from `sms` SMs at `boost_mhz` of the architecture `arch`."""
    flops = {"fp32": fp32, "tf32": tf32, "fp16": half, "bf16": half, "int8": int8}
    if fp8 is not None:
        flops["fp8"] = fp8
    pipes = {}
    if sms and boost_mhz and arch:
        pipes = {pipe: rate * sms * boost_mhz * 1e6
                 for pipe, rate in PER_SM_PER_CLOCK[arch].items()}
    return Datasheet(name, dram_tb * 1e12, {k: v * 1e12 for k, v in flops.items()}, pipes)


DATASHEET: dict[str, Datasheet] = {sheet.name: sheet for sheet in (
    _sheet("B200", 8.0, 75, 1125, 2250, 4500, 4500),
    _sheet("H200", 4.8, 67, 495, 989, 1979, 1979, 132, 1980, "hopper"),
    _sheet("H200 NVL", 4.8, 60, 418, 835, 1671, 1671, 132, 1785, "hopper"),
    _sheet("H100", 3.35, 67, 495, 989, 1979, 1979, 132, 1980, "hopper"),  # SXM
    _sheet("H100 NVL", 3.9, 60, 418, 835, 1671, 1671, 132, 1785, "hopper"),
    _sheet("H100 PCIe", 2.0, 51, 378, 756, 1513, 1513, 114, 1755, "hopper"),
    _sheet("A100", 2.039, 19.5, 156, 312, None, 624, 108, 1410, "ampere"),  # SXM4 80GB
    _sheet("A100 80GB PCIe", 1.935, 19.5, 156, 312, None, 624, 108, 1410, "ampere"),
    _sheet("A100-SXM4-40GB", 1.555, 19.5, 156, 312, None, 624, 108, 1410, "ampere"),
    _sheet("A100-PCIE-40GB", 1.555, 19.5, 156, 312, None, 624, 108, 1410, "ampere"),
    _sheet("L40S", 0.864, 91.6, 183, 362, 733, 733, 142, 2520, "ada"),
    _sheet("L40", 0.864, 90.5, 90.5, 181, 362, 362, 142, 2490, "ada"),
    _sheet("L4", 0.3, 30.3, 60, 121, 242, 242, 58, 2040, "ada"),
)}


def datasheet_for(device_name: str) -> Datasheet | None:
    """The datasheet of the GPU torch calls `device_name`, or None for one krung lacks."""
    found = [sheet for key, sheet in DATASHEET.items()
             if re.search(rf"(?<![A-Za-z0-9]){re.escape(key)}(?![A-Za-z0-9])", device_name)]
    return max(found, key=lambda sheet: len(sheet.name), default=None)


def floor_us(device_name: str, flops: int, bytes_moved: int) -> float | None:
    """The least time the work could take on this GPU at its datasheet peaks (the most
    generous rate of any precision), or None for a GPU krung has no figures for."""
    sheet = datasheet_for(device_name)
    if sheet is None:
        return None
    return max(flops / sheet.top_flops_per_s, bytes_moved / sheet.dram_bytes_per_s) * 1e6
