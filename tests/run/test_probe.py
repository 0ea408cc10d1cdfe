"""``loopbench probe`` and the probe before ``loopbench run --target``, against real servers.

The reference server must pass every check; the foreign servers (tests/foreign_servers.py)
must each be told apart by the evidence a user reads.  A refused run exits 4 before
anything is measured: no run folder is written (docs/probe.md).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from harness.client import probe as checks
from harness.client.probe import (
    Finding,
    features_for,
    judge_background,
    judge_chat,
    judge_chat_tools,
    judge_compaction,
    judge_lanes,
    judge_messages,
    judge_prompt_cache,
    judge_retrieve,
    judge_sse,
    judge_ws,
    refusal,
)
from harness.client.probe_answers import (
    CHAT_API,
    MESSAGES_API,
    RESPONSES_API,
    StreamReading,
    read_body,
)
from harness.client.shaping import RequestShaping
from harness.run.probe import probe, probe_for_run
from harness.wire.exit_codes import ExitCode
from harness.wire.sse import encode_event
from harness.wire.transports import TRANSPORTS, transport_spec
from tests.foreign_servers import (
    FORBIDDEN_MESSAGE,
    RATE_LIMIT_MESSAGE,
    canned_events,
    canned_sse_server,
    dead_target,
    error_page_server,
    error_server,
    forbidden_server,
    http_only_server,
    key_required_server,
    mute_websocket_server,
    plain_web_server,
    rate_limited_server,
    silent_server,
)
from tests.runs import ROOT, TINY, _argv, in_process, loopbench, started

PROBE_LINE = "nothing was measured"


def read_stream(events: list[dict[str, object]]) -> StreamReading:
    """Responses events as the SSE body a server sends, read by the probe."""
    return read_body(RESPONSES_API, b"".join(encode_event(e) for e in events))


def _by_feature(findings: list[Finding]) -> dict[str, Finding]:
    return {f.feature: f for f in findings}


def _probe(url: str) -> dict[str, Finding]:
    return _by_feature(probe(url, api_key="sk-loopbench", timeout_s=10))


def _run(url: str, out: Path, *args: str) -> tuple[int, str]:
    """``loopbench run tiny.yaml --target URL -q ARGS`` through ``main`` in this process (what
    the run says and refuses is the claim, not the process around it): exit code, output."""
    return in_process(
        "run", TINY, "--target", url, "--out", out, "--run-id", "r", "-q", *args, report=False
    )


def test_reference_server_supports_every_responses_feature(server_url: str) -> None:
    # All three APIs: tests/run/test_probe_apis.py
    proc = loopbench("probe", "--target", server_url, "--json")
    assert proc.returncode == ExitCode.OK, proc.stderr
    found = json.loads(proc.stdout)["features"]
    assert list(found) == [f for f, _ in checks.FEATURES]
    responses = [f for f, _ in checks.FEATURES if checks.API_OF[f] in (None, RESPONSES_API)]
    assert {f: found[f]["answer"] for f in responses} == dict.fromkeys(responses, "yes")
    assert "honoured" in found[checks.CHAINING]["evidence"]
    assert "honoured" in found[checks.WS_CHAINING]["evidence"]


def test_dead_target_probe_exits_4_and_says_why_first() -> None:
    """Both streams as a terminal shows them: the error came after ~40 lines of rows that each
    said "not checked: the target is unreachable"; now it comes first, and those are one line."""
    with dead_target() as url:
        proc = subprocess.run(
            _argv(("probe", "--target", url)),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
    assert proc.returncode == ExitCode.USAGE
    port = url.split(":")[2].split("/")[0]
    lines = proc.stdout.strip().splitlines()
    assert lines[0] == (
        f"error: target {url} is unreachable: connect to 127.0.0.1:{port}: connection refused"
    )
    assert [line for line in lines if "not checked" in line] == [
        f"not checked: {len(checks.FEATURES) - 1} features (the target is unreachable)"
    ]
    assert len(lines) <= 6, proc.stdout


def test_dead_target_run_refused_before_measuring(tmp_path: Path) -> None:
    with dead_target() as url:
        code, err = _run(url, tmp_path / "results")
    assert code == ExitCode.USAGE
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"error: target {url} is unreachable: connect to 127.0.0.1:")
    assert "connection refused" in lines[0]
    # Refused before measuring: no run folder at all.
    assert not (tmp_path / "results").exists()


def test_http_only_endpoint_refuses_ws(tmp_path: Path) -> None:
    with http_only_server() as url:
        found = _probe(url)
        code, err = _run(url, tmp_path / "results", "--transports", "http,ws")
        # The same endpoint serves an HTTP-only run.
        ok_code, ok_err = _run(url, tmp_path / "ok", "--transports", "http,http-chained")
    ws_url = url.replace("http://", "ws://") + "/responses"
    # the server's own reason, as a client error: not a 500 that reads as a crash
    expected = (
        f"no Responses API WebSocket mode at {ws_url}: the upgrade was answered with HTTP 404: "
        "websocket_disabled: WebSocket mode is disabled on this server (--no-websocket); use "
        "POST /v1/responses over HTTP"
    )
    assert found[checks.SSE].supported and found[checks.CHAINING].supported
    assert found[checks.WEBSOCKET] == Finding(checks.WEBSOCKET, False, expected)
    assert not found[checks.LANES].checked and found[checks.LANES].answer == "-"
    assert code == ExitCode.USAGE
    assert err.strip().splitlines() == [
        f"error: transport ws cannot run against {url}: {expected} "
        "(nothing was measured; --no-probe skips this check)"
    ]
    assert not (tmp_path / "results").exists()
    assert ok_code == ExitCode.OK, ok_err
    assert PROBE_LINE not in ok_err
    assert (tmp_path / "ok" / "r" / "summary.json").exists()


def test_plain_web_and_500_servers_are_told_apart() -> None:
    """A web page is "no"; a 500 is "unknown": a server error says nothing of the API, and
    still stops a run (the run would meet the same error)."""
    with plain_web_server() as web, error_server() as broken:
        web_found = _probe(web)
        broken_found = _probe(broken)
    assert web_found[checks.REACHABLE].supported and broken_found[checks.REACHABLE].supported
    assert web_found[checks.SSE].evidence.endswith("answered 200 text/html, not an SSE stream")
    assert web_found[checks.WEBSOCKET].supported is False
    assert (
        "no Responses API WebSocket mode at ws://127.0.0.1:" in web_found[checks.WEBSOCKET].evidence
    )
    assert broken_found[checks.SSE] == Finding(
        checks.SSE,
        None,
        f"POST {broken}/responses answered HTTP 500 with the body Internal Server Error "
        "(a server error, not an answer about the Responses API; try again later)",
        stopped_by="server",
    )
    ws_url = broken.replace("http://", "ws://") + "/responses"
    assert (
        broken_found[checks.WEBSOCKET].supported is None
        and broken_found[checks.WEBSOCKET].stopped_by is not None
    )
    assert broken_found[checks.WEBSOCKET].evidence.startswith(
        f"the upgrade at {ws_url} was answered with HTTP 500"
    )
    assert broken_found[checks.WEBSOCKET].evidence.endswith(
        "(a server error, not an answer about WebSocket mode; try again later)"
    )
    assert broken_found[checks.CHAINING].evidence == (
        f"not checked: the check it builds on got no answer about it at {broken}/responses "
        "(a server error, a rate limit or a time-out)"
    )
    cause = refusal(list(broken_found.values()), [transport_spec("http")], broken)
    assert (
        cause == f"transport http cannot run against {broken}: {broken_found[checks.SSE].evidence}"
    )


def test_a_rate_limited_gateway_is_not_a_missing_api(tmp_path: Path) -> None:
    """429 to everything: every API "unknown" with the gateway's words, and a run refused
    with them (exit 4) rather than started against a gateway that would refuse each turn."""
    with rate_limited_server() as url:
        found = _probe(url)
        code, err = _run(url, tmp_path / "results", "--transports", "ws")
    ws_url = url.replace("http://", "ws://") + "/responses"
    for feature, about in (
        (checks.SSE, "the Responses API"),
        (checks.CHAT, "the Chat Completions API"),
    ):
        assert found[feature].supported is None and found[feature].stopped_by == "server"
        assert found[feature].evidence.endswith(
            f": rate_limit_exceeded: {RATE_LIMIT_MESSAGE} (the server is rate-limiting, not an "
            f"answer about {about}; try again later)"
        )
    assert found[checks.WEBSOCKET].evidence == (
        f"the upgrade at {ws_url} was answered with HTTP 429: rate_limit_exceeded: "
        f"{RATE_LIMIT_MESSAGE} (the server is rate-limiting, not an answer about WebSocket "
        "mode; try again later)"
    )
    assert code == ExitCode.USAGE
    assert err.strip().splitlines() == [
        f"error: transport ws cannot run against {url}: {found[checks.WEBSOCKET].evidence} "
        "(nothing was measured; --no-probe skips this check)"
    ]
    assert not (tmp_path / "results").exists()


def test_no_probe_skips_the_probe(tmp_path: Path) -> None:
    # The outcome of measuring a dead target is not this test's business; only that
    # it was measured, without a probe line.
    with dead_target() as url:
        _, err = _run(url, tmp_path / "results", "--transports", "http", "--no-probe")
    assert PROBE_LINE not in err
    assert (tmp_path / "results" / "r").is_dir()


# -- the pure part ----------------------------------------------------------------------------


def test_features_follow_the_transport_registry() -> None:
    assert features_for([transport_spec("http")]) == [checks.REACHABLE, checks.SSE]
    assert features_for([transport_spec("http-chained")]) == [
        checks.REACHABLE,
        checks.SSE,
        checks.CHAINING,
    ]
    assert features_for([transport_spec("ws")]) == [
        checks.REACHABLE,
        checks.WEBSOCKET,
        checks.WS_CHAINING,
    ]
    assert features_for([transport_spec("ws-append")]) == [checks.REACHABLE, checks.WEBSOCKET]
    # Nothing a run needs is outside the table, and warm-up/lanes are probe-only.
    needed = set(features_for(TRANSPORTS))
    assert needed <= {f for f, _ in checks.FEATURES} and not needed & {checks.WARMUP, checks.LANES}


def test_unreachable_is_the_first_cause() -> None:
    findings = [
        Finding(checks.REACHABLE, False, "connect to h:1: connection refused"),
        Finding(checks.WEBSOCKET, False, "no WebSocket mode"),
    ]
    specs = [transport_spec("ws")]
    assert refusal(findings, specs, "http://h:1/v1") == (
        "target http://h:1/v1 is unreachable: connect to h:1: connection refused"
    )
    # Unknown (nothing to compare) lets the run go ahead.
    assert refusal([Finding(checks.WS_CHAINING, None, "no usage")], specs, "u") is None


def test_an_unknown_about_the_client_stops_a_run_any_other_does_not() -> None:
    """docs/probe.md, "Before a run": refused credentials, a 403 and a model the endpoint does
    not serve stop it; an unknown about the feature itself does not."""
    specs = [transport_spec("ws")]
    for flag in ("credentials", "forbidden", "model", "server"):
        found = Finding(checks.WEBSOCKET, None, f"the {flag} evidence", stopped_by=flag)
        assert refusal([found], specs, "u") == (
            f"transport ws cannot run against u: the {flag} evidence"
        )
    assert refusal([Finding(checks.WEBSOCKET, None, "cannot be told")], specs, "u") is None


@pytest.mark.parametrize(
    ("status", "answer"), [(503, None), (429, None), (408, None), (404, False), (400, False)]
)
def test_each_checks_error_answer_is_no_unless_the_server_failed_or_was_busy(
    status: int, answer: bool | None
) -> None:
    """Not only the API rows: the checks under them (tool calls, compaction, background,
    retrieval, prompt caching) read a 5xx, 429 or 408 as "unknown" too, never "no"."""
    url = "http://h/v1/x"
    said = "server_error: try later"
    found = [
        judge_chat_tools(url, status, "application/json", said),
        judge_compaction(url, status, said),
        judge_background(url, status, said, None, 0),
        judge_retrieve(url, "resp_1", (status, said), None),
        judge_prompt_cache(url, (status, said), (status, said)),
    ]
    for f in found:
        assert f.supported is answer, f
        assert (f.stopped_by == "server") is (answer is None), f
        if answer is None:
            assert f.evidence.endswith("not an answer about the feature; try again later)"), f


@pytest.mark.parametrize(
    ("status", "code", "answer"),
    [
        (503, "service_unavailable", None),
        (None, "server_error", None),
        (429, "rate_limit_exceeded", None),
        (400, "invalid_request_error", False),
    ],
)
def test_a_stream_that_ends_in_the_servers_error_is_unknown_not_missing(
    status: int | None, code: str, answer: bool | None
) -> None:
    """An upgrade (or an SSE stream) whose response ends in an error event: "no" when the
    request was refused, "unknown" when the server failed, was overloaded or rate-limited."""
    event: dict[str, object] = {"type": "error", "error": {"code": code, "message": "m"}}
    if status is not None:
        event["status"] = status
    reading = read_stream([event])
    for found in (
        judge_ws("ws://h/v1/responses", reading),
        judge_sse("http://h/v1/responses", 200, "text/event-stream", reading),
    ):
        assert found.supported is answer, found
        assert found.stopped_by is not None or answer is False
        assert found.evidence.endswith("try again later)") is (answer is None), found


@pytest.mark.parametrize(
    ("error", "answer"),
    [
        ({"type": "overloaded_error", "message": "m"}, None),
        ({"type": "api_error", "message": "m"}, None),
        ({"code": "rate_limit_exceeded", "message": "m"}, None),
        ({"type": "invalid_request_error", "message": "m"}, False),
    ],
)
def test_chat_and_messages_streams_ending_in_the_servers_error_are_unknown(
    error: dict[str, str], answer: bool | None
) -> None:
    """The same rule for the Chat Completions and Messages streams as for the Responses API."""
    chat = read_body(CHAT_API, f"data: {json.dumps({'error': error})}\n\n".encode())
    messages = read_body(
        MESSAGES_API,
        f"event: error\ndata: {json.dumps({'type': 'error', 'error': error})}\n\n".encode(),
    )
    for found in (
        judge_chat("http://h/v1/chat/completions", 200, "text/event-stream", chat),
        judge_chat_tools("http://h/v1/chat/completions", 200, "text/event-stream", chat),
        judge_messages("http://h/v1/messages", 200, "text/event-stream", messages),
        judge_prompt_cache("http://h/v1/messages", (200, messages), (200, messages)),
    ):
        assert found.supported is answer, found
        assert (found.stopped_by == "server") is (answer is None), found


def test_lanes_need_the_stream_id_in_every_event() -> None:
    events = canned_events("resp_1")
    assert judge_lanes(read_stream(events)).supported is False
    laned = [{**e, "stream_id": "loopbench-probe"} for e in events]
    assert judge_lanes(read_stream(laned)).supported is True
    broken = read_stream(events[:3])
    assert broken.terminal is None and not broken.finished


def test_bad_target_url_exits_4() -> None:
    proc = loopbench("probe", "--target", "ftp://127.0.0.1/v1")
    assert proc.returncode == ExitCode.USAGE
    assert proc.stderr.strip() == (
        "error: --target: base URL 'ftp://127.0.0.1/v1': expected http://HOST[:PORT]/PATH or https://"
    )


def _unknown(feature: str, evidence: str) -> Finding:
    """What a check finds when the server failed to answer: neither yes nor no."""
    return Finding(feature, None, evidence, stopped_by="server")


def test_each_check_is_bounded_by_its_timeout() -> None:
    with silent_server() as url:
        found = _by_feature(probe(url, api_key="sk-loopbench", timeout_s=0.5))
    assert found[checks.REACHABLE].supported
    # no answer says nothing of the feature: "unknown", and it stops a run all the same
    assert found[checks.SSE] == _unknown(
        checks.SSE, f"POST {url}/responses: no complete answer within 0.5 s"
    )
    ws_url = url.replace("http://", "ws://") + "/responses"
    assert found[checks.WEBSOCKET] == _unknown(
        checks.WEBSOCKET, f"no answer to the WebSocket upgrade at {ws_url} within 0.5 s"
    )


def test_a_websocket_that_upgrades_then_says_nothing_is_unknown_not_missing() -> None:
    with mute_websocket_server() as url:
        found = _by_feature(
            probe(
                url,
                [checks.REACHABLE, checks.WEBSOCKET, checks.WS_CHAINING],
                api_key="sk-loopbench",
                timeout_s=0.5,
            )
        )
    ws_url = url.replace("http://", "ws://") + "/responses"
    assert found[checks.WEBSOCKET] == _unknown(
        checks.WEBSOCKET, f"{ws_url} upgraded, but no terminal event within 0.5 s (0 events)"
    )
    assert not found[checks.WS_CHAINING].checked
    cause = refusal(list(found.values()), [transport_spec("ws")], url)
    assert cause == f"transport ws cannot run against {url}: {found[checks.WEBSOCKET].evidence}"


def test_a_run_says_what_it_probes_before_waiting_on_a_silent_endpoint(tmp_path: Path) -> None:
    """An endpoint that accepts the connection but never answers holds each check for its
    whole time-out: the run says first what it is waiting on, and the refusal states the
    time-out and how to give more."""
    with silent_server() as url:
        args = ["run", TINY, "--target", url, "--out", tmp_path / "results", "--run-id", "r"]
        with started(*args, "--probe-timeout-s", "1.5") as proc:
            assert proc.stderr is not None
            first = proc.stderr.readline()
            # two checks of 1.5 s each are still ahead of it: the line came before the waiting
            waiting = proc.poll() is None
            _, rest = proc.communicate(timeout=120)
        quiet_code, quiet_err = _run(url, tmp_path / "results", "--probe-timeout-s", "0.5")
    ws_url = url.replace("http://", "ws://") + "/responses"
    assert first == f"probing {url} (http, ws; each check waits up to 1.5 s) …\n"
    assert waiting
    assert proc.returncode == ExitCode.USAGE
    [line] = rest.strip().splitlines()
    assert line.startswith(f"error: transports http, ws cannot run against {url}: ")
    assert "no complete answer within 1.5 s" in line and f"{ws_url} within 1.5 s" in line
    assert line.endswith(
        "(nothing was measured; --no-probe skips this check; --probe-timeout-s waits longer)"
    )
    # -q: the refusal alone
    assert quiet_code == ExitCode.USAGE
    [line] = quiet_err.strip().splitlines()
    assert line.startswith("error: ") and "within 0.5 s" in line
    assert not (tmp_path / "results").exists()


def test_the_probe_timeout_must_be_positive() -> None:
    code, err = in_process(
        "run", TINY, "--target", "http://127.0.0.1:9/v1", "--probe-timeout-s", "0"
    )
    assert code == ExitCode.USAGE
    assert err.strip() == (
        "error: --probe-timeout-s: expected a positive number of seconds, got 0.0"
    )


def test_compacting_run_needs_the_compact_route(tmp_path: Path) -> None:
    # The canned server streams POST /responses but has no POST /responses/compact.
    with canned_sse_server() as url:
        code, err = _run(
            url, tmp_path / "results", "--transports", "http",
            "--set", "rollout.compact_at_tokens=100000",
        )  # fmt: skip
    assert code == ExitCode.USAGE
    assert err.strip().splitlines() == [
        f"error: transport http cannot run against {url}: no compaction at {url}/responses/compact: "
        "HTTP 404 with the body Not Found (nothing was measured; --no-probe skips this check)"
    ]
    assert not (tmp_path / "results").exists()
    # without compaction the endpoint is not asked for it
    assert features_for([transport_spec("http")]) == [checks.REACHABLE, checks.SSE]
    assert features_for([transport_spec("http")], compaction=True) == [
        checks.REACHABLE,
        checks.SSE,
        checks.COMPACTION,
    ]


def test_refused_credentials_are_not_a_missing_api(tmp_path: Path) -> None:
    """A 401 says nothing of which APIs are there (a gateway answers it before routing): the
    probe answers "unknown" and names the credentials; a run is refused for them, once per
    transport, in one line."""
    with key_required_server() as url:
        found = _probe(url)
        code, err = _run(url, tmp_path / "results", "--transports", "http,ws")
    for feature in (checks.SSE, checks.WEBSOCKET):
        assert found[feature].supported is None and found[feature].stopped_by == "credentials", (
            found[feature]
        )
        assert "refused the credentials (HTTP 401" in found[feature].evidence
        assert "--api-key-env NAME" in found[feature].evidence
    assert code == ExitCode.USAGE
    [line] = err.strip().splitlines()
    assert line.startswith(f"error: transports http, ws cannot run against {url}: http: ")
    assert "ws: " in line and line.count("refused the credentials") == 2
    assert line.count("--api-key-env NAME") == 1  # how to give a key: once, not per transport


#: what a row under an API said when the API check answered with an auth error, before the
#: rows gave that cause: each claims the API (or its stream) is not there
_CLAIMS_ABSENCE = (
    "no Responses API",
    "no SSE stream",
    "no WebSocket mode",
    "no Chat",
    "no Anth",
)


def _skipped_rows(found: dict[str, Finding], url: str, cause: str) -> None:
    """Every row under an API the server refused says the cause, at that API's URL."""
    under = {
        checks.CHAINING: f"{url}/responses",
        checks.COMPACTION: f"{url}/responses",
        checks.RETRIEVE: f"{url}/responses",
        checks.BACKGROUND: f"{url}/responses",
        checks.WS_CHAINING: url.replace("http://", "ws://") + "/responses",
        checks.WARMUP: url.replace("http://", "ws://") + "/responses",
        checks.LANES: url.replace("http://", "ws://") + "/responses",
        checks.CHAT_USAGE: f"{url}/chat/completions",
        checks.CHAT_TOOLS: f"{url}/chat/completions",
        checks.CHAT_CACHED: f"{url}/chat/completions",
        checks.MESSAGES_CACHE: f"{url}/messages",
    }
    for feature, where in under.items():
        row = found[feature]
        assert not row.checked and row.evidence == f"not checked: {cause} at {where}", row
    for row in found.values():
        assert not any(claim in row.evidence for claim in _CLAIMS_ABSENCE), row


def test_rows_under_a_refused_api_give_the_cause_not_a_missing_api() -> None:
    with key_required_server() as url:
        refused_key = _probe(url)
    with forbidden_server() as url2:
        forbidden = _probe(url2)
    _skipped_rows(refused_key, url, "the server refused the credentials")
    _skipped_rows(forbidden, url2, "the server answered forbidden")


def test_forbidden_is_not_refused_credentials(tmp_path: Path) -> None:
    """403: the server read the key and will not serve it. The probe says forbidden and
    quotes the server's reason, on one line, over HTTP and on the WebSocket upgrade alike;
    the verdict is "unknown" and a run is refused for it."""
    with forbidden_server() as url:
        found = _probe(url)
        code, err = _run(url, tmp_path / "results", "--transports", "http,ws")
    for feature in (checks.SSE, checks.WEBSOCKET, checks.CHAT, checks.MESSAGES):
        row = found[feature]
        assert row.supported is None and row.stopped_by == "forbidden", row
        assert "refused the credentials" not in row.evidence
        assert f"answered forbidden (HTTP 403: model_not_allowed: {FORBIDDEN_MESSAGE})" in (
            row.evidence
        ), row
    assert code == ExitCode.USAGE
    [line] = err.strip().splitlines()
    assert line.startswith(f"error: transports http, ws cannot run against {url}: http: ")
    assert line.count(FORBIDDEN_MESSAGE) == 2
    assert not (tmp_path / "results").exists()


HINT = "--api-key-env NAME"


def test_the_key_hint_only_when_the_placeholder_key_was_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The hint says how to give a key; to a user who gave one it would say the wrong thing."""
    lines: list[str] = []
    with key_required_server() as url, forbidden_server() as url2:
        for target in (url, url2):
            sent = {
                "placeholder": probe(target, api_key="sk-loopbench", timeout_s=10),
                "given": probe(target, api_key="sk-the-users-own", timeout_s=10),
                # a credential header of the user's own replaces the placeholder's
                "header": probe(
                    target,
                    api_key="sk-loopbench",
                    timeout_s=10,
                    shaping=RequestShaping(headers=(("Authorization", "Bearer sk-gw"),)),
                ),
            }
            for how, findings in sent.items():
                for row in findings:
                    if row.stopped_by in ("credentials", "forbidden"):
                        assert (HINT in row.evidence) == (how == "placeholder"), (how, row)
        monkeypatch.setenv("LOOPBENCH_PROBE_TEST_KEY", "sk-the-users-own")
        given = loopbench("probe", "--target", url, "--api-key-env", "LOOPBENCH_PROBE_TEST_KEY")
        placeholder = loopbench("probe", "--target", url)
        refused_run = probe_for_run(
            url, ["http"], api_key="sk-the-users-own", verify_tls=True, say=lines.append
        )
    assert given.returncode == placeholder.returncode == ExitCode.OK
    assert "refused the credentials" in given.stdout and HINT not in given.stdout
    assert placeholder.stdout.count(HINT) == 1  # after the table, not under each refused row
    assert refused_run == ExitCode.USAGE
    [line] = lines
    assert "refused the credentials (HTTP 401" in line and HINT not in line


def test_a_web_servers_error_page_reaches_the_run_as_one_line_of_text(tmp_path: Path) -> None:
    with error_page_server() as url:
        code, err = _run(url, tmp_path / "results", "--transports", "http")
    assert code == ExitCode.USAGE
    [line] = err.strip().splitlines()
    assert "Message: Unsupported method ('POST')" in line and "<" not in line
    assert line.endswith("(nothing was measured; --no-probe skips this check)")
