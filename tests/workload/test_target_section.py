"""The scenario's ``target:`` section is validated like every other: file, field, expected value."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.client.shaping import split_extra_body
from harness.wire.errors import ScenarioError
from harness.workload.scenario import load_scenario

HEADER_NAME = "a header name of letters, digits and -_.!#$%&'*+^`|~"

BAD = [
    (
        "target:\n  headers:\n    'X Team': perf\n",
        f"target.headers.X Team: expected {HEADER_NAME} (no spaces or colon), got 'X Team'",
    ),
    ("target:\n  headers: [a, b]\n", "target.headers: expected a mapping, got [a, b]"),
    (
        "target:\n  session_header: 'X-Session ID'\n",
        f"target.session_header: expected {HEADER_NAME}, e.g. X-Session-ID, got 'X-Session ID'",
    ),
    (
        "target:\n  extra_body:\n    chat: {min_tokens: 4}\n    ignore_eos: true\n",
        "target.extra_body.ignore_eos: expected either body fields for every API or only the "
        "keys responses, chat, messages (each a mapping of fields), not both, got 'ignore_eos'",
    ),
    (
        "target:\n  extra_body:\n    chat: 5\n",
        "target.extra_body.chat: expected a mapping of body fields for that API, got 5",
    ),
    (
        "target:\n  extra_body:\n    stream: false\n",
        "target.extra_body.stream: expected no stream field (the client reads a streamed "
        "response; stream cannot be changed), got false",
    ),
    (
        "target:\n  extra_body:\n    messages: {model: m}\n",
        "target.extra_body.messages.model: expected no model field (the model name comes from "
        "the scenario's model: field or --model), got 'm'",
    ),
    ("target:\n  tokenizer: ''\n", "target.tokenizer: expected a non-empty string, got ''"),
    (
        "target:\n  sesion_header: X\n",
        "target.sesion_header: unknown field (did you mean 'session_header'?)",
    ),
    ("target: 5\n", "target: expected a mapping, got 5"),
]


@pytest.mark.parametrize(("body", "message"), BAD)
def test_a_bad_target_section_names_file_field_and_expected_value(
    tmp_path: Path, body: str, message: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\n" + body)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert str(info.value) == f"{path}: {message}"


def test_a_credential_is_not_repeated_in_an_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text('name: x\ntarget:\n  headers:\n    Authorization: "Bearer sk-1\\nx"\n')
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert "sk-1" not in str(info.value)
    assert "target.headers.Authorization: expected a value on one line" in str(info.value)


def test_a_good_target_section(tmp_path: Path) -> None:
    path = tmp_path / "good.yaml"
    path.write_text(
        "name: x\ntarget:\n  headers: {X-Version: 2, X-Debug: true}\n"
        "  session_header: X-Session-ID\n"
        "  extra_body: {ignore_eos: true, min_tokens: 8}\n"
        "  tokenizer: ./tok/tokenizer.json\n"
    )
    target = load_scenario(path).target
    # YAML scalars are what the user meant as header text
    assert target.headers == {"X-Version": "2", "X-Debug": "true"}
    assert target.session_header == "X-Session-ID"
    assert target.tokenizer == "./tok/tokenizer.json"
    # a flat mapping applies to every API; a per-API one to its API only
    assert split_extra_body(target.extra_body) == {
        api: {"ignore_eos": True, "min_tokens": 8} for api in ("responses", "chat", "messages")
    }
    assert split_extra_body({"chat": {"min_tokens": 4}}) == {"chat": {"min_tokens": 4}}


def test_no_target_section_shapes_nothing() -> None:
    target = load_scenario("tiny").target
    assert (target.headers, target.session_header, target.extra_body, target.tokenizer) == (
        {},
        None,
        {},
        None,
    )
