"""The explorer's layers, read from the source files (``ast``, nothing imported): core <- views <- server <- ui.

- only ``explorer.ui`` (and ``app.py``) import Streamlit, directly or through what they import at import time;
- a module imports nothing from a layer above its own (at any level, lazily inside a function too);
- the module-level imports of the explorer have no cycle;
- the library (``packing``) never imports the explorer.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("core", "views", "server", "ui")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted((ROOT / "explorer").rglob("*.py"))}
LIBRARY = sorted((ROOT / "packing").rglob("*.py"))


def _imports(path: Path, top_level_only: bool) -> set[str]:
    """Modules ``path`` imports: every import, or only those that run at import (not inside a function, not
    under ``if TYPE_CHECKING``)."""
    tree = ast.parse(path.read_text(), str(path))
    name = _module_name(path) if path.is_relative_to(ROOT) else path.stem
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if top_level_only and isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                continue
            if top_level_only and isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                visit_list(child.orelse)
                continue
            if isinstance(child, ast.Import):
                found.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = package.split(".")
                    base = ".".join([*parts[: len(parts) - child.level + 1], base]).strip(".")
                found.add(base)
                found.update(f"{base}.{alias.name}" for alias in child.names)
            visit(child)

    def visit_list(nodes: list[ast.stmt]) -> None:
        for statement in nodes:
            visit(ast.Module(body=[statement], type_ignores=[]))

    visit(tree)
    return found


def _explorer_imports(path: Path, top_level_only: bool) -> set[str]:
    """The explorer's own modules among ``path``'s imports (a name imported from a package counts as the
    package when it is not a module)."""
    return {name for name in _imports(path, top_level_only) if name in MODULES}


def _layer(module: str) -> int:
    """0 core, 1 views, 2 server, 3 ui; the package root counts as core (it holds only a docstring)."""
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 else 0


@cache
def _loads_at_import(module: str) -> frozenset[str]:
    """Every module (the explorer's and others) importing ``module`` loads, following the explorer's own."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in MODULES:
            todo.extend(_imports(MODULES[name], top_level_only=True))
            todo.extend(".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1))  # parent packages
    return frozenset(seen)


BELOW_UI = sorted(m for m in MODULES if _layer(m) < 3)


@pytest.mark.parametrize("module", BELOW_UI)
def test_only_the_ui_imports_streamlit(module: str) -> None:
    direct = {n for n in _imports(MODULES[module], top_level_only=False) if n.split(".")[0] == "streamlit"}
    assert not direct, f"{module} imports {sorted(direct)}"
    loaded = {n for n in _loads_at_import(module) if n.split(".")[0] == "streamlit"}
    assert not loaded, f"importing {module} loads {sorted(loaded)}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_nothing_imports_upward(module: str) -> None:
    upward = {n for n in _explorer_imports(MODULES[module], top_level_only=False) if _layer(n) > _layer(module)}
    assert not upward, f"{module} ({LAYERS[_layer(module)]}) imports {sorted(upward)} from a layer above"


def test_the_explorer_has_no_import_cycle() -> None:
    graph = {m: _explorer_imports(p, top_level_only=False) - {m} for m, p in MODULES.items()}
    graph = {m: {n for n in deps if not m.startswith(n + ".")} for m, deps in graph.items()}  # a parent package
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            assert state.get(nxt) != 1, "import cycle: " + " -> ".join([*path, node, nxt])
            if nxt not in state:
                visit(nxt, [*path, node])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [])


@pytest.mark.parametrize("path", LIBRARY, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_library_never_imports_the_explorer(path: Path) -> None:
    found = {n for n in _imports(path, top_level_only=False) if n.split(".")[0] in ("explorer", "app")}
    assert not found, f"{path.relative_to(ROOT)} imports {sorted(found)}"


def test_every_module_is_in_a_layer() -> None:
    stray = [m for m in MODULES if m != "explorer" and m.split(".")[1] not in LAYERS]
    assert not stray, f"modules outside the layers: {stray}"


def test_the_checker_sees_a_violation(tmp_path: Path) -> None:
    """The reader finds imports at every level, and tells those that run at import from the others."""
    source = tmp_path / "probe.py"
    source.write_text(
        "from typing import TYPE_CHECKING\nimport numpy\nif TYPE_CHECKING:\n    import pandas\n"
        "def later():\n    import streamlit as st\n"
    )
    assert {"numpy", "pandas", "streamlit"} <= _imports(source, top_level_only=False)
    assert "streamlit" not in _imports(source, top_level_only=True)
    assert "pandas" not in _imports(source, top_level_only=True)


def test_importing_core_views_and_server_starts_nothing() -> None:
    """No thread, no worker process, no change to the allocator at import: each starts in an explicit function
    (``memo.start``, ``workers.start_soon``, ``warmup.prepare``)."""
    import subprocess
    import sys

    modules = [m for m in BELOW_UI if m != "explorer"]
    code = (
        "import importlib, threading, multiprocessing\n"
        f"for name in {modules!r}:\n    importlib.import_module(name)\n"
        "from explorer.server import memo\n"
        "print(len(threading.enumerate()), len(multiprocessing.active_children()), memo._STARTED.is_set())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["1", "0", "False"]


PUBLIC_STREAMLIT = {"streamlit", "streamlit.testing.v1", "streamlit.components.v1", "streamlit.column_config"}
"""Streamlit's documented import paths (``import streamlit as st`` is the one the page uses)."""


@pytest.mark.parametrize("path", [*sorted(MODULES.values()), ROOT / "app.py"], ids=str)
def test_only_streamlits_public_api(path: Path) -> None:
    """No module reaches into Streamlit's internals (``streamlit.runtime…``, ``streamlit.web…``): they change
    between releases without notice."""
    private = {
        n for n in _imports(path, top_level_only=False) if n.startswith("streamlit") and n not in PUBLIC_STREAMLIT
    }
    assert not private, f"{path.name} imports {sorted(private)}"
