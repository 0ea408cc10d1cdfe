"""A/B mode: two targets measured in interleaved rounds of one job, so machine noise hits both.

The scenario's rollouts are split into rounds.  In round *r* every transport
replays the round's rollouts against both targets back to back, baseline
first in even rounds and candidate first in odd rounds, so a slow phase of a
shared CI machine (a neighbour's build, thermal throttling) lands on both
sides about equally and a warm-up advantage is not always the same side's.
Each side is written as an ordinary results folder (``<id>-baseline``,
``<id>-candidate``), keyed so the gate pairs them rollout by rollout.

A side is either a URL (``--baseline-target``) or an embedded reference server
started here with its own profiles and ``--set`` overrides: that is how a
server change (say a 20 % slower API tier) is gated before it ships.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.report.results import new_run_id
from harness.run.embedded import embedded_server
from harness.run.event_loop import run_async
from harness.run.manifest import build_manifest
from harness.run.measurement import Measurement
from harness.run.passes import ClientWatch, PassCounts, pass_duration
from harness.run.runner import RunOptions, RunResult, measured_pass, transport_options
from harness.transports import make_transport
from harness.workload.plan import RolloutPlan
from harness.workload.rollout import generate_rollouts
from harness.workload.scenario import Scenario
from reference_server.core.profiles import ApiProfile, load_profiles

SIDES = ("baseline", "candidate")


@dataclass(frozen=True, slots=True)
class Side:
    """One side of an A/B job: a target URL, or an embedded server with these settings."""

    target: str | None = None
    api_profile: str | None = None
    engine_profile: str | None = None
    server_set: Mapping[str, str] = field(default_factory=dict)

    def server(self, scenario: Scenario) -> SideServer:
        """The embedded server's settings: the scenario's, with this side's changes on top."""
        api_profile, engine_profile = scenario.server_profiles()
        return SideServer(
            api_profile=self.api_profile or api_profile,
            engine_profile=self.engine_profile or engine_profile,
            overrides={**scenario.server.set, **self.server_set},
        )


@dataclass(frozen=True, slots=True)
class SideServer:
    """A side's embedded server, as its manifest's ``ab.server`` block records it."""

    api_profile: str
    engine_profile: str
    overrides: dict[str, str]

    def check(self) -> None:
        """The profiles load (a typo is an error now, not a server that never starts)."""
        load_profiles(self.api_profile, self.engine_profile, self.overrides)


@dataclass(slots=True)
class ABOptions(RunOptions):
    """A run's options (both sides measure with its client's) and the interleaved rounds
    (None: the scenario's ``load.rounds``, else :func:`default_rounds`)."""

    rounds: int | None = None


@dataclass(frozen=True, slots=True)
class ABResult:
    baseline: RunResult
    candidate: RunResult
    rounds: int


def split_rounds(plans: Sequence[RolloutPlan], rounds: int) -> list[list[RolloutPlan]]:
    """``rounds`` consecutive chunks whose sizes differ by at most one (none empty)."""
    n = len(plans)
    rounds = max(1, min(rounds, n))
    return [list(plans[i * n // rounds : (i + 1) * n // rounds]) for i in range(rounds)]


def round_order(round_index: int) -> tuple[str, str]:
    """Which side goes first in a round: alternate, so neither side always runs warm."""
    return SIDES if round_index % 2 == 0 else (SIDES[1], SIDES[0])


def default_rounds(scenario: Scenario, n_plans: int) -> int:
    if scenario.load.rounds > 1:
        return min(scenario.load.rounds, n_plans)
    # Enough rounds that slow phases of the machine average out, each still holding a
    # few rollouts so a round is more than one sample.
    return max(1, min(6, n_plans // 2))


async def run_ab_plans(
    scenario: Scenario,
    scenario_path: str,
    plans: list[RolloutPlan],
    urls: Mapping[str, str],
    embedded: Mapping[str, bool],
    opts: ABOptions,
    *,
    servers: Mapping[str, Mapping[str, Any]] | None = None,
    printer: Callable[[str], None] | None = None,
) -> ABResult:
    transports = list(opts.transports or scenario.transports)
    base_id = opts.run_id or new_run_id(f"{scenario.name}-ab", time.time())
    rounds = split_rounds(plans, opts.rounds or default_rounds(scenario, len(plans)))
    ids = {side: f"{base_id}-{side}" for side in SIDES}
    run_opts = replace(opts, transports=transports)
    sides: dict[str, Measurement] = {}
    try:
        for side in SIDES:
            manifest = build_manifest(
                scenario,
                scenario_path,
                transports,
                urls[side],
                embedded[side],
                ids[side],
                run_opts.client_options(),
            )
            other = SIDES[1 - SIDES.index(side)]
            manifest["ab"] = {
                "side": side,
                "pair_run_id": ids[other],
                "rounds": len(rounds),
                "order": "alternating",
                "server": dict((servers or {}).get(side, {})),
            }
            sides[side] = Measurement(
                scenario,
                Path(opts.results_root) / ids[side],
                manifest,
                transports,
                planned=len(plans),
            )
    except BaseException:
        for run in sides.values():
            run.close()
        raise
    duration = pass_duration(scenario.load, len(rounds))
    # Built once per side, before the watch starts, and shared by the rounds (as the
    # runner does): building a transport blocks the loop, which is set-up, not lag.
    clients = {
        side: {
            name: make_transport(
                name, transport_options(urls[side], run_opts, scenario.load, scenario.rollout)
            )
            for name in transports
        }
        for side in SIDES
    }
    watch = ClientWatch()
    try:
        for r, chunk in enumerate(rounds):
            for name in transports:
                for side in round_order(r):
                    live = PassCounts(total=len(chunk))
                    run = sides[side]
                    started = time.monotonic()
                    await measured_pass(
                        run, clients[side][name], chunk, r, live, duration, run_opts
                    )
                    if printer is not None:
                        printer(
                            f"round {r + 1}/{len(rounds)} {side:<9} {name:<12} "
                            f"{live.done}/{live.total} rollouts {live.turns} turns "
                            f"{live.errors} errors {time.monotonic() - started:5.1f}s"
                        )
    except (asyncio.CancelledError, KeyboardInterrupt):
        for run in sides.values():
            run.stop_early("A/B run interrupted before every round finished", interrupted=True)
    finally:
        # One process measured both sides: both are judged on its health.
        health = await watch.stop()
        for per_side in clients.values():
            for client in per_side.values():
                await client.aclose()
        results: dict[str, RunResult] = {}
        try:
            for side, run in sides.items():
                run.clients.append(health)
                results[side] = RunResult(run.run_dir, run.finish(), run)
        finally:
            # An error while summarising must not leave the row files open (or half-flushed).
            for run in sides.values():
                run.close()
    return ABResult(results["baseline"], results["candidate"], len(rounds))


def run_ab(
    scenario: Scenario,
    scenario_path: str,
    baseline: Side,
    candidate: Side,
    opts: ABOptions,
    printer: Callable[[str], None] | None = None,
) -> ABResult:
    """Run both sides synchronously; embedded servers are started and stopped here."""
    plans = generate_rollouts(scenario)
    urls: dict[str, str] = {}
    embedded: dict[str, bool] = {}
    servers: dict[str, dict[str, Any]] = {}
    with ExitStack() as stack:
        for name, side in zip(SIDES, (baseline, candidate), strict=True):
            if side.target:
                urls[name], embedded[name] = side.target, False
                continue
            server = side.server(scenario)
            servers[name] = asdict(server)
            urls[name] = stack.enter_context(
                embedded_server(
                    api_profile=server.api_profile,
                    engine_profile=server.engine_profile,
                    overrides={**scenario.embedded_overrides(), **server.overrides},
                    seed=scenario.seed,
                )
            )
            embedded[name] = True
        coro = run_ab_plans(
            scenario, scenario_path, plans, urls, embedded, opts, servers=servers, printer=printer
        )
        return run_async(coro)


#: API-tier parameters that are service times (scaled by :func:`scaled_api_overrides`): the
#: profile's fields in ms and µs
API_TIME_PARAMS = tuple(n for n in ApiProfile.model_fields if n.endswith(("_ms", "_us")))


def scaled_api_overrides(api_profile: str, factor: float) -> dict[str, str]:
    """``--set`` overrides that make every service time of an API profile ``factor`` x longer.

    Worker count and hop count stay: this models the same stack doing its work
    slower (a heavier safety classifier, a slower auth call), not a different shape.
    """
    if not factor > 0:
        raise ValueError(f"factor: expected a positive number, got {factor!r}")
    api, _ = load_profiles(api_profile)
    return {f"api.{name}": f"{getattr(api, name) * factor:.6g}" for name in API_TIME_PARAMS}
