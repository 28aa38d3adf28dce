"""The timeline as a PNG, drawn with matplotlib (the ``plot`` extra).

Every span is one polygon of a collection and every failure kind one scatter, so thousands
of trials draw in seconds; a driver-down stretch is a grey band labelled "driver down"
(too short to see, it is drawn a few pixels wide). Text from the log is passed through
:func:`statemachine.cli.safe_text.mathtext_safe` (a ``$`` is never mathtext).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from statemachine.cli.palette import DECISION_COLOURS, STATUS_COLOURS
from statemachine.cli.safe_text import mathtext_safe, visible
from statemachine.cli.timeline import MPL_MARKERS, TimelineModel

#: Above this many trials a PNG timeline carries no per-row labels.
MAX_PNG_LABELS = 150


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
        for down in model.down:
            x0, x1 = (x / scale for x in model.down_x(down))
            if x1 - x0 < 3 * min_w:  # the event order, or a short gap: still shown
                x0, x1 = x0 - 1.5 * min_w, x1 + 1.5 * min_w
            ax.axvspan(x0, x1, color="#555555", alpha=0.25, linewidth=0, zorder=2)
            ax.text((x0 + x1) / 2, -0.85, down.label, fontsize=8, ha="center",
                    va="bottom", color="#333333")  # under the rows: epoch labels are above
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
        ax.set_ylim(-0.9 if model.down else -0.6, n - 0.4 + 0.3)
        ax.set_xlabel(xlabel)
        title = mathtext_safe(f"Experiment {model.experiment}")
        if model.left_out:  # a line of its own (a newline in the id would be escaped)
            title += "\n" + mathtext_safe(model.drawn_note)
        ax.set_title(title, loc="left")
        handles: list[Any] = [Patch(color=c, label=s) for s, c in STATUS_COLOURS.items()
                              if s != "NEW"]
        # Kinds are hollow shapes and decisions colour squares: no legend entry looks like
        # another (a white circle was both TrainingError and RETRY_RESTORE).
        handles += [Line2D([], [], marker=mk, linestyle="", color="black", label=k,
                           markerfacecolor="none") for k, mk in MPL_MARKERS.items()]
        handles += [Patch(facecolor=c, edgecolor="black", label=d)
                    for d, c in DECISION_COLOURS.items()]
        if model.down:
            handles.append(Patch(color="#555555", alpha=0.25, label="driver down"))
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
