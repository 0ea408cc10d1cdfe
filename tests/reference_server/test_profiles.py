"""Profile files, name resolution and ``--set`` overrides with one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from harness.wire.errors import LoopbenchError
from reference_server.core.profiles import (
    PROFILE_DIR,
    ApiProfile,
    EngineProfile,
    ProfileError,
    available_profiles,
    load_profiles,
)


def test_shipped_profiles_are_listed() -> None:
    assert available_profiles("api") == ["legacy", "optimized"]
    assert available_profiles("engine") == ["cerebras-spark", "gpu-legacy"]


@pytest.mark.parametrize("api", ["legacy", "optimized"])
@pytest.mark.parametrize("engine", ["cerebras-spark", "gpu-legacy"])
def test_every_shipped_combination_loads(api: str, engine: str) -> None:
    a, e = load_profiles(api, engine)
    assert isinstance(a, ApiProfile) and a.name == api
    assert isinstance(e, EngineProfile) and e.name == engine


def test_defaults_and_published_rates() -> None:
    api, engine = load_profiles()
    assert api.name == "optimized" and engine.name == "cerebras-spark"
    assert engine.sustained_tps == 1000 and engine.burst_tps == 4000
    assert load_profiles(engine="gpu-legacy")[1].sustained_tps == 65


@pytest.mark.parametrize("path", sorted(PROFILE_DIR.glob("*.yaml")), ids=lambda p: p.name)
def test_every_parameter_is_commented(path: Path) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    keys = yaml.safe_load(path.read_text(encoding="utf-8"))
    for key in keys:
        if key in ("name", "description"):
            continue
        index = next(i for i, line in enumerate(lines) if line.startswith(f"{key}:"))
        above = lines[index - 1]
        assert above.startswith("#") or lines[index - 2].startswith("#"), (
            f"{path.name}: {key} lacks a comment"
        )


def test_names_stems_and_paths_resolve(tmp_path: Path) -> None:
    assert load_profiles("api-legacy", "engine-gpu-legacy")[0].name == "legacy"
    custom = tmp_path / "mine.yaml"
    data = yaml.safe_load((PROFILE_DIR / "engine-cerebras-spark.yaml").read_text())
    data["name"] = "mine"
    data["sustained_tps"] = 2000
    custom.write_text(yaml.safe_dump(data))
    _, engine = load_profiles("optimized", str(custom))
    assert engine.name == "mine" and engine.sustained_tps == 2000


def test_overrides_apply_and_are_typed() -> None:
    api, engine = load_profiles(
        overrides={"api.fixed_ms": "12.5", "engine.sustained_tps": "500", "api.hops": "4"}
    )
    assert api.fixed_ms == 12.5 and api.hops == 4
    assert engine.sustained_tps == 500
    assert engine.burst_tps == 4000  # untouched


def _error(**kwargs: object) -> str:
    with pytest.raises(ProfileError) as info:
        load_profiles(**kwargs)  # type: ignore[arg-type]
    assert isinstance(info.value, LoopbenchError)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_override_errors_name_key_expected_and_received() -> None:
    assert (
        _error(overrides={"api.fixed_ms": "-3"})
        == "--set: api.fixed_ms: expected a number ≥ 0, got -3"
    )
    assert (
        _error(overrides={"api.fixed_ms": "fast"})
        == "--set: api.fixed_ms: expected a number, got 'fast'"
    )
    assert (
        _error(overrides={"engine.max_streams": "1.5"})
        == "--set: engine.max_streams: expected an integer, got 1.5"
    )
    assert _error(overrides={"engine.burst_probability": "2"}) == (
        "--set: engine.burst_probability: expected a number ≤ 1, got 2"
    )
    assert (
        _error(overrides={"engine.sustained_tps": "0"})
        == "--set: engine.sustained_tps: expected a number > 0, got 0"
    )


def test_override_cross_field_errors() -> None:
    assert _error(overrides={"engine.burst_tps": "900"}) == (
        "--set: engine.burst_tps: expected a number ≥ sustained_tps (1000), got 900"
    )
    # The message blames the override that was actually given, not the file.
    assert _error(overrides={"engine.sustained_tps": "5000"}) == (
        "--set: engine.sustained_tps: expected a number ≤ burst_tps (4000), got 5000"
    )
    assert _error(overrides={"engine.burst_min_tokens": "5000"}) == (
        "--set: engine.burst_min_tokens: expected an integer ≤ burst_max_tokens (1200), got 5000"
    )
    assert _error(overrides={"api.fixed_resolved_ms": "50"}) == (
        "--set: api.fixed_resolved_ms: expected a number ≤ fixed_ms (12), got 50"
    )


def test_nested_output_policy_overrides() -> None:
    _, engine = load_profiles(
        overrides={
            "engine.text_tokens.median": "100",
            "engine.reasoning_effort_tokens.high": "2000",
            "engine.tool_weights.read*": "9",
        }
    )
    assert engine.text_tokens.median == 100 and engine.text_tokens.max == 4000  # the rest kept
    assert engine.reasoning_effort_tokens.high == 2000
    assert engine.tool_weights["read*"] == 9 and engine.tool_weights["*bash*"] == 4


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("text_tokens.median", "0", "expected an integer ≥ 1, got 0"),
        ("text_tokens.min", "300", "expected an integer ≤ median (250), got 300"),
        # more effort never plans fewer tokens
        ("reasoning_effort_tokens.low", "99999", "expected an integer ≤ medium (512), got 99999"),
        ("tool_weights.x", "-1", "expected a number ≥ 0, got -1"),
        ("text_tokens.mean", "1", "unknown field (did you mean 'median'?)"),
    ],
)
def test_nested_override_errors(key: str, value: str, message: str) -> None:
    assert _error(overrides={f"engine.{key}": value}) == (f"--set: engine.{key}: {message}")


def test_unknown_and_malformed_override_keys() -> None:
    msg = _error(overrides={"api.fixd_ms": "3"})
    assert msg == "--set: api.fixd_ms: unknown field (did you mean 'fixed_ms'?)"
    assert _error(overrides={"fixed_ms": "3"}) == (
        "--set: fixed_ms: expected a key of the form api.<param> or engine.<param>"
    )
    assert _error(overrides={"gpu.fixed_ms": "3"}).startswith("--set: gpu.fixed_ms: expected a key")
    # an unknown parameter with a nested path is still the override's fault, not the file's
    assert _error(overrides={"api.bogus.x": "1"}).startswith("--set: api.bogus: unknown field")
    # a nested path under a number: one line, not a TypeError
    assert _error(overrides={"api.fixed_ms.x": "1"}) == (
        "--set: api.fixed_ms.x: expected a mapping at fixed_ms to set a field in, got 12"
    )


def test_unknown_profile_name() -> None:
    assert _error(api="fast") == (
        "api profile: fast: expected a shipped profile (legacy, optimized) or a path to a YAML file, got 'fast'"
    )
    assert _error(engine="h100").startswith(
        "engine profile: h100: expected a shipped profile (cerebras-spark, gpu-legacy)"
    )


def test_invalid_user_files(tmp_path: Path) -> None:
    base = yaml.safe_load((PROFILE_DIR / "api-optimized.yaml").read_text())
    extra = tmp_path / "extra.yaml"
    extra.write_text(yaml.safe_dump({**base, "turbo": True}))
    msg = _error(api=str(extra))
    assert msg.startswith(
        f"{extra}: turbo: unknown field (expected one of: name, description, workers"
    )

    missing = tmp_path / "missing.yaml"
    missing.write_text(yaml.safe_dump({k: v for k, v in base.items() if k != "hops"}))
    assert _error(api=str(missing)) == f"{missing}: hops: required field missing"

    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**base, "workers": 0}))
    assert _error(api=str(bad)) == f"{bad}: workers: expected an integer ≥ 1, got 0"

    not_mapping = tmp_path / "list.yaml"
    not_mapping.write_text("- 1\n- 2\n")
    assert (
        _error(api=str(not_mapping))
        == f"{not_mapping}: expected a mapping of parameters, got a list [1, 2]"
    )

    broken = tmp_path / "broken.yaml"
    broken.write_text("workers: [1,\n")
    assert _error(api=str(broken)).startswith(f"{broken}: line ")


def test_profile_option_picks_either_kind_by_name() -> None:
    from reference_server.core.profiles import combine_profile_args

    assert combine_profile_args("optimized", "cerebras-spark", []) == (
        "optimized",
        "cerebras-spark",
    )
    assert combine_profile_args("optimized", "cerebras-spark", ["legacy+gpu-legacy"]) == (
        "legacy",
        "gpu-legacy",
    )
    assert combine_profile_args("optimized", "cerebras-spark", ["gpu-legacy"]) == (
        "optimized",
        "gpu-legacy",
    )
    assert combine_profile_args("x", "y", ["api:my.yaml", "engine:e.yaml"]) == ("my.yaml", "e.yaml")
    with pytest.raises(ProfileError, match=r"--profile: turbo: expected a shipped profile \(cere"):
        combine_profile_args("optimized", "cerebras-spark", ["turbo"])


def test_serve_applies_the_profile_option() -> None:
    import argparse

    from reference_server.cli import add_server_arguments, config_from_args

    parser = argparse.ArgumentParser()
    add_server_arguments(parser)
    cfg = config_from_args(parser.parse_args(["--profile", "legacy+gpu-legacy"]))
    assert (cfg.api_profile, cfg.engine_profile) == ("legacy", "gpu-legacy")
    with pytest.raises(SystemExit, match="error: --profile: nope"):
        config_from_args(parser.parse_args(["--profile", "nope"]))
