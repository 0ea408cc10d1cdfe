"""Scenario files: what to replay, over which transports, under which load.

A scenario is a YAML file validated into frozen pydantic models.  Validation is
strict (``"4"`` is not a number, ``4.5`` is not an integer, unknown keys are
errors) because a benchmark that silently runs something other than what was
written measures the wrong thing.  Every problem surfaces as one
:class:`~harness.wire.errors.ScenarioError` whose single line names the file, the
dotted field path, what was expected and what was found.

Reading the file is the only I/O here; :func:`validate_scenario` is pure.
"""

from __future__ import annotations

import copy
import math
import os
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    PrivateAttr,
    ValidationError,
)
from pydantic import model_validator as _model_validator
from pydantic_core import ErrorDetails

from harness.wire.errors import ScenarioError
from harness.wire.transports import TRANSPORT_NAMES
from harness.wire.validation import (
    NAME_PATTERN,
    bound,
    describe_error,
    invalid,
    join_field,
    kind_of,
    set_override,
    shown,
)
from harness.workload.builtin import (
    builtin_hint,
    builtin_path,
    builtin_scenarios,
    looks_like_path,
)
from harness.workload.distributions import (
    DIST_KINDS,
    ConstantDist,
    Distribution,
    StrictModel,
    constant_field,
    scalars_as_text,
)
from harness.workload.slo import SloConfig
from harness.workload.target import TargetConfig
from harness.workload.trace_scenario import looks_like_trace, trace_scenario

if TYPE_CHECKING:
    TransportName = str
else:
    # The registry's names as a Literal: pydantic then refuses any other name with the
    # list of valid ones, and the JSON Schema offers them for completion.
    TransportName = Literal[TRANSPORT_NAMES]

# An open-loop plan is materialised up front; beyond this it would be a memory
# problem disguised as a benchmark, so it is refused at validation time.
MAX_OPEN_LOOP_ROLLOUTS = 1_000_000

# The reference server's default engine profile's window (engine.context_window_tokens).
DEFAULT_CONTEXT_WINDOW_TOKENS = 400_000
# ... and its output cap (engine.max_output_tokens), which may not exceed the window.
DEFAULT_MAX_OUTPUT_TOKENS = 128_000


def _bare_at_least(minimum: float) -> Any:
    def check(value: Any) -> Any:
        # Checked before the number becomes {dist: constant, value: ...} so the
        # error names the field itself, not a `.value` the user never wrote.
        if isinstance(value, int | float) and not isinstance(value, bool) and value < minimum:
            raise invalid(None, bound("ge", minimum, "a number"), value)
        return value

    return check


def _support_at_least(minimum: float) -> Any:
    def check(dist: Any) -> Any:
        field, low = dist.lower_bound()
        if field is not None and low < minimum:
            if field == "values":
                raise invalid(field, f"values that are all ≥ {shown(minimum)}", dist.values)
            raise invalid(field, bound("ge", minimum, "a number"), low)
        return dist

    return check


NonNegDist = Annotated[
    Distribution, AfterValidator(_support_at_least(0)), BeforeValidator(_bare_at_least(0))
]
CallsDist = Annotated[
    Distribution, AfterValidator(_support_at_least(1)), BeforeValidator(_bare_at_least(1))
]


class ServerConfig(StrictModel):
    """Used only when loopbench starts the embedded reference server."""

    api_profile: str = Field(
        default="optimized",
        description="API-tier profile of the embedded server, e.g. optimized or legacy.",
    )
    engine_profile: str = Field(
        default="cerebras-spark",
        description="Engine profile of the embedded server, e.g. cerebras-spark or gpu-legacy.",
    )
    set: Annotated[dict[str, str], BeforeValidator(scalars_as_text)] = Field(
        default_factory=dict,
        description="Server option overrides, KEY: VALUE as in `loopbench serve --set`, e.g. engine.sustained_tps: 2000.",
    )


class ConversationShape(StrictModel):
    """What a conversation is drawn from, a rollout's or a sub-agent's; every numeric field
    accepts a distribution.

    Samples are rounded to integers for token and call counts (outputs to at
    least 1 token) and to microseconds for latencies; draws below a field's
    floor (possible only with an unbounded normal) are clamped to it.
    """

    system_tokens: NonNegDist = constant_field(
        800, "Tokens of the system prompt in the first request."
    )
    tool_schema_tokens: NonNegDist = constant_field(
        400, "Tokens of the tool definitions in the first request."
    )
    user_prompt_tokens: NonNegDist = constant_field(
        200, "Tokens of the user's task in the first request."
    )
    tool_calls: NonNegDist = constant_field(10, "Tool calls in one rollout.")
    parallel_calls: CallsDist = constant_field(
        1, "Tool calls the model asks for per turn (at least 1); the turn waits for the slowest."
    )
    tool_output_tokens: NonNegDist = constant_field(
        400, "Tokens each tool call returns (times tool_output_growth per step)."
    )
    tool_output_growth: float = Field(
        default=1.0,
        gt=0.0,
        description="Factor applied to tool outputs at each step: 1 keeps them flat, 1.08 grows them 8% a step.",
    )
    tool_latency_ms: NonNegDist = constant_field(
        100, "Client time of one tool call, in milliseconds."
    )
    step_output_tokens: NonNegDist = constant_field(
        80, "Model output tokens of each tool-calling turn."
    )
    final_answer_tokens: NonNegDist = constant_field(
        300, "Model output tokens of the final answer."
    )
    think_ms: NonNegDist = constant_field(
        0, "Client time before each request (context building), in milliseconds."
    )


class SubagentsConfig(ConversationShape):
    """Sub-agents a rollout forks (a task tool, a parallel exploration): each answers one tool
    call of a parent turn with its own conversation, run concurrently (docs/metrics.md §1.7).

    Its shape fields mean what the same fields of ``rollout`` mean, for the sub-agent's own
    conversation (with smaller defaults); sub-agents drawn from a scenario do not fork
    sub-agents of their own.
    """

    count: NonNegDist = constant_field(
        1, "Sub-agents one rollout forks (at most one per tool call of the forking turns)."
    )
    turns: list[Annotated[int, Field(ge=0)]] | None = Field(
        default=None,
        min_length=1,
        description="Indexes of the parent's turns that may fork (tool-calling turns only); "
        "absent: any tool-calling turn, drawn at random.",
    )
    join: Literal["wait", "detach"] = Field(
        default="wait",
        description="wait: the parent's next turn waits for the sub-agent's result (a task "
        "tool); detach: the parent goes on, and the rollout ends when the sub-agent does.",
    )
    result_tokens: NonNegDist = constant_field(
        200,
        "Tokens of the sub-agent's result (its final answer's length): the output "
        "of the parent's tool call it answers.",
    )
    system_tokens: NonNegDist = constant_field(600, "Tokens of the sub-agent's system prompt.")
    user_prompt_tokens: NonNegDist = constant_field(
        150, "Tokens of the task the parent gives the sub-agent."
    )
    tool_calls: NonNegDist = constant_field(3, "Tool calls in one sub-agent's conversation.")
    tool_output_tokens: NonNegDist = constant_field(300, "Tokens each of its tool calls returns.")
    step_output_tokens: NonNegDist = constant_field(60, "Output tokens of its tool-calling turns.")
    final_answer_tokens: NonNegDist = constant_field(150, "Output tokens of its final answer.")
    ws: Literal["connection", "lanes"] = Field(
        default="connection",
        description="How the WebSocket transports run sub-agents: a connection each "
        "(connection), or lanes (stream_id) on the rollout's connection (lanes); "
        "--ws-subagents overrides it.",
    )


class RolloutConfig(ConversationShape):
    """The shape of one agent rollout."""

    count: int = Field(
        default=6,
        ge=1,
        description="Rollouts per transport (closed loop, and open loop without duration_s).",
    )
    reasoning_tokens: NonNegDist | None = Field(
        default=None,
        description="Reasoning tokens the model decodes before each turn's visible output (sent as "
        "the loopbench.reasoning_tokens hint with reasoning.summary auto); absent: no reasoning.",
    )
    trace: str | None = Field(
        default=None,
        min_length=1,
        description="Replay this recorded JSONL trace (relative to this file) instead of the distributions (docs/traces.md).",
    )
    compact_at_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Compact the conversation (POST /responses/compact, as Codex does) before a "
        "turn whose history reaches this many tokens, then go on from the compacted item and "
        "the recent items; below the scenario's context_window_tokens. Default: never.",
    )

    subagents: SubagentsConfig | None = Field(
        default=None,
        description="Sub-agents each rollout forks, run concurrently with the parent's other "
        "tool calls (docs/metrics.md §1.7); absent: none.",
    )

    @_model_validator(mode="after")
    def _trace_excludes_distributions(self) -> RolloutConfig:
        # A trace gives every turn; a distribution next to it would be silently unused.
        if self.trace is not None:
            for name in sorted(self.model_fields_set - {"trace", "count", "compact_at_tokens"}):
                value = getattr(self, name)
                if name == "subagents":
                    raise invalid(
                        name,
                        "no section next to rollout.trace (a v2 trace gives its own sub-agents, "
                        "docs/traces.md)",
                        value.model_dump(mode="json", exclude_unset=True),
                    )
                raise invalid(
                    name,
                    "no distribution next to rollout.trace (the trace gives every turn)",
                    value.value if isinstance(value, ConstantDist) else value,
                )
        return self


class Arrival(StrictModel):
    """Open-loop arrival process; ``rate`` is rollouts per second.

    ``gamma`` takes either ``cv`` (coefficient of variation of inter-arrival
    gaps; 1 is Poisson-like, above 1 is bursty) or ``burstiness`` (the gamma
    shape, ``1/cv²``, as in vLLM's benchmark).
    """

    process: Literal["constant", "poisson", "gamma"] = Field(
        default="poisson",
        description="Shape of the gaps between starts: constant, poisson or gamma.",
    )
    rate: float | None = Field(
        default=None, gt=0.0, description="Rollouts started per second (after the stages, if any)."
    )
    cv: float | None = Field(
        default=None,
        gt=0.0,
        description="Gamma only: coefficient of variation of the gaps (1 is Poisson-like, above 1 bursty).",
    )
    burstiness: float | None = Field(
        default=None,
        gt=0.0,
        description="Gamma only, instead of cv: the gamma shape 1/cv² (as in vLLM's benchmark).",
    )

    @_model_validator(mode="after")
    def _gamma_shape(self) -> Arrival:
        if self.process == "gamma":
            if self.cv is None and self.burstiness is None:
                raise invalid("cv", "a number > 0 (or burstiness) for process gamma", None)
            if self.cv is not None and self.burstiness is not None:
                raise invalid("burstiness", "either cv or burstiness, not both", self.burstiness)
        else:
            for name in ("cv", "burstiness"):
                value = getattr(self, name)
                if value is not None:
                    raise invalid(name, f"no {name} for process {self.process}", value)
        return self

    @property
    def gamma_shape(self) -> float:
        """Shape k of the gamma inter-arrival law (1 for Poisson; unused for constant)."""
        if self.burstiness is not None:
            return self.burstiness
        if self.cv is not None:
            return 1.0 / (self.cv * self.cv)
        return 1.0


class Burst(StrictModel):
    """``extra`` additional rollouts spread evenly over ``[at_s, at_s + over_s]``."""

    at_s: float = Field(ge=0.0, description="Seconds into the schedule when the burst begins.")
    extra: int = Field(ge=1, description="Rollouts added on top of the schedule.")
    over_s: float = Field(
        default=0.0,
        ge=0.0,
        description="Seconds over which the extra rollouts are spread evenly (0: all at once).",
    )


class Stage(StrictModel):
    """A stretch of the open-loop schedule: constant ``rate``, or a linear ramp to ``end_rate``."""

    duration_s: float = Field(gt=0.0, description="Length of this stage in seconds.")
    rate: float = Field(
        ge=0.0, description="Rollouts started per second at the beginning of the stage."
    )
    end_rate: float | None = Field(
        default=None,
        ge=0.0,
        description="Rollouts per second at the end of the stage (a linear ramp); default: rate throughout.",
    )

    @property
    def final_rate(self) -> float:
        return self.rate if self.end_rate is None else self.end_rate


class ThroughputBurst(StrictModel):
    """Raise the aggregate output-TPS target to ``tps`` during ``[at_s, at_s + over_s]``."""

    at_s: float = Field(ge=0.0, description="Seconds into the schedule when the TPS burst begins.")
    over_s: float = Field(gt=0.0, description="Length of the burst in seconds.")
    tps: float = Field(gt=0.0, description="Aggregate output tokens per second during the burst.")


class Throughput(StrictModel):
    """An aggregate output-token target (tokens/s across all streams).

    The arrival rate is derived from the rollout model: ``rate = tps / mean
    output tokens per rollout`` (Little's law: in steady state the tokens
    produced per second equal the rollouts started per second times the
    tokens each produces).  The aggregate follows the target after a ramp of
    about one rollout length; a burst shorter than a rollout is smoothed.
    """

    tps: float = Field(
        gt=0.0, description="Aggregate output tokens per second to sustain across all streams."
    )
    bursts: list[ThroughputBurst] = Field(
        default_factory=list,
        description="Stretches with a higher TPS target; they must not overlap.",
    )

    @_model_validator(mode="after")
    def _disjoint(self) -> Throughput:
        end = -1.0
        for i, burst in enumerate(sorted(self.bursts, key=lambda b: b.at_s)):
            if burst.at_s < end:
                raise invalid(
                    f"bursts[{i}].at_s",
                    f"bursts that do not overlap (previous ends at {shown(end)})",
                    burst.at_s,
                )
            end = burst.at_s + burst.over_s
        return self


class Load(StrictModel):
    """How rollouts are started: ``closed``, ``open`` or ``throughput`` (each field's
    description says which modes read it).

    An open schedule ends at ``duration_s`` if set, else after ``rollout.count`` scheduled
    rollouts (or when stages end with no tail rate).  Fields for the other modes are
    ignored so that a mode can be switched with one override.
    """

    mode: Literal["closed", "open", "throughput"] = Field(
        default="closed",
        description="closed: agents run rollouts back to back; open: rollouts start at scheduled times; throughput: open loop at the rate that produces an output-TPS target.",
    )
    concurrency: int = Field(
        default=1, ge=1, description="Closed loop: agents running rollouts at the same time."
    )
    arrival: Arrival | None = Field(
        default=None,
        description="Open and throughput modes: the arrival process (and, open loop, the rate).",
    )
    bursts: list[Burst] = Field(
        default_factory=list,
        description="Open and throughput modes: extra rollouts at given times.",
    )
    stages: list[Stage] = Field(
        default_factory=list,
        description="Open loop: the rate over time in stages (constant or ramp); arrival.rate continues after the last.",
    )
    throughput: Throughput | None = Field(
        default=None, description="Throughput mode: the aggregate output-TPS target."
    )
    duration_s: float | None = Field(
        default=None,
        gt=0.0,
        description="Seconds per transport: the closed loop stops starting rollouts, the open loop ends its schedule.",
    )
    max_in_flight: int | None = Field(
        default=None,
        ge=1,
        description="Open and throughput modes: a start that finds this many rollouts in flight is dropped (and the run marked invalid).",
    )
    warmup_rollouts: int = Field(
        default=0, ge=0, description="The first N rollouts run but are left out of the statistics."
    )
    order: Literal["sequential", "interleaved"] = Field(
        default="sequential",
        description="sequential: one transport after the other; interleaved: every transport runs round 1, then round 2, ..., so drift hits all alike.",
    )
    rounds: int = Field(
        default=1,
        ge=1,
        description="Interleaved order: the number of rounds the rollouts are split into.",
    )
    max_schedule_lag_ms: float = Field(
        default=100.0,
        gt=0.0,
        description="The run is invalid when starts lag the schedule, or the client's event loop wakes late, by more than this at p99 (ms).",
    )
    max_error_rate: float = Field(
        default=0.05,
        ge=0.0,
        le=1.0,
        description="Largest share of failed turns (0..1) a transport may have before the run is "
        "invalid; a transport with no successful turn makes it invalid whatever this is.",
    )

    @_model_validator(mode="after")
    def _open_loop(self) -> Load:
        if self.mode == "closed":
            return self
        spans: list[tuple[str, Sequence[Burst | ThroughputBurst]]] = []
        if self.mode == "throughput":
            if self.throughput is None:
                raise invalid("throughput", "a throughput target (tps) for throughput mode", None)
            spans.append(("throughput.bursts", self.throughput.bursts))
        else:
            has_rate = self.arrival is not None and self.arrival.rate is not None
            if not has_rate and not self.stages:
                got = self.arrival.model_dump(exclude_none=True) if self.arrival else None
                field = "arrival.rate" if self.arrival is not None else "arrival"
                raise invalid(field, "an arrival rate (or stages) for open-loop mode", got)
        spans.append(("bursts", self.bursts))
        end = math.inf if self.duration_s is None else self.duration_s
        for name, bursts in spans:
            for i, burst in enumerate(bursts):
                if burst.at_s + burst.over_s > end:
                    raise invalid(
                        f"{name}[{i}].at_s",
                        f"a burst ending within duration_s ({shown(self.duration_s)})",
                        burst.at_s,
                    )
        return self

    @property
    def tail_rate(self) -> float | None:
        """The rate that applies after the stages (or throughout when there are none)."""
        return self.arrival.rate if self.arrival is not None else None

    def expected_base_rollouts(self, count: int) -> float:
        """Scheduled rollouts before bursts: what the schedule will roughly materialise."""
        if self.duration_s is None:
            return float(count)
        total, t = 0.0, 0.0
        for stage in self.stages:
            span = min(stage.duration_s, self.duration_s - t)
            if span <= 0:
                break
            end = stage.rate + (stage.final_rate - stage.rate) * span / stage.duration_s
            total += (stage.rate + end) / 2 * span
            t += span
        if t < self.duration_s and self.tail_rate is not None:
            total += self.tail_rate * (self.duration_s - t)
        return total


def _default_transports() -> list[TransportName]:
    return ["http", "ws"]


class Scenario(StrictModel):
    """A whole scenario file."""

    name: str = Field(
        pattern=NAME_PATTERN,
        description="Scenario name: lowercase letters, digits and '-'. Names the results folder; runs compare only with runs of the same name.",
    )
    description: str = Field(
        default="", description="One line shown by `loopbench scenarios` and in reports."
    )
    seed: int = Field(
        default=0,
        ge=0,
        description="Seed of the rollout generator: the same seed gives the same rollouts, so runs are comparable.",
    )
    model: str = Field(default="sim-model", description="Model name sent in every request.")
    context_window_tokens: int = Field(
        default=DEFAULT_CONTEXT_WINDOW_TOKENS,
        ge=1,
        description="The context window of `model`, in tokens: a rollout whose history (plus a "
        "turn's requested output) would exceed it is refused by validate and run, unless "
        "rollout.compact_at_tokens compacts it first. Default 400000, the reference server's "
        "(engine.context_window_tokens), or the embedded server's when server.set gives "
        "engine.context_window_tokens; set it to your endpoint's.",
    )
    transports: list[TransportName] = Field(
        default_factory=_default_transports,
        min_length=1,
        description="Transports to measure, each once; the others are compared with the baseline (http when present, see run --baseline).",
    )
    server: ServerConfig = Field(
        default_factory=ServerConfig,
        description="The embedded reference server (used only when no --target is given).",
    )
    target: TargetConfig = Field(
        default_factory=TargetConfig,
        description="How requests are shaped for a real server: extra headers, a "
        "session-affinity header, extra body fields, the tokenizer (docs/targets.md).",
    )
    rollout: RolloutConfig = Field(
        default_factory=RolloutConfig,
        description="The shape of one agent rollout: token counts, tool calls and their latencies.",
    )
    load: Load = Field(
        default_factory=Load,
        description="How rollouts are started: closed loop, open loop or an output-TPS target.",
    )
    slo: SloConfig = Field(
        default_factory=SloConfig,
        description="Latency targets per turn (TTFT, TTFOT, turn) and per rollout; the summary "
        "gives the share of rollouts and turns that meet them and the goodput "
        "(docs/metrics.md, SLOs and goodput).",
    )

    _source: str = PrivateAttr(default="<scenario>")

    @_model_validator(mode="after")
    def _cross_checks(self) -> Scenario:
        seen: set[str] = set()
        for i, name in enumerate(self.transports):
            if name in seen:
                raise invalid(f"transports[{i}]", "each transport once", name)
            seen.add(name)
        load, count = self.load, self.rollout.count
        count_bounded = load.mode == "closed" or load.duration_s is None
        if count_bounded and load.warmup_rollouts >= count:
            raise invalid(
                "load.warmup_rollouts",
                f"a number < rollout.count ({count})",
                load.warmup_rollouts,
            )
        compact_at = self.rollout.compact_at_tokens
        window = self.window_tokens
        if compact_at is not None and compact_at >= window:
            raise invalid(
                "rollout.compact_at_tokens",
                f"a number of tokens below context_window_tokens ({window})",
                compact_at,
            )
        if load.order == "interleaved" and count_bounded and load.rounds > count:
            raise invalid("load.rounds", f"≤ rollout.count ({count})", load.rounds)
        if load.mode == "open":
            expected = load.expected_base_rollouts(count) + sum(b.extra for b in load.bursts)
            if expected > MAX_OPEN_LOOP_ROLLOUTS:
                raise invalid(
                    "load.duration_s",
                    f"a schedule of at most {MAX_OPEN_LOOP_ROLLOUTS} rollouts "
                    f"(this one has ~{math.ceil(expected)})",
                    load.duration_s,
                )
        return self

    @property
    def window_tokens(self) -> int:
        """The context window rollouts must fit: ``context_window_tokens`` if written, else the
        embedded server's ``engine.context_window_tokens`` override, else the default."""
        if "context_window_tokens" not in self.model_fields_set:
            raw = self.server.set.get("engine.context_window_tokens", "").strip()
            if raw.isdigit() and int(raw) > 0:
                return int(raw)
        return self.context_window_tokens

    def server_profiles(self) -> tuple[str, str]:
        """``server.api_profile`` and ``server.engine_profile`` as the embedded server is to
        load them: a profile file is looked for next to this scenario first, as
        ``rollout.trace`` is (then in the working directory; a shipped name stays a name)."""
        return (
            _beside(self.server.api_profile, self._source),
            _beside(self.server.engine_profile, self._source),
        )

    def embedded_overrides(self) -> dict[str, str]:
        """``server.set`` plus the window the scenario declares, for the embedded server.

        A scenario that writes ``context_window_tokens`` was validated against that window,
        so the server it starts must enforce the same one; otherwise a rollout that validated
        would fail mid-run with ``context_length_exceeded``.  The output cap follows a window
        smaller than the default cap (the server requires cap <= window).
        """
        out = dict(self.server.set)
        if "context_window_tokens" in self.model_fields_set:
            window = self.context_window_tokens
            out.setdefault("engine.context_window_tokens", str(window))
            if window < DEFAULT_MAX_OUTPUT_TOKENS:
                out.setdefault("engine.max_output_tokens", str(window))
        return out

    @property
    def source(self) -> str:
        """The file this scenario was loaded from (for error messages)."""
        return self._source


def scenario_json_schema() -> dict[str, Any]:
    """JSON Schema of scenario files (validation side: bare numbers accepted for distributions)."""
    schema = Scenario.model_json_schema(mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema


# --------------------------------------------------------------------------- errors


def _from_override(field: str, overrides: Mapping[str, str] | None) -> str:
    for key, value in (overrides or {}).items():
        if _related(field, key):
            return f" (from override {key}={value})"
    return ""


def _related(a: str, b: str) -> bool:
    """One field is the other or inside it (``load`` and ``load.arrival.rate``)."""
    if not a or not b:
        return False
    short, long = (a, b) if len(a) <= len(b) else (b, a)
    return long == short or long.startswith((short + ".", short + "["))


_PATH_PART = re.compile(r"\[(\d+)\]|([^.\[\]]+)")


def _data_path(err: ErrorDetails) -> list[int | str]:
    """Where in the parsed file an error points (the union tag pydantic adds left out)."""
    path: list[int | str] = [p for p in err["loc"] if not (isinstance(p, str) and p in DIST_KINDS)]
    relative = str((err.get("ctx") or {}).get("field", ""))
    for index, key in _PATH_PART.findall(relative):
        path.append(int(index) if index else key)
    return path


#: required top-level fields, filled in after their error so the checks behind them still run
_PLACEHOLDERS: dict[str, Any] = {"name": "placeholder"}


def _set_aside(data: dict[str, Any], path: list[int | str]) -> bool:
    """Remove what an error points at from ``data`` (its default applies); False if nothing was.

    Inside a list the whole list goes: removing one item would renumber the items after it,
    and the errors the next round finds would name the wrong index.
    """
    chain: list[tuple[Any, int | str]] = []
    node: Any = data
    for part in path:
        if isinstance(node, dict):
            present = part in node
        else:
            present = isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        if not present:
            break
        chain.append((node, part))
        node = node[part]
    for i, (container, _) in enumerate(chain):
        if isinstance(container, list):
            chain = chain[:i]
            break
    if chain:
        container, key = chain[-1]
        del container[key]
        return True
    if len(path) == 1 and path[0] in _PLACEHOLDERS and path[0] not in data:
        data[str(path[0])] = _PLACEHOLDERS[str(path[0])]
        return True
    return False


#: rounds of set-aside-and-revalidate before giving up on finding more problems
_MAX_ROUNDS = 20


def scenario_problems(
    data: dict[str, Any], source: str, overrides: Mapping[str, str] | None = None
) -> tuple[Scenario | None, list[ScenarioError]]:
    """Validate ``data``; the scenario, or every problem found, one located error each.

    pydantic reports every field error of a round, but a model's cross-field checks run
    only once its fields are valid, and an unknown key hides the rest of its mapping.  So
    each round sets aside what its errors point at (defaults apply) and validates again,
    until the rest is valid: the user fixes a file in one pass, not one error per run.
    A later error about a field already reported (or one inside it) is a consequence of
    setting it aside, not a new problem, and is left out.
    """
    problems: list[ScenarioError] = []
    reported: list[str] = []
    work = copy.deepcopy(data)
    for _ in range(_MAX_ROUNDS):
        try:
            scenario = Scenario.model_validate(work)
        except ValidationError as exc:
            errors = exc.errors(include_url=False)
        else:
            return (scenario if not problems else None), problems
        progressed = False
        for err in errors:
            field, message = describe_error(err, tags=DIST_KINDS)
            if not any(_related(field, seen) for seen in reported):
                message += _from_override(field, overrides)
                problems.append(ScenarioError(source, field, message))
                reported.append(field)
                # A misspelt required field is next reported missing under its right name.
                meant = re.search(r"did you mean '([^']+)'", message)
                if err["type"] == "unknown_field" and meant:
                    parent = field.rpartition(".")[0]
                    reported.append(join_field(parent, meant.group(1)))
            progressed = _set_aside(work, _data_path(err)) or progressed
        if not progressed:
            break
    return None, problems


class InvalidScenarioError(ScenarioError):
    """A scenario with one or more problems: ``problems`` holds each, located.

    ``source``, ``field`` and the message are the first problem's; ``str(err)`` is one
    line per problem.
    """

    def __init__(self, problems: list[ScenarioError]) -> None:
        first = problems[0]
        super().__init__(first.source, first.key, first.detail)
        self.problems = problems
        self.args = ("\n".join(str(p) for p in problems),)


# --------------------------------------------------------------------------- loading


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (PyYAML silently keeps the last one)."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=True)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_mapping,
)


def _parse_yaml(text: str, source: str) -> Any:
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # safe: builds plain data only
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "invalid YAML"
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ScenarioError(source, "", f"invalid YAML{where}: {problem}") from None
    except yaml.YAMLError as exc:
        raise ScenarioError(source, "", f"invalid YAML: {exc}") from None


def _apply_override(data: dict[str, Any], key: str, raw: str, source: str) -> None:
    parts = key.split(".")
    if not key or any(not p for p in parts):
        raise ScenarioError(source, key, "expected a dotted field path like load.concurrency")
    # Server override keys contain dots themselves ("engine.sustained_tps").
    if len(parts) > 3 and parts[:2] == ["server", "set"]:
        parts = [*parts[:2], ".".join(parts[2:])]
    try:
        set_override(data, parts, raw)
    except ValueError as exc:
        raise ScenarioError(source, key, str(exc)) from None


def validate_scenario(
    data: Any, source: str = "<scenario>", overrides: Mapping[str, str] | None = None
) -> Scenario:
    """Validate already-parsed scenario data.

    Raises :class:`InvalidScenarioError` listing every problem (or a :class:`ScenarioError`
    for data that is not a mapping or an override that cannot be applied).
    """
    if not isinstance(data, dict):
        got = "an empty file" if data is None else kind_of(data)
        raise ScenarioError(source, "", f"expected a mapping of scenario fields, got {got}")
    data = copy.deepcopy(data)  # overrides mutate it; the caller's data stays as given
    for key, raw in (overrides or {}).items():
        _apply_override(data, key, raw, source)
    scenario, problems = scenario_problems(data, source, overrides)
    if scenario is None:
        raise InvalidScenarioError(problems)
    scenario._source = source
    return scenario


def _beside(ref: str, source: str) -> str:
    """``ref`` relative to the scenario file ``source`` when it names a file there."""
    if os.path.isabs(ref) or not source or source.startswith("<"):
        return ref
    if not ref.endswith((".yaml", ".yml")) and "/" not in ref and os.sep not in ref:
        return ref  # a shipped profile's name
    beside = os.path.join(os.path.dirname(source), os.path.expanduser(ref))
    return beside if os.path.isfile(beside) else ref


class UnknownScenarioError(ScenarioError):
    """Neither a file nor a built-in scenario has this name; the message lists the built-ins."""

    def __init__(self, name: str) -> None:
        found = builtin_scenarios()
        super().__init__(
            name,
            "",
            f"no scenario file or built-in named {name!r}{builtin_hint(name)}; "
            f"built-ins: {', '.join(found)}",
        )
        self.args = (self.detail,)


def resolve_scenario(path: str | os.PathLike[str]) -> str:
    """The file a scenario argument names.

    A bare name of a built-in (``tiny``) is the built-in, whatever the working folder holds
    (:func:`~harness.workload.builtin.shadowed_entries` says what it held); anything else is the path when it exists,
    else the built-in it names (``scenarios/tiny.yaml`` from another folder)."""
    source = os.fspath(path)
    builtin = builtin_path(source)
    if builtin is not None and not looks_like_path(source):
        return str(builtin)
    if os.path.exists(source):
        return source
    if builtin is None:
        raise UnknownScenarioError(source)
    return str(builtin)


def load_scenario(
    path: str | os.PathLike[str], overrides: dict[str, str] | None = None
) -> Scenario:
    """Read, override and validate a scenario file, or the built-in scenario of that name,
    or the scenario that replays a trace file (:mod:`harness.workload.trace_scenario`).

    ``overrides`` maps dotted field paths to YAML scalars, e.g.
    ``{"load.concurrency": "4", "transports": "[http]"}``; they are applied to
    the parsed file before validation so they are checked like the file.
    """
    source = resolve_scenario(path)
    try:
        with open(source, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise ScenarioError(source, "", "file not found") from None
    except IsADirectoryError:
        raise ScenarioError(source, "", "expected a YAML file, got a directory") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(source, "", f"cannot read file: {exc}") from None
    if looks_like_trace(source, text):
        # A trace given where a scenario goes: the built-in scenario that replays it.
        return validate_scenario(trace_scenario(source, text), source, overrides)
    return validate_scenario(_parse_yaml(text, source), source, overrides)
