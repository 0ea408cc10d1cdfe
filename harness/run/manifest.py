"""``manifest.json`` of a run: what was run, against what, with which client and software."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from harness.workload.scenario import Scenario


def _git_sha() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path(__file__).parent,
        )
        return out.stdout.strip() if out.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def _versions() -> dict[str, str]:
    out = {}
    for name in (
        "loopbench",
        "websockets",
        "uvicorn",
        "starlette",
        "orjson",
        "hdrhistogram",
    ):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = ""
    return out


def client_options(
    *,
    hints: bool,
    keepalive: bool,
    cache_control: str = "conversation",
    verify_tls: bool,
    request_timeout_s: float,
    recover_from: str = "full",
    shaping: Mapping[str, Any] | None = None,
    tokenizer: str = "4-chars",
    ws_subagents: str | None = None,
    rx_stamp: str | None = None,
    rx_stamp_option: str | None = None,
) -> dict[str, Any]:
    """The manifest's ``client_options``: the client settings that can change a measurement.

    ``shaping`` is :meth:`RequestShaping.describe` (header names, never their values);
    ``tokenizer`` the token convention's name.
    """
    out: dict[str, Any] = {
        "hints": hints,
        "keepalive": keepalive,
        # only when not the default, so manifests of runs without it read as before
        **({"cache_control": cache_control} if cache_control != "conversation" else {}),
        "verify_tls": verify_tls,
        "request_timeout_s": request_timeout_s,
        "recover_from": recover_from,
        "tokenizer": tokenizer,
    }
    if shaping is not None:
        out["shaping"] = dict(shaping)
    if ws_subagents is not None:
        # --ws-subagents, only when given (else the scenario's rollout.subagents.ws decides)
        out["ws_subagents"] = ws_subagents
    if rx_stamp is not None:
        # how the asyncio client stamped reads (kernel or user; TLS connections: user) and
        # the --rx-stamp that chose it (docs/metrics.md §1.9)
        out["rx_stamp"] = rx_stamp
        out["rx_stamp_option"] = rx_stamp_option or rx_stamp
    return out


def _scenario_record(scenario: Scenario) -> dict[str, Any]:
    """The scenario as the manifest keeps it: header values of ``target:`` left out (they
    may be credentials; the names say what was sent)."""
    doc: dict[str, Any] = scenario.model_dump(mode="json")
    target = doc.get("target")
    if isinstance(target, dict) and isinstance(target.get("headers"), dict):
        target["headers"] = dict.fromkeys(target["headers"], "***")
    return doc


def build_manifest(
    scenario: Scenario,
    scenario_path: str,
    transports: Sequence[str],
    target: str,
    embedded: bool,
    run_id: str,
    client: Mapping[str, Any],
) -> dict[str, Any]:
    """``client`` is :func:`client_options` of the client that measures."""
    return {
        "run_id": run_id,
        "scenario": _scenario_record(scenario),
        "scenario_path": scenario_path,
        "scenario_name": scenario.name,
        "seed": scenario.seed,
        "transports": list(transports),
        "target": target,
        "embedded_server": embedded,
        "client_options": dict(client),
        "versions": _versions(),
        "git_sha": _git_sha(),
        "machine": {
            "hostname": socket.gethostname(),
            "cpu_count": os.cpu_count(),
            "platform": platform.platform(),
            "processor": platform.processor(),
            "python": sys.version.split()[0],
        },
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
