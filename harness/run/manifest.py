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
    """``client`` is :meth:`~harness.client.options.ClientSettings.manifest_dict` of the client
    that measures."""
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
