"""Every ``loopbench`` subcommand in one table: its name, the module that builds and runs it,
and its one-line help.

The modules of :mod:`harness.cli` pull in numpy, rich, pydantic and the run stack (about a
second together); ``loopbench --help``, a bare ``loopbench`` or a mistyped command need none
of that.  So :func:`harness.cli.main.build_parser` lists every command from this table and
imports only the module of the command on the line; each module takes its help line from
here (:func:`command_help`), so the short list and the command's own parser say the same.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    #: the module under ``harness.cli`` whose ``add_parser`` registers it (with its siblings)
    module: str
    help: str


#: in the order ``loopbench --help`` lists them; a module's commands stay together
COMMANDS: tuple[Command, ...] = (
    Command("run", "run", "replay a scenario's rollouts over each transport and report"),
    Command(
        "probe",
        "probe",
        "check which APIs an endpoint has (Responses, Chat Completions, Anthropic Messages) and what they support",
    ),
    Command("record", "record", "record an agent's traffic through a proxy as a trace"),
    Command("serve", "serve", "run the reference server in the foreground"),
    Command("validate", "scenario", "check scenario files and print precise errors"),
    Command("schema", "scenario", "print the scenario JSON Schema (for editor completion)"),
    Command(
        "import",
        "scenario",
        "turn recorded agent sessions or public request traces into a replayable trace (docs/traces.md)",
    ),
    Command(
        "trace",
        "scenario",
        "print what a trace holds: rollouts, turns, tokens, tool time, warm-ups, recoveries, "
        "sub-agents",
    ),
    Command("scenarios", "scenario", "list the built-in scenarios with their descriptions"),
    Command("init", "scenario", "write NAME.yaml, a commented starter scenario"),
    Command(
        "gate",
        "gate",
        "CI regression gate: judge a run against a baseline and rules (exit 0/1/2/3/4)",
    ),
    Command(
        "report", "report", "(re)render report.md, report.html and plots/ of a run or sweep folder"
    ),
    Command(
        "compare",
        "report",
        "are two or more runs comparable, what changed, and is it significant (+ compare.html)",
    ),
    Command(
        "sweep",
        "report",
        "one run per value of a scenario field, and a combined report with the knee",
    ),
    Command(
        "reproduce",
        "model",
        "measure the published figures (docs/model.md §9) against the embedded reference server",
    ),
    Command(
        "calibrate", "model", "fit API-tier and engine parameters to a run and write profile YAMLs"
    ),
    Command(
        "locust", "locust", "distributed load: a Locust master and workers replaying a scenario"
    ),
)


def command_help(name: str) -> str:
    """The one-line help of command ``name``."""
    return next(c.help for c in COMMANDS if c.name == name)


def module_of(argv: list[str] | tuple[str, ...]) -> str | None:
    """The module of the command ``argv`` names (its first word not an option), if any."""
    # The top-level options (-h, --version) take no value, so the first other word is the
    # command (or a mistyped one, which argparse then reports).
    word = next((a for a in argv if not a.startswith("-")), None)
    return next((c.module for c in COMMANDS if c.name == word), None)
