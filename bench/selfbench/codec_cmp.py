"""Which WebSocket codec the client runs on: ``python -m bench.selfbench.codec_cmp``.

Issue 37 asked for one codec under every WebSocket edge, either the ``websockets``
package's sans-I/O protocol or :mod:`harness.wire.ws_frames`, decided by client CPU per
event and TTFT error at 64 streams.  This runs the asyncio ``ws`` transport both ways in
the same process, alternating the codecs round by round (the machine is shared: whatever
else runs slows a round of either), on the self-benchmark's own steps:

* client CPU per event: :func:`.pipeline.drive` against the flood server (:mod:`.raw_server`);
* TTFT error: :func:`.timing.overhead_run` against an embedded reference server
  (``measurement_error_ms`` and its client-side part ``client_error_ms``).

"websockets" swaps only what is after the opening handshake: the frames read through its
``Protocol`` (``receive_data`` / ``events_received``) and written by its ``Frame.serialize``.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from websockets.frames import Frame, Opcode
from websockets.protocol import Protocol, Side, State

from bench.selfbench.pipeline import drive
from bench.selfbench.procs import child
from bench.selfbench.raw_server import READY_PREFIX
from bench.selfbench.timing import overhead_run
from harness.run.embedded import embedded_server
from harness.run.event_loop import run_async
from harness.transports import ws_conn
from harness.wire.exit_codes import UsageParser
from harness.wire.ws_frames import FrameError, FrameReader, encode_frame


class WebsocketsReader:
    """:class:`~harness.wire.ws_frames.FrameReader`'s interface over ``websockets``' protocol."""

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self._proto = Protocol(Side.CLIENT, state=State.OPEN, max_size=max_size)
        self._frags: list[bytes] = []
        self._frag_op = 0

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        proto = self._proto
        proto.receive_data(data)
        proto.data_to_send()  # its pongs: the connection answers pings itself
        out: list[tuple[int, bytes]] = []
        for frame in proto.events_received():
            assert isinstance(frame, Frame)  # the handshake is over: only frames come
            op = frame.opcode
            if op is Opcode.CONT or not frame.fin:
                if op is not Opcode.CONT:
                    self._frag_op, self._frags = op, []
                self._frags.append(bytes(frame.data))
                if frame.fin:
                    out.append((self._frag_op, b"".join(self._frags)))
            else:
                out.append((op, bytes(frame.data)))
        exc = proto.parser_exc
        if exc is not None:
            raise FrameError(1002, str(exc))
        return out


def websockets_encode(op: int, payload: bytes, **_: Any) -> bytes:
    return Frame(Opcode(op), payload).serialize(mask=True)


CODECS: dict[str, tuple[Callable[[int], Any], Callable[..., bytes]]] = {
    "ws_frames": (FrameReader, encode_frame),
    "websockets": (WebsocketsReader, websockets_encode),
}


@contextmanager
def codec(name: str) -> Iterator[None]:
    """Run the ``ws`` transport's connections on ``name``'s reader and encoder."""
    reader, encoder = CODECS[name]
    saved = ws_conn.FrameReader, ws_conn.encode_frame
    ws_conn.FrameReader, ws_conn.encode_frame = reader, encoder  # type: ignore[misc,assignment]
    try:
        yield
    finally:
        ws_conn.FrameReader, ws_conn.encode_frame = saved  # type: ignore[misc]


def compare(
    rounds: int, streams: int, deltas: int, rollouts: int, say: Callable[[str], None]
) -> dict[str, dict[str, list[float]]]:
    got: dict[str, dict[str, list[float]]] = {
        name: {"cpu_us": [], "err_p50": [], "err_p99": [], "client_p50": [], "client_p99": []}
        for name in CODECS
    }
    with child(["-m", "bench.selfbench.raw_server", "--deltas", str(deltas)], READY_PREFIX) as (
        _,
        ready,
    ):
        url = f"http://127.0.0.1:{int(ready.split()[-1])}/v1"
        for r in range(rounds):
            for name in CODECS if r % 2 == 0 else reversed(CODECS):
                say(f"round {r + 1}/{rounds}: client CPU per event, {name}")
                with codec(name):
                    rate = run_async(drive(url, "ws", streams, deltas))
                got[name]["cpu_us"].append(rate.cpu_us_per_event)
    with embedded_server() as url:
        for r in range(rounds):
            for name in CODECS if r % 2 == 0 else reversed(CODECS):
                say(f"round {r + 1}/{rounds}: TTFT error at {streams} streams, {name}")
                with codec(name):
                    run = overhead_run(url, ["ws"], streams, rollouts)
                t = run.transport("ws")
                total, client_side = t["measurement_error_ms"], t["client_error_ms"]
                got[name]["err_p50"].append(total["p50"])
                got[name]["err_p99"].append(total["p99"])
                got[name]["client_p50"].append(client_side["p50"])
                got[name]["client_p99"].append(client_side["p99"])
    return got


_ROWS = (
    ("cpu_us", "client CPU per event (µs)"),
    ("err_p50", "TTFT error p50 (ms)"),
    ("err_p99", "TTFT error p99 (ms)"),
    ("client_p50", "TTFT client-side error p50 (ms)"),
    ("client_p99", "TTFT client-side error p99 (ms)"),
)


def table(got: dict[str, dict[str, list[float]]]) -> str:
    """Markdown: every round of each codec, the medians, and their ratio (where both are > 0)."""
    a, b = got["ws_frames"], got["websockets"]
    lines = [
        "| figure | ws_frames, each round | websockets, each round | median, ws_frames / websockets |",
        "|---|---|---|---|",
    ]
    for key, label in _ROWS:
        ma, mb = statistics.median(a[key]), statistics.median(b[key])
        ratio = f" ({ma / mb:.2f})" if ma > 0 and mb > 0 else ""
        lines.append(
            f"| {label} | {' / '.join(f'{v:.3g}' for v in a[key])} | "
            f"{' / '.join(f'{v:.3g}' for v in b[key])} | {ma:.3g} / {mb:.3g}{ratio} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = UsageParser(prog="python -m bench.selfbench.codec_cmp")
    parser.add_argument("--rounds", type=int, default=3, help="alternated rounds (default 3)")
    parser.add_argument("--streams", type=int, default=64, help="concurrent streams (default 64)")
    parser.add_argument(
        "--deltas", type=int, default=2000, help="deltas per response, CPU step (default 2000)"
    )
    parser.add_argument(
        "--rollouts", type=int, default=2, help="rollouts per stream, TTFT step (default 2)"
    )
    args = parser.parse_args(argv)
    got = compare(
        args.rounds,
        args.streams,
        args.deltas,
        args.rollouts,
        lambda s: print(s, file=sys.stderr, flush=True),
    )
    print(table(got))


if __name__ == "__main__":
    main()
