"""``--header``, ``--session-header``, ``--extra-body``, ``--model``: checked before anything runs."""

from __future__ import annotations

import pytest

from harness.cli.main import build_parser, main
from harness.cli.run_args import check_run_args, scenario_sets, shaping_line, target_flags
from harness.client.shaping import RequestShaping
from harness.wire.errors import UsageError
from harness.wire.tokens import FIXED_WIDTH
from tests.runs import TINY


def _args(*argv: str, command: str = "run") -> object:
    extra = ["--set", "load.concurrency=1,2"] if command == "sweep" else []
    return build_parser().parse_args([command, str(TINY), *extra, *argv])


def _error(*argv: str) -> str:
    with pytest.raises(UsageError) as exc:
        check_run_args(_args(*argv))  # type: ignore[arg-type]
    return str(exc.value)


def test_a_malformed_header_is_a_usage_error_naming_it_not_its_value() -> None:
    message = _error("--header", "Authorization Bearer sk-secret-1")
    assert message.startswith("--header 'Authorization …': expected NAME:VALUE")
    assert "sk-secret-1" not in message
    message = _error("--header", "X Team: perf")
    assert message.startswith("--header 'X Team': expected NAME:VALUE")
    assert _error("--header", ": nothing").startswith("--header '': expected NAME:VALUE")


def test_a_header_without_a_colon_names_what_was_given_only_up_to_the_value() -> None:
    # no colon at all: the whole argument is the "name" (there is no value to hide)
    assert _error("--header", "X-Team").startswith("--header 'X-Team': expected NAME:VALUE")


def test_session_header_must_be_a_header_name() -> None:
    assert _error("--session-header", "X Session").startswith(
        "--session-header 'X Session': expected a header name"
    )


@pytest.mark.parametrize(
    ("value", "start"),
    [
        (
            "{not json",
            "--extra-body: expected a JSON object, e.g. '{\"ignore_eos\": true}'; it does not parse",
        ),
        ("[1, 2]", "--extra-body: expected a JSON object of body fields, got [1, 2]"),
        (
            '{"chat": {}, "ignore_eos": true}',
            "--extra-body: ignore_eos: expected either body fields",
        ),
        ('{"stream": false}', "--extra-body: stream: expected no stream field"),
        (
            '{"chat": 3}',
            "--extra-body: chat: expected a mapping of body fields for that API, got 3",
        ),
    ],
)
def test_extra_body_must_be_a_json_object_of_fields(value: str, start: str) -> None:
    assert _error("--extra-body", value).startswith(start)


def test_sweep_checks_the_flags_too() -> None:
    with pytest.raises(UsageError, match="--header 'X Y'"):
        from harness.cli.run_args import check_sweep_args

        check_sweep_args(_args("--header", "X Y: z", command="sweep"))  # type: ignore[arg-type]


def test_flags_parse_into_target_flags_and_model_into_an_override() -> None:
    args = _args(
        "--header",
        "X-A: 1",
        "--header",
        "x-b:two words ",
        "--session-header",
        "X-Session-ID",
        "--extra-body",
        '{"chat": {"min_tokens": 4}}',
        "--model",
        "my/model-1.5",
    )
    flags = target_flags(args)  # type: ignore[arg-type]
    assert flags.headers == (("X-A", "1"), ("x-b", "two words"))
    assert flags.session_header == "X-Session-ID"
    assert flags.extra_body == {"chat": {"min_tokens": 4}}
    assert scenario_sets(args)[-1] == 'model="my/model-1.5"'  # type: ignore[arg-type]


def test_the_shaping_line_hides_credential_values() -> None:
    shaping = RequestShaping(
        headers=(("X-Team", "perf"), ("Authorization", "Bearer sk-1"), ("X-Auth-Token", "t")),
        session_header="X-Session-ID",
        extra_body={"responses": {"ignore_eos": True}},
    )
    line = shaping_line(shaping, FIXED_WIDTH)
    assert line == (
        "request shaping: headers X-Team: perf, Authorization: ***, X-Auth-Token: ***; "
        'session header X-Session-ID; extra body {"responses": {"ignore_eos": true}}'
    )
    assert shaping_line(RequestShaping(), FIXED_WIDTH) == ""


def test_gate_takes_the_shaping_flags_with_ab_only(
    tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["gate", "results/x", "--baseline", "results/y", "--header", "X-Team: perf"])
    assert exited.value.code == 4
    assert "error: --header: only with --ab" in capsys.readouterr().err
    args = build_parser().parse_args(
        ["gate", str(TINY), "--ab", "--session-header", "X-Session-ID", "--model", "m"]
    )
    assert target_flags(args).session_header == "X-Session-ID"
    assert scenario_sets(args) == ['model="m"']
