"""The calibrated reference server beside vLLM, level by level (pure: figures in, rows out).

Both sides are measured by the same client (loopbench, the same scenario and concurrency):
``real`` is loopbench against vLLM, ``simulated`` loopbench against the reference server
with the profile `loopbench calibrate` fitted to other runs against vLLM.  vLLM's own
histograms over the real window are shown beside them: where the client's figure is far
from the engine's, the front end (not the engine) made the difference.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tools.real_engine.compare import aligned
from tools.real_engine.engine_metrics import TPOT, TTFT, Snapshot

#: the simulated figure may differ from the real one by this fraction of it
BOUND = 0.15
#: the judged figures: (summary metric, stat)
FIGURES: tuple[tuple[str, str], ...] = (("ttft_ms", "p50"), ("ttft_ms", "p99"), ("tpot_ms", "p50"))
_HISTOGRAM = {"ttft_ms": TTFT, "tpot_ms": TPOT}
Figures = Mapping[tuple[str, str], float]


@dataclass(frozen=True)
class SimRow:
    level: int  # concurrency
    metric: str
    stat: str
    real: float | None  # loopbench against vLLM (ms)
    engine: float | None  # vLLM's own histogram over the same window (ms)
    simulated: float | None  # loopbench against the calibrated reference server (ms)
    #: loopbench against vLLM in the fit pass, minutes before: how far the real engine
    #: strays from itself between two runs, the floor under any prediction's error
    again: float | None = None
    #: why this level is not judged (the machine stayed busy with other work), or ""
    not_judged: str = ""
    #: which judged pass (``--rounds``), from 1
    round: int = 1
    #: the real figure's sampling spread over its pooled turns (half-width of its 95 %
    #: bootstrap interval over the figure, 0.2 = ±20 %): above :data:`BOUND`, the turns
    #: measured cannot tell a 15 % error from chance, whatever the simulator does
    spread: float | None = None
    #: ``fit/real`` as the old design would have read it over the same turns: the first half
    #: of the level's blocks in time as one window, the second half as the other
    repeat_one_window: float | None = None

    @property
    def ratio(self) -> float | None:
        if self.real is None or self.simulated is None or self.real <= 0:
            return None
        return self.simulated / self.real

    @property
    def repeat_ratio(self) -> float | None:
        """vLLM against itself: the fit pass's figure over the judged pass's (the noise floor
        under ``ratio``)."""
        if self.real is None or self.again is None or self.real <= 0:
            return None
        return self.again / self.real

    @property
    def ok(self) -> bool | None:
        """Within the bound; None when a side has no figure (a miss, not a pass by silence) or
        the level was not judged."""
        r = self.ratio
        return None if r is None or self.not_judged else abs(r - 1.0) <= BOUND


def summary_figures(summary: Mapping[str, object], transport: str) -> dict[tuple[str, str], float]:
    """The judged figures of one transport from a run's ``summary.json``."""
    per = summary.get("transports")
    block = per.get(transport) if isinstance(per, dict) else None
    found: dict[tuple[str, str], float] = {}
    for metric, stat in FIGURES:
        got = block.get(metric) if isinstance(block, dict) else None
        value = got.get(stat) if isinstance(got, dict) else None
        if isinstance(value, int | float):
            found[metric, stat] = float(value)
    return found


def engine_figures(window: Snapshot) -> dict[tuple[str, str], float]:
    """The same figures from vLLM's histograms over one window (interpolated in buckets)."""
    found: dict[tuple[str, str], float] = {}
    for metric, stat in FIGURES:
        hist = window.histograms.get(_HISTOGRAM[metric])
        got = None if hist is None else hist.quantile(0.5 if stat == "p50" else 0.99)
        if got is not None:
            found[metric, stat] = got[0] * 1000.0
    return found


def compare_levels(
    levels: Sequence[int],
    real: Mapping[int, Figures],
    engine: Mapping[int, Figures],
    simulated: Mapping[int, Figures],
    again: Mapping[int, Figures] | None = None,
    not_judged: Mapping[int, str] | None = None,
    round_: int = 1,
    spreads: Mapping[int, Figures] | None = None,
    one_window: Mapping[int, Figures] | None = None,
) -> list[SimRow]:
    return [
        SimRow(
            c,
            metric,
            stat,
            real.get(c, {}).get((metric, stat)),
            engine.get(c, {}).get((metric, stat)),
            simulated.get(c, {}).get((metric, stat)),
            (again or {}).get(c, {}).get((metric, stat)),
            (not_judged or {}).get(c, ""),
            round_,
            (spreads or {}).get(c, {}).get((metric, stat)),
            (one_window or {}).get(c, {}).get((metric, stat)),
        )
        for c in levels
        for metric, stat in FIGURES
    ]


def missed(rows: Sequence[SimRow]) -> list[SimRow]:
    return [r for r in rows if r.ok is not True]


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _spread(value: float | None) -> str:
    """The real figure's own sampling spread; flagged where it alone exceeds the bound."""
    if value is None:
        return "-"
    return f"±{value:.0%}" + (f" (> {BOUND:.0%})" if value > BOUND else "")


def render(rows: Sequence[SimRow]) -> str:
    """The table `make real-engine-sim` prints (BENCHMARKS.md and docs/model.md show it)."""
    head = (
        "c",
        "figure",
        "real (loopbench→vLLM)",
        "vLLM's own",
        "real, fit pass",
        "fit/real",
        "fit/real, 1 window a side",
        "simulated",
        "sim/real",
        "real's spread",
        f"±{BOUND:.0%}",
    )
    lines: list[tuple[str, ...]] = [head]
    rounds = any(r.round > 1 for r in rows)
    for r in rows:
        ratio = r.ratio
        verdict = "ok" if r.ok else "MISSED" if r.ok is False else "n/a"
        if r.not_judged:
            verdict = "not judged"
        lines.append(
            (
                f"{r.level} r{r.round}" if rounds else str(r.level),
                f"{r.metric.removesuffix('_ms').upper()} {r.stat}",
                _ms(r.real),
                _ms(r.engine),
                _ms(r.again),
                "-" if r.repeat_ratio is None else f"{r.repeat_ratio:.3f}",
                "-" if r.repeat_one_window is None else f"{r.repeat_one_window:.3f}",
                _ms(r.simulated),
                "-" if ratio is None else f"{ratio:.3f}",
                _spread(r.spread),
                verdict,
            )
        )
    return aligned(lines)
