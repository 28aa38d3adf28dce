"""The timeline as SVG, and the standalone HTML page around it.

The SVG is as wide as its window: ``width="100%"`` with a ``viewBox``, so without any script
it scales to fit (a 6-trial experiment no longer runs 1600 px off a 1400 px window). Every
element placed on the x axis carries its axis value (``data-t``, or ``data-t0``/``data-t1``),
so the timeline script (``web/static/timeline.js``, served by ``serve`` and inlined into the
HTML file) can lay the picture out again at the window's own width, keeping text at its size,
and zoom into a time range (buttons, or a drag across the plot). A driver-down stretch is a
grey band over the rows, labelled "driver down".

Written with the standard library's ElementTree; every text from the log goes through
:func:`statemachine.cli.safe_text.xml_safe` (XML-illegal characters shown escaped, so the
file stays valid) and is escaped by ElementTree: it is never markup.
"""

from __future__ import annotations

import html
import math
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from importlib.resources import files
from typing import Any

from statemachine.cli.palette import DECISION_COLOURS, STATUS_COLOURS
from statemachine.cli.safe_text import xml_safe
from statemachine.cli.schema import STATUSES
from statemachine.cli.timeline import MARKER_SHAPES, TimelineModel

#: The picture's width before a script fits it to its window (SVG user units, CSS pixels).
WIDTH = 1200
#: The narrowest plot (the label column grows with long trial ids, up to MAX_LABEL_W).
MIN_PLOT = 600
LABEL_W = 190
MAX_LABEL_W = 400
RIGHT = 30
ROW_H = 30
TOP = 104
LEGEND_H = 100
#: A driver-down stretch too short to see is drawn this wide (pixels), centred.
MIN_DOWN_W = 6
DOWN_FILL = "#555555"
#: Where the time axis' tick labels, the driver-down labels and the epoch labels sit.
TICK_Y, DOWN_Y, EPOCH_Y = TOP - 36, TOP - 20, TOP - 6
#: Tick steps of the time axis, in seconds (the script has the same list).
TIME_STEPS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60,
              120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
MOST_TICKS = 8


def tick_step(span: float, by_time: bool) -> float:
    """The distance between ticks for an axis ``span`` long: at most :data:`MOST_TICKS`."""
    if span <= 0:
        return 1.0
    if by_time:
        for step in TIME_STEPS:
            if span / step <= MOST_TICKS:
                return float(step)
        return 86400.0 * math.ceil(span / 86400 / MOST_TICKS)
    step = 1.0
    while span / step > MOST_TICKS:
        for factor in (2, 2.5, 2):  # 1, 2, 5, 10, 20, 50, ...
            step *= factor
            if span / step <= MOST_TICKS:
                break
    return step


def tick_label(value: float, by_time: bool) -> str:
    """``250 ms``, ``12 s``, ``2 min 30 s``, ``1 h 5 min``; in the event order, the event
    count."""
    if not by_time:
        return str(round(value))
    if value == 0:
        return "0"
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 60:
        return f"{value:g} s"
    whole = round(value)
    if whole < 3600:
        minutes, seconds = divmod(whole, 60)
        return f"{minutes} min" + (f" {seconds} s" if seconds else "")
    hours, rest = divmod(whole, 3600)
    return f"{hours} h" + (f" {rest // 60} min" if rest // 60 else "")


def _label_width(model: TimelineModel) -> int:
    longest = max((len(f"{r.trial_id} ({r.status})") for r in model.rows), default=0)
    return min(max(LABEL_W, 7 * longest + 30), MAX_LABEL_W)


class _Scale:
    """Axis value to x pixel, for one drawing."""

    def __init__(self, model: TimelineModel, left: int, plot_w: int) -> None:
        self.left = left
        self.step = plot_w / (model.x_end or 1.0)

    def __call__(self, value: float) -> float:
        return self.left + self.step * value


def _t(value: float) -> str:
    return f"{value:.6g}"


def render_svg(model: TimelineModel) -> str:
    """The timeline as a standalone SVG document (one ``<g class="trial">`` per trial), as
    wide as its window."""
    left = _label_width(model)
    width = max(WIDTH, left + MIN_PLOT + RIGHT)
    plot_w = width - left - RIGHT
    x_of = _Scale(model, left, plot_w)
    bottom = TOP + ROW_H * len(model.rows)
    height = bottom + LEGEND_H + (28 if model.nodes else 0)
    svg = ET.Element("svg", xmlns="http://www.w3.org/2000/svg", width="100%",
                     viewBox=f"0 0 {width} {height}",
                     preserveAspectRatio="xMinYMin meet",
                     attrib={"class": "timeline", "role": "img",
                             "font-family": "Helvetica, Arial, sans-serif", "font-size": "12",
                             "data-x-end": _t(model.x_end or 1.0),
                             "data-by-time": "1" if model.by_time else "0",
                             "data-left": str(left), "data-right": str(RIGHT),
                             "data-top": str(TOP), "data-bottom": str(bottom)})
    ET.SubElement(svg, "title").text = xml_safe(f"Timeline of experiment {model.experiment}")
    defs = ET.SubElement(svg, "defs")
    plot_clip = ET.SubElement(defs, "clipPath", id="timeline-plot")
    ET.SubElement(plot_clip, "rect", x=str(left), y="0", width=str(plot_w), height=str(height),
                  attrib={"class": "plot-clip"})
    label_clip = ET.SubElement(defs, "clipPath", id="timeline-labels")
    ET.SubElement(label_clip, "rect", x="0", y="0", width=str(left - 8), height=str(height))
    ET.SubElement(svg, "rect", x="0", y="0", width=str(width), height=str(height), fill="white",
                  attrib={"class": "background"})
    head = ET.SubElement(svg, "text", x="10", y="22", attrib={"font-size": "16",
                                                             "font-weight": "bold"})
    head.text = xml_safe(f"Experiment {model.experiment}")
    sub = ET.SubElement(svg, "text", x="10", y="42", fill="#555")
    span = ""
    if model.first_at is not None and model.last_at is not None:
        span = f", {model.first_at:%Y-%m-%d %H:%M:%S} to {model.last_at:%Y-%m-%d %H:%M:%S} UTC"
    axis = ("time since the first event" if model.by_time
            else "event order (--order)")
    if model.left_out:  # what is drawn, then the counts (no room for the dates)
        sub.text = f"{model.drawn_note}; {model.n_events:,} events; x axis: {axis}"
        sub.set("class", "drawn-note")
    else:
        sub.text = f"{len(model.rows)} trials, {model.n_events} events{span}; x axis: {axis}"
    _axis(svg, model, x_of, bottom)
    for i, row in enumerate(model.rows):
        y = TOP + i * ROW_H
        group = ET.SubElement(svg, "g", attrib={"class": "trial",
                                                "data-trial-id": xml_safe(row.trial_id),
                                                "data-status": xml_safe(row.status)})
        label = ET.SubElement(group, "text", x="10", y=str(y + ROW_H / 2 + 4),
                              attrib={"class": "trial-label",
                                      "clip-path": "url(#timeline-labels)"})
        label.text = xml_safe(f"{row.trial_id} ({row.status})")
        ET.SubElement(label, "title").text = xml_safe(f"{row.trial_id} ({row.status})")
        plot = ET.SubElement(group, "g", attrib={"clip-path": "url(#timeline-plot)"})
        for s in row.spans:
            t0, t1 = model.x(s.start), model.x(s.end)
            x0, x1 = x_of(t0), x_of(t1)
            rect = ET.SubElement(plot, "rect", x=f"{x0:.1f}", y=str(y + 5),
                                 width=f"{max(x1 - x0, 1):.1f}", height=str(ROW_H - 10),
                                 fill=STATUS_COLOURS.get(s.status, "#cccccc"),
                                 attrib={"class": "span", "data-status": xml_safe(s.status),
                                         "data-t0": _t(t0), "data-t1": _t(t1)})
            on = f" on {s.node}" if s.node else ""
            ET.SubElement(rect, "title").text = xml_safe(f"{row.trial_id}: {s.status}{on}")
            if s.node:
                band = ET.SubElement(plot, "rect", x=f"{x0:.1f}", y=str(y + ROW_H - 5),
                                     width=f"{max(x1 - x0, 1):.1f}", height="4",
                                     fill=model.node_colour(s.node),
                                     attrib={"class": "node-band",
                                             "data-node": xml_safe(s.node),
                                             "data-t0": _t(t0), "data-t1": _t(t1)})
                ET.SubElement(band, "title").text = xml_safe(f"{row.trial_id}: {s.status}{on}")
        for m in row.markers:
            t = model.x(m.x) if model.by_time else m.x + 0.5
            cy = y + ROW_H / 2
            path = ET.SubElement(plot, "path", d=MARKER_SHAPES.get(m.kind, MARKER_SHAPES[
                "TrainingError"]), transform=f"translate({x_of(t):.1f},{cy:.1f})",
                fill=DECISION_COLOURS.get(m.decision, "#888888"), stroke="#000000",
                attrib={"class": "marker", "data-kind": xml_safe(m.kind),
                        "data-decision": xml_safe(m.decision),
                        "data-t": _t(t), "data-y": f"{cy:.1f}",
                        "stroke-width": "1.5" if m.kind != "AbortError" else "3"})
            ET.SubElement(path, "title").text = xml_safe(m.detail)
    _driver_down(svg, model, x_of, bottom)
    for mark in model.epochs[1:]:
        t = model.x(mark.x)
        x = x_of(t)
        ET.SubElement(svg, "line", x1=f"{x:.1f}", y1=str(TOP - 2), x2=f"{x:.1f}", y2=str(bottom),
                      stroke="#333", attrib={"stroke-dasharray": "5,4", "class": "epoch",
                                             "data-t": _t(t)})
        label = ET.SubElement(svg, "text", x=f"{x + 3:.1f}", y=str(EPOCH_Y), fill="#333",
                              attrib={"class": "epoch-label", "data-t": _t(t)})
        label.text = mark.label
    _legend(svg, bottom + 20, model)
    ET.indent(svg)
    return ET.tostring(svg, encoding="unicode", xml_declaration=True)


def _axis(svg: ET.Element, model: TimelineModel, x_of: _Scale, bottom: int) -> None:
    """Tick labels over the rows and light grid lines through them (the script draws them
    again for the range it shows)."""
    axis = ET.SubElement(svg, "g", attrib={"class": "axis"})
    end = model.x_end or 1.0
    step = tick_step(end, model.by_time)
    for k in range(int(end / step) + 1):
        value = k * step
        x = x_of(value)
        ET.SubElement(axis, "line", x1=f"{x:.1f}", y1=str(TICK_Y + 6), x2=f"{x:.1f}",
                      y2=str(bottom), stroke="#e3e3e3")
        ET.SubElement(axis, "text", x=f"{x:.1f}", y=str(TICK_Y), fill="#666",
                      attrib={"text-anchor": "middle"}).text = tick_label(value, model.by_time)


def _driver_down(svg: ET.Element, model: TimelineModel, x_of: _Scale, bottom: int) -> None:
    """A grey band over the rows for each stretch a crashed driver left, labelled."""
    for down in model.down:
        t0, t1 = model.down_x(down)
        x0, x1 = x_of(t0), x_of(t1)
        if x1 - x0 < MIN_DOWN_W:
            middle = (x0 + x1) / 2
            x0, x1 = middle - MIN_DOWN_W / 2, middle + MIN_DOWN_W / 2
        rect = ET.SubElement(svg, "rect", x=f"{x0:.1f}", y=str(DOWN_Y + 4),
                             width=f"{x1 - x0:.1f}", height=str(bottom - DOWN_Y - 4),
                             fill=DOWN_FILL, stroke="#333333",
                             attrib={"class": "driver-down", "fill-opacity": "0.3",
                                     "stroke-dasharray": "2,2", "data-t0": _t(t0),
                                     "data-t1": _t(t1), "data-epoch": str(down.epoch)})
        ET.SubElement(rect, "title").text = down.detail
        label = ET.SubElement(svg, "text", x=f"{(x0 + x1) / 2:.1f}", y=str(DOWN_Y), fill="#333",
                              attrib={"class": "driver-down-label", "text-anchor": "middle",
                                      "font-weight": "bold", "data-t0": _t(t0),
                                      "data-t1": _t(t1)})
        label.text = down.label


def _legend(svg: ET.Element, y: int, model: TimelineModel) -> None:
    x = 10
    for status, colour in STATUS_COLOURS.items():
        ET.SubElement(svg, "rect", x=str(x), y=str(y), width="14", height="14", fill=colour)
        ET.SubElement(svg, "text", x=str(x + 18), y=str(y + 12)).text = status
        x += 110
    if model.down:
        ET.SubElement(svg, "rect", x=str(x), y=str(y), width="14", height="14", fill=DOWN_FILL,
                      stroke="#333333", attrib={"class": "down-legend", "fill-opacity": "0.3",
                                                "stroke-dasharray": "2,2"})
        ET.SubElement(svg, "text", x=str(x + 18), y=str(y + 12)).text = "driver down"
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

#: The trial table of the HTML page: (header, key of the ``trials`` row).
TABLE_COLUMNS = (
    ("trial", "trial_id"), ("status", "status"), ("failures", "num_failures"),
    ("restore fails (episode)", "num_restore_failures"),
    ("restore fails (total)", "total_restore_failures"), ("preemptions", "num_preemptions"),
    ("last error", "last_error_type"), ("last decision", "last_decision"),
)


def timeline_script() -> str:
    """The timeline script the package ships (``web/static/timeline.js``): ``serve`` serves
    it as a file, the standalone HTML page holds it inline."""
    return (files("statemachine.cli") / "web" / "static" / "timeline.js").read_text("utf-8")


def overview(counts: Mapping[str, int]) -> str:
    """A bar of every trial by status (the timeline draws only some of them)."""
    total = sum(counts.values()) or 1
    x, parts = 0.0, []
    for status in STATUSES:
        n = counts.get(status, 0)
        if not n:
            continue
        w = 1000 * n / total
        parts.append(f'<rect class="overview-part" data-status="{status}" x="{x:.2f}" y="0" '
                     f'width="{w:.2f}" height="18" fill="{STATUS_COLOURS[status]}">'
                     f"<title>{status}: {n:,} trials</title></rect>")
        x += w
    return ('<svg class="overview" viewBox="0 0 1000 18" preserveAspectRatio="none" '
            f'role="img" aria-label="every trial by status">{"".join(parts)}</svg>')


def render_html(model: TimelineModel, summary_rows: Sequence[dict[str, Any]] = (),
                counts: Mapping[str, int] | None = None) -> str:
    """A standalone HTML page: the SVG inline (hover a mark for details), the timeline
    script inline (fit to the window, zoom into a time range: one file that works offline,
    mailed or copied anywhere), and a trial table. When the picture leaves trials out, a
    note says which it draws, above the :func:`overview` bar of ``counts`` (every trial by
    status)."""
    svg = render_svg(model).split("?>", 1)[1]
    if model.left_out:
        bar = ""
        if counts:
            bar = overview(counts) + "\n"
            note = f"{model.drawn_note}. The bar counts all {sum(counts.values()):,} trials " \
                   "by status; the table lists the drawn ones."
        else:
            note = f"{model.drawn_note}. The table lists the drawn trials."
        svg = (f'<p class="timeline-note" id="timeline-note">{html.escape(xml_safe(note))}'
               f"</p>\n{bar}<style>svg.overview {{ display: block; width: 100%; height: 14px;"
               f" margin: 4px 0 8px; }}</style>\n{svg}")
    rows_html = "".join(
        "<tr>" + "".join(f"<td>{html.escape(xml_safe(r.get(key)))}</td>"
                         for _, key in TABLE_COLUMNS) + "</tr>"
        for r in summary_rows
    )
    table = ""
    if summary_rows:
        head = "".join(f"<th>{html.escape(header)}</th>" for header, _ in TABLE_COLUMNS)
        table = f"<table><thead><tr>{head}</tr></thead><tbody>{rows_html}</tbody></table>"
    title = html.escape(xml_safe(f"trial-replay timeline: {model.experiment}"))
    # The script is the package's own file; "</" cannot end the element early.
    script = timeline_script().replace("</", "<\\/")
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>{title}</title>
<style>
body {{ font-family: Helvetica, Arial, sans-serif; margin: 16px; color: #222; }}
table {{ border-collapse: collapse; margin-top: 16px; font-size: 13px; }}
th, td {{ border: 1px solid #ccc; padding: 3px 8px; text-align: left; }}
th {{ background: #f0f0f0; }}
svg.timeline {{ display: block; }}
.timeline-controls {{ font-size: 13px; margin: 4px 0; display: flex; gap: 6px;
  align-items: center; flex-wrap: wrap; }}
.timeline-controls .window {{ color: #555; }}
</style>
</head>
<body>
<main>
{svg}
{table}
</main>
<script>
{script}
</script>
</body>
</html>
"""
