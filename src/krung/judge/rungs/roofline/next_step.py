"""The next step for whoever writes the next version, from the measured limiter.

One line: the number to beat (the worst case's time at the roofline, against its time now),
the kernel and the case it concerns, and the first thing to try for the limiter that fired
there (krung.judge.rungs.roofline.limiter). The roofline rung gives it as `next_step`; the
agent format prints it after `next:`.
"""

from __future__ import annotations

from typing import Any


def next_step(figures: dict[str, Any]) -> str | None:
    """The step, from the roofline rung's figures (`per_case` rows and their verdicts), or
    None when no case was placed."""
    rows = [r for r in figures.get("per_case") or [] if r.get("verdict")]
    if not rows:
        return None
    suspect = next((r for r in rows if r["verdict"] == "suspect"), None)
    if suspect is not None:
        return (f"case {suspect['case']} took {suspect['median_us']:.4g} us, under the "
                f"{suspect['roofline_us']:.4g} us the roofline allows: {suspect['first_try']}")
    if all(r["verdict"] == "at-roofline" for r in rows):
        return ("every bench case is at the roofline: stop optimising this kernel, or cut the "
                "work itself (fewer bytes or flops)")
    worst = min(rows, key=lambda r: r["pct"])
    now = worst.get("median_us_at_max_clock") or worst["median_us"]
    kernel = f" in {worst['kernel']}" if worst.get("kernel") else ""
    step = (f"beat {worst['roofline_us']:.4g} us (the roofline) on case {worst['case']}"
            f"{kernel}, now {now:.4g} us ({worst['pct']:.0f}% of {worst['ceiling_label']})")
    if worst.get("first_try"):
        step += f"; first try: {worst['first_try']}"
    return step
