"""What the gate concluded: one :class:`RuleResult` per rule, gathered in a :class:`GateReport`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from harness.wire.exit_codes import ExitCode

Kind = Literal["validity", "slo", "regression", "speedup", "self_check"]
Status = Literal["pass", "fail", "skip"]

#: exit code of a failed rule of each kind
KIND_EXIT: dict[str, int] = {
    "validity": ExitCode.INVALID,
    "slo": ExitCode.SLO_BREACH,
    "speedup": ExitCode.SLO_BREACH,
    "regression": ExitCode.REGRESSION,
    "self_check": ExitCode.REGRESSION,
}
#: the gate's verdict by its exit code
VERDICTS: dict[int, str] = {
    ExitCode.OK: "pass",
    ExitCode.REGRESSION: "regression",
    ExitCode.SLO_BREACH: "SLO breach",
    ExitCode.INVALID: "invalid or not comparable",
}


@dataclass(frozen=True, slots=True)
class RuleResult:
    """The outcome of one rule (one testcase in JUnit, one row in Markdown)."""

    kind: Kind
    name: str
    status: Status
    message: str
    baseline: float | None = None
    candidate: float | None = None
    ratio: float | None = None
    ci: tuple[float, float] | None = None
    p_value: float | None = None
    n: tuple[int, int] | None = None
    limit: str = ""
    unit: str = ""
    #: exit code of this failure when it is not its kind's (KIND_EXIT): a speedup rule that
    #: could not be measured (too few rollouts for a CI) asks for a re-measure, exit 3
    code: int | None = None

    @property
    def failed(self) -> bool:
        return self.status == "fail"

    @property
    def exit_code(self) -> int:
        """What this result contributes to the gate's exit code (0 unless it failed)."""
        if not self.failed:
            return ExitCode.OK
        return self.code if self.code is not None else KIND_EXIT[self.kind]


@dataclass(frozen=True, slots=True)
class GateReport:
    results: tuple[RuleResult, ...]
    candidate_id: str
    baseline_id: str | None
    scenario: str
    seed: int | None
    rules_source: str
    alpha: float
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        codes = [r.exit_code for r in self.results if r.failed]
        return max(codes, default=ExitCode.OK)

    @property
    def verdict(self) -> str:
        return VERDICTS[self.exit_code]

    def count(self, status: Status) -> int:
        return sum(1 for r in self.results if r.status == status)
