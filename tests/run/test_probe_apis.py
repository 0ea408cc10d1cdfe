"""The probe tells which of the three APIs an endpoint has (docs/probe.md).

A vLLM-like chat-only server and an Anthropic-like messages-only server
(tests/foreign_apis.py) must each be told apart by the sentence a user reads; the
reference server serves all three; a run whose transports need an API the endpoint
lacks is refused before anything is measured.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from harness.client import probe as checks
from harness.client.probe import Finding, features_for, refusal, table
from harness.run.probe import probe, probe_for_run
from harness.wire.exit_codes import ExitCode
from harness.wire.transports import transport_spec
from tests.foreign_apis import chat_only_server, messages_only_server
from tests.header_recorder import recording_target
from tests.runs import TINY, loopbench


def _probe(url: str) -> dict[str, Finding]:
    return {f.feature: f for f in probe(url, api_key="sk-loopbench", timeout_s=10)}


def _ws(url: str) -> str:
    return url.replace("http://", "ws://") + "/responses"


def test_chat_only_server_has_the_chat_api_only() -> None:
    with chat_only_server() as url:
        found = _probe(url)
        proc = loopbench("probe", "--target", url, "--json")
    assert found[checks.REACHABLE].supported
    assert found[checks.CHAT].supported is True
    assert found[checks.CHAT].evidence == (
        f"POST {url}/chat/completions answered 200 text/event-stream: 5 chunks, "
        "finish_reason stop, then data: [DONE]"
    )
    assert found[checks.CHAT_USAGE] == Finding(
        checks.CHAT_USAGE, True, "a chunk carried usage: prompt_tokens 15, completion_tokens 2"
    )
    # vLLM without --enable-prompt-tokens-details: no cached tokens to report
    assert found[checks.CHAT_CACHED].supported is False
    assert "no prompt_tokens_details.cached_tokens" in found[checks.CHAT_CACHED].evidence
    assert found[checks.CHAT_TOOLS].supported is True
    assert found[checks.CHAT_TOOLS].evidence.startswith("a call to loopbench_probe streamed in 3 ")
    # the other two APIs, each named in one sentence with its evidence
    assert found[checks.SSE] == Finding(
        checks.SSE,
        False,
        f'no Responses API at {url}/responses: HTTP 404 with the body {{"detail":"Not Found"}}',
    )
    assert found[checks.WEBSOCKET] == Finding(
        checks.WEBSOCKET,
        False,
        f"no Responses API WebSocket mode at {_ws(url)}: the upgrade was answered with HTTP 404 "
        'with the body {"detail":"Not Found"}',
    )
    assert found[checks.MESSAGES] == Finding(
        checks.MESSAGES,
        False,
        f"no Anthropic Messages API at {url}/messages: HTTP 404 with the body "
        '{"detail":"Not Found"}',
    )
    for feature in (
        checks.BACKGROUND,
        checks.COMPACTION,
        checks.RETRIEVE,
        checks.WS_CHAINING,
        checks.MESSAGES_CACHE,
    ):
        assert not found[feature].checked, found[feature]
    assert proc.returncode == ExitCode.OK, proc.stderr
    doc = json.loads(proc.stdout)
    assert {a: v["answer"] for a, v in doc["apis"].items()} == {
        "responses": "no",
        "chat": "yes",
        "messages": "no",
    }
    assert doc["features"][checks.CHAT]["api"] == "chat"


def test_chat_server_without_tool_calls_is_named_and_refused(tmp_path: Path) -> None:
    with chat_only_server(tools=False, cached_tokens=True) as url:
        found = _probe(url)
    assert found[checks.CHAT].supported
    assert found[checks.CHAT_CACHED] == Finding(
        checks.CHAT_CACHED,
        True,
        "usage.prompt_tokens_details.cached_tokens reported: 0 of 15 prompt tokens",
    )
    assert found[checks.CHAT_TOOLS] == Finding(
        checks.CHAT_TOOLS,
        False,
        'a request with a tool and tool_choice "required" was refused: POST '
        f'{url}/chat/completions answered HTTP 400: tool_choice "required" is not supported '
        "by this server",
    )
    # a chat run forces its tool calls: the endpoint cannot serve it
    assert refusal(list(found.values()), [_spec("chat", "chat")], url) == (
        f"transport chat cannot run against {url}: {found[checks.CHAT_TOOLS].evidence}"
    )


def test_messages_only_server_has_the_messages_api_only() -> None:
    with messages_only_server() as url:
        found = _probe(url)
    assert found[checks.MESSAGES].supported is True
    assert found[checks.MESSAGES].evidence == (
        f"POST {url}/messages answered 200 text/event-stream: message_start ... message_stop "
        "in 7 events, stop_reason end_turn"
    )
    # the second request read the system prompt the first one wrote
    assert found[checks.MESSAGES_CACHE].supported is True, found[checks.MESSAGES_CACHE]
    assert (
        "read from the cache: cache_creation_input_tokens 2"
        in found[checks.MESSAGES_CACHE].evidence
    )
    for feature, api in ((checks.CHAT, "Chat Completions API"), (checks.SSE, "Responses API")):
        path = "/chat/completions" if feature == checks.CHAT else "/responses"
        assert found[feature].supported is False
        assert found[feature].evidence.startswith(
            f"no {api} at {url}{path}: HTTP 404: not_found_error: Not found: /v1{path}"
        ), found[feature].evidence
    assert not found[checks.CHAT_TOOLS].checked


def test_ws_run_against_a_chat_only_server_is_refused(tmp_path: Path) -> None:
    with chat_only_server() as url:
        proc = loopbench(
            "run", TINY, "--target", url, "--out", str(tmp_path / "results"), "--run-id", "r",
            "-q", "--transports", "ws", timeout=120, report=False,
        )  # fmt: skip
    assert proc.returncode == ExitCode.USAGE
    assert proc.stderr.strip().splitlines() == [
        f"error: transport ws cannot run against {url}: no Responses API WebSocket mode at "
        f"{_ws(url)}: the upgrade was answered with HTTP 404 with the body "
        '{"detail":"Not Found"} (nothing was measured; --no-probe skips this check)'
    ]
    assert not (tmp_path / "results").exists()


def test_the_table_is_grouped_by_api_and_80_columns_wide() -> None:
    with chat_only_server() as url:
        text = table(url, probe(url, api_key="sk-loopbench", timeout_s=10))
    lines = text.splitlines()
    assert lines[1] == "APIs: Responses API no, Chat Completions API yes, Anthropic Messages API no"
    assert max(map(len, lines)) <= checks.TABLE_WIDTH, text
    for _, label in checks.FEATURES:
        assert label in text
    # each API starts its group; its features are indented under it
    chat_row = next(i for i, line in enumerate(lines) if line.startswith("Chat Completions:"))
    assert lines[chat_row - 1] == ""
    assert any(line.startswith("  tool calls streamed ") for line in lines)


# -- before a run: only what the run's transports need -----------------------------------------


def _spec(name: str, api: str) -> Any:
    """A registry row of another API, as the registry declares it with its ``api`` field
    (the chat and messages rows come with the client's branch of issue 18)."""
    return SimpleNamespace(name=name, api=api, websocket=False, chained=False)


def test_chat_and_messages_transports_need_their_api_only() -> None:
    chat, messages = _spec("chat", "chat"), _spec("messages", "messages")
    assert features_for([chat]) == [checks.REACHABLE, checks.CHAT, checks.CHAT_TOOLS]
    assert features_for([messages]) == [checks.REACHABLE, checks.MESSAGES]
    assert features_for([transport_spec("http"), messages]) == [
        checks.REACHABLE,
        checks.SSE,
        checks.MESSAGES,
    ]
    # a compacting scenario needs POST /responses/compact, but only from a Responses transport
    assert features_for([transport_spec("ws")], compaction=True) == [
        checks.REACHABLE, checks.WEBSOCKET, checks.WS_CHAINING, checks.COMPACTION,
    ]  # fmt: skip
    assert checks.COMPACTION not in features_for([chat], compaction=True)
    missing = Finding(checks.MESSAGES, False, "no Anthropic Messages API at u/messages: HTTP 404")
    assert refusal([Finding(checks.CHAT, True, "ok"), missing], [chat, messages], "u") == (
        "transport messages cannot run against u: no Anthropic Messages API at u/messages: HTTP 404"
    )
    # every transport that cannot run is named at once, each with its own reason
    no_chat = Finding(checks.CHAT, False, "no Chat Completions API at u/chat/completions: HTTP 404")
    assert refusal([no_chat, missing], [chat, messages], "u") == (
        "transports chat, messages cannot run against u: "
        "chat: no Chat Completions API at u/chat/completions: HTTP 404; "
        "messages: no Anthropic Messages API at u/messages: HTTP 404"
    )


def test_pre_run_probe_of_a_chat_only_server() -> None:
    said: list[str] = []
    with chat_only_server() as url:
        ok = probe_for_run(url, ["chat"], api_key="k", verify_tls=True, say=said.append)
        refused = probe_for_run(url, ["chat", "messages"], api_key="k", verify_tls=True,
                                say=said.append)  # fmt: skip
    assert ok is None
    assert refused == ExitCode.USAGE
    assert said == [
        f"error: transport messages cannot run against {url}: no Anthropic Messages API at "
        f'{url}/messages: HTTP 404 with the body {{"detail":"Not Found"}} '
        "(nothing was measured; --no-probe skips this check)"
    ]


# -- the reference server: all three ----------------------------------------------------------


def test_reference_server_serves_all_three_apis(server_url: str) -> None:
    proc = loopbench("probe", "--target", server_url, "--json")
    assert proc.returncode == ExitCode.OK, proc.stderr
    doc: dict[str, Any] = json.loads(proc.stdout)
    assert {a: v["answer"] for a, v in doc["apis"].items()} == {
        "responses": "yes",
        "chat": "yes",
        "messages": "yes",
    }, doc
    answers = {f: v["answer"] for f, v in doc["features"].items()}
    assert answers == {f: "yes" for f, _ in checks.FEATURES}, doc


def test_probe_sends_the_header_and_session_flags_on_every_request() -> None:
    """A gateway with its own auth or routing header can be probed on its own."""
    with recording_target() as (url, recording):
        proc = loopbench(
            "probe", "--target", url, "--header", "X-Team: perf",
            "--session-header", "X-Session-ID", "--json",
        )  # fmt: skip
    assert proc.returncode == ExitCode.OK, proc.stderr
    # every API's request carried both, the WebSocket handshake too
    paths = {e.path for e in recording.exchanges}
    assert {"/v1/responses", "/v1/chat/completions", "/v1/messages"} <= paths, paths
    for exchange in recording.exchanges:
        assert exchange.headers.get("x-team") == "perf", exchange.path
        assert exchange.headers.get("x-session-id") == "loopbench-probe", exchange.path
    assert recording.ws(), "the WebSocket check ran"


def test_a_malformed_probe_header_is_a_usage_error() -> None:
    proc = loopbench("probe", "--target", "http://127.0.0.1:9/v1", "--header", "nocolon")
    assert proc.returncode == ExitCode.USAGE
    assert "--header 'nocolon': expected NAME:VALUE" in proc.stderr


def test_an_unknown_model_is_not_a_missing_api() -> None:
    """vLLM answers a model it does not serve with 404 on a route it has: the probe says so,
    a run with that model is refused naming the model, and the right model passes."""
    with chat_only_server(model="Qwen/Qwen3-8B") as url:
        found = _probe(url)
        chat = found[checks.CHAT]
        assert chat.supported is None and chat.stopped_by == "model"
        assert "does not serve the model" in chat.evidence and "--model" in chat.evidence
        assert "no Chat Completions API" not in chat.evidence
        # the rows under it give that cause too, not an API that is not there
        for feature in (checks.CHAT_USAGE, checks.CHAT_TOOLS, checks.CHAT_CACHED):
            assert found[feature].evidence == (
                "not checked: the server does not serve the model the probe named at "
                f"{url}/chat/completions"
            ), found[feature]
        proc = loopbench("run", TINY, "--target", url, "--transports", "chat", "--no-hints")
        assert proc.returncode == ExitCode.USAGE
        assert "does not serve the model" in proc.stderr
        good = {
            f.feature: f
            for f in probe(url, api_key="sk-loopbench", timeout_s=10, model="Qwen/Qwen3-8B")
        }
        assert good[checks.CHAT].supported is True


def test_a_bare_403_upgrade_from_a_server_that_takes_the_key_is_no_websocket_mode() -> None:
    """vLLM (Starlette) answers every upgrade with 403 and no body, though the same key gets
    200 over HTTP: no WebSocket mode, not a key to give.  End to end because only it checks
    that a WebSocket-only probe asks an HTTP route (GET /models) with the same key."""
    with chat_only_server(bare_403_upgrades=True) as url:
        found = {
            f.feature: f
            for f in probe(
                url, [checks.REACHABLE, checks.WEBSOCKET], api_key="sk-loopbench", timeout_s=10
            )
        }
        said: list[str] = []
        code = probe_for_run(url, ["ws"], api_key="sk-loopbench", verify_tls=True, say=said.append)
    assert found[checks.WEBSOCKET] == Finding(
        checks.WEBSOCKET,
        False,
        f"no Responses API WebSocket mode at {_ws(url)}: the upgrade was answered with HTTP 403 "
        "with no body, while HTTP requests with the same key were answered",
    )
    assert code == ExitCode.USAGE
    assert "no Responses API WebSocket mode" in said[0] and "--api-key-env" not in said[0]
