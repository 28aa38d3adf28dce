"""The trial state machine as a Graphviz graph, read from the ``transitions`` Machine itself.

Nothing here restates the transition table: states, triggers, guards (in the order they are
tried), effects and decisions all come from :data:`statemachine.domain.machine.MACHINE`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from transitions import Machine
from transitions.core import Condition

from statemachine.cli.palette import STATUS_COLOURS
from statemachine.domain.machine import MACHINE

if TYPE_CHECKING:
    import graphviz

#: Formats the ``diagram`` command writes.
FORMATS = ("svg", "png", "dot")


class DotMissingError(Exception):
    """Graphviz's ``dot`` program is not installed; the ``.dot`` source was written instead."""

    def __init__(self, dot_file: Path) -> None:
        super().__init__(str(dot_file))
        self.dot_file = dot_file


def _name(func: object) -> str:
    return getattr(func, "__name__", repr(func))


def _guard_text(conditions: Sequence[Condition]) -> str:
    parts = [
        _name(c.func) if c.target else f"not {_name(c.func)}"
        for c in conditions
    ]
    return f"[{' and '.join(parts)}]" if parts else "[otherwise]"


def _decision(effects: Sequence[object]) -> str:
    for effect in effects:
        name = _name(effect)
        if name.startswith("decide_"):
            return name.removeprefix("decide_")
    return ""


def build_graph(machine: Machine = MACHINE) -> graphviz.Digraph:
    """A Graphviz digraph of ``machine``: one node per state, one edge per (trigger, source,
    destination) labelled with the guards in the order they are tried and the decision."""
    import graphviz  # loaded by the command that draws, not by trial-replay --help

    states = list(machine.states)
    graph = graphviz.Digraph("trial_state_machine", format="svg")
    graph.attr(rankdir="TB", fontname="Helvetica", fontsize="11", nodesep="0.5", ranksep="0.9",
               label="Trial state machine (from statemachine.domain.machine.MACHINE)",
               labelloc="t")
    graph.attr("node", shape="box", style="rounded,filled", fontname="Helvetica")
    graph.attr("edge", fontname="Helvetica", fontsize="9")
    for state in states:
        graph.node(state, state, fillcolor=STATUS_COLOURS.get(state, "white"),
                   peripheries="2" if state in ("TERMINATED", "ERROR") else "1")
    everywhere: list[str] = []
    for trigger, event in machine.events.items():
        sources = list(event.transitions)
        internal_only = all(t.dest is None for ts in event.transitions.values() for t in ts)
        if internal_only and set(sources) == set(states):
            effects = {_name(b) for ts in event.transitions.values() for t in ts for b in t.before}
            everywhere.append(f"{trigger} / {', '.join(sorted(effects))}")
            continue
        for source, transitions in event.transitions.items():
            by_dest: dict[str, list[str]] = defaultdict(list)
            numbered = len(transitions) > 1
            for index, t in enumerate(transitions, start=1):
                dest = t.dest if t.dest is not None else source
                line = _guard_text(t.conditions) if (t.conditions or numbered) else ""
                decision = _decision(t.before)
                if decision:
                    line = f"{line} → {decision}" if line else f"→ {decision}"
                elif t.dest is None and t.before:
                    effect_text = ", ".join(_name(b) for b in t.before)
                    line = f"{line} / {effect_text}" if line else f"/ {effect_text}"
                if numbered:
                    line = f"{index}. {line}"
                by_dest[dest].append(line)
            for dest, lines in by_dest.items():
                label = "\n".join([trigger, *[ln for ln in lines if ln]])
                graph.edge(source, dest, label=label)
    if everywhere:
        graph.node("_everywhere", "in every state:\n" + "\n".join(everywhere),
                   shape="note", style="filled", fillcolor="#f5f5f5")
    return graph


def write_diagram(path: Path, machine: Machine = MACHINE) -> Path:
    """Write the diagram to ``path`` (``.svg``, ``.png`` or ``.dot``) and return it.

    Raises :class:`DotMissingError` after writing ``path`` with a ``.dot`` suffix when
    Graphviz's ``dot`` program is needed and missing.
    """
    import graphviz

    fmt = path.suffix.lower().lstrip(".")
    graph = build_graph(machine)
    if fmt == "dot":
        path.write_text(graph.source, encoding="utf-8")
        return path
    try:
        data = graph.pipe(format=fmt)
    except graphviz.ExecutableNotFound:
        dot_file = path.with_suffix(".dot")
        dot_file.write_text(graph.source, encoding="utf-8")
        raise DotMissingError(dot_file) from None
    path.write_bytes(data)
    return path
