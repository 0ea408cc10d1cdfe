"""Runs through the real runner: measurement overhead, pacing accuracy, overload detection.

Each step builds a small scenario, runs it with :func:`harness.run.runner.run_plans`
against one reference server (default profiles: ``optimized`` API tier,
``cerebras-spark`` engine) and reads the figures from the run's summary, so
what is measured is exactly what ``loopbench run`` reports.

* **measurement overhead**: ``measurement_error_ms`` = measured TTFT − the
  server's modelled TTFT (``sim_timing``), per transport, with short requests so
  the server's own request handling stays small; next to it ``client_error_ms``,
  the same without how late the server wrote the first token
  (``sim_timing.first_token_late_ms``): the server shares the client's cores, so
  the total mixes the client stamping late with the server sending late;
* **pacing**: decode TPS p50 and burst peak over responses long enough for a
  burst (≥ 500 tokens, docs/model.md §2);
* **overload**: an open-loop run whose client is made too slow on purpose (a
  turn hook that blocks the event loop, as a CPU-bound client would) must come
  back ``valid: false``; the same run without the hook must come back valid.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.client.options import ClientSettings
from harness.run.event_loop import run_async
from harness.run.runner import RunOptions, run_plans
from harness.workload.records import TurnRecord
from harness.workload.rollout import generate_rollouts
from harness.workload.scenario import Scenario, validate_scenario


@dataclass(frozen=True, slots=True)
class RunFigures:
    """What one run reported: its summary and how long it took."""

    summary: dict[str, Any]
    seconds: float

    def transport(self, name: str) -> dict[str, Any]:
        t = self.summary.get("transports", {}).get(name)
        if t is None:
            raise KeyError(f"selfbench run {self.summary.get('run_id')}: no transport {name!r}")
        return dict(t)


def _scenario(
    name: str, transports: Sequence[str], rollout: dict[str, Any], load: dict[str, Any]
) -> Scenario:
    return validate_scenario(
        {
            "name": name,
            "seed": 11,
            "transports": list(transports),
            "rollout": rollout,
            "load": load,
        },
        source=f"<selfbench {name}>",
    )


def run_once(
    base_url: str,
    name: str,
    transports: Sequence[str],
    rollout: dict[str, Any],
    load: dict[str, Any],
    *,
    turn_hook: Callable[[TurnRecord], None] | None = None,
    rx_stamp: str = "auto",
) -> RunFigures:
    scenario = _scenario(name, transports, rollout, load)
    plans = generate_rollouts(scenario)
    with tempfile.TemporaryDirectory(prefix="loopbench-selfbench-") as tmp:
        opts = RunOptions(
            transports=list(transports),
            target=base_url,
            results_root=Path(tmp),
            run_id=name,
            progress=False,
            render=False,
            turn_hook=turn_hook,
            client=ClientSettings(rx_stamp=rx_stamp),
        )
        t0 = time.perf_counter()
        result = run_async(
            run_plans(scenario, f"<selfbench {name}>", plans, base_url, opts, embedded=True)
        )
        seconds = time.perf_counter() - t0
        result.stop_if_interrupted()
    return RunFigures(result.summary, seconds)


def warmed_closed_run(
    base_url: str,
    name: str,
    transports: Sequence[str],
    streams: int,
    rollouts_per_stream: int,
    rollout: dict[str, Any],
    rx_stamp: str,
) -> RunFigures:
    """``streams`` closed-loop rollouts shaped as ``rollout`` at a time, ``rollouts_per_stream``
    each measured.

    A first wave (one rollout per stream) is warm-up and not measured: it opens the
    connections and runs code paths for the first time on both sides.
    """
    return run_once(
        base_url,
        name,
        transports,
        {"count": streams * (rollouts_per_stream + 1), **rollout},
        {"mode": "closed", "concurrency": streams, "warmup_rollouts": streams},
        rx_stamp=rx_stamp,
    )


def overhead_run(
    base_url: str,
    transports: Sequence[str],
    streams: int,
    rollouts_per_stream: int,
    rx_stamp: str = "auto",
) -> RunFigures:
    """Short turns (40-token outputs, small inputs) at ``streams`` concurrent rollouts, after a
    warm-up wave (:func:`warmed_closed_run`)."""
    return warmed_closed_run(
        base_url,
        f"selfbench-overhead-{streams}",
        transports,
        streams,
        rollouts_per_stream,
        {
            "system_tokens": 50,
            "tool_schema_tokens": 60,
            "user_prompt_tokens": 30,
            "tool_calls": 3,
            "tool_output_tokens": 40,
            "tool_latency_ms": 5,
            "step_output_tokens": 40,
            "final_answer_tokens": 40,
        },
        rx_stamp,
    )


def pacing_run(
    base_url: str,
    transports: Sequence[str],
    streams: int,
    rollouts_per_stream: int,
    tokens: int,
    rx_stamp: str = "auto",
) -> RunFigures:
    """Long responses (``tokens`` each, two per rollout) at ``streams`` concurrent rollouts."""
    return run_once(
        base_url,
        f"selfbench-pacing-{streams}",
        transports,
        {
            "count": streams * rollouts_per_stream,
            "system_tokens": 50,
            "tool_schema_tokens": 60,
            "user_prompt_tokens": 30,
            "tool_calls": 1,
            "tool_output_tokens": 40,
            "tool_latency_ms": 5,
            "step_output_tokens": tokens,
            "final_answer_tokens": tokens,
        },
        {"mode": "closed", "concurrency": streams},
        rx_stamp=rx_stamp,
    )


def overload_runs(
    base_url: str, rate: float, rollouts: int, block_ms: float
) -> tuple[RunFigures, RunFigures]:
    """(control, overloaded): the same open-loop run without and with a client that blocks."""
    rollout = {
        "count": rollouts,
        "system_tokens": 50,
        "tool_schema_tokens": 60,
        "user_prompt_tokens": 30,
        "tool_calls": 0,
        "final_answer_tokens": 20,
    }
    load = {
        "mode": "open",
        "arrival": {"process": "constant", "rate": rate},
        "max_schedule_lag_ms": 50,
    }

    def block(_: TurnRecord) -> None:
        # A client doing CPU work on the event loop: nothing else runs meanwhile.
        end = time.perf_counter() + block_ms / 1000
        while time.perf_counter() < end:
            pass

    control = run_once(base_url, "selfbench-overload-control", ["ws"], rollout, load)
    overloaded = run_once(base_url, "selfbench-overload", ["ws"], rollout, load, turn_hook=block)
    return control, overloaded
