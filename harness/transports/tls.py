"""The client's TLS context for ``wss://``: verified by default, unverified under ``--insecure``."""

from __future__ import annotations

import functools
import ssl


@functools.cache
def tls_context(verify: bool) -> ssl.SSLContext:
    """One context per setting for the process.

    Built once because loading the system's CA store takes milliseconds, which would
    otherwise land inside every new WebSocket connection's measured connect time.
    """
    ctx = ssl.create_default_context()
    if not verify:
        # --insecure: a self-signed or internal certificate, the same as the HTTP pool accepts.
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx
