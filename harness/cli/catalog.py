"""``loopbench scenarios`` and ``loopbench init``: the built-in scenarios, and a starter file."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from harness.cli.common import EXIT_OK, add_command, examples
from harness.wire.errors import UsageError
from harness.workload.builtin import builtin_hint, builtin_scenarios
from harness.workload.scenario import load_scenario
from harness.workload.starter import starter_scenario


def add_parser(sub: Any) -> None:
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
    return EXIT_OK
