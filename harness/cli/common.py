"""What the subcommand families share: exit codes, shared option values, the help layout."""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys
import textwrap
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from harness.cli.commands import command_help
from harness.wire.credentials import PLACEHOLDER_API_KEY
from harness.wire.errors import UsageError
from harness.wire.exit_codes import UsageParser
from harness.wire.pairs import parse_key_values
from harness.wire.transports import TRANSPORTS, TransportSpec, transport_help

#: the help of every positional scenario argument: a file, or a name `loopbench scenarios` lists
SCENARIO_HELP = "scenario YAML file, or a built-in name (loopbench scenarios), e.g. quickstart"

# "  name  description": a row of a help table (two spaces before the description).
_ROW = re.compile(r"(\s+\S+\s{2,})\S")


class HelpFormatter(argparse.HelpFormatter):
    """argparse's layout, except that indented rows (the transports) keep their own lines.

    Prose is re-flowed as argparse always does; a table row wraps under its description;
    any other indented line (an example command) is kept whole, so it can be copied.
    """

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        out: list[str] = []
        prose: list[str] = []

        def flush() -> None:
            if prose:
                out.append(super(HelpFormatter, self)._fill_text(" ".join(prose), width, indent))
                prose.clear()

        for line in text.splitlines():
            row = _ROW.match(line)
            if row:
                flush()
                hang = indent + " " * len(row.group(1))
                out.append(
                    textwrap.fill(line, width, initial_indent=indent, subsequent_indent=hang)
                )
            elif line[:1].isspace() and line.strip():
                flush()
                out.append(indent + line)
            elif line.strip():
                prose.append(line)
            else:
                flush()
                out.append("")
        flush()
        return "\n".join(out)


class Parser(UsageParser):
    """The table's usage exit (:class:`UsageParser`), the closest choice named, and where the
    docs a help text names are.

    Subparsers inherit the class from their parent (``add_subparsers`` builds them with
    ``type(parent)``), so one top-level instance is enough.
    """

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> tuple[Any, list[str]]:
        # A subcommand's parser is run by its parent through this method; left to argparse,
        # its unknown flags travel up and the top-level parser reports them under its own
        # usage (`usage: loopbench [-h] …`). Refused here, the usage shown is the subcommand's.
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras

    def format_help(self) -> str:
        text = super().format_help()
        if "docs/" not in text:
            return text
        # A pip install has no checkout: say where this installation keeps the docs named.
        return f"{text}\ndocs/NAME.md, named above: {docs_folder()}/NAME.md\n"

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        # A mistyped command (`loopbench rnu`) or option value is most often one letter off:
        # name the closest choice before argparse's full list, where a reader looks first.
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError:
            choices = [str(c) for c in action.choices or ()]
            close = difflib.get_close_matches(str(value), choices, n=1, cutoff=0.6)
            if not close:
                raise
            listed = ", ".join(map(repr, choices))
            raise argparse.ArgumentError(
                action,
                f"invalid choice: {value!r}; did you mean {close[0]!r}? (choose from {listed})",
            ) from None


def add_command(sub: Any, name: str, **kw: Any) -> argparse.ArgumentParser:
    """Subcommand ``name`` of ``sub``: its one-line help from the command table (so the short
    list and its own ``--help`` say the same) and, unless ``formatter_class`` says otherwise,
    the help layout every command shares."""
    kw.setdefault("formatter_class", HelpFormatter)
    parser: argparse.ArgumentParser = sub.add_parser(name, help=command_help(name), **kw)
    return parser


def examples(*lines: str) -> str:
    """The ``examples:`` section of a subcommand's ``--help`` (one command per line)."""
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


def epilog(*sections: str) -> str:
    """``--help`` epilog sections (examples, transports) separated by a blank line."""
    return "\n\n".join(s for s in sections if s)


def docs_folder() -> Path:
    """Where the ``docs/NAME.md`` that ``--help`` texts name are: inside the installed package
    (a wheel ships them as ``harness/docs/``, pyproject.toml's package-dir), else the
    checkout's ``docs/``."""
    package = Path(__file__).resolve().parents[1]
    shipped = package / "docs"
    return shipped if shipped.is_dir() else package.parent / "docs"


def transports_epilog(
    transports: Iterable[TransportSpec] = TRANSPORTS, heading: str = "transports"
) -> str:
    """The ``--help`` epilog naming the transports (from the registry) with what each does."""
    return f"{heading}:\n" + transport_help(transports)


def parse_pairs(items: Sequence[str], option: str, example: str) -> dict[str, str]:
    """Repeated ``KEY=VALUE`` options (``--set``, ``--*-server-set``) as a mapping."""
    return parse_key_values(
        items, lambda item: UsageError(f"{option} {item!r}: expected KEY=VALUE, e.g. {example}")
    )


def scenario_overrides(items: Sequence[str]) -> dict[str, str] | None:
    """``--set KEY=VALUE`` scenario overrides; None when there are none."""
    return parse_pairs(items, "--set", "load.concurrency=4") or None


def api_key(env_name: str | None) -> str:
    """The API key read from ``--api-key-env``'s variable, else the reference server's default."""
    if not env_name:
        return PLACEHOLDER_API_KEY
    key = os.environ.get(env_name, "")
    if not key:
        raise UsageError(f"--api-key-env: environment variable {env_name} is not set or empty")
    return key


def progress_printer(quiet: bool) -> Callable[[str], None]:
    """The progress lines of a multi-run command, on stderr (stdout keeps the results); ``-q``
    silences them."""

    def printer(line: str) -> None:
        if not quiet:
            print(line.rstrip("\n"), file=sys.stderr, flush=True)

    return printer
