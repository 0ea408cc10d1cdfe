"""The command table (harness/cli/commands.py) and the parser built only for the command used.

``loopbench --help`` lists every command from the table without importing the command
modules; a command's own parser must come out exactly as the full parser builds it.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from harness.cli.commands import COMMANDS, command_help, module_of
from harness.cli.main import build_parser

NAMES = [c.name for c in COMMANDS]


def _choices(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:  # type: ignore[type-arg]
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def _listed(parser: argparse.ArgumentParser) -> list[tuple[str, str | None]]:
    return [(a.dest, a.help) for a in _choices(parser)._choices_actions]


def test_the_table_is_what_the_modules_register_in_full() -> None:
    # Built in full (no argv), every module registers its own commands: the table must name
    # each of them, in the order they are listed, with the help line the module uses.
    full = build_parser()
    assert list(_choices(full).choices) == NAMES
    assert _listed(full) == [(c.name, c.help) for c in COMMANDS]


def test_the_short_listing_matches_the_full_one() -> None:
    assert _listed(build_parser(["--help"])) == _listed(build_parser())


@pytest.mark.parametrize("name", NAMES)
def test_a_command_built_alone_is_the_full_one(name: str) -> None:
    alone = _choices(build_parser([name])).choices[name]
    full = _choices(build_parser()).choices[name]
    assert alone.format_help() == full.format_help()
    assert alone.format_help().count("\n") > 3  # a real parser, not the listing's stub


def test_the_command_is_the_first_word_that_is_not_an_option() -> None:
    assert module_of(["--version"]) is None
    assert module_of(["-h", "compare", "a", "b"]) == "report"
    assert module_of(["validate", "run"]) == "scenario"
    assert module_of(["bogus"]) is None
    assert command_help("serve") == "run the reference server in the foreground"


def test_help_imports_none_of_the_command_modules() -> None:
    # In a fresh interpreter: this test process has them all loaded already.
    code = (
        "import sys\n"
        "from harness.cli.main import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = ('numpy', 'rich', 'pydantic', 'httpx', 'harness.run', 'harness.cli.run')\n"
        "print('LOADED', sorted(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert "reproduce" in out  # the listing was printed
    assert out.strip().splitlines()[-1] == "LOADED []"


def test_a_mistyped_command_is_a_usage_error_listing_every_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "harness", "rnu"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 4
    assert "invalid choice: 'rnu'" in done.stderr
    assert all(f"'{name}'" in done.stderr for name in NAMES)


def test_a_mistyped_command_names_the_closest_one() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "harness", "rnu"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 4
    assert "invalid choice: 'rnu'; did you mean 'run'? (choose from 'run'," in done.stderr
    # nothing close: argparse's own message, without a guess
    far = subprocess.run(
        [sys.executable, "-m", "harness", "xyzzy"], capture_output=True, text=True, timeout=60
    )
    assert far.returncode == 4
    assert "invalid choice: 'xyzzy' (choose from 'run'," in far.stderr
    assert "did you mean" not in far.stderr


def test_a_mistyped_option_choice_names_the_closest_one(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser(["run"]).parse_args(["run", "tiny", "--cache-control", "sytem"])
    assert exit_.value.code == 4
    assert "invalid choice: 'sytem'; did you mean 'system'?" in capsys.readouterr().err
