"""Simulation profiles: the API-tier and engine parameters of the reference server.

Profiles are YAML files (``reference_server/profiles/api-*.yaml`` and
``engine-*.yaml``) validated by the pydantic models below.  Every parameter is a
documented service time or rate; ``docs/model.md`` derives each default.  A
profile is chosen by short name (``optimized``, ``cerebras-spark``), by file
name (``api-optimized``) or by a path to a user YAML, then adjusted with
``--set``-style overrides (``api.fixed_ms=12``, ``engine.sustained_tps=500``).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from harness.wire.errors import LocatedError
from harness.wire.validation import KnownFields, describe_error, kind_of, set_override, shown
from reference_server.core.lengths import EFFORTS, lognormal_tokens

PROFILE_DIR = Path(__file__).resolve().parents[1] / "profiles"
# A Codex-class model's published limits: a 400,000-token context window, of which at
# most 128,000 tokens may be output (docs/model.md §13).
DEFAULT_CONTEXT_WINDOW_TOKENS = 400_000
DEFAULT_MAX_OUTPUT_TOKENS = 128_000


class ProfileError(LocatedError):
    """A profile file or override is missing, unreadable or invalid.

    ``str(err)`` is one line: ``--set api.fixed_ms: expected a number ≥ 0, got -3``.
    """

    def __init__(self, source: str, key: str, message: str, *, profile: Kind | None = None) -> None:
        super().__init__(source, key, message)
        #: ``api`` or ``engine`` when the profile named, or its file, is at fault (None: an
        #: override or an option): a caller that chose the profile can name its own field
        self.profile = profile


_Blame = tuple[str, str]  # (key, message)


class _CrossFieldError(ValueError):
    """Raised inside model validators: two parameters disagree.

    Carries the message for each side, so the error can blame the one the user
    overrode on the command line rather than the file that was fine before.
    """

    def __init__(self, primary: _Blame, other: _Blame) -> None:
        self.primary = primary
        self.other = other
        super().__init__(": ".join(primary))


def _in_order(profile: BaseModel, low: str, high: str, noun: str, *, blame_low: bool) -> None:
    """``low`` must not exceed ``high``; the message names ``low`` first if ``blame_low``."""
    lo, hi = getattr(profile, low), getattr(profile, high)
    if lo <= hi:
        return
    low_side = (low, f"expected {noun} ≤ {high} ({shown(hi)}), got {shown(lo)}")
    high_side = (high, f"expected {noun} ≥ {low} ({shown(lo)}), got {shown(hi)}")
    raise _CrossFieldError(*((low_side, high_side) if blame_low else (high_side, low_side)))


# The bounds of most parameters (what a profile error names as expected).
NonNegative = Annotated[float, Field(ge=0)]
Positive = Annotated[float, Field(gt=0)]
AtLeastOne = Annotated[int, Field(ge=1)]
NonNegativeInt = Annotated[int, Field(ge=0)]


class _Profile(KnownFields):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    description: str = ""


class ApiProfile(_Profile):
    """Per-request service times of the API tier in front of the engine (docs/model.md)."""

    workers: AtLeastOne
    connect_ms: NonNegative
    fixed_ms: NonNegative
    fixed_resolved_ms: NonNegative
    per_token_us: NonNegative
    rehydrate_us: NonNegative
    hops: NonNegativeInt
    hop_ms: NonNegative
    post_ms: NonNegative

    @model_validator(mode="after")
    def _resolved_is_cheaper(self) -> ApiProfile:
        # A resolved WS connection skips work; costing more than a fresh request would invert the model.
        _in_order(self, "fixed_resolved_ms", "fixed_ms", "a number", blame_low=True)
        return self


class TokenSpread(KnownFields):
    """Tokens of one kind of output when no hint names them (core/lengths.py).

    Lognormal around ``median`` with log-spread ``sigma``, clamped to ``[min, max]``;
    the request's own limit still cuts it.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    median: int = Field(ge=1, le=1_000_000)
    sigma: float = Field(default=0.6, ge=0, le=3)
    min: int = Field(default=1, ge=1, le=1_000_000)
    max: int = Field(default=1_000_000, ge=1, le=1_000_000)

    @model_validator(mode="after")
    def _ordered(self) -> TokenSpread:
        _in_order(self, "min", "median", "an integer", blame_low=True)
        _in_order(self, "median", "max", "an integer", blame_low=False)
        return self

    def tokens(self, z: float) -> int:
        """The length of a standard normal draw ``z``."""
        return lognormal_tokens(z, self.median, self.sigma, self.min, self.max)


class EffortTokens(KnownFields):
    """Median reasoning tokens per effort (``reasoning.effort``, ``reasoning_effort``,
    Messages ``output_config.effort``), and the log-spread of the draw around them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sigma: float = Field(default=0.6, ge=0, le=3)
    minimal: int = Field(default=16, ge=0, le=1_000_000)
    low: int = Field(default=128, ge=0, le=1_000_000)
    medium: int = Field(default=512, ge=0, le=1_000_000)
    high: int = Field(default=1536, ge=0, le=1_000_000)
    xhigh: int = Field(default=3072, ge=0, le=1_000_000)
    max: int = Field(default=6144, ge=0, le=1_000_000)

    @model_validator(mode="after")
    def _monotone(self) -> EffortTokens:
        # More effort never plans fewer tokens: the docs promise it, the tests check it.
        for low, high in pairwise(EFFORTS):
            _in_order(self, low, high, "an integer", blame_low=False)
        return self

    def median(self, effort: str) -> int | None:
        """The median of ``effort``, or None for an effort this table does not know."""
        return getattr(self, effort) if effort in EFFORTS else None


# Name patterns (fnmatch, case-insensitive, first match wins) → how likely the model is to
# pick a matching tool when it calls one; a tool no pattern matches weighs 1 (this table
# ends with "*", so none is unmatched).  An agent loop mostly runs, reads, edits and
# searches; it seldom plans, asks or ends the session.
DEFAULT_TOOL_WEIGHTS: dict[str, float] = {
    # Reaching outside loopback or into other servers: almost never in a benchmark.
    "web*": 0.02,
    "*fetch*": 0.02,
    "*mcp*": 0.1,
    # Tools that need state the simulated model never made (an image, a live session).
    "view_image": 0.02,
    "write_stdin": 0.02,
    "toolsearch": 0.1,
    # Spawning sub-agents: now and then.
    "task*": 0.2,
    "*agent*": 0.2,
    # Asking the user, planning, scheduling, ending the session: seldom.
    "*ask*": 0.05,
    "*question*": 0.05,
    "request_user*": 0.02,
    "exit*": 0.02,
    "enter*": 0.02,
    "end*": 0.02,
    "*plan*": 0.05,
    "*todo*": 0.1,
    "*goal*": 0.05,
    "*cron*": 0.02,
    "schedule*": 0.02,
    "send*": 0.05,
    # The loop itself: run, read, edit, search.
    "shell*": 4,
    "*bash*": 4,
    "exec*": 4,
    "*command*": 4,
    "read*": 3,
    "*view*": 3,
    "*patch*": 3,
    "*edit*": 3,
    "*write*": 2,
    "grep*": 2,
    "glob*": 2,
    "*search*": 2,
    "*find*": 2,
    "list*": 2,
    "ls": 2,
    # Any other tool an agent offers (skills, monitors, reports …).
    "*": 0.2,
}


class EngineProfile(_Profile):
    """Token timing and capacity of the simulated inference engine (docs/model.md)."""

    sustained_tps: Positive
    burst_tps: Positive
    burst_probability: float = Field(ge=0, le=1)
    burst_min_tokens: AtLeastOne
    burst_max_tokens: AtLeastOne
    prefill_tps: Positive
    base_ttft_ms: NonNegative
    max_streams: AtLeastOne
    aggregate_tps: Positive
    prefix_cache_entries: NonNegativeInt
    # How streams slow each other (batching, idle wake-up, busy admission, the TTFT spread):
    # docs/model.md's engine table and §2.  0, each one's default, keeps every older profile
    # as it was (no draw changes its first token).
    decode_slowdown_per_stream: float = Field(default=0.0, ge=0, le=10)
    ttft_per_active_ms: NonNegative = 0.0
    idle_wake_ms: NonNegative = 0.0
    busy_admit_ms: NonNegative = 0.0
    ttft_spread_ms: NonNegative = 0.0
    ttft_spread_per_active_ms: NonNegative = 0.0
    # Reasoning tokens decoded before the visible output of every response that names no
    # budget (docs/model.md "Reasoning"); 0 keeps a profile a non-reasoning model.
    reasoning_tokens: int = Field(default=0, ge=0, le=1_000_000)
    # The model's limits (docs/model.md §13): defaulted so a profile written before them
    # still loads; input + requested output above the window is context_length_exceeded.
    context_window_tokens: int = Field(default=DEFAULT_CONTEXT_WINDOW_TOKENS, ge=1)
    # the request bound of core/validation.py: no profile can allow more than a request may ask
    max_output_tokens: int = Field(default=DEFAULT_MAX_OUTPUT_TOKENS, ge=1, le=1_000_000)
    # The output policy without hints (docs/model.md "Output policy"): lengths drawn per
    # response and capped by the request's limit, reasoning per effort, which tool is called.
    text_tokens: TokenSpread = TokenSpread(median=250, sigma=0.8, min=8, max=4000)
    tool_call_tokens: TokenSpread = TokenSpread(median=60, sigma=0.6, min=8, max=2000)
    reasoning_effort_tokens: EffortTokens = EffortTokens()
    tool_weights: dict[str, Annotated[float, Field(ge=0)]] = Field(
        default_factory=lambda: dict(DEFAULT_TOOL_WEIGHTS)
    )

    @model_validator(mode="after")
    def _consistent(self) -> EngineProfile:
        _in_order(self, "sustained_tps", "burst_tps", "a number", blame_low=False)
        _in_order(self, "burst_min_tokens", "burst_max_tokens", "an integer", blame_low=False)
        _in_order(self, "max_output_tokens", "context_window_tokens", "an integer", blame_low=True)
        return self


Kind = Literal["api", "engine"]
_MODELS: dict[str, type[_Profile]] = {"api": ApiProfile, "engine": EngineProfile}


def available_profiles(kind: Kind) -> list[str]:
    """Short names of the shipped profiles of one kind (``optimized``, ``legacy``, …)."""
    prefix = f"{kind}-"
    return sorted(p.stem[len(prefix) :] for p in PROFILE_DIR.glob(f"{prefix}*.yaml"))


def combine_profile_args(api: str, engine: str, specs: Sequence[str]) -> tuple[str, str]:
    """Apply ``--profile`` values to the ``(api, engine)`` choice; returns the new pair.

    Each spec is one or more ``+``-separated names: a shipped short name of
    either kind (names are unique across kinds: ``legacy``, ``gpu-legacy``…), or
    ``api:REF`` / ``engine:REF`` for anything :func:`load_profiles` accepts.
    """
    chosen = {"api": api, "engine": engine}
    shipped = {kind: set(available_profiles(kind)) for kind in ("api", "engine")}
    for spec in specs:
        for part in (p.strip() for p in spec.split("+")):
            kind, colon, ref = part.partition(":")
            if colon and kind in chosen and ref:
                chosen[kind] = ref
                continue
            kinds = [k for k in ("api", "engine") if part in shipped[k]]
            if len(kinds) != 1:
                names = ", ".join(sorted(shipped["api"] | shipped["engine"]))
                raise ProfileError(
                    "--profile",
                    part,
                    f"expected a shipped profile ({names}) or api:REF / engine:REF, got {part!r}",
                )
            chosen[kinds[0]] = part
    return chosen["api"], chosen["engine"]


def load_profiles(
    api: str = "optimized",
    engine: str = "cerebras-spark",
    overrides: dict[str, str] | None = None,
) -> tuple[ApiProfile, EngineProfile]:
    """Load and validate both profiles, then apply ``--set`` overrides.

    ``api`` and ``engine`` are shipped short names, shipped file stems
    (``api-optimized``) or paths to YAML files.  Override keys are
    ``api.<param>`` or ``engine.<param>``; values are YAML scalars.  Every
    problem raises :class:`ProfileError` naming the file or override, the key,
    what was expected and what came.
    """
    read = {"api": _read("api", api), "engine": _read("engine", engine)}
    per_kind: dict[str, dict[str, str]] = {"api": {}, "engine": {}}
    for key, raw in (overrides or {}).items():
        kind, dot, param = key.strip().partition(".")
        if not dot or kind not in per_kind or not param:
            raise ProfileError(
                "--set",
                key,
                "expected a key of the form api.<param> or engine.<param>",
            )
        per_kind[kind][param] = raw
    api_profile, engine_profile = (
        _validate(_MODELS[kind], *read[kind], per_kind[kind], kind) for kind in ("api", "engine")
    )
    assert isinstance(api_profile, ApiProfile) and isinstance(engine_profile, EngineProfile)
    return api_profile, engine_profile


def _resolve(kind: Kind, ref: str) -> Path:
    shipped = PROFILE_DIR / f"{kind}-{ref}.yaml"
    if shipped.is_file():
        return shipped
    stem = PROFILE_DIR / f"{ref}.yaml"
    if ref.startswith(f"{kind}-") and stem.is_file():
        return stem
    path = Path(ref).expanduser()
    if path.is_file():
        return path
    names = ", ".join(available_profiles(kind))
    raise ProfileError(
        f"{kind} profile",
        ref,
        f"expected a shipped profile ({names}) or a path to a YAML file, got {ref!r}",
        profile=kind,
    )


def _read(kind: Kind, ref: str) -> tuple[str, dict[str, Any]]:
    path = _resolve(kind, ref)
    source = _display(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ProfileError(
            source, "", f"cannot read: {exc.strerror or exc}", profile=kind
        ) from None
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f"line {where.line + 1}: " if where is not None else ""
        raise ProfileError(source, "", f"{line}expected valid YAML", profile=kind) from None
    if not isinstance(data, dict):
        raise ProfileError(
            source,
            "",
            f"expected a mapping of parameters, got {kind_of(data)}",
            profile=kind,
        )
    return source, data


def _display(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _validate(
    model: type[_Profile],
    source: str,
    data: dict[str, Any],
    overrides: dict[str, str],
    kind: Kind,
) -> _Profile:
    merged = copy.deepcopy(data)
    for param, raw in overrides.items():
        head, dot, _ = param.partition(".")
        declared = model.model_fields.get(head)
        if dot and declared is not None and not isinstance(merged.get(head), dict):
            # one nested parameter overridden: the others keep the profile's default
            default = declared.get_default(call_default_factory=True)
            if isinstance(default, BaseModel):
                merged[head] = default.model_dump()
            elif isinstance(default, dict):
                merged[head] = dict(default)
        try:
            set_override(merged, param.split("."), raw)
        except ValueError as exc:
            raise ProfileError("--set", f"{kind}.{param}", str(exc)) from None
    try:
        return model.model_validate(merged)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        ctx_err = (err.get("ctx") or {}).get("error")
        if isinstance(ctx_err, _CrossFieldError):
            # A nested model's fields are named by their path from the profile.
            where = "".join(f"{p}." for p in err["loc"])
            side = ctx_err.primary
            if where + side[0] not in overrides and where + ctx_err.other[0] in overrides:
                side = ctx_err.other
            key, message = where + side[0], side[1]
        else:
            key, message = describe_error(err)
        # an unknown nested key (``--set api.bogus.x=1``) is named by its head only
        if key in overrides or any(param.startswith(f"{key}.") for param in overrides):
            raise ProfileError("--set", f"{kind}.{key}", message) from None
        raise ProfileError(source, key, message, profile=kind) from None
