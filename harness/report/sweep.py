"""Sweeps: one run per value of a scenario field, and their combined report.

The runs themselves are started by :mod:`harness.run.sweep` (reports never import the runner);
this module parses the sweep, keeps its index (``sweep.json``, rewritten after every run so an
interrupted sweep still renders) and reports it.  The knee is Kneedle's (docs/metrics.md §5).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.report import analysis as A
from harness.report.document import Document, Heading, Image, Paragraph, Table
from harness.report.files import PLOTS_DIR, Rendered, fmt, write_report
from harness.report.plots import _figure, plot_style, save_figure, transport_color
from harness.report.results import FORMAT_VERSION, load_run, read_versioned_json, slug, write_index
from harness.wire.errors import LoopbenchError
from harness.wire.plural import counted

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

SWEEP_JSON = "sweep.json"
KNEE_MIN_BEND = 0.1
#: swept values growing by at least this factor per step are treated as geometric
GEOMETRIC_STEP = 1.5
#: the latency statistics of each run a sweep tabulates: (metric, statistic)
_LATENCIES = (
    ("rollout", "p50"),
    ("rollout", "p99"),
    ("TTFT", "p50"),
    ("TTFT", "p99"),
    ("turn", "p50"),
)
_RUN_COLUMNS = ("rollouts/s achieved", "failed turns", "valid", "run folder")


# -- pure helpers --------------------------------------------------------------------------------


def split_values(text: str) -> list[str]:
    """Split ``v1,v2,...`` at top-level commas; ``[a,b]`` / ``{k: v}`` stay one value."""
    values: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in text:
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth = max(0, depth - 1)
        if ch == "," and depth == 0:
            values.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    values.append("".join(cur).strip())
    return values


def parse_sweep_sets(items: Sequence[str]) -> tuple[str, list[str], dict[str, str]]:
    """``--set`` items -> (swept key, its values, fixed overrides).

    Exactly one key must have several values: a sweep draws one curve.
    """
    swept: list[tuple[str, list[str]]] = []
    fixed: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise LoopbenchError(
                f"--set {item!r}: expected KEY=V1,V2,..., e.g. load.concurrency=1,2,4"
            )
        values = split_values(value)
        if any(not v for v in values):
            raise LoopbenchError(f"--set {item!r}: expected non-empty values between commas")
        if len(values) > 1:
            swept.append((key, values))
        else:
            fixed[key] = values[0]
    if len(swept) != 1:
        got = ", ".join(k for k, _ in swept) or "none"
        raise LoopbenchError(
            f"--set: expected exactly one KEY with several comma-separated values, got {got}"
        )
    key, values = swept[0]
    if key in fixed:
        raise LoopbenchError(f"--set {key}: given twice")
    return key, values, fixed


def find_knee(x: Sequence[float], y: Sequence[float]) -> int | None:
    """Index (into ``x`` as given) of the knee of an increasing latency curve, or None."""
    xs = np.asarray(x, dtype=float)
    ys = np.asarray(y, dtype=float)
    if (
        len(xs) < 3
        or len(xs) != len(ys)
        or not (np.all(np.isfinite(xs)) and np.all(np.isfinite(ys)))
    ):
        return None
    order = np.argsort(xs, kind="stable")
    xs, ys = xs[order], ys[order]
    if xs[-1] == xs[0] or ys.max() == ys.min():
        return None
    if is_geometric(xs):
        # loads that double (1, 2, 4, 8, ...) are read on a log axis, as they are plotted
        xs = np.log(xs)
    xn = (xs - xs[0]) / (xs[-1] - xs[0])
    yn = (ys - ys.min()) / (ys.max() - ys.min())
    # chord from the first to the last point, in scaled units
    chord = yn[0] + (yn[-1] - yn[0]) * xn
    below = chord - yn
    i = int(np.argmax(below))
    if below[i] < KNEE_MIN_BEND:
        return None
    return int(order[i])


def is_geometric(x: Sequence[float] | np.ndarray) -> bool:
    """Positive values each at least :data:`GEOMETRIC_STEP` times the previous (sorted)."""
    xs = np.sort(np.asarray(x, dtype=float))
    return len(xs) >= 2 and xs[0] > 0 and bool(np.all(xs[1:] / xs[:-1] >= GEOMETRIC_STEP))


def numeric_values(values: Sequence[str]) -> list[float] | None:
    try:
        return [float(v) for v in values]
    except ValueError:
        return None


# -- the sweep index ----------------------------------------------------------------------------


def new_sweep_doc(
    sweep_id: str,
    scenario_path: str,
    scenario_name: str,
    key: str,
    values: Sequence[str],
    fixed: dict[str, str],
    transports: Sequence[str],
) -> dict[str, Any]:
    """The ``sweep.json`` document before the first run; ``runs`` grows as runs finish."""
    return {
        "format_version": FORMAT_VERSION,
        "sweep_id": sweep_id,
        "scenario_path": scenario_path,
        "scenario_name": scenario_name,
        "key": key,
        "values": list(values),
        "fixed": dict(fixed),
        "transports": list(transports),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "runs": [],
    }


def write_sweep_json(root: Path, doc: dict[str, Any]) -> None:
    """Write ``root/sweep.json`` atomically (a reader never sees half a file)."""
    write_index(root, SWEEP_JSON.removesuffix(".json"), doc)


def sweep_run_id(index: int, key: str, value: str) -> str:
    """``NN-<last part of key>-<value>``, e.g. ``02-concurrency-4``."""
    return f"{index:02d}-{slug(key.rsplit('.', 1)[-1], 'v')}-{slug(value, 'v')}"


# -- reading and reporting -----------------------------------------------------------------------


def is_sweep(path: str | Path) -> bool:
    return (Path(path) / SWEEP_JSON).is_file()


def load_sweep(path: str | Path) -> dict[str, Any]:
    return read_versioned_json(Path(path) / SWEEP_JSON)


def sweep_table(path: str | Path) -> pd.DataFrame:
    """One row per (value, transport) of a sweep's finished runs: latencies and achieved load."""
    import pandas as pd  # pandas: only when a sweep is tabulated

    root = Path(path)
    doc = load_sweep(root)
    rows = []
    for i, entry in enumerate(doc["runs"]):
        run_dir = root / entry["run_id"]
        if not (run_dir / "summary.json").exists():
            continue
        run = load_run(run_dir)
        summary = run.summary_model
        if summary is None:
            continue
        rollouts = A.rollout_table(run)
        for name in A.ordered_transports(summary.transports):
            t = summary.transports[name]
            r = rollouts[(rollouts["transport"] == name) & rollouts["ok"]]
            span_s = (
                (
                    r["end_ns"].max()
                    - r["intended_start_ns"].where(r["intended_start_ns"] > 0, r["start_ns"]).min()
                )
                / 1e9
                if len(r)
                else float("nan")
            )
            rows.append(
                {
                    "index": i,
                    "value": entry["value"],
                    "run_id": entry["run_id"],
                    "transport": name,
                    **{f"{m.lower()}_{q}_ms": t.stat(f"{m.lower()}_ms", q) for m, q in _LATENCIES},
                    "rollouts_per_s": len(r) / span_s if span_s and span_s > 0 else float("nan"),
                    # failed turns: the unit of the error rate a run is judged by (a failed
                    # rollout is one of its failed turns again)
                    "errors": t.turns.errors,
                    # None in summaries written before the SLO group existed
                    "slo_attainment": t.stat("slo", "rollout_attainment"),
                    "goodput_tps": t.stat("goodput", "goodput_tps"),
                    # the run's own verdict, by the rules every command applies
                    "valid": summary.valid is not False,
                }
            )
    return pd.DataFrame(rows)


def knees(table: pd.DataFrame, metric: str = "rollout_p50_ms") -> dict[str, int]:
    """Transport -> row index (in ``table``) of the knee of ``metric`` vs the swept value."""
    out: dict[str, int] = {}
    for name, g in table.groupby("transport", sort=False):
        x = numeric_values([str(v) for v in g["value"]])
        if x is None:
            continue
        k = find_knee(x, g[metric].astype(float).to_numpy())
        if k is not None:
            out[str(name)] = int(g.index[k])
    return out


def plot_latency_vs_load(table: pd.DataFrame, key: str, title_note: str = "") -> Figure | None:
    if table.empty:
        return None
    numeric = numeric_values([str(v) for v in table["value"]]) is not None
    fig, (ax_roll, ax_ttft) = _figure(12, 4.8, ncols=2)
    knee_rows = knees(table)
    order = list(dict.fromkeys(table["value"]))
    for i, name in enumerate(A.ordered_transports(table["transport"])):
        g = table[table["transport"] == name]
        x = g["value"].astype(float) if numeric else g["value"].map(order.index)
        color = transport_color(name, i)
        for ax, metric, scale in ((ax_roll, "rollout", 1000), (ax_ttft, "ttft", 1)):
            y50, y99 = (g[f"{metric}_{q}_ms"] / scale for q in ("p50", "p99"))
            ax.plot(x, y50, color=color, marker="o", lw=2, label=f"{name} p50")
            ax.plot(x, y99, color=color, marker=".", lw=1, ls="--", label=f"{name} p99")
        if name in knee_rows:
            row = table.loc[knee_rows[name]]
            kx = float(row["value"])
            ky = float(row["rollout_p50_ms"]) / 1000
            ax_roll.scatter([kx], [ky], s=220, facecolors="none", edgecolors=color, lw=2, zorder=5)
            ax_roll.annotate(
                f"knee: {key.rsplit('.', 1)[-1]}={row['value']}",
                (kx, ky),
                xytext=(8, 12),
                textcoords="offset points",
                color=color,
                fontsize=9,
            )
    xvals = numeric_values([str(v) for v in order]) if numeric else None
    for ax in (ax_roll, ax_ttft):
        ax.set_xlabel(f"{key} (offered load)")
        if xvals is not None and is_geometric(xvals):
            ax.set_xscale("log")
            ax.set_xticks(xvals, [str(v) for v in order])
            ax.minorticks_off()
        ax.set_ylim(bottom=0)
        ax.legend(loc="best", fontsize=8)
        if not numeric:
            ax.set_xticks(range(len(order)), order)
    ax_roll.set_ylabel("rollout latency (s)")
    ax_roll.set_title("rollout latency (ring: knee)")
    ax_ttft.set_ylabel("time to first token (ms)")
    ax_ttft.set_title("TTFT")
    fig.suptitle("Latency vs offered load")
    if title_note:
        fig.supxlabel(title_note, fontsize=8, color="#555555")
    return fig


# -- the goodput search (harness/run/goodput.py) ----------------------------------------------------


def _load_text(load: float | None, search: dict[str, Any]) -> str:
    if load is None:
        return "n/a"
    return str(int(load)) if search.get("integer") else f"{load:g}"


def search_answer_line(doc: dict[str, Any]) -> str:
    """``ws sustains 8 agents at 99 % within SLO (ttft ≤ 300 ms), http 4`` and its caveats."""
    search = doc.get("search") or {}
    answers = search.get("answers") or {}
    if not answers:
        return "goodput search: no transport searched"
    unit = search.get("unit", "")
    target = f"{search.get('target', 0) * 100:g} %"
    slo = search.get("slo") or {}
    rule = ", ".join(f"{k.removesuffix('_ms')} ≤ {v:g} ms" for k, v in slo.items()) or (
        "no thresholds: success only"
    )
    parts = []
    notes = []
    for i, (name, a) in enumerate(answers.items()):
        load = a.get("load")
        if load is None:
            text = f"none down to {_load_text(a.get('lowest_fail'), search)}"
        else:
            text = ("at least " if a.get("at_max_load") else "") + _load_text(load, search)
        parts.append(
            f"{name} sustains {text} {unit} at {target} within SLO ({rule})"
            if i == 0
            else f"{name} {text}"
        )
        if a.get("confidence") not in (None, "confident pass"):
            notes.append(f"{name}'s pass is {a.get('confidence')}")
        if not a.get("converged", True):
            notes.append(f"{name}: step budget spent before the bracket closed")
        invalid = [
            _load_text(s["load"], search)
            for s in search.get("steps") or []
            if s["transport"] == name and not s.get("valid", True)
        ]
        if invalid:
            notes.append(f"{name}'s runs at {', '.join(invalid)} were INVALID (see their reports)")
    line = ", ".join(parts)
    return line + (f" ({'; '.join(notes)})" if notes else "")


def search_steps_rows(doc: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    search = doc.get("search") or {}
    headers = [
        "transport",
        search.get("param", "load"),
        "rollouts in SLO",
        "95 % CI",
        "turns in SLO",
        "good rollouts/s",
        "goodput tok/s",
        "confidence",
        "step",
        "valid",
        "run folder",
    ]
    rows = []
    for s in search.get("steps") or []:
        lo, hi = s.get("ci95") or [None, None]
        att = s.get("attainment")
        rows.append(
            [
                s["transport"],
                _load_text(s["load"], search),
                "n/a"
                if att is None
                else f"{att * 100:.1f} % ({s['good_rollouts']}/{s['rollouts']})",
                "n/a" if lo is None else f"{lo * 100:.1f}–{hi * 100:.1f} %",
                fmt(
                    s["turn_attainment"] * 100 if s.get("turn_attainment") is not None else None, 1
                ),
                fmt(s.get("good_rollouts_per_s"), 2),
                fmt(s.get("goodput_tps"), 0),
                s.get("confidence", ""),
                "pass" if s.get("passed") else "fail",
                "yes" if s.get("valid", True) else "NO",
                s["run_id"],
            ]
        )
    return headers, rows


def plot_attainment_vs_load(doc: dict[str, Any]) -> Figure | None:
    search = doc.get("search") or {}
    steps = search.get("steps") or []
    if not steps:
        return None
    fig, (ax,) = _figure(8, 4.8, ncols=1)
    names = list(dict.fromkeys(s["transport"] for s in steps))
    for i, name in enumerate(A.ordered_transports(names)):
        pts = sorted(
            (s for s in steps if s["transport"] == name and s.get("attainment") is not None),
            key=lambda s: s["load"],
        )
        if not pts:
            continue
        x = [s["load"] for s in pts]
        y = [s["attainment"] * 100 for s in pts]
        lo = [
            y_ - (s["ci95"][0] * 100 if s["ci95"][0] is not None else y_)
            for s, y_ in zip(pts, y, strict=True)
        ]
        hi = [
            (s["ci95"][1] * 100 if s["ci95"][1] is not None else y_) - y_
            for s, y_ in zip(pts, y, strict=True)
        ]
        color = transport_color(name, i)
        ax.errorbar(x, y, yerr=[lo, hi], color=color, marker="o", lw=2, capsize=4, label=name)
        best = (search.get("answers") or {}).get(name, {}).get("load")
        if best is not None:
            ax.axvline(best, color=color, ls=":", lw=1)
    ax.axhline(search.get("target", 0.99) * 100, color="#555555", ls="--", lw=1, label="target")
    ax.set_xlabel(f"{search.get('param', 'load')} (offered load)")
    ax.set_ylabel("rollouts within SLO (%)")
    xs = sorted({s["load"] for s in steps})
    if is_geometric(xs) or (len(xs) > 2 and xs[0] > 0 and xs[-1] / xs[0] >= 8):
        ax.set_xscale("log", base=2)
        # bisection packs loads close together: label only those a readable distance apart
        ticks: list[float] = []
        for x in xs:
            if not ticks or x >= ticks[-1] * 1.12:
                ticks.append(x)
        ax.set_xticks(ticks, [_load_text(x, search) for x in ticks])
        ax.minorticks_off()
    ax.set_ylim(top=101)
    ax.legend(loc="best", fontsize=8)
    ax.set_title("SLO attainment vs offered load (bars: Wilson 95 % CI; dotted: the answer)")
    return fig


def _search_blocks(doc_json: dict[str, Any], root: Path, plot_paths: list[Path]) -> list[Any]:
    search = doc_json["search"]
    with plot_style():
        fig = plot_attainment_vs_load(doc_json)
    blocks: list[Any] = [Heading("Goodput search"), Paragraph(search_answer_line(doc_json) + ".")]
    headers, rows = search_steps_rows(doc_json)
    blocks.append(
        Table(
            headers,
            rows,
            align="llrrrrrllll",
            caption="Each step is one run. A step passes when "
            + (
                "its attainment reaches the target"
                if search.get("pass_rule") == "point"
                else "the lower bound of its attainment's 95 % interval reaches the target"
            )
            + "; confidence says where the Wilson 95 % interval lies against the target "
            "(within noise: it straddles it). Bracketing doubles the load from "
            f"{search.get('start')} up to {search.get('max_load')}, then bisection; at most "
            f"{search.get('max_steps')} steps per transport.",
        )
    )
    if fig is not None:
        path = save_figure(fig, root / PLOTS_DIR / "attainment_vs_load.png")
        plot_paths.append(path)
        blocks.append(
            Image(
                f"{PLOTS_DIR}/{path.name}",
                "SLO attainment vs offered load",
                "Share of rollouts within the SLO per transport against the load, with each "
                "step's Wilson 95 % interval; the dashed line is the target.",
            )
        )
    return blocks


def render_sweep(path: str | Path) -> Rendered:
    """Write the combined ``report.md``, ``report.html`` and ``plots/latency_vs_load.png``."""
    root = Path(path)
    doc_json = load_sweep(root)
    key = doc_json["key"]
    table = sweep_table(root)
    (root / PLOTS_DIR).mkdir(exist_ok=True)
    with plot_style():
        fig = plot_latency_vs_load(
            table,
            key,
            f"sweep {doc_json['sweep_id']} · scenario {doc_json.get('scenario_name', '?')}",
        )
    latency_plot = (
        None if fig is None else save_figure(fig, root / PLOTS_DIR / "latency_vs_load.png")
    )
    plot_paths = [] if latency_plot is None else [latency_plot]

    doc = Document(f"loopbench sweep — {doc_json['sweep_id']}")
    if doc_json.get("search"):
        doc.add(*_search_blocks(doc_json, root, plot_paths))
    fixed = ", ".join(f"{k}={v}" for k, v in doc_json.get("fixed", {}).items())
    doc.add(
        Paragraph(
            f"Scenario {doc_json.get('scenario_name', '?')} ({doc_json.get('scenario_path', '')}), "
            f"swept {key} over {', '.join(doc_json['values'])}"
            + (f"; fixed {fixed}" if fixed else "")
            + f". {len(doc_json['runs'])} of {counted(len(doc_json['values']), 'run')} done."
        )
    )
    knee_rows = knees(table) if not table.empty else {}
    if knee_rows:
        doc.add(
            Paragraph(
                "Knee (rollout p50): "
                + "; ".join(f"{t} at {key}={table.loc[i, 'value']}" for t, i in knee_rows.items())
                + " — beyond it latency grows faster than the load."
            )
        )
    elif not table.empty:
        doc.add(
            Paragraph(
                "No knee: latency grows about linearly (or not at all) over this range.",
                kind="note",
            )
        )
    if not table.empty:
        rows = [
            [
                str(r.value),
                r.transport,
                *(fmt(getattr(r, f"{m.lower()}_{q}_ms")) for m, q in _LATENCIES),
                fmt(r.rollouts_per_s, 2),
                str(r.errors),
                ("yes" if r.valid else "NO")
                + (" (knee)" if knee_rows.get(r.transport) == idx else ""),
                r.run_id,
            ]
            for idx, r in table.iterrows()
        ]
        doc.add(
            Heading("Results per value"),
            Table(
                [key, "transport", *(f"{m} {q} ms" for m, q in _LATENCIES), *_RUN_COLUMNS],
                rows,
                align="llrrrrrrrll",
                caption="Each run folder holds its own full report.html.",
            ),
        )
    if latency_plot is not None:
        doc.add(
            Heading("Latency vs offered load"),
            Image(
                f"{PLOTS_DIR}/{latency_plot.name}",
                "latency vs offered load",
                "Rollout latency (left) and TTFT (right) per transport against the swept value; solid "
                "p50, dashed p99. The ring marks the knee: the last load before latency turns steep.",
            ),
        )
    md, page = write_report(doc, root)
    return Rendered(md, page, plot_paths)
