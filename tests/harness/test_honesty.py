"""Protocol honesty checks against endpoints loopbench did not write (docs/metrics.md §1.4).

Each test starts a canned foreign server (tests/foreign_sse.py) on port 0, runs tiny.yaml
against it in this process (the run ``loopbench run --target URL --no-probe`` makes, without
its report, which nothing here reads, nor the interpreter start) and reads the flags,
``summary.json`` and the console lines ``loopbench run`` prints after a run
(:func:`harness.cli.run.print_outcome`). The command line itself is covered by
tests/harness/test_outcomes.py and tests/run/test_probe.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli.run import print_outcome
from harness.client import honesty
from harness.metrics import definitions as D
from harness.report.results import load_run
from harness.wire.transports import BY_NAME
from harness.workload.records import TurnRecord
from tests.foreign_sse import LIED_OUTPUT_TOKENS, foreign_sse_server
from tests.runs import run_tiny


def _run(
    out: Path, mode: str, transports: str, capsys: pytest.CaptureFixture[str]
) -> tuple[str, Path]:
    """tiny.yaml against the foreign server in ``mode``: (the console lines, the run folder)."""
    # No probe (run_scenario has none; the command's --no-probe): it would refuse these servers
    # before the in-run checks could be seen (tests/run/test_probe.py covers the probe's side)
    with foreign_sse_server(mode) as url:
        run = run_tiny(out, transports.split(","), {}, target=url)
    capsys.readouterr()
    assert run.summary is not None
    print_outcome(run.summary, run.path)
    return capsys.readouterr().out, run.path


def test_a_server_ignoring_previous_response_id_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    console, run_dir = _run(tmp_path, "ignore_chain", "http,http-chained", capsys)
    turns = load_run(run_dir).turns
    flagged = turns[turns["chain_ignored"]]
    # Only chained turns after the first can ignore a chain; the history outgrows what the
    # server counted from turn 3 on at the latest.
    assert len(flagged) >= 2
    assert set(flagged["transport"]) == {"http-chained"}
    assert (flagged["turn_index"] >= 1).all()
    assert (flagged["input_tokens"] < flagged["history_tokens"] / 2).all()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["valid"]  # a warning, not a reason for invalidity
    assert summary["honesty"]["http-chained"]["chain_ignored"] == len(flagged)
    assert summary["honesty"]["http"]["chain_ignored"] == 0
    (warning,) = summary["warnings"]
    assert warning.startswith("http-chained: the server reported ")
    assert "it appears to ignore previous_response_id" in warning
    assert "the speedup is not a chaining speedup" in " ".join(console.split())
    assert "warning:" in console


def test_a_server_lying_about_output_tokens_is_left_out_of_decode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    console, run_dir = _run(tmp_path, "lie_output", "http", capsys)
    turns = load_run(run_dir).turns
    turns["decode_tps"] = D.column(D.get("decode_tps"), turns)
    lied = turns["output_tokens"] == LIED_OUTPUT_TOKENS
    assert lied.sum() == 6 and len(turns) == 8  # 2 rollouts x (3 calls + 1 answer)
    # The three calls per rollout streamed "{" and "}" and reported 300 tokens: flagged, and
    # no decode sample; the honest answers keep theirs.
    assert turns.loc[lied, "decode_implausible"].all()
    assert not turns.loc[~lied, "decode_implausible"].any()
    assert turns.loc[lied, "decode_tps"].isna().all()
    assert turns.loc[~lied, "decode_tps"].notna().all()
    summary = json.loads((run_dir / "summary.json").read_text())
    decode_p50 = summary["transports"]["http"]["tps"]["decode_p50"]
    honest_max = float(turns.loc[~lied, "decode_tps"].max())
    # 23 gaps of >= 2 ms: at most ~500 tok/s; a lied turn would be ~150,000
    assert decode_p50 is not None and decode_p50 <= honest_max * 1.01 < 1000
    assert summary["honesty"]["http"]["decode_implausible"] == 6
    # nor the burst peak: 300 tokens spread over two deltas would read 3,000 tok/s; the honest
    # answers (~50 ms) do not fill the 100 ms window, so there is none, with the reason
    tps = summary["transports"]["http"]["tps"]
    assert tps["burst_peak"] is None or tps["burst_peak"] < 1000
    assert tps["burst_peak"] is not None or tps["burst_peak_reason"]
    # the lied calls came in 2 deltas: also counted as output that came whole (their own line)
    warning, whole = summary["warnings"]
    assert warning.startswith("http: 6 of 8 turns reported 300 output tokens")
    assert whole.startswith("http: 6 of 8 turns got their output in fewer than 4 pieces")
    assert "left out of the percentiles" in " ".join(console.split())


def test_the_reference_server_passes_the_checks(tmp_path: Path) -> None:
    run = run_tiny(tmp_path, ["http", "http-chained", "ws"], {})
    assert not run.turns["chain_ignored"].any()
    assert not run.turns["decode_implausible"].any()
    assert run.summary is not None
    # Output that came in fewer than 4 pieces is counted, not a failed check: on a loaded
    # machine the reference server's short streams may arrive so (docs/metrics.md §1.2).
    assert [w for w in run.summary["warnings"] if "pieces" not in w] == []


def _turn(**kw: int) -> TurnRecord:
    rec = TurnRecord("http-chained", 0, 1, status="completed")
    for k, v in kw.items():
        setattr(rec, k, v)
    return rec


def test_the_rules_at_their_bounds() -> None:
    chained, plain = BY_NAME["http-chained"], BY_NAME["http"]
    # chain: below half of the history is flagged, half is not; never the first turn or http
    assert honesty.chain_ignored(chained, _turn(input_tokens=1499, history_tokens=3000))
    assert not honesty.chain_ignored(chained, _turn(input_tokens=1500, history_tokens=3000))
    assert not honesty.chain_ignored(plain, _turn(input_tokens=40, history_tokens=3000))
    first = _turn(input_tokens=40, history_tokens=3000)
    first.turn_index = 0
    assert not honesty.chain_ignored(chained, first)
    assert not honesty.chain_ignored(chained, _turn(input_tokens=0, history_tokens=3000))
    # output: 4x the streamed estimate + 16 is the bound; reasoning tokens are not streamed
    assert not honesty.decode_implausible(_turn(output_tokens=56, streamed_tokens=10))
    assert honesty.decode_implausible(_turn(output_tokens=57, streamed_tokens=10))
    assert not honesty.decode_implausible(_turn(output_tokens=556, streamed_tokens=10), 500)
    # rate: 20,000 tok/s is the bound, judged from 32 tokens on
    fast = {"first_token_ns": 1, "streamed_tokens": 100, "output_tokens": 100}
    assert not honesty.decode_implausible(_turn(last_token_ns=1 + 4_950_000, **fast))
    assert honesty.decode_implausible(_turn(last_token_ns=1 + 4_940_000, **fast))
    short = {"first_token_ns": 1, "last_token_ns": 2, "streamed_tokens": 20}
    assert not honesty.decode_implausible(_turn(output_tokens=20, **short))
