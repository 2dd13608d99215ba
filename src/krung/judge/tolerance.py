"""The per-dtype correctness policy: how close is close enough.

An element passes when |out - ref| <= atol + rtol * |ref| (the `torch.allclose` rule), where
atol scales with the reference's magnitude (`scale_atol`, on by default): it is the policy's
atol times the reference tensor's RMS when that RMS is below 1 (never below the dtype's
smallest normal number), and the policy's atol as it is otherwise. An absolute atol alone
passes anything on outputs whose values are all below it: zeros, or the constant 1/n for a
softmax over n = 10^5 columns, are within atol = 1e-4 of every true value. An honest
version's errors scale with its data, so a bound that passes it at RMS 1 passes it at any
smaller RMS when the bound scales too; above RMS 1 the bound stays KernelBench's, never
looser. Reduced precisions are also judged as a whole by PSNR and cosine similarity, so a
version that stays inside the element bounds while being systematically off still fails.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float
    min_psnr_db: float | None = None
    min_cossim: float | None = None
    # atol applies to the output scaled to unit RMS where the reference's RMS is below 1
    scale_atol: bool = True

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# Keyed by torch dtype name. Float32 follows KernelBench (1e-4); half precisions 1e-2.
DEFAULTS: dict[str, Tolerance] = {
    "float64": Tolerance(atol=1e-8, rtol=1e-7),
    "float32": Tolerance(atol=1e-4, rtol=1e-4),
    # Not a torch dtype: float32 tensors computed on tensor cores in TF32 (10-bit mantissa).
    "tf32": Tolerance(atol=5e-3, rtol=5e-3, min_cossim=0.9999),
    "float16": Tolerance(atol=1e-2, rtol=1e-2, min_psnr_db=40.0, min_cossim=0.999),
    "bfloat16": Tolerance(atol=1e-2, rtol=1e-2, min_psnr_db=35.0, min_cossim=0.999),
    "float8_e4m3fn": Tolerance(atol=1.25e-1, rtol=1.25e-1, min_psnr_db=20.0, min_cossim=0.99),
    "float8_e5m2": Tolerance(atol=2.5e-1, rtol=2.5e-1, min_psnr_db=15.0, min_cossim=0.98),
}
EXACT = Tolerance(atol=0.0, rtol=0.0)  # integers and booleans
FIELDS = set(Tolerance.__dataclass_fields__)


def default_for(dtype_name: str) -> Tolerance:
    return DEFAULTS.get(dtype_name, EXACT)


def resolve(dtype_name: str, override: Any = None) -> Tolerance:
    """The tolerance for one output dtype, after a problem's `tolerance` override.

    The override is one of: a policy name (`"tf32"`), a dict of Tolerance fields applying to
    every dtype, or a dict keyed by dtype name whose values are such dicts or policy names.
    """
    base = default_for(dtype_name)
    if override is None:
        return base
    if isinstance(override, str):
        return DEFAULTS[override]
    if isinstance(override, dict) and dtype_name in override:
        return resolve(dtype_name, override[dtype_name])
    if isinstance(override, dict) and set(override) <= FIELDS:
        return replace(base, **override)
    return base


def check_override(override: Any, dtype_names: set[str]) -> list[str]:
    """What is wrong with a problem's `tolerance`, as messages (empty when it is fine)."""
    if override is None:
        return []
    if isinstance(override, str):
        return [] if override in DEFAULTS else [f"tolerance {override!r} is not a known policy"]
    if not isinstance(override, dict):
        return [f"tolerance must be a dict or a policy name, not {type(override).__name__}"]
    if set(override) <= FIELDS:
        return []
    problems = []
    for key, value in override.items():
        if key not in DEFAULTS and key not in dtype_names:
            problems.append(f"tolerance key {key!r} is neither a dtype nor a Tolerance field")
        elif isinstance(value, str):
            if value not in DEFAULTS:
                problems.append(f"tolerance[{key!r}] = {value!r} is not a known policy")
        elif not (isinstance(value, dict) and set(value) <= FIELDS):
            problems.append(f"tolerance[{key!r}] must be a dict with keys from {sorted(FIELDS)}")
    return problems
