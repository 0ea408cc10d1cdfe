"""An endpoint that ignores loopbench's output-length hint is named, from the records alone.

vLLM accepts ``metadata`` and drops it: outputs ran to 2.46x the plan in a valid run whose
only trace of it was the token table (issue 38).  Records in, summary and console lines out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.cli.run import print_outcome
from harness.metrics.summary import Accumulator
from harness.workload.records import TurnRecord

MS = 1_000_000
S = 1_000_000_000

WARNING = (
    "http: outputs ran to 2.46x the plan: the endpoint ignores loopbench's output-length hint "
    "(metadata loopbench.output_tokens); run with --no-hints and shape the output with "
    "--extra-body (max_tokens, ignore_eos; docs/targets.md)"
)


def _summary(received: int, *, hints: bool) -> dict[str, Any]:
    """Two rollouts of one turn each, planned 50 output tokens a turn, ``received`` reported."""
    acc = Accumulator()
    for rollout in range(2):
        t = (rollout + 1) * S
        acc.add_turn(
            TurnRecord(
                "http",
                rollout,
                0,
                status="completed",
                sent_ns=t,
                first_event_ns=t + 5 * MS,
                first_token_ns=t + 10 * MS,
                last_token_ns=t + 110 * MS,
                done_ns=t + 120 * MS,
                input_tokens=300,
                history_tokens=300,
                planned_output_tokens=50,
                output_tokens=received,
                streamed_tokens=received,
                output_arrivals=received,
            )
        )
    return acc.summary(run_id="r", hints=hints)


def test_outputs_far_beyond_the_plan_name_the_hint_and_the_shaping_options() -> None:
    assert _summary(123, hints=True)["hint_ignored"] == [WARNING]  # 246 / 100 = 2.46x


@pytest.mark.parametrize(
    ("received", "hints"),
    [(60, True), (123, False)],
    ids=["1.2x-with-hints", "2.46x-without-hints"],
)
def test_no_warning_within_the_bound_or_without_hints(received: int, hints: bool) -> None:
    assert _summary(received, hints=hints)["hint_ignored"] == []


def test_the_console_says_it_right_under_the_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    summary = _summary(123, hints=True)
    summary.update(valid=True, invalid_reasons=[])
    print_outcome(summary, tmp_path)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("verdict: valid"), lines[0]
    # rich wraps at the console's width: the warning is the text of the lines after the verdict
    text = " ".join(line.strip() for line in lines[1:6])
    assert ("warning: " + WARNING) in text, lines[:6]
