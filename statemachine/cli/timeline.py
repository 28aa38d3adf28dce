"""The timeline's model: one row per trial, spans per status, a marker per failure, the
driver epochs and the stretches when the driver was down.

The x axis is time since the experiment's first event, so a crash gap shows as one; with
``--order`` it is the event order instead (one step per event), where a burst of restore
retries is as readable as an hour of training. Each new driver epoch is marked (a resume after
a crash or a clean restart), and the time between the last event of a crashed driver and the
first of the next one is a :class:`DriverDown` (the pictures shade it: the spans drawn through
it are what the log last knew, not what happened). The model is built from the recorded
columns of the log (status before/after, decision, error type), so a row whose payload is
corrupted still draws; the node an attempt ran on comes from the payloads of its start and
failure events. The pictures are drawn by :mod:`statemachine.cli.timeline_svg` (SVG and the
HTML page) and :mod:`statemachine.cli.timeline_png` (matplotlib).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from statemachine.cli.palette import NODE_COLOURS
from statemachine.domain.nodes import NodeRef

#: Marker shape per typed failure kind (SVG path around (0, 0), radius about 6).
MARKER_SHAPES: dict[str, str] = {
    "RestoreError": "M0,-7 L7,0 L0,7 L-7,0 Z",  # diamond
    "TrainingError": "M-6,0 A6,6 0 1,0 6,0 A6,6 0 1,0 -6,0 Z",  # circle
    "ActorError": "M0,-7 L7,6 L-7,6 Z",  # triangle
    "AbortError": "M-6,-6 L6,6 M6,-6 L-6,6",  # cross
}
#: Matplotlib marker per failure kind, the same shapes as the SVG ones.
MPL_MARKERS: dict[str, str] = {
    "RestoreError": "D", "TrainingError": "o", "ActorError": "^", "AbortError": "X",
}

#: Statuses in which a trial's actor lives on the node it started on.
_ON_A_NODE = frozenset({"RUNNING", "RESTORING"})

FORMATS = ("html", "svg", "png")


class RecordedEvent(Protocol):
    """The columns of a stored event the timeline reads."""

    @property
    def position(self) -> int: ...

    @property
    def trial_id(self) -> str: ...

    @property
    def seq(self) -> int: ...

    @property
    def type_name(self) -> str: ...

    @property
    def error_type(self) -> str | None: ...

    @property
    def status_before(self) -> str | None: ...

    @property
    def status_after(self) -> str | None: ...

    @property
    def decision(self) -> str | None: ...

    @property
    def epoch(self) -> int: ...

    @property
    def recorded_at(self) -> datetime: ...


@dataclass(frozen=True)
class Span:
    """A trial in one status from event index ``start`` (inclusive) to ``end`` (exclusive)."""

    status: str
    start: int
    end: int
    node: str | None = None
    """Where the trial's actor ran during the span (``None``: no actor, or not known)."""


@dataclass(frozen=True)
class Marker:
    """A failure at event index ``x``: its typed kind, the decision and a one-line detail."""

    x: int
    kind: str
    decision: str
    detail: str


@dataclass
class Row:
    """One trial's row."""

    trial_id: str
    spans: list[Span] = field(default_factory=list)
    markers: list[Marker] = field(default_factory=list)
    status: str = "NEW"


@dataclass(frozen=True)
class EpochMark:
    """Driver epoch ``epoch`` begins at event index ``x``."""

    x: int
    epoch: int
    kind: str | None = None
    """How the epoch's driver began: ``fresh``, ``restore`` or ``None`` (not recorded)."""

    @property
    def label(self) -> str:
        """``driver epoch 2 (restore)``, ``driver epoch 2 (fresh run)`` or ``driver epoch 2``."""
        how = {"fresh": " (fresh run)", "restore": " (restore)",
               "ingest": " (ingested from Ray's files)"}.get(self.kind or "", "")
        return f"driver epoch {self.epoch}{how}"


@dataclass(frozen=True)
class DriverDown:
    """The driver of ``epoch`` crashed after event index ``last`` and the driver of
    ``next_epoch`` recorded its first event at index ``first``: nobody was watching between."""

    last: int
    first: int
    epoch: int
    next_epoch: int

    @property
    def label(self) -> str:
        """What the picture says over the stretch."""
        return "driver down"

    @property
    def detail(self) -> str:
        """The hover text."""
        return (f"driver down: the driver of epoch {self.epoch} crashed after its last event; "
                f"epoch {self.next_epoch} took over (the spans here are what the log last "
                "knew)")


@dataclass(frozen=True)
class Selection:
    """Which trials a timeline draws: at most ``limit`` (``None``: every trial), the
    ``failed`` ones first (the trials that failed first, in the order of their first
    failure, at most ``limit``), then the others in order of first appearance. When every
    trial fits, the rows are in order of first appearance, as without a selection."""

    limit: int | None = None
    failed: tuple[str, ...] = ()


@dataclass
class TimelineModel:
    """Everything the picture shows."""

    experiment: str
    rows: list[Row]
    n_events: int
    epochs: list[EpochMark]
    first_at: datetime | None
    last_at: datetime | None
    nodes: list[str] = field(default_factory=list)
    """Every node a span ran on, in order of first appearance (the band colours' order)."""
    times: dict[int, datetime] = field(default_factory=dict)
    """When the events (by index) the picture places were recorded: the drawn rows' events,
    the first and last, and those on either side of a new driver epoch (not every event's:
    memory stays bounded by what is drawn)."""
    by_time: bool = True
    """x is time since the first event (else the event order)."""
    down: list[DriverDown] = field(default_factory=list)
    """The stretches between a crashed driver's last event and the next driver's first."""
    n_trials: int = 0
    """How many trials the experiment has (the rows are those drawn)."""
    failed_drawn: int = 0
    """How many of the rows are drawn first because they failed (only when some trials are
    left out)."""

    @property
    def left_out(self) -> int:
        """How many trials the picture leaves out."""
        return max(self.n_trials - len(self.rows), 0)

    @property
    def drawn_note(self) -> str:
        """What the picture draws of the experiment's trials, in one line (empty when it
        draws every trial)."""
        if not self.left_out:
            return ""
        drawn = len(self.rows)
        which = []
        if self.failed_drawn:
            which.append(f"the {self.failed_drawn:,} that failed first")
        rest = drawn - self.failed_drawn
        if rest and which:
            which.append(f"then {rest:,} other{'s' if rest != 1 else ''} in order of first "
                         "appearance")
        elif rest:
            which.append(f"the first {rest:,} in order of first appearance")
        return (f"drawn {drawn:,} of {self.n_trials:,} trials: {', '.join(which)}; "
                f"{self.left_out:,} left out (--trials 0 draws all)")

    def x(self, index: float) -> float:
        """Where event ``index`` sits on the x axis: seconds since the first event (time
        view; an index past the last event is the last event's time), else ``index``."""
        if not self.by_time or not self.times:
            return index
        i = min(max(int(index), 0), self.n_events - 1)
        return max((self.times[i] - self.times[0]).total_seconds(), 0.0)

    @property
    def x_end(self) -> float:
        """The end of the x axis."""
        return self.x(self.n_events) if self.by_time else float(max(self.n_events, 1))

    def down_x(self, down: DriverDown) -> tuple[float, float]:
        """Where a driver-down stretch starts and ends on the x axis: from the crashed
        driver's last event to the next driver's first (time view); in the event order, the
        boundary between the two (a stretch of no width: the pictures give it one)."""
        if self.by_time:
            return self.x(down.last), self.x(down.first)
        return float(down.first), float(down.first)

    def node_colour(self, node: str) -> str:
        """The band colour of ``node``."""
        return NODE_COLOURS[self.nodes.index(node) % len(NODE_COLOURS)]


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _node(ev: Any) -> str | None:
    """The node named by a start or failure event's payload, as people read it."""
    if ev.type_name not in ("TrialStarted", "TrialFailed"):
        return None
    try:
        data = ev.payload.get("node")
        node = NodeRef.from_dict(data) if isinstance(data, dict) else None
    except Exception:  # a corrupted payload still draws, without its node
        return None
    return node.describe() if node is not None and node.known else None


def build_model(
    experiment: str, events: Iterable[RecordedEvent],
    kinds: Mapping[int, str | None] | None = None,
    ends: Mapping[int, str] | None = None,
    select: Selection | None = None,
) -> TimelineModel:
    """Lay out ``events`` (in log order) as rows, spans, markers and epoch marks; ``kinds``
    (epoch -> ``fresh``/``restore``) labels each epoch with how its driver began, ``ends``
    (epoch -> ``clean``/``crashed``/``open``, :func:`statemachine.cli.reading.session_ends`)
    says which drivers crashed: the stretch until the next driver's first event is a
    :class:`DriverDown`. ``select`` bounds the rows (:class:`Selection`): the events of
    the trials left out are counted and placed on the axis, nothing of them is kept, so
    ``events`` can stream."""
    select = select or Selection()
    failed = set(select.failed)
    others = None if select.limit is None else max(select.limit - len(failed), 0)
    rows: dict[str, Row] = {}
    seen: set[str] = set()
    open_span: dict[str, tuple[str, int, str | None]] = {}
    node_of: dict[str, str | None] = {}
    nodes: dict[str, None] = {}
    epochs: list[EpochMark] = []
    down: list[DriverDown] = []
    first_at = last_at = None
    times: dict[int, datetime] = {}
    index = -1
    when: datetime | None = None
    for index, ev in enumerate(events):
        before = when
        # An unreadable stored time (a broken row) is drawn at the time before it.
        moment = ev.recorded_at if getattr(ev, "damage", None) is None else last_at
        if first_at is None:
            first_at = moment
        last_at = moment
        when = moment or ev.recorded_at
        if index == 0:
            times[0] = when
        if not epochs or epochs[-1].epoch != ev.epoch:
            if before is not None:
                times[index - 1] = before
            times[index] = when
            if epochs and (ends or {}).get(epochs[-1].epoch) == "crashed":
                down.append(DriverDown(index - 1, index, epochs[-1].epoch, ev.epoch))
            epochs.append(EpochMark(index, ev.epoch, (kinds or {}).get(ev.epoch)))
        row = rows.get(ev.trial_id)
        if row is None:
            if ev.trial_id in seen:
                continue
            seen.add(ev.trial_id)
            if ev.trial_id not in failed:
                if others is not None and others <= 0:
                    continue
                others = None if others is None else others - 1
            row = rows[ev.trial_id] = Row(ev.trial_id)
        times[index] = when
        after = _text(ev.status_after) or row.status
        named = _node(ev)
        if ev.type_name == "TrialStarted":
            node_of[ev.trial_id] = named
        node = node_of.get(ev.trial_id) if after in _ON_A_NODE else None
        current = open_span.get(ev.trial_id)
        if current is None or current[0] != after:
            if current is not None:
                row.spans.append(Span(current[0], current[1], index, current[2]))
            open_span[ev.trial_id] = (after, index, node)
            if node is not None:
                nodes.setdefault(node)
        row.status = after
        if ev.error_type or ev.decision:
            kind = _text(ev.error_type) or "TrialError"
            kind = kind.rsplit(".", 1)[-1]
            where = named or node_of.get(ev.trial_id)
            row.markers.append(Marker(
                index, kind, _text(ev.decision),
                f"{ev.trial_id} seq {ev.seq} (position {ev.position}, epoch {ev.epoch}): "
                f"{kind} {_text(ev.status_before)} -> {after} {_text(ev.decision)}"
                + (f" on {where}" if where else ""),
            ))
    n_events = index + 1
    if when is not None:
        times[index] = when
    for trial_id, (status, start, node) in open_span.items():
        rows[trial_id].spans.append(Span(status, start, n_events, node))
    drawn = list(rows.values())
    n_failed = 0
    if len(seen) > len(drawn):  # some left out: the failed first, then the others
        first = [rows[t] for t in select.failed if t in rows]
        n_failed = len(first)
        drawn = first + [r for r in drawn if r.trial_id not in failed]
    return TimelineModel(experiment, drawn, n_events, epochs, first_at, last_at,
                         list(nodes), times, down=down, n_trials=len(seen),
                         failed_drawn=n_failed)
