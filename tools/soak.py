"""``make soak``: a bounded run of mixed load with faults, watching memory of both sides.

The reference server runs with seeded faults (errors by status, mid-stream
disconnects, stalls, latency spikes, cache evictions, short connection
lifetimes) and a SQLite store on disk; ``loopbench run`` drives it over every
transport in interleaved rounds, as a separate process.  Every few seconds the
resident set size (``VmRSS`` in ``/proc/<pid>/status``) of both processes is
sampled.  The soak writes ``<out>/soak.json`` and ``soak.md`` (RSS over time,
errors by kind and transport, recoveries, faults the server injected) next to
the run folder, and exits non-zero if a process died or memory kept growing.

"Kept growing" is the slope of a least-squares line through the RSS samples
after the warm-up (the first quarter of the load, at least 30 s), in MiB per
hour, for each side.  Next to the server's slope the soak states what stored
responses account for (the store's rows and bytes on disk, and the part SQLite
may hold in memory: its page cache, bounded), what the engine's LRU prefix
cache does (bounded: ~10 MiB when first full, ~13 MiB once it churns; its table's
size from ``/health``) and what malloc holds freed (``/health``'s ``memory``); the
rest is what nothing accounts for.  The gate is tools/soak_gate.py.

Besides the harness's turns the server gets the requests of :data:`SIDE_MIX`, one
line per endpoint, each at its own period.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from harness.report.results import read_csv_gz, write_index
from harness.run.embedded import server_child
from harness.wire.exit_codes import UsageParser
from harness.wire.transports import TRANSPORT_NAMES
from reference_server.core.faults import ERROR_STATUSES
from reference_server.core.profiles import load_profiles
from tools import soak_gate
from tools.soak_gate import (
    SQLITE_CACHE_BYTES,
    Limits,
    prefix_cache_bytes,
    slope_per_h,
)

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


@dataclass(frozen=True, slots=True)
class SideRequest:
    """One endpoint of the soak's side mix: ``{id}`` in ``path`` is the last stored response."""

    name: str
    method: str
    path: str
    body: dict[str, Any] | None
    every_s: float


_STORED = {"model": "sim-model", "input": "soak", "store": True, "max_output_tokens": 16}
_COMPACT = {"model": "sim-model", "input": "soak history to compact " * 64}
#: the requests the soak sends besides the harness's turns, one line per endpoint
#: (docs/reliability.md, *Soak*): each ``{id}`` names the last response a create stored.
SIDE_MIX: tuple[SideRequest, ...] = (
    SideRequest("create_stored", "POST", "/v1/responses", _STORED, 0.5),
    SideRequest("retrieve", "GET", "/v1/responses/{id}", None, 0.5),
    SideRequest("input_items", "GET", "/v1/responses/{id}/input_items", None, 1.0),
    SideRequest("background", "POST", "/v1/responses", {**_STORED, "background": True}, 1.0),
    SideRequest("delete", "DELETE", "/v1/responses/{id}", None, 2.0),
    SideRequest("compact", "POST", "/v1/responses/compact", _COMPACT, 5.0),
    SideRequest("models", "GET", "/v1/models", None, 2.0),
    SideRequest("health", "GET", "/health", None, 2.0),
)


def rss_kib(pid: int, fields: Sequence[str] = ("VmRSS",)) -> int | None:
    """Resident set size of ``pid`` in KiB (``VmRSS``; or the sum of other ``fields`` of its
    ``/proc/<pid>/status``), or None once it has exited."""
    found = []
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                name = line.split(":", 1)[0]
                if name in fields:
                    found.append(int(line.split()[1]))
    except (OSError, ValueError):
        return None
    return sum(found) if found else None


#: the part of a process's RSS that is file pages: code paged in as paths first run, and the
#: store's shared-memory index (``-shm``), neither malloc's nor Python's
FILE_RSS = ("RssFile", "RssShmem")


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
    store_bytes: int | None = None
    prefix_entries: int | None = None
    #: the server's malloc (``/health``'s ``memory``): bytes freed but held, bytes in use
    malloc_free_held: int | None = None
    malloc_in_use: int | None = None
    #: bytes of the prefix cache's hash table (``/health``)
    prefix_table_bytes: int | None = None
    #: the server's file-backed resident pages, KiB (:data:`FILE_RSS`)
    server_file_kib: int | None = None
    #: bytes Python's small-object arenas hold beyond the blocks in use (``/health``)
    pymalloc_free_held: int | None = None


def warmup_s(duration_s: float) -> float:
    """Samples before this are warm-up (imports, first connections, caches filling)."""
    return max(30.0, duration_s / 4)


def store_bytes(path: Path) -> int | None:
    """Bytes of a SQLite store on disk (the file and its write-ahead log)."""
    total = None
    for suffix in ("", "-wal"):
        try:
            total = (total or 0) + os.path.getsize(str(path) + suffix)
        except OSError:
            continue
    return total


def store_rows(path: Path) -> dict[str, int] | None:
    """Rows and item bytes of the store, read-only (None if it cannot be read)."""
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            rows, size = db.execute(
                "SELECT count(*), coalesce(sum(length(items)), 0) FROM responses"
            ).fetchone()
        finally:
            db.close()
    except sqlite3.Error:
        return None
    return {"rows": int(rows), "item_bytes": int(size)}


class SideMix:
    """Sends :data:`SIDE_MIX` from a thread while the soak runs; counts answers by status."""

    def __init__(self, base_url: str, mix: Sequence[SideRequest] = SIDE_MIX) -> None:
        self.base = base_url.removesuffix("/v1")
        self.mix = mix
        self.counts: dict[str, dict[str, int]] = {r.name: {} for r in mix}
        #: refusals that are injected faults (the fault's status and code), by fault kind
        self.injected: dict[str, int] = {}
        self.last_id: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-side-mix", daemon=True)

    def __enter__(self) -> SideMix:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        due = {r.name: 0.0 for r in self.mix}
        t0 = time.monotonic()
        while not self._stop.wait(0.05):
            now = time.monotonic() - t0
            for r in self.mix:
                if now >= due[r.name]:
                    due[r.name] = now + r.every_s
                    self._send(r)

    def _send(self, r: SideRequest) -> None:
        if "{id}" in r.path and self.last_id is None:
            return
        url = self.base + r.path.replace("{id}", self.last_id or "")
        data = json.dumps(r.body).encode() if r.body is not None else None
        req = urllib.request.Request(url, data=data, method=r.method)
        req.add_header("content-type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                status = str(resp.status)
                doc = json.loads(resp.read() or b"null")
                if isinstance(doc, dict) and doc.get("object") == "response" and doc.get("id"):
                    if r.method == "POST":
                        self.last_id = str(doc["id"])
                    elif r.method == "DELETE":
                        self.last_id = None  # gone: the next create names the next one
        except urllib.error.HTTPError as exc:
            status = str(exc.code)
            if _is_injected(exc.code, exc.read()):
                key = f"error_{exc.code}"
                self.injected[key] = self.injected.get(key, 0) + 1
        except (OSError, ValueError, http.client.HTTPException) as exc:
            # a cut answer (IncompleteRead, RemoteDisconnected), a timeout: by their names
            status = type(exc).__name__
        seen = self.counts[r.name]
        seen[status] = seen.get(status, 0) + 1


def _is_injected(status: int, body: bytes) -> bool:
    """Whether a refusal is the server's injected fault of ``status`` (its code), not another
    refusal with the same status (``too_many_background_responses`` is a 429 too)."""
    try:
        err = json.loads(body).get("error") or {}
    except (ValueError, AttributeError):
        return False
    return status in ERROR_STATUSES and err.get("code") == ERROR_STATUSES[status][1]


def _stats(
    values: Sequence[int], load_values: Sequence[int], fit: Sequence[tuple[float, int]]
) -> dict[str, Any]:
    """``values``: samples once started; ``load_values``: those within the planned load time;
    ``fit``: ``(t_s, KiB)`` under load after the warm-up, for the slope."""
    slope = slope_per_h([(t, kib / 1024) for t, kib in fit])
    if not values:
        return {"start_mib": None, "peak_mib": None, "end_mib": None, "slope_mib_per_h": None}
    return {
        "start_mib": round(values[0] / 1024, 1),
        "warm_mib": round(fit[0][1] / 1024, 1) if fit else None,
        "load_peak_mib": round(max(load_values or values) / 1024, 1),
        "peak_mib": round(max(values) / 1024, 1),
        "end_mib": round(values[-1] / 1024, 1),
        "slope_mib_per_h": None if slope is None else round(slope, 1),
    }


def run_soak(out: Path, duration_s: float, sample_s: float, seed: int, limits: Limits) -> int:
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
        side = SideMix(server.url)
        harness, harness_err = _load(
            server, side, out, run_id, scenario_path, duration_s, sample_s, store, samples
        )
        server_alive = server.proc.poll() is None
        # Read after the side mix has stopped: every fault drawn is in the counts compared.
        health = server.health() if server_alive else {}
    return _finish(
        out,
        run_id,
        duration_s,
        store,
        samples,
        side,
        health,
        server_alive,
        harness.returncode,
        harness_err,
        limits,
    )


def _load(
    server: ServerProcess,
    side: SideMix,
    out: Path,
    run_id: str,
    scenario_path: Path,
    duration_s: float,
    sample_s: float,
    store: Path,
    samples: list[Sample],
) -> tuple[subprocess.Popen[str], str]:
    """Run the harness beside the side mix, sampling both sides' memory; the side mix is
    stopped when this returns."""
    with side:
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
            # The probe's requests draw faults too, and no turn records them.
            "--no-probe",
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
                try:
                    harness.wait(60)
                except subprocess.TimeoutExpired:
                    harness.kill()
                    harness.wait()
                break
            sample = Sample(
                round(now - t0, 1),
                rss_kib(server.pid),
                rss_kib(harness.pid),
                store_bytes(store),
                *_server_state(server),
            )
            sample.server_file_kib = rss_kib(server.pid, FILE_RSS)
            samples.append(sample)
            if len(samples) % max(1, round(30 / sample_s)) == 1:
                print(
                    f"  t={sample.t_s:6.0f} s  server {_mib(sample.server_kib)}  "
                    f"harness {_mib(sample.harness_kib)}  store {_mib((sample.store_bytes or 0) // 1024)}",
                    flush=True,
                )
            time.sleep(sample_s)
        harness_err = harness.stderr.read() if harness.stderr else ""
    return harness, harness_err


def _finish(
    out: Path,
    run_id: str,
    duration_s: float,
    store: Path,
    samples: list[Sample],
    side: SideMix,
    health: dict[str, Any],
    server_alive: bool,
    harness_exit: int | None,
    harness_err: str,
    limits: Limits,
) -> int:
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
    fit = [s for s in loaded if s.t_s >= warmup_s(duration_s)]
    rss = {
        side_name: _stats(
            [getattr(s, key) for s in started if getattr(s, key)],
            [getattr(s, key) for s in loaded if getattr(s, key)],
            [(s.t_s, getattr(s, key)) for s in fit if getattr(s, key)],
        )
        for side_name, key in (("server", "server_kib"), ("harness", "harness_kib"))
    }
    doc: dict[str, Any] = {
        "run_id": run_id,
        "duration_s": duration_s,
        "warmup_s": warmup_s(duration_s),
        "faults": list(SOAK_FAULTS),
        "rss": rss,
        "store": store_account(store, fit, rss["server"]["slope_mib_per_h"]),
        "rss_samples": [
            [
                s.t_s,
                s.server_kib,
                s.harness_kib,
                s.store_bytes,
                s.prefix_entries,
                s.malloc_free_held,
                s.malloc_in_use,
                s.prefix_table_bytes,
                None if s.server_file_kib is None else s.server_file_kib * 1024,
                s.pymalloc_free_held,
            ]
            for s in samples
        ],
        "transports": errors,
        "side_mix": side.counts,
        "recoveries": recoveries,
        "side_mix_injected": side.injected,
        "faults_injected": health.get("faults_injected", {}),
        "prefix_cache_max_entries": health.get("prefix_cache", {}).get("max_entries"),
        "slow_clients_dropped": health.get("slow_clients_dropped"),
        "harness_exit": harness_exit,
        "harness_stderr": harness_err[-500:],
        "server_alive_at_end": server_alive,
        "partial": summary.get("partial"),
        "rollouts_completed": int((rollouts["status"] == "completed").sum()),
    }
    return judge(out, doc, limits)


def judge(out: Path, doc: dict[str, Any], limits: Limits) -> int:
    """Apply the gate (tools/soak_gate.py) to ``doc``, write soak.json and soak.md in ``out``."""
    if doc.get("prefix_cache_max_entries") is None:
        # a soak.json from before /health gave the bound: the soak's server runs the defaults
        doc["prefix_cache_max_entries"] = load_profiles()[1].prefix_cache_entries
    doc["server_fit"] = soak_gate.server_fit(doc)
    doc["harness_account"] = soak_gate.harness_account(doc)
    doc["fault_accounting"] = soak_gate.fault_rows(doc)
    doc["limits"] = {
        "max_slope_mib_h": limits.max_slope_mib_h,
        "max_unaccounted_share": limits.max_unaccounted_share,
    }
    doc["problems"] = soak_gate.problems(doc, limits)
    doc["not_judged"] = soak_gate.not_judged(doc, limits)
    doc["ok"] = not doc["problems"]
    text = soak_markdown(doc)
    write_index(out, "soak", doc, text)
    print(text)
    return 0 if doc["ok"] else 1


def store_account(store: Path, fit: Sequence[Sample], server_slope: float | None) -> dict[str, Any]:
    """What stored responses (and the engine's prefix cache) account for in the server's
    slope, and what is left over.

    A file-backed store lives on disk; the server's memory holds at most SQLite's page
    cache of it, so the store's share of the RSS slope is the slope of
    ``min(store bytes, page cache)`` over the fitted window.  The engine's LRU prefix
    cache fills up to its bound; its share is the slope of its entries x their size.
    """
    pts = [(s.t_s, s.store_bytes) for s in fit if s.store_bytes is not None]
    disk_slope = slope_per_h([(t, b / 2**20) for t, b in pts])
    share = slope_per_h([(t, min(b, SQLITE_CACHE_BYTES) / 2**20) for t, b in pts])
    sizes = [(s.t_s, prefix_cache_bytes(s.prefix_entries, s.prefix_table_bytes)) for s in fit]
    prefix = slope_per_h([(t, b / 2**20) for t, b in sizes if b is not None])
    held = slope_per_h(
        [(s.t_s, s.malloc_free_held / 2**20) for s in fit if s.malloc_free_held is not None]
    )
    entries = [s.prefix_entries for s in fit if s.prefix_entries is not None]
    rows = store_rows(store) or {}
    return {
        "rows": rows.get("rows"),
        "item_bytes": rows.get("item_bytes"),
        "disk_mib": None if not pts else round(pts[-1][1] / 2**20, 1),
        "disk_slope_mib_per_h": None if disk_slope is None else round(disk_slope, 1),
        "rss_share_mib_per_h": None if share is None else round(share, 1),
        "prefix_cache_entries": entries[-1] if entries else None,
        "prefix_cache_mib_per_h": None if prefix is None else round(prefix, 1),
        "malloc_free_held_mib_per_h": None if held is None else round(held, 1),
        "unaccounted_mib_per_h": (
            None
            if server_slope is None
            else round(server_slope - (share or 0.0) - (prefix or 0.0) - (held or 0.0), 1)
        ),
    }


def _server_state(server: ServerProcess) -> tuple[int | None, ...]:
    """From ``/health``, in :class:`Sample`'s order: the prefix cache's entries, malloc's bytes
    freed but held and in use (mapped one by one included), the prefix cache's table bytes,
    (a None for the file pages) and the bytes Python's arenas hold freed; None for what it
    does not say."""
    try:
        doc = server.health(timeout_s=2)
    except (OSError, ValueError):
        return None, None, None, None, None, None
    cache = doc.get("prefix_cache") or {}
    memory = doc.get("memory") or {}
    in_use = memory.get("in_use_bytes")
    if isinstance(in_use, int):
        in_use += int(memory.get("mapped_bytes") or 0)
    arenas, allocated = memory.get("python_arena_bytes"), memory.get("python_allocated_bytes")
    values = (
        cache.get("entries"),
        memory.get("free_held_bytes"),
        in_use,
        cache.get("table_bytes"),
        None,  # the file pages: from /proc, not /health
        arenas - allocated if isinstance(arenas, int) and isinstance(allocated, int) else None,
    )
    return tuple(v if isinstance(v, int) else None for v in values)


def _mib(kib: int | None) -> str:
    return "   -    " if kib is None else f"{kib / 1024:7.1f} MiB"


def soak_markdown(doc: dict[str, Any]) -> str:
    lines = [f"# Soak {doc['run_id']} ({doc['duration_s']:.0f} s of load)", ""]
    lines += [
        "| process | start MiB | after warm-up MiB | peak under load MiB | end MiB | slope MiB/h |",
        "|---|---|---|---|---|---|",
    ]
    for side in ("server", "harness"):
        r = doc["rss"][side]
        lines.append(
            f"| {side} | {r['start_mib']} | {r.get('warm_mib')} | {r.get('load_peak_mib')} | "
            f"{r['end_mib']} | {r['slope_mib_per_h']} |"
        )
    st = doc["store"]
    lines += [
        "",
        f"Start: the first sample after {STARTUP_S:g} s. Slope: least-squares line through the "
        f"samples under load after the warm-up ({doc['warmup_s']:.0f} s), in MiB per hour; the "
        "harness's last samples include rendering the report.",
        "",
        f"Stored responses: {st['rows']} rows ({_fmt_mib(st['item_bytes'])} of items), "
        f"{st['disk_mib']} MiB on disk growing {st['disk_slope_mib_per_h']} MiB/h. In the "
        f"server's memory they account for at most SQLite's page cache "
        f"({SQLITE_CACHE_BYTES // 1024} KiB): {st['rss_share_mib_per_h']} MiB/h of its slope. "
        f"The engine's prefix cache (LRU, bounded: ~13 MiB full and churning) held "
        f"{st['prefix_cache_entries']} entries, {st['prefix_cache_mib_per_h']} MiB/h. "
        f"Malloc's memory freed but held: {_dash(st.get('malloc_free_held_mib_per_h'))} MiB/h. "
        f"{_unaccounted_words(st['unaccounted_mib_per_h'])}",
    ]
    fit = doc.get("server_fit")
    if fit:
        lines += ["", *server_account_table(fit)]
    ha = doc.get("harness_account")
    if ha:
        lines += [
            "",
            f"Harness: {ha['rollouts']} completed rollouts, each keeping its latency for the "
            f"paired speedup ({soak_gate.ROLLOUT_LATENCY_BYTES} B): "
            f"{ha['rollout_latencies_mib_per_h']} MiB/h; its histograms are allocated when a "
            "transport starts and keep at most 10,000 exact values each (40 KB). "
            f"{_unaccounted_words(ha['unaccounted_mib_per_h'])}",
        ]
    lines += ["", "RSS over time (s: server MiB / harness MiB):", ""]
    samples = doc["rss_samples"]
    step = max(1, len(samples) // 12)
    lines.append(
        ", ".join(
            f"{x[0]:.0f}: {(x[1] or 0) / 1024:.0f}/{(x[2] or 0) / 1024:.0f}"
            for x in samples[::step]
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
    side = "; ".join(
        f"{name} " + ", ".join(f"{k} x{v}" for k, v in sorted(c.items()))
        for name, c in doc.get("side_mix", {}).items()
    )
    lines += ["", f"Side requests (answers by status): {side or '-'}."]
    injected = ", ".join(f"{k} {v}" for k, v in doc["faults_injected"].items()) or "-"
    lines += ["", f"Faults injected by the server: {injected}."]
    lines += [
        "",
        "| fault | injected | recorded by the harness | by the side mix | equal |",
        "|---|---|---|---|---|",
    ]
    for row in doc.get("fault_accounting", []):
        if row["judged"]:
            equal = "yes" if row["injected"] == row["recorded"] else "**no**"
            lines.append(
                f"| {row['fault']} | {row['injected']} | {row['harness']} | "
                f"{row['side_mix']} | {equal} |"
            )
        else:
            lines.append(f"| {row['fault']} | {row['injected']} | {row['note']} | | not an error |")
    verdict = "ok" if doc["ok"] else "FAILED: " + "; ".join(doc["problems"])
    unjudged = doc.get("not_judged") or []
    if unjudged:
        verdict += " (of what was judged); " + "; ".join(unjudged)
    lines.append(f"Verdict: {verdict}.")
    return "\n".join(lines) + "\n"


def _unaccounted_words(rest: float | None) -> str:
    """The remainder of a paragraph's accounting: a negative one is over-explained, not 0."""
    if rest is None or rest >= 0:
        return f"Unaccounted: {_dash(rest)} MiB/h."
    return (
        f"Unaccounted: none, and {-rest:g} MiB/h over-explained (the named parts exceed the slope)."
    )


def server_account_table(fit: dict[str, Any]) -> list[str]:
    """What the judged server slope is made of, one row per thing that grows (Markdown)."""
    slope, rest = fit["slope_mib_per_h"], fit["unaccounted_mib_per_h"]
    share = "" if not slope or rest is None or slope <= 0 else f" ({rest / slope:.0%} of the slope)"
    over = soak_gate.over_explained(fit)
    if over is not None:
        # a negative share would read as "more than all accounted"; it is a row that is too big
        share = f": none; {over}"
    rows = [
        ("RSS slope (judged)", slope),
        (
            "engine prefix cache (its table + 80 B an entry; LRU, ~13 MiB full and churning)",
            fit["prefix_cache_mib_per_h"],
        ),
        (
            f"SQLite page cache (store bytes, at most {SQLITE_CACHE_BYTES // 1024} KiB)",
            fit["page_cache_mib_per_h"],
        ),
        (
            "malloc: freed but held (mallinfo2 fordblks: fragmentation)",
            fit.get("malloc_free_held_mib_per_h"),
        ),
        (
            "Python's arenas: freed but held (pymalloc: a live object keeps its 1 MiB arena)",
            fit.get("pymalloc_free_held_mib_per_h"),
        ),
        (
            "file pages (code paged in, the store's -shm: RssFile + RssShmem)",
            fit.get("file_pages_mib_per_h"),
        ),
        (f"**unaccounted**{share}", rest),
        (
            "beside them, not subtracted: malloc in use (uordblks + hblkhd)",
            fit.get("malloc_in_use_mib_per_h"),
        ),
    ]
    return [
        f"| server after its warm-up (from {fit['from_s']:.0f} s: a quarter of the load, or until "
        "its prefix cache was at its bound, full and its table at its largest, if later) | MiB/h |",
        "|---|---|",
        *(f"| {name} | {_dash(value)} |" for name, value in rows),
    ]


def _dash(value: object) -> str:
    return "-" if value is None else str(value)


def _fmt_mib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**20:.1f} MiB"


def main(argv: Sequence[str] | None = None) -> None:
    parser = UsageParser(
        prog="python -m tools.soak",
        description="Mixed load with injected faults; reports the RSS slope of both sides, what "
        "stored responses account for, and error/recovery counts.",
    )
    parser.add_argument("--out", default="results/soak", help="folder for the run and soak.json")
    parser.add_argument(
        "--duration-s", type=float, default=240.0, help="seconds of load (default 240)"
    )
    parser.add_argument("--sample-s", type=float, default=5.0, help="RSS sampling period")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--max-slope-mib-h",
        type=float,
        default=soak_gate.MAX_SLOPE_MIB_H,
        help="fail if either side's RSS grows faster than this after the warm-up "
        f"(least-squares slope, MiB per hour; default {soak_gate.MAX_SLOPE_MIB_H:g})",
    )
    parser.add_argument(
        "--max-unaccounted",
        type=float,
        default=soak_gate.MAX_UNACCOUNTED_SHARE,
        help="fail if more than this share of the server's slope is unaccounted for "
        f"(default {soak_gate.MAX_UNACCOUNTED_SHARE:g})",
    )
    parser.add_argument(
        "--judge",
        metavar="SOAK_JSON",
        help="judge a stored soak.json again with these limits (writes soak.json and soak.md "
        "next to it) instead of running one",
    )
    args = parser.parse_args(argv)
    if args.duration_s <= 0 or args.sample_s <= 0:
        parser.error("--duration-s and --sample-s must be positive")
    limits = Limits(args.max_slope_mib_h, args.max_unaccounted)
    if args.judge:
        path = Path(args.judge)
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            parser.error(f"--judge {path}: cannot read a soak document: {exc}")
        sys.exit(judge(path.parent, doc, limits))
    sys.exit(run_soak(Path(args.out), args.duration_s, args.sample_s, args.seed, limits))


if __name__ == "__main__":
    main()
