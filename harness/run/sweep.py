"""Run a sweep: the scenario once per value of one field, then the combined report.

Orchestration only (like :mod:`harness.run.runner`): parsing the sweep, its index
file and its report live in :mod:`harness.report.sweep`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from harness.report.files import Rendered
from harness.report.render import render_run_safely
from harness.report.results import new_run_id
from harness.report.sweep import (
    SWEEP_JSON,
    new_sweep_doc,
    parse_sweep_sets,
    sweep_run_id,
    write_sweep_json,
)
from harness.run.runner import RunOptions, run_scenario
from harness.wire.errors import ResultsError
from harness.workload.scenario import load_scenario


@dataclass(frozen=True, slots=True)
class SweepResult:
    path: Path
    #: (swept value, run folder) of every run that was made
    runs: list[tuple[str, Path]]
    rendered: Rendered | None


def new_sweep_root(results_root: Path, sweep_id: str | None, name: str) -> Path:
    """The sweep's folder, created (``sweep_id`` None: a fresh run id of ``name``)."""
    root = Path(results_root) / (sweep_id or new_run_id(name, time.time()))
    if (root / SWEEP_JSON).exists():
        raise ResultsError(f"{root}: already holds a sweep ({SWEEP_JSON} exists)")
    root.mkdir(parents=True, exist_ok=True)
    return root


def run_sweep(
    scenario_path: str,
    sets: Sequence[str],
    opts: RunOptions,
    *,
    sweep_id: str | None = None,
    printer: Callable[[str], None] | None = None,
    announce: Callable[[str], None] | None = None,
) -> SweepResult:
    """Run the scenario once per swept value into ``<results_root>/<sweep_id>/`` and render.

    Every variant is validated before the first run starts; an interrupted run
    (``partial``) ends the sweep, and what was measured is still reported.
    """
    key, values, fixed = parse_sweep_sets(sets)
    scenarios = [load_scenario(scenario_path, {**fixed, key: v}) for v in values]
    slug_key = key.rsplit(".", 1)[-1]
    root = new_sweep_root(opts.results_root, sweep_id, f"sweep-{scenarios[0].name}-{slug_key}")
    transports = list(opts.transports or scenarios[0].transports)
    doc = new_sweep_doc(root.name, scenario_path, scenarios[0].name, key, values, fixed, transports)
    write_sweep_json(root, doc)
    runs: list[tuple[str, Path]] = []
    for i, (value, scenario) in enumerate(zip(values, scenarios, strict=True)):
        run_id = sweep_run_id(i, key, value)
        if announce is not None:
            announce(f"sweep {i + 1}/{len(values)}: {key}={value}")
        result = run_scenario(
            scenario, scenario_path, replace(opts, results_root=root, run_id=run_id), printer
        )
        runs.append((value, result.run_dir))
        doc["runs"].append({"value": value, "run_id": run_id})
        write_sweep_json(root, doc)
        if result.summary_model.partial:
            break
    return SweepResult(root, runs, render_run_safely(root))
