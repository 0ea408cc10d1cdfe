"""``loopbench validate``, ``schema`` and ``import``: writing and checking scenario files."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from harness.cli.common import (
    EXIT_OK,
    EXIT_USAGE,
    add_command,
    epilog,
    examples,
    transports_epilog,
)
from harness.cli.run_args import check_server_profiles
from harness.wire.errors import LoopbenchError
from harness.workload.importers import IMPORTERS, import_sessions
from harness.workload.rollout import generate_rollouts
from harness.workload.scenario import load_scenario, scenario_json_schema


def add_parser(sub: Any) -> None:
    val = add_command(
        sub,
        "validate",
        description="Check scenario files (and the traces they replay) without running them: "
        "each problem is one line naming the file, the field, what was expected and what came. "
        "Exit 0 when every file is valid, 4 otherwise.",
        epilog=epilog(
            examples(
                "loopbench validate quickstart",
                "loopbench validate my-agent.yaml examples/ci/scenario.yaml",
                "loopbench validate traces/mine.jsonl   # a trace: its built-in scenario",
            ),
            transports_epilog(),
        ),
    )
    val.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        help="scenario YAML files or built-in names (loopbench scenarios), or trace files "
        "(*.jsonl, docs/traces.md)",
    )
    val.set_defaults(func=cmd_validate)

    schema = add_command(
        sub,
        "schema",
        description="Print the JSON Schema of scenario files to stdout, for editor completion "
        "and hover help (e.g. the YAML language server's `# yaml-language-server: $schema=` "
        "comment).",
        epilog=examples(
            "loopbench schema > scenario.schema.json",
        ),
    )
    schema.set_defaults(func=cmd_schema)

    imp = add_command(
        sub,
        "import",
        description="Read recorded sessions (Codex CLI, OpenTelemetry GenAI spans) or a public "
        "request trace (Mooncake, Azure LLM inference) and write a loopbench JSONL trace that a scenario replays with "
        "`rollout.trace: FILE`.",
        epilog=examples(
            "loopbench import codex ~/.codex/sessions -o traces/mine.jsonl",
            "loopbench import codex rollout-1.jsonl rollout-2.jsonl -o traces/bugfix.jsonl",
            "loopbench import mooncake toolagent_trace.jsonl -o traces/toolagent.jsonl",
            "loopbench import azure AzureLLMInferenceTrace_conv.csv -o traces/azure-conv.jsonl",
            "loopbench import otel spans.json -o traces/agent.jsonl",
        ),
    )
    imp.add_argument(
        "format",
        choices=list(IMPORTERS),
        help="source format: "
        + "; ".join(f"{name} ({spec.description})" for name, spec in IMPORTERS.items()),
    )
    imp.add_argument(
        "paths",
        nargs="+",
        help="source files, or folders searched for the format's files (*.jsonl; *.csv for "
        "azure; *.json and *.jsonl for otel), e.g. ~/.codex/sessions",
    )
    imp.add_argument(
        "-o",
        "--output",
        required=True,
        help="trace file to write, e.g. traces/NAME.jsonl next to the scenario",
    )
    imp.add_argument(
        "--block-size",
        type=int,
        default=None,
        metavar="TOKENS",
        help="mooncake: tokens per hash id (default 512, the Mooncake traces' KV-cache block)",
    )
    imp.set_defaults(func=cmd_import)


def cmd_validate(args: argparse.Namespace) -> int:
    failed = 0
    for path in args.files:
        try:
            # A replayed trace is part of the scenario: check it resolves and parses too;
            # generating the rollouts checks that they fit the context window.
            scenario = load_scenario(path)
            check_server_profiles(scenario, path)
            generate_rollouts(scenario)
            print(f"{path}: ok")
        except LoopbenchError as exc:
            failed += 1
            print(str(exc), file=sys.stderr)
    return EXIT_USAGE if failed else EXIT_OK


def cmd_schema(args: argparse.Namespace) -> int:
    print(json.dumps(scenario_json_schema(), indent=2))
    return EXIT_OK


def cmd_import(args: argparse.Namespace) -> int:
    report = import_sessions(args.format, args.paths, args.output, args.block_size)
    print(report)
    return EXIT_OK
