"""``loopbench compare A B [C ...]``: are the runs comparable, what changed, is it significant.

The first run is the reference (A); every other run is a candidate compared with it.

The comparability checks (:func:`run_reasons`, :func:`pair_reasons`: the rules ``run`` and
``gate`` apply, :mod:`harness.metrics.validity`) and the rows, one statistic each (the p50 of
per-sample metrics is the median of the samples, with a bootstrap CI of the ratio of medians and a
Mann–Whitney test; other rows compare the ``summary.json`` values), are docs/compare.md §1-§2.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.metrics import definitions as D
from harness.metrics.results_model import Comparison as SummaryComparison
from harness.metrics.results_model import Manifest
from harness.metrics.stats import (
    MIN_CI_PAIRS,
    bootstrap_median,
    bootstrap_ratio_of_medians,
    ci_reason,
    mann_whitney_u,
)
from harness.metrics.validity import (
    SAME_FIELDS,
    Limits,
    RolloutKey,
    comparability,
    error_reason,
    finite,
    recorded_reasons,
    rollouts_differ,
    summary_reasons,
)
from harness.report import analysis as A
from harness.report.compare_plots import PlotRun, write_compare_plots
from harness.report.document import Document, Heading, Image, Paragraph, Table
from harness.report.error_summary import kinds_text
from harness.report.files import PLOTS_DIR, fmt, write_report
from harness.report.results import Run, write_index
from harness.wire.plural import counted

ALPHA = 0.05
#: differing scenario fields listed in one reason, at most
_MAX_DIFFS = 5


def _samples(m: D.Metric, stat: D.Stat) -> tuple[str, str] | None:
    """(table, column) of the per-sample values a row tests, if any: the median rows of a metric
    with a column in the row files (a run holds too few tail samples for a test)."""
    if m.column is None or m.record is None or stat.name != "p50":
        return None
    return ("turns" if m.record == "turn" else "rollouts", m.column)


@dataclass(frozen=True, slots=True)
class Delta:
    transport: str
    metric: str
    unit: str
    #: the statistic in A and in B: the sample medians for a tested row, else summary.json's
    a: float | None
    b: float | None
    delta: float | None
    #: (b / a − 1) × 100: the same statistic as ``ratio``
    delta_pct: float | None
    #: b / a and the bootstrap 95 % CI of that ratio (None with too few samples)
    ratio: float | None = None
    ratio_ci95: tuple[float, float] | None = None
    p_value: float | None = None
    #: "better", "worse", "no significant change", or "" (no test)
    verdict: str = ""
    #: samples behind a and b (tested rows only)
    n_a: int | None = None
    n_b: int | None = None
    #: why a row has no CI or no value ("n=2: too few for a CI", "B: no successful turns")
    note: str = ""
    candidate: str = "B"

    @property
    def tested(self) -> bool:
        return self.n_a is not None


# -- one run, as compare sees it -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TransportHealth:
    """Turns of one transport in one run, and what failed."""

    turns: int
    errors: int
    #: kind -> {"count", "example"} (the summary's ``errors`` block), most frequent first
    kinds: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @property
    def ok(self) -> int:
        return self.turns - self.errors

    @property
    def error_rate(self) -> float:
        return self.errors / self.turns if self.turns else 1.0

    def describe_errors(self, limit: int = 3, *, example: bool = True) -> str:
        """``server_error x6: <example>; timeout x2``: the top kinds with counts, as a run's
        validity reasons name them."""
        kinds = self.kinds if example else {k: {"count": v["count"]} for k, v in self.kinds.items()}
        return kinds_text(kinds, top=limit)


@dataclass(slots=True)
class Side:
    """A run in a comparison: its label (A, B, …) and the tables read from it once."""

    label: str
    run: Run
    _tables: dict[str, Any] = field(default_factory=dict)
    _health: dict[str, TransportHealth] = field(default_factory=dict)

    def table(self, kind: str) -> Any:
        if kind not in self._tables:
            self._tables[kind] = (
                A.turn_table(self.run) if kind == "turns" else A.rollout_table(self.run)
            )
        return self._tables[kind]

    @property
    def transports(self) -> list[str]:
        """What the run measured or meant to: a transport an interrupted run never reached is
        in the manifest only, and must not vanish from the comparison."""
        planned = list(self.run.manifest_model.transports)
        return A.ordered_transports([*A.run_transports(self.run), *planned])

    def samples(self, table: str, column: str, transport: str) -> np.ndarray:
        return A.ok_samples(self.table(table), transport, column)

    def first_turns(self, transport: str) -> dict[RolloutKey, float]:
        return A.first_turns(self.table("turns"), transport)

    def health(self, transport: str) -> TransportHealth:
        if transport not in self._health:
            self._health[transport] = self._count(transport)
        return self._health[transport]

    def _count(self, transport: str) -> TransportHealth:
        df = self.table("turns")
        g = df[df["transport"] == transport] if not df.empty else df
        bad = g[~g["ok"]] if len(g) else g
        kinds: dict[str, dict[str, Any]] = {}
        if len(bad):
            kind = bad["error_kind"].where(bad["error_kind"] != "", bad["status"])
            for name, n in kind.value_counts().items():
                msgs = bad.loc[kind == name, "error_message"]
                kinds[str(name)] = {
                    "count": int(n),
                    "example": next((str(m) for m in msgs if m), ""),
                }
        return TransportHealth(len(g), len(bad), kinds)

    @property
    def limits(self) -> Limits:
        return Limits.of_manifest(self.run.manifest_model)


def sides(runs: Sequence[Run]) -> list[Side]:
    """Label runs A, B, C, …, Z, then R27, R28, …"""
    return [Side(chr(ord("A") + i) if i < 26 else f"R{i + 1}", run) for i, run in enumerate(runs)]


# -- comparability -------------------------------------------------------------------------------


def _scenario_reasons(ref: Side, cand: Side) -> list[str]:
    found = comparability(ref.run.manifest_model, cand.run.manifest_model)
    if not found:
        return []
    first = found[0]
    if first.path in SAME_FIELDS:
        return [
            f"{cand.label}: {'scenario' if d.path == 'scenario_name' else d.path} {d.cand!r}, "
            f"{ref.label} has {d.ref!r}"
            for d in found
        ]
    if first.path == "scenario" and (first.ref is None or first.cand is None):
        return [
            f"{cand.label}: manifest.json has no scenario: cannot show that {cand.label} and "
            f"{ref.label} replay the same rollouts"
        ]
    if first.path in ("scenario_sha256", "scenario_hash"):
        return [f"{cand.label}: scenario content differs from {ref.label} ({first.path})"]
    more = f" and {len(found) - _MAX_DIFFS} more" if len(found) > _MAX_DIFFS else ""
    listed = "; ".join(
        f"{d.path.removeprefix('scenario.')} {d.ref!r} vs {d.cand!r}" for d in found[:_MAX_DIFFS]
    )
    return [
        f"{cand.label}: scenario content differs from {ref.label}: {listed}{more} "
        f"({ref.label} first)"
    ]


def run_reasons(side: Side) -> list[str]:
    """Why one run cannot stand in a comparison: unfinished, partial, or it does not count.

    A finished run's verdict is the one it recorded (``summary.json``'s ``valid`` and
    ``invalid_reasons``: the rules of :mod:`harness.metrics.validity` that ``run`` and ``gate``
    apply), or those rules applied again to a summary without one; an unfinished run's
    transports are judged from its rows.
    """
    run, label = side.run, side.label
    reasons: list[str] = []
    summary = run.summary_model
    if summary is None:
        reasons.append(f"{label}: did not finish (no summary.json in {run.path})")
    elif summary.partial:
        reasons.append(
            f"{label}: partial run (interrupted before every rollout finished; "
            "its figures cover only what was measured)"
        )
    limits = side.limits
    for name in side.transports:
        h = side.health(name)
        if h.turns == 0:
            reasons.append(f"{label}: {name}: never ran (no turns recorded)")
        elif summary is None:
            found = error_reason(
                name, h.turns, h.errors, limits.max_error_rate, h.describe_errors()
            )
            if found:
                reasons.append(f"{label}: {found}")
    if summary is not None:
        details = {name: side.health(name).describe_errors() for name in side.transports}
        reasons += [f"{label}: {r}" for r in summary_reasons(summary, limits, details)]
    return reasons


def pair_reasons(ref: Side, cand: Side) -> list[str]:
    """Why ``cand`` does not measure what ``ref`` measured: scenario, seed, the rollouts
    replayed, transports."""
    reasons = _scenario_reasons(ref, cand)
    if not reasons:
        labels = (ref.label, cand.label)
        for name in A.ordered_transports(t for t in cand.transports if t in ref.transports):
            found = rollouts_differ(name, ref.first_turns(name), cand.first_turns(name), labels)
            if found:
                reasons.append(f"{cand.label}: {found}")
                break
    rt, ct = ref.transports, cand.transports
    if set(rt) != set(ct):
        reasons.append(
            f"{cand.label}: transports {', '.join(ct) or 'none'}; "
            f"{ref.label} has {', '.join(rt) or 'none'}"
        )
    return reasons


def warnings(side: Side) -> list[str]:
    """What compare notes about a run without judging it: a summary with no verdict of its own."""
    summary = side.run.summary_model
    if summary is not None and recorded_reasons(summary) is None:
        return [
            f"{side.label}: summary.json records no validity verdict (an older loopbench?): "
            "judged again from its figures"
        ]
    return []


# -- the deltas ----------------------------------------------------------------------------------


def _tested_row(
    m: D.Metric, a: np.ndarray, b: np.ndarray, *, n_boot: int, seed: int
) -> dict[str, Any]:
    """A median row from the samples: one statistic for A, B, Δ, Δ %, the CI and the test."""
    ma = float(np.median(a)) if len(a) else None
    mb = float(np.median(b)) if len(b) else None
    out: dict[str, Any] = {"a": ma, "b": mb, "n_a": len(a), "n_b": len(b)}
    if ma is None or mb is None:
        return out
    ratio = mb / ma
    out.update(delta=mb - ma, delta_pct=(ratio - 1.0) * 100.0, ratio=ratio)
    n = min(len(a), len(b))
    if n < MIN_CI_PAIRS:
        out["note"] = ci_reason(n)
        return out
    _, p = mann_whitney_u(a, b)
    _, ci = bootstrap_ratio_of_medians(b, a, n_boot=n_boot, seed=seed)
    verdict = "no significant change"
    if p < ALPHA and not (ci[0] <= 1.0 <= ci[1]):
        verdict = "better" if (ratio < 1.0) == (m.lower_is_better is not False) else "worse"
    out.update(ratio_ci95=ci, p_value=p, verdict=verdict)
    return out


def _missing_note(ref: Side, cand: Side, name: str) -> str:
    for side in (ref, cand):
        if name not in side.transports:
            return f"{side.label}: not measured"
        h = side.health(name)
        if h.turns == 0:
            return f"{side.label}: never ran"
        if h.ok == 0:
            return f"{side.label}: no successful turns ({h.describe_errors(1, example=False)})"
    return ""


def delta_rows_of(ref: Side, cand: Side, *, n_boot: int = 2000, seed: int = 0) -> list[Delta]:
    """Per-transport metric deltas of ``cand`` relative to ``ref``: every transport either
    measured keeps its rows."""
    names = A.ordered_transports([*ref.transports, *cand.transports])
    # without reasoning on either side TTFOT repeats TTFT and there are no reasoning tokens
    reasoned = D.has_reasoning(ref.run.summary_model) or D.has_reasoning(cand.run.summary_model)
    rows = [(m, stat) for m, stat in D.compare_rows() if reasoned or not m.reasoning]
    out: list[Delta] = []
    for name in names:
        missing = _missing_note(ref, cand, name)
        sa, sb = ref.run.figures(name), cand.run.figures(name)
        for m, stat in rows:
            row: dict[str, Any]
            if (samples := _samples(m, stat)) is not None:
                table, column = samples
                row = _tested_row(
                    m,
                    ref.samples(table, column, name),
                    cand.samples(table, column, name),
                    n_boot=n_boot,
                    seed=seed,
                )
            else:
                va = finite(sa.stat(m.group, stat.key))
                vb = finite(sb.stat(m.group, stat.key))
                row = {"a": va, "b": vb}
                if va is not None and vb is not None:
                    row["delta"] = vb - va
                    if va:
                        row["ratio"] = vb / va
                        row["delta_pct"] = (vb / va - 1.0) * 100.0
            if missing:
                row["note"] = missing
                row["verdict"] = ""
            row.setdefault("delta", None)
            row.setdefault("delta_pct", None)
            out.append(Delta(name, m.title(stat.key), m.unit, candidate=cand.label, **row))
    return out


@dataclass(slots=True)
class Comparison:
    """Everything ``compare`` shows: the runs, why they are not comparable, the deltas."""

    sides: list[Side]
    reasons: list[str]
    warnings: list[str]
    #: per candidate (B, C, …): its rows against the reference
    deltas: dict[str, list[Delta]]

    @property
    def reference(self) -> Side:
        return self.sides[0]

    @property
    def candidates(self) -> list[Side]:
        return self.sides[1:]

    @property
    def comparable(self) -> bool:
        return not self.reasons


def compare(runs: Sequence[Run], *, n_boot: int = 2000, seed: int = 0) -> Comparison:
    """Compare every run after the first with the first; ``runs`` holds at least two."""
    if len(runs) < 2:
        raise ValueError(f"compare: expected at least two runs, got {len(runs)}")
    all_sides = sides(runs)
    ref = all_sides[0]
    reasons: list[str] = []
    notes: list[str] = []
    for side in all_sides:
        reasons += run_reasons(side)
        notes += warnings(side)
    for cand in all_sides[1:]:
        reasons += pair_reasons(ref, cand)
    deltas = {c.label: delta_rows_of(ref, c, n_boot=n_boot, seed=seed) for c in all_sides[1:]}
    return Comparison(all_sides, reasons, notes, deltas)


# -- words ---------------------------------------------------------------------------------------


def fmt_p(p: float | None) -> str:
    """A p-value with sensible precision: ``<0.001``, ``0.004``, ``0.04``, ``1.00``."""
    if p is None:
        return "-"
    if p < 0.001:
        return "<0.001"
    if p < 0.01:
        return f"{p:.3f}"
    return f"{p:.2f}"


def _signed(text: str) -> str:
    """A formatted number with its sign: ``+1.3``, ``−0.7`` (the minus of the Δ % column)."""
    return "−" + text[1:] if text.startswith("-") else "+" + text


def _pct(x: float) -> str:
    return f"{x:+.1f}".replace("-", "−")


def _ci_pct(d: Delta) -> str:
    """``−2.0, +8.4``: the CI of the row's ratio as Δ % bounds."""
    assert d.ratio_ci95 is not None
    lo, hi = ((c - 1.0) * 100.0 for c in d.ratio_ci95)
    return f"{_pct(lo)}, {_pct(hi)}"


def fmt_change(d: Delta) -> str:
    """``+3.1 % [−2.0, +8.4]``: Δ % of the row's statistic with the CI of that same ratio."""
    if d.delta_pct is None:
        return "-"
    return f"{_pct(d.delta_pct)} %" + (f" [{_ci_pct(d)}]" if d.ratio_ci95 is not None else "")


def row_verdict(d: Delta) -> str:
    """The verdict cell: the test's verdict, or why there is none."""
    if d.note:
        return d.note
    if d.verdict:
        return d.verdict
    if d.delta_pct is not None and not d.tested:
        return "one value per run: no test"
    return "-"


def metric_verdict(d: Delta, ref: str = "A") -> str:
    """One line for one metric: ``B vs A: rollout p50 −30.1 % [95 % CI −33.0, −27.2], p<0.001: better``."""
    head = f"{d.candidate} vs {ref}: {d.metric} ({d.transport})"
    if d.delta_pct is None:
        return f"{head}: {d.note or 'no value in one of the runs'}"
    text = f"{head} {_pct(d.delta_pct)} %"
    if d.ratio_ci95 is not None:
        return f"{text} [95 % CI {_ci_pct(d)}], p {fmt_p(d.p_value)}: {d.verdict}"
    return f"{text}: {row_verdict(d)}"


def delta_headers(ref: str = "A", cand: str = "B") -> list[str]:
    """The delta table's headers for candidate ``cand`` against reference ``ref``."""
    stats = ["Δ % [95 % CI]", "p (Mann–Whitney)", "verdict"]
    return ["transport", "metric", ref, cand, f"Δ ({cand}−{ref})", *stats]


def delta_rows(deltas: Sequence[Delta]) -> list[list[str]]:
    rows = []
    for d in deltas:
        digits = 0 if d.unit == "tok/s" else 2 if (d.a or 0) < 10 else 1
        rows.append(
            [
                d.transport,
                f"{d.metric} ({d.unit})",
                fmt(d.a, digits),
                fmt(d.b, digits),
                "-" if d.delta is None else _signed(fmt(d.delta, digits)),
                fmt_change(d),
                fmt_p(d.p_value),
                row_verdict(d),
            ]
        )
    return rows


def _headline(cmp: Comparison, cand: Side) -> str:
    """The rollout p50 change of the first transport both runs measured (the headline metric)."""
    rows = [d for d in cmp.deltas[cand.label] if d.metric == "rollout p50"]
    usable = [d for d in rows if d.delta_pct is not None] or rows
    if not usable:
        return f"{cand.label}: no rollout latency to compare"
    return metric_verdict(usable[0], cmp.reference.label)


def _worst_error(cmp: Comparison) -> str:
    worst: tuple[float, str] = (0.0, "")
    for side in cmp.sides:
        for name in side.transports:
            h = side.health(name)
            if h.errors and h.error_rate > worst[0]:
                worst = (
                    h.error_rate,
                    f"{side.label} {name}: {h.errors} of {counted(h.turns, 'turn')} failed "
                    f"({h.describe_errors(2, example=False)})",
                )
    return f"worst error: {worst[1]}" if worst[1] else "no errors"


def verdict_line(cmp: Comparison) -> str:
    """The report's first line: comparable?, the headline change with its CI, the worst error."""
    head = (
        "comparable"
        if cmp.comparable
        else f"NOT COMPARABLE ({counted(len(cmp.reasons), 'reason')})"
    )
    changes = "; ".join(_headline(cmp, c) for c in cmp.candidates)
    return f"{head} · {changes} · {_worst_error(cmp)}"


# -- the document --------------------------------------------------------------------------------


def speedup_changes(a: Run, b: Run) -> list[tuple[str, SummaryComparison, SummaryComparison]]:
    """``(pair, speedup in A, speedup in B)`` for transport pairs both runs compared."""

    def by_pair(run: Run) -> dict[str, SummaryComparison]:
        summary = run.summary_model
        return {c.pair: c for c in (summary.comparisons if summary is not None else [])}

    pa, pb = by_pair(a), by_pair(b)
    return [(k, pa[k], pb[k]) for k in pa if k in pb]


def runs_table(cmp: Comparison) -> Table:
    rows = []
    for s in cmp.sides:
        m, summary = s.run.manifest_model, s.run.summary_model
        valid = "unfinished" if summary is None else "yes" if summary.valid else "no"
        rows.append(
            [
                s.label + (" (reference)" if s is cmp.reference else ""),
                s.run.run_id,
                str(_or_dash(m.scenario_name)),
                str(_or_dash(m.seed)),
                str(_or_dash(m.target)),
                ", ".join(s.transports),
                valid,
                _software(m),
            ]
        )
    return Table(
        ["run", "id", "scenario", "seed", "target", "transports", "valid", "loopbench"],
        rows,
        align="lllrllll",
    )


def _or_dash(value: object) -> object:
    return "-" if value is None else value


def _software(manifest: Manifest) -> str:
    """``0.9.0 (1a2b3c4d)``: the client's version and commit, what a version comparison varies."""
    version = manifest.versions.get("loopbench") or ""
    sha = (manifest.git_sha or "")[:8]
    return " ".join(p for p in (version, f"({sha})" if sha else "") if p) or "-"


def rollout_ci(
    side: Side, transport: str, *, n_boot: int, seed: int
) -> tuple[float, tuple[float, float] | None, int] | None:
    """Median rollout latency of one run and transport with its bootstrap CI (None if n < 5)."""
    v = side.samples("rollouts", "latency_ms", transport)
    if not len(v):
        return None
    if len(v) < MIN_CI_PAIRS:
        return float(np.median(v)), None, len(v)
    med, ci = bootstrap_median(v, n_boot=n_boot, seed=seed)
    return med, ci, len(v)


def compare_document(
    cmp: Comparison, plots: Mapping[str, Sequence[tuple[str, str, str]]] | None = None
) -> Document:
    """The compare report; ``plots``: per transport, ``(relative path, title, caption)``."""
    ref = cmp.reference
    title = " vs ".join(f"{s.run.run_id} ({s.label})" for s in cmp.sides)
    doc = Document(f"loopbench compare — {title}")
    doc.add(Paragraph("Verdict: " + verdict_line(cmp), kind="note" if cmp.comparable else "bad"))
    doc.add(Heading("Runs"), runs_table(cmp))
    doc.add(Heading("Comparability"))
    if cmp.reasons:
        doc.add(
            Paragraph(
                "Not comparable — the differences below may come from the workload or the "
                "failures, not from what changed (compared anyway with --force):",
                kind="bad",
            )
        )
        doc.add(*(Paragraph("• " + r) for r in cmp.reasons))
    else:
        doc.add(
            Paragraph(
                f"Same scenario {ref.run.manifest_model.scenario_name!r} and seed "
                f"{ref.run.manifest_model.seed}, same transports, complete and valid runs "
                "(error rates within the scenario's max_error_rate, starts on schedule)."
            )
        )
    doc.add(*(Paragraph(w, kind="note") for w in cmp.warnings))
    doc.add(
        Paragraph(
            f"Rows with samples (p50 of per-turn and per-rollout metrics): A and B are the medians "
            f"of the samples, Δ % is their ratio − 1 with a bootstrap 95 % CI of that ratio, and "
            f"the verdict needs p < {ALPHA} and a CI that excludes 0 %. Fewer than "
            f"{MIN_CI_PAIRS} samples per run: no CI, no test. Other rows compare the "
            "summary.json values: one value per run, no test."
        )
    )
    for cand in cmp.candidates:
        doc.add(
            Heading(f"{cand.label} vs {ref.label}: metrics"),
            Table(
                delta_headers(ref.label, cand.label),
                delta_rows(cmp.deltas[cand.label]),
                align="llrrrrrl",
            ),
        )
        changes = speedup_changes(ref.run, cand.run)
        if changes:
            labels = (ref.label, cand.label)
            rows = [
                [pair, *(fmt(c.rollout_speedup, 3, "×") for c in (ca, cb))]
                + [fmt(c.rollout_latency_reduction_pct, 1, " %") for c in (ca, cb)]
                for pair, ca, cb in changes
            ]
            headers = [f"{what} {label}" for what in ("speedup", "reduction") for label in labels]
            doc.add(
                Heading(f"{cand.label} vs {ref.label}: speedup between transports", level=3),
                Table(["pair", *headers], rows),
            )
    if plots is not None:
        names = A.ordered_transports(t for s in cmp.sides for t in s.transports)
        for name in names:
            doc.add(Heading(f"Transport {name}"))
            lines = [
                metric_verdict(d, ref.label)
                for c in cmp.candidates
                for d in cmp.deltas[c.label]
                if d.transport == name
            ]
            doc.add(Table(["verdict per metric"], [[line] for line in lines], align="l"))
            for path, ptitle, caption in plots.get(name, ()):
                doc.add(Heading(ptitle, level=3), Image(path, ptitle, caption))
    return doc


def out_folder_name(cmp: Comparison) -> str:
    """``compare-<A>-vs-<B>[-vs-<C>…]``; long lists end in ``-and-N-more``."""
    ids = [s.run.run_id for s in cmp.sides]
    name = "compare-" + "-vs-".join(ids)
    if len(name) > 200:
        name = f"compare-{ids[0]}-vs-{ids[1]}-and-{len(ids) - 2}-more"
    return name


def default_out_dir(cmp: Comparison) -> Path:
    """Beside the reference run: ``<reference's parent>/compare-<A>-vs-<B>/``."""
    return cmp.reference.run.path.parent / out_folder_name(cmp)


def comparison_json(cmp: Comparison) -> dict[str, Any]:
    return {
        "verdict": verdict_line(cmp),
        "comparable": cmp.comparable,
        "reasons": list(cmp.reasons),
        "warnings": list(cmp.warnings),
        "runs": {s.label: str(s.run.path) for s in cmp.sides},
        "reference": cmp.reference.label,
        "deltas": [
            {"candidate": d.candidate}
            | asdict(d)
            | {"ratio_ci95": list(d.ratio_ci95) if d.ratio_ci95 else None}
            for rows in cmp.deltas.values()
            for d in rows
        ],
    }


COMPARE_MD = "compare.md"
COMPARE_HTML = "compare.html"


def write_comparison(
    cmp: Comparison, out_dir: Path, *, n_boot: int = 2000, seed: int = 0
) -> tuple[Path, Path]:
    """Write ``compare.html`` (self-contained: plots inlined), ``compare.md`` with ``plots/``
    beside it, and ``compare.json`` into ``out_dir``; returns the Markdown and HTML paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    runs = [PlotRun(s.label, s.run, s.table("turns"), s.table("rollouts")) for s in cmp.sides]
    names = A.ordered_transports(t for s in cmp.sides for t in s.transports)
    plots: dict[str, list[tuple[str, str, str]]] = {}
    for name in names:
        medians = {s.label: rollout_ci(s, name, n_boot=n_boot, seed=seed) for s in cmp.sides}
        ratios = {
            c.label: next(
                (
                    (d.ratio, d.ratio_ci95)
                    for d in cmp.deltas[c.label]
                    if d.transport == name and d.metric == "rollout p50"
                ),
                (None, None),
            )
            for c in cmp.candidates
        }
        files = write_compare_plots(runs, name, out_dir / PLOTS_DIR, medians, ratios)
        plots[name] = [(f"{PLOTS_DIR}/{p.name}", spec.title, spec.caption) for spec, p in files]
    write_index(out_dir, "compare", comparison_json(cmp))
    return write_report(compare_document(cmp, plots), out_dir, COMPARE_MD, COMPARE_HTML)
