"""Reading the package's shape from its source: every module, what each imports (at the top,
deferred inside a function, or under ``TYPE_CHECKING``), the import circles, the sizes. Used
by tests/test_package_layout.py (the whole package) and tests/tune/test_tune_layout.py (the Ray
surface)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "statemachine"
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


def module_sizes(root: Path = PACKAGE, repo: Path = REPO) -> dict[str, int]:
    """The number of lines of every module of the package at ``root``."""
    return {name: len(path.read_text(encoding="utf-8").splitlines())
            for name, path in package_modules(root, repo).items()}
