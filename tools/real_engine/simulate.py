"""`make real-engine-sim`: the reference server, calibrated on vLLM, predicts vLLM (issue 38 item 4).

1. vLLM serves the tiny model (as `make real-engine` starts it); a warm-up outside every window.
2. **Fit pass**: loopbench runs the text scenario of the real-engine check (single-turn chat,
   the same shaping) against vLLM at each concurrency; ``loopbench calibrate`` fits one
   engine/API profile to those runs together (several concurrencies: the batching
   interference too).
3. **Judged pass**, level by level and back to back: the same scenario against vLLM again
   (fresh turns, not the ones fitted), then against the reference server started with the
   fitted profile.  Each figure (TTFT p50/p99, TPOT p50) of the simulated run is set beside
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
from tools.real_engine.engine import (
    Engine,
    add_placement,
    attached,
    build_model,
    serving,
    stopping_vllm,
)
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
#: a level's fit window and its judged window against vLLM, in this order at the first level,
#: the other way round at the next, and so on (:func:`paired_windows`)
FIT_FIRST = ("fit", "real")


def paired_windows(levels: Sequence[int]) -> list[tuple[int, tuple[str, str]]]:
    """Each level's two windows against vLLM, in the order they run: the window the profile
    is fitted to and the judged one side by side (distinct turns), which one comes first
    alternating level by level, so that vLLM's slow drift over the pass lands on the fitted
    and the judged side alike, not wholly on one (docs/real-engine.md, "Which placement
    repeats itself")."""
    return [(c, FIT_FIRST if i % 2 == 0 else FIT_FIRST[::-1]) for i, c in enumerate(levels)]


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


def _scenario(base: Options, c: int, server: dict[str, str] | None = None) -> dict[str, Any]:
    doc = text_scenario(replace(base, concurrency=c))
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
        unjudged_first: dict[int, str] = {}
        for c, order in paired_windows(opts.levels):

            def fit_and_real(c: int = c, order: tuple[str, str] = order) -> Path:
                fit_folder = runs / f"fit-c{c}"
                for stage in order:
                    if (runs / f"{stage}-c{c}").exists():  # a repeat after a busy attempt
                        shutil.rmtree(runs / f"{stage}-c{c}")
                    _, figures, engine_side = _real_window(base, engine, c, stage, tokenizer, say)
                    if stage == "fit":
                        again[c] = figures
                    else:
                        first["real"][c], first["engine"][c] = figures, engine_side
                return fit_folder

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
            engine_side: dict[int, Figures] = dict(first["engine"]) if r == 1 else {}
            simulated: dict[int, Figures] = {}
            unjudged: dict[int, str] = dict(unjudged_first) if r == 1 else {}
            for c in opts.levels:
                sim_scenario = scenarios / f"sim-c{c}.yaml"
                sim_scenario.write_text(yaml.safe_dump(_scenario(base, c, server), sort_keys=False))
                run_id = f"sim-c{c}{tag}"
                sim_argv = [sys.executable, "-m", "harness", "run", str(sim_scenario)]
                sim_argv += ["--transports", "chat", "--no-probe", "--out", str(runs)]
                sim_argv += ["--run-id", run_id, "-q"]

                def pair(
                    c: int = c,
                    sim_argv: list[str] = sim_argv,
                    run_id: str = run_id,
                    tag: str = tag,
                    r: int = r,
                    real: dict[int, Figures] = real,
                    engine_side: dict[int, Figures] = engine_side,
                    simulated: dict[int, Figures] = simulated,
                ) -> None:
                    """vLLM (from round 2), then the calibrated server (timed as one step)."""
                    for folder in (runs / f"real-c{c}{tag}", runs / run_id):
                        if r > 1 and folder.exists():  # a repeat after a busy attempt
                            shutil.rmtree(folder)
                    if (runs / run_id).exists():
                        shutil.rmtree(runs / run_id)
                    if r > 1:
                        _, real[c], engine_side[c] = _real_window(
                            base, engine, c, "real", tokenizer, say, tag
                        )
                    say(
                        f"reference server ({PROFILE}) at concurrency {c}: "
                        f"{opts.requests} rollouts ..."
                    )
                    rc, simulated[c], wall = _window(
                        sim_argv, runs / run_id, runs / f"{run_id}.log", opts.run_timeout_s
                    )
                    say(f"  exit {rc}, {wall:.1f} s")
                    if not simulated[c]:
                        notes.append(f"simulated run at concurrency {c}: exit {rc}, no summary")

                _, busy = until_quiet(pair, say, opts.attempts)
                if busy is not None:
                    busy_doc[f"{c}{tag}"] = busy.as_dict()
                    if busy.busy:
                        unjudged[c] = busy.not_judged()
                        say(f"  {unjudged[c]}")
            outcome.rows += compare_levels(
                opts.levels, real, engine_side, simulated, again, unjudged, r
            )
    outcome.doc = {
        **machine(t0, load0),
        "bound": BOUND,
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
) -> tuple[Path, Figures, Figures]:
    """One loopbench run against vLLM at concurrency ``c``, with vLLM's own figures over it."""
    runs, run_id = base.out / "runs", f"{stage}-c{c}{tag}"
    scenario = base.out / "scenarios" / f"{run_id}.yaml"
    scenario.write_text(yaml.safe_dump(_scenario(base, c), sort_keys=False))
    say(f"vLLM at concurrency {c} ({stage}): {base.requests} rollouts ...")
    before = engine.scrape()
    argv = loopbench_argv(scenario, engine, "chat", tokenizer, runs, run_id)
    rc, figures, wall = _window(argv, runs / run_id, runs / f"{run_id}.log", base.run_timeout_s)
    delta = settled(engine, before, base.requests).minus(before)
    say(f"  exit {rc}, {wall:.1f} s")
    return runs / run_id, figures, engine_figures(delta)


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
    p.add_argument("--requests", type=int, default=SimOptions.requests, help="per window")
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
