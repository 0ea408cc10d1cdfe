"""Every subcommand's ``--help`` has a description and an ``examples:`` section.

Walks the real parser, so a new subcommand without them fails here.
"""

from __future__ import annotations

import argparse
import re

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


def _flat(text: str) -> str:
    """Help text with argparse's line wrapping undone."""
    return " ".join(text.split())


def test_gate_help_states_the_allowances_the_default_rules_apply() -> None:
    """The text once said 5 % in --ab mode while the rules allowed 8-10 %."""
    from harness.gate.rules import load_rules

    text = _flat(SUBCOMMANDS["gate"].format_help())
    for ab, mode in ((False, "between separate runs"), (True, "in --ab mode")):
        stated = ", ".join(
            f"{r.metric}.{r.statistic} +{r.max_increase_pct:g} %"
            for r in load_rules(None, ab=ab).regression
        )
        assert f"{stated} {mode}" in text, text


def test_every_scenario_argument_says_it_takes_a_built_in_name() -> None:
    """``run quickstart`` works for sweep, locust, gate --ab and validate too: their help said
    only "scenario YAML file"."""
    seen = []
    for name, sub in SUBCOMMANDS.items():
        for action in sub._actions:
            if action.option_strings or not action.help:
                continue
            if "scenario yaml" in action.help.lower():
                seen.append(name)
                assert "built-in name" in action.help, (name, action.help)
    assert {"run", "sweep", "locust", "gate", "validate"} <= set(seen)


def test_serve_help_names_every_api_the_server_answers() -> None:
    """It named only the Responses API; the server answers Chat Completions and Messages too."""
    from starlette.routing import Route

    from reference_server.app import ReferenceServer
    from reference_server.core.config import ServerConfig

    creates = [
        r.path
        for r in ReferenceServer(ServerConfig()).starlette.routes
        if isinstance(r, Route)
        and "POST" in (r.methods or ())
        and "{" not in r.path
        and not r.path.endswith("/compact")
    ]
    assert len(creates) == 3, creates
    text = _flat(SUBCOMMANDS["serve"].format_help())
    for path in creates:
        assert path in text, path
    for api in ("Responses API", "Chat Completions", "Anthropic Messages"):
        assert api in text, api


def test_every_doc_a_help_text_names_is_where_the_help_says() -> None:
    """The wheel shipped none of the docs the help texts name: each text now ends with where
    this installation keeps them (the package's docs/ after a pip install, the checkout's
    here; tests/install checks the wheel), and every name it gives is there."""
    from harness.cli.common import docs_folder
    from harness.cli.main import build_parser

    parsers = {"": build_parser(), **SUBCOMMANDS}
    named = set()
    for name, sub in parsers.items():
        text = sub.format_help()
        found = set(re.findall(r"\bdocs/([\w-]+\.md)", text)) - {"NAME.md"}
        if found:
            assert text.rstrip().endswith(f"docs/NAME.md, named above: {docs_folder()}/NAME.md"), (
                name
            )
        named |= found
    assert {"ci.md", "server.md", "traces.md"} <= named
    missing = sorted(n for n in named if not (docs_folder() / n).is_file())
    assert not missing, missing
