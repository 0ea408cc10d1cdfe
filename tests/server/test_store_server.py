"""The store behind the server: chains survive a restart, concurrent chains stay apart."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import orjson
import websockets

from tests.server.conftest import configured_server, ws_url

META = {"loopbench.output_tokens": "4"}


def test_stored_responses_survive_a_server_restart(tmp_path: Path) -> None:
    path = str(tmp_path / "responses.sqlite3")
    with configured_server(store=path) as url, httpx.Client(base_url=url, timeout=30) as http:
        first = http.post("/responses", json={"model": "sim", "input": "a" * 400, "metadata": META})
        assert first.status_code == 200
        http_id = first.json()["id"]
        tokens_before = first.json()["usage"]["input_tokens"]

        async def ws_turn() -> str:
            async with websockets.connect(ws_url(url)) as conn:
                body = {
                    "type": "response.create",
                    "model": "sim",
                    "input": "b" * 400,
                    "store": True,
                    "metadata": META,
                }
                await conn.send(orjson.dumps(body).decode())
                while True:
                    event = orjson.loads(await conn.recv())
                    if event["type"] == "response.completed":
                        return str(event["response"]["id"])

        ws_id = asyncio.run(ws_turn())
    with configured_server(store=path) as url, httpx.Client(base_url=url, timeout=30) as http:
        for rid in (http_id, ws_id):
            nxt = http.post(
                "/responses",
                json={
                    "model": "sim",
                    "input": "next",
                    "previous_response_id": rid,
                    "metadata": META,
                },
            )
            assert nxt.status_code == 200, nxt.text
            body = nxt.json()
            assert body["sim_timing"]["cache"] == "store"
            # the whole chain came back: previous input + its output + the new item
            assert body["usage"]["input_tokens"] == tokens_before + 4 + 4 + 1 + 4


def test_concurrent_chains_do_not_mix(server_url: str) -> None:
    async def chain(http: httpx.AsyncClient, size: int) -> list[int]:
        prev = None
        seen = []
        for _ in range(4):
            body = {"model": "sim", "input": "x" * (4 * size), "metadata": META}
            if prev:
                body["previous_response_id"] = prev
            resp = (await http.post("/responses", json=body)).json()
            prev = resp["id"]
            seen.append(resp["usage"]["input_tokens"])
        return seen

    async def main() -> list[list[int]]:
        async with httpx.AsyncClient(base_url=server_url, timeout=30) as http:
            return await asyncio.gather(*(chain(http, size) for size in (10, 100, 1000)))

    for size, seen in zip((10, 100, 1000), asyncio.run(main()), strict=True):
        # each turn adds this chain's own input (size + 4) and output (4 + 4) tokens, nothing else
        step = size + 4 + 4 + 4
        assert seen == [size + 4 + step * i for i in range(4)], (size, seen)
