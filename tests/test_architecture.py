"""The layers of docs/architecture.md, checked on the source (ast), not by convention.

Pure layers at the bottom (no sockets, no event loops, no clocks); every package may
import only from its own layer and the layers listed below it; no import cycles, even
through function-local imports.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Modules that do I/O or read clocks: a pure layer imports none of them.
IO_MODULES = {
    "asyncio",
    "socket",
    "ssl",
    "selectors",
    "httpx",
    "h11",
    "websockets",
    "uvicorn",
    "uvloop",
    "starlette",
    "time",
    "subprocess",
    "threading",
    "multiprocessing",
    "gevent",
    "locust",
    "sqlite3",
}

PURE = ("harness.wire", "harness.workload", "harness.client", "reference_server.core")

# What each package may import from the project (besides itself).  A layer absent from
# this table may import any harness layer except cli and locust_driver.
ALLOWED: dict[str, set[str]] = {
    "harness.wire": set(),
    "harness.workload": {"harness.wire"},
    "harness.client": {"harness.wire", "harness.workload"},
    "harness.metrics": {"harness.wire", "harness.workload"},
    "harness.transports": {"harness.wire", "harness.workload", "harness.client"},
    "harness.locust_driver": {
        "harness.wire",
        "harness.workload",
        "harness.client",
        "harness.metrics",
        "harness.run",
        "harness.report",
    },
    "reference_server.core": {"harness.wire"},
    "reference_server": {"harness.wire", "reference_server.core"},
}


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _package_of(module: str) -> str:
    """The layer a module belongs to: the longest prefix in ALLOWED, else its 2nd level."""
    for prefix in sorted(ALLOWED, key=len, reverse=True):
        if _within(module, prefix):
            return prefix
    return ".".join(module.split(".")[:2])


def _imports(path: Path) -> Iterator[tuple[str, bool]]:
    """(imported module, imported inside a function) for every import in the file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    local: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for inner in ast.walk(node):
                if isinstance(inner, ast.Import | ast.ImportFrom):
                    local.add(id(inner))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, id(node) in local
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module, id(node) in local
            # ``from harness.wire import events`` imports the module harness.wire.events
            for alias in node.names:
                yield f"{node.module}.{alias.name}", id(node) in local


def _sources() -> list[Path]:
    return sorted(p for pkg in ("harness", "reference_server") for p in (ROOT / pkg).rglob("*.py"))


MODULES = {_module_name(p): p for p in _sources()}


def _project_imports(path: Path) -> set[str]:
    return {name for name, _ in _imports(path) if name in MODULES}


def test_pure_layers_do_no_io() -> None:
    offenders = []
    for module, path in MODULES.items():
        if not any(_within(module, p) for p in PURE):
            continue
        for name, _ in _imports(path):
            if name.split(".")[0] in IO_MODULES:
                offenders.append(f"{module} imports {name}")
    assert not offenders, offenders


def test_layers_import_only_downward() -> None:
    offenders = []
    for module, path in MODULES.items():
        if module == "harness.__main__":
            continue
        layer = _package_of(module)
        allowed = ALLOWED.get(layer)
        for name in _project_imports(path):
            target = _package_of(name)
            if target == layer:
                continue
            if allowed is not None and target not in allowed:
                offenders.append(f"{module} ({layer}) imports {name}")
            elif allowed is None and target in ("harness.cli", "harness.locust_driver"):
                if layer == "harness.cli" and target == "harness.cli":
                    continue
                offenders.append(f"{module} imports {name}")
    assert not offenders, "\n".join(sorted(offenders))


def test_reference_server_imports_only_harness_wire() -> None:
    offenders = [
        f"{module} imports {name}"
        for module, path in MODULES.items()
        if module.startswith("reference_server")
        for name, _ in _imports(path)
        if _within(name.split(".")[0], "harness") and not _within(name, "harness.wire")
    ]
    assert not offenders, offenders


def test_only_the_entry_point_imports_cli() -> None:
    offenders = [
        f"{module} imports {name}"
        for module, path in MODULES.items()
        if not _within(module, "harness.cli") and module != "harness.__main__"
        for name, _ in _imports(path)
        if _within(name, "harness.cli")
    ]
    assert not offenders, offenders


def test_nothing_imports_locust_driver_outside_a_locust_process() -> None:
    offenders = [
        f"{module} imports {name}"
        for module, path in MODULES.items()
        if not _within(module, "harness.locust_driver")
        for name, _ in _imports(path)
        if _within(name, "harness.locust_driver")
    ]
    assert not offenders, offenders


def test_no_import_cycles() -> None:
    """Tarjan over the module graph, function-local imports included: a cycle hidden in a
    function is still a cycle (it only moves the failure from import time to call time)."""
    graph = {m: sorted(_project_imports(p) - {m}) for m, p in MODULES.items()}
    # A package's __init__ is imported with each of its submodules; not an edge of design.
    graph = {m: [t for t in ts if not _within(m, t)] for m, ts in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    assert not cycles, cycles


def test_the_cycle_check_can_fail() -> None:
    """The graph walk above sees function-local imports (where cycles used to hide)."""
    source = "def f():\n    from harness.wire import events\n"
    tmp = ROOT / "tests" / "_probe_module.py"
    tmp.write_text(source)
    try:
        assert ("harness.wire.events", True) in set(_imports(tmp))
    finally:
        tmp.unlink()


def test_reports_never_import_transports() -> None:
    offenders = [
        f"{module} imports {name}"
        for module, path in MODULES.items()
        if _within(module, "harness.report")
        for name in _project_imports(path)
        if _within(name, "harness.transports") or _within(name, "harness.run")
    ]
    assert not offenders, offenders
