"""Device facts and clock telemetry (NVML through nvidia-ml-py, where it is installed).

A timing taken while the GPU throttled is not the kernel's fault: the benchmark rung reads
the SM clock and the reasons NVML gives for holding it down, before and after each bench
case, and warns when they show throttling.
"""

from __future__ import annotations

from typing import Any

# NVML's clock event ("throttle") reason bits that mean the clock was held down.
_THROTTLES = {
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
}
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
            "reasons": [name for bit, name in {**_THROTTLES, **_INFORMATIONAL}.items()
                        if bits & bit],
        }
    except Exception:  # NVML missing or unusable: telemetry is optional
        return None


def clock_warning(before: dict[str, Any] | None, after: dict[str, Any] | None) -> str | None:
    """Why the figures taken between two readings may be low-clocked, or None."""
    if not after:
        return None
    if after["throttle"]:
        return f"the GPU was throttling ({', '.join(after['throttle'])}) after the measurement"
    if after["sm_mhz"] < 0.9 * after["sm_max_mhz"]:
        return (f"the SM clock was {after['sm_mhz']} MHz after the measurement, below 90% of "
                f"its {after['sm_max_mhz']} MHz maximum")
    if before and before["throttle"]:
        return f"the GPU was throttling ({', '.join(before['throttle'])}) before the measurement"
    return None


# Datasheet peaks (dense) of common GPUs, keyed by a part of the name torch reports. They are
# leads, not measurements (the roofline issue calibrates real ceilings): here they only bound
# how fast any correct kernel could be.
DATASHEET: dict[str, dict[str, Any]] = {
    "H200": {"bytes_per_s": 4.8e12, "flops_per_s": 1979e12},  # fp8 dense is the top rate
    "H100": {"bytes_per_s": 3.35e12, "flops_per_s": 1979e12},
    "B200": {"bytes_per_s": 8.0e12, "flops_per_s": 4500e12},
    "A100": {"bytes_per_s": 2.04e12, "flops_per_s": 624e12},  # int8 dense
    "L40S": {"bytes_per_s": 0.864e12, "flops_per_s": 733e12},
    "L4": {"bytes_per_s": 0.3e12, "flops_per_s": 242e12},
}


def floor_us(device_name: str, flops: int, bytes_moved: int) -> float | None:
    """The least time the work could take on this GPU at its datasheet peaks (the most
    generous rate of any precision), or None for a GPU krung has no figures for."""
    peaks = next((p for key, p in DATASHEET.items() if key in device_name), None)
    if peaks is None:
        return None
    return max(flops / peaks["flops_per_s"], bytes_moved / peaks["bytes_per_s"]) * 1e6
