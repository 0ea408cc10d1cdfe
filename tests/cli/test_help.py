"""Every subcommand's ``--help`` has a description and an ``examples:`` section.

Walks the real parser, so a new subcommand without them fails here.
"""

from __future__ import annotations

import argparse

import pytest

from harness.cli.main import build_parser


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    found: dict[str, argparse.ArgumentParser] = {}

    def walk(p: argparse.ArgumentParser, prefix: str) -> None:
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    found[f"{prefix}{name}"] = sub
                    walk(sub, f"{prefix}{name} ")

    walk(parser, "")
    return found


SUBCOMMANDS = _subcommands()


def test_the_walk_sees_the_subcommands() -> None:
    assert {"run", "serve", "validate", "schema", "gate", "report", "compare"} <= set(SUBCOMMANDS)


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_help_has_a_description_and_examples(name: str) -> None:
    sub = SUBCOMMANDS[name]
    assert sub.description and len(sub.description) > 20, f"loopbench {name}: no description"
    text = sub.format_help()
    assert "\nexamples:\n" in text, f"loopbench {name} --help: no examples: section"
    section = text.split("\nexamples:\n", 1)[1].split("\n\n", 1)[0]
    # An example is a whole command a user can copy, one a line, not a re-flowed paragraph.
    lines = section.splitlines()
    assert all(line.startswith("  loopbench ") for line in lines), section
    assert any(line.startswith(f"  loopbench {name} ") for line in lines), section
