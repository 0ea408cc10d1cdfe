"""The options `loopbench locust` hands its master: declared once, read by both parsers.

`loopbench locust` (harness/cli/locust.py) offers ``--NAME`` and passes the value on as the
locustfile's ``--loopbench-NAME`` (harness/locust_driver/locustfile.py); a new option is one
row of :data:`LOCUST_OPTIONS`.  Neither side may import the other (the locustfile imports
locust, which patches its process with gevent), so the table lives below both.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from harness.wire.transports import locust_spec, parse_transports
from harness.workload.scenario import Scenario


@dataclass(frozen=True, slots=True)
class LocustOption:
    name: str
    help: str
    #: value: one value of ``type``; flag: on or off; list: repeatable
    kind: Literal["value", "flag", "list"] = "value"
    type: Callable[[str], Any] = str
    #: the value when the option is not given (a value option's; "" or 0.0: none)
    default: Any = ""
    metavar: str | None = None
    #: False: set by `loopbench locust` itself, not one of its options (nor in Locust's web UI)
    public: bool = True
    #: the locustfile's own name for it, where it is not ``--loopbench-NAME``
    locust_flag: str = ""
    env_var: str | None = None

    @property
    def flag(self) -> str:
        return self.locust_flag or f"--loopbench-{self.name}"

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")

    def command_kwargs(self) -> dict[str, Any]:
        """``add_argument`` keywords for `loopbench locust`'s ``--NAME``."""
        if self.kind == "flag":
            return {"action": "store_true", "default": False, "help": self.help}
        how = {"action": "append", "default": []} if self.kind == "list" else {"type": self.type}
        return {"default": self.default, **how, "metavar": self.metavar, "help": self.help}

    def locust_kwargs(self) -> dict[str, Any]:
        """``add_argument`` keywords for the locustfile's parser (Locust's configargparse)."""
        hidden = {} if self.public else {"include_in_web_ui": False}
        return self.command_kwargs() | hidden | ({"env_var": self.env_var} if self.env_var else {})

    def argv(self, value: Any) -> list[str]:
        """The locustfile's arguments for ``value`` (none for an option left at its default)."""
        if self.kind == "flag":
            return [self.flag] if value else []
        if self.kind == "list":
            return [arg for item in value for arg in (self.flag, str(item))]
        return [self.flag, str(value)] if value else []


#: ``--no-report`` of ``run`` and ``locust``
NO_REPORT_HELP = (
    "write the results (summary.json, the row files) but not report.md, report.html and plots/: "
    "a CI job that reads only the summary saves the plotting's CPU; `loopbench report DIR` "
    "renders them later"
)

LOCUST_OPTIONS: tuple[LocustOption, ...] = (
    LocustOption(
        "transports",
        "comma-separated transports (default: the scenario's)",
        locust_flag="--transports",
        env_var="LOOPBENCH_TRANSPORTS",
    ),
    LocustOption(
        "set",
        "override a scenario field, e.g. load.concurrency=64",
        kind="list",
        metavar="KEY=VALUE",
    ),
    LocustOption("out", "results root folder (default: results/)", default="results"),
    LocustOption("run-id", "name of the run folder (default: timestamp-scenario)"),
    LocustOption(
        "run-time",
        "stop after S seconds even if rollouts remain (default: run them all)",
        type=float,
        default=0.0,
        metavar="S",
    ),
    LocustOption("api-key-env", "environment variable holding the API key (read on each worker)"),
    LocustOption("no-keepalive", "HTTP: a new connection per request", kind="flag"),
    LocustOption("insecure", "do not verify TLS certificates", kind="flag"),
    LocustOption(
        "no-hints",
        "send no loopbench.* metadata hints (for endpoints other than the reference server)",
        kind="flag",
    ),
    LocustOption("no-report", NO_REPORT_HELP, kind="flag"),
    LocustOption(
        "stop-file",
        "when this file appears, end the run gracefully (results are still written)",
        public=False,
    ),
    LocustOption(
        "embedded",
        "the target is a reference server started for this run (recorded in the manifest)",
        kind="flag",
        public=False,
    ),
)


def locust_argv(values: Mapping[str, Any]) -> list[str]:
    """The locustfile's arguments for every option in ``values`` (keyed by ``dest``)."""
    return [arg for opt in LOCUST_OPTIONS for arg in opt.argv(values.get(opt.dest, opt.default))]


def locust_transports(listed: str | None, scenario: Scenario) -> list[str]:
    """The transports ``--transports`` lists (comma-separated; none or "" for the scenario's), each
    checked to be one the Locust edge runs (a :class:`UsageError` otherwise)."""
    names = parse_transports(listed or None) or scenario.transports
    for name in names:
        locust_spec(name)
    return list(names)
