"""The results of a run as types: ``summary.json`` and ``manifest.json`` read into models.

A run's summary is built as a JSON document (:meth:`harness.metrics.summary.Accumulator.summary`
and the run's lifecycle add to it) and written as such; whoever reads it back — validity,
``gate``, ``compare``, the reports, the CLI — reads it through :class:`Summary` and its parts,
by attribute, instead of by string keys.  The JSON shape is the one docs/metrics.md §3
documents (the notebooks and committed baselines read it): every model keeps the keys it
does not declare (``extra="allow"``) and writes back only the keys it read, so
``Summary.from_json(doc).to_json() == doc``.

**Versions.**  :data:`FORMAT_VERSION` is the version written; :func:`Summary.from_json`
reads it and every version in :data:`READERS` (each a function that brings an older
document to the current shape).  Version 1 is today's shape, so its reader is the identity;
a document without ``format_version`` is not a loopbench summary and is refused.

The JSON Schema of ``summary.json`` (:func:`summary_schema`) is generated from these models
and published in docs/metrics.md; ``tests/metrics/test_results_model.py`` fails when they
part.  ``python -m harness.metrics.results_model`` prints it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Self, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, WithJsonSchema

from harness.wire.json_tree import without_key
from harness.wire.validation import describe_error

#: the results format (summary.json, manifest.json, the row files), one version for all:
#: the ``format_version`` this loopbench writes
FORMAT_VERSION = 1

#: a JSON number: an int stays an int (counts, whole milliseconds), so a document reads back as it
#: was written
Num = Annotated[int | float, WithJsonSchema({"type": "number"})]


class ResultsFormatError(ValueError):
    """A summary or manifest this version cannot read: names the field and what was expected."""


class _Block(BaseModel):
    """A JSON object of the results: keys it does not declare are kept as they were."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    def to_json(self) -> dict[str, Any]:
        """The JSON object, with exactly the keys it was read with (or set)."""
        return self.model_dump(mode="json", exclude_unset=True, by_alias=True)

    def get(self, key: str, default: Any = None) -> Any:
        """A key of the JSON object, declared or not (for keys named by data, e.g. the
        metric table's groups)."""
        value = getattr(self, key, None)
        if value is None and self.model_extra:
            value = self.model_extra.get(key)
        return default if value is None else value


class Counts(_Block):
    """How many records, and how many of them failed."""

    count: int = 0
    errors: int = 0

    @property
    def ok(self) -> int:
        return self.count - self.errors


class Stats(_Block):
    """A metric's statistics (ms, tokens): percentiles by nearest rank, exact mean; null when
    not measured.  Which keys a metric has comes from the metric table (docs/metrics.md §6)."""

    p50: Num | None = None
    p90: Num | None = None
    p99: Num | None = None
    mean: Num | None = None

    def stat(self, key: str) -> Num | None:
        value = self.get(key)
        return value if isinstance(value, int | float) and not isinstance(value, bool) else None


class SloStats(Stats):
    """``transports.<t>.slo``: the share of rollouts and turns within the scenario's ``slo``
    thresholds (docs/metrics.md §1.8)."""

    rollout_attainment: Num | None = None
    turn_attainment: Num | None = None
    rollouts: int = 0
    good_rollouts: int = 0
    turns: int = 0
    good_turns: int = 0
    rollout_attainment_ci95: list[Num | None] | None = None
    turn_attainment_ci95: list[Num | None] | None = None
    ci_reason: str | None = None
    thresholds: dict[str, Num] = Field(default_factory=dict)


class Goodput(Stats):
    """``transports.<t>.goodput``: output of the good rollouts per second (§1.8)."""

    goodput_tps: Num | None = None
    good_rollouts_per_s: Num | None = None
    good_output_tokens: int | None = None
    span_s: Num | None = None


class CacheTurn(_Block):
    """``cache.by_turn[]``: one turn index that reported usage."""

    turn_index: int = 0
    turns: int = 0
    input_tokens: int = 0
    cached_tokens: int = 0
    cached_ratio: Num | None = None


class CacheStats(Stats):
    """``transports.<t>.cache``: cached over input tokens as the server reported them
    (docs/metrics.md §1.2, "cached ratio")."""

    cached_ratio: Num | None = None
    input_tokens: int = 0
    cached_tokens: int = 0
    by_turn: list[CacheTurn] = Field(default_factory=list)


class TokenCounts(_Block):
    """``tokens.<t>``: planned against server-reported tokens (docs/metrics.md §1.6)."""

    turns: int = 0
    usage_turns: int = 0
    planned_input: int = 0
    planned_output: int = 0
    usage_planned_input: int = 0
    usage_planned_output: int = 0
    reported_input: int | None = None
    reported_output: int | None = None
    input: int | None = None
    output: int | None = None
    streamed_output: int | None = None
    input_ratio: Num | None = None
    output_ratio: Num | None = None


class Schedule(_Block):
    """What happened to a transport's intended starts:
    ``intended = started + cancelled + dropped + not_started``."""

    intended: int = 0
    started: int = 0
    late: int = 0
    dropped: int = 0
    cancelled: int = 0
    not_started: int = 0
    lag_mean_ms: Num | None = None
    lag_max_ms: Num | None = None


class TransportSummary(_Block):
    """``transports.<t>``: one transport's figures.  The metric groups of the metric table
    (``ttft_ms``, ``tps``, ``slo``, …) are :class:`Stats`; read one by the table's names with
    :meth:`stat`."""

    turns: Counts = Field(default_factory=Counts)
    rollouts: Counts = Field(default_factory=Counts)
    ttft_ms: Stats | None = None
    ttft_text_ms: Stats | None = None
    ttft_tool_ms: Stats | None = None
    held_back_ms: Stats | None = None
    ttfot_ms: Stats | None = None
    ttfb_ms: Stats | None = None
    itl_ms: Stats | None = None
    turn_ms: Stats | None = None
    rollout_ms: Stats | None = None
    rollout_uncorrected_ms: Stats | None = None
    tpot_ms: Stats | None = None
    connect_ms: Stats | None = None
    tls_ms: Stats | None = None
    compaction_ms: Stats | None = None
    reasoning_tokens: Stats | None = None
    schedule_lag_ms: Stats | None = None
    measurement_error_ms: Stats | None = None
    server_late_ms: Stats | None = None
    client_error_ms: Stats | None = None
    tps: Stats | None = None
    cache: CacheStats | None = None
    slo: SloStats | None = None
    goodput: Goodput | None = None
    breakdown_ms: dict[str, Num | None] = Field(default_factory=dict)
    errors_by_kind: dict[str, int] = Field(default_factory=dict)
    #: ``{"<group>.<key>": n}``: statistics computed from too few samples (§1.4)
    too_few_samples: dict[str, int] = Field(default_factory=dict)
    schedule: Schedule | None = None
    rx_stamp: dict[str, Any] | None = None

    def group(self, name: str) -> Stats | None:
        """A metric group by its ``summary.json`` name (``"ttft_ms"``), declared or not."""
        value = self.get(name)
        if isinstance(value, Stats):
            return value
        return Stats.model_validate(value) if isinstance(value, Mapping) else None

    def stat(self, group: str, key: str) -> Num | None:
        """``transports.<t>.<group>.<key>``, e.g. ``stat("ttft_ms", "p99")``; None if absent."""
        block = self.group(group)
        return block.stat(key) if block is not None else None

    @property
    def schedule_lag_p99_ms(self) -> Num | None:
        return self.schedule_lag_ms.stat("p99") if self.schedule_lag_ms is not None else None


class Comparison(_Block):
    """``comparisons[]``: a transport against the run's baseline transport."""

    baseline: str
    candidate: str
    rollout_speedup: Num | None = None
    rollout_speedup_ci95: list[Num | None] | None = None
    rollout_latency_reduction_pct: Num | None = None
    ttft_p50_reduction_pct: Num | None = None
    paired: bool | None = None
    rollout_pairs: int | None = None
    rollout_speedup_ci_reason: str | None = None

    @property
    def pair(self) -> str:
        return f"{self.candidate} vs {self.baseline}"


class LoopLag(_Block):
    p50: Num | None = None
    p99: Num | None = None
    max: Num | None = None


class ClientProcess(_Block):
    cpu_share: Num | None = None
    loop_lag_ms: LoopLag | None = None


class Client(ClientProcess):
    """``client``: the measuring process(es); several (``--procs``, Locust) add each one."""

    procs: int | None = None
    per_process: list[ClientProcess] | None = None


class LoadBlock(_Block):
    """``load``: the load the run was asked to apply."""

    mode: str | None = None
    rollouts_planned: int | None = None
    max_schedule_lag_ms: Num | None = None


class ErrorKind(_Block):
    count: int = 0
    example: str | None = None


class NotRun(_Block):
    transports: list[str] = Field(default_factory=list)
    rollouts: dict[str, int] = Field(default_factory=dict)
    cancelled: dict[str, int] = Field(default_factory=dict)


class SubagentFigures(_Block):
    """``subagents.<t>``: the rollouts that forked sub-agents (medians; docs/metrics.md §1.7)."""

    rollouts: int = 0
    wait_share_p50: Num | None = None
    critical_path_turns_p50: Num | None = None
    critical_path_through_subagent: Num | None = None
    #: conversation numbers joined by ">" ("0>1>0": the root, waiting on sub-agent 1)
    critical_path_common: str | None = None
    critical_path_common_share: Num | None = None


class ServerMetrics(_Block):
    """``server_metrics``: the target's Prometheus series scraped during the run
    (docs/server-metrics.md)."""

    url: str | None = None
    interval_s: Num | None = None
    scrapes: int = 0
    failed_scrapes: int = 0
    series: int = 0
    names: list[str] = Field(default_factory=list)


class Validity(BaseModel):
    """A run's verdict: whether it counts, and why not."""

    model_config = ConfigDict(frozen=True)

    valid: bool
    reasons: tuple[str, ...] = ()


class _Document(_Block):
    """A versioned file of the results: ``summary.json``, ``manifest.json``."""

    format_version: int = FORMAT_VERSION

    @classmethod
    def of(cls, doc: Mapping[str, Any]) -> Self:
        """A document built in this process (``format_version`` may be left out)."""
        return _read(cls, {"format_version": FORMAT_VERSION, **doc}, cls.__name__)


class Summary(_Document):
    """``summary.json``: written last; its presence marks a finished run (docs/metrics.md §3)."""

    run_id: str = ""
    valid: bool | None = None
    invalid_reasons: list[str] = Field(default_factory=list)
    transports: dict[str, TransportSummary] = Field(default_factory=dict)
    comparisons: list[Comparison] = Field(default_factory=list)
    sample_size_notes: list[str] = Field(default_factory=list)
    partial: bool = False
    interrupted: bool = False
    errors: dict[str, dict[str, ErrorKind]] = Field(default_factory=dict)
    not_run: NotRun | None = None
    client_cpu_share: Num | None = None
    client: Client | None = None
    load: LoadBlock | None = None
    scenario: str | None = None
    seed: int | None = None
    honesty: dict[str, dict[str, Any]] = Field(default_factory=dict)
    tokens: dict[str, TokenCounts] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)
    #: per transport, an endpoint that ignored the output-length hint (outputs >= 1.5x the
    #: plan in a run that sent hints; harness/metrics/token_counts.py): printed first
    hint_ignored: list[str] = Field(default_factory=list)
    subagents: dict[str, SubagentFigures] | None = None
    server_metrics: ServerMetrics | None = None
    #: a Locust run's own block (docs/distributed.md)
    locust: dict[str, Any] | None = None
    #: rebuilt from the rows of a killed run (``loopbench report``), and from how many
    rebuilt: bool = False
    rebuilt_from: dict[str, int] | None = None

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], where: str = "summary.json") -> Summary:
        """Read a ``summary.json`` document of any version in :data:`READERS`."""
        return _read(cls, doc, where)

    @property
    def validity(self) -> Validity | None:
        """The verdict the run recorded; None for a summary written without one."""
        if self.valid is None:
            return None
        return Validity(valid=self.valid, reasons=tuple(self.invalid_reasons))

    def transport(self, name: str) -> TransportSummary | None:
        return self.transports.get(name)


def as_summary(doc: Summary | Mapping[str, Any] | None) -> Summary | None:
    """A summary as its model, for readers handed either (a document built in this process, or
    one read from disk)."""
    if doc is None or isinstance(doc, Summary):
        return doc
    return Summary.of(doc)


def as_transport(doc: TransportSummary | Mapping[str, Any]) -> TransportSummary:
    """One transport's figures as their model (see :func:`as_summary`)."""
    return doc if isinstance(doc, TransportSummary) else TransportSummary.model_validate(doc)


class Manifest(_Document):
    """``manifest.json``: what was run, written first (docs/metrics.md §3)."""

    run_id: str = ""
    #: the scenario as run (the scenario model's JSON; header values of ``target`` masked);
    #: hand-made manifests may name it only
    scenario: dict[str, Any] | str | None = None
    scenario_path: str | None = None
    scenario_name: str | None = None
    seed: int | None = None
    transports: list[str] = Field(default_factory=list)
    target: str | None = None
    embedded_server: bool | None = None
    client_options: dict[str, Any] = Field(default_factory=dict)
    versions: dict[str, str] = Field(default_factory=dict)
    git_sha: str | None = None
    machine: dict[str, Any] = Field(default_factory=dict)
    started_at: str | None = None
    #: rollouts of the plan per transport, warm-up included (written since it was kept: what a
    #: rebuild after ``kill -9`` counts the rows against, harness/report/rebuild.py)
    rollouts_planned: int | None = None
    #: ``locust`` for a Locust run, with its ``locust`` block; ``ab`` for a side of ``gate --ab``
    driver: str | None = None
    locust: dict[str, Any] | None = None
    ab: dict[str, Any] | None = None

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], where: str = "manifest.json") -> Manifest:
        return _read(cls, doc, where)

    @property
    def hints(self) -> bool:
        """Whether the client sent the output-length hints (the token counts judge them)."""
        return bool(self.client_options.get("hints", False))

    @property
    def scenario_record(self) -> dict[str, Any] | None:
        """The scenario as run, if the manifest holds it."""
        return self.scenario if isinstance(self.scenario, dict) else None

    @property
    def scenario_facts(self) -> ScenarioFacts:
        """What the reports, ``gate`` and a rebuild take from the scenario as run; lenient: a
        hand-made or older manifest may lack any of it."""
        record = self.scenario_record or {}
        load, server, slo = (_mapping(record.get(key)) for key in ("load", "server", "slo"))
        return ScenarioFacts(
            name=self.scenario_name or record.get("name"),
            description=record.get("description") or None,
            load_mode=load.get("mode"),
            concurrency=load.get("concurrency"),
            arrival=load.get("arrival"),
            warmup_rollouts=int(load.get("warmup_rollouts") or 0),
            api_profile=server.get("api_profile"),
            engine_profile=server.get("engine_profile"),
            slo={k: float(v) for k, v in slo.items() if v is not None},
        )


@dataclass(frozen=True, slots=True)
class ScenarioFacts:
    """The parts of the recorded scenario its readers use (:attr:`Manifest.scenario_facts`)."""

    name: str | None = None
    description: str | None = None
    load_mode: str | None = None
    concurrency: Any = None
    #: the open loop's arrival block as recorded (shown, not interpreted)
    arrival: Any = None
    warmup_rollouts: int = 0
    api_profile: str | None = None
    engine_profile: str | None = None
    #: the SLO thresholds that are set, as the accumulator takes them
    slo: dict[str, float] = field(default_factory=dict)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _v1(doc: Mapping[str, Any]) -> dict[str, Any]:
    return dict(doc)


_M = TypeVar("_M", bound=_Document)

#: readers of every ``format_version`` this loopbench reads: each returns the document in the
#: shape of :data:`FORMAT_VERSION`
READERS: dict[int, Callable[[Mapping[str, Any]], dict[str, Any]]] = {1: _v1}


def _read(model: type[_M], doc: Mapping[str, Any], where: str) -> _M:
    if not isinstance(doc, Mapping):
        raise ResultsFormatError(f"{where}: expected a JSON object, got {type(doc).__name__}")
    version = doc.get("format_version")
    if version is None:
        raise ResultsFormatError(f"{where}: format_version: missing (expected {FORMAT_VERSION})")
    reader = READERS.get(version) if isinstance(version, int) else None
    if reader is None:
        known = ", ".join(map(str, sorted(READERS)))
        raise ResultsFormatError(
            f"{where}: format_version: expected one of {known}, got {version!r}"
        )
    try:
        out = model.model_validate(reader(doc))
    except ValidationError as exc:
        field, message = describe_error(exc.errors(include_url=False)[0])
        raise ResultsFormatError(f"{where}: {field}: {message}") from None
    # the document keeps the version it was read as; it is written back in the current one
    out.format_version = FORMAT_VERSION
    return out


def summary_schema() -> dict[str, Any]:
    """The JSON Schema of ``summary.json`` (draft 2020-12), from :class:`Summary`."""
    # pydantic's generated titles ("Cpu Share") say no more than the names
    schema = without_key(Summary.model_json_schema(mode="serialization"), "title")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "loopbench summary.json"
    return schema


def _compact(node: Any, indent: str = "", width: int = 100) -> str:
    """JSON, a value on one line where it fits in ``width``."""
    flat = json.dumps(node, sort_keys=True, ensure_ascii=False)
    if len(indent) + len(flat) <= width or not isinstance(node, dict | list) or not node:
        return flat
    inner = indent + "  "
    if isinstance(node, dict):
        items = [
            f"{inner}{json.dumps(k)}: {_compact(v, inner, width).lstrip()}"
            for k, v in sorted(node.items())
        ]
        return "{\n" + ",\n".join(items) + f"\n{indent}}}"
    items = [inner + _compact(v, inner, width).lstrip() for v in node]
    return "[\n" + ",\n".join(items) + f"\n{indent}]"


def schema_text() -> str:
    """:func:`summary_schema` as published in docs/metrics.md."""
    return _compact(summary_schema())


if __name__ == "__main__":  # pragma: no cover - the docs' generator
    print(schema_text())
