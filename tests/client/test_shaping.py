"""The pure request-shaping functions: merge, session header, redaction."""

from __future__ import annotations

from harness.client.bodies import http_headers, ws_headers
from harness.client.options import TransportOptions
from harness.client.shaping import (
    RequestShaping,
    is_secret_header,
    redacted,
    rollout_key,
    session_headers,
    shape_body,
)

SHAPING = RequestShaping(
    headers=(("X-Team", "perf"), ("Authorization", "Bearer mine")),
    session_header="X-Session-ID",
    extra_body={"chat": {"min_tokens": 8, "metadata": {"k": "v"}}},
)


def test_shape_body_merges_mappings_and_replaces_the_rest() -> None:
    body = {"model": "m", "metadata": {"loopbench.output_tokens": "5"}, "max_tokens": 9}
    shaped = shape_body(body, "chat", SHAPING)
    assert shaped == {
        "model": "m",
        "metadata": {"loopbench.output_tokens": "5", "k": "v"},
        "max_tokens": 9,
        "min_tokens": 8,
    }
    assert body == {"model": "m", "metadata": {"loopbench.output_tokens": "5"}, "max_tokens": 9}
    # another API's body is left as it is (the same object: nothing to copy)
    assert shape_body(body, "responses", SHAPING) is body


def test_session_headers_name_the_rollout() -> None:
    assert rollout_key("run1", "ws", 3) == "run1-ws-3"
    assert session_headers(SHAPING, "run1-ws-3") == [("X-Session-ID", "run1-ws-3")]
    assert session_headers(SHAPING, None) == []
    assert session_headers(RequestShaping(), "run1-ws-3") == []


def test_run_headers_replace_the_defaults_and_come_once() -> None:
    options = TransportOptions("http://127.0.0.1:1/v1", shaping=SHAPING)
    http = dict(http_headers(options))
    assert http["authorization"] == "Bearer mine" and http["x-team"] == "perf"
    assert len(http_headers(options)) == len(http)
    ws = ws_headers(options, session_headers(SHAPING, "k"))
    assert ws == {"authorization": "Bearer mine", "x-team": "perf", "x-session-id": "k"}


def test_credential_headers_are_redacted() -> None:
    for name in ("Authorization", "x-api-key", "X-Auth-Token", "api_key", "Cookie"):
        assert is_secret_header(name) and redacted(name, "v") == "***"
    assert redacted("X-Team", "perf") == "perf"


def test_describe_records_names_only() -> None:
    assert SHAPING.describe() == {
        "headers": ["X-Team", "Authorization"],
        "session_header": "X-Session-ID",
        "extra_body": {"chat": {"min_tokens": 8, "metadata": {"k": "v"}}},
    }


def test_output_tokens_placeholder_becomes_the_turns_planned_output() -> None:
    shaping = RequestShaping(
        extra_body={
            "responses": {
                "max_output_tokens": "{output_tokens}",
                "ignore_eos": True,
                "vllm": {"min_tokens": "{output_tokens}"},
                "note": "not {output_tokens} alone",
            }
        }
    )
    body = {"max_output_tokens": 192, "input": []}
    assert shape_body(body, "responses", shaping, planned_output=80) == {
        "max_output_tokens": 80,
        "input": [],
        "ignore_eos": True,
        "vllm": {"min_tokens": 80},
        "note": "not {output_tokens} alone",
    }
