"""The PNG of the scaling runs (``python -m benchmarks --plot FILE``; needs matplotlib)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.harness import Report

PANELS = {
    "open": ("Open N trials x 20 events (SQLite)", "trials", "seconds (median)", True),
    "scaleout-throughput": ("Drivers appending to one PostgreSQL", "driver processes",
                            "aggregate events/s (median)", False),
    "scaleout-p99": ("p99 append latency", "driver processes", "ms (median of runs)", False),
}


def draw(report: Report, path: Path) -> bool:
    """Draw every scaling panel the run measured into ``path``; False if there was none."""
    panels = [name for name in PANELS if name in report.scaling]
    if not panels:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.2), squeeze=False)
    for ax, name in zip(axes[0], panels, strict=True):
        title, xlabel, ylabel, loglog = PANELS[name]
        for series, points in report.scaling[name].items():
            xs, ys = zip(*sorted(points), strict=True)
            ax.plot(xs, ys, marker="o", label=series)
        if loglog:
            ax.set_xscale("log")
            ax.set_yscale("log")
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
