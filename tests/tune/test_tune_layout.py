"""The shape of ``statemachine.tune``: modules without import circles, each of a readable size,
and the Ray surface at the bottom (it imports no other module of the integration)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TUNE = REPO / "statemachine" / "tune"
#: The size budget of a module (lines), from the developers' guide.
MAX_LINES = 400


def module_name(path: Path, repo: Path = REPO) -> str:
    """``statemachine.tune.ray_surface.trials`` for ``statemachine/tune/ray_surface/trials.py``
    (a package's ``__init__.py`` is the package)."""
    parts = list(path.relative_to(repo).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_modules(root: Path, repo: Path = REPO) -> dict[str, Path]:
    """Every module of the package at ``root`` (inside ``repo``), by dotted name."""
    return {module_name(path, repo): path for path in sorted(root.rglob("*.py"))}


def imports_of(path: Path, modules: dict[str, Path], repo: Path = REPO) -> set[str]:
    """The modules of ``modules`` that ``path`` imports anywhere: at the top, inside a
    function (deferred) or under ``TYPE_CHECKING``; ``from package import name`` counts as
    importing the module ``package.name`` when there is one."""
    name = module_name(path, repo)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, up level - 1
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                target = f"{base}.{alias.name}"
                if target in modules:
                    found.add(target)
                elif base in modules:
                    found.add(base)
    found.discard(name)
    return found


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph``: each strongly connected component of more than one
    module (Tarjan's algorithm), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def import_graph(root: Path, repo: Path = REPO) -> dict[str, set[str]]:
    """Which modules of the package at ``root`` each of its modules imports."""
    modules = package_modules(root, repo)
    return {name: imports_of(path, modules, repo) for name, path in modules.items()}


def test_the_tune_package_has_no_import_circles() -> None:
    graph = import_graph(TUNE)
    assert "statemachine.tune.ray_surface.trials" in graph["statemachine.tune.callback"]
    assert circles(graph) == []


def test_the_ray_surface_imports_nothing_else_of_the_integration() -> None:
    """``compat`` (every version gate) imports from the surface, never the reverse; the
    surface's modules import each other and the domain only."""
    graph = import_graph(TUNE)
    surface = {name: targets for name, targets in graph.items()
               if name.startswith("statemachine.tune.ray_surface")}
    assert len(surface) >= 5
    outside = {name: sorted(t for t in targets
                            if not t.startswith("statemachine.tune.ray_surface"))
               for name, targets in surface.items()}
    assert {name: t for name, t in outside.items() if t} == {}
    assert any(t.startswith("statemachine.tune.ray_surface")
               for t in graph["statemachine.tune.compat"])


def test_the_circle_finder_finds_a_circle_through_deferred_and_type_checking_imports(
    tmp_path: Path,
) -> None:
    """What the two tests above rely on: an import inside a function or under
    ``TYPE_CHECKING`` closes a circle as surely as one at the top."""
    package = tmp_path / "statemachine" / "demo"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from statemachine.demo import b\n")
    (package / "b.py").write_text("def f():\n    from statemachine.demo.c import g\n")
    (package / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import a\n")
    (package / "d.py").write_text("import statemachine.demo.a\n")
    graph = import_graph(package, tmp_path)
    assert graph["statemachine.demo.d"] == {"statemachine.demo.a"}
    assert circles(graph) == [["statemachine.demo.a", "statemachine.demo.b",
                               "statemachine.demo.c"]]
    (package / "c.py").write_text("")
    assert circles(import_graph(package, tmp_path)) == []


def test_every_tune_module_is_within_the_size_budget() -> None:
    sizes = {name: len(path.read_text(encoding="utf-8").splitlines())
             for name, path in package_modules(TUNE).items()}
    assert {name: lines for name, lines in sizes.items() if lines > MAX_LINES} == {}
