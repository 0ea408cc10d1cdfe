"""The one describer of invalid configuration values (harness/wire/validation.py): a pydantic
error in, ``(field, "expected X, got Y")`` out, for the cases each former dialect had (scenario
and trace files, profiles, gate rules, fault specs, server options, results documents)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    InstanceOf,
    TypeAdapter,
    ValidationError,
)

from harness.gate.rules import GateRulesError, parse_rules_text
from harness.wire.errors import LoopbenchError
from harness.wire.validation import (
    NAME_PATTERN,
    KnownFields,
    describe_error,
    invalid,
    set_override,
)
from harness.workload.scenario import load_scenario
from reference_server.core.config import ServerConfig
from reference_server.core.profiles import load_profiles


class _Inner(KnownFields):
    model_config = ConfigDict(extra="forbid", strict=True)

    rate: Annotated[float, Field(gt=0)] = 1.0


class _Doc(KnownFields):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    count: Annotated[int, Field(ge=1)] = 1
    share: Annotated[float, Field(ge=0, le=1)] = 0.5
    ratio: Annotated[float, Field(lt=2)] = 1.0
    name: str = Field(default="x", pattern=NAME_PATTERN)
    mode: Literal["open", "closed"] = "open"
    items: list[int] = Field(default_factory=lambda: [1], min_length=1)
    inner: _Inner = _Inner()
    by_status: dict[Literal[429, 503], float] = Field(default_factory=dict)
    needed: int


def _described(data: dict[str, Any], adapter: Any = _Doc, **kwargs: Any) -> tuple[str, str]:
    with pytest.raises(ValidationError) as info:
        if isinstance(adapter, TypeAdapter):
            adapter.validate_python(data)
        else:
            adapter.model_validate({"needed": 1, **data})
    return describe_error(info.value.errors(include_url=False)[0], **kwargs)


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        # bounds: one sign per kind, the noun from the bound's type
        ({"count": 0}, "count", "expected an integer ≥ 1, got 0"),
        ({"share": 1.5}, "share", "expected a number ≤ 1, got 1.5"),
        ({"share": -1}, "share", "expected a number ≥ 0, got -1"),
        ({"ratio": 3}, "ratio", "expected a number < 2, got 3"),
        ({"inner": {"rate": 0}}, "inner.rate", "expected a number > 0, got 0"),
        # types, in YAML's words and as the user wrote the value
        ({"count": "4"}, "count", "expected an integer, got '4'"),
        ({"count": True}, "count", "expected an integer, got true"),
        ({"share": float("nan")}, "share", "expected a finite number, got nan"),
        ({"inner": [1, 2]}, "inner", "expected a mapping, got [1, 2]"),
        # choices, with the closest one suggested
        (
            {"mode": "opne"},
            "mode",
            "expected one of open, closed, got 'opne' (did you mean 'open'?)",
        ),
        ({"by_status": {418: 0.1}}, "by_status[418]", "expected one of 429, 503, got 418"),
        # names, lists, missing and unknown fields
        ({"name": "My Run"}, "name", "expected lowercase letters, digits and '-', got 'My Run'"),
        ({"items": []}, "items", "expected a non-empty list, got []"),
        ({"needed": "1"}, "needed", "expected an integer, got '1'"),
        ({"inner": {"rte": 1}}, "inner.rte", "unknown field (did you mean 'rate'?)"),
    ],
)
def test_each_kind_of_problem_reads_expected_x_got_y(
    data: dict[str, Any], field: str, message: str
) -> None:
    assert _described(data) == (field, message)


def test_a_missing_field_and_a_validators_own_words() -> None:
    with pytest.raises(ValidationError) as info:
        _Doc.model_validate({})
    assert describe_error(info.value.errors()[0]) == ("needed", "required field missing")

    def fail(_: Any) -> Any:
        raise invalid("max", "a number > min (8)", 3.0)

    adapter = TypeAdapter(Annotated[dict[str, Any], BeforeValidator(fail)])
    assert _described({}, adapter) == ("max", "expected a number > min (8), got 3")


def test_type_words_where_the_input_is_not_yaml() -> None:
    """Server options are built in Python: a tuple is a tuple there, a model its class."""
    strict = ConfigDict(strict=True)
    adapter = TypeAdapter(tuple[str, ...], config=strict)
    assert _described(["a"], adapter)[1] == "expected a list, got [a]"
    assert _described(["a"], adapter, words={"tuple_type": "a tuple"})[1] == (
        "expected a tuple, got [a]"
    )
    assert _described({}, TypeAdapter(InstanceOf[_Inner])) == ("", "expected a _Inner, got {}")


def test_union_tags_are_left_out_of_the_path() -> None:
    class _Dist(BaseModel):
        dist: Literal["uniform"]
        min: Annotated[float, Field(ge=0)]

    adapter = TypeAdapter(dict[str, Annotated[_Dist, Field(discriminator="dist")]])
    problem = _described({"calls": {"dist": "uniform", "min": -1}}, adapter, tags=("uniform",))
    assert problem == ("calls.min", "expected a number ≥ 0, got -1")
    problem = _described({"calls": {"dist": "unifrom", "min": 1}}, adapter)
    assert problem == (
        "calls.dist",
        "expected one of uniform, got 'unifrom' (did you mean 'uniform'?)",
    )


def test_set_override_walks_creates_and_refuses_in_the_same_words() -> None:
    data: dict[str, Any] = {"load": {"stages": [{"rate": 1}]}, "name": "x"}
    set_override(data, ["load", "stages", "0", "rate"], "2.5")
    set_override(data, ["server", "set", "engine.sustained_tps"], "500")
    assert data["load"]["stages"][0]["rate"] == 2.5
    assert data["server"]["set"] == {"engine.sustained_tps": 500}
    with pytest.raises(ValueError, match=r"^expected an index below 1 into load.stages, got '3'$"):
        set_override(data, ["load", "stages", "3", "rate"], "1")
    with pytest.raises(
        ValueError, match=r"^expected a mapping at name to set a field in, got 'x'$"
    ):
        set_override(data, ["name", "first"], "1")


def test_the_same_bad_bound_reads_the_same_from_every_kind_of_file(tmp_path: Path) -> None:
    """Before: a gate file said "an integer >= 1", a profile "an integer >= 1, got '0'", a
    scenario "an integer at least 1" and a server option "an integer >= 1" for one mistake."""
    said: dict[str, str] = {}
    with pytest.raises(GateRulesError) as gate:
        parse_rules_text("validity: {min_rollouts: 0}", "gates.yaml")
    said["gate"] = str(gate.value)
    with pytest.raises(LoopbenchError) as profile:
        load_profiles(overrides={"api.workers": "0"})
    said["profile"] = str(profile.value)
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: s\nrollout:\n  count: 0\n")
    with pytest.raises(LoopbenchError) as run:
        load_scenario(scenario)
    said["scenario"] = str(run.value)
    with pytest.raises(LoopbenchError) as option:
        dataclasses.replace(ServerConfig(), workers=0)
    said["server option"] = str(option.value)
    assert {kind: text.rpartition(": ")[2] for kind, text in said.items()} == dict.fromkeys(
        said, "expected an integer ≥ 1, got 0"
    ), said
