"""Security defaults and per-client limits: keys from flag, env and file; binds; slow clients."""

from __future__ import annotations

import argparse
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from reference_server.cli import API_KEYS_ENV, add_server_arguments, config_from_args
from reference_server.serve import bind_warning
from reference_server.service import key_matches
from tests.runs import server_exit
from tests.server.conftest import hinted_body
from tools.soak import ServerProcess, rss_kib, server_process


def _config(argv: list[str]) -> object:
    parser = argparse.ArgumentParser()
    add_server_arguments(parser)
    return config_from_args(parser.parse_args(argv))


def _ws_url(server: ServerProcess) -> str:
    return server.url.replace("http://", "ws://", 1) + "/responses"


def test_defaults_bind_loopback_and_accept_any_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(API_KEYS_ENV, raising=False)
    cfg = _config([])
    assert cfg.host == "127.0.0.1" and cfg.api_keys == ()  # type: ignore[attr-defined]


def test_keys_come_from_flags_env_and_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text("# team keys\nsk-file-1\n\nsk-file-2\n")
    monkeypatch.setenv(API_KEYS_ENV, "sk-env-1, sk-env-2")
    cfg = _config(["--api-key", "sk-flag", "--api-key-file", str(keys), "--api-key", "sk-env-1"])
    assert cfg.api_keys == ("sk-flag", "sk-env-1", "sk-env-2", "sk-file-1", "sk-file-2")  # type: ignore[attr-defined]
    with pytest.raises(SystemExit, match=r"--api-key-file .*missing.txt: cannot read"):
        _config(["--api-key-file", str(tmp_path / "missing.txt")])
    (tmp_path / "empty.txt").write_text("# nothing\n")
    with pytest.raises(SystemExit, match="expected one key per line, got none"):
        _config(["--api-key-file", str(tmp_path / "empty.txt")])


@pytest.mark.parametrize(
    ("host", "keys", "warns"),
    [
        ("127.0.0.1", (), False),
        ("::1", (), False),
        ("localhost", (), False),
        ("0.0.0.0", (), True),
        ("::", (), True),
        ("192.168.1.20", (), True),
        ("build-host.example", (), True),
        ("0.0.0.0", ("sk-a",), False),
    ],
)
def test_a_public_bind_without_keys_warns(host: str, keys: tuple[str, ...], warns: bool) -> None:
    message = bind_warning(host, keys)
    assert (message is not None) == warns
    if message is not None:
        assert host in message and "--api-key" in message


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    path = tmp_path_factory.mktemp("keys") / "keys.txt"
    path.write_text("sk-from-file\n")
    import os

    env = dict(os.environ, **{API_KEYS_ENV: "sk-from-env"})
    args = ["--store", ":memory:", "--api-key-file", str(path), "--max-connections-per-client", "3"]
    with server_process(args, env=env) as srv:
        yield srv


def _post(server: ServerProcess, key: str | None) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    body = {"model": "m", "input": "hi", "max_output_tokens": 4, "tool_choice": "none"}
    return httpx.post(server.url + "/responses", json=body, headers=headers, timeout=30)


def test_keys_from_env_and_file_are_checked_on_http_and_before_the_upgrade(
    keyed: ServerProcess,
) -> None:
    assert _post(keyed, None).status_code == 401
    assert _post(keyed, "sk-wrong").json()["error"]["code"] == "invalid_api_key"
    assert _post(keyed, "sk-from-file").status_code == 200
    assert _post(keyed, "sk-from-env").status_code == 200
    with pytest.raises(InvalidStatus) as refused:
        connect(_ws_url(keyed), additional_headers={"authorization": "Bearer sk-wrong"})
    assert refused.value.response.status_code == 401
    with connect(_ws_url(keyed), additional_headers={"authorization": "Bearer sk-from-env"}):
        pass


def test_near_misses_of_a_key_are_refused(keyed: ServerProcess) -> None:
    # The constant-time comparison must still be an exact one: prefixes, extensions and
    # case changes of a configured key are all other keys.
    for near in ("sk-from-fil", "sk-from-file2", "SK-FROM-FILE", "sk-from-env sk-from-file"):
        assert _post(keyed, near).status_code == 401, near
    assert _post(keyed, "sk-from-file").status_code == 200


def test_key_matches_compares_every_key_exactly() -> None:
    keys = tuple(k.encode() for k in ("sk-a", "sk-bb", "schl\u00fcssel-\u00e9"))
    for key in keys:
        assert key_matches(key, keys)
    for other in (b"", b"sk-", b"sk-a ", b"sk-b", b"sk-bbb", b"schlussel-e"):
        assert not key_matches(other, keys)
    assert not key_matches(b"sk-a", ())


def test_connections_per_client_address_are_limited(keyed: ServerProcess) -> None:
    auth = {"authorization": "Bearer sk-from-file"}
    with (
        connect(_ws_url(keyed), additional_headers=auth),
        connect(_ws_url(keyed), additional_headers=auth),
    ):
        # Two open + this request = three: still within the limit of 3.
        assert _post(keyed, "sk-from-file").status_code == 200
        with connect(_ws_url(keyed), additional_headers=auth):
            over = _post(keyed, "sk-from-file")
            assert over.status_code == 429
            assert over.json()["error"]["code"] == "too_many_client_connections"
            assert over.headers["retry-after"] == "1"
            with pytest.raises(InvalidStatus) as refused:
                connect(_ws_url(keyed), additional_headers=auth)
            assert refused.value.response.status_code == 429
    assert _post(keyed, "sk-from-file").status_code == 200


# -- clients that never read ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def fast() -> Iterator[ServerProcess]:
    args = ["--store", ":memory:", "--send-timeout-s", "1", "--min-delta-interval-ms", "0"]
    args += ["--set", "engine.sustained_tps=50000", "--set", "engine.burst_tps=100000"]
    with server_process(args) as srv:
        yield srv


def _wait_dropped(server: ServerProcess, at_least: int) -> int:
    deadline = time.monotonic() + 30
    dropped = 0
    while time.monotonic() < deadline:
        dropped = int(server.health()["slow_clients_dropped"])
        if dropped >= at_least:
            break
        time.sleep(0.2)  # another process's counter: nothing to await
    return dropped


def _small_socket(server: ServerProcess) -> socket.socket:
    host, port = server.url.split("//")[1].split("/")[0].rsplit(":", 1)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    return sock


def test_readers_that_stop_reading_are_dropped_without_growing_memory(fast: ServerProcess) -> None:
    base = rss_kib(fast.pid)
    assert base is not None
    body = json.dumps(hinted_body(200000, model="m", stream=True)).encode()
    sock = _small_socket(fast)
    sock.sendall(
        b"POST /v1/responses HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        + f"content-length: {len(body)}\r\n\r\n".encode()
        + body
    )
    # A WebSocket client whose library stops reading once 2 messages wait unread.
    with connect(_ws_url(fast), max_queue=2, compression=None, close_timeout=1) as ws:
        create = {"type": "response.create", "model": "m", "input": "hi", "tool_choice": "none"}
        ws.send(json.dumps({**create, "metadata": {"loopbench.output_tokens": "200000"}}))
        dropped = _wait_dropped(fast, 2)
    sock.close()
    assert dropped >= 2
    after = rss_kib(fast.pid)
    assert after is not None
    # 400,000 tokens (~60 MiB of events) were asked for; the server planned them (~100 B a
    # token) but queued only what the socket buffers and the SSE queue bound allow.
    assert after - base < 96 * 1024, (base, after)
    # and the server still serves
    ok = httpx.post(
        fast.url + "/responses", json={"model": "m", "input": "hi", "max_output_tokens": 8}
    )
    assert ok.status_code == 200
    assert "Traceback" not in "".join(fast.stderr)


def test_a_host_it_cannot_listen_on_is_one_line_not_a_traceback() -> None:
    proc = server_exit("--host", "bad.invalid", "--port", "0")
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert "error: cannot listen on bad.invalid:0: " in proc.stderr
