"""``loopbench validate``, ``schema``, ``import``, ``trace show``, ``scenarios`` and ``init``:
writing, checking and looking into scenario and trace files."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from harness.cli.common import add_command, epilog, examples, transports_epilog
from harness.cli.run_args import check_server_profiles
from harness.wire.errors import LoopbenchError, ScenarioError, UsageError
from harness.wire.exit_codes import ExitCode
from harness.workload.builtin import builtin_hint, builtin_scenarios
from harness.workload.importers import IMPORTERS, import_sessions
from harness.workload.rollout import generate_rollouts
from harness.workload.scenario import load_scenario, scenario_json_schema
from harness.workload.starter import starter_scenario
from harness.workload.trace import read_trace, read_trace_header
from harness.workload.trace_summary import trace_summary_lines


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

    p = add_command(
        sub,
        "trace",
        description="Look into trace files (loopbench record, loopbench import, or written "
        "by hand): see docs/traces.md for the format.",
        epilog=examples(
            "loopbench trace show trace.jsonl",
            "loopbench validate trace.jsonl    # the built-in scenario around it",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    show = verbs.add_parser(
        "show",
        help="print what a trace holds: per rollout its turns, tool calls, tokens, tool time, "
        "warm-up, recoveries and sub-agents, and the totals",
        description="Print what each trace holds: per rollout its turns, tool calls, output "
        "and reasoning tokens, input tokens of its first and last turn, the client's tool "
        "time, whether a warm-up prepared its connection, the turns answered only after a "
        "recovery (with their failed requests), its sub-agents, and notes (truncated, "
        "follows, forked_from, overlapped_with, ended_on_failure). A malformed trace is "
        "reported with its file, line and field (exit 4).",
        epilog=examples(
            "loopbench trace show trace.jsonl",
            "loopbench run trace.jsonl --transports http,ws   # replay it",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    show.add_argument("files", nargs="+", metavar="TRACE", help="trace file(s) (JSON Lines)")
    show.set_defaults(func=cmd_trace_show)

    lst = add_command(
        sub,
        "scenarios",
        description="List the scenarios shipped inside loopbench. Run one by name from any\n"
        "folder; start your own from one with --path, or from `loopbench init NAME`.",
        epilog=examples(
            "loopbench scenarios",
            "loopbench run quickstart",
            "loopbench scenarios --path tiny    # copy it to start your own",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    lst.add_argument("--path", metavar="NAME", help="print the file of built-in NAME and exit")
    lst.set_defaults(func=cmd_scenarios)

    init = add_command(
        sub,
        "init",
        description="Write NAME.yaml, a starter scenario with a comment on every field; it\n"
        "validates and runs as written. An existing file is never overwritten (exit 4).",
        epilog=examples(
            "loopbench init my-agent",
            "loopbench validate my-agent.yaml",
            "loopbench run my-agent.yaml",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    init.add_argument("name", help="scenario name (lowercase letters, digits, '-'), or a path")
    init.set_defaults(func=cmd_init)


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
    return ExitCode.USAGE if failed else ExitCode.OK


def cmd_schema(args: argparse.Namespace) -> int:
    print(json.dumps(scenario_json_schema(), indent=2))
    return ExitCode.OK


def cmd_import(args: argparse.Namespace) -> int:
    report = import_sessions(args.format, args.paths, args.output, args.block_size)
    print(report)
    return ExitCode.OK


def cmd_trace_show(args: argparse.Namespace) -> int:
    failed = 0
    for i, path in enumerate(args.files):
        try:
            rollouts = read_trace(path)
        except ScenarioError as exc:
            failed += 1
            print(str(exc), file=sys.stderr)
            continue
        if i:
            print()
        print("\n".join(trace_summary_lines(path, rollouts, read_trace_header(path))))
    return ExitCode.USAGE if failed else ExitCode.OK


def cmd_scenarios(args: argparse.Namespace) -> int:
    found = builtin_scenarios()
    if args.path:
        path = found.get(args.path.removesuffix(".yaml"))
        if path is None:
            raise UsageError(
                f"--path: no built-in scenario named {args.path!r}{builtin_hint(args.path)}; "
                f"built-ins: {', '.join(found)}"
            )
        print(path)
        return ExitCode.OK
    width = max(len(name) for name in found)
    for name, path in found.items():
        print(f"{name:<{width}}  {load_scenario(path).description}")
    return ExitCode.OK


_NAME = re.compile(r"^[a-z0-9-]+$")


def cmd_init(args: argparse.Namespace) -> int:
    path = Path(args.name)
    if path.suffix not in (".yaml", ".yml"):
        path = path.with_name(path.name + ".yaml")
    name = path.stem
    if not _NAME.match(name):
        raise UsageError(
            f"init: expected a scenario name of lowercase letters, digits and '-', got {name!r}"
        )
    try:
        # "x": exclusive creation, so an existing file is never overwritten, even by a race.
        with path.open("x", encoding="utf-8") as fh:
            fh.write(starter_scenario(name))
    except FileExistsError:
        raise UsageError(f"{path}: already exists; not overwritten") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot write: {exc.strerror}") from None
    print(
        f"wrote {path}; check it with `loopbench validate {path}`, run it with `loopbench run {path}`"
    )
    return ExitCode.OK
