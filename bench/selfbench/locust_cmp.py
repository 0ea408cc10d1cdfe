"""Run :mod:`.locust_sse` headless in a child process and read back its event rate."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.selfbench.procs import SelfbenchError
from bench.selfbench.raw import Rate

LOCUSTFILE = Path(__file__).with_name("locust_sse.py")


def measure_locust(base_url: str, users: int, tokens: int, seconds: float) -> Rate:
    """``users`` FastHttpUsers streaming ``tokens``-token responses for ``seconds``."""
    with tempfile.TemporaryDirectory(prefix="loopbench-selfbench-") as tmp:
        out = Path(tmp) / "locust.json"
        cmd = [
            sys.executable,
            "-m",
            "locust",
            "-f",
            str(LOCUSTFILE),
            "--headless",
            "--users",
            str(users),
            "--spawn-rate",
            str(users),
            "--run-time",
            f"{max(1, round(seconds))}s",
            "--host",
            base_url.rstrip("/"),
            "--only-summary",
            "--loglevel",
            "WARNING",
            "--exit-code-on-error",
            "0",
        ]
        env = dict(
            os.environ,
            LOOPBENCH_LOCUST_OUT=str(out),
            LOOPBENCH_LOCUST_TOKENS=str(tokens),
            PYTHONUNBUFFERED="1",
        )
        try:
            done = subprocess.run(
                cmd, env=env, capture_output=True, text=True, timeout=seconds + 60
            )
        except subprocess.TimeoutExpired as exc:
            raise SelfbenchError(f"locust did not finish within {seconds + 60:.0f} s") from exc
        if done.returncode != 0 or not out.exists():
            tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
            raise SelfbenchError(f"locust exited with code {done.returncode}: " + " | ".join(tail))
        data = json.loads(out.read_text(encoding="utf-8"))
    if not data.get("responses"):
        raise SelfbenchError(
            f"locust completed no response in {seconds:g} s; raise the run time or lower the tokens"
        )
    return Rate(int(data["events"]), float(data["seconds"]), users)
