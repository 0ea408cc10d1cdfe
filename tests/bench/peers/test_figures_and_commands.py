"""The peer bench's figures, target, table, BENCHMARKS.md section, commands and offline files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from bench.peers import commands as cmd
from bench.peers import locust_row, offline
from bench.peers.bench import MARKER, PeersError, _fresh_folder
from bench.peers.figures import (
    BEGIN_MARKER,
    END_MARKER,
    Verdict,
    combined,
    percentile,
    precision_target,
    render_section,
    render_table,
    replace_section,
    run_figures,
    target,
)
from bench.peers.match import BY_RESPONSE_ID, MatchResult, Pair
from bench.peers.readers import TAG_RE, Measured
from bench.peers.timing_log import ServerEntry


def _pair(ttft: float, modelled: float, late: float | None, tps: float = 1000.0) -> Pair:
    m = Measured(True, ttft, tps, response_id="x")
    e = ServerEntry("chat", "x", None, None, 1, "completed", modelled, late)
    return Pair(m, e, BY_RESPONSE_ID)


def test_percentile_interpolates_as_numpy_does() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0], 99) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([float(x) for x in range(101)], 99) == pytest.approx(99.0)


def test_error_is_measured_minus_modelled_and_client_error_takes_off_server_lateness() -> None:
    result = MatchResult(
        pairs=[_pair(40.0, 38.0, 0.5), _pair(41.0, 38.0, 1.0), _pair(39.0, 38.0, None)]
    )
    result.unmatched.append(Measured(False, None))
    f = run_figures(result, reported=4)
    assert f["matched"] == 3 and f["unmatched"] == 1 and f["failed"] == 1
    assert f["match_method"] == BY_RESPONSE_ID
    assert f["error_ms"]["p50"] == 2.0 and f["error_ms"]["count"] == 3
    # Only the two responses that reported their lateness have a client-side error.
    assert f["client_error_ms"]["count"] == 2 and f["client_error_ms"]["p50"] == 1.75
    assert f["decode_tps"]["p1"] == 1000.0
    assert run_figures(MatchResult(pairs=[_pair(40.0, 38.0, None)]), 1)["client_error_ms"] is None


def test_where_the_tool_gives_the_server_read_delay_the_client_error_is_split() -> None:
    def pair(ttft: float, late: float, read: float | None) -> Pair:
        m = Measured(True, ttft, 1000.0, response_id="x", server_read_ms=read)
        return Pair(
            m, ServerEntry("responses", "x", None, None, 1, "completed", 38.0, late), BY_RESPONSE_ID
        )

    # client errors 1.5, 2.5 and 3.0 ms, of which the server took 1.0 and 2.4 to read the first two
    f = run_figures(
        MatchResult(pairs=[pair(40.0, 0.5, 1.0), pair(41.0, 0.5, 2.4), pair(41.0, 0.0, None)]), 3
    )
    assert f["client_error_ms"]["count"] == 3
    assert f["server_read_ms"]["count"] == 2 and f["server_read_ms"]["p50"] == pytest.approx(1.7)
    own = f["client_own_error_ms"]
    assert own["count"] == 2 and own["mean"] == pytest.approx(0.3)
    assert own["p99"] == pytest.approx(0.5, abs=0.01)
    # a peer gives no send stamp on the server's clock: no split, not a zero
    peer = run_figures(MatchResult(pairs=[pair(40.0, 0.5, None)]), 1)
    assert peer["server_read_ms"] is None and peer["client_own_error_ms"] is None


def _run(tool: str, streams: int, p50: float, p99: float, transport: str = "chat") -> dict:
    return {
        "tool": tool,
        "version": "9.9",
        "transport": transport,
        "streams": streams,
        "status": "ok",
        "cpu_s": 1.5,
        "figures": {
            "reported": 10,
            "matched": 10,
            "error_ms": {"p50": p50, "p99": p99},
            "client_error_ms": None,
            "decode_tps": {"p1": 990.0, "p99": 1001.0},
        },
    }


def test_the_target_compares_loopbench_chat_with_the_best_peer_per_statistic() -> None:
    runs = [
        _run("loopbench", 64, 0.5, 2.0),
        _run("loopbench", 64, 9.0, 90.0, transport="ws"),  # information only
        _run("guidellm", 64, 3.0, 50.0),
        _run("aiperf", 64, 4.0, 12.0),
        _run("guidellm", 16, 0.1, 0.1),  # another stream count
    ]
    v = target(runs, 64)
    assert v.passed is True
    assert v.detail["p50"]["best_peer"] == "guidellm" and v.detail["p99"]["best_peer"] == "aiperf"
    runs[0] = _run("loopbench", 64, 0.5, 3.0)  # 3.0 > 12.0 / 5
    assert target(runs, 64).passed is False
    assert "FAIL" in target(runs, 64).text
    only_us = [r for r in runs if r["tool"] == "loopbench"]
    assert target(only_us, 64).passed is None
    assert "no peer was measured" in target(only_us, 64).text
    assert "loopbench (chat) was not measured" in target(runs[2:], 64).text
    assert target(runs[2:], 64).passed is None
    not_installed = [*only_us, {"tool": "aiperf", "streams": 64, "status": "not installed"}]
    assert target(not_installed, 64).passed is None


def _precise(transport: str, p99: float, tps: tuple[float, float] = (995.0, 1000.0)) -> dict:
    run = _run("loopbench", 64, 0.3, 1.0, transport=transport)
    # The server's read delay is in the peers' column, not in the client-side error judged.
    run["figures"]["client_error_ms"] = {"p50": 0.5, "p99": p99 + 5.0}
    run["figures"]["client_own_error_ms"] = {"p50": 0.05, "p99": p99}
    run["figures"]["decode_tps"] = {"p1": tps[0], "p99": tps[1]}
    return run


def test_every_loopbench_row_is_held_to_the_client_error_and_decode_tps_of_issue_39() -> None:
    runs = [
        _precise("chat", 0.41),
        _precise("ws", 0.5),
        _precise("http", 0.2),
        _run("aiperf", 64, 9, 90),
    ]
    v = precision_target(runs, 64)
    assert v.passed is True and v.text.startswith("PASS")
    assert v.detail["ws"] == {"client_error_p99_ms": 0.5, "decode_tps": [995.0, 1000.0]}
    runs[1] = _precise("ws", 2.42)  # the issue's quiet-machine ws figure
    v = precision_target(runs, 64)
    assert v.passed is False and "loopbench (ws) client-side error p99 2.42 ms" in v.text
    assert "(missed)" in v.text and v.text.count("(missed)") == 1
    runs[1] = _precise("ws", 0.3, tps=(974.0, 1000.0))  # decode p1 more than 1 % below 1,000
    assert precision_target(runs, 64).passed is False
    # ... and where the extra span went, when the server timed its writes
    runs[1]["figures"]["decode_span_extra_ms"] = {
        "measured": {"p99": 2.62},
        "server": {"p99": 2.58},
        "wire_and_client": {"p99": 0.08},
    }
    v = precision_target(runs, 64)
    assert v.passed is False
    assert (
        "decode TPS 974–1,000 (missed) [extra decode span p99 2.62 ms, of it the server" in v.text
    )
    assert v.text.count("[extra decode span") == 1  # only the row that missed its decode band
    runs[1] = _precise("ws", 0.3, tps=(995.0, 1011.0))
    assert precision_target(runs, 64).passed is False
    runs[1] = {**_precise("ws", 0.3), "status": "failed (exit 4)"}
    assert "loopbench (ws) did not finish" in precision_target(runs, 64).text
    no_split = _precise("ws", 0.3)
    del no_split["figures"]["client_own_error_ms"]  # a run without server read stamps
    runs[1] = no_split
    assert precision_target(runs, 64).passed is None
    runs[1] = {**_precise("ws", 0.3), "not_judged": "not judged: the machine was busy"}
    assert precision_target(runs, 64).passed is None
    assert precision_target(runs, 16).passed is None  # no row at that stream count


def test_check_judges_both_targets_a_miss_first() -> None:
    yes, no, unknown = Verdict(True, "", {}), Verdict(False, "", {}), Verdict(None, "", {})
    assert combined(yes, yes) is True
    assert combined(yes, no) is False and combined(unknown, no) is False
    assert combined(yes, unknown) is None


def test_the_table_has_a_row_per_tool_and_streams_and_says_not_installed() -> None:
    runs = [
        _run("aiperf", 1, 3.0, 9.0),
        _run("loopbench", 1, 0.5, 2.0),
        {"tool": "guidellm", "version": None, "streams": 1, "status": "not installed"},
    ]
    table = render_table(runs).splitlines()
    assert table[0].startswith("| tool | streams | matched | error p50 | error p99")
    assert table[2].startswith("| loopbench (chat) | 1 | 10/10 | 0.50 ms | 2.00 ms")
    runs[1]["figures"]["match_method"] = "response id"
    assert "| 10/10 by response id | 0.50 ms |" in render_table(runs)
    assert table[3].startswith("| guidellm | 1 | not installed")
    assert "| 990–1,001 | 1.5 s |" in table[4]
    # the client's own part (client error − server read) where the run has it
    runs[1]["figures"]["client_own_error_ms"] = {"p50": 0.01, "p99": 0.2}
    assert "| 0.01 ms / 0.20 ms | 990–1,001 |" in render_table(runs)
    assert "| – | 990–1,001 |" in render_table(runs).splitlines()[4]


def test_the_benchmarks_section_is_replaced_between_the_markers_only() -> None:
    doc = {"runs": [_run("loopbench", 1, 0.5, 2.0)], "machine": {"cpu_steal_pct": 1.5}}
    text = f"# B\n\nbefore\n{BEGIN_MARKER}\nold table\n{END_MARKER}\nafter\n"
    new = replace_section(text, render_section(doc))
    assert new.startswith("# B\n\nbefore\n" + BEGIN_MARKER + "\n")
    assert new.endswith(END_MARKER + "\nafter\n")
    assert "old table" not in new and "| loopbench (chat) | 1 |" in new and "1.5 %" in new
    assert replace_section(new, render_section(doc)) == new  # idempotent
    with pytest.raises(ValueError, match="once each, found them 0 and 1 times"):
        replace_section(f"x\n{END_MARKER}\n", "t")


def test_each_peer_gets_the_same_load_and_the_offline_tokenizer() -> None:
    load = cmd.Load(streams=16, requests=160, warmup=16)
    argv = cmd.aiperf_argv(
        Path("/v/bin/aiperf"), "http://127.0.0.1:9", load, Path("p.jsonl"), Path("o")
    )

    def opt(name: str) -> str:
        return argv[argv.index(name) + 1]

    assert opt("--concurrency") == "16" and opt("--request-count") == "176"
    assert opt("--endpoint-type") == "chat" and "--streaming" in argv
    assert opt("--tokenizer") == offline.TOKENIZER_NAME and "--no-server-metrics" in argv
    spec = cmd.guidellm_scenario("http://127.0.0.1:9", load, Path("p.jsonl"), Path("b.json"))[
        "spec"
    ]
    assert spec["profile"] == {"kind": "concurrent", "streams": [16]}
    assert spec["constraints"] == [{"kind": "max_requests", "count": 176}]
    assert spec["backend"]["request_format"] == "/v1/chat/completions"
    assert spec["tokenizer"]["model"] == offline.TOKENIZER_NAME
    lb = cmd.loopbench_scenario(load)
    assert lb["rollout"]["count"] == 176 and lb["load"]["warmup_rollouts"] == 16
    assert lb["rollout"]["final_answer_tokens"] == cmd.OUTPUT_TOKENS


def test_prompts_are_tagged_uniquely_and_sized_like_50_tokens(tmp_path: Path) -> None:
    counter = offline.TagCounter()
    a, b = counter.take(40), counter.take(40)
    assert a.stop == b.start
    prompts = [offline.prompt(n) for n in range(2000)]
    assert len({TAG_RE.search(p).group(0) for p in prompts}) == 2000  # type: ignore[union-attr]
    assert all(len(p) == 4 * offline.PROMPT_TOKENS for p in prompts)
    rows = [json.loads(x) for x in offline.guidellm_rows(range(3), 200)]
    assert rows[0] == {"prompt": offline.prompt(0), "output_tokens_count": 200}
    rows = [json.loads(x) for x in offline.aiperf_rows(range(3), 200)]
    assert rows[2] == {"text": offline.prompt(2), "output_length": 200}


def test_the_tokenizer_is_a_cached_snapshot_that_loads_offline(tmp_path: Path) -> None:
    snapshot = offline.write_tokenizer(tmp_path, [offline.prompt(n) for n in range(50)])
    repo = tmp_path / "hub" / "models--loopbench--peers-bpe"
    assert snapshot.parent.parent == repo
    assert (repo / "refs" / "main").read_text() == snapshot.name
    tok = Tokenizer.from_file(str(snapshot / "tokenizer.json"))
    ids = tok.encode(offline.prompt(7)).ids
    assert 0 < len(ids) < 4 * offline.PROMPT_TOKENS
    assert tok.decode(ids) == offline.prompt(7)
    config = json.loads((snapshot / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    env = offline.offline_env(tmp_path, {"HF_TOKEN": "secret", "PATH": "/bin"})
    assert env["HF_HUB_OFFLINE"] == "1" and env["TRANSFORMERS_OFFLINE"] == "1"
    assert env["HF_HOME"] == str(tmp_path) and "HF_TOKEN" not in env


def test_the_artifacts_folder_is_emptied_only_when_the_bench_made_it(tmp_path: Path) -> None:
    mine = tmp_path / "peers"
    _fresh_folder(mine)
    (mine / "old-run.txt").write_text("x")
    _fresh_folder(mine)
    assert sorted(p.name for p in mine.iterdir()) == [MARKER]
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "keep.txt").write_text("precious")
    with pytest.raises(PeersError, match=r"was not made by python -m bench\.peers"):
        _fresh_folder(theirs)
    assert (theirs / "keep.txt").read_text() == "precious"


def test_the_locust_row_is_held_to_the_precision_bound_and_runs_loopbench_locust() -> None:
    def row(tool: str, p99: float) -> dict[str, object]:
        figures = {"client_own_error_ms": {"p99": p99}, "decode_tps": {"p1": 998, "p99": 1002}}
        return {
            "tool": tool,
            "transport": "chat",
            "streams": 64,
            "status": "ok",
            "figures": figures,
        }

    verdict = precision_target([row("loopbench", 0.3), row(locust_row.TOOL, 0.9)])
    assert (
        verdict.passed is False and f"{locust_row.TOOL} client-side error p99 0.90" in verdict.text
    )
    assert verdict.detail["chat"]["client_error_p99_ms"] == 0.3
    assert verdict.detail["locust"]["client_error_p99_ms"] == 0.9
    assert precision_target([row("loopbench", 0.3), row(locust_row.TOOL, 0.4)]).passed is True
    argv = locust_row.locust_argv("py", Path("s.yaml"), "http://h:1", "chat", Path("out"), "run")
    assert argv[:4] == ["py", "-m", "harness", "locust"] and argv[-2:] == ["--workers", "1"]
    assert "--no-probe" not in argv and "--target" in argv and "http://h:1/v1" in argv


def test_a_decode_span_longer_than_modelled_splits_into_the_servers_share_and_the_rest() -> None:
    """Known records: spans 0.5 and 3.0 ms over the modelled 199 ms; the server wrote the last
    token 0.4 and 1.0 ms later than the first (relative to plan), so the wire and the client
    took 0.1 and 2.0 ms — the second one's last token shared its read with the terminal event."""

    def pair(span: float, first_late: float, last_late: float, shared: bool) -> Pair:
        m = Measured(True, 40.0, 1000.0, response_id="x", decode_ms=span, last_with_terminal=shared)
        e = ServerEntry(
            "responses", "x", None, None, 1, "completed", 38.0, first_late,
            decode_ms=199.0, last_late_ms=last_late,
        )  # fmt: skip
        return Pair(m, e, BY_RESPONSE_ID)

    f = run_figures(
        MatchResult(pairs=[pair(199.5, 0.1, 0.5, False), pair(202.0, 0.2, 1.2, True)]), 2
    )
    span = f["decode_span_extra_ms"]
    assert span["measured"]["mean"] == pytest.approx(1.75)
    assert span["server"]["mean"] == pytest.approx(0.7)
    assert span["wire_and_client"]["p50"] == pytest.approx(1.05)
    assert span["wire_and_client"]["mean"] == pytest.approx(1.05)
    assert f["last_token_read_with_terminal_pct"] == 50.0
    assert "first_token_read_merged" not in f  # not known for these rows


def test_the_turns_whose_first_token_shares_a_later_deltas_stamp_are_counted() -> None:
    pairs = [
        Pair(
            Measured(True, 40.0, 1000.0, response_id=f"r{n}", first_read_deltas=n),
            e,
            BY_RESPONSE_ID,
        )
        for n, e in zip((1, 2, 1, 5), [_pair(40.0, 38.0, 0.5).entry] * 4, strict=True)
    ]
    assert run_figures(MatchResult(pairs=pairs), 4)["first_token_read_merged"] == 2
    # a peer's row (no span of its own, no lateness of the last token): nothing is invented
    assert "decode_span_extra_ms" not in run_figures(MatchResult(pairs=[_pair(40.0, 38.0, 0.5)]), 1)
