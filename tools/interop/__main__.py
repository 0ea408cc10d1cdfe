"""``make interop``: the real agents against the reference server, directly, recorded, replayed.

For each case (tools/interop/cases.py) and each repetition: the agent's session against a
reference server on loopback (``direct``), the same through ``loopbench record``
(``record``), and the trace that recording wrote replayed by ``loopbench run TRACE``
(``replay``).  Prints one table row per case and mode; exits 3 on any failure (a run that
ended in an error, an error answer, a session that was not a multi-turn tool loop, a
WebSocket agent that fell back to HTTP, a recording that is not one rollout, a replay whose
turns or tokens differ from the recording by more than 5 %).  Loopback only, every run
bounded in time.  docs/agents.md says what each agent is configured with.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from harness.run.embedded import embedded_server
from harness.wire.errors import LoopbenchError
from harness.wire.exit_codes import ExitCode
from tools.interop import npm_agents
from tools.interop.cases import CASES, Case, run_case
from tools.interop.counts import ServerCounts, scrape
from tools.interop.record_replay import (
    RecorderError,
    compare,
    recorded,
    recording,
    recording_problems,
    replay,
)
from tools.interop.table import Row, Tally, render

MODES = ("direct", "record", "replay")
NPM_AGENTS = ("Codex CLI", "Claude Code")


@contextmanager
def _server_for(case: Case, shared: str) -> Iterator[str]:
    """The run's server, or for a case with server options a server of its own (fresh for
    each session: its faults count from zero)."""
    if not case.server_args:
        yield shared
        return
    with embedded_server(extra_args=case.server_args) as url:
        yield url


def _server_problems(case: Case, seen: ServerCounts) -> list[str]:
    out = []
    if seen.errors or seen.failed:
        out.append(f"server answered {seen.errors} errors, {seen.failed} failed responses")
    if seen.ws_refused:
        out.append(f"{seen.ws_refused} WebSocket handshakes refused")
    if case.websocket and (not seen.ws_opened or seen.responses_posts):
        out.append(f"not on WebSocket: {seen.responses_posts} HTTP POSTs to /v1/responses")
    if seen.completed + seen.incomplete < 2:
        out.append(f"{seen.completed + seen.incomplete} model turns: not a multi-turn tool loop")
    return out


def _session(
    case: Case, url: str, upstream: str, work: Path, agents: npm_agents.Installed | None, t: float
) -> tuple[list[str], int]:
    """(problems, model turns the server completed) of one agent session at ``url``."""
    before = scrape(upstream)
    run = run_case(case, url, work, agents, t)
    seen = scrape(upstream) - before
    problems = [run.problem] if run.problem else []
    if run.returncode != 0 and not run.problem:
        problems.append(f"agent exited {run.returncode}")
    return problems + _server_problems(case, seen), seen.completed + seen.incomplete


def run_all(
    cases: Sequence[Case], modes: Sequence[str], repeat: int, work: Path, timeout_s: float
) -> list[Row]:
    agents = None
    if any(c.agent in NPM_AGENTS for c in cases):
        agents = npm_agents.ensure_agents(Path(".agents").resolve(), work / "npm-install.log")
    tallies = {(c.name, m): Tally() for c in cases for m in modes}
    clock = [time.monotonic()]

    def add(case: Case, mode: str, problems: list[str], turns: int) -> None:
        tallies[(case.name, mode)].add(problems, turns)
        now = time.monotonic()
        verdict = "ok" if not problems else "FAILED: " + "; ".join(problems)
        print(
            f"{case.name} {mode}: {turns} turns, {now - clock[0]:.1f} s, {verdict}", file=sys.stderr
        )
        clock[0] = now

    with embedded_server() as url:
        for rep in range(repeat):
            for case in cases:
                here = work / f"{case.name}-{rep}"
                if "direct" in modes:
                    with _server_for(case, url) as upstream:
                        problems, turns = _session(
                            case, upstream, upstream, here / "direct", agents, timeout_s
                        )
                    add(case, "direct", problems, turns)
                if "record" not in modes and "replay" not in modes:
                    continue
                here.mkdir(parents=True, exist_ok=True)
                trace = here / "trace.jsonl"
                try:
                    with _server_for(case, url) as upstream, recording(upstream, trace) as rec:
                        problems, _ = _session(
                            case, rec.url, upstream, here / "record", agents, timeout_s
                        )
                    if (problem := rec.problem()) is not None:
                        problems.append(problem)
                except RecorderError as exc:
                    problems = [str(exc)]
                got = None
                try:
                    got = recorded(trace)
                except (OSError, LoopbenchError) as exc:
                    problems.append(f"trace not readable: {exc}")
                if got is not None:
                    problems += recording_problems(case, got)
                if "record" in modes:
                    add(case, "record", problems, got.turns if got else 0)
                if "replay" in modes:
                    if got is None or problems:
                        add(case, "replay", ["nothing recorded to replay"], 0)
                        continue
                    rep_run = replay(trace, case.replay, here / "replay", timeout_s)
                    add(case, "replay", compare(got, rep_run), rep_run.turns)
    return [Row(c, m, tallies[(c.name, m)]) for c in cases for m in modes]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    names = [c.name for c in CASES]
    p = argparse.ArgumentParser(prog="python -m tools.interop", description=__doc__)
    p.add_argument("--repeat", type=int, default=1, help="sessions per case and mode (default 1)")
    p.add_argument(
        "--only", default="", help=f"comma-separated cases (default all: {','.join(names)})"
    )
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated: direct,record,replay")
    p.add_argument("--timeout-s", type=float, default=180.0, help="bound of one session (s)")
    p.add_argument("--work", default="results/interop", help="scratch folder (emptied first)")
    args = p.parse_args(argv)
    only = [n for n in args.only.split(",") if n]
    unknown = [n for n in only if n not in names]
    modes = [m for m in args.modes.split(",") if m]
    bad_modes = [m for m in modes if m not in MODES]
    if unknown or bad_modes or args.repeat < 1 or not modes:
        p.error(
            f"--only takes {', '.join(names)}; --modes takes {', '.join(MODES)}; --repeat >= 1 "
            f"(got --only {args.only!r}, --modes {args.modes!r}, --repeat {args.repeat})"
        )
    args.cases = [c for c in CASES if not only or c.name in only]
    args.modes = modes
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    work = Path(args.work).resolve()  # the agents run in folders of their own
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    start = time.monotonic()
    try:
        rows = run_all(args.cases, args.modes, args.repeat, work, args.timeout_s)
    except npm_agents.InstallError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return int(ExitCode.USAGE)
    print(render(rows, time.monotonic() - start))
    return int(ExitCode.OK if all(r.tally.ok == r.tally.runs for r in rows) else ExitCode.INVALID)


if __name__ == "__main__":
    raise SystemExit(main())
