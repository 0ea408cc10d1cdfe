"""The reference server's command line: argparse -> :class:`ServerConfig`.

Every flag comes from a field declaration in ``core/config.py`` (flag, help,
type, default, choices); nothing here is written per option.  Three inputs
exist only on the command line because they feed a field from somewhere else:
``--profile`` (short names for both profiles), ``--api-key-file`` and
``LOOPBENCH_API_KEYS`` (more keys), ``--faults-file`` (faults from YAML).
"""

from __future__ import annotations

import argparse
import os
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from harness.wire.exit_codes import UsageParser
from harness.wire.pairs import parse_key_values
from reference_server.core.config import ServerConfig, default_of, options
from reference_server.core.faults import (
    FaultSpec,
    FaultSpecError,
    parse_fault_args,
    parse_fault_spec,
)
from reference_server.core.options import Option, ServerConfigError
from reference_server.core.profiles import ProfileError, combine_profile_args

API_KEYS_ENV = "LOOPBENCH_API_KEYS"

# The command-line-only inputs, each added right after the field it feeds.
_EXTRA: dict[str, tuple[str, dict[str, Any]]] = {
    "engine_profile": (
        "--profile",
        {
            "action": "append",
            "default": [],
            "metavar": "NAME[+NAME]",
            "help": "shipped profile(s) by short name, either kind, e.g. legacy+gpu-legacy "
            "(api:PATH / engine:PATH for files); wins over --api-profile/--engine-profile",
        },
    ),
    "api_keys": (
        "--api-key-file",
        {
            "default": None,
            "metavar": "PATH",
            "help": "accept the bearer keys listed in this file, one per line (# comments)",
        },
    ),
    "faults": (
        "--faults-file",
        {
            "default": None,
            "metavar": "PATH",
            "help": "YAML file with a faults: mapping of the same keys (--fault entries win)",
        },
    ),
}


#: what the server answers, for both entry points' ``--help`` (the routes of ``app.py``)
SERVES = (
    "the Responses API (HTTP+SSE and WebSocket mode on /v1/responses), Chat Completions "
    "(/v1/chat/completions) and Anthropic Messages (/v1/messages), over a simulated API tier "
    "and engine"
)


def parser() -> argparse.ArgumentParser:
    """``python -m reference_server``'s parser."""
    out = UsageParser(
        prog="python -m reference_server",
        description=f"The loopbench reference server: {SERVES}.",
    )
    add_server_arguments(out)
    return out


def add_server_arguments(parser: argparse.ArgumentParser) -> None:
    groups: dict[str, Any] = {"": parser}
    for name, hint, opt in options():
        if opt.flag is None:
            continue
        group = groups.get(opt.group)
        if group is None:
            group = groups[opt.group] = parser.add_argument_group(opt.group)
        group.add_argument(opt.flag, dest=name, **_argument(hint, opt, default_of(name)))
        if name in _EXTRA:
            flag, kwargs = _EXTRA[name]
            group.add_argument(flag, **kwargs)


def _argument(hint: Any, opt: Option, default: Any) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"help": opt.help}
    if hint is bool:
        kwargs["action"] = "store_false" if default else "store_true"
        return kwargs
    if opt.metavar:
        kwargs["metavar"] = opt.metavar
    elif not opt.choices and opt.flag is not None:
        # Named for the flag, not the field: --default-tool-calls DEFAULT_TOOL_CALLS.
        kwargs["metavar"] = opt.flag.lstrip("-").replace("-", "_").upper()
    if _repeated(hint):
        kwargs.update(action="append", default=[])
        return kwargs
    kwargs.update(type=_scalar(hint), default=default)
    if opt.choices:
        kwargs["choices"] = opt.choices
    return kwargs


def _scalar(hint: Any) -> Any:
    """``float`` for ``float | None``: the type argparse converts a value with."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if args else hint


def _repeated(hint: Any) -> bool:
    return (typing.get_origin(hint) or hint) in (tuple, dict, FaultSpec)


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    """The config the parsed command line describes; bad values exit with a one-line error."""
    values: dict[str, Any] = {}
    for name, _, opt in options():
        if opt.flag is not None:
            values[name] = getattr(args, name)
    values["overrides"] = _key_values("--set", values["overrides"])
    values["api_profile"], values["engine_profile"] = _profile_choice(args)
    values["api_keys"] = _api_keys(
        values["api_keys"], args.api_key_file, os.environ.get(API_KEYS_ENV)
    )
    values["faults"] = _fault_spec(values["faults"], args.faults_file)
    try:
        return ServerConfig(**values)
    except ServerConfigError as exc:
        raise SystemExit(f"error: {exc.flag}: {exc.detail}") from None


def _key_values(flag: str, items: Sequence[str]) -> dict[str, str]:
    return parse_key_values(
        items, lambda item: SystemExit(f"error: {flag} {item!r}: expected KEY=VALUE")
    )


def _profile_choice(args: argparse.Namespace) -> tuple[str, str]:
    try:
        return combine_profile_args(args.api_profile, args.engine_profile, args.profile)
    except ProfileError as exc:
        raise SystemExit(f"error: {exc}") from None


def _api_keys(given: Sequence[str], path: str | None, env: str | None) -> tuple[str, ...]:
    """Keys from ``--api-key``, ``--api-key-file`` and the environment, in that order, deduplicated."""
    keys = [k.strip() for k in given if k.strip()]
    if env:
        keys += [k for k in env.replace(",", " ").split() if k]
    if path is not None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise SystemExit(f"error: --api-key-file {path}: cannot read: {exc}") from None
        from_file = [
            line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")
        ]
        if not from_file:
            raise SystemExit(f"error: --api-key-file {path}: expected one key per line, got none")
        keys += from_file
    return tuple(dict.fromkeys(keys))


def _fault_spec(items: Sequence[str], path: str | None) -> FaultSpec:
    entries: dict[str, Any] = {}
    try:
        if path is not None:
            entries.update(_fault_file(path))
        entries.update(parse_fault_args(list(items)))
        return parse_fault_spec(entries)
    except FaultSpecError as exc:
        where = f"{path}: " if path is not None and not items else ""
        raise SystemExit(f"error: {where}{exc}") from None


def _fault_file(path: str) -> dict[str, Any]:
    try:
        doc = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise SystemExit(f"error: --faults-file {path}: cannot read: {exc}") from None
    section = doc.get("faults", doc) if isinstance(doc, dict) else None
    if not isinstance(section, dict):
        raise SystemExit(
            f"error: --faults-file {path}: expected a mapping (or a faults: mapping), "
            f"got {type(doc).__name__}"
        )
    return section
