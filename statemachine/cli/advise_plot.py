"""The front of ``advise`` as a picture: trials saved against extra attempt-hours, one dot
per policy, the front joined, the recommended policy ringed. PNG through matplotlib (the
``plot`` extra, as the timeline's PNG), HTML as one offline page with an inline SVG and the
front's table (as the timeline's HTML)."""

from __future__ import annotations

import html
from pathlib import Path

from statemachine.advise import Advice
from statemachine.advise.recommend import net
from statemachine.advise.sweep import describe

FORMATS = ("html", "png")
_W, _H, _PAD = 640, 400, 56


def render_png(advice: Advice, path: Path) -> None:
    """Draw the front with matplotlib into ``path``."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=100)
    try:
        xs = [r.extra_hours for r in advice.results]
        ys = [net(r) for r in advice.results]
        ax.scatter(xs, ys, s=14, c="#9aa5b1", label="policy")
        front = advice.recommendation.front
        ax.plot([r.extra_hours for r in front], [net(r) for r in front], "-o", c="#1f6feb",
                ms=4, label="front")
        chosen = advice.recommendation.policy
        if chosen is not None:
            ax.scatter([chosen.extra_hours], [net(chosen)], s=160, facecolors="none",
                       edgecolors="#d1242f", linewidths=2, label="recommended")
        ax.set_xlabel("extra attempt-hours")
        ax.set_ylabel("trials saved (less lost)")
        ax.set_title("advise: " + ", ".join(advice.experiments)[:80])
        ax.legend(loc="lower right")
        fig.tight_layout()
        fig.savefig(path, format="png")
    finally:
        plt.close(fig)


def render_svg(advice: Advice) -> str:
    """The front as an SVG element (text escaped)."""
    results = advice.results
    xs = [r.extra_hours for r in results] or [0.0]
    ys = [net(r) for r in results] or [0.0]
    x0, x1 = min([*xs, 0.0]), max([*xs, 1e-9])
    y0, y1 = min([*ys, 0.0]), max([*ys, 1e-9])

    def px(x: float) -> float:
        return _PAD + (x - x0) / ((x1 - x0) or 1) * (_W - 2 * _PAD)

    def py(y: float) -> float:
        return _H - _PAD - (y - y0) / ((y1 - y0) or 1) * (_H - 2 * _PAD)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_W} {_H}" '
             f'width="{_W}" height="{_H}" role="img" aria-label="trials saved against extra '
             'attempt-hours">',
             f'<line x1="{_PAD}" y1="{_H - _PAD}" x2="{_W - _PAD}" y2="{_H - _PAD}" '
             'stroke="#444"/>',
             f'<line x1="{_PAD}" y1="{_PAD}" x2="{_PAD}" y2="{_H - _PAD}" stroke="#444"/>',
             f'<text x="{_W / 2}" y="{_H - 16}" text-anchor="middle">extra attempt-hours '
             f'({x0:.1f} to {x1:.1f})</text>',
             f'<text x="14" y="{_H / 2}" transform="rotate(-90 14 {_H / 2})" '
             f'text-anchor="middle">trials saved, less lost ({y0:.1f} to {y1:.1f})</text>']
    for r in results:
        parts.append(f'<circle cx="{px(r.extra_hours):.1f}" cy="{py(net(r)):.1f}" r="3" '
                     f'fill="#9aa5b1"><title>{html.escape(describe(r.changes))}</title>'
                     '</circle>')
    front = advice.recommendation.front
    if front:
        points = " ".join(f"{px(r.extra_hours):.1f},{py(net(r)):.1f}" for r in front)
        parts.append(f'<polyline points="{points}" fill="none" stroke="#1f6feb" '
                     'stroke-width="2"/>')
    chosen = advice.recommendation.policy
    if chosen is not None:
        parts.append(f'<circle cx="{px(chosen.extra_hours):.1f}" cy="{py(net(chosen)):.1f}" '
                     'r="9" fill="none" stroke="#d1242f" stroke-width="2"/>')
    parts.append("</svg>")
    return "\n".join(parts)


def render_html(advice: Advice) -> str:
    """One offline page: the recommendation, the plot and the front's table."""
    rec = advice.recommendation
    rows = "\n".join(
        f"<tr><td>{html.escape(describe(r.changes))}</td><td>{r.saved_mean:.1f}</td>"
        f"<td>{r.saved_interval()[0]:.0f}-{r.saved_interval()[1]:.0f}</td><td>{r.lost}</td>"
        f"<td>{r.extra_attempts:+.1f}</td><td>{r.extra_hours:+.1f}</td></tr>"
        for r in rec.front)
    code = html.escape("\n".join(rec.code))
    evidence = "".join(f"<li>{html.escape(line)}</li>" for line in rec.evidence)
    title = html.escape("advise: " + ", ".join(advice.experiments))
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:60em}}
table{{border-collapse:collapse}}td,th{{padding:.2em .8em;text-align:right}}
td:first-child,th:first-child{{text-align:left}}pre{{background:#f4f4f4;padding:.6em}}</style>
</head><body><h1>{title}</h1>
<p>{html.escape(rec.why)}</p><pre>{code}</pre><ul>{evidence}</ul>
{render_svg(advice)}
<table><thead><tr><th>policy (front)</th><th>saved</th><th>95%</th><th>lost</th>
<th>extra attempts</th><th>extra attempt-hours</th></tr></thead><tbody>
{rows}
</tbody></table></body></html>
"""


def write_plot(advice: Advice, path: Path) -> None:
    """Write the picture in the format ``path``'s suffix names."""
    fmt = path.suffix.lower().lstrip(".")
    if fmt == "png":
        render_png(advice, path)
    elif fmt == "html":
        path.write_text(render_html(advice), encoding="utf-8")
    else:
        raise ValueError(f"unsupported format {fmt!r}")
