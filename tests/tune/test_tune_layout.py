"""The shape of ``statemachine.tune``: the Ray surface at the bottom (it imports no other module
of the integration). No circles and the size budget: tests/test_package_layout.py, for the whole
package."""

from __future__ import annotations

from tests.layout_support import PACKAGE, import_graph

TUNE = PACKAGE / "tune"


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
