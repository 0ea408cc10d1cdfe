"""Reasoning end to end: ``loopbench run`` over every transport against the embedded reference
server, a scenario whose model reasons 200 tokens before each turn's visible output.

What Codex does and what the measurement must show: stateless ``http`` re-sends every earlier
reasoning item, so its body grows faster than the others'; TTFT is the first reasoning token,
TTFOT the first visible one, later; reasoning tokens per turn reach the summary, the console and
the gate; the visible decode rate is not diluted by the reasoning (no honesty flag).
"""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pandas as pd
import pytest
import yaml

from harness.cli.main import main
from harness.report.compare import compare
from harness.report.results import Run
from tests.transports.conftest import loopbench_run

ALL = ("http", "http-chained", "ws", "ws-store", "ws-append")
REASONING = 200


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Run, str]]:
    out = tmp_path_factory.mktemp("results")
    transports = ("--transports", ",".join(ALL))
    # Two independent runs, each with its own embedded server, compared only on what does
    # not depend on timing.  One after the other, in the main thread: each runs `main` in this
    # process, whose console capture and signal handlers are the process's own; with their
    # reports, whose table a test reads.
    # the plain run's report is read for its table only: without plots (~2 s of CPU; a tiny
    # run's plots are the report tests'); the reasoning run's report is whole
    with mock.patch("harness.report.plots.write_plots", return_value=[]):
        plain = loopbench_run(out, "plain", *transports, report=True)
    reasoning = loopbench_run(
        out,
        "reasoning",
        *transports,
        "--set",
        f"rollout.reasoning_tokens={REASONING}",
        report=True,
    )
    return {"plain": plain, "reasoning": reasoning}


def _turns(run: Run) -> pd.DataFrame:
    return run.turns.sort_values(["transport", "rollout_id", "turn_index"]).reset_index(drop=True)


def test_every_turn_reasons_and_ttfot_follows_ttft(runs: dict[str, tuple[Run, str]]) -> None:
    run, _ = runs["reasoning"]
    turns = _turns(run)
    assert set(turns["transport"]) == set(ALL)
    assert (turns["status"] == "completed").all()
    assert (turns["reasoning_tokens"] == REASONING).all()
    # TTFT: the reasoning item (the first token); TTFOT: the first visible delta, after it
    assert (turns["first_token_ns"] > turns["sent_ns"]).all()
    assert (turns["first_output_ns"] > turns["first_token_ns"]).all()
    # the reasoning is not streamed output that went missing, nor a decode rate gone wild
    assert not turns["decode_implausible"].any()
    assert (turns["streamed_tokens"] < turns["output_tokens"] - REASONING + 8).all()
    # without reasoning the two stamps are one
    plain = _turns(runs["plain"][0])
    assert (plain["first_output_ns"] == plain["first_token_ns"]).all()
    assert (plain["reasoning_tokens"] == 0).all()


def test_http_body_grows_with_the_reasoning_items_and_only_http(
    runs: dict[str, tuple[Run, str]],
) -> None:
    plain, reasoning = _turns(runs["plain"][0]), _turns(runs["reasoning"][0])
    key = ["transport", "rollout_id", "turn_index"]
    assert (plain[key] == reasoning[key]).all().all()  # the same seeded rollouts, turn for turn
    extra = reasoning["bytes_sent"] - plain["bytes_sent"]
    for name in ALL:
        mine = extra[reasoning["transport"] == name]
        index = reasoning.loc[mine.index, "turn_index"]
        if name == "http":
            # every earlier reasoning item goes back: ~4 characters per reasoning token each
            assert (mine >= index * REASONING * 3 + 50).all(), mine.tolist()
            assert (mine.groupby(index).min().diff().dropna() > REASONING * 3).all()
        else:
            # only the reasoning request fields and the hint: a constant few dozen bytes
            assert (mine < 100).all() and mine.nunique() <= 3, (name, mine.tolist())


def test_summary_console_and_gate_know_reasoning(
    runs: dict[str, tuple[Run, str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run, stdout = runs["reasoning"]
    plain_run, plain_stdout = runs["plain"]
    assert run.summary is not None and plain_run.summary is not None
    for name in ALL:
        t = run.summary["transports"][name]
        assert t["reasoning_tokens"]["mean"] == REASONING
        assert t["ttfot_ms"]["p50"] > t["ttft_ms"]["p50"]
        p = plain_run.summary["transports"][name]
        assert p["reasoning_tokens"]["mean"] is None
        assert p["ttfot_ms"]["p50"] == p["ttft_ms"]["p50"]
    # the console shows the reasoning columns only for a run that reasoned
    assert "TTFOT" in stdout and "reasoning" in stdout
    assert "TTFOT" not in plain_stdout and "reasoning" not in plain_stdout
    # the report's table too
    assert "TTFOT p50" in (run.path / "report.md").read_text()
    assert "TTFOT p50" not in (plain_run.path / "report.md").read_text()

    def gate(rules: dict[str, object], baseline: Run) -> int:
        path = tmp_path / "rules.yaml"
        path.write_text(yaml.safe_dump(rules))
        with pytest.raises(SystemExit) as info:
            main(["gate", str(run.path), "--baseline", str(baseline.path), "--rules", str(path)])
        code = info.value.code
        assert isinstance(code, int)
        return code

    lenient = {"require_valid": False, "min_rollouts": 1, "max_loop_lag_ms": None}
    ok = {
        "version": 1,
        "validity": lenient,
        "slo": [
            "*.ttfot_ms.p99 < 60000",
            {"metric": "http.reasoning_tokens.mean", "op": ">=", "value": REASONING},
        ],
        "regression": ["*.ttfot_ms.p50 +10%"],
    }
    assert gate(ok, run) == 0
    assert gate({**ok, "slo": ["ws.ttfot_ms.p50 < 1"], "regression": []}, run) == 2
    # against the same rollouts without reasoning the reasoning's cost is a TTFOT regression
    against_plain = {
        "version": 1,
        "validity": {**lenient, "require_comparable": False},
        "regression": [{"metric": "http.ttfot_ms.p50", "max_increase_pct": 20, "samples": "turn"}],
    }
    assert gate(against_plain, plain_run) == 1
    assert "http.ttfot_ms.p50" in capsys.readouterr().out


def test_compare_shows_ttfot_and_reasoning_only_when_a_side_reasoned(
    runs: dict[str, tuple[Run, str]],
) -> None:
    plain, reasoning = runs["plain"][0], runs["reasoning"][0]
    rows = compare([plain, reasoning]).deltas["B"]
    ttfot = [d for d in rows if d.transport == "http" and d.metric == "TTFOT p50"]
    (row,) = ttfot
    assert row.b is not None and row.a is not None and row.b > row.a
    assert row.verdict == "worse"  # the reasoning's time before the first visible token
    (tokens,) = [d for d in rows if d.transport == "ws" and d.metric == "reasoning tok mean"]
    assert (tokens.a, tokens.b) == (None, REASONING)
    assert not [d for d in compare([plain, plain]).deltas["B"] if "TTFOT" in d.metric]
