"""``--insecure`` reaches ``wss://`` as it reaches ``https://``: the transport, the probe, a run.

The reference server itself speaks TLS (``--tls-self-signed``): a certificate the client
does not trust unless told to skip verification.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.client.options import TransportOptions
from harness.client.probe import REACHABLE, SSE, WEBSOCKET
from harness.run.probe import probe
from harness.transports.ws import open_ws
from harness.wire.errors import ErrorKind, TransportError
from tests.runs import TINY, loopbench
from tests.server.conftest import configured_server


@pytest.fixture(scope="module")
def https_url() -> Iterator[str]:
    with configured_server("--tls-self-signed") as url:
        assert url.startswith("https://")
        yield url


async def _open(base_url: str, verify_tls: bool) -> None:
    options = TransportOptions(base_url=base_url, verify_tls=verify_tls, connect_timeout_s=10)
    assert options.ws_url.startswith("wss://")
    conn = await open_ws(options, options.ws_url)
    await conn.close()


def test_open_ws_verifies_by_default_and_not_when_insecure(https_url: str) -> None:
    with pytest.raises(TransportError) as exc:
        asyncio.run(_open(https_url, verify_tls=True))
    assert exc.value.kind == ErrorKind.CONNECTION
    assert "CERTIFICATE_VERIFY_FAILED" in str(exc.value)
    asyncio.run(_open(https_url, verify_tls=False))


def test_probe_honours_insecure_over_wss(https_url: str) -> None:
    features = (REACHABLE, SSE, WEBSOCKET)
    found = {
        f.feature: f
        for f in probe(https_url, features, api_key="sk-loopbench", verify_tls=False, timeout_s=10)
    }
    assert all(f.supported for f in found.values()), found
    strict = {
        f.feature: f
        for f in probe(https_url, features, api_key="sk-loopbench", verify_tls=True, timeout_s=10)
    }
    assert not strict[REACHABLE].supported
    assert strict[REACHABLE].evidence.endswith(
        "its TLS certificate was not accepted (self-signed certificate); "
        "--insecure skips the verification"
    )


def test_run_over_https_and_wss_with_insecure(https_url: str, tmp_path: Path) -> None:
    refused = loopbench("run", TINY, "--target", https_url, "--out", str(tmp_path), "-q")
    assert refused.returncode != 0 and "--insecure skips the verification" in refused.stderr
    assert list(tmp_path.iterdir()) == []
    proc = loopbench(
        "run", TINY, "--target", https_url, "--insecure", "--transports", "http,ws",
        "--set", "rollout.count=1", "--out", str(tmp_path), "--run-id", "r", "-q", timeout=120, report=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    for name in ("http", "ws"):
        turns = summary["transports"][name]["turns"]
        assert turns["count"] > 0 and turns["errors"] == 0, (name, turns)
