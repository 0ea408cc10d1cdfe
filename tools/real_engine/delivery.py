"""Whole and late deliveries per vLLM setting, side by side: ``python -m tools.real_engine.delivery``.

vLLM 0.32 on 2 CPUs delivered some responses whole, ~110 ms after the request, while its own
TTFT histogram said ~5 ms (docs/real-engine.md, "Why vLLM delivered whole responses").  This
runs loopbench's chat window against each setting (a placement of vLLM's processes, and vLLM's
own environment variables) and counts, per window, the turns whose answer came whole, the
turns vLLM's API server merged into one or two events, and the turns whose first token came
later than vLLM's own TTFT p99 allows.  Settings that differ only by placement share one
server and alternate round by round, so a busy machine weighs on each alike; there each
round places the processes afresh (``vllm`` resets the previous placement to the caller's
CPUs and nice 0), and a round whose placement did not take (lowering a niceness needs
CAP_SYS_NICE) is marked ``not applied`` in the table and the JSON rather than counted under
its setting's name.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from bench.options import options_from
from tools.real_engine import side_by_side
from tools.real_engine.compare import TTFT_BOUND_MS, Row, aligned, rank_quantile
from tools.real_engine.engine import PLACEMENTS, Placed, place, serving, stopping_vllm
from tools.real_engine.run import Options, prepare, warm_up
from tools.real_engine.side_by_side import ChatWindow

#: at most this many reads (or events) for a 128-token answer is a whole delivery
WHOLE_READS = 2


@dataclass(frozen=True)
class Setting:
    name: str
    placement: str
    env: Mapping[str, str] = field(default_factory=dict)


SETTINGS = {
    s.name: s
    for s in (
        Setting("vllm", "vllm"),
        Setting("core-niced", "core-niced"),
        Setting("engine-niced", "engine-niced"),
        Setting("group-niced", "group-niced"),
        Setting("core-with-worker", "core-with-worker"),
        # the worker unbound: the kernel spreads worker, engine core and API server over both
        Setting("nobind", "vllm", {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1"}),
    )
}


def deliveries(turns: Sequence[Mapping[str, str]], engine_p99_ms: float | None) -> dict[str, int]:
    """How the window's answers arrived: ``whole`` (in at most :data:`WHOLE_READS` reads),
    ``merged`` (vLLM sent at most that many events: its API server fell behind the engine and
    merged the outputs), ``late`` (the first token later than vLLM's own TTFT p99 over the
    window plus the front end's bound; -1 without that figure)."""
    late = -1
    if engine_p99_ms is not None:
        bound = engine_p99_ms + TTFT_BOUND_MS
        late = sum(1 for r in turns if (int(r["first_token_ns"]) - int(r["sent_ns"])) / 1e6 > bound)
    return {
        "turns": len(turns),
        "whole": sum(1 for r in turns if int(r["output_arrivals"] or 0) <= WHOLE_READS),
        "merged": sum(1 for r in turns if int(r["delta_events"] or 0) <= WHOLE_READS),
        "late": late,
    }


def _figure(rows: Sequence[Row], metric: str, stat: str) -> str:
    for r in rows:
        if r.metric == metric and r.stat == stat and r.client is not None:
            theirs = "-" if r.engine is None else f"{r.engine:.2f}"
            return f"{r.client:.2f} / {theirs}"
    return "-"


def run(opts: Options, names: Sequence[str], rounds: int) -> list[dict[str, object]]:
    ready = prepare(opts)
    groups: dict[tuple[tuple[str, str], ...], list[Setting]] = {}
    for name in names:
        s = SETTINGS[name]
        groups.setdefault(tuple(sorted(s.env.items())), []).append(s)
    found: list[dict[str, object]] = []
    for n, group in enumerate(groups.values()):
        log = opts.out / f"vllm-{n}.log"
        with serving(
            opts.engine_venv,
            ready.model,
            ready.hf_home,
            log,
            placement=group[0].placement,
            env=group[0].env,
        ) as engine:
            assert engine.proc is not None
            warm_up(opts, engine, "chat", ready.tokenizer, ready.scenarios)
            for r in range(1, rounds + 1):
                for s in group:
                    where = place(engine.proc.pid, s.placement, reset=True)
                    window = side_by_side.chat_window(opts, engine, ready, f"{s.name}+{r}")
                    found.append(_window(s, r, window, where))
                    print(json.dumps(found[-1]))
    return found


def _window(s: Setting, r: int, window: ChatWindow, where: Placed) -> dict[str, object]:
    rows = window.rows
    ttft = [(int(t["first_token_ns"]) - int(t["sent_ns"])) / 1e6 for t in window.turns]
    return {
        "setting": s.name if where.applied else f"{s.name} (not applied)",
        "applied": where.applied,
        "round": r,
        **deliveries(window.turns, window.engine_p99_ms),
        "ttft_p50": _figure(rows, "ttft_ms", "p50"),
        "ttft_p99": _figure(rows, "ttft_ms", "p99"),
        "itl_p50": _figure(rows, "itl_ms", "p50"),
        "tpot_p50": _figure(rows, "tpot_ms", "p50"),
        "ttft_max": round(max(ttft), 1) if ttft else None,
        "p90": rank_quantile(ttft, 0.9),
        "placement": where.text,
        "note": window.note,
    }


def render(found: Sequence[Mapping[str, object]]) -> str:
    head = ("setting", "round", "turns", "whole", "merged", "late")
    figures = ("ttft_p50", "ttft_p99", "itl_p50", "tpot_p50")
    shown = ("TTFT p50 lb / vLLM", "TTFT p99 lb / vLLM", "ITL p50 lb / vLLM", "TPOT p50 lb / vLLM")
    lines = [(*head, *shown)] + [tuple(str(w[k]) for k in (*head, *figures)) for w in found]
    return aligned(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = side_by_side.parser(
        "python -m tools.real_engine.delivery",
        __doc__,
        "results/real-engine-delivery",
        tuple(SETTINGS),
        rounds=2,
        requests=30,
    )
    args = p.parse_args(argv)
    opts, names = options_from(Options, args), args.settings
    assert set(s.placement for s in SETTINGS.values()) <= set(PLACEMENTS)
    return stopping_vllm(lambda: _measured(opts, names, args.rounds))


def _measured(opts: Options, names: Sequence[str], rounds: int) -> int:
    since = side_by_side.started()
    found = run(opts, names, rounds)
    side_by_side.finish(opts, "delivery.json", since, {"windows": found}, render(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
