"""The transport registry: what validates is what runs, and every reader sees the same table."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable

import pytest

from harness.cli.main import main
from harness.model.calibrate import CHAINED, HTTP_LIKE, REHYDRATING, WS_LIKE
from harness.report.plots import transport_color
from harness.transports import TransportOptions, make_transport
from harness.wire.errors import UsageError
from harness.wire.transports import (
    LOCUST_TRANSPORTS,
    TRANSPORT_NAMES,
    TRANSPORTS,
    TransportSpec,
    comparison_pairs,
    default_baseline,
    locust_spec,
    transport_help,
    transport_spec,
)
from harness.workload.scenario import validate_scenario
from tools.model_predict import request_cost


def test_each_transport_is_declared_once_with_a_colour_and_a_one_line_description() -> None:
    assert len(set(TRANSPORT_NAMES)) == len(TRANSPORTS)
    assert len({t.colour for t in TRANSPORTS}) == len(TRANSPORTS)
    for t in TRANSPORTS:
        assert re.fullmatch(r"#[0-9a-f]{6}", t.colour), t
        assert t.description and "\n" not in t.description, t
        assert not (t.append and t.chained), t  # the append prototype has no chain to send
    assert [line.split()[0] for line in transport_help().splitlines()] == list(TRANSPORT_NAMES)


@pytest.mark.parametrize("name", TRANSPORT_NAMES)
def test_every_name_that_validates_builds_a_transport(name: str) -> None:
    scenario = validate_scenario({"name": "x", "transports": [name]})
    assert scenario.transports == [name]

    async def build() -> str:
        transport = make_transport(name, TransportOptions("http://127.0.0.1:1/v1"))
        try:
            return transport.name
        finally:
            await transport.aclose()

    assert asyncio.run(build()) == name
    assert request_cost(name, 0, 10) is not None  # the model predicts it too


def test_an_unknown_name_lists_the_registry() -> None:
    with pytest.raises(UsageError, match=r"unknown transport 'sdk-http'; expected one of http, "):
        transport_spec("sdk-http")


def test_readers_follow_the_capabilities() -> None:
    assert transport_color("ws") == transport_spec("ws").colour
    assert transport_color("not-a-transport", 1) not in {t.colour for t in TRANSPORTS}
    assert set(LOCUST_TRANSPORTS) == {t.name for t in TRANSPORTS if t.locust}
    assert set(HTTP_LIKE) == {t.name for t in TRANSPORTS if not t.websocket and not t.append}
    assert set(WS_LIKE) == {t.name for t in TRANSPORTS if t.websocket and not t.append}
    # the plainest transport of each class comes first: it supplies the fitted intercept
    assert HTTP_LIKE[0] == "http" and WS_LIKE[0] == "ws"
    assert {"http-chained", "ws", "ws-store"} == CHAINED
    assert {"http-chained"} == REHYDRATING


@pytest.mark.parametrize(
    ("command", "heading", "which"),
    [
        ("run", "transports", lambda t: True),
        ("validate", "transports", lambda t: True),
        ("sweep", "transports", lambda t: True),
        ("gate", "transports", lambda t: True),
        ("locust", "transports available under Locust", lambda t: t.locust),
        ("calibrate", "transports a fit uses", lambda t: not t.append),
    ],
)
def test_help_lists_the_transports_with_their_descriptions(
    command: str,
    heading: str,
    which: Callable[[TransportSpec], bool],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # one row per transport
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    # the section ends at its blank line (a line saying where the docs are may follow)
    rows = capsys.readouterr().out.split(f"\n{heading}:\n", 1)[1].split("\n\n")[0].splitlines()
    listed = [t for t in TRANSPORTS if which(t)]
    assert [r.split()[0] for r in rows] == [t.name for t in listed]
    assert all(r.endswith(t.description) for r, t in zip(rows, listed, strict=True))


def test_one_baseline_rule() -> None:
    assert default_baseline(["ws", "http"]) == "http"
    assert default_baseline(["ws-store", "ws"]) == "ws"
    assert default_baseline(["ws", "http"], "ws") == "ws"
    # the API a deployment runs today is what WebSocket mode is measured against
    assert default_baseline(["ws", "chat"]) == "chat"
    assert default_baseline(["messages", "chat"]) == "chat"
    assert default_baseline(["chat", "http", "ws"]) == "http"
    assert comparison_pairs(["ws", "http", "ws-store"]) == [("http", "ws"), ("http", "ws-store")]
    assert comparison_pairs(["ws"]) == []
    assert comparison_pairs([]) == []


def test_each_transport_has_the_capabilities_it_is_documented_with() -> None:
    """The registry is a positional table: a swapped column would change what runs."""
    expected = {
        "http": dict(websocket=False, chained=False, store=False, append=False, locust=True),
        "http-chained": dict(websocket=False, chained=True, store=True, append=False, locust=True),
        "ws": dict(websocket=True, chained=True, store=False, append=False, locust=True),
        "ws-store": dict(websocket=True, chained=True, store=True, append=False, locust=True),
        "ws-append": dict(websocket=True, chained=False, store=False, append=True, locust=False),
        "chat": dict(websocket=False, chained=False, store=False, append=False, locust=True),
        "messages": dict(websocket=False, chained=False, store=False, append=False, locust=True),
    }
    assert {t.name: {k: getattr(t, k) for k in expected[t.name]} for t in TRANSPORTS} == expected
    assert len({t.colour for t in TRANSPORTS}) == len(TRANSPORTS)


def test_locust_spec_refuses_what_loopbench_locust_does_not_run() -> None:
    assert locust_spec("ws-store").name == "ws-store"
    with pytest.raises(
        UsageError, match=r"'ws-append' is not available under Locust; expected one or more"
    ):
        locust_spec("ws-append")
