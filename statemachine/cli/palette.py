"""Every colour the CLI uses: one entry per status (terminal style and picture fill), per
decision (the timeline's marker fill) and the timeline's node bands.

Tables colour status cells with the terminal style (rich); the state diagram and the
timeline fill with the hex colour. Change a colour here and every view follows.
"""

from __future__ import annotations

from typing import NamedTuple

from statemachine.domain.status import Decision, Status


class StatusColour(NamedTuple):
    """How one status is shown: in a terminal (a rich style) and in pictures (a hex fill)."""

    terminal: str
    fill: str


#: The status palette, in the order of the pictures' legends.
STATUS_PALETTE: dict[Status, StatusColour] = {
    Status.NEW: StatusColour("dim", "#d9d9d9"),
    Status.PENDING: StatusColour("yellow", "#f6c85f"),
    Status.RUNNING: StatusColour("green", "#6fbf73"),
    Status.PAUSED: StatusColour("cyan", "#8dd3c7"),
    Status.RESTORING: StatusColour("magenta", "#b07cc6"),
    Status.TERMINATED: StatusColour("blue", "#5b8def"),
    Status.ERROR: StatusColour("bold red", "#e4572e"),
}

#: Rich style per status name (tables).
STATUS_STYLE: dict[str, str] = {s.value: c.terminal for s, c in STATUS_PALETTE.items()}
#: Fill colour per status name (the state diagram, the timeline).
STATUS_COLOURS: dict[str, str] = {s.value: c.fill for s, c in STATUS_PALETTE.items()}

#: Marker fill per decision (the timeline). None is white: the legend draws failure kinds as
#: hollow shapes, and a white mark would read as one of them.
DECISION_COLOURS: dict[str, str] = {
    Decision.RETRY_RESTORE.value: "#17becf",
    Decision.RECOVER.value: "#222222",
    Decision.RECOVER_PREEMPTED.value: "#1f77b4",
    Decision.RECOVER_NOT_COUNTED.value: "#8c564b",
    Decision.RESTART_FROM_SCRATCH.value: "#ff7f0e",
    Decision.PREVIOUS_CHECKPOINT.value: "#9467bd",
    Decision.GIVE_UP.value: "#b00020",
}

#: Node band colours (the timeline), in order of the nodes' first appearance (then cycled).
NODE_COLOURS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948",
                "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac")
