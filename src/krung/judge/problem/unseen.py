"""Test cases the version has never been told about: awkward neighbours of declared ones.

Each evaluation picks some declared test cases at random (from its secret seed) and moves
every size above 2 to a nearby odd number, a prime where one is close: 1000 may become 997,
4096 may become 3583. A version tuned to the declared shapes (special-cased sizes, tails
that only work for the sizes it was shown) fails here. A problem whose sizes are constrained
(heads must divide a width, say) defines `derive_case(case, rng) -> dict | None` instead;
where a problem without one cannot run a neighbour, the sizes it can move are moved alone
(`narrowed`).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

UNSEEN_CASES = 2
DRAWS = 8


def unseen_cases(cases: list[dict], seed: int,
                 derive: Callable[[dict, random.Random], dict | None] | None = None,
                 count: int = UNSEEN_CASES) -> list[dict]:
    return [new for _, new in unseen_pairs(cases, seed, derive, count)]


def unseen_pairs(cases: list[dict], seed: int,
                 derive: Callable[[dict, random.Random], dict | None] | None = None,
                 count: int = UNSEEN_CASES) -> list[tuple[dict, dict]]:
    """(declared case, its unseen neighbour) for up to `count` declared cases."""
    rng = random.Random(seed)
    movable = [c for c in cases if any(_movable(v) for v in c.values())]
    picked = rng.sample(movable, min(count, len(movable)))
    derived: list[tuple[dict, dict]] = []
    for case in picked:
        # a few draws: two neighbours of 1023 and 1025 may well be the same prime
        for _ in range(DRAWS):
            new = derive(dict(case), rng) if derive else _neighbour(case, rng)
            if new and new not in cases and all(new != d for _, d in derived):
                derived.append((case, new))
                break
    return derived


def narrowed(origin: dict, moved: dict, works: Callable[[dict], bool]) -> tuple[dict, list[str]]:
    """`origin` with each size `moved` changed taken over, one at a time in order, where the
    problem still `works` with it (a width its reference ties to a layer's shape stays):
    the case, and the sizes kept as declared."""
    case, kept = dict(origin), []
    for key, value in moved.items():
        if value == origin.get(key):
            continue
        trial = {**case, key: value}
        if works(trial):
            case = trial
        else:
            kept.append(key)
    return case, kept


def _movable(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 2


def _neighbour(case: dict, rng: random.Random) -> dict:
    return {k: _awkward(v, rng) if _movable(v) else v for k, v in case.items()}


def _awkward(size: int, rng: random.Random) -> int:
    """An odd size within about 25% of `size`, the next prime above it when one is near."""
    low, high = max(3, size * 3 // 4), size + size // 4 + 1
    candidate = rng.randint(low, high) | 1
    for step in range(0, 200, 2):
        if _is_prime(candidate + step):
            return candidate + step
    return candidate


def granular_neighbour(size: int, granule: int, rng: random.Random) -> int:
    """A size near `size` that is still a multiple of `granule` (a power of two every
    declared size of its key shares): an odd multiple where one is near, never `size`."""
    if granule <= 1:
        return _awkward(size, rng)
    low = max(1, (size * 3 // 4 + granule - 1) // granule)
    high = max(low, (size + size // 4) // granule)
    choices = [k for k in range(low, high + 1) if k * granule != size]
    odd = [k for k in choices if k % 2]
    if not choices:
        return size + granule
    return rng.choice(odd or choices) * granule


def shared_granule(values: list[int]) -> int:
    """The largest power of two dividing every value (1 when one is odd)."""
    granule = 1
    while all(v % (granule * 2) == 0 for v in values) and granule < (1 << 20):
        granule *= 2
    return granule


def _is_prime(n: int) -> bool:
    if n < 2 or n % 2 == 0:
        return n == 2
    factor = 3
    while factor * factor <= n:
        if n % factor == 0:
            return False
        factor += 2
    return True
