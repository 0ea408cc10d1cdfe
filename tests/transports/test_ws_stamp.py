"""WebSocket messages are stamped when they arrive, not when the reader gets to them."""

from __future__ import annotations

import asyncio
import time

from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve

from harness.transports.ws_stamp import StampedConnection, arrival_ns


def test_messages_read_late_keep_their_arrival_stamps_in_order() -> None:
    async def handler(conn: ServerConnection) -> None:
        await conn.recv()
        for i in range(5):
            await conn.send(f"m{i}")
        # A fragmented message: its stamp is its last fragment's.
        await conn.send(iter(["frag", "ment"]))
        await conn.wait_closed()

    async def main() -> tuple[list[str], list[int], int]:
        async with serve(handler, "127.0.0.1", 0) as server:
            port = server.sockets[0].getsockname()[1]
            async with connect(
                f"ws://127.0.0.1:{port}", create_connection=StampedConnection
            ) as conn:
                await conn.send("go")
                await asyncio.sleep(0.2)  # everything arrives while nobody reads
                read_at = time.perf_counter_ns()
                got, stamps = [], []
                for _ in range(6):
                    got.append(str(await conn.recv()))
                    stamps.append(arrival_ns(conn))
                return got, stamps, read_at

    got, stamps, read_at = asyncio.run(main())
    assert got == ["m0", "m1", "m2", "m3", "m4", "fragment"]
    assert stamps == sorted(stamps) and stamps[-1] < read_at
