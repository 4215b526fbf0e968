"""The library's layout: no import circle among its modules (imports inside functions and under TYPE_CHECKING
count), few modules directly in ``packing/``, short modules, a small documented top level, and every module either
public (on a reference page) or marked internal. The layers themselves are checked by ``lint-imports``
(pyproject.toml)."""

from __future__ import annotations

import ast
import inspect
import itertools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "packing"
MAX_TOP_LEVEL_MODULES = 14
MAX_LINES = 950


def _modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        name = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Every library module ``name`` imports, wherever the import stands."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            targets.add(base)
            targets.update(f"{base}.{alias.name}" for alias in node.names)
    return {target for target in targets if target in known and target != name}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle, if any (depth-first search). O(modules + imports)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_circle_among_the_library_modules() -> None:
    modules = _modules()
    # the package's front (packing/__init__.py) imports everything public and nothing imports it back
    graph = {name: _imports(name, path, set(modules)) - {"packing"} for name, path in modules.items()}
    assert _cycle(graph) is None


def test_the_cycle_finder_finds_a_circle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_nothing_in_the_library_imports_its_front() -> None:
    modules = _modules()
    importers = [
        name for name, path in modules.items() if name != "packing" and "packing" in _imports(name, path, {"packing"})
    ]
    assert importers == []


def test_few_modules_directly_in_the_package_and_none_long() -> None:
    top = sorted(path.name for path in ROOT.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top
    long = {
        str(path.relative_to(ROOT)): n
        for path in ROOT.rglob("*.py")
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


def _private_imports(path: Path) -> list[str]:
    """``from x import _y`` of another module's private name (``_y``; dunders are not private), wherever the
    import stands, for the library's own modules (a peer's private names are the peer's business)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] in ROOTS):
            found += [
                f"{path.name}:{node.lineno}: from {'.' * node.level}{node.module or ''} import {alias.name}"
                for alias in node.names
                if alias.name.startswith("_")
                and not alias.name.startswith("__")
                and not _is_module(f"{node.module or ''}.{alias.name}")
            ]
        elif isinstance(node, ast.Import):
            found += [
                f"{path.name}:{node.lineno}: import {alias.name}"
                for alias in node.names
                if alias.name.split(".")[0] in ROOTS
                and any(p.startswith("_") and not p.startswith("__") for p in alias.name.split("."))
                and not _is_module(alias.name)
            ]
    return found


def _is_module(dotted: str) -> bool:
    """Whether ``dotted`` names a module of the library or the explorer (a private module is imported by its
    name: the underscore says it is internal; a private name inside a module stays there)."""
    path = ROOT.parent.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


ROOTS = {"packing", "explorer"}
"""The packages whose private names stay inside their modules."""


def test_no_module_imports_another_modules_private_names() -> None:
    """What modules share is public in the module that owns it: no ``from packing.x import _y`` in the
    library, the explorer or the app."""
    sources = [*ROOT.rglob("*.py"), *(ROOT.parent / "explorer").rglob("*.py"), ROOT.parent / "app.py"]
    found = [line for path in sources for line in _private_imports(path)]
    assert found == []


def test_the_private_import_finder_finds_them(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "from packing.core._samples import _joined, Samples\nfrom .rows import _x\nimport packing._private\n"
        "from transformers import _theirs\nfrom packing import __version__\n"
    )
    assert _private_imports(module) == [
        "m.py:1: from packing.core._samples import _joined",
        "m.py:2: from .rows import _x",
        "m.py:3: import packing._private",
    ]


TESTS = Path(__file__).resolve().parent
TEST_FOLDERS_BEYOND_PACKAGES = {"integrations", "peers", "explorer", "helpers"}
"""Folders of tests that are not one package's: the top-level modules' doors, the peers' own code, the app, and
the shared fixtures."""


def test_the_tests_mirror_the_packages() -> None:
    """Every package of the library has its folder of tests, every folder of tests is a package's or one of the
    few others, no two test modules share a name, and the explorer's are named for the layer they test."""
    packages = {path.parent.name for path in ROOT.glob("*/__init__.py")} - {"_workloads"}
    folders = {path.name for path in TESTS.iterdir() if path.is_dir() and not path.name.startswith((".", "_"))}
    assert packages <= folders, sorted(packages - folders)
    assert folders <= packages | TEST_FOLDERS_BEYOND_PACKAGES, sorted(folders - packages - TEST_FOLDERS_BEYOND_PACKAGES)
    names = [path.name for path in TESTS.rglob("test_*.py")]
    assert len(names) == len(set(names)), sorted({name for name in names if names.count(name) > 1})
    layers = ("test_core_", "test_views_", "test_server_", "test_ui_")
    explorer = [path.name for path in (TESTS / "explorer").glob("test_*.py")]
    assert {name for name in explorer if not name.startswith(layers)} <= {"test_doctests.py", "test_layers.py"}


def test_no_test_module_imports_another() -> None:
    """Tests share fixtures through ``tests/helpers`` (and conftest), never by importing another test module."""
    found = []
    for path in TESTS.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            found += [f"{path.relative_to(TESTS)}: {n}" for n in names if n.rpartition(".")[2].startswith("test_")]
    assert found == []


MAX_TOP_LEVEL_NAMES = 40
PUBLIC_MODULES = {
    "packing",
    "packing.batches",
    "packing.comparison",
    "packing.core",
    "packing.errors",
    "packing.hf",
    "packing.layouts",
    "packing.layouts.audit",
    "packing.layouts.common",
    "packing.layouts.flattening",
    "packing.layouts.megatron",
    "packing.layouts.native",
    "packing.layouts.preference",
    "packing.layouts.segment_ids",
    "packing.layouts.torchtune",
    "packing.layouts.trl",
    "packing.optimal",
    "packing.planning",
    "packing.ray",
    "packing.reading",
    "packing.recipe",
    "packing.strategies",
    "packing.streaming",
    "packing.text",
    "packing.torch",
    "packing.trees",
    "packing.trl",
    "packing.vision",
    "packing.weighting",
}
"""The modules a user imports from: each has a reference page (``::: module`` or ``::: module.name`` under
``docs/reference``); every other module is internal, a part of its name private (``_name``)."""
REFERENCE = ROOT.parent / "docs" / "reference"


def _referenced() -> set[str]:
    """Every ``::: packing...`` directive of the reference pages."""
    return {m for path in REFERENCE.glob("*.md") for m in re.findall(r"^::: (packing[\w.]*)", path.read_text(), re.M)}


def _module_of(dotted: str, modules: set[str]) -> str:
    """The longest prefix of ``dotted`` that is a library module."""
    parts = dotted.split(".")
    return next(".".join(parts[:i]) for i in range(len(parts), 0, -1) if ".".join(parts[:i]) in modules)


def _attribute_docstring(name: str) -> bool:
    """Whether some library module assigns ``name`` at module level with a string right after it (how a type alias
    such as a ``Literal`` is documented)."""
    for path in ROOT.rglob("*.py"):
        body = ast.parse(path.read_text()).body
        for node, after in itertools.pairwise(body):
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AnnAssign)
                else []
            )
            if any(isinstance(t, ast.Name) and t.id == name for t in targets) and (
                isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                return True
    return False


def test_the_top_level_is_a_few_documented_names() -> None:
    """``import packing`` gives the verbs, ``Recipe``, the result types, the base errors and one ``Literal`` per
    set of choices: at most 40 names, each with a docstring and a place on a reference page."""
    import packing

    assert len(packing.__all__) <= MAX_TOP_LEVEL_NAMES, len(packing.__all__)
    assert len(set(packing.__all__)) == len(packing.__all__)
    referenced = _referenced()
    assert sorted(name for name in packing.__all__ if f"packing.{name}" not in referenced) == []
    undocumented = []
    for name in packing.__all__:
        value = getattr(packing, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            documented = bool(value.__doc__ and value.__doc__.strip())
        else:  # a type alias: its docstring is the string after its assignment
            documented = _attribute_docstring(name)
        if not documented:
            undocumented.append(name)
    assert undocumented == []


def test_every_public_module_exports_what_it_names() -> None:
    """Each public module's ``__all__`` names exist in it, once."""
    import importlib

    for module_name in sorted(PUBLIC_MODULES):
        if (
            module_name in {"packing.torch", "packing.ray", "packing.trl"}
            and importlib.util.find_spec(module_name[8:]) is None
        ):
            continue  # an optional peer not installed
        module = importlib.import_module(module_name)
        names = getattr(module, "__all__", None)
        if names is None:
            continue
        assert len(set(names)) == len(names), module_name
        assert [name for name in names if not hasattr(module, name)] == [], module_name


def test_internal_modules_are_named_so_and_the_reference_shows_only_public_ones() -> None:
    """Every module is public (``PUBLIC_MODULES``, each on a reference page, no part of its name private) or
    internal (a part of its name starts with ``_``), and the reference pages document only public modules."""
    modules = _modules()
    assert set(modules) >= PUBLIC_MODULES, sorted(PUBLIC_MODULES - set(modules))
    private = {name for name in modules if any(part.startswith("_") for part in name.split("."))}
    assert sorted(set(modules) - PUBLIC_MODULES - private) == []
    assert sorted(PUBLIC_MODULES & private) == []
    shown = {_module_of(dotted, set(modules)) for dotted in _referenced()}
    assert sorted(shown - PUBLIC_MODULES) == []
    assert sorted(PUBLIC_MODULES - shown) == []
