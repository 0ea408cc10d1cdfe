"""``loopbench sweep --search goodput``: the highest offered load that still meets the SLO,
by bracketing then bisection per transport (docs/metrics.md §5, "The goodput search").

:class:`GoodputSearch` is pure; :func:`run_goodput_search` runs its steps into one sweep folder.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from harness.metrics.results_model import Goodput, SloStats, Summary, as_summary
from harness.metrics.slo import ci_reason, wilson
from harness.report.files import Rendered
from harness.report.render import render_run_safely
from harness.report.sweep import (
    new_sweep_doc,
    search_answer_line,
    sweep_run_id,
    write_sweep_json,
)
from harness.run.runner import RunOptions, run_scenario
from harness.run.sweep import new_sweep_root
from harness.wire.errors import UsageError
from harness.workload.scenario import Scenario, load_scenario

PassRule = Literal["point", "ci-lower"]
PASS_RULES = ("point", "ci-lower")
#: the swept field by load mode when --search-param is not given
DEFAULT_PARAM = {
    "closed": "load.concurrency",
    "open": "load.arrival.rate",
    "throughput": "load.throughput.tps",
}
#: what a load of each searched field counts
UNITS = {
    "load.concurrency": "agents",
    "load.arrival.rate": "rollouts/s",
    "load.throughput.tps": "output tok/s",
}
#: integer-valued load fields (agents); the others are rates
INTEGER_PARAMS = ("load.concurrency", "load.max_in_flight")
#: bisection over a rate stops when the bracket is this fraction of the passing load
RATE_RESOLUTION = 0.1
DEFAULT_MAX_STEPS = 12
DEFAULT_TARGET = 0.99
#: the options only the search reads (argparse dest → default), for the CLI to refuse them
#: without --search
SEARCH_DEFAULTS: dict[str, Any] = {
    "target_attainment": DEFAULT_TARGET,
    "search_param": None,
    "start": 1.0,
    "max_load": 64.0,
    "max_steps": DEFAULT_MAX_STEPS,
    "rollouts_per_agent": 2,
    "pass_rule": "point",
}
#: the load fields the search can raise, and the load.mode each one drives
LOAD_PARAMS = {param: mode for mode, param in DEFAULT_PARAM.items()}


def _ci95(good: int, n: int) -> tuple[float, float] | None:
    """The Wilson 95 % interval; None below :data:`~harness.metrics.slo.MIN_ATTAINMENT_N`."""
    return wilson(good, n) if ci_reason(n) is None else None


def confidence(good: int, n: int, target: float) -> str:
    """Where the step's interval lies against ``target`` (no interval, no confidence)."""
    ci = _ci95(good, n)
    if ci is None:
        return f"no CI (n={n})"
    lo, hi = ci
    if lo >= target:
        return "confident pass"
    if hi < target:
        return "confident fail"
    return "within noise"


def passes(good: int, n: int, target: float, rule: PassRule) -> bool:
    if n == 0:
        return False
    if rule == "ci-lower":
        ci = _ci95(good, n)
        return ci is not None and ci[0] >= target
    return good / n >= target


@dataclass
class GoodputSearch:
    """Bracketing then bisection over one transport's load; pure, one step at a time."""

    start: float
    max_load: float
    integer: bool
    max_steps: int = DEFAULT_MAX_STEPS
    #: (load, passed) of every step so far, in order
    steps: list[tuple[float, bool]] = field(default_factory=list)
    #: bisection stops when the bracket is this fraction of the passing load (None: one
    #: agent for a whole number, :data:`RATE_RESOLUTION` for a rate); a search over
    #: thousands of agents needs no answer to one agent (selfbench's agents step)
    rel_resolution: float | None = None

    def __post_init__(self) -> None:
        if not self.start > 0 or not self.max_load >= self.start:
            raise ValueError(
                f"goodput search: expected 0 < start <= max_load, got {self.start}, {self.max_load}"
            )

    @property
    def best(self) -> float | None:
        """The highest load that passed, None when none did."""
        ok = [v for v, p in self.steps if p]
        return max(ok) if ok else None

    @property
    def lowest_fail(self) -> float | None:
        bad = [v for v, p in self.steps if not p]
        return min(bad) if bad else None

    def record(self, load: float, passed: bool) -> None:
        self.steps.append((load, passed))

    def _round(self, x: float) -> float:
        return float(math.floor(x)) if self.integer else round(x, 6)

    def _close_enough(self, lo: float, hi: float) -> bool:
        if self.rel_resolution is not None and hi - lo <= self.rel_resolution * lo:
            return True
        if self.integer:
            return hi - lo <= 1
        return hi - lo <= RATE_RESOLUTION * lo

    def next_load(self) -> float | None:
        """The next load to run, or None when the answer is known or the budget spent."""
        if len(self.steps) >= self.max_steps:
            return None
        if not self.steps:
            return self.start
        lo, hi = self.best, self.lowest_fail
        if hi is None:
            # bracketing up: every step passed so far
            assert lo is not None
            if lo >= self.max_load:
                return None
            return min(self._round(lo * 2), self.max_load)
        if lo is None:
            # the first load already fails: halve until one passes
            nxt = self._round(hi / 2)
            if nxt <= 0 or (self.integer and hi <= 1):
                return None
            return nxt
        if self._close_enough(lo, hi):
            return None
        mid = self._round((lo + hi) / 2)
        if mid <= lo or mid >= hi:
            return None
        return mid

    @property
    def converged(self) -> bool:
        """The answer is known to the resolution (or is max_load, or below the smallest load)."""
        lo, hi = self.best, self.lowest_fail
        if hi is None:
            return lo is not None and lo >= self.max_load
        if lo is None:
            return self.integer and hi <= 1
        return self._close_enough(lo, hi)

    @property
    def resolution(self) -> str:
        if self.rel_resolution is not None:
            return f"{self.rel_resolution:.0%} of the load"
        return "1" if self.integer else f"{RATE_RESOLUTION:.0%} of the load"


@dataclass(frozen=True, slots=True)
class SearchSettings:
    param: str
    target: float = DEFAULT_TARGET
    start: float = 1.0
    max_load: float = 64.0
    max_steps: int = DEFAULT_MAX_STEPS
    pass_rule: PassRule = "point"
    #: a closed-loop step over load.concurrency runs at least this many rollouts per agent,
    #: so every agent runs (a step of 32 agents and 5 rollouts would measure 5) and runs
    #: more than the first rollout, whose turns all start at once
    rollouts_per_agent: int = 2


def default_param(scenario: Scenario) -> str:
    return DEFAULT_PARAM[scenario.load.mode]


def check_search_scenario(scenario: Scenario, param: str, source: str) -> None:
    """Refuse a search that cannot mean anything: no latency threshold to attain (every
    successful rollout would be good at any load), or a searched field that is not the
    offered load of this scenario's load.mode."""
    if not scenario.slo.thresholds():
        raise UsageError(
            f"--search goodput: {source} sets no SLO threshold (no slo: section and no --slo), "
            "so every successful rollout would count as good at any load; give one, e.g. "
            "--slo ttft_ms=500"
        )
    mode = LOAD_PARAMS.get(param)
    if mode is None:
        raise UsageError(
            f"--search-param {param}: expected the offered load, one of "
            f"{', '.join(LOAD_PARAMS)} (the one for the scenario's load.mode)"
        )
    if mode != scenario.load.mode:
        raise UsageError(
            f"--search-param {param}: drives a load.mode: {mode} scenario, and {source} has "
            f"load.mode: {scenario.load.mode}; search {DEFAULT_PARAM[scenario.load.mode]} or "
            f"set load.mode={mode}"
        )


def _fmt(load: float, integer: bool) -> str:
    return str(int(load)) if integer else f"{load:g}"


@dataclass(frozen=True, slots=True)
class GoodputResult:
    path: Path
    answers: dict[str, dict[str, Any]]
    rendered: Rendered | None


def step_record(doc: Summary | Mapping[str, Any], transport: str, target: float) -> dict[str, Any]:
    """What a step's run says about the SLO: attainment, its interval, the confidence."""
    summary = as_summary(doc) or Summary()
    t = summary.transport(transport)
    slo = (t.slo if t is not None else None) or SloStats()
    good_put = (t.goodput if t is not None else None) or Goodput()
    n = slo.rollouts
    good = slo.good_rollouts
    ci = _ci95(good, n)
    return {
        "rollouts": n,
        "good_rollouts": good,
        "attainment": good / n if n else None,
        "ci95": [ci[0], ci[1]] if ci is not None else [None, None],
        "turn_attainment": slo.turn_attainment,
        "confidence": confidence(good, n, target),
        "good_rollouts_per_s": good_put.good_rollouts_per_s,
        "goodput_tps": good_put.goodput_tps,
        # the run's own verdict, by the rules every command applies
        "valid": summary.valid is not False,
    }


def run_goodput_search(
    scenario_path: str,
    fixed: dict[str, str],
    settings: SearchSettings,
    opts: RunOptions,
    *,
    sweep_id: str | None = None,
    printer: Callable[[str], None] | None = None,
    announce: Callable[[str], None] | None = None,
) -> GoodputResult:
    """Search each transport in turn; every step is one run in ``<results_root>/<sweep_id>/``."""
    base = load_scenario(scenario_path, fixed)
    check_search_scenario(base, settings.param, scenario_path)
    integer = settings.param in INTEGER_PARAMS
    # every load the search may try must validate before the first run starts
    load_scenario(scenario_path, {**fixed, settings.param: _fmt(settings.max_load, integer)})
    transports: Sequence[str] = list(opts.transports or base.transports)
    slug = settings.param.rsplit(".", 1)[-1]
    root = new_sweep_root(opts.results_root, sweep_id, f"goodput-{base.name}-{slug}")
    doc = new_sweep_doc(
        root.name, scenario_path, base.name, settings.param, [], fixed, list(transports)
    )
    doc["search"] = {
        "kind": "goodput",
        **asdict(settings),
        "unit": UNITS.get(settings.param, f"({settings.param})"),
        "integer": integer,
        "slo": base.slo.thresholds(),
        "steps": [],
        "answers": {},
    }
    write_sweep_json(root, doc)
    index = 0
    for transport in transports:
        search = GoodputSearch(settings.start, settings.max_load, integer, settings.max_steps)
        stopped = False
        while (load := search.next_load()) is not None:
            value = _fmt(load, integer)
            overrides = {**fixed, settings.param: value}
            if settings.param == "load.concurrency":
                count = max(base.rollout.count, settings.rollouts_per_agent * int(load))
                overrides["rollout.count"] = str(count)
            scenario = load_scenario(scenario_path, overrides)
            run_id = f"{sweep_run_id(index, transport + '-' + slug, value)}"
            index += 1
            if announce is not None:
                announce(
                    f"goodput search {transport} step {len(search.steps) + 1}: "
                    f"{settings.param}={value}"
                )
            result = run_scenario(
                scenario,
                scenario_path,
                replace(opts, results_root=root, run_id=run_id, transports=(transport,)),
                printer,
            )
            # An interrupted step is no evidence either way: the search ends with it.
            result.stop_if_interrupted()
            step = step_record(result.summary, transport, settings.target)
            passed = passes(
                step["good_rollouts"], step["rollouts"], settings.target, settings.pass_rule
            )
            search.record(load, passed)
            step.update({"transport": transport, "load": load, "run_id": run_id, "passed": passed})
            doc["runs"].append({"value": value, "run_id": run_id, "transport": transport})
            doc["values"].append(value)
            doc["search"]["steps"].append(step)
            if announce is not None:
                att = step["attainment"]
                announce(
                    f"  {transport} {settings.param}={value}: attainment "
                    f"{'n/a' if att is None else f'{att * 100:.1f} %'} "
                    f"({step['good_rollouts']}/{step['rollouts']}), {step['confidence']} -> "
                    f"{'pass' if passed else 'fail'}"
                )
            write_sweep_json(root, doc)
            if result.summary_model.partial:
                stopped = True
                break
        doc["search"]["answers"][transport] = {
            "load": search.best,
            "lowest_fail": search.lowest_fail,
            "steps": len(search.steps),
            "at_max_load": search.best is not None and search.best >= settings.max_load,
            "converged": search.converged,
            "confidence": next(
                (
                    s["confidence"]
                    for s in doc["search"]["steps"]
                    if s["transport"] == transport and s["load"] == search.best
                ),
                None,
            ),
        }
        write_sweep_json(root, doc)
        if stopped:
            break
    if announce is not None:
        announce(search_answer_line(doc))
    return GoodputResult(root, dict(doc["search"]["answers"]), render_run_safely(root))
