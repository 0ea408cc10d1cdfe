"""The head of a bench's JSON document: the command, its time, and the machine it ran on."""

from __future__ import annotations

import os
import platform
import socket
import sys
import time
from typing import Any

from bench.selfbench.cpu_steal import read_cpu_times, steal_percent


def run_header(
    command: str,
    started: float,
    t0: float,
    cpu0: tuple[int, ...] | None,
    load0: list[float] | None = None,
) -> dict[str, Any]:
    """``command`` (with this process's arguments), the start (``time.time()``) and the
    seconds since ``t0`` (``time.perf_counter()``), and the machine: how busy it was since
    ``cpu0`` and, where given, ``load0`` (the load average at the start)."""
    machine: dict[str, Any] = {"hostname": socket.gethostname(), "cpu_count": os.cpu_count()}
    if load0 is not None:
        machine["load_average_at_start"] = load0
    machine.update(
        load_average=[round(x, 2) for x in os.getloadavg()],
        # share of CPU time the hypervisor gave to other guests during the whole run
        cpu_steal_pct=steal_percent(cpu0, read_cpu_times()),
        platform=platform.platform(),
        python=sys.version.split()[0],
    )
    return {
        "command": " ".join([command, *sys.argv[1:]]),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "seconds": round(time.perf_counter() - t0, 1),
        "machine": machine,
    }
