"""Derived tables of a run for plots, reports and notebooks (pandas in, pandas out).

Everything here reads the row files of a :class:`~harness.report.results.Run`
and applies the metric definitions of docs/metrics.md §1 row by row, so a notebook sees
the same numbers the summary was built from.  Warm-up rollouts (``rollout_id``
below the scenario's ``load.warmup_rollouts``) are dropped, as the summary
drops them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.metrics import definitions as D
from harness.metrics import slices as SL
from harness.metrics.results_model import Summary, as_summary
from harness.metrics.stats import PairedResult, paired_speedup
from harness.metrics.timeseries import pick_bucket_ns, turns_rate_series
from harness.metrics.validity import RolloutKey
from harness.wire.transports import TRANSPORT_NAMES
from harness.workload.records import BURST_WINDOW_NS

if TYPE_CHECKING:
    import pandas as pd

    from harness.report.results import Run

#: the sliding window the transports use for ``burst_tokens_max`` (docs/metrics.md §1 default)
BURST_WINDOW_S = BURST_WINDOW_NS / 1e9

#: server-modelled parts of a turn (``sim_timing``), in critical-path order
SERVER_COMPONENTS = tuple(key for key, _ in D.SERVER_BREAKDOWN)
#: client-side parts of a rollout, per turn
CLIENT_COMPONENTS = tuple(key for key, _ in D.CLIENT_BREAKDOWN)
#: turn time the server model does not account for: network, transport framing, client I/O
UNMODELLED = "unmodelled"


def add_metric_columns(df: pd.DataFrame, kind: D.RecordKind) -> pd.DataFrame:
    """Add a column per metric of the table computed from ``kind`` rows (NaN: no sample)."""
    for m in D.per_record(kind):
        if m.column is not None:
            df[m.column] = D.column(m, df)
    return df


def ordered_transports(names: Iterable[str]) -> list[str]:
    """Transports in the canonical order (http … ws-append), unknown names last as given."""
    names = list(dict.fromkeys(names))
    known = [n for n in TRANSPORT_NAMES if n in names]
    return known + [n for n in names if n not in known]


def run_transports(run: Run) -> list[str]:
    """The transports of a run: from the summary, else the manifest, else the rows."""
    summary = run.summary_model
    names = list(summary.transports if summary else ()) or list(run.manifest_model.transports)
    if not names and len(run.turns):
        names = [str(n) for n in run.turns["transport"].unique()]
    return ordered_transports(names)


def warmup_rollouts(run: Run) -> int:
    return run.manifest_model.scenario_facts.warmup_rollouts


def turn_table(run: Run, burst_window_s: float = BURST_WINDOW_S) -> pd.DataFrame:
    """One row per measured turn with the per-turn metrics added.

    Added columns: ``ok``; one per turn metric of :mod:`harness.metrics.definitions`
    (``ttft_ms``, ``ttfb_ms``, ``turn_ms``, ``tpot_ms``, ``decode_tps``,
    ``measurement_error_ms``; NaN when the turn failed or gives no sample); ``burst_tps``
    (``burst_tokens_max`` / window; NaN for a response shorter than the window); ``t_s`` (first token, else
    sent, in seconds after the transport's first request of the run).
    """
    df = run.turns
    df = df[df["rollout_id"] >= warmup_rollouts(run)].copy()
    df["ok"] = df["status"].isin(D.TURN_OK)
    add_metric_columns(df, "turn")
    sent = df["sent_ns"].astype("int64")
    # as in the summary: a response shorter than the window gives no burst rate (its count is
    # a lower bound)
    fills = D.fills_burst_window(
        D.visible_start(df["first_token_ns"], df["first_output_ns"]),
        df["last_token_ns"],
        round(burst_window_s * 1e9),
    )
    df["burst_tps"] = (df["burst_tokens_max"] / burst_window_s).where(
        (df["burst_tokens_max"] > 0) & fills
    )
    origin = sent.where(sent > 0).groupby(df["transport"]).transform("min")
    at = df["first_token_ns"].where(df["first_token_ns"] > 0, sent)
    df["t_s"] = (at - origin) / 1e9
    return df


def rollout_table(run: Run) -> pd.DataFrame:
    """One row per measured rollout with ``ok`` and a column per rollout metric of the table:
    ``latency_ms`` (from the intended start, else the actual start), ``uncorrected_ms`` (from
    the actual start) and ``schedule_lag_ms``."""
    df = run.rollouts
    df = df[df["rollout_id"] >= warmup_rollouts(run)].copy()
    df["ok"] = df["status"].isin(D.ROLLOUT_OK) & (df["end_ns"] > 0)
    return add_metric_columns(df, "rollout")


def first_turns(turns: pd.DataFrame, transport: str) -> dict[RolloutKey, float]:
    """Each rollout's first-turn history size by ``(round, rollout_id)``, from
    :func:`turn_table` rows: the fingerprint of the rollouts a run replayed, by which
    ``compare`` and ``gate`` tell that two runs replayed the same ones."""
    if turns.empty or "history_tokens" not in turns:
        return {}
    first = turns[(turns["transport"] == transport) & turns["ok"] & (turns["turn_index"] == 0)]
    return {
        (int(r), int(i)): float(h)
        for r, i, h in zip(
            first["round"], first["rollout_id"], first["history_tokens"], strict=True
        )
    }


def ok_samples(df: pd.DataFrame, transport: str, column: str) -> np.ndarray:
    """The positive values of ``column`` in the successful rows of ``transport``, in row order."""
    if df.empty or column not in df:
        return np.empty(0)
    v = df.loc[(df["transport"] == transport) & df["ok"], column].dropna().to_numpy(float)
    return v[v > 0]


def paired_rollouts(run: Run) -> pd.DataFrame:
    """Completed rollout latencies (ms), one column per transport, indexed by (round, rollout_id).

    Only rollouts completed by every transport are kept: the rows are the pairs
    the paired speedup is computed on.
    """
    df = rollout_table(run)
    df = df[df["ok"]]
    wide = df.pivot_table(
        index=["round", "rollout_id"], columns="transport", values="latency_ms", aggfunc="first"
    )
    cols = [t for t in ordered_transports(wide.columns) if t in wide.columns]
    return wide[cols].dropna()


def paired_ttft_speedup(
    run: Run, baseline: str, candidate: str, *, n_boot: int = 2000, seed: int = 0
) -> PairedResult | None:
    """TTFT speedup of ``candidate`` over ``baseline`` paired turn by turn (same rollout,
    round and turn index): median ratio and bootstrap 95 % CI; None with no common turn."""
    df = turn_table(run)
    df = df[df["ttft_ms"] > 0]
    wide = df.pivot_table(
        index=["round", "rollout_id", "turn_index"],
        columns="transport",
        values="ttft_ms",
        aggfunc="first",
    )
    if baseline not in wide.columns or candidate not in wide.columns:
        return None
    pairs = wide[[baseline, candidate]].dropna()
    if pairs.empty:
        return None
    return paired_speedup(
        pairs[baseline].to_numpy(), pairs[candidate].to_numpy(), n_boot=n_boot, seed=seed
    )


def aggregate_tps(
    run: Run, bucket_ns: int | None = None, *, grid_origin_ns: int | None = None
) -> pd.DataFrame:
    """Aggregate output tokens/s per transport over time: columns ``transport``, ``t_s`` (the
    bucket start, seconds after the transport's first request) and ``tps``; failed turns'
    tokens count, as in the summary (docs/metrics.md §1.2, *Aggregate TPS*).

    ``bucket_ns``: default ~60 buckets over the longest transport. Buckets start at the
    transport's first request, or at multiples of ``bucket_ns`` from ``grid_origin_ns``.
    """
    import pandas as pd  # pandas: only when a table is built

    df = run.turns
    df = df[df["rollout_id"] >= warmup_rollouts(run)]
    frames = []
    groups = {name: g for name, g in df.groupby("transport", sort=False)}
    if bucket_ns is None:
        spans = [
            int(g["last_token_ns"].max() - g["sent_ns"][g["sent_ns"] > 0].min())
            for g in groups.values()
            if (g["sent_ns"] > 0).any()
        ]
        bucket_ns = pick_bucket_ns(max(spans, default=1), target_buckets=60)
    for name in ordered_transports(groups):
        g = groups[name]
        sent = g["sent_ns"][g["sent_ns"] > 0]
        if sent.empty:
            continue
        first_request = int(sent.min())
        origin = first_request if grid_origin_ns is None else grid_origin_ns
        starts, rates = turns_rate_series(g, bucket_ns=bucket_ns, origin_ns=origin)
        starts = starts - (first_request - origin) / 1e9
        frames.append(pd.DataFrame({"transport": name, "t_s": starts, "tps": rates}))
    if not frames:
        return pd.DataFrame({"transport": [], "t_s": [], "tps": []})
    return pd.concat(frames, ignore_index=True)


def breakdown_table(summary: Summary | Mapping[str, Any] | None) -> pd.DataFrame:
    """Mean time per turn (ms) by component, one row per transport, from ``summary.json``
    (docs/metrics.md §1.2, *Latency breakdown*): the server and ``unmodelled`` parts (clipped at 0)
    add up to the mean turn latency."""
    import pandas as pd  # pandas: only when a table is built

    rows = {}
    typed = as_summary(summary) or Summary()
    for name in ordered_transports(typed.transports):
        t = typed.transports[name]
        b = t.breakdown_ms
        row = {k: float(b.get(k) or 0.0) for k in SERVER_COMPONENTS}
        turn_mean = t.stat("turn_ms", "mean")
        modelled = sum(row.values())
        row[UNMODELLED] = max(0.0, float(turn_mean) - modelled) if turn_mean is not None else 0.0
        for k in CLIENT_COMPONENTS:
            row[k] = float(b.get(k) or 0.0)
        rows[name] = row
    return pd.DataFrame.from_dict(
        rows, orient="index", columns=[*SERVER_COMPONENTS, UNMODELLED, *CLIENT_COMPONENTS]
    )


def turn_index_medians(turns: pd.DataFrame, value: str = "turn_ms") -> pd.DataFrame:
    """Median of ``value`` per (transport, turn_index) over successful turns."""
    ok = turns[turns["ok"] & turns[value].notna()]
    return ok.groupby(["transport", "turn_index"], sort=False)[value].median().reset_index()


def binned_medians(x: np.ndarray, y: np.ndarray, bins: int = 12) -> tuple[np.ndarray, np.ndarray]:
    """Median of ``y`` in ``bins`` equal-count bins of ``x``: (bin centre x, median y)."""
    order = np.argsort(x)
    xs, ys = x[order], y[order]
    parts = [p for p in np.array_split(np.arange(len(xs)), min(bins, len(xs))) if len(p)]
    return (
        np.array([float(np.median(xs[p])) for p in parts]),
        np.array([float(np.median(ys[p])) for p in parts]),
    )


def slice_width_ns(run: Run, slice_s: float | None = None) -> int:
    """The run's slice width: ``slice_s``, else the manifest's (``--slice-s``), else
    :func:`harness.metrics.slices.auto_slice_ns` (at most 60 slices over the longest pass)."""
    width = slice_s if slice_s is not None else run.manifest.get("slice_s")
    if isinstance(width, int | float) and width > 0:
        return max(1, round(float(width) * 1e9))
    return SL.auto_slice_ns(run.turns) if len(run.turns) else SL.AUTO_MIN_NS


def slice_table(run: Run, slice_s: float | None = None) -> pd.DataFrame:
    """Per transport and time slice: latency percentiles and throughput (docs/metrics.md,
    "Time slices"), warm-up rollouts dropped, transports in the registry's order."""
    if not len(run.turns):
        import pandas as pd  # pandas: only when a table is built

        return pd.DataFrame(columns=SL.columns())
    return SL.slice_table(
        run.turns,
        slice_width_ns(run, slice_s),
        warmup_rollouts=warmup_rollouts(run),
        transports=run_transports(run),
    )
