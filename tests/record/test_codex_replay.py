"""A recorded Codex CLI session replayed as it happened: ``loopbench run TRACE.jsonl``.

End to end, because only the whole path shows it: the trace the observer builds from a
captured Codex session (a warm-up, two reconnects with full-context re-sends;
``data/codex-reconnect.jsonl.gz``) is given to ``loopbench run`` as it is (the built-in
scenario around a trace), the replay goes through the recording proxy to the reference
server, and what the proxy records of the replay is compared with the original recording:
one rollout, its warm-up sent (``ws``) or skipped (``http``), the same turns, and each
turn's input and output tokens within 5 %.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from harness.record.observe import build_trace
from harness.workload.trace import TraceRollout, dump_trace
from tests.record.test_codex_sessions import exchanges
from tests.record.test_record import _base, recording
from tests.runs import run_cli

pytestmark = pytest.mark.timeout(180)


def _replayed(
    server_url: str, trace: Path, transport: str, out: Path, *options: str
) -> list[TraceRollout]:
    async def scenario() -> list[TraceRollout]:
        async with recording(server_url, observer="thread") as proxy:
            await asyncio.to_thread(
                run_cli,
                "run",
                trace,
                *options,
                "--transports",
                transport,
                "--target",
                _base(proxy),
                "--no-probe",
                "--out",
                out,
                "--run-id",
                "-".join((transport, *options)).replace("--", ""),
                "-q",
            )
        _, rollouts = build_trace(proxy.exchanges)
        return rollouts

    return asyncio.run(asyncio.wait_for(scenario(), 150))


def _close(replayed: int | None, recorded: int | None, slack: int = 0) -> bool:
    assert replayed is not None and recorded is not None
    return abs(replayed - recorded) <= max(0.05 * recorded, slack)


@pytest.mark.parametrize(
    ("transport", "options"),
    [("ws", ()), ("ws", ("--ws-subagents", "lanes")), ("http", ())],
    ids=["ws", "ws-lanes", "http"],
)
def test_a_recorded_codex_session_replays_with_its_turns_and_tokens(
    fast_server_url: str, tmp_path: Path, transport: str, options: tuple[str, ...]
) -> None:
    """Against a server without modelled waits: turns and tokens are the claim, not when."""
    header, [recorded] = build_trace(exchanges("codex-reconnect"))
    assert sum(1 for t in recorded.turns if t.recovery is not None) == 2
    trace = tmp_path / "codex.jsonl"
    trace.write_text(dump_trace([recorded], header))

    [replay] = _replayed(fast_server_url, trace, transport, tmp_path / "results", *options)
    # The warm-up is sent where the recorded client sent one (WebSocket), skipped over HTTP.
    assert (replay.warmup is not None) == (transport == "ws")
    assert len(replay.turns) == len(recorded.turns)
    assert [len(t.tool_calls) for t in replay.turns] == [len(t.tool_calls) for t in recorded.turns]
    for i, (got, want) in enumerate(zip(replay.turns, recorded.turns, strict=True)):
        # A tool call's arguments are a few tokens: one more or less is the server's rounding.
        assert _close(got.output_tokens, want.output_tokens, slack=1), (i, got, want)
        assert _close(got.input_tokens, want.input_tokens), (i, got, want)
        # the replay had no failure to recover from: the recorded ones are not re-enacted
        assert got.recovery is None
    assert _close(sum(t.output_tokens for t in replay.turns), recorded.output_tokens)
    assert _close(
        sum(t.input_tokens or 0 for t in replay.turns),
        sum(t.input_tokens or 0 for t in recorded.turns),
    )
    print(
        f"{transport}: output {[t.output_tokens for t in replay.turns]} vs "
        f"{[t.output_tokens for t in recorded.turns]}; input "
        f"{[t.input_tokens for t in replay.turns]} vs {[t.input_tokens for t in recorded.turns]}"
    )
