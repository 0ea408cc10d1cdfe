"""`make real-engine-sim`: the reference server, calibrated on vLLM, predicts vLLM (issue 38 item 4).

1. vLLM serves the tiny model (as `make real-engine` starts it); a warm-up outside every window.
2. **Fit and judged turns**, level by level: the text scenario of the real-engine check
   (single-turn chat, the same shaping) against vLLM, each side's turns in ``--blocks``
   blocks run ABBA (fit, judged, judged, fit, …; tools/real_engine/blocks.py), so both
   sides sample the same vLLM and a linear drift cancels.  Each side's blocks are pooled:
   ``loopbench calibrate`` fits one engine/API profile to the pooled fit turns of every
   level together (several concurrencies: the batching interference too); the judged
   figures are those of the pooled judged turns, with their sampling spread (a bootstrap).
3. **Simulated**, level by level: the reference server started with the fitted profile,
   one run of the same number of turns.  Each figure (TTFT p50/p99, TPOT p50) is set beside
   the real one; a ratio off by more than 15 % is a miss (exit 3 with ``--check``).

The simulated runs send the length hints (the reference server honours them; vLLM gets its
own shaping, ``ignore_eos`` and the token limits), so both sides answer the planned length.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from bench.cli_args import positive_ints
from bench.options import options_from
from bench.peers.bench import timed
from bench.selfbench.busy import BUSY_ATTEMPTS, until_quiet
from harness.wire.errors import LoopbenchError
from harness.wire.exit_codes import ExitCode, UsageParser
from tools.real_engine.blocks import (
    SIDES,
    block_sizes,
    halves,
    level_blocks,
    pool,
    pooled_snapshot,
    ratios,
    side_turns,
    spreads,
)
from tools.real_engine.engine import (
    Engine,
    add_placement,
    attached,
    build_model,
    serving,
    stopping_vllm,
)
from tools.real_engine.engine_metrics import Snapshot
from tools.real_engine.run import (
    Options,
    fresh_out,
    loopbench_argv,
    machine,
    print_outcome,
    settled,
    text_scenario,
    warm_up,
    write_outcome,
)
from tools.real_engine.sim_table import (
    BOUND,
    Figures,
    SimRow,
    compare_levels,
    engine_figures,
    missed,
    render,
    summary_figures,
)

LEVELS = (1, 2, 4)
PROFILE = "vllm-cpu"
#: where vLLM runs for the sim (engine.PLACEMENTS): the placement under which vLLM repeated
#: itself best between two windows of the same level (docs/real-engine.md, "Which placement
#: repeats itself"); `make real-engine` keeps engine.PLACEMENT, chosen for the clients' reads
SIM_PLACEMENT = "pinned"
#: turns per window: a p99 of 60 is the slowest turn or two; 120 keeps the command under ~6 min
SIM_REQUESTS = 120
#: each side's turns of a level in this many blocks, run ABBA (tools/real_engine/blocks.py):
#: two windows of one block each sampled two states of vLLM minutes apart
BLOCKS = 4
#: a level's blocks take seeds ``text_scenario``'s + this × c + block: apart from every other
#: level's and from the warm-up's (the text scenario's own seed)
SEEDS_PER_LEVEL = 100


@dataclass(frozen=True)
class SimOptions:
    out: Path = Path("results/real-engine-sim")
    engine_venv: Path = Path(".venv-engine")
    engine_url: str | None = None
    placement: str = SIM_PLACEMENT  # where vLLM's processes run (engine.PLACEMENTS)
    levels: tuple[int, ...] = LEVELS
    requests: int = SIM_REQUESTS  # per window
    output_tokens: int = 128
    run_timeout_s: float = 300.0
    #: a level's pair of runs is repeated while other processes kept the machine busy, at
    #: most this many times in all; then its figures are not judged (bench/selfbench/busy.py)
    attempts: int = BUSY_ATTEMPTS
    #: the judged pass this many times over (vLLM and the simulator alternating level by level
    #: in each): how far vLLM strays from itself between rounds shows beside every ratio
    rounds: int = 1
    #: each side's ``requests`` turns of a level in this many blocks, run ABBA
    blocks: int = BLOCKS


@dataclass
class SimOutcome:
    rows: list[SimRow] = field(default_factory=list)
    doc: dict[str, Any] = field(default_factory=dict)
    calibration: str = ""


def _window(
    argv: list[str], folder: Path, log: Path, timeout_s: float
) -> tuple[int, Figures, float]:
    """Run one loopbench window; its exit code, judged figures and wall time."""
    rc, wall, _ = timed(argv, env=dict(os.environ), log=log, timeout_s=timeout_s)
    summary = folder / "summary.json"
    if not summary.exists():
        return rc, {}, wall
    return rc, summary_figures(json.loads(summary.read_text()), "chat"), wall


def _scenario(
    base: Options, c: int, server: dict[str, str] | None = None, block: int = 0
) -> dict[str, Any]:
    """The text scenario at concurrency ``c``; block ``block`` (from 0) of a side draws other
    prompts than the side's earlier blocks and than every other level's, as the rollouts of one
    long window would (a repeated seed would send prompts vLLM's prefix cache already holds,
    while each simulated block starts with an empty cache)."""
    doc = text_scenario(replace(base, concurrency=c))
    doc["seed"] += SEEDS_PER_LEVEL * c + block
    if server:
        doc["server"] = server
    return doc


def run_sim(opts: SimOptions, say: Callable[[str], None] = print) -> SimOutcome:
    outcome = SimOutcome()
    out = opts.out
    fresh_out(out)
    runs, scenarios, profile = out / "runs", out / "scenarios", out / "profile"
    for folder in (runs, scenarios):
        folder.mkdir()
    t0 = time.perf_counter()
    load0 = os.getloadavg()
    # the real-engine run's options the two share (out, engine, requests, tokens, timeout)
    base = options_from(Options, opts)
    say("building the tiny Llama (random weights, local BPE tokenizer) ...")
    hf_home = out / "hf"
    model = build_model(opts.engine_venv, out / "model", hf_home, out / "build.log")
    tokenizer = model / "tokenizer.json"
    running = (
        attached(opts.engine_url)
        if opts.engine_url
        else serving(opts.engine_venv, model, hf_home, out / "vllm.log", placement=base.placement)
    )
    again: dict[int, Figures] = {}
    busy_doc: dict[str, dict[str, float | bool]] = {}
    notes: list[str] = []
    with running as engine:
        say(f"{engine.name} answers at {engine.api} after {time.perf_counter() - t0:.0f} s")
        if engine.placement:
            notes.append(engine.placement)
        warm_up(base, engine, "chat", tokenizer, scenarios)
        fitted: list[Path] = []
        first: dict[str, dict[int, Figures]] = {"real": {}, "engine": {}}
        spread_first: dict[int, Figures] = {}
        one_window: dict[int, Figures] = {}
        unjudged_first: dict[int, str] = {}
        sizes = block_sizes(opts.requests, opts.blocks)
        for c, order in level_blocks(opts.levels, opts.blocks):

            def fit_and_real(c: int = c, order: list[str] = order) -> Path:
                """The level's blocks in ``order``, then each side's turns pooled."""
                folders: dict[str, list[Path]] = {side: [] for side in SIDES}
                ran: list[Path] = []
                deltas: list[Snapshot] = []
                for stage in order:
                    n = len(folders[stage])
                    folder, delta = _real_window(
                        replace(base, requests=sizes[n]),
                        engine,
                        c,
                        stage,
                        tokenizer,
                        say,
                        f"-b{n + 1}",
                        n,
                    )
                    folders[stage].append(folder)
                    ran.append(folder)
                    if stage == "real":
                        deltas.append(delta)
                pooled = {side: runs / f"{side}-c{c}" for side in SIDES}
                again[c] = pool(folders["fit"], pooled["fit"])
                first["real"][c] = pool(folders["real"], pooled["real"])
                first["engine"][c] = engine_figures(pooled_snapshot(deltas))
                spread_first[c] = spreads(side_turns(folders, "real"))
                # the old design over the same turns: one window a side, back to back
                old = halves(order, ran)
                one_window[c] = ratios(
                    pool(old["fit"], runs / "one-window" / f"fit-c{c}"),
                    pool(old["real"], runs / "one-window" / f"real-c{c}"),
                )
                return pooled["fit"]

            folder, busy = until_quiet(fit_and_real, say, opts.attempts)
            fitted.append(folder)
            if busy is not None:
                busy_doc[f"fit-{c}"] = busy.as_dict()
                if busy.busy:
                    unjudged_first[c] = busy.not_judged()
                    say(f"  {unjudged_first[c]}")
        say(f"loopbench calibrate on {len(fitted)} runs ...")
        argv = [sys.executable, "-m", "harness", "calibrate", *map(str, fitted)]
        argv += ["--name", PROFILE, "--out", str(profile), "--transports", "chat"]
        rc, _, _ = timed(argv, env=dict(os.environ), log=out / "calibrate.txt", timeout_s=120)
        outcome.calibration = (out / "calibrate.txt").read_text()
        api_yaml, engine_yaml = profile / f"api-{PROFILE}.yaml", profile / f"engine-{PROFILE}.yaml"
        if rc != 0 or not engine_yaml.exists():
            raise LoopbenchError(
                f"loopbench calibrate failed (exit {rc}); see {out / 'calibrate.txt'}"
            )
        server = {
            "api_profile": str(api_yaml.resolve()),
            "engine_profile": str(engine_yaml.resolve()),
        }
        for r in range(1, opts.rounds + 1):
            # round 1 judges the real windows measured beside the fit ones; each further
            # round measures vLLM again, then the simulator, level by level
            tag = "" if opts.rounds == 1 else f"-r{r}"
            real: dict[int, Figures] = dict(first["real"]) if r == 1 else {}
            spread: dict[int, Figures] = dict(spread_first) if r == 1 else {}
            engine_side: dict[int, Figures] = dict(first["engine"]) if r == 1 else {}
            simulated: dict[int, Figures] = {}
            unjudged: dict[int, str] = dict(unjudged_first) if r == 1 else {}
            for c in opts.levels:

                def pair(
                    c: int = c,
                    tag: str = tag,
                    r: int = r,
                    real: dict[int, Figures] = real,
                    engine_side: dict[int, Figures] = engine_side,
                    simulated: dict[int, Figures] = simulated,
                    spread: dict[int, Figures] = spread,
                ) -> None:
                    """vLLM (from round 2), then the calibrated server (timed as one step),
                    each in the blocks of the fit pass, pooled."""
                    if r > 1:
                        blocks = [
                            _real_window(
                                replace(base, requests=n),
                                engine,
                                c,
                                "real",
                                tokenizer,
                                say,
                                f"{tag}-b{i + 1}",
                                i,
                            )
                            for i, n in enumerate(sizes)
                        ]
                        folders = [folder for folder, _ in blocks]
                        real[c] = pool(folders, runs / f"real-c{c}{tag}")
                        engine_side[c] = engine_figures(pooled_snapshot([d for _, d in blocks]))
                        spread[c] = spreads(side_turns({"real": folders}, "real"))
                    say(
                        f"reference server ({PROFILE}) at concurrency {c}: {opts.requests} rollouts ..."
                    )
                    sims = []
                    for i, n in enumerate(sizes):
                        run_id = f"sim-c{c}{tag}-b{i + 1}"
                        scenario = scenarios / f"{run_id}.yaml"
                        doc = _scenario(replace(base, requests=n), c, server, i)
                        scenario.write_text(yaml.safe_dump(doc, sort_keys=False))
                        argv = [sys.executable, "-m", "harness", "run", str(scenario)]
                        argv += ["--transports", "chat", "--no-probe", "--no-report"]
                        argv += ["--out", str(runs), "--run-id", run_id, "-q"]
                        if (runs / run_id).exists():  # a repeat after a busy attempt
                            shutil.rmtree(runs / run_id)
                        rc, _, wall = _window(
                            argv, runs / run_id, runs / f"{run_id}.log", opts.run_timeout_s
                        )
                        say(f"  block {i + 1}: exit {rc}, {wall:.1f} s")
                        if not (runs / run_id / "summary.json").exists():
                            notes.append(f"simulated run at concurrency {c}: exit {rc}, no summary")
                            simulated[c] = {}
                            return
                        sims.append(runs / run_id)
                    simulated[c] = pool(sims, runs / f"sim-c{c}{tag}")

                _, busy = until_quiet(pair, say, opts.attempts)
                if busy is not None:
                    busy_doc[f"{c}{tag}"] = busy.as_dict()
                    if busy.busy:
                        unjudged[c] = busy.not_judged()
                        say(f"  {unjudged[c]}")
            outcome.rows += compare_levels(
                opts.levels,
                real,
                engine_side,
                simulated,
                again,
                unjudged,
                r,
                spread,
                one_window if r == 1 else {},
            )
    outcome.doc = {
        **machine(t0, load0),
        "bound": BOUND,
        "blocks": opts.blocks,
        "busy": busy_doc,
        "rows": [{**r.__dict__, "ratio": r.ratio, "ok": r.ok} for r in outcome.rows],
        "notes": notes,
        "profile": {
            "api": yaml.safe_load(api_yaml.read_text()),
            "engine": yaml.safe_load(engine_yaml.read_text()),
        },
    }
    write_outcome(out, "real-engine-sim.json", outcome.doc, render(outcome.rows))
    return outcome


def _real_window(
    base: Options,
    engine: Engine,
    c: int,
    stage: str,
    tokenizer: Path,
    say: Callable[[str], None],
    tag: str = "",
    block: int = 0,
) -> tuple[Path, Snapshot]:
    """One loopbench run of ``base.requests`` turns against vLLM at concurrency ``c``; its
    folder and vLLM's own counts over it (a scrape difference)."""
    runs, run_id = base.out / "runs", f"{stage}-c{c}{tag}"
    if (runs / run_id).exists():  # a repeat after a busy attempt
        shutil.rmtree(runs / run_id)
    scenario = base.out / "scenarios" / f"{run_id}.yaml"
    scenario.write_text(yaml.safe_dump(_scenario(base, c, block=block), sort_keys=False))
    say(f"vLLM at concurrency {c} ({stage}{tag}): {base.requests} rollouts ...")
    before = engine.scrape()
    # the report is rendered later if wanted (`loopbench report DIR`): its plots cost seconds
    # per window, and the blocks are many
    argv = [*loopbench_argv(scenario, engine, "chat", tokenizer, runs, run_id), "--no-report"]
    rc, _, wall = _window(argv, runs / run_id, runs / f"{run_id}.log", base.run_timeout_s)
    delta = settled(engine, before, base.requests).minus(before)
    say(f"  exit {rc}, {wall:.1f} s")
    return runs / run_id, delta


def main(argv: Sequence[str] | None = None) -> int:
    p = UsageParser(
        prog="python -m tools.real_engine.simulate",
        description="Calibrate the reference server on loopbench runs against vLLM at several "
        "concurrencies, then run the same scenario against vLLM and the calibrated server, "
        "level by level, and set TTFT p50/p99 and TPOT p50 side by side (docs/model.md §16).",
    )
    p.add_argument("--out", type=Path, default=SimOptions.out, help="emptied first")
    p.add_argument("--engine-venv", type=Path, default=SimOptions.engine_venv)
    p.add_argument("--engine-url", default=None, help="an engine already running (see run.py)")
    add_placement(p, SIM_PLACEMENT)
    p.add_argument(
        "--levels",
        type=positive_ints("concurrencies like 1,2,4"),
        default=LEVELS,
        help="concurrencies (1,2,4)",
    )
    p.add_argument("--requests", type=int, default=SimOptions.requests, help="per side and level")
    p.add_argument(
        "--blocks",
        type=int,
        default=SimOptions.blocks,
        help=f"each side's turns of a level in this many blocks, run ABBA (default {BLOCKS})",
    )
    p.add_argument("--output-tokens", type=int, default=SimOptions.output_tokens)
    p.add_argument(
        "--attempts",
        type=int,
        default=BUSY_ATTEMPTS,
        help="runs of a level while the machine is busy with other work, before its figures "
        f"are left unjudged (default {BUSY_ATTEMPTS})",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=SimOptions.rounds,
        help="the judged pass this many times (each: vLLM, then the simulator, level by level; "
        "default 1); every round's figures are listed and judged",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help=f"exit {int(ExitCode.INVALID)} when a simulated figure is off the real one by "
        f"more than {BOUND * 100:g} %%",
    )
    args = p.parse_args(argv)
    if not 1 <= args.blocks <= args.requests:
        p.error(f"--blocks: expected 1 to --requests ({args.requests}), got {args.blocks}")
    opts = options_from(
        SimOptions, args, attempts=max(1, args.attempts), rounds=max(1, args.rounds)
    )
    return stopping_vllm(lambda: _measured(opts, args.check))


def _measured(opts: SimOptions, check: bool) -> int:
    outcome = run_sim(opts)
    print()
    print(outcome.calibration.strip())
    print_outcome(render(outcome.rows), outcome.doc, opts.out, outcome.doc["notes"])
    misses = missed(outcome.rows)
    if misses:
        unjudged = sum(bool(r.not_judged) for r in misses)
        print(
            f"{len(misses) - unjudged} of {len(outcome.rows)} figures off by more than "
            f"{BOUND:.0%} or without a figure; {unjudged} not judged (the machine was busy)"
        )
        if check:
            return int(ExitCode.INVALID)
    return int(ExitCode.OK)


if __name__ == "__main__":
    raise SystemExit(main())
