"""Import rules of DESIGN §2, checked on the source (ast), not by convention."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CORE_ALLOWED_THIRD_PARTY = {"pydantic", "orjson", "yaml", "numpy"}
IO_MODULES = {
    "asyncio",
    "socket",
    "httpx",
    "websockets",
    "uvicorn",
    "starlette",
    "time",
    "subprocess",
    "gevent",
    "locust",
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _files(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def test_core_is_pure() -> None:
    offenders = []
    for path in _files("harness/core"):
        for name in _imports(path):
            top = name.split(".")[0]
            if top in IO_MODULES:
                offenders.append(f"{path.relative_to(ROOT)} imports {name}")
            if top == "harness" and not (
                name.startswith("harness.core") or name == "harness.errors"
            ):
                offenders.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not offenders, offenders


def test_reference_server_uses_only_harness_core() -> None:
    offenders = []
    for path in _files("reference_server"):
        for name in _imports(path):
            if name.startswith("harness") and not (
                name.startswith("harness.core") or name == "harness.errors"
            ):
                offenders.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not offenders, offenders


def test_nothing_imports_locust_driver() -> None:
    offenders = []
    for package in ("harness", "reference_server"):
        for path in _files(package):
            if "locust_driver" in path.parts:
                continue
            for name in _imports(path):
                if name.startswith("harness.locust_driver"):
                    offenders.append(str(path.relative_to(ROOT)))
    assert not offenders, offenders


def test_reports_never_import_transports() -> None:
    offenders = []
    for path in _files("harness/report"):
        for name in _imports(path):
            if name.startswith("harness.transports") or name.startswith("harness.runner"):
                offenders.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not offenders, offenders
