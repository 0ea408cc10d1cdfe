"""ServerConfig: validated on construction; every option declared once, with a flag that round-trips."""

from __future__ import annotations

import argparse
import dataclasses
import re
from typing import Any

import pytest

from reference_server.app import create_app
from reference_server.cli import add_server_arguments, config_from_args, parser
from reference_server.core.config import ServerConfig, default_of, options
from reference_server.core.faults import FaultSpec, parse_fault_spec
from reference_server.core.options import ServerConfigError

# Set by the program, never by the user: the only fields without a flag.
INTERNAL = {"worker_index"}


def config_to_argv(config: ServerConfig) -> list[str]:
    """The command line that ``config_from_args`` turns back into ``config`` (defaults left out)."""
    argv: list[str] = []
    for name, _, opt in options():
        value = getattr(config, name)
        if opt.flag is not None and value != default_of(name):
            argv += _render(opt.flag, value)
    return argv


def _render(flag: str, value: Any) -> list[str]:
    if value is True:
        return [flag]
    if isinstance(value, dict):
        return [part for k, v in value.items() for part in (flag, f"{k}={v}")]
    if isinstance(value, tuple):
        return [part for v in value for part in (flag, v)]
    if isinstance(value, FaultSpec):
        return _render(flag, _fault_entries(value))
    return [flag, str(value)]


def _fault_entries(spec: FaultSpec) -> dict[str, str]:
    """The ``--fault`` entries that ``parse_fault_spec`` turns back into ``spec``."""
    default = FaultSpec()
    out = {f"error_rate.{status}": repr(rate) for status, rate in spec.error_rate.items()}
    for key in (k for k in FaultSpec.model_fields if k != "error_rate"):
        if getattr(spec, key) != getattr(default, key):
            out[key] = repr(getattr(spec, key))
    return out


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"max_body_bytes": 0},
            "max_body_bytes (--max-body-bytes): expected an integer ≥ 1, got 0",
        ),
        ({"port": 70000}, "port (--port): expected a port from 0 to 65535, got 70000"),
        ({"port": "8000"}, "port (--port): expected an integer, got '8000'"),
        ({"port": True}, "port (--port): expected an integer, got true"),
        (
            {"send_timeout_s": float("nan")},
            "send_timeout_s (--send-timeout-s): expected a number > 0, got nan",
        ),
        (
            {"ws_max_lifetime_s": 0.0},
            "ws_max_lifetime_s (--ws-max-lifetime-s): expected a number > 0, got 0.0",
        ),
        (
            {"rate_limit_rps": -1.0},
            "rate_limit_rps (--rate-limit-rps): expected a number > 0, got -1.0",
        ),
        (
            {"ws_fault_close_code": 1005},
            "ws_fault_close_code (--ws-fault-close-code): expected a WebSocket close code, got 1005",
        ),
        (
            {"sse_error_shape": "wide"},
            "sse_error_shape (--sse-error-shape): expected one of nested, flat, got 'wide'",
        ),
        (
            {"log_level": "WARNING"},
            "log_level (--log-level): expected one of critical, error, warning, info, debug, "
            "trace, got 'WARNING'",
        ),
        ({"api_keys": ["sk-a"]}, "api_keys (--api-key): expected a tuple, got [sk-a]"),
        ({"faults": {}}, "faults (--fault): expected a FaultSpec, got {}"),
        ({"worker_index": -1}, "worker_index: expected an integer ≥ 0, got -1"),
    ],
)
def test_a_bad_value_fails_on_construction_naming_the_option(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ServerConfigError) as info:
        ServerConfig(**kwargs)
    assert str(info.value) == message
    # In code too, not only from the command line: the app is never built on a bad value.
    with pytest.raises(ServerConfigError, match=re.escape(message)):
        create_app(ServerConfig(**kwargs))


def test_replace_validates_too() -> None:
    with pytest.raises(ServerConfigError, match=r"workers \(--workers\): expected an integer ≥ 1"):
        dataclasses.replace(ServerConfig(), workers=0)


def test_the_command_line_reports_the_flag() -> None:
    with pytest.raises(
        SystemExit, match=r"^error: --max-body-bytes: expected an integer ≥ 1, got 0$"
    ):
        config_from_args(parser().parse_args(["--max-body-bytes", "0"]))


def _other_value(name: str, hint: Any, default: Any) -> Any:
    """A valid value for the field that differs from its default."""
    special: dict[str, Any] = {
        "overrides": {"engine.sustained_tps": "500", "api.fixed_ms": "3"},
        "api_keys": ("sk-a", "sk-b"),
        "faults": parse_fault_spec(
            {"seed": 3, "error_rate.503": 0.1, "stall_rate": 0.2, "lifetime_s": 5}
        ),
        "api_profile": "legacy",
        "engine_profile": "gpu-legacy",
        "sse_error_shape": "flat",
        "log_level": "info",
        "store_path": "/tmp/x.sqlite3",
        "timing_log": "/tmp/timing.jsonl",
        "ws_lifetime_close_code": 4000,
        "ws_fault_close_code": 4001,
        "min_delta_interval_ms": 0.5,
        "default_output_tokens": 120,
        "rate_limit_rps": 7.5,
        "rate_limit_burst": 3.0,
        "tls_cert": "/tmp/cert.pem",
        "tls_key": "/tmp/key.pem",
    }
    if name in special:
        return special[name]
    if isinstance(default, bool):
        return not default
    if isinstance(default, int):
        return default + 3
    if isinstance(default, float):
        return default * 2.5
    if isinstance(default, str):
        return default + "-x"
    raise AssertionError(f"no sample value for {name}: {hint}")


def test_every_option_has_a_flag_and_round_trips(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOOPBENCH_API_KEYS", raising=False)
    values = {}
    for name, hint, opt in options():
        if name in INTERNAL:
            assert opt.flag is None
            continue
        assert opt.flag and opt.help, name
        values[name] = _other_value(name, hint, default_of(name))
        assert values[name] != default_of(name), name
    # --tls-self-signed excludes certificate files: it round-trips in a config of its own.
    alone = ServerConfig(tls_self_signed=values.pop("tls_self_signed"))
    assert config_from_args(parser().parse_args(config_to_argv(alone))) == alone
    config = ServerConfig(**values)
    argv = config_to_argv(config)
    assert config_from_args(parser().parse_args(argv)) == config
    # Defaults need no flags, and parse back to the defaults.
    assert config_to_argv(ServerConfig()) == []
    assert config_from_args(parser().parse_args([])) == ServerConfig()


def test_help_lists_every_flag_with_its_help() -> None:
    p = argparse.ArgumentParser()
    add_server_arguments(p)
    actions = {a.option_strings[0]: a for a in p._actions if a.option_strings}
    for name, _, opt in options():
        if opt.flag is not None:
            assert actions[opt.flag].help == opt.help, name
    for extra in ("--profile", "--api-key-file", "--faults-file"):
        assert actions[extra].help


def test_the_injected_lifetime_shortens_websockets_in_code_too() -> None:
    assert ServerConfig().ws_lifetime_s == 3600.0
    config = ServerConfig(faults=FaultSpec(lifetime_s=5.0))
    assert config.ws_lifetime_s == 5.0 and config.ws_max_lifetime_s == 3600.0
