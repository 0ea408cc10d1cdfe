"""A TLS front for a plain server, with a self-signed certificate, for tests of ``--insecure``.

The reference server speaks no TLS; :func:`tls_front` terminates TLS on 127.0.0.1 port 0
and pipes the bytes to the plain server, so ``https://`` and ``wss://`` reach the real
thing.  The certificate is made by the ``openssl`` binary (tests that need it skip when
it is missing); it names 127.0.0.1, so only its self-signature makes verification fail.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import pytest

#: seconds a connection may stay silent before the front drops it
IDLE_S = 30.0


def self_signed(folder: Path) -> tuple[Path, Path]:
    """(certificate, key) files for 127.0.0.1, valid for a day."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl binary is needed to make a self-signed certificate")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    # Either side closing (or resetting, or going silent past the timeout) ends this
    # direction; shutting the other socket down ends the opposite one.
    with contextlib.suppress(OSError):
        while data := src.recv(65536):
            dst.sendall(data)
    for s in (src, dst):
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)


def _serve_one(conn: socket.socket, ctx: ssl.SSLContext, upstream: tuple[str, int]) -> None:
    conn.settimeout(IDLE_S)
    try:
        tls = ctx.wrap_socket(conn, server_side=True)
    except OSError:  # the client refused the certificate: what the strict tests expect
        conn.close()
        return
    with tls, socket.create_connection(upstream, timeout=IDLE_S) as plain:
        back = threading.Thread(target=_pipe, args=(plain, tls), daemon=True)
        back.start()
        _pipe(tls, plain)
        back.join(IDLE_S)


@contextmanager
def tls_front(plain_url: str) -> Iterator[str]:
    """``https://127.0.0.1:PORT/PATH`` in front of ``plain_url`` (``http://HOST:PORT/PATH``)."""
    up = urlsplit(plain_url)
    assert up.hostname is not None and up.port is not None
    upstream = (up.hostname, up.port)
    with tempfile.TemporaryDirectory() as tmp:
        cert, key = self_signed(Path(tmp))
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
    listener = socket.create_server(("127.0.0.1", 0))
    # accept() wakes up at least this often to notice the block has ended
    listener.settimeout(0.2)
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=_serve_one, args=(conn, ctx, upstream), daemon=True).start()

    thread = threading.Thread(target=accept, name="tls-front", daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{listener.getsockname()[1]}{up.path}"
    finally:
        stop.set()
        thread.join(10)
        listener.close()
