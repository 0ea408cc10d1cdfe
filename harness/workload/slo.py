"""A scenario's ``slo:`` section: the latency targets a turn and a rollout must meet.

Validated like every other section (file, field, expected value); ``--slo`` on the
command line overrides it field by field.  What "meets" means: docs/metrics.md §1.8.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from harness.workload.distributions import StrictModel

#: the per-turn thresholds, each named as the metric it bounds (harness/metrics/definitions.py)
TURN_SLO_FIELDS = ("ttft_ms", "ttfot_ms", "turn_ms")
#: the per-rollout threshold
ROLLOUT_SLO_FIELDS = ("rollout_ms",)
SLO_FIELDS = TURN_SLO_FIELDS + ROLLOUT_SLO_FIELDS


def _threshold(description: str) -> Any:
    """An optional threshold in milliseconds: positive when set, unconstraining when left out."""
    return Field(default=None, gt=0.0, description=description)


class SloConfig(StrictModel):
    """Latency targets; every field is optional, a missing one does not constrain."""

    ttft_ms: float | None = _threshold(
        "Per turn: the most milliseconds from request sent to first token."
    )
    ttfot_ms: float | None = _threshold(
        "Per turn: the most milliseconds from request sent to the first visible "
        "output (after any reasoning; without reasoning the same as TTFT)."
    )
    turn_ms: float | None = _threshold(
        "Per turn: the most milliseconds from request sent to the response's end."
    )
    rollout_ms: float | None = _threshold(
        "Per rollout: the most milliseconds from the rollout's intended start to its end."
    )

    def thresholds(self) -> dict[str, float]:
        """The thresholds that are set, by field name (ms)."""
        return {f: v for f in SLO_FIELDS if (v := getattr(self, f)) is not None}

    def describe(self) -> str:
        """``TTFT ≤ 500 ms, turn ≤ 2000 ms`` (or ``no latency thresholds``)."""
        set_ = self.thresholds()
        if not set_:
            return "no latency thresholds (a rollout is good when it succeeds)"
        return ", ".join(f"{k.removesuffix('_ms')} ≤ {v:g} ms" for k, v in set_.items())
