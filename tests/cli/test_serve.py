"""``loopbench serve``: says where it listens, ``--model``, and the opt-in access log.

A real ``loopbench serve`` process on port 0, driven over real sockets.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager

import httpx
import orjson
from websockets.sync.client import connect

from harness.run.child import ReadyChild, ready_child
from harness.run.embedded import READY_PREFIX
from tests.runs import ROOT


def _loopbench_serve(*args: str) -> AbstractContextManager[ReadyChild]:
    return ready_child(
        [sys.executable, "-m", "harness", "serve", "--port", "0", "--store", ":memory:", *args],
        READY_PREFIX,
        what="loopbench serve",
        timeout_s=60,
    )


def _wait_for(lines: list[str], found: Callable[[str], bool]) -> str:
    # The log is written after the response's last byte, so it may trail the client a little.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for line in list(lines):
            if found(line):
                return line
        time.sleep(0.02)
    raise AssertionError(f"no such line in the server's stderr: {lines}")


# A 4-token answer that completes: without the hint a drawn answer is cut by the cap.
SHORT = {"max_output_tokens": 4, "metadata": {"loopbench.output_tokens": "4"}}


def _ws_create(url: str) -> list[str]:
    types: list[str] = []
    with connect(url.replace("http://", "ws://") + "/responses") as ws:
        ws.send(
            orjson.dumps({"type": "response.create", "model": "m", "input": "hi", **SHORT}).decode()
        )
        while not types or types[-1] not in ("response.completed", "response.failed", "error"):
            types.append(orjson.loads(ws.recv(timeout=30))["type"])
    return types


def test_serve_prints_its_url_and_reports_model() -> None:
    with _loopbench_serve("--model", "my-model") as child:
        url = child.ready
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
        models = httpx.get(url + "/models", timeout=30).json()
        assert [m["id"] for m in models["data"]] == ["my-model"]
        ok = httpx.post(url + "/responses", json={"model": "m", "input": "hi", **SHORT})
        assert ok.status_code == 200
        assert _ws_create(url)[-1] == "response.completed"
        # Off by default: nothing per request.
        assert not [line for line in child.stderr if line.startswith("access: ")]


def test_access_log_one_line_per_request_and_per_response_create() -> None:
    with _loopbench_serve("--access-log") as child:
        url = child.ready
        httpx.get(url + "/models", timeout=30)
        _wait_for(child.stderr, lambda s: s.startswith("access: GET /v1/models 200 "))
        stream = httpx.post(
            url + "/responses",
            json={"model": "m", "input": "hi", **SHORT, "stream": True},
            timeout=30,
        )
        assert "response.completed" in stream.text
        line = _wait_for(child.stderr, lambda s: s.startswith("access: POST /v1/responses 200 "))
        assert " ms client=127.0.0.1:" in line
        httpx.get(url + "/nope", timeout=30)
        _wait_for(child.stderr, lambda s: s.startswith("access: GET /v1/nope 404 "))
        assert _ws_create(url)[-1] == "response.completed"
        line = _wait_for(child.stderr, lambda s: s.startswith("access: WS /v1/responses "))
        assert "response.create completed " in line and " ms client=127.0.0.1:" in line
        posts = [s for s in child.stderr if s.startswith("access: POST")]
        assert len(posts) == 1, posts


def test_serve_bad_flag_value_exits_4() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "serve", "--port", "0", "--model", ""],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert proc.returncode == 4, proc.stderr
    assert "--model" in proc.stderr and "Traceback" not in proc.stderr
