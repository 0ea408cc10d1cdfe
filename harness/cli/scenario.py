"""``loopbench validate``, ``schema``, ``scenarios``, ``init`` and ``import``: finding, writing
and checking scenario files."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from harness.cli.common import EXIT_OK, EXIT_USAGE, HelpFormatter, transports_epilog
from harness.wire.errors import LoopbenchError
from harness.workload.builtin import builtin_scenarios
from harness.workload.importers import import_sessions
from harness.workload.rollout import load_scenario_trace
from harness.workload.scenario import load_scenario, scenario_json_schema
from harness.workload.starter import starter_scenario


def add_parser(sub: Any) -> None:
    val = sub.add_parser(
        "validate",
        help="check scenario files and print precise errors",
        epilog=transports_epilog(),
        formatter_class=HelpFormatter,
    )
    val.add_argument("files", nargs="+")
    val.set_defaults(func=cmd_validate)

    schema = sub.add_parser("schema", help="print the scenario JSON Schema (for editor completion)")
    schema.set_defaults(func=cmd_schema)

    lst = sub.add_parser(
        "scenarios",
        help="list the built-in scenarios with their descriptions",
        description="List the scenarios shipped inside loopbench. Run one by name from any "
        "folder (`loopbench run quickstart`); copy one with `loopbench scenarios --path NAME`.",
        epilog="examples:\n  loopbench scenarios\n  cp $(loopbench scenarios --path tiny) mine.yaml",
        formatter_class=HelpFormatter,
    )
    lst.add_argument("--path", metavar="NAME", help="print the file of built-in NAME and exit")
    lst.set_defaults(func=cmd_scenarios)

    init = sub.add_parser(
        "init",
        help="write NAME.yaml, a commented starter scenario",
        description="Write NAME.yaml, a starter scenario with a comment on every field; it "
        "validates and runs as written. An existing file is never overwritten.",
        epilog="examples:\n  loopbench init my-agent\n  loopbench run my-agent.yaml",
        formatter_class=HelpFormatter,
    )
    init.add_argument("name", help="scenario name (lowercase letters, digits, '-'), or a path")
    init.set_defaults(func=cmd_init)

    imp = sub.add_parser(
        "import",
        help="turn recorded agent sessions into a replayable trace (docs/traces.md)",
        description="Read recorded sessions and write a loopbench JSONL trace that a scenario "
        "replays with `rollout.trace: FILE`.",
    )
    imp.add_argument("format", choices=["codex"], help="session format: codex (Codex CLI rollouts)")
    imp.add_argument(
        "paths",
        nargs="+",
        help="session files, or folders searched for *.jsonl (e.g. ~/.codex/sessions)",
    )
    imp.add_argument(
        "-o",
        "--output",
        required=True,
        help="trace file to write, e.g. traces/NAME.jsonl next to the scenario",
    )
    imp.set_defaults(func=cmd_import)


def cmd_validate(args: argparse.Namespace) -> int:
    failed = 0
    for path in args.files:
        try:
            # A replayed trace is part of the scenario: check it resolves and parses too.
            load_scenario_trace(load_scenario(path))
            print(f"{path}: ok")
        except LoopbenchError as exc:
            failed += 1
            print(str(exc), file=sys.stderr)
    return EXIT_USAGE if failed else EXIT_OK


def cmd_schema(args: argparse.Namespace) -> int:
    print(json.dumps(scenario_json_schema(), indent=2))
    return EXIT_OK


def cmd_scenarios(args: argparse.Namespace) -> int:
    found = builtin_scenarios()
    if args.path:
        path = found.get(args.path.removesuffix(".yaml"))
        if path is None:
            print(
                f"error: --path: no built-in scenario named {args.path!r}; "
                f"built-ins: {', '.join(found)}",
                file=sys.stderr,
            )
            return EXIT_USAGE
        print(path)
        return EXIT_OK
    width = max(len(name) for name in found)
    for name, path in found.items():
        print(f"{name:<{width}}  {load_scenario(path).description}")
    return EXIT_OK


_NAME = re.compile(r"^[a-z0-9-]+$")


def cmd_init(args: argparse.Namespace) -> int:
    path = Path(args.name)
    if path.suffix not in (".yaml", ".yml"):
        path = path.with_name(path.name + ".yaml")
    name = path.stem
    if not _NAME.match(name):
        print(
            f"error: init: expected a scenario name of lowercase letters, digits and '-', "
            f"got {name!r}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        # "x": exclusive creation, so an existing file is never overwritten, even by a race.
        with path.open("x", encoding="utf-8") as fh:
            fh.write(starter_scenario(name))
    except FileExistsError:
        print(f"error: {path}: already exists; not overwritten", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        print(f"error: {path}: cannot write: {exc.strerror}", file=sys.stderr)
        return EXIT_USAGE
    print(
        f"wrote {path}; check it with `loopbench validate {path}`, run it with `loopbench run {path}`"
    )
    return EXIT_OK


def cmd_import(args: argparse.Namespace) -> int:
    report = import_sessions(args.format, args.paths, args.output)
    print(report)
    return EXIT_OK
