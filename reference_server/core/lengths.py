"""How long the simulated model's answers are when no hint says so (pure, seeded).

Real output lengths are skewed: most tool calls are a few dozen tokens, most text
answers a few hundred, with a long tail.  A lognormal around a median, clamped to
a range, has that shape with two numbers a user can reason about (docs/model.md
"Output policy").  The draw reads one standard normal from the request's generator,
so the same seed gives the same length, and the same draw scaled by a larger
median gives a larger length (the reasoning budget is monotone in effort).
"""

from __future__ import annotations

import math
import random

# Order of the reasoning efforts, least to most thinking: profiles' effort tables follow it.
EFFORTS = ("minimal", "low", "medium", "high", "xhigh", "max")
# An effort's draw stays within this factor of its median: no single answer thinks forever.
EFFORT_RANGE = 8


def standard_normal(rng: random.Random) -> float:
    """One N(0, 1) draw; ``normalvariate`` keeps no cached state between calls (``gauss`` does)."""
    return rng.normalvariate(0.0, 1.0)


def lognormal_tokens(z: float, median: int, sigma: float, lo: int, hi: int) -> int:
    """``median * exp(sigma * z)`` rounded and clamped to ``[lo, hi]``."""
    if median <= 0:
        return 0
    value = median * math.exp(max(-30.0, min(30.0, sigma * z)))
    return max(lo, min(hi, round(value)))


def effort_tokens(z: float, median: int, sigma: float, ceiling: int) -> int:
    """Reasoning tokens of one effort's draw: within :data:`EFFORT_RANGE` of its median."""
    lo = max(1, median // EFFORT_RANGE) if median > 0 else 0
    return lognormal_tokens(z, median, sigma, lo, min(ceiling, median * EFFORT_RANGE))
