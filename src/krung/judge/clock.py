"""The judge's own clock around each batch of the version's timed calls (a `time` request and
its `timed` reply): the times the worker reports must fit in it.

The worker's figures come from the version's process, where a version that gets past the
sentinels (krung.worker.guard.Sentinels: native code, a patch that undoes itself) can forge
them; the judge's clock runs in a process the version cannot reach. What it bounds:

- soundly (the rung fails, `ImpossibleTime`): the timed calls run one after another inside
  the request, so their intervals (cpu-wall samples; on a GPU the event times around each
  call, one stream) add up to no more than the request's wall time as the judge saw it; no
  more samples than the plan allows; none negative or not finite.
- as a flag (`clock_gap`): the judge's wall time per call the worker made (warm-up and timed)
  more than GAP_RATIO times the reported median, and GAP_US above it. Honest calls cost more
  than their time (the hand-over to the version's thread, the input changes, on a GPU the
  L2 flush, markers and the profiler; on a loaded machine every hand-over waits for a core:
  4 ms per call was seen for a 16 us one on two busy cores), so a tiny or launch-bound
  kernel's median stands far below the wall time per call: the flag is for figures forged
  by orders of magnitude, and cannot tell a forged figure from an honest one within them.
  Taken over the rounds after the first (the first has the transfers and the autotuning);
  the call count is the worker's word too.
"""

from __future__ import annotations

import math
from typing import Any

from krung.protocol.errors import RungFailed
from krung.worker.timing import Samples, TimingPlan

SLACK_US_PER_CALL = 1.0  # two clock reads or events per interval: their resolution
SLACK_US = 1000.0  # the judge's clock reads around the request
GAP_RATIO = 1000.0  # judge's wall time per call over the reported median, flagged above
GAP_US = {"cpu": 1000.0, "cuda": 2000.0}  # and above this much per call on top


def samples_of(data: dict[str, Any], what: str) -> Samples:
    """The worker's samples, as krung.worker.timing.Samples; ProtocolError if malformed."""
    try:
        samples = Samples(**data)
        if not all(type(t) in (int, float) for t in [*samples.device_us, *samples.host_us]) \
                or type(samples.warmup_calls) is not int:
            raise TypeError("a time that is no number")
    except TypeError as exc:
        raise RungFailed("ProtocolError", f"the worker's samples are malformed: {exc} (in "
                         f"{what})", "a version must not interfere with krung's worker") \
            from None
    return samples


def check_batch(samples: Samples, wall_s: float, plan: TimingPlan, what: str) -> None:
    """Fail where the worker's figures for one batch cannot have been taken inside the
    `wall_s` the judge saw the request take."""
    times = samples.device_us
    if not 1 <= len(times) <= plan.max_samples or any(
            not math.isfinite(t) or t < 0 for t in [*times, *samples.host_us]):
        _impossible(f"the worker reported {len(times)} samples (the plan allows 1 to "
                    f"{plan.max_samples}), or a negative or infinite one (in {what})")
    # Intervals one after another on one clock: CUPTI's device times may overlap (several
    # streams), the events around each call may not.
    intervals = samples.host_us if samples.mode == "cupti" else times
    total_us = sum(intervals)
    allowed_us = wall_s * 1e6 + SLACK_US + SLACK_US_PER_CALL * len(intervals)
    if total_us > allowed_us:
        _impossible(f"the worker reported timed calls adding up to {total_us / 1e3:.3f} ms, "
                    f"in a request the judge saw take {wall_s * 1e3:.3f} ms (in {what})")


def gap(samples: list[Samples], wall_s: float, median_us: float, device: str
        ) -> dict[str, Any]:
    """The judge's wall time per call the worker made (`judge_us_per_call`), and `clock_gap`
    where it stands more than GAP_RATIO times above the reported median plus GAP_US."""
    calls = sum(s.warmup_calls + len(s.device_us) for s in samples)
    if calls <= 0:
        return {}
    per_call = wall_s * 1e6 / calls
    figures: dict[str, Any] = {"judge_us_per_call": round(per_call, 3)}
    if per_call > GAP_RATIO * median_us + GAP_US["cpu" if device == "cpu" else "cuda"]:
        figures["clock_gap"] = True
    return figures


def _impossible(message: str) -> None:
    raise RungFailed("ImpossibleTime", message,
                     "the version's process reported times its calls cannot have taken: a "
                     "version must not interfere with krung's timing (docs/trust.md)")
