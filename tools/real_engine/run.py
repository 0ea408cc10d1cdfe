"""One `make real-engine`: build, serve, probe, measure each tool over its own window, compare.

Every measured window holds only that run's requests: the engine is warmed first, loopbench
runs with ``--no-probe`` (its probe is run once on its own before), the tools run one after
the other, and vLLM's ``/metrics`` is scraped right before and after each.  The difference of
the two scrapes is vLLM's own account of exactly the requests the tool sent.
"""

from __future__ import annotations

import csv
import gzip
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from bench.folders import fresh_folder
from bench.peers import commands as cmd
from bench.peers import offline
from bench.peers.bench import peer_version, read_measured, timed
from tools.real_engine.capture import first_times, post_stream, write_capture
from tools.real_engine.compare import (
    ClientFigures,
    Row,
    compare,
    loopbench_figures,
    missed,
    peer_figures,
    render,
)
from tools.real_engine.engine import (
    MODEL_NAME,
    PLACEMENT,
    Engine,
    EngineError,
    attached,
    build_model,
    serving,
)
from tools.real_engine.engine_metrics import TTFT, Snapshot
from tools.real_engine.wire import decompose, read_segments, wire_doc, wire_summary

#: marks --out as this tool's, so that the next run may empty it
MARKER = ".loopbench-real-engine"
CAPTURES = 3
TRANSPORTS = ("chat", "http", "http-chained", "messages")
PEERS = ("guidellm", "aiperf")
#: vLLM's sampling fields that make each turn the planned length (docs/targets.md)
EXTRA_BODY = {
    "chat": {
        "ignore_eos": True,
        "min_tokens": "{output_tokens}",
        "max_completion_tokens": "{output_tokens}",
    },
    "responses": {"ignore_eos": True, "max_output_tokens": "{output_tokens}"},
    "messages": {"ignore_eos": True, "max_tokens": "{output_tokens}"},
}
#: loopbench's own ``--server-metrics`` interval in a measured window.  vLLM builds its
#: /metrics answer (~300 kB with the fine buckets) in its API server's event loop, 20-60 ms
#: during which no stream moves: a turn whose first token meets a scrape arrives that much
#: late (docs/real-engine.md, "The scrapes").  The comparison needs only vLLM's state before
#: and after the window, which this tool scrapes itself, so loopbench scrapes once at its start
#: and once at its end: an interval longer than any window never meets a measured turn.
SCRAPE_INTERVAL_S = 600.0


#: the capture's niceness (it runs in the clients' session)
WIRE_NICE = 19


@dataclass(frozen=True)
class Options:
    out: Path = Path("results/real-engine")
    engine_venv: Path = Path(".venv-engine")
    peers_venv: Path = Path(".venv-peers")
    transports: tuple[str, ...] = TRANSPORTS
    peers: tuple[str, ...] = PEERS
    requests: int = 60  # per window
    concurrency: int = 2
    output_tokens: int = 128
    prompt_tokens: int = 50
    tool_turns: bool = True  # one more chat window with forced tool calls (no target)
    capture: Path | None = None  # write the two raw streams there (tests/data/vllm)
    engine_url: str | None = None  # measure an engine already running (started as serve_argv)
    placement: str = PLACEMENT  # where vLLM's processes run (engine.PLACEMENTS)
    run_timeout_s: float = 600.0
    scrape_interval_s: float = SCRAPE_INTERVAL_S  # loopbench's --server-metrics-interval
    wire: bool = False  # capture each loopbench window's loopback segments (wire.py, root)
    client_nice: int = 0  # the measuring clients' niceness (loopbench's and the peers')


@dataclass
class Outcome:
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    doc: dict[str, Any] = field(default_factory=dict)
    engine: str = "vLLM"  # what answered: the engine column's head

    @property
    def missed(self) -> list[Row]:
        return missed(self.rows)


def text_scenario(
    opts: Options, *, tool_calls: int = 0, name: str = "real-engine-text"
) -> dict[str, Any]:
    """Single-turn text rollouts (tool_calls 0): the turns the targets are about."""
    return {
        "name": name,
        "description": f"{opts.requests} rollouts x {tool_calls} tool calls against vLLM",
        "model": MODEL_NAME,
        "seed": 38,
        "rollout": {
            "count": opts.requests,
            "system_tokens": 0,
            "tool_schema_tokens": 0,
            "user_prompt_tokens": opts.prompt_tokens,
            "tool_calls": tool_calls,
            "tool_output_tokens": 20,
            "tool_latency_ms": 0,
            "final_answer_tokens": opts.output_tokens,
        },
        "load": {"mode": "closed", "concurrency": opts.concurrency},
    }


def loopbench_argv(
    scenario: Path,
    engine: Engine,
    transports: str,
    tokenizer: Path,
    out: Path,
    run_id: str,
    scrape_interval_s: float = SCRAPE_INTERVAL_S,
) -> list[str]:
    return [
        sys.executable,
        "-m",
        "harness",
        "run",
        str(scenario),
        "--target",
        engine.api,
        "--transports",
        transports,
        "--no-hints",
        "--no-probe",
        "--tokenizer",
        str(tokenizer),
        "--extra-body",
        json.dumps(EXTRA_BODY),
        "--server-metrics",
        engine.metrics_url,
        "--server-metrics-interval",
        f"{scrape_interval_s:g}",
        "--out",
        str(out),
        "--run-id",
        run_id,
        "-q",
    ]


def niced(argv: list[str], nice: int) -> list[str]:
    """``argv`` run at niceness ``nice`` (coreutils' ``nice``; 0: as it is).  A negative one
    needs CAP_SYS_NICE; without it ``nice`` says so on the log and runs it unchanged."""
    return argv if nice == 0 else ["nice", "-n", str(nice), *argv]


def settled(engine: Engine, before: Snapshot, requests: int) -> Snapshot:
    """The scrape after a window, once vLLM has counted every request of it (a request is
    counted when its last output is processed, which can trail the client's last read)."""
    after = engine.scrape()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        done = after.minus(before).histograms.get(TTFT)
        if done is not None and done.count >= requests:
            break
        time.sleep(0.2)
        after = engine.scrape()
    return after


def _read_turns(path: Path) -> list[dict[str, str]]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def machine(t0: float, load0: tuple[float, float, float]) -> dict[str, Any]:
    """How long the run took and how busy the machine was (the JSON's and the footer's)."""
    return {
        "seconds": round(time.perf_counter() - t0, 1),
        "load_average_at_start": [round(x, 2) for x in load0],
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "cpu_count": os.cpu_count(),
    }


def footer(doc: dict[str, Any], out: Path) -> str:
    """The line after the table: the time it took, the load, where the files are."""
    return (
        f"{doc['seconds']} s; load average {doc['load_average_at_start']} at the start, "
        f"{doc['load_average']} at the end, {doc['cpu_count']} CPUs; results in {out}"
    )


def write_outcome(out: Path, name: str, doc: dict[str, Any], table: str) -> None:
    """The run's figures as ``name`` (JSON) and its table as table.txt, both in ``out``."""
    (out / name).write_text(json.dumps(doc, indent=1) + "\n")
    (out / "table.txt").write_text(table + "\n")


def print_outcome(table: str, doc: dict[str, Any], out: Path, notes: Sequence[str]) -> None:
    """The table, then :func:`footer` and the notes, as the console shows a finished run."""
    print()
    print(table)
    print(f"\n{footer(doc, out)}")
    for note in notes:
        print(f"note: {note}")


def fresh_out(out: Path) -> None:
    """``out`` emptied for one run's files (only a folder this tool made, or an empty one)."""
    fresh_folder(out, marker=MARKER, option="--out", made_by="tools.real_engine", error=EngineError)


@dataclass(frozen=True)
class Prepared:
    hf_home: Path
    model: Path
    tokenizer: Path
    scenarios: Path
    text: Path  # the text window's scenario


def prepare(opts: Options) -> Prepared:
    """``opts.out`` emptied, the model built and the text window's scenario written: where
    the side-by-side comparisons (delivery, scrape_cost) start."""
    fresh_out(opts.out)
    hf_home = opts.out / "hf"
    (opts.out / "runs").mkdir()
    model = build_model(opts.engine_venv, opts.out / "model", hf_home, opts.out / "build.log")
    scenarios = opts.out / "scenarios"
    scenarios.mkdir()
    text = scenarios / "text.yaml"
    text.write_text(yaml.safe_dump(text_scenario(opts), sort_keys=False))
    return Prepared(hf_home, model, model / "tokenizer.json", scenarios, text)


def warm_up(
    opts: Options, engine: Engine, transports: str, tokenizer: Path, scenarios: Path
) -> None:
    """A few rollouts outside every window: the engine's first requests pay one-off costs."""
    warm = scenarios / "warmup.yaml"
    doc = text_scenario(opts)
    warm.write_text(
        yaml.safe_dump({**doc, "rollout": {**doc["rollout"], "count": 4}}, sort_keys=False)
    )
    timed(
        niced(
            loopbench_argv(warm, engine, transports, tokenizer, opts.out / "runs", "warmup"),
            opts.client_nice,
        ),
        env=dict(os.environ),
        log=opts.out / "warmup.log",
        timeout_s=opts.run_timeout_s,
    )


def run(opts: Options, say: Callable[[str], None] = print) -> Outcome:
    outcome = Outcome()
    out = opts.out
    fresh_out(out)
    hf_home = out / "hf"
    (out / "runs").mkdir()
    t0 = time.perf_counter()
    load0 = os.getloadavg()
    say("building the tiny Llama (random weights, local BPE tokenizer) ...")
    model = build_model(opts.engine_venv, out / "model", hf_home, out / "build.log")
    tokenizer = model / "tokenizer.json"
    if opts.engine_url:
        running = attached(opts.engine_url)
    else:
        say(f"starting vLLM (log {out / 'vllm.log'}) ...")
        running = serving(
            opts.engine_venv, model, hf_home, out / "vllm.log", placement=opts.placement
        )
    with running as engine:
        outcome.engine = engine.name
        say(f"{engine.name} answers at {engine.api} after {time.perf_counter() - t0:.0f} s")
        if engine.placement:
            outcome.notes.append(engine.placement)
            say(engine.placement)
        probe = subprocess.run(
            [
                sys.executable,
                "-m",
                "harness",
                "probe",
                "--target",
                engine.api,
                "--model",
                MODEL_NAME,
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        (out / "probe.txt").write_text(probe.stdout + probe.stderr)
        outcome.notes.append(f"loopbench probe: exit {probe.returncode} ({out / 'probe.txt'})")
        say(outcome.notes[-1])
        scenarios = out / "scenarios"
        scenarios.mkdir()
        text = scenarios / "text.yaml"
        text.write_text(yaml.safe_dump(text_scenario(opts), sort_keys=False))
        warm_up(opts, engine, ",".join(opts.transports), tokenizer, scenarios)
        windows: list[tuple[ClientFigures | None, Snapshot, str]] = []
        for transport in opts.transports:
            windows.append(
                _loopbench_window(opts, engine, text, transport, tokenizer, say, checked=True)
            )
        if opts.tool_turns:
            tools = scenarios / "tool-calls.yaml"
            tools.write_text(
                yaml.safe_dump(
                    text_scenario(opts, tool_calls=2, name="real-engine-tools"), sort_keys=False
                )
            )
            windows.append(
                _loopbench_window(
                    opts,
                    engine,
                    tools,
                    "chat",
                    tokenizer,
                    say,
                    checked=False,
                    first_event_checked=True,
                    label="chat+tools",
                )
            )
        if opts.peers:
            windows.extend(_peer_windows(opts, engine, hf_home, say))
        for figures, delta, note in windows:
            if note:
                outcome.notes.append(note)
            if figures is not None:
                outcome.rows.extend(compare(figures, delta))
            elif note.startswith("loopbench"):
                # a loopbench window with nothing to compare is a miss, not a pass by silence
                label = note.split(":", 1)[0].removeprefix("loopbench over ")
                outcome.rows.append(
                    Row("loopbench", label, "run", "-", None, None, None, "turns measured", False)
                )
        if opts.capture is not None:
            outcome.doc["captures"] = capture_streams(engine, opts.capture, say)
    outcome.doc.update(
        engine=outcome.engine,
        **machine(t0, load0),
        rows=[{**r.__dict__, "diff": r.diff} for r in outcome.rows],
        notes=outcome.notes,
    )
    write_outcome(out, "real-engine.json", outcome.doc, render(outcome.rows, outcome.engine))
    return outcome


def window_id(label: str) -> str:
    """The run id (and folder name under ``runs/``) of loopbench's window ``label``."""
    return f"loopbench-{label.replace('+', '-')}"


def _loopbench_window(
    opts: Options,
    engine: Engine,
    scenario: Path,
    transport: str,
    tokenizer: Path,
    say: Callable[[str], None],
    *,
    checked: bool,
    first_event_checked: bool = False,
    label: str | None = None,
) -> tuple[ClientFigures | None, Snapshot, str]:
    label = label or transport
    run_id = window_id(label)
    runs = opts.out / "runs"
    argv = loopbench_argv(
        scenario, engine, transport, tokenizer, runs, run_id, opts.scrape_interval_s
    )
    say(f"loopbench over {label}: {opts.requests} rollouts, {opts.concurrency} at a time ...")
    before = engine.scrape()
    wire_file = runs / f"{run_id}.wire.jsonl"
    with wire_capture(engine, wire_file) if opts.wire else nullcontext():
        rc, wall, _ = timed(
            niced(argv, opts.client_nice),
            env=dict(os.environ),
            log=runs / f"{run_id}.log",
            timeout_s=opts.run_timeout_s,
        )
    folder = runs / run_id
    turns = _read_turns(folder / "turns.csv.gz") if (folder / "turns.csv.gz").exists() else []
    after = settled(engine, before, len(turns))
    delta = after.minus(before)
    note = ""
    if opts.wire and wire_file.exists():
        with wire_file.open(encoding="utf-8") as f:
            split = decompose(turns, read_segments(f))
        (runs / f"{run_id}.wire.json").write_text(json.dumps(wire_doc(split, delta), indent=1))
        say(f"  wire: {wire_summary(split, delta)}")
    if rc != 0 or not turns:
        note = f"loopbench over {label}: exit {rc} ({runs / f'{run_id}.log'})"
        say(note)
        if not turns:
            return None, delta, note
    summary = json.loads((folder / "summary.json").read_text())
    say(f"  {len(turns)} turns in {wall:.1f} s")
    figures = loopbench_figures(
        summary, transport, turns, checked=checked, first_event_checked=first_event_checked
    )
    figures.label = label
    return figures, delta, note


@contextmanager
def wire_capture(engine: Engine, out: Path) -> Iterator[None]:
    """``python -m tools.real_engine.wire`` on the engine's port for the block's duration."""
    port = urlsplit(engine.base_url).port or 80
    log = out.with_suffix(".log")
    with log.open("w") as err:
        # at nice 19: its reads may come late (the stamps are the kernel's), the client's may not
        argv = [sys.executable, "-m", "tools.real_engine.wire", "--port", str(port)]
        proc = subprocess.Popen(
            niced([*argv, "--out", str(out)], WIRE_NICE),
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stderr is not None
        line = proc.stderr.readline()  # READY, or the error it stopped with
        err.write(line)
        try:
            yield
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                _, rest = proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, rest = proc.communicate()
            err.write(rest)


def _peer_windows(
    opts: Options, engine: Engine, hf_home: Path, say: Callable[[str], None]
) -> list[tuple[ClientFigures | None, Snapshot, str]]:
    """guidellm and aiperf on the same workload: single-turn chat, the same prompt size,
    output length and concurrency, driven as bench.peers drives them (offline)."""
    found: list[tuple[ClientFigures | None, Snapshot, str]] = []
    env = offline.offline_env(hf_home)
    tags = offline.TagCounter()
    load = cmd.Load(streams=opts.concurrency, requests=opts.requests, warmup=0)
    for tool in opts.peers:
        exe = opts.peers_venv / "bin" / tool
        if not exe.exists() or peer_version(opts.peers_venv, tool) is None:
            note = f"{tool}: not installed in {opts.peers_venv} (make bench-peers installs it)"
            say(note)
            found.append((None, Snapshot(), note))
            continue
        folder = opts.out / "runs" / tool
        folder.mkdir(parents=True)
        numbers = tags.take(load.total)
        if tool == "guidellm":
            data = offline.write_lines(
                folder / "prompts.jsonl", offline.guidellm_rows(numbers, opts.output_tokens)
            )
            output = folder / "benchmarks.json"
            scenario = folder / "scenario.json"
            doc = cmd.guidellm_scenario(
                engine.base_url,
                load,
                data,
                output,
                model=MODEL_NAME,
                tokenizer=MODEL_NAME,
                max_tokens=opts.output_tokens,
            )
            scenario.write_text(json.dumps(doc, indent=1))
            argv = cmd.guidellm_argv(exe, scenario)
        else:
            data = offline.write_lines(
                folder / "prompts.jsonl", offline.aiperf_rows(numbers, opts.output_tokens)
            )
            output = folder / "artifacts" / "profile_export.jsonl"
            argv = cmd.aiperf_argv(
                exe,
                engine.base_url,
                load,
                data,
                folder / "artifacts",
                model=MODEL_NAME,
                tokenizer=MODEL_NAME,
                extra_inputs={"ignore_eos": True, "min_tokens": opts.output_tokens},
            )
        (folder / "command.txt").write_text(" ".join(argv) + "\n")
        say(f"{tool}: {opts.requests} requests, {opts.concurrency} at a time ...")
        before = engine.scrape()
        rc, wall, _ = timed(
            niced(argv, opts.client_nice),
            env=env,
            log=folder / "output.log",
            timeout_s=opts.run_timeout_s,
        )
        measured = []
        note = ""
        if rc == 0 and output.exists():
            measured = [m for m in read_measured(tool, output, "chat", 0) if m.ok]
        else:
            note = f"{tool}: exit {rc}, no {output.name} ({folder / 'output.log'})"
            say(note)
        after = settled(engine, before, len(measured))
        delta = after.minus(before)
        if not measured:
            found.append((None, delta, note or f"{tool}: no request measured"))
            continue
        say(f"  {len(measured)} requests in {wall:.1f} s")
        figures = peer_figures(
            tool,
            "chat",
            [m.ttft_ms for m in measured if m.ttft_ms is not None],
            [1000.0 / m.decode_tps for m in measured if m.decode_tps],
            [m.input_tokens for m in measured],
            [m.output_tokens for m in measured],
        )
        found.append((figures, delta, note))
    return found


def capture_streams(engine: Engine, folder: Path, say: Callable[[str], None]) -> dict[str, Any]:
    """A forced tool call and a text answer over Chat Completions, each alone in its window."""
    base = {
        "model": MODEL_NAME,
        "messages": [{"role": "user", "content": "read the failing test and fix the module"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    tool = {
        **base,
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "read_file",
                    "description": "Read a file of the repository",
                    "parameters": {
                        "type": "object",
                        "properties": {"path": {"type": "string"}},
                        "required": ["path"],
                    },
                },
            }
        ],
        "tool_choice": "required",
        "max_completion_tokens": 200,
    }
    text = {**base, "ignore_eos": True, "min_tokens": 32, "max_completion_tokens": 32}
    found: dict[str, Any] = {}
    # A few of each: on a shared machine one stream may come in a single read (the server's
    # process starved), and the helper reading them wants to see the pieces too.
    for attempt in range(1, CAPTURES + 1):
        for kind, body in (("chat-forced-tool-call", tool), ("chat-text", text)):
            name = f"{kind}-{attempt}"
            before = engine.scrape()
            reads = post_stream(engine.base_url, "/v1/chat/completions", body)
            after = settled(engine, before, 1)
            ttft = after.minus(before).histograms.get(TTFT)
            engine_ttft = None if ttft is None or ttft.count != 1 else ttft.total * 1000
            doc = write_capture(folder, name, body, reads, engine_ttft)
            times = first_times(doc)
            found[name] = {"engine_ttft_ms": engine_ttft, "reads": len(reads), **times}
            say(f"captured {name}: vLLM TTFT {engine_ttft} ms, client: {times}")
    return found
