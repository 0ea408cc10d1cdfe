"""Random quantities of a scenario: token counts, latencies, call counts.

In YAML a distribution is a bare number (a constant) or a mapping tagged by
``dist``::

    final_answer_tokens: 300
    tool_calls: {dist: uniform, min: 8, max: 12}
    tool_latency_ms: {dist: normal, mean: 120, sd: 30, min: 10}
    tool_output_tokens: {dist: lognormal, median: 400, p95: 2000}
    step_output_tokens: {dist: empirical, values: [40, 60, 60, 120]}

Sampling takes an injected :class:`random.Random` so that every draw is fixed by
the scenario seed; nothing here touches the global generator.

Validation errors raised here are :class:`pydantic_core.PydanticCustomError`
with a ``field`` in their context; :mod:`harness.workload.scenario` turns them into
one-line :class:`~harness.wire.errors.ScenarioError` messages.
"""

from __future__ import annotations

import math
import random
from statistics import NormalDist as _StdNormal
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, Field, model_validator

from harness.wire.validation import KnownFields, invalid, shown

DIST_KINDS = ("constant", "uniform", "normal", "lognormal", "empirical")

# z such that P(Z <= z) = 0.95 for a standard normal: sigma = ln(p95/median) / z.
_Z95 = _StdNormal().inv_cdf(0.95)
_STD = _StdNormal()


def scalars_as_text(value: Any) -> Any:
    """A mapping of text values (server overrides, headers) as YAML gave it, its scalars as
    text: ``500`` and ``X-Version: 2`` are what the user meant as text."""
    if not isinstance(value, dict):
        return value
    out = dict(value)
    for k, v in value.items():
        if isinstance(v, bool):
            out[k] = "true" if v else "false"
        elif isinstance(v, int | float):
            out[k] = str(v)
    return out


class StrictModel(KnownFields):
    """Base of every scenario model: strict types, frozen, and helpful unknown-key errors."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, allow_inf_nan=False)


class _DistBase(StrictModel):
    def sample(self, rng: random.Random) -> float:  # pragma: no cover - overridden
        raise NotImplementedError

    def mean(self) -> float:  # pragma: no cover - overridden
        raise NotImplementedError

    def lower_bound(self) -> tuple[str | None, float]:
        """The smallest value ``sample`` can return and the field that sets it (-inf if none)."""
        return None, -math.inf


class ConstantDist(_DistBase):
    """Always ``value``."""

    dist: Literal["constant"] = Field(
        default="constant",
        description="Distribution kind: constant (a bare number means the same).",
    )
    value: float = Field(description="The value every draw returns.")

    def sample(self, rng: random.Random) -> float:
        return self.value

    def mean(self) -> float:
        return self.value

    def lower_bound(self) -> tuple[str | None, float]:
        return "value", self.value


def constant_field(value: float, description: str) -> Any:
    """A scenario field holding a distribution that defaults to the constant ``value``."""
    return Field(default=ConstantDist(value=value), description=description)


class UniformDist(_DistBase):
    """Uniform on ``[min, max]``."""

    dist: Literal["uniform"] = Field(description="Distribution kind: uniform on [min, max].")
    min: float = Field(description="Smallest value.")
    max: float = Field(description="Largest value (greater than min).")

    @model_validator(mode="after")
    def _ordered(self) -> UniformDist:
        if not self.max > self.min:
            raise invalid("max", f"a number > min ({shown(self.min)})", self.max)
        return self

    def sample(self, rng: random.Random) -> float:
        return rng.uniform(self.min, self.max)

    def mean(self) -> float:
        return (self.min + self.max) / 2

    def lower_bound(self) -> tuple[str | None, float]:
        return "min", self.min


class NormalDist(_DistBase):
    """Normal with ``mean`` and ``sd``, optionally truncated to ``[min, max]``.

    Truncation is exact (inverse CDF over the allowed interval), not clamping, so
    the bounds do not pile probability mass onto themselves.
    """

    dist: Literal["normal"] = Field(
        description="Distribution kind: normal, optionally truncated to [min, max]."
    )
    mean_: float = Field(alias="mean", description="Mean (between min and max when given).")
    sd: float = Field(gt=0, description="Standard deviation (positive).")
    min: float | None = Field(
        default=None, description="Lower bound (exact truncation, not clamping)."
    )
    max: float | None = Field(
        default=None, description="Upper bound (exact truncation, not clamping)."
    )

    @model_validator(mode="after")
    def _bounds(self) -> NormalDist:
        if self.min is not None and self.max is not None and not self.max > self.min:
            raise invalid("max", f"a number > min ({shown(self.min)})", self.max)
        # A mean outside the bounds leaves almost no mass inside them, which makes
        # the distribution a surprise to whoever reads the scenario.
        if self.min is not None and self.mean_ < self.min:
            raise invalid("mean", f"a number ≥ min ({shown(self.min)})", self.mean_)
        if self.max is not None and self.mean_ > self.max:
            raise invalid("mean", f"a number ≤ max ({shown(self.max)})", self.mean_)
        return self

    def _cdf_bounds(self) -> tuple[float, float]:
        lo = 0.0 if self.min is None else _STD.cdf((self.min - self.mean_) / self.sd)
        hi = 1.0 if self.max is None else _STD.cdf((self.max - self.mean_) / self.sd)
        return lo, hi

    def sample(self, rng: random.Random) -> float:
        if self.min is None and self.max is None:
            return rng.gauss(self.mean_, self.sd)
        lo, hi = self._cdf_bounds()
        u = lo + (hi - lo) * rng.random()
        # inv_cdf is undefined at exactly 0 and 1; those draws have probability ~2^-53.
        u = min(max(u, 1e-300), 1.0 - 1e-16)
        x = self.mean_ + self.sd * _STD.inv_cdf(u)
        if self.min is not None:
            x = max(x, self.min)
        if self.max is not None:
            x = min(x, self.max)
        return x

    def mean(self) -> float:
        if self.min is None and self.max is None:
            return self.mean_
        a = -math.inf if self.min is None else (self.min - self.mean_) / self.sd
        b = math.inf if self.max is None else (self.max - self.mean_) / self.sd
        pdf_a = 0.0 if math.isinf(a) else _STD.pdf(a)
        pdf_b = 0.0 if math.isinf(b) else _STD.pdf(b)
        lo, hi = self._cdf_bounds()
        return self.mean_ + self.sd * (pdf_a - pdf_b) / (hi - lo)

    def lower_bound(self) -> tuple[str | None, float]:
        return ("min", self.min) if self.min is not None else (None, -math.inf)


class LognormalDist(_DistBase):
    """Log-normal given by its median and 95th percentile (the numbers people know).

    ``sigma = ln(p95 / median) / z95`` with ``z95 ≈ 1.645``; ``mu = ln(median)``.
    """

    dist: Literal["lognormal"] = Field(
        description="Distribution kind: log-normal given by its median and 95th percentile."
    )
    median: float = Field(gt=0, description="Median (positive).")
    p95: float = Field(description="95th percentile (greater than the median).")

    @model_validator(mode="after")
    def _ordered(self) -> LognormalDist:
        if not self.p95 > self.median:
            raise invalid("p95", f"a number > median ({shown(self.median)})", self.p95)
        return self

    @property
    def mu(self) -> float:
        return math.log(self.median)

    @property
    def sigma(self) -> float:
        return math.log(self.p95 / self.median) / _Z95

    def sample(self, rng: random.Random) -> float:
        return rng.lognormvariate(self.mu, self.sigma)

    def mean(self) -> float:
        return math.exp(self.mu + self.sigma**2 / 2)

    def lower_bound(self) -> tuple[str | None, float]:
        return "median", 0.0


class EmpiricalDist(_DistBase):
    """Draws uniformly from observed ``values`` (repeat a value to weight it)."""

    dist: Literal["empirical"] = Field(
        description="Distribution kind: draw uniformly from observed values."
    )
    values: list[float] = Field(description="Observed values; repeat a value to weight it.")

    @model_validator(mode="after")
    def _non_empty(self) -> EmpiricalDist:
        if not self.values:
            raise invalid("values", "a non-empty list of numbers", self.values)
        return self

    def sample(self, rng: random.Random) -> float:
        return rng.choice(self.values)

    def mean(self) -> float:
        return math.fsum(self.values) / len(self.values)

    def lower_bound(self) -> tuple[str | None, float]:
        return "values", min(self.values)


_AnyDist = Annotated[
    ConstantDist | UniformDist | NormalDist | LognormalDist | EmpiricalDist,
    Field(discriminator="dist"),
]


def _from_yaml(value: Any) -> Any:
    if isinstance(value, bool):
        # YAML turns `yes`/`on` into booleans; a count of `true` is a mistake, not 1.
        raise invalid(None, "a number or a mapping with 'dist'", value)
    if isinstance(value, int | float):
        return {"dist": "constant", "value": value}
    if isinstance(value, dict):
        if "dist" not in value:
            raise invalid(None, f"a mapping with 'dist' (one of {', '.join(DIST_KINDS)})", value)
        return value
    if isinstance(value, _DistBase):
        return value
    raise invalid(None, "a number or a mapping with 'dist'", value)


Distribution = Annotated[
    _AnyDist, BeforeValidator(_from_yaml, json_schema_input_type=float | _AnyDist)
]
"""A distribution field: a bare number or a ``{dist: ...}`` mapping."""
