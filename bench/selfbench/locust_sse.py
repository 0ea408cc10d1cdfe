"""Locust's FastHttpUser on the self-bench's bare SSE server: what a user would otherwise pick.

Run only by ``locust -f`` in a child process (never imported by loopbench: importing
locust monkey-patches the process with gevent).  Each user loops: POST
``/v1/responses`` with ``stream: true``, read the body in chunks, split the SSE
events and ``json.loads`` each one — the least a Locust user measuring TTFT has
to do.  At the end the events of the completed responses and the span from the
first request to the last completed one are written as JSON to
``$LOOPBENCH_LOCUST_OUT``.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from locust import FastHttpUser, events, task

TOKENS = int(os.environ.get("LOOPBENCH_LOCUST_TOKENS", "20000"))
OUT = os.environ.get("LOOPBENCH_LOCUST_OUT", "")
BODY = json.dumps(
    {
        "model": "sim-model",
        "input": [{"type": "message", "role": "user", "content": "stream please"}],
        "stream": True,
        "store": False,
        "tool_choice": "none",
        "max_output_tokens": TOKENS * 2,
        "metadata": {"loopbench.output_tokens": str(TOKENS)},
    }
)
_totals: dict[str, Any] = {"events": 0, "responses": 0, "first": None, "last": None}


class SSEUser(FastHttpUser):
    # No wait between requests: the user streams back to back, as loopbench's agents do.
    @task
    def stream(self) -> None:
        started = time.perf_counter()
        seen = 0
        buf = b""
        with self.client.post(
            "/responses",
            data=BODY,
            headers={"content-type": "application/json", "authorization": "Bearer sk-locust"},
            stream=True,
            catch_response=True,
        ) as resp:
            for chunk in resp.iter_content(chunk_size=65536, decode_content=False):
                buf += chunk
                *complete, buf = buf.split(b"\n\n")
                for block in complete:
                    for line in block.split(b"\n"):
                        if line.startswith(b"data: "):
                            json.loads(line[6:])
                            seen += 1
            resp.success()
        _totals["events"] += seen
        _totals["responses"] += 1
        if _totals["first"] is None:
            _totals["first"] = started
        _totals["first"] = min(_totals["first"], started)
        _totals["last"] = time.perf_counter()


@events.quitting.add_listener
def _write(**_: Any) -> None:
    if not OUT:
        return
    first, last = _totals["first"], _totals["last"]
    seconds = (last - first) if first is not None and last is not None else 0.0
    with open(OUT, "w", encoding="utf-8") as fh:
        json.dump({**_totals, "seconds": seconds}, fh)
