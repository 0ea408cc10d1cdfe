"""The one transport registry: every transport declared once, with what it can do.

The names are part of the CLI, of scenario files and of results.  Everything that
needs to know about transports (scenario validation, CLI help, summaries, plots,
calibrate, soak, the server's latency prediction, both client edges)
reads this table; adding a transport starts here (docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from harness.wire.errors import UsageError


@dataclass(frozen=True, slots=True)
class TransportSpec:
    name: str
    #: the connection speaks WebSocket mode (else HTTP + SSE)
    websocket: bool
    #: turns after the first name the previous response (server-side state) instead of
    #: resending the history
    chained: bool
    #: requests carry ``store: true`` (the chain survives a lost connection)
    store: bool
    #: the append prototype: one response per rollout, later turns appended to it
    append: bool
    #: ``loopbench locust`` offers it (its workers run the asyncio edge; the ``ws-append``
    #: prototype is left out of the distributed path)
    locust: bool
    #: the API its requests speak: ``responses`` (POST /responses or WebSocket mode), ``chat``
    #: (POST /chat/completions) or ``messages`` (Anthropic, POST /messages)
    api: str
    #: colour of this transport in every plot and report
    colour: str
    #: one line for ``--help``, ``loopbench validate`` and the docs
    description: str


# One row per transport; the columns are TransportSpec's fields in order.  The order is the
# tables' and plots', and decides a run's default baseline (its first transport in this order):
# the stateless ones (what most deployments run today) come before chaining and WebSocket mode,
# so `--transports chat,ws` reports what ws saves over chat, not the reverse.
# fmt: off
TRANSPORTS: tuple[TransportSpec, ...] = (
    #             name            websocket chained store  append locust api          colour
    TransportSpec("http",         False,    False,  False, False, True,  "responses", "#c0392b",
                  "HTTP + SSE, the whole history every turn (stateless, store: false)"),
    TransportSpec("chat",         False,    False,  False, False, True,  "chat",      "#7f8c8d",
                  "Chat Completions over HTTP + SSE, the whole conversation every turn"),
    TransportSpec("messages",     False,    False,  False, False, True,  "messages",  "#af601a",
                  "Anthropic Messages over HTTP + SSE, the whole conversation every turn, "
                  "prompt-cache breakpoints"),
    TransportSpec("http-chained", False,    True,   True,  False, True,  "responses", "#e67e22",
                  "HTTP + SSE, previous_response_id + new input (store: true)"),
    TransportSpec("ws",           True,     True,   False, False, True,  "responses", "#2471a3",
                  "WebSocket mode, one connection per rollout, chained from the connection cache"),
    TransportSpec("ws-store",     True,     True,   True,  False, True,  "responses", "#17a589",
                  "WebSocket mode with store: true (the chain survives a reconnect)"),
    TransportSpec("ws-append",    True,     False,  False, True,  False, "responses", "#7d3c98",
                  "WebSocket append prototype: one response per rollout (reference server only)"),
)
# fmt: on

#: the APIs a transport can speak (TransportSpec.api)
APIS: tuple[str, ...] = ("responses", "chat", "messages")

BY_NAME: dict[str, TransportSpec] = {t.name: t for t in TRANSPORTS}
#: every name, in the order tables and plots show them
TRANSPORT_NAMES: tuple[str, ...] = tuple(BY_NAME)
#: the names ``loopbench locust`` runs
LOCUST_TRANSPORTS: tuple[str, ...] = tuple(t.name for t in TRANSPORTS if t.locust)


def transport_spec(name: str) -> TransportSpec:
    """The spec of ``name``; an unknown name is a :class:`UsageError` that lists the known ones."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise UsageError(
            f"unknown transport {name!r}; expected one of {', '.join(TRANSPORT_NAMES)}"
        ) from None


def locust_spec(name: str) -> TransportSpec:
    """The spec of ``name`` if ``loopbench locust`` runs it, else a :class:`UsageError`."""
    spec = transport_spec(name)
    if not spec.locust:
        raise UsageError(
            f"transports: {name!r} is not available under Locust; "
            f"expected one or more of {', '.join(LOCUST_TRANSPORTS)}"
        )
    return spec


def default_baseline(transports: Sequence[str], baseline: str | None = None) -> str:
    """The transport the others are compared with, in every kind of run: ``baseline`` if
    given, else the run's first transport in the registry's order (``http`` when present)."""
    if baseline:
        return baseline
    return next((t for t in TRANSPORT_NAMES if t in transports), transports[0])


def comparison_pairs(
    transports: Sequence[str], baseline: str | None = None
) -> list[tuple[str, str]]:
    """(baseline, candidate) for every other transport of the run."""
    if not transports:
        return []
    base = default_baseline(transports, baseline)
    return [(base, t) for t in transports if t != base]


def transport_help(transports: Iterable[TransportSpec] = TRANSPORTS) -> str:
    """The transports (default: all), one per line with their description, for ``--help`` texts."""
    specs = list(transports)
    width = max(len(t.name) for t in specs)
    return "\n".join(f"  {t.name:<{width}}  {t.description}" for t in specs)


def parse_transports(value: str | None) -> list[str] | None:
    """``--transports http,ws``: the names, each known and named once; None if not given."""
    if value is None:
        return None
    expected = f"expected one or more of {', '.join(TRANSPORT_NAMES)}, separated by commas"
    names = [t.strip() for t in value.split(",")]
    if not any(names):
        raise UsageError(f"--transports {value!r}: no transport named; {expected}")
    for t in names:
        if not t:
            raise UsageError(f"--transports {value!r}: an empty name between commas; {expected}")
        if t not in TRANSPORT_NAMES:
            raise UsageError(f"--transports {value!r}: unknown transport {t!r}; {expected}")
    twice = sorted({t for t in names if names.count(t) > 1})
    if twice:
        raise UsageError(f"--transports {value!r}: {', '.join(twice)} named more than once")
    return names
