"""The command line of each tool for one run (pure: builds argument lists and documents).

Every tool gets the same workload: single-turn Chat Completions requests, streamed, ~50
input tokens, 200 output tokens, ``streams`` requests in flight (closed loop), ``warmup +
requests`` of them; the first ``warmup`` to start are left out of the figures
(:func:`bench.peers.readers.without_warmup`; loopbench's own ``warmup_rollouts``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.peers.offline import PROMPT_TOKENS, TOKENIZER_NAME

#: the model name the peers send (the reference server answers any name)
MODEL = "loopbench-sim"
OUTPUT_TOKENS = 200


@dataclass(frozen=True, slots=True)
class Load:
    streams: int
    requests: int  # measured
    warmup: int  # left out of the figures

    @property
    def total(self) -> int:
        return self.requests + self.warmup


def guidellm_scenario(
    base_url: str,
    load: Load,
    data: Path,
    out_json: Path,
    *,
    model: str = MODEL,
    tokenizer: str = TOKENIZER_NAME,
    max_tokens: int = OUTPUT_TOKENS,
) -> dict[str, Any]:
    """A guidellm 0.8.1 scenario file (``guidellm run -c FILE``).  With the data's
    ``output_tokens_count`` guidellm sends ``max_tokens`` and ``ignore_eos: true`` itself, so
    a real engine answers the planned length too (tools/real_engine)."""
    backend: dict[str, Any] = {
        "kind": "openai_http",
        "target": base_url,
        "model": model,
        "request_format": "/v1/chat/completions",
        "max_tokens": max_tokens,
    }
    return {
        "metadata": {"name": f"loopbench-peers-{load.streams}"},
        "spec": {
            "backend": backend,
            # No warm-up phase of its own: the runner leaves out the first requests of
            # every tool alike (readers.without_warmup).
            "profile": {"kind": "concurrent", "streams": [load.streams]},
            "data": [{"kind": "json_file", "path": str(data)}],
            "tokenizer": {"kind": "huggingface_auto", "model": tokenizer},
            "constraints": [{"kind": "max_requests", "count": load.total}],
            "outputs": [{"kind": "json", "path": str(out_json)}],
        },
    }


def guidellm_argv(exe: Path, scenario: Path) -> list[str]:
    return [str(exe), "run", "-c", str(scenario), "--disable-progress"]


def aiperf_argv(
    exe: Path,
    base_url: str,
    load: Load,
    data: Path,
    out_dir: Path,
    *,
    model: str = MODEL,
    tokenizer: str = TOKENIZER_NAME,
    extra_inputs: Mapping[str, Any] | None = None,
) -> list[str]:
    """``aiperf profile`` (0.13.0) over the single-turn dataset ``data``; ``extra_inputs`` are
    body fields added to every request (``--extra-inputs NAME:VALUE``)."""
    extra: list[str] = []
    for name, value in (extra_inputs or {}).items():
        extra += ["--extra-inputs", f"{name}:{json.dumps(value)}"]
    return [
        str(exe),
        "profile",
        "--model",
        model,
        "--url",
        base_url,
        "--endpoint-type",
        "chat",
        "--streaming",
        "--concurrency",
        str(load.streams),
        "--request-count",
        str(load.total),
        "--input-file",
        str(data),
        "--custom-dataset-type",
        "single_turn",
        "--dataset-sampling-strategy",
        "sequential",
        "--tokenizer",
        tokenizer,
        # Token counts from the server's usage, as guidellm and loopbench count them.
        "--use-server-token-count",
        "--artifact-dir",
        str(out_dir),
        "--export-level",
        "records",
        "--ui-type",
        "none",
        # Nothing else on the server's CPU during the run; no GPU to look for.
        "--no-server-metrics",
        "--no-gpu-telemetry",
        "--random-seed",
        "1",
        *extra,
    ]


def loopbench_scenario(load: Load) -> dict[str, Any]:
    """A single-turn scenario: one 200-token answer per rollout, no tool calls."""
    return {
        "name": f"peers-single-turn-{load.streams}",
        "seed": 20,
        "rollout": {
            "count": load.total,
            "system_tokens": 0,
            "tool_schema_tokens": 0,
            "user_prompt_tokens": PROMPT_TOKENS,
            "tool_calls": 0,
            "final_answer_tokens": OUTPUT_TOKENS,
        },
        "load": {"mode": "closed", "concurrency": load.streams, "warmup_rollouts": load.warmup},
    }


def loopbench_argv(
    python: str, scenario: Path, base_url: str, transport: str, out_dir: Path, run_id: str
) -> list[str]:
    return [
        python,
        "-m",
        "harness",
        "run",
        str(scenario),
        "--target",
        base_url + "/v1",
        "--transports",
        transport,
        "--out",
        str(out_dir),
        "--run-id",
        run_id,
        "--no-probe",
        # the peers write their JSON and no plots: loopbench's client CPU leaves its plots out
        "--no-report",
        "-q",
    ]
