"""The shape of the whole ``statemachine`` package (issue 24's guard rails): no import circle
between its modules, counting imports deferred into a function and those under
``TYPE_CHECKING``, and every module within the size budget of the developers' guide unless
:data:`OVER_BUDGET` gives the reason. The size report is printed (``pytest -s`` shows it)."""

from __future__ import annotations

from pathlib import Path

from tests.layout_support import MAX_LINES, PACKAGE, circles, import_graph, module_sizes

#: Modules allowed over :data:`MAX_LINES` lines, each with the one-sentence reason (none now:
#: a module listed here that is back within the budget fails the test, so the list stays true).
OVER_BUDGET: dict[str, str] = {}


def _circle_text(found: list[list[str]], graph: dict[str, set[str]]) -> str:
    """Each circle as its modules and, for each, what it imports inside the circle."""
    lines = []
    for members in found:
        inside = set(members)
        lines.append(" <-> ".join(members))
        lines.extend(f"    {m} imports {', '.join(sorted(graph[m] & inside))}" for m in members)
    return "\n".join(lines)


def test_the_package_has_no_import_circles() -> None:
    graph = import_graph(PACKAGE)
    # The graph sees every kind of import: a top-level one, a deferred one (the CLI's
    # commands import the log inside their functions) and a TYPE_CHECKING one.
    assert "statemachine.log.connections" in graph["statemachine.log.store"]
    assert "statemachine.log.replay" in graph["statemachine.cli.reading"]
    assert "statemachine.log" in graph["statemachine.cli.commands.verify"]
    assert "statemachine.domain.node_tally" in graph["statemachine.cli.node_hosts"]
    assert len(graph) > 100
    found = circles(graph)
    assert not found, "import circles in statemachine:\n" + _circle_text(found, graph)


def test_the_circle_finder_finds_a_circle_through_deferred_and_type_checking_imports(
    tmp_path: Path,
) -> None:
    """What the circle test relies on: an import inside a function or under
    ``TYPE_CHECKING`` closes a circle as surely as one at the top, and the message names it."""
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
    found = circles(graph)
    assert found == [["statemachine.demo.a", "statemachine.demo.b", "statemachine.demo.c"]]
    assert "statemachine.demo.c imports statemachine.demo.a" in _circle_text(found, graph)
    (package / "c.py").write_text("")
    assert circles(import_graph(package, tmp_path)) == []


def _report(sizes: dict[str, int]) -> str:
    """The size report: every module over three quarters of the budget, largest first."""
    near = sorted(((lines, name) for name, lines in sizes.items() if lines > MAX_LINES * 3 // 4),
                  reverse=True)
    rows = [f"{lines:5d}  {name}" + (f"  (over: {OVER_BUDGET[name]})" if name in OVER_BUDGET
                                     else "")
            for lines, name in near]
    return (f"module sizes (budget {MAX_LINES} lines; {len(sizes)} modules, the largest "
            f"{max(sizes.values())}, {len(near)} above {MAX_LINES * 3 // 4}):\n" + "\n".join(rows))


def test_every_module_is_within_the_size_budget() -> None:
    sizes = module_sizes()
    print("\n" + _report(sizes))
    over = {name: lines for name, lines in sizes.items()
            if lines > MAX_LINES and name not in OVER_BUDGET}
    assert not over, (f"modules over {MAX_LINES} lines (split them by job, or list them in "
                      f"OVER_BUDGET with the reason): {over}")
    stale = {name: sizes.get(name) for name in OVER_BUDGET
             if sizes.get(name, 0) <= MAX_LINES}
    assert not stale, f"OVER_BUDGET lists modules that are gone or within budget: {stale}"
