"""The layers of docs/architecture.md, checked on the source (ast), not by convention.

Pure layers at the bottom (no sockets, no event loops, no clocks); every package may
import only from its own layer and the layers listed below it; no import cycles, even
through function-local imports.
"""

from __future__ import annotations

import ast
import functools
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

_PURE_HARNESS = {"harness.wire", "harness.workload", "harness.client"}
_MEASURING = _PURE_HARNESS | {"harness.transports", "harness.metrics", "harness.report"}

# Every layer and what it may import from the project besides itself: a module outside
# these layers, or an import not listed, fails test_layers_import_only_downward.
ALLOWED: dict[str, set[str]] = {
    "harness": set(),
    "harness.wire": set(),
    "harness.workload": {"harness.wire"},
    "harness.client": {"harness.wire", "harness.workload"},
    "harness.transports": set(_PURE_HARNESS),
    "harness.metrics": {"harness.wire", "harness.workload"},
    "harness.report": {"harness.wire", "harness.workload", "harness.metrics"},
    "harness.run": set(_MEASURING),
    "harness.locust_driver": _MEASURING - {"harness.transports"} | {"harness.run"},
    "harness.gate": _MEASURING | {"harness.run", "reference_server.core"},
    # reproduce and calibrate: the published model's figures, measured and fitted
    "harness.model": _MEASURING | {"harness.run", "reference_server.core"},
    # the proxy relays with asyncio alone
    "harness.record": _PURE_HARNESS | {"harness.run"},
    "harness.cli": _MEASURING
    | {
        "harness.run",
        "harness.gate",
        "harness.model",
        "harness.record",
        "reference_server",
        "reference_server.core",
    },
    "harness.__main__": {"harness.cli"},
    "reference_server.core": {"harness.wire"},
    "reference_server": {"harness.wire", "reference_server.core"},
}

#: what the wheel installs; the development folders below are never part of it
PRODUCT = ("harness", "reference_server")
# The project's own checks, outside the installed packages (`make bench`, `make bench-peers`,
# `make bench-proxy`, `make fuzz`, `make soak`): a new one may import the whole product, the
# product none of them.  Those that came out of harness/ keep the rules they had there.
DEVELOPMENT = ("bench", "tools")
_WHOLE_PRODUCT = set(ALLOWED)
_CHECKS = ALLOWED["harness.model"]  # what harness/tools/ (fuzz, soak, selfbench, peers) had
ALLOWED.update(
    {
        "bench": _WHOLE_PRODUCT,
        "bench.selfbench": _CHECKS | {"bench"},
        "bench.peers": _CHECKS | {"bench", "bench.selfbench"},
        # was harness/record/bench.py: the record layer's rules, the proxy itself, and the
        # measuring client's kernel stamps and paired bootstrap of the p99 shift
        "bench.proxy": ALLOWED["harness.record"]
        | {"harness.record", "harness.transports", "harness.metrics", "bench", "bench.selfbench"},
        # `make bench-master`: a real master and fake workers are Locust processes (below)
        "bench.master_sim": _WHOLE_PRODUCT | {"bench", "bench.selfbench", "bench.peers"},
        "tools": _WHOLE_PRODUCT,
        "tools.soak": _CHECKS | {"tools.soak_gate"},
        "tools.soak_gate": _CHECKS,
        "tools.fuzz": _CHECKS | {"bench", "tools.soak"},
        # `make real-engine` drives the peers as the peer bench does (its commands, offline
        # tokenizer and readers), against vLLM instead of the reference server; `make
        # real-engine-sim` judges its levels with the bench's busy-machine accounting
        "tools.real_engine": _WHOLE_PRODUCT | {"bench", "bench.peers", "bench.selfbench"},
    }
)


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@functools.cache
def _package_of(module: str) -> str:
    """The layer a module belongs to: the longest prefix in ALLOWED, else its 2nd level."""
    for prefix in sorted(ALLOWED, key=len, reverse=True):
        if _within(module, prefix):
            return prefix
    return ".".join(module.split(".")[:2])


@functools.cache
def _tree(path: Path) -> ast.Module:
    """Each file parsed once per process: every rule below walks the same ~300 trees (a parse
    per rule and per transitive look-up was most of this file's CPU time)."""
    return ast.parse(path.read_text(), filename=str(path))


def _imports(path: Path) -> Iterator[tuple[str, bool]]:
    """(imported module, imported inside a function) for every import in the file."""
    yield from _imports_of(path)


@functools.cache
def _imports_of(path: Path) -> tuple[tuple[str, bool], ...]:
    return tuple(_read_imports(_tree(path)))


def _read_imports(tree: ast.Module) -> Iterator[tuple[str, bool]]:
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
            # ``from harness.wire import events`` depends on the module harness.wire.events;
            # ``from harness.transports import make_transport`` on the package itself.
            names = [f"{node.module}.{alias.name}" for alias in node.names]
            submodules = [n for n in names if n in MODULES]
            if len(submodules) < len(names):
                yield node.module, id(node) in local
            for name in submodules:
                yield name, id(node) in local


def _sources() -> list[Path]:
    return sorted(p for pkg in PRODUCT + DEVELOPMENT for p in (ROOT / pkg).rglob("*.py"))


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
        layer = _package_of(module)
        if layer not in ALLOWED:
            offenders.append(f"{module} belongs to no layer of ALLOWED")
            continue
        for name in _project_imports(path):
            target = _package_of(name)
            if target != layer and target not in ALLOWED[layer]:
                offenders.append(f"{module} ({layer}) imports {name}")
    assert not offenders, "\n".join(sorted(offenders))


def test_no_relative_or_dynamic_imports() -> None:
    """The rules above read import statements: an import they cannot see would slip by."""
    offenders = []
    for module, path in MODULES.items():
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.ImportFrom) and node.level:
                offenders.append(f"{module}:{node.lineno} relative import")
            elif isinstance(node, ast.Call):
                fn = node.func
                called = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
                if called in ("import_module", "__import__") and module != "harness.cli.main":
                    offenders.append(f"{module}:{node.lineno} imports by name ({called})")
    assert not offenders, offenders


def test_the_entry_point_imports_by_name_only_modules_of_its_own_layer() -> None:
    """``harness.cli.main`` imports the module of the command being run by name (a fast
    ``--help``); every name in the command table is a module of ``harness.cli``, whose own
    imports the rules above read."""
    from harness.cli.commands import COMMANDS

    assert {c.module for c in COMMANDS} <= {
        m.removeprefix("harness.cli.") for m in MODULES if _within(m, "harness.cli")
    }
    text = (ROOT / "harness" / "cli" / "main.py").read_text()
    assert 'import_module(f"harness.cli.{command.module}")' in text


def test_the_product_never_imports_the_development_tools() -> None:
    """bench/ and tools/ are not in the wheel: an import of them from harness/ or
    reference_server/ would work in a checkout and fail after a pip install."""
    assert {_module_name(ROOT / dev / "__init__.py") for dev in DEVELOPMENT} <= set(MODULES)
    offenders = [
        f"{module} imports {name}"
        for module, path in MODULES.items()
        if module.split(".")[0] in PRODUCT
        for name, _ in _imports(path)
        if name.split(".")[0] in DEVELOPMENT
    ]
    assert not offenders, offenders


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


#: development modules that are themselves Locust processes (each imports locust first):
#: `make bench-master`'s timed master locustfile and its fake workers
LOCUST_PROCESSES = ("bench.master_sim.master_locustfile", "bench.master_sim.fake_workers")


def test_nothing_imports_locust_driver_outside_a_locust_process() -> None:
    for module in LOCUST_PROCESSES:
        imported = {name for name, _ in _imports(MODULES[module])}
        assert "locust" in imported or any(_within(n, "locust") for n in imported), module
    offenders = [
        f"{module} imports {name}"
        for module, path in MODULES.items()
        if not _within(module, "harness.locust_driver") and module not in LOCUST_PROCESSES
        for name, _ in _imports(path)
        if _within(name, "harness.locust_driver")
    ]
    assert not offenders, offenders


def test_no_import_cycles() -> None:
    """Tarjan over the module graph, function-local imports included: a cycle hidden in a
    function is still a cycle (it only moves the failure from import time to call time)."""
    graph = {m: sorted(_project_imports(p) - {m}) for m, p in MODULES.items()}
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


# Third-party modules heavy or optional enough to import only where they are used.
HEAVY = {
    "pandas", "matplotlib", "locust", "gevent", "uvloop", "nbformat", "nbclient", "cryptography",
}  # fmt: skip


def _local_imports(path: Path) -> Iterator[tuple[int, str]]:
    for fn in ast.walk(_tree(path)):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield node.lineno, alias.name
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                yield node.lineno, node.module


def _pulls_in_heavy(module: str, seen: set[str] | None = None) -> bool:
    """Does importing ``module`` import a HEAVY dependency (at module level, transitively)?"""
    seen = set() if seen is None else seen
    if module in seen or module not in MODULES:
        return False
    seen.add(module)
    for name, local in _imports(MODULES[module]):
        if local:
            continue
        if name.split(".")[0] in HEAVY or _pulls_in_heavy(name, seen):
            return True
    return False


def test_function_local_imports_only_defer_heavy_dependencies() -> None:
    """A function-local import hides a dependency (and used to hide four cycles): allowed only
    to keep a heavy optional dependency out of processes that do not need it, with a comment."""
    offenders = []
    for module, path in MODULES.items():
        lines = path.read_text().splitlines()
        for lineno, name in _local_imports(path):
            heavy = name.split(".")[0] in HEAVY or _pulls_in_heavy(name)
            commented = "#" in lines[lineno - 1] or lines[lineno - 2].strip().startswith("#")
            if not heavy:
                offenders.append(f"{module}:{lineno} imports {name} inside a function")
            elif not commented:
                offenders.append(f"{module}:{lineno} defers {name} without saying why")
    assert not offenders, "\n".join(offenders)
