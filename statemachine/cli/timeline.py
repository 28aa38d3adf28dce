"""The timeline picture: one row per trial, coloured spans per status, a marker per failure.

The x axis is time since the experiment's first event, so a crash gap shows as one; with
``--order`` it is the event order instead (one step per event), where a burst of restore
retries is as readable as an hour of training. Vertical lines mark each new driver epoch
(a resume after a crash or a clean restart). The model is built from the recorded columns
of the log (status before/after, decision, error type), so a row whose payload is corrupted
still draws; the node an attempt ran on comes from the payloads of its start and failure
events (a thin band under each span, one colour per node, and the hover text). SVG and HTML
are written with the standard library; PNG uses matplotlib. Every text from the log goes
through :mod:`statemachine.cli.safe_text` (XML-illegal characters shown escaped, so the file
stays valid; a ``$`` is never matplotlib mathtext).
"""

from __future__ import annotations

import html
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from statemachine.cli.palette import DECISION_COLOURS, NODE_COLOURS, STATUS_COLOURS
from statemachine.cli.safe_text import mathtext_safe, visible, xml_safe
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
#: Above this many trials a PNG timeline carries no per-row labels.
MAX_PNG_LABELS = 150


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
    times: list[datetime] = field(default_factory=list)
    """When each event (by index) was recorded."""
    by_time: bool = True
    """x is time since the first event (else the event order)."""

    def x(self, index: float) -> float:
        """Where event ``index`` sits on the x axis: seconds since the first event (time
        view; an index past the last event is the last event's time), else ``index``."""
        if not self.by_time or not self.times:
            return index
        i = min(max(int(index), 0), len(self.times) - 1)
        return max((self.times[i] - self.times[0]).total_seconds(), 0.0)

    @property
    def x_end(self) -> float:
        """The end of the x axis."""
        return self.x(self.n_events) if self.by_time else float(max(self.n_events, 1))

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
) -> TimelineModel:
    """Lay out ``events`` (in log order) as rows, spans, markers and epoch marks; ``kinds``
    (epoch -> ``fresh``/``restore``) labels each epoch with how its driver began."""
    rows: dict[str, Row] = {}
    open_span: dict[str, tuple[str, int, str | None]] = {}
    node_of: dict[str, str | None] = {}
    nodes: dict[str, None] = {}
    epochs: list[EpochMark] = []
    first_at = last_at = None
    times: list[datetime] = []
    index = -1
    for index, ev in enumerate(events):
        # An unreadable stored time (a broken row) is drawn at the time before it.
        moment = ev.recorded_at if getattr(ev, "damage", None) is None else last_at
        if first_at is None:
            first_at = moment
        last_at = moment
        times.append(moment or ev.recorded_at)
        if not epochs or epochs[-1].epoch != ev.epoch:
            epochs.append(EpochMark(index, ev.epoch, (kinds or {}).get(ev.epoch)))
        row = rows.setdefault(ev.trial_id, Row(ev.trial_id))
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
    for trial_id, (status, start, node) in open_span.items():
        rows[trial_id].spans.append(Span(status, start, n_events, node))
    return TimelineModel(experiment, list(rows.values()), n_events, epochs, first_at, last_at,
                         list(nodes), times)


# ---------------------------------------------------------------- SVG

LABEL_W = 190
ROW_H = 30
TOP = 70
LEGEND_H = 100


def _label_width(model: TimelineModel) -> int:
    longest = max((len(f"{r.trial_id} ({r.status})") for r in model.rows), default=0)
    return max(LABEL_W, 7 * longest + 30)


class _Scale:
    """Event index to x pixel, for one drawing."""

    def __init__(self, model: TimelineModel, plot_w: int) -> None:
        self.model = model
        self.left = _label_width(model)
        self.step = plot_w / (model.x_end or 1.0)

    def __call__(self, index: float) -> float:
        return self.left + self.step * self.model.x(index)


def render_svg(model: TimelineModel) -> str:
    """The timeline as a standalone SVG document (one ``<g class="trial">`` per trial)."""
    plot_w = max(720, min(1400, 14 * model.n_events))
    x_of = _Scale(model, plot_w)
    width = x_of.left + plot_w + 30
    height = TOP + ROW_H * len(model.rows) + LEGEND_H + (28 if model.nodes else 0)
    svg = ET.Element("svg", xmlns="http://www.w3.org/2000/svg", width=str(width),
                     height=str(height), viewBox=f"0 0 {width} {height}",
                     attrib={"font-family": "Helvetica, Arial, sans-serif", "font-size": "12"})
    ET.SubElement(svg, "title").text = xml_safe(f"Timeline of experiment {model.experiment}")
    ET.SubElement(svg, "rect", x="0", y="0", width=str(width), height=str(height), fill="white")
    head = ET.SubElement(svg, "text", x="10", y="22", attrib={"font-size": "16",
                                                             "font-weight": "bold"})
    head.text = xml_safe(f"Experiment {model.experiment}")
    sub = ET.SubElement(svg, "text", x="10", y="42", fill="#555")
    span = ""
    if model.first_at is not None and model.last_at is not None:
        span = f", {model.first_at:%Y-%m-%d %H:%M:%S} to {model.last_at:%Y-%m-%d %H:%M:%S} UTC"
    axis = ("time since the first event" if model.by_time
            else "event order (--order)")
    sub.text = f"{len(model.rows)} trials, {model.n_events} events{span}; x axis: {axis}"
    for i, row in enumerate(model.rows):
        y = TOP + i * ROW_H
        group = ET.SubElement(svg, "g", attrib={"class": "trial",
                                                "data-trial-id": xml_safe(row.trial_id),
                                                "data-status": xml_safe(row.status)})
        label = ET.SubElement(group, "text", x="10", y=str(y + ROW_H / 2 + 4))
        label.text = xml_safe(f"{row.trial_id} ({row.status})")
        for s in row.spans:
            x0, x1 = x_of(s.start), x_of(s.end)
            rect = ET.SubElement(group, "rect", x=f"{x0:.1f}", y=str(y + 5),
                                 width=f"{max(x1 - x0, 1):.1f}", height=str(ROW_H - 10),
                                 fill=STATUS_COLOURS.get(s.status, "#cccccc"),
                                 attrib={"class": "span", "data-status": xml_safe(s.status)})
            on = f" on {s.node}" if s.node else ""
            ET.SubElement(rect, "title").text = xml_safe(f"{row.trial_id}: {s.status}{on}")
            if s.node:
                band = ET.SubElement(group, "rect", x=f"{x0:.1f}", y=str(y + ROW_H - 5),
                                     width=f"{max(x1 - x0, 1):.1f}", height="4",
                                     fill=model.node_colour(s.node),
                                     attrib={"class": "node-band",
                                             "data-node": xml_safe(s.node)})
                ET.SubElement(band, "title").text = xml_safe(f"{row.trial_id}: {s.status}{on}")
        for m in row.markers:
            cx = x_of(m.x) if model.by_time else x_of(m.x + 0.5)
            cy = y + ROW_H / 2
            path = ET.SubElement(group, "path", d=MARKER_SHAPES.get(m.kind, MARKER_SHAPES[
                "TrainingError"]), transform=f"translate({cx:.1f},{cy:.1f})",
                fill=DECISION_COLOURS.get(m.decision, "#888888"), stroke="#000000",
                attrib={"class": "marker", "data-kind": xml_safe(m.kind),
                        "data-decision": xml_safe(m.decision),
                        "stroke-width": "1.5" if m.kind != "AbortError" else "3"})
            ET.SubElement(path, "title").text = xml_safe(m.detail)
    bottom = TOP + ROW_H * len(model.rows)
    for mark in model.epochs[1:]:
        x = x_of(mark.x)
        ET.SubElement(svg, "line", x1=f"{x:.1f}", y1=str(TOP - 8), x2=f"{x:.1f}", y2=str(bottom),
                      stroke="#333", attrib={"stroke-dasharray": "5,4", "class": "epoch"})
        t = ET.SubElement(svg, "text", x=f"{x + 3:.1f}", y=str(TOP - 10), fill="#333")
        t.text = mark.label
    _legend(svg, bottom + 20, model)
    ET.indent(svg)
    return ET.tostring(svg, encoding="unicode", xml_declaration=True)


def _legend(svg: ET.Element, y: int, model: TimelineModel) -> None:
    x = 10
    for status, colour in STATUS_COLOURS.items():
        ET.SubElement(svg, "rect", x=str(x), y=str(y), width="14", height="14", fill=colour)
        ET.SubElement(svg, "text", x=str(x + 18), y=str(y + 12)).text = status
        x += 110
    x = 10
    y += 28
    for kind, shape in MARKER_SHAPES.items():  # shapes: hollow, so no fill reads as a decision
        ET.SubElement(svg, "path", d=shape, transform=f"translate({x + 7},{y + 7})",
                      fill="none", stroke="#000000", attrib={"class": "kind-legend"})
        ET.SubElement(svg, "text", x=str(x + 18), y=str(y + 12)).text = kind
        x += 120
    x = 10
    y += 28
    for decision, colour in DECISION_COLOURS.items():  # decisions: colour swatches
        ET.SubElement(svg, "rect", x=str(x + 1), y=str(y + 1), width="12", height="12",
                      fill=colour, stroke="#000000", attrib={"class": "decision-legend"})
        ET.SubElement(svg, "text", x=str(x + 18), y=str(y + 12)).text = decision
        x += 30 + 8 * len(decision)
    if not model.nodes:
        return
    x = 10
    y += 28
    for node in model.nodes:
        ET.SubElement(svg, "rect", x=str(x), y=str(y + 5), width="14", height="4",
                      fill=model.node_colour(node), attrib={"class": "node-legend"})
        ET.SubElement(svg, "text", x=str(x + 18), y=str(y + 12)).text = xml_safe(node)
        x += 40 + 7 * len(node)


# ---------------------------------------------------------------- HTML


def render_html(model: TimelineModel, summary_rows: Sequence[dict[str, Any]] = ()) -> str:
    """A standalone HTML page: the SVG inline (hover a marker for details) and a trial table."""
    svg = render_svg(model).split("?>", 1)[1]
    rows_html = "".join(
        "<tr>" + "".join(f"<td>{html.escape(xml_safe(r.get(c)))}</td>" for c in _TABLE_COLUMNS)
        + "</tr>"
        for r in summary_rows
    )
    table = ""
    if summary_rows:
        head = "".join(f"<th>{html.escape(c)}</th>" for c in _TABLE_COLUMNS)
        table = f"<table><thead><tr>{head}</tr></thead><tbody>{rows_html}</tbody></table>"
    title = html.escape(xml_safe(f"trial-replay timeline: {model.experiment}"))
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<style>
body {{ font-family: Helvetica, Arial, sans-serif; margin: 16px; color: #222; }}
table {{ border-collapse: collapse; margin-top: 16px; font-size: 13px; }}
th, td {{ border: 1px solid #ccc; padding: 3px 8px; text-align: left; }}
th {{ background: #f0f0f0; }}
</style>
</head>
<body>
<main>
{svg}
{table}
</main>
</body>
</html>
"""


_TABLE_COLUMNS = ("trial_id", "status", "num_failures", "num_restore_failures",
                  "total_restore_failures", "num_preemptions", "last_error_type",
                  "last_decision")


# ---------------------------------------------------------------- PNG


def render_png(model: TimelineModel, path: Path) -> None:
    """Draw the timeline with matplotlib into ``path`` (PNG; trial ids in its metadata)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    from matplotlib import pyplot as plt
    from matplotlib.collections import PolyCollection
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    n = len(model.rows)
    fig_w = max(8.0, min(18.0, 0.16 * model.n_events + 3))
    scale, xlabel = _png_axis(model)
    min_w = max(model.x_end / scale, 1e-9) / 400  # about one pixel column
    # Past a few hundred trials rows get thinner, up to a 60-inch figure, labels dropped.
    fig, ax = plt.subplots(figsize=(fig_w, 1.6 + min(0.45 * n, 60.0)), dpi=100)
    try:
        # One collection for every span and one scatter per failure kind: thousands of
        # trials draw in seconds, not minutes.
        boxes, colours = [], []
        points: dict[str, tuple[list[float], list[float], list[str]]] = {}
        for i, row in enumerate(model.rows):
            y = n - 1 - i
            for s in row.spans:
                x0, x1 = model.x(s.start) / scale, model.x(s.end) / scale
                x1 = max(x1, x0 + min_w)  # a span of no duration still shows
                boxes.append([(x0, y - 0.35), (x1, y - 0.35), (x1, y + 0.35), (x0, y + 0.35)])
                colours.append(STATUS_COLOURS.get(s.status, "#cccccc"))
            for m in row.markers:
                xs, ys, cs = points.setdefault(m.kind, ([], [], []))
                xs.append(model.x(m.x) / scale if model.by_time else m.x + 0.5)
                ys.append(y)
                cs.append(DECISION_COLOURS.get(m.decision, "#888888"))
        ax.add_collection(PolyCollection(boxes, facecolors=colours, edgecolors="none"))
        for kind, (xs, ys, cs) in points.items():
            ax.scatter(xs, ys, marker=MPL_MARKERS.get(kind, "o"), s=60 if n <= 50 else 12,
                       c=cs, edgecolors="black", linewidths=0.8, zorder=3)
        for mark in model.epochs[1:]:
            ex = model.x(mark.x) / scale
            ax.axvline(ex, color="#333", linestyle="--", linewidth=1)
            ax.text(ex + min_w, n - 0.45, mathtext_safe(mark.label.removeprefix("driver ")),
                    fontsize=8, va="bottom")
        if n <= MAX_PNG_LABELS:
            ax.set_yticks(range(n))
            ax.set_yticklabels([mathtext_safe(f"{r.trial_id} ({r.status})")
                                for r in reversed(model.rows)])
        else:
            ax.set_yticks([])
            ax.set_ylabel(f"{n} trials (too many to label; the SVG/HTML timeline has them)")
        ax.set_xlim(0, max(model.x_end / scale, min_w))
        ax.set_ylim(-0.6, n - 0.4 + 0.3)
        ax.set_xlabel(xlabel)
        ax.set_title(mathtext_safe(f"Experiment {model.experiment}"), loc="left")
        handles: list[Any] = [Patch(color=c, label=s) for s, c in STATUS_COLOURS.items()
                              if s != "NEW"]
        # Kinds are hollow shapes and decisions colour squares: no legend entry looks like
        # another (a white circle was both TrainingError and RETRY_RESTORE).
        handles += [Line2D([], [], marker=mk, linestyle="", color="black", label=k,
                           markerfacecolor="none") for k, mk in MPL_MARKERS.items()]
        handles += [Patch(facecolor=c, edgecolor="black", label=d)
                    for d, c in DECISION_COLOURS.items()]
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                  ncol=1 if n >= 6 else 2, fontsize=8, frameon=False)
        fig.savefig(path, format="png", bbox_inches="tight", metadata={
            "Title": visible(f"trial-replay timeline: {model.experiment}"),
            "Description": "trials: " + ",".join(visible(r.trial_id) for r in model.rows),
        })
    finally:
        plt.close(fig)


def _png_axis(model: TimelineModel) -> tuple[float, str]:
    """The PNG's x unit (seconds per unit) and axis label."""
    if not model.by_time:
        return 1.0, "event order (one step per event)"
    start = f"{model.first_at:%Y-%m-%d %H:%M:%S} UTC" if model.first_at else "the first event"
    total = model.x_end
    scale, unit = (3600.0, "hours") if total > 3 * 3600 else (
        (60.0, "minutes") if total > 180 else (1.0, "seconds"))
    return scale, f"{unit} since {start}"


def write_timeline(model: TimelineModel, path: Path,
                   summary_rows: Sequence[dict[str, Any]] = ()) -> Path:
    """Write the picture in the format ``path``'s suffix names."""
    fmt = path.suffix.lower().lstrip(".")
    if fmt == "svg":
        path.write_text(render_svg(model), encoding="utf-8")
    elif fmt == "html":
        path.write_text(render_html(model, summary_rows), encoding="utf-8")
    elif fmt == "png":
        render_png(model, path)
    else:
        raise ValueError(f"unsupported timeline format {fmt!r}")
    return path
