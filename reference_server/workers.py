"""``--workers N``: N server processes accepting on one listening socket.

Why: one Python process serves one core; on a 2-core box the server and the
harness each get one only if both scale out (``loopbench run --procs N``).

How: the supervisor binds the socket, announces it, and forks N workers before
it starts any thread or event loop; each worker builds its own app and serves
the inherited socket (the kernel hands each new connection to one of them).
SIGTERM/SIGINT to the supervisor are passed on to every worker, and it exits
when they have.

What is per worker, and why that is right:

* a WebSocket connection lives on one worker, so its connection-scoped cache
  is where its next ``response.create`` arrives;
* the store must be shared, since consecutive HTTP requests of a chain may
  reach different workers: a SQLite file (WAL mode), never ``:memory:``;
* the modelled capacity (API workers, engine stream slots, aggregate token
  budget) is divided among the workers, so N workers model the same server as
  one — as long as the kernel spreads connections evenly, which it does on
  average, not per instant;
* response ids come from per-worker sequences (``worker_index``) so two workers
  never hand out the same id.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import signal
import sys
import traceback
from types import FrameType

from reference_server.core.config import ServerConfig
from reference_server.core.profiles import ProfileError, load_profiles
from reference_server.process import bind, ready_line, serve_process


def worker_config(config: ServerConfig, index: int) -> ServerConfig:
    """``config`` for worker ``index`` of ``config.workers``: a 1/N share of the capacity."""
    n = config.workers
    api, engine = load_profiles(config.api_profile, config.engine_profile, config.overrides)
    overrides = dict(config.overrides)
    overrides["api.workers"] = str(max(1, math.ceil(api.workers / n)))
    overrides["engine.max_streams"] = str(max(1, math.ceil(engine.max_streams / n)))
    overrides["engine.aggregate_tps"] = repr(engine.aggregate_tps / n)
    return dataclasses.replace(config, overrides=overrides, workers=1, worker_index=index)


def serve_workers(config: ServerConfig) -> int | None:
    """Bind, announce, fork ``config.workers`` workers and wait for them; the signal that
    stopped them (passed on to each), None if none did."""
    n = config.workers
    if config.store_path == ":memory:":
        raise SystemExit(
            f"error: --workers {n}: --store :memory: is private to one process; "
            "give a SQLite file the workers share"
        )
    try:
        configs = [worker_config(config, i) for i in range(n)]
    except ProfileError as exc:
        raise SystemExit(f"error: {exc}") from None
    sock = bind(config.host, config.port)
    ready = ready_line(sock, tls=config.tls)
    sys.stdout.flush()
    sys.stderr.flush()
    pids: list[int] = []
    for cfg in configs:
        pid = os.fork()
        if pid == 0:  # the worker: serve, never return into the supervisor's code
            code = 0
            try:
                serve_process(cfg, sock)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except BaseException:
                traceback.print_exc()
                code = 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)
        pids.append(pid)
    sock.close()

    stopped_by: list[int] = []

    def forward(signum: int, _frame: FrameType | None) -> None:
        stopped_by.append(signum)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):  # already gone
                os.kill(pid, signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    print(ready, flush=True)
    worst = 0
    for pid in pids:
        _, status = os.waitpid(pid, 0)
        worst = max(worst, os.waitstatus_to_exitcode(status))
    if worst:
        raise SystemExit(worst)
    return stopped_by[0] if stopped_by else None
