"""Capture what ``loopbench record``'s observer is handed while Codex CLI runs through it.

Not a test: the script that made ``tests/record/data/codex-*.jsonl`` (the exchanges the pure
observer reads, one per line), kept so they can be made again with a newer Codex::

    .venv/bin/python -m tests.record.codex_capture /path/to/node_modules/.bin/codex OUT_DIR

It starts a reference server on loopback, the recording proxy in front of it (its observer on
a thread of this process, so the exchanges can be copied as they are summarised), and runs
``codex exec`` through it with a custom model provider (``wire_api = "responses"``,
``supports_websockets = true``), each run bounded by ``timeout``:

* ``codex-warmup``: one WebSocket session (its ``generate: false`` warm-up first);
* ``codex-reconnect``: the server cuts every connection's third response after its first
  delta (``--ws-fault-close-after 3``): Codex reconnects and resends the whole context;
* ``codex-concurrent``: two sessions at once.

Each line is one call of :func:`harness.record.observe.summarize` (``"summarize"``) or of the
observer's ``failed`` (an exchange cut before its end), with the bodies as text.  Content is
replaced before it is written: every string of a request's instructions, input items and tool
descriptions, and of a response's output text and arguments, by neutral filler of the same
length chosen from a hash of the original (equal texts stay equal, different texts stay
different, so which request extends which is unchanged).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import orjson

from harness.record import observer as observer_mod
from harness.record.proxy import record_until_stopped
from harness.run.embedded import embedded_server

_WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "mu",
    "nu",
    "xi",
    "omicron",
    "pi",
    "rho",
    "sigma",
    "tau",
    "upsilon",
    "phi",
    "chi",
    "psi",
    "omega",
]

#: keys whose string values are structure (kept), not prose or content (replaced)
_KEEP = frozenset(
    (
        "type",
        "role",
        "model",
        "id",
        "call_id",
        "previous_response_id",
        "status",
        "object",
        "name",
        "namespace",
        "tool_choice",
        "effort",
        "summary",
        "verbosity",
        "format",
        "service_tier",
        "prompt_cache_key",
        "include",
        "response_id",
        "item_id",
        "event_id",
        "stream_id",
        "code",
        "finish_reason",
        "incomplete_details",
        "sequence_number",
        "reason",
    )
)


def filler(text: str) -> str:
    """Neutral words of ``len(text)`` characters, picked by a hash of ``text``."""
    if not text:
        return text
    seed = hashlib.blake2b(text.encode(), digest_size=16).digest()
    out: list[str] = []
    i = 0
    while sum(len(w) + 1 for w in out) < len(text):
        out.append(_WORDS[seed[i % len(seed)] % len(_WORDS)])
        i += 1
        if i % len(seed) == 0:
            seed = hashlib.blake2b(seed, digest_size=16).digest()
    return " ".join(out)[: len(text)]


def neutral(value: Any, key: str = "") -> Any:
    """``value`` with every string that is content replaced by :func:`filler`."""
    if isinstance(value, dict):
        return {k: neutral(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [neutral(v, key) for v in value]
    if isinstance(value, str) and key not in _KEEP:
        return filler(value)
    return value


def _neutral_body(body: bytes) -> str:
    """A JSON body, or newline-separated JSON events (SSE ``data:`` lines too), made neutral."""
    try:
        return orjson.dumps(neutral(orjson.loads(body))).decode()
    except orjson.JSONDecodeError:
        pass
    lines = []
    for line in body.split(b"\n"):
        prefix = b"data: " if line.startswith(b"data: ") else b""
        try:
            doc = orjson.loads(line[len(prefix) :])
        except orjson.JSONDecodeError:
            lines.append(line.decode())
            continue
        lines.append(prefix.decode() + orjson.dumps(neutral(doc)).decode())
    return "\n".join(lines)


class Capture:
    """Copies what the observer summarises, in order, while the proxy runs."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._summarize = observer_mod.summarize
        self._failed = observer_mod.Observer.failed

    def __enter__(self) -> Capture:
        capture = self

        def summarize(*args: Any) -> Any:
            api, transport, conn, request, status, response, headers, times = args[:8]
            capture.add(
                {
                    "kind": "summarize",
                    "api": api,
                    "transport": transport,
                    "connection": conn,
                    "request": _neutral_body(request),
                    "status": status,
                    "response": _neutral_body(response),
                    "headers": {k: v for k, v in headers.items() if k == "content-encoding"},
                    "times": list(times),
                }
            )
            return capture._summarize(*args)

        def failed(self: Any, *args: Any) -> None:
            api, transport, conn, t_start, t_end, status, why = args
            capture.add(
                {
                    "kind": "failed",
                    "api": api,
                    "transport": transport,
                    "connection": conn,
                    "times": [t_start, t_end],
                    "status": status,
                    "why": why,
                }
            )
            capture._failed(self, *args)

        observer_mod.summarize = summarize  # type: ignore[assignment]
        observer_mod.Observer.failed = failed  # type: ignore[method-assign,assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        observer_mod.summarize = self._summarize
        observer_mod.Observer.failed = self._failed  # type: ignore[method-assign]

    def add(self, record: dict[str, Any]) -> None:
        with self._lock:
            self.records.append(record)


CONFIG = """\
model = "gpt-5-codex"
model_provider = "loopbench"
approval_policy = "never"
sandbox_mode = "read-only"
check_for_update_on_startup = false

[model_providers.loopbench]
name = "loopbench"
base_url = "{base_url}"
wire_api = "responses"
env_key = "LOOPBENCH_CAPTURE_KEY"
supports_websockets = true

[analytics]
enabled = false

[feedback]
enabled = false
"""

PROMPT = "List the files in this folder and say how many there are."


def codex_env(home: Path, base_url: str) -> dict[str, str]:
    (home / "config.toml").write_text(CONFIG.format(base_url=base_url))
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "TERM", "TMPDIR")}
    env.update(
        CODEX_HOME=str(home),
        HOME=str(home),
        LOOPBENCH_CAPTURE_KEY="sk-loopbench-capture",
        NO_COLOR="1",
        RUST_LOG="warn",
        # Loopback only, whatever the machine's proxy settings say.
        NO_PROXY="*",
    )
    return env


def run_codex(codex: str, base_url: str, work: Path, name: str, timeout_s: int = 120) -> str:
    home = work / f"home-{name}"
    home.mkdir(parents=True, exist_ok=True)
    cwd = work / f"cwd-{name}"
    cwd.mkdir(parents=True, exist_ok=True)
    (cwd / "notes.txt").write_text("one\ntwo\n")
    cmd = [
        "timeout",
        "-k",
        "5",
        str(timeout_s),
        codex,
        "exec",
        "--skip-git-repo-check",
        "-C",
        str(cwd),
        PROMPT,
    ]
    done = subprocess.run(cmd, env=codex_env(home, base_url), capture_output=True, text=True)
    return f"[{name}] exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"


async def _record(
    upstream: str, out: Path, ready: asyncio.Future[int], stop: asyncio.Event
) -> None:
    await record_until_stopped(
        upstream, str(out), observer="thread", on_ready=ready.set_result, stop=stop
    )


def capture(
    codex: str, out_dir: Path, name: str, server_args: list[str], sessions: int = 1
) -> None:
    with tempfile.TemporaryDirectory() as tmp, Capture() as cap:
        work = Path(tmp)
        with embedded_server(extra_args=["--access-log", *server_args]) as upstream:
            loop = asyncio.new_event_loop()
            ready: asyncio.Future[int] = loop.create_future()
            stop = asyncio.Event()
            task = loop.create_task(_record(upstream, work / "trace.jsonl", ready, stop))
            thread = threading.Thread(target=loop.run_forever, daemon=True)
            thread.start()
            port = asyncio.run_coroutine_threadsafe(_wait(ready), loop).result(60)
            base = f"http://127.0.0.1:{port}/v1"
            results: list[str] = []
            runners = [
                threading.Thread(
                    target=lambda i=i: results.append(run_codex(codex, base, work, f"{name}-{i}"))
                )
                for i in range(sessions)
            ]
            for r in runners:
                r.start()
            for r in runners:
                r.join()
            loop.call_soon_threadsafe(stop.set)
            asyncio.run_coroutine_threadsafe(_wait_task(task), loop).result(120)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
            print("\n".join(results), file=sys.stderr)
            trace = (work / "trace.jsonl").read_text()
            print(f"[{name}] trace as recorded today:\n{trace}", file=sys.stderr)
        lines = [orjson.dumps(r).decode() for r in cap.records]
        (out_dir / f"{name}.jsonl").write_text("\n".join(lines) + "\n")


async def _wait(fut: asyncio.Future[int]) -> int:
    return await fut


async def _wait_task(task: asyncio.Task[None]) -> None:
    with contextlib.suppress(asyncio.CancelledError):
        await task


def main(argv: list[str]) -> int:
    codex, out_dir = argv[0], Path(argv[1])
    which = set(argv[2:]) or {"codex-warmup", "codex-reconnect", "codex-concurrent"}
    out_dir.mkdir(parents=True, exist_ok=True)
    if "codex-warmup" in which:
        capture(codex, out_dir, "codex-warmup", [])
    if "codex-reconnect" in which:
        capture(codex, out_dir, "codex-reconnect", ["--ws-fault-close-after", "3"])
    if "codex-concurrent" in which:
        capture(codex, out_dir, "codex-concurrent", [], sessions=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
