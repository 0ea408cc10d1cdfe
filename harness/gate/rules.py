"""Gate rules: the model and its YAML form (docs/ci.md).

Pure: :func:`parse_rules` turns an already-parsed YAML document into a
:class:`GateConfig`; :func:`load_rules` only adds reading the file.  Every
problem is one :class:`GateRulesError` line naming the file, the rule's path
in the document, what was expected and what came:
``gates.yaml: regression[1].max_increase_pct: expected a number >= 0, got 'ten'``.

Rules name metrics as ``<transport>.<metric>.<statistic>``; ``*`` as the
transport means every transport the run holds (baseline and candidate share).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

import yaml

from harness.metrics import definitions as D
from harness.wire.errors import UsageError

#: statistics a relative rule or a self-check may compare
STATISTICS = ("p50", "p90", "p99", "mean")
TESTS = ("bootstrap", "mann-whitney")
SAMPLE_UNITS = ("auto", "rollout", "turn", "round")
OPERATORS = ("<", "<=", ">", ">=")

Op = Literal["<", "<=", ">", ">="]
Test = Literal["bootstrap", "mann-whitney"]
SampleUnit = Literal["auto", "rollout", "turn", "round"]


class GateRulesError(UsageError):
    """A rules file (or a rule in it) is invalid; the gate exits with the usage code."""

    def __init__(self, source: str, where: str, message: str) -> None:
        self.source = source
        self.where = where
        super().__init__(f"{source}: {where}: {message}" if where else f"{source}: {message}")


@dataclass(frozen=True, slots=True)
class Validity:
    """Checked before any rule: a run that fails these is not judged (exit 3)."""

    require_valid: bool = True
    #: failed turns per turn a transport may have; None: the scenario's ``load.max_error_rate``
    max_error_rate: float | None = None
    min_rollouts: int = 1
    require_comparable: bool = True
    #: client event-loop wake-up lag p99 (summary ``client.loop_lag_ms.p99``) above which a
    #: run measured the machine rather than the target; None disables the check
    max_loop_lag_ms: float | None = 50.0


@dataclass(frozen=True, slots=True)
class SloRule:
    """An absolute bound on a value of the candidate's ``summary.json``: ``ws.ttft_ms.p99 < 250``."""

    transport: str
    path: tuple[str, ...]
    op: Op
    value: float
    name: str = ""

    @property
    def label(self) -> str:
        return self.name or f"{self.transport}.{'.'.join(self.path)} {self.op} {self.value:g}"


@dataclass(frozen=True, slots=True)
class RegressionRule:
    """Candidate vs baseline: a regression needs significance AND a change above the allowance."""

    transport: str
    metric: str
    statistic: str
    max_increase_pct: float
    test: Test = "bootstrap"
    samples: SampleUnit = "auto"
    name: str = ""

    @property
    def label(self) -> str:
        return self.name or (
            f"{self.transport}.{self.metric}.{self.statistic} vs baseline "
            f"<= +{self.max_increase_pct:g}%"
        )


@dataclass(frozen=True, slots=True)
class SpeedupRule:
    """Within the candidate run: ``baseline`` / ``candidate`` latency (paired) must reach ``min``."""

    candidate: str
    baseline: str
    min: float
    metric: str = "rollout_ms"
    name: str = ""

    @property
    def label(self) -> str:
        return self.name or (
            f"speedup {self.candidate} vs {self.baseline} {self.metric} >= {self.min:g}x"
        )


@dataclass(frozen=True, slots=True)
class SelfCheckRule:
    """Harness self-check: measured − modelled TTFT (reference server's ``sim_timing``).

    ``max_ms`` bounds the statistic of the per-turn difference; ``max_pct`` bounds it
    relative to the modelled TTFT.  At least one is set.
    """

    transport: str = "*"
    statistic: str = "p50"
    max_ms: float | None = None
    max_pct: float | None = None
    name: str = ""

    @property
    def label(self) -> str:
        limit = self.limit(" of modelled")
        return (
            self.name
            or f"self-check {self.transport} measured-modelled TTFT {self.statistic} {limit}"
        )

    def limit(self, of: str = "") -> str:
        """The bounds set, joined: ``<= 15 ms and <= 5%`` (``of`` follows the percentage)."""
        bounds = [f"<= {self.max_ms:g} ms"] if self.max_ms is not None else []
        if self.max_pct is not None:
            bounds.append(f"<= {self.max_pct:g}%{of}")
        return " and ".join(bounds)


@dataclass(frozen=True, slots=True)
class GateConfig:
    alpha: float = 0.05
    resamples: int = 2000
    seed: int = 0
    validity: Validity = field(default_factory=Validity)
    slo: tuple[SloRule, ...] = ()
    regression: tuple[RegressionRule, ...] = ()
    speedup: tuple[SpeedupRule, ...] = ()
    self_check: tuple[SelfCheckRule, ...] = ()
    source: str = "<rules>"


#: the rules used when ``--rules`` is not given, for two separately recorded runs: relative
#: only, with an allowance above the run-to-run noise of a busy 2-core machine (docs/ci.md)
DEFAULT_RULES_YAML = """\
version: 1
alpha: 0.05
regression:
  - {metric: "*.rollout_ms.p50", max_increase_pct: 20}
  - {metric: "*.ttft_ms.p50", max_increase_pct: 20}
  - {metric: "*.turn_ms.p50", max_increase_pct: 20}
"""

#: the default in A/B mode: interleaving cancels most machine noise, so the allowance is
#: tighter than between separate runs.  8-10 % rather than 5 %: identical servers measured up
#: to +5.5 % (CI excluding 1) on a loaded 2-core box, while a 20 % slower API tier shows as
#: +10-15 % TTFT and +5-16 % rollout latency.
DEFAULT_AB_RULES_YAML = """\
version: 1
alpha: 0.05
regression:
  - {metric: "*.rollout_ms.p50", max_increase_pct: 10}
  - {metric: "*.ttft_ms.p50", max_increase_pct: 8}
  - {metric: "*.turn_ms.p50", max_increase_pct: 8}
"""


# -- parsing -------------------------------------------------------------------------------------

_SLO_RE = re.compile(r"^\s*(?P<metric>[^\s<>=]+)\s*(?P<op><=|>=|<|>)\s*(?P<value>\S+)\s*$")
_REGRESSION_RE = re.compile(r"^\s*(?P<metric>\S+)\s+\+(?P<pct>[^%\s]+)%\s*$")
_SPEEDUP_RE = re.compile(
    r"^\s*(?P<cand>\S+)\s+vs\s+(?P<base>\S+)(?:\s+(?P<metric>[a-z_]+))?\s*>=\s*(?P<min>[^x\s]+)x?\s*$"
)


def _show(value: Any) -> str:
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return repr(value)


class _Doc:
    """Error helper bound to one source file."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, expected: str, got: Any) -> GateRulesError:
        return GateRulesError(self.source, where, f"expected {expected}, got {_show(got)}")

    def mapping(
        self, value: Any, where: str, keys: tuple[str, ...], required: tuple[str, ...] = ()
    ) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.fail(where, "a mapping", value)
        for key in value:
            if key not in keys:
                raise GateRulesError(
                    self.source,
                    f"{where}.{key}" if where else str(key),
                    f"unknown key; expected one of {', '.join(keys)}",
                )
        for key in required:
            if key not in value:
                raise GateRulesError(self.source, f"{where}.{key}", "missing")
        return value

    def name(self, d: Mapping[str, Any], where: str) -> str:
        """A rule's optional ``name``."""
        return self.text(d["name"], f"{where}.name") if "name" in d else ""

    def number(
        self, value: Any, where: str, *, lo: float | None = None, lo_open: bool = False
    ) -> float:
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        if ok and lo is not None:
            ok = value > lo if lo_open else value >= lo
        if not ok:
            bound = "" if lo is None else f" {'>' if lo_open else '>='} {lo:g}"
            raise self.fail(where, f"a number{bound}", value)
        return float(value)

    def integer(self, value: Any, where: str, *, lo: int) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or value < lo:
            raise self.fail(where, f"an integer >= {lo}", value)
        return value

    def boolean(self, value: Any, where: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(where, "true or false", value)
        return value

    def text(self, value: Any, where: str) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.fail(where, "a non-empty string", value)
        return value.strip()

    def choice(self, value: Any, where: str, choices: tuple[str, ...]) -> str:
        if value not in choices:
            raise self.fail(where, f"one of {', '.join(choices)}", value)
        return str(value)

    def rules(self, value: Any, where: str) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.fail(where, "a list of rules", value)
        return value


def _number_text(text: str) -> Any:
    """A number written in a one-line rule, or the text itself for the error message."""
    try:
        return float(text)
    except ValueError:
        return text


def _split_metric(doc: _Doc, text: str, where: str, *, sample_metric: bool) -> tuple[str, str, str]:
    """``ws.ttft_ms.p99`` -> (transport, metric, statistic)."""
    parts = text.split(".")
    if len(parts) != 3 or not all(parts):
        raise doc.fail(where, "<transport>.<metric>.<statistic>, e.g. ws.rollout_ms.p50", text)
    transport, metric, stat = parts
    if sample_metric:
        doc.choice(metric, where + " (metric)", D.gate_metrics())
        doc.choice(stat, where + " (statistic)", STATISTICS)
    return transport, metric, stat


def _slo(doc: _Doc, raw: Any, where: str) -> SloRule:
    if isinstance(raw, str):
        m = _SLO_RE.match(raw)
        if not m:
            raise doc.fail(
                where, "'<transport>.<metric path> <op> <number>', e.g. 'ws.ttft_ms.p99 < 250'", raw
            )
        metric, op, name = m["metric"], m["op"], ""
        value = doc.number(_number_text(m["value"]), where + " (value)")
    else:
        d = doc.mapping(raw, where, ("metric", "op", "value", "name"), ("metric", "op", "value"))
        metric = doc.text(d["metric"], f"{where}.metric")
        op = doc.choice(d["op"], f"{where}.op", OPERATORS)
        value = doc.number(d["value"], f"{where}.value")
        name = doc.name(d, where)
    parts = metric.split(".")
    if len(parts) < 2 or not all(parts):
        raise doc.fail(where, "<transport>.<summary path>, e.g. ws.ttft_ms.p99", metric)
    return SloRule(transport=parts[0], path=tuple(parts[1:]), op=op, value=value, name=name)  # type: ignore[arg-type]


def _regression(doc: _Doc, raw: Any, where: str) -> RegressionRule:
    test, samples, name = "bootstrap", "auto", ""
    if isinstance(raw, str):
        m = _REGRESSION_RE.match(raw)
        if not m:
            raise doc.fail(
                where,
                "'<transport>.<metric>.<statistic> +<pct>%', e.g. '*.rollout_ms.p50 +10%'",
                raw,
            )
        metric = m["metric"]
        pct = doc.number(_number_text(m["pct"]), where + " (percent)", lo=0)
    else:
        keys = ("metric", "max_increase_pct", "test", "samples", "name")
        d = doc.mapping(raw, where, keys, ("metric", "max_increase_pct"))
        metric = doc.text(d["metric"], f"{where}.metric")
        pct = doc.number(d["max_increase_pct"], f"{where}.max_increase_pct", lo=0)
        if "test" in d:
            test = doc.choice(d["test"], f"{where}.test", TESTS)
        if "samples" in d:
            samples = doc.choice(d["samples"], f"{where}.samples", SAMPLE_UNITS)
        name = doc.name(d, where)
    transport, metric_name, stat = _split_metric(doc, metric, f"{where}.metric", sample_metric=True)
    kind = D.get(metric_name).record
    if samples in ("rollout", "turn") and samples != kind:
        raise doc.fail(f"{where}.samples", f"{kind}, round or auto for {metric_name}", samples)
    return RegressionRule(
        transport=transport,
        metric=metric_name,
        statistic=stat,
        max_increase_pct=pct,
        test=test,  # type: ignore[arg-type]
        samples=samples,  # type: ignore[arg-type]
        name=name,
    )


def _speedup(doc: _Doc, raw: Any, where: str) -> SpeedupRule:
    metric, name = "rollout_ms", ""
    if isinstance(raw, str):
        m = _SPEEDUP_RE.match(raw)
        if not m:
            raise doc.fail(
                where,
                "'<candidate> vs <baseline> [metric] >= <min>', e.g. 'ws vs http >= 1.3'",
                raw,
            )
        cand, base = m["cand"], m["base"]
        metric = m["metric"] or metric
        low = doc.number(_number_text(m["min"]), where + " (min)", lo=0, lo_open=True)
    else:
        keys = ("candidate", "baseline", "metric", "min", "name")
        d = doc.mapping(raw, where, keys, ("candidate", "baseline", "min"))
        cand = doc.text(d["candidate"], f"{where}.candidate")
        base = doc.text(d["baseline"], f"{where}.baseline")
        low = doc.number(d["min"], f"{where}.min", lo=0, lo_open=True)
        if "metric" in d:
            metric = doc.text(d["metric"], f"{where}.metric")
        name = doc.name(d, where)
    doc.choice(metric, f"{where}.metric", D.gate_metrics())
    if cand == base or "*" in (cand, base):
        raise doc.fail(where, "two different, named transports", f"{cand} vs {base}")
    return SpeedupRule(candidate=cand, baseline=base, min=low, metric=metric, name=name)


def _self_check(doc: _Doc, raw: Any, where: str) -> SelfCheckRule:
    d = doc.mapping(raw, where, ("transport", "statistic", "max_ms", "max_pct", "name"))
    transport = doc.text(d.get("transport", "*"), f"{where}.transport")
    stat = doc.choice(d.get("statistic", "p50"), f"{where}.statistic", STATISTICS)
    max_ms = doc.number(d["max_ms"], f"{where}.max_ms", lo=0) if "max_ms" in d else None
    max_pct = doc.number(d["max_pct"], f"{where}.max_pct", lo=0) if "max_pct" in d else None
    if max_ms is None and max_pct is None:
        raise GateRulesError(doc.source, where, "expected max_ms or max_pct (or both), got neither")
    return SelfCheckRule(
        transport=transport, statistic=stat, max_ms=max_ms, max_pct=max_pct, name=doc.name(d, where)
    )


#: each list of rules in a rules document and its parser
_RULE_PARSERS: dict[str, Any] = {
    "slo": _slo,
    "regression": _regression,
    "speedup": _speedup,
    "self_check": _self_check,
}


def parse_rules(document: Any, source: str = "<rules>") -> GateConfig:
    """Validate a parsed rules document (see docs/ci.md) into a :class:`GateConfig`."""
    doc = _Doc(source)
    if document is None:
        document = {}
    top = doc.mapping(document, "", ("version", "alpha", "bootstrap", "validity", *_RULE_PARSERS))
    if "version" in top and top["version"] != 1:
        raise doc.fail("version", "1", top["version"])
    alpha = doc.number(top.get("alpha", 0.05), "alpha", lo=0, lo_open=True)
    if alpha >= 0.5:
        raise doc.fail("alpha", "a significance level in (0, 0.5)", top["alpha"])
    resamples, seed = 2000, 0
    if "bootstrap" in top:
        b = doc.mapping(top["bootstrap"], "bootstrap", ("resamples", "seed"))
        resamples = doc.integer(b.get("resamples", resamples), "bootstrap.resamples", lo=100)
        seed = doc.integer(b.get("seed", seed), "bootstrap.seed", lo=0)
    validity = Validity()
    if "validity" in top:
        v = doc.mapping(top["validity"], "validity", tuple(f.name for f in fields(Validity)))
        lag: float | None = Validity().max_loop_lag_ms
        if "max_loop_lag_ms" in v:
            raw = v["max_loop_lag_ms"]
            lag = (
                None
                if raw is None
                else doc.number(raw, "validity.max_loop_lag_ms", lo=0, lo_open=True)
            )
        rate = (
            None
            if v.get("max_error_rate") is None
            else doc.number(v["max_error_rate"], "validity.max_error_rate", lo=0)
        )
        if rate is not None and rate > 1:
            raise doc.fail("validity.max_error_rate", "a fraction in [0, 1]", v["max_error_rate"])
        validity = Validity(
            require_valid=doc.boolean(v.get("require_valid", True), "validity.require_valid"),
            max_error_rate=rate,
            min_rollouts=doc.integer(v.get("min_rollouts", 1), "validity.min_rollouts", lo=1),
            require_comparable=doc.boolean(
                v.get("require_comparable", True), "validity.require_comparable"
            ),
            max_loop_lag_ms=lag,
        )
    lists = {
        key: tuple(parse(doc, r, f"{key}[{i}]") for i, r in enumerate(doc.rules(top.get(key), key)))
        for key, parse in _RULE_PARSERS.items()
    }
    return GateConfig(
        alpha=alpha, resamples=resamples, seed=seed, validity=validity, source=source, **lists
    )


def parse_rules_text(text: str, source: str = "<rules>") -> GateConfig:
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise GateRulesError(source, where, f"not valid YAML: {problem}") from None
    return parse_rules(document, source)


def load_rules(path: str | None, *, ab: bool = False) -> GateConfig:
    """Read a rules file; ``None`` gives the defaults (:data:`DEFAULT_AB_RULES_YAML` if ``ab``)."""
    if path is None:
        if ab:
            return parse_rules_text(DEFAULT_AB_RULES_YAML, "<default A/B rules>")
        return parse_rules_text(DEFAULT_RULES_YAML, "<default rules>")
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise GateRulesError(path, "", "file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise GateRulesError(path, "", f"cannot read file: {exc}") from None
    return parse_rules_text(text, path)
