"""``make soak``: a bounded run of mixed load with faults, watching memory of both sides.

The reference server runs with seeded faults (errors by status, mid-stream
disconnects, stalls, latency spikes, cache evictions, short connection
lifetimes) and a SQLite store on disk; ``loopbench run`` drives it over every
transport in interleaved rounds, as a separate process.  Every few seconds the
resident set size (``VmRSS`` in ``/proc/<pid>/status``) of both processes is
sampled.  The soak writes ``<out>/soak.json`` and ``soak.md`` (RSS over time,
errors by kind and transport, recoveries, faults the server injected) next to
the run folder, and exits non-zero if a process died or memory kept growing.

"Kept growing" compares the second half of the load with the first: RSS
samples are taken after a warm-up quarter, and the growth from the first to
the last third of them must stay under ``--max-growth-mib``.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from harness.report.results import read_csv_gz, write_index
from harness.run.embedded import server_child
from harness.wire.transports import TRANSPORT_NAMES

SOAK_FAULTS = (
    "seed=11",
    "error_rate.429=0.01",
    "error_rate.500=0.005",
    "error_rate.503=0.01",
    "disconnect_rate=0.01",
    "stall_rate=0.004",
    "stall_s=60",
    "spike_rate=0.02",
    "spike_ms=250",
    "evict_rate=0.03",
    "lifetime_s=20",
)
STARTUP_S = 10.0


def rss_kib(pid: int) -> int | None:
    """Resident set size of ``pid`` in KiB (``VmRSS``), or None once it has exited."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


@dataclass(slots=True)
class ServerProcess:
    """A reference server child process: its URL, its process, its stderr so far."""

    url: str
    proc: subprocess.Popen[str]
    stderr: list[str]

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def health_url(self) -> str:
        return self.url.removesuffix("/v1") + "/health"

    def health(self, timeout_s: float = 5.0) -> dict[str, Any]:
        with urllib.request.urlopen(self.health_url, timeout=timeout_s) as resp:
            doc: dict[str, Any] = json.loads(resp.read())
        return doc


@contextmanager
def server_process(
    args: Sequence[str] = (), *, startup_timeout_s: float = 60.0, env: dict[str, str] | None = None
) -> Iterator[ServerProcess]:
    """Start ``python -m reference_server --port 0 ARGS`` and stop it (SIGTERM, then kill) after.

    Unlike :func:`harness.run.embedded.embedded_server` this exposes the process
    (for its pid, its memory and signals) and keeps its stderr.
    """
    with server_child(
        ["--port", "0", *args], startup_timeout_s=startup_timeout_s, env=env, keep_stderr=200
    ) as child:
        yield ServerProcess(child.ready, child.proc, child.stderr)


def soak_scenario(duration_s: float, seed: int) -> dict[str, Any]:
    """A mixed agent workload: every transport in interleaved rounds, closed loop."""
    rounds = 8
    per_transport_s = duration_s / len(TRANSPORT_NAMES)
    return {
        "name": "soak",
        "description": "make soak: mixed transports under injected faults",
        "seed": seed,
        "transports": list(TRANSPORT_NAMES),
        "rollout": {
            "count": rounds * 400,
            "system_tokens": 400,
            "tool_schema_tokens": 200,
            "user_prompt_tokens": 60,
            "tool_calls": 6,
            "parallel_calls": 1,
            "tool_output_tokens": {"dist": "uniform", "min": 40, "max": 400},
            "tool_latency_ms": {"dist": "uniform", "min": 2, "max": 20},
            "step_output_tokens": {"dist": "uniform", "min": 20, "max": 80},
            "final_answer_tokens": 120,
        },
        "load": {
            "mode": "closed",
            "concurrency": 6,
            "duration_s": round(per_transport_s, 3),
            "order": "interleaved",
            "rounds": rounds,
        },
    }


@dataclass(slots=True)
class Sample:
    t_s: float
    server_kib: int | None
    harness_kib: int | None


def growth_mib(values: Sequence[int]) -> float | None:
    """Median of the last third minus median of the first third of post-warm-up samples (MiB)."""
    tail = list(values[len(values) // 4 :])
    if len(tail) < 6:
        return None
    third = len(tail) // 3

    def median(xs: Sequence[int]) -> float:
        s = sorted(xs)
        return float(s[len(s) // 2])

    return round((median(tail[-third:]) - median(tail[:third])) / 1024, 1)


def _stats(values: Sequence[int], load_values: Sequence[int]) -> dict[str, Any]:
    """``values``: samples once started; ``load_values``: those within the planned load time."""
    if not values:
        return {"start_mib": None, "peak_mib": None, "end_mib": None, "growth_mib": None}
    return {
        "start_mib": round(values[0] / 1024, 1),
        "load_peak_mib": round(max(load_values or values) / 1024, 1),
        "peak_mib": round(max(values) / 1024, 1),
        "end_mib": round(values[-1] / 1024, 1),
        "growth_mib": growth_mib(load_values or values),
    }


def run_soak(
    out: Path, duration_s: float, sample_s: float, seed: int, max_growth_mib: float
) -> int:
    out.mkdir(parents=True, exist_ok=True)
    scenario_path = out / "soak-scenario.yaml"
    scenario_path.write_text(yaml.safe_dump(soak_scenario(duration_s, seed), sort_keys=False))
    run_id = time.strftime("soak-%Y%m%d-%H%M%S", time.gmtime())
    store = out / "soak-store.sqlite3"
    for suffix in ("", "-wal", "-shm"):
        Path(str(store) + suffix).unlink(missing_ok=True)
    server_args = ["--store", str(store), "--drain-timeout-s", "5", "--seed", str(seed)]
    for fault in SOAK_FAULTS:
        server_args += ["--fault", fault]
    samples: list[Sample] = []
    with server_process(server_args) as server:
        cmd = [
            sys.executable,
            "-m",
            "harness",
            "run",
            str(scenario_path),
            "--target",
            server.url,
            "--request-timeout-s",
            "3",
            "--out",
            str(out),
            "--run-id",
            run_id,
            "-q",
        ]
        harness = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        t0 = time.monotonic()
        hard_stop = t0 + duration_s * 1.5 + 60
        print(f"soak: {duration_s:.0f} s of load, RSS every {sample_s:g} s -> {out}", flush=True)
        while harness.poll() is None:
            now = time.monotonic()
            if now > hard_stop:
                harness.send_signal(signal.SIGTERM)  # finishes with a partial summary
                harness.wait(60)
                break
            sample = Sample(round(now - t0, 1), rss_kib(server.pid), rss_kib(harness.pid))
            samples.append(sample)
            if len(samples) % max(1, round(30 / sample_s)) == 1:
                print(
                    f"  t={sample.t_s:6.0f} s  server {_mib(sample.server_kib)}  "
                    f"harness {_mib(sample.harness_kib)}",
                    flush=True,
                )
            time.sleep(sample_s)
        harness_err = harness.stderr.read() if harness.stderr else ""
        server_alive = server.proc.poll() is None
        health = server.health() if server_alive else {}
    run_dir = out / run_id
    summary = json.loads((run_dir / "summary.json").read_text())
    rollouts = read_csv_gz(run_dir / "rollouts.csv.gz")
    recoveries = {
        str(k): int(v) for k, v in rollouts.groupby("transport")["recoveries"].sum().items()
    }
    errors = {
        name: {"turns": t["turns"], "errors_by_kind": t.get("errors_by_kind", {})}
        for name, t in summary["transports"].items()
    }
    # The first seconds are process start-up; the last ones include rendering the report.
    started = [s for s in samples if s.t_s >= STARTUP_S]
    loaded = [s for s in started if s.t_s <= duration_s]
    server_rss = [s.server_kib for s in started if s.server_kib]
    harness_rss = [s.harness_kib for s in started if s.harness_kib]
    doc: dict[str, Any] = {
        "run_id": run_id,
        "duration_s": duration_s,
        "faults": list(SOAK_FAULTS),
        "rss": {
            "server": _stats(server_rss, [s.server_kib for s in loaded if s.server_kib]),
            "harness": _stats(harness_rss, [s.harness_kib for s in loaded if s.harness_kib]),
        },
        "rss_samples": [[s.t_s, s.server_kib, s.harness_kib] for s in samples],
        "transports": errors,
        "recoveries": recoveries,
        "faults_injected": health.get("faults_injected", {}),
        "slow_clients_dropped": health.get("slow_clients_dropped"),
        "harness_exit": harness.returncode,
        "server_alive_at_end": server_alive,
        "partial": summary.get("partial"),
    }
    problems = []
    if not server_alive:
        problems.append("the server died during the soak")
    if harness.returncode != 0:
        problems.append(f"the harness exited with {harness.returncode}: {harness_err[-500:]}")
    for side in ("server", "harness"):
        g = doc["rss"][side]["growth_mib"]
        if g is not None and g > max_growth_mib:
            problems.append(f"{side} RSS grew {g} MiB over the run (limit {max_growth_mib} MiB)")
    doc["problems"] = problems
    doc["ok"] = not problems
    text = soak_markdown(doc)
    write_index(out, "soak", doc, text)
    print(text)
    return 0 if not problems else 1


def _mib(kib: int | None) -> str:
    return "   -    " if kib is None else f"{kib / 1024:7.1f} MiB"


def soak_markdown(doc: dict[str, Any]) -> str:
    lines = [f"# Soak {doc['run_id']} ({doc['duration_s']:.0f} s of load)", ""]
    lines += [
        "| process | start MiB | peak under load MiB | peak MiB | end MiB | growth MiB |",
        "|---|---|---|---|---|---|",
    ]
    for side in ("server", "harness"):
        r = doc["rss"][side]
        lines.append(
            f"| {side} | {r['start_mib']} | {r.get('load_peak_mib')} | {r['peak_mib']} | "
            f"{r['end_mib']} | {r['growth_mib']} |"
        )
    lines += [
        "",
        f"Start: the first sample after {STARTUP_S:g} s. Under load: samples within the planned "
        "load time; the harness's last samples include rendering the report. Growth: median of "
        "the last third minus the first third of the samples under load after a warm-up quarter.",
    ]
    lines += ["", "RSS over time (s: server MiB / harness MiB):", ""]
    samples = doc["rss_samples"]
    step = max(1, len(samples) // 12)
    lines.append(
        ", ".join(
            f"{t:.0f}: {(s or 0) / 1024:.0f}/{(h or 0) / 1024:.0f}" for t, s, h in samples[::step]
        )
    )
    lines += [
        "",
        "| transport | turns | errors | recoveries | errors by kind |",
        "|---|---|---|---|---|",
    ]
    for name, t in doc["transports"].items():
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(t["errors_by_kind"].items())) or "-"
        lines.append(
            f"| {name} | {t['turns']['count']} | {t['turns']['errors']} | "
            f"{doc['recoveries'].get(name, 0)} | {kinds} |"
        )
    injected = ", ".join(f"{k} {v}" for k, v in doc["faults_injected"].items()) or "-"
    lines += ["", f"Faults injected by the server: {injected}."]
    lines.append("Verdict: " + ("ok" if doc["ok"] else "FAILED: " + "; ".join(doc["problems"])))
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m harness.tools.soak",
        description="Mixed load with injected faults; reports RSS over time and error/recovery counts.",
    )
    parser.add_argument("--out", default="results/soak", help="folder for the run and soak.json")
    parser.add_argument(
        "--duration-s", type=float, default=240.0, help="seconds of load (default 240)"
    )
    parser.add_argument("--sample-s", type=float, default=5.0, help="RSS sampling period")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--max-growth-mib",
        type=float,
        default=64.0,
        help="fail if either process's RSS grows more than this between the first and last third",
    )
    args = parser.parse_args(argv)
    if args.duration_s <= 0 or args.sample_s <= 0:
        parser.error("--duration-s and --sample-s must be positive")
    sys.exit(
        run_soak(Path(args.out), args.duration_s, args.sample_s, args.seed, args.max_growth_mib)
    )


if __name__ == "__main__":
    main()
