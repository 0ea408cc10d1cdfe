"""Planned vs server-reported tokens per transport (docs/metrics.md §1.6: what each figure is,
and what a ratio far from 1 means): counters over successful model turns, compactions left
out, mergeable across processes like :mod:`harness.metrics.honesty`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.metrics.cache import ratio
from harness.metrics.results_model import Summary, as_summary
from harness.workload.records import TurnRecord

#: the counters, in ``summary.json`` order
KEYS = (
    "turns",  # successful model turns counted
    "usage_turns",  # ... of which the endpoint reported usage (input_tokens > 0)
    "planned_input",  # the client's history at each send, every turn
    "planned_output",  # the plan's output (visible + reasoning), every turn
    "output",  # usage.output_tokens where reported, else the streamed text counted
    "streamed_output",  # the streamed visible text, counted by the client's convention
    "usage_planned_input",  # over the usage turns only: planned ...
    "usage_input",  # ... and reported input
    "usage_planned_output",  # over the usage turns only: planned ...
    "usage_output",  # ... and reported output
)


def new_counts() -> dict[str, int]:
    return dict.fromkeys(KEYS, 0)


def add(counts: dict[str, int], rec: TurnRecord) -> None:
    """Count one successful turn (a compaction is not a model turn: left out)."""
    if rec.compaction:
        return
    counts["turns"] += 1
    counts["planned_input"] += rec.history_tokens
    counts["planned_output"] += rec.planned_output_tokens
    counts["output"] += rec.output_tokens
    counts["streamed_output"] += rec.streamed_tokens
    if rec.input_tokens > 0:
        counts["usage_turns"] += 1
        counts["usage_planned_input"] += rec.history_tokens
        counts["usage_input"] += rec.input_tokens
        counts["usage_planned_output"] += rec.planned_output_tokens
        counts["usage_output"] += rec.output_tokens


def summary(counts: Mapping[str, int]) -> dict[str, Any]:
    """``summary.json``'s ``tokens[transport]``: totals and ratios (docs/metrics.md §1.6)."""
    turns = counts.get("turns", 0)
    usage_turns = counts.get("usage_turns", 0)
    all_usage = turns > 0 and usage_turns == turns
    return {
        "turns": turns,
        "usage_turns": usage_turns,
        "planned_input": counts.get("planned_input", 0),
        "planned_output": counts.get("planned_output", 0),
        # planned over the turns with usage: what the reported figures are compared with
        "usage_planned_input": counts.get("usage_planned_input", 0),
        "usage_planned_output": counts.get("usage_planned_output", 0),
        "reported_input": counts.get("usage_input", 0) if usage_turns else None,
        "reported_output": counts.get("usage_output", 0) if usage_turns else None,
        "input": counts.get("usage_input", 0) if all_usage else counts.get("planned_input", 0),
        "output": counts.get("output", 0),
        "streamed_output": counts.get("streamed_output", 0),
        "input_ratio": ratio(counts.get("usage_input", 0), counts.get("usage_planned_input", 0)),
        "output_ratio": ratio(counts.get("usage_output", 0), counts.get("usage_planned_output", 0)),
    }


#: reported output at least this many times the planned output, in a run that sent the
#: ``loopbench.output_tokens`` hint: the endpoint ignored the hint (vLLM takes ``metadata``
#: and drops it; outputs ran to 2.46x the plan there)
HINT_IGNORED_RATIO = 1.5


def hint_ignored(tokens: Mapping[str, Mapping[str, Any]], *, hints: bool) -> list[str]:
    """``summary.json``'s ``hint_ignored``: one line per transport whose endpoint let its
    outputs run to ``HINT_IGNORED_RATIO`` times the plan or more although the run sent the
    output-length hint; none without hints (the plan then asked for no length)."""
    if not hints:
        return []
    out = []
    for name, tok in tokens.items():
        ratio = tok.get("output_ratio")
        if ratio is None or ratio < HINT_IGNORED_RATIO:
            continue
        out.append(
            f"{name}: outputs ran to {ratio:.2f}x the plan: the endpoint ignores loopbench's "
            "output-length hint (metadata loopbench.output_tokens); run with --no-hints and shape "
            "the output with --extra-body (max_tokens, ignore_eos; docs/targets.md)"
        )
    return out


def line(doc: Summary | Mapping[str, Any]) -> str:
    """The console's line: ``tokens planned → reported: http in 9,800 → 9,812 (1.00x), ...``."""
    summary = as_summary(doc) or Summary()
    parts = []
    for name, tok in summary.tokens.items():
        if not tok.turns:
            continue
        if not tok.usage_turns:
            parts.append(f"{name} in {tok.planned_input:,} out {tok.planned_output:,} (no usage)")
            continue
        ir, orat = tok.input_ratio, tok.output_ratio
        parts.append(
            f"{name} in {tok.usage_planned_input:,} → {tok.reported_input or 0:,}"
            + (f" ({ir:.2f}x)" if ir is not None else "")
            + f", out {tok.usage_planned_output:,} → {tok.reported_output or 0:,}"
            + (f" ({orat:.2f}x)" if orat is not None else "")
        )
    return "tokens planned → server-reported: " + "; ".join(parts) if parts else ""
