"""The HTML report: one self-contained page (no script, font or style from elsewhere) an on-call engineer opens offline.

Sections: the verdict; the ranks by node, one coloured cell per rank with the culprit outlined and the cell's evidence
on hover; the timeline on one axis (UTC when aligned) with the root-cause chain numbered; the AIS counters per daemon
around the failure with restarts marked; step time and memory per rank when the job logged them; the verification.

Why our own inline SVG and HTML rather than a plotting library. We weighed:

- plotly (Python package, ~15 MB installed; the page must embed plotly.js, ~3.5 MB, per report to stay offline):
  interactive, but a 3.5 MB page that takes a second of script to draw before anything shows;
- matplotlib (a large dependency with numpy): static PNG/SVG figures, no hover evidence on a rank;
- a small canvas library such as uPlot (~50 KB, MIT), vendored into the package: fast for series, but the page
  would need script to show anything at all, a vendored asset to keep current, and it has no rank grid;
- Jinja2 for templating: one page with a dozen loops does not need a template engine (escaping is
  :func:`html.escape` in one place, :func:`_e`).

What the page needs is small: a grid of up to ~10,000 cells with a tooltip each, and a handful of line plots with a
few hundred points. Plain elements with a ``title`` attribute give the hover evidence without script; the plots are
polylines we compute (x/y scaling and time ticks are ~60 lines). So the page has no dependency, draws with script
disabled (some viewers of mailed attachments disable it), prints, and stays small and quick: 0.38 MB and ~0.2 s to
load in headless Chromium at 1,024 ranks, 1.9 MB and ~0.9 s at 10,240 (the cells' hover text is most of it; measured
by ``tests/test_html_report.py``'s browser tests on a loaded 2-core machine, which print their figures with ``-s``).
"""

from __future__ import annotations

import html
from datetime import UTC, datetime

from debug_training_logs import __version__
from debug_training_logs.printers.report_data import (
    FAILURE_MARK,
    STATE_MEANING,
    STATES,
    Plot,
    ReportData,
    TimelinePoint,
)
from debug_training_logs.ranges import format_ranges

COLOURS = {
    "straggler": "#d62728",
    "stuck": "#fb9a99",
    "crashed": "#7b3294",
    "ahead": "#ff7f0e",
    "waiting": "#9ecae1",
    "killed": "#08519c",
    "torn_down": "#bdbdbd",
    "finished": "#31a354",
    "unknown": "#f0f0f0",
    "missing": "#ffffff",
}
BIG_GRID = 2048
"""Above this many ranks the cells shrink and node names move into the tooltip."""
TIMELINE_ROWS = 60


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


CSS = """
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;max-width:1180px;padding:12px 20px;
color:#222;background:#fff}
h1{font-size:22px;margin:8px 0}h2{font-size:17px;margin:22px 0 8px;border-bottom:1px solid #ddd;padding-bottom:3px}
code,.mono{font:12px/1.3 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;margin-right:6px;font-size:13px;background:#eee}
.ok{background:#c7e9c0}.bad{background:#fcbba1}
table{border-collapse:collapse;width:100%;font-size:13px}td,th{border:1px solid #ddd;padding:3px 6px;text-align:left;
vertical-align:top}th{background:#f5f5f5}tr.chain td{background:#fff5eb;font-weight:600}
nav a{margin-right:12px}
.legend span{display:inline-block;margin:0 14px 4px 0}.legend i{display:inline-block;width:12px;height:12px;
margin-right:4px;vertical-align:-2px;border:1px solid #888}
.grid{display:flex;flex-wrap:wrap;gap:6px 10px}.nd{display:flex;flex-direction:column;max-width:100%}
.nl{font:10px/1.2 ui-monospace,monospace;color:#555;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.cs{display:flex;flex-wrap:wrap;gap:1px}.cs i{display:block;width:11px;height:11px;box-sizing:border-box;
border:1px solid rgba(0,0,0,.15)}.small .cs i{width:6px;height:6px;border-width:0}.small .grid{gap:3px 4px}
.cs i.c{outline:3px solid #000;outline-offset:0;position:relative;z-index:1}
.s-missing{background:repeating-linear-gradient(45deg,#fff 0 2px,#bbb 2px 3px)!important;border-color:#999!important}
.plots{display:flex;flex-wrap:wrap;gap:8px}.plot{border:1px solid #eee}
.daemon{margin:8px 0 2px;font-weight:600}.note{color:#666;font-size:12px}
svg text{font:10px system-ui,sans-serif;fill:#444}
"""


def _state_css() -> str:
    return "".join(f".s-{s}{{background:{c}}}" for s, c in COLOURS.items())


# ---------------------------------------------------------------------------------------------------------------------
# Axes and plots


def _ticks(lo: float, hi: float, time: bool, n: int = 5) -> list[float]:
    span = hi - lo
    if span <= 0:
        return [lo]
    steps = (
        [1, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400]
        if time
        else [m * 10**e for e in range(-3, 13) for m in (1, 2, 5)]
    )
    step = next((s for s in steps if span / s <= n), steps[-1])
    first = -(-lo // step) * step + 0.0
    out = []
    t = first
    while t <= hi + 1e-9:
        out.append(t)
        t += step
    return out


def _fmt_x(x: float, time: bool) -> str:
    return datetime.fromtimestamp(x, UTC).strftime("%H:%M") if time else f"{x:g}"


def _fmt_y(y: float) -> str:
    if abs(y) >= 1e6:
        return f"{y / 1e6:.3g}M"
    if abs(y) >= 1e3:
        return f"{y / 1e3:.3g}k"
    return f"{y:.3g}"


def plot_svg(plot: Plot, width: int = 270, height: int = 130, x_range: tuple[float, float] | None = None) -> str:
    """One plot: lines (flagged ones in colour), the spread band, vertical markers; hover shows values."""
    xs = [x for ln in plot.lines for x, _ in ln.points] + [b[0] for b in plot.band]
    ys = [y for ln in plot.lines for _, y in ln.points] + [b[3] for b in plot.band] + [0.0]
    x_range = x_range or plot.x_range
    if plot.y_max is not None:
        ys.append(plot.y_max)
    if x_range is None:
        if not xs:
            return (
                f'<svg class="plot" width="{width}" height="{height}">'
                f'<text x="8" y="20">{_e(plot.title)}: no data</text></svg>'
            )
        x_range = (min(xs), max(xs))
    x0, x1 = x_range
    if x1 <= x0:
        x0, x1 = x0 - 60, x1 + 60
    y1 = max(ys) * 1.08 or 1.0
    left, right, top, bottom = 38, 8, 16, 18
    pw, ph = width - left - right, height - top - bottom

    def sx(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * pw

    def sy(y: float) -> float:
        return top + ph - y / y1 * ph

    out = [
        f'<svg class="plot" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">',
        f'<text x="{left}" y="11" style="font-weight:600">{_e(plot.title)} ({_e(plot.unit)})</text>',
        f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="#fafafa" stroke="#ddd"/>',
    ]
    for t in _ticks(x0, x1, plot.x_is_time, 4):
        anchor = "end" if sx(t) > width - 20 else "middle"
        out.append(
            f'<line x1="{sx(t):.1f}" x2="{sx(t):.1f}" y1="{top}" y2="{top + ph}" stroke="#eee"/>'
            f'<text x="{sx(t):.1f}" y="{height - 5}" text-anchor="{anchor}">{_fmt_x(t, plot.x_is_time)}</text>'
        )
    if plot.x_label:
        out.append(
            f'<text x="{width - right}" y="{top + 10}" text-anchor="end" style="fill:#999">{_e(plot.x_label)}</text>'
        )
    for t in _ticks(0, y1, False, 3):
        out.append(f'<text x="{left - 3}" y="{sy(t) + 3:.1f}" text-anchor="end">{_fmt_y(t)}</text>')
    if plot.band:
        upper = " ".join(f"{sx(x):.1f},{sy(hi):.1f}" for x, _, _, hi in plot.band)
        lower = " ".join(f"{sx(x):.1f},{sy(lo):.1f}" for x, lo, _, _ in reversed(plot.band))
        med = " ".join(f"{sx(x):.1f},{sy(m):.1f}" for x, _, m, _ in plot.band)
        out.append(
            f'<polygon points="{upper} {lower}" fill="#c6dbef" opacity=".7">'
            "<title>min-max across ranks</title></polygon>"
        )
        out.append(
            f'<polyline points="{med}" fill="none" stroke="#3182bd" stroke-width="1.2"><title>median</title></polyline>'
        )
    palette = ["#d62728", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
    flagged = 0
    for ln in sorted(plot.lines, key=lambda ln: ln.flagged):
        pts = [(x, y) for x, y in ln.points if x0 <= x <= x1]
        if not pts:
            continue
        colour = palette[flagged % len(palette)] if ln.flagged else "#999"
        flagged += ln.flagged
        poly = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
        w = 1.6 if ln.flagged else 0.8
        out.append(
            f'<polyline points="{poly}" fill="none" stroke="{colour}" stroke-width="{w}">'
            f"<title>{_e(ln.label)}</title></polyline>"
        )
        if len(pts) <= 80:
            out += [
                f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="1.8" fill="{colour}"><title>{_e(ln.label)} '
                f"{_fmt_x(x, plot.x_is_time)}: {y:g}</title></circle>"
                for x, y in pts
            ]
    for x, label in plot.markers:
        if not x0 <= x <= x1:
            continue
        failure = label == FAILURE_MARK
        colour = "#d62728" if failure else "#000"
        out.append(
            f'<line x1="{sx(x):.1f}" x2="{sx(x):.1f}" y1="{top}" y2="{top + ph}" stroke="{colour}" '
            f'stroke-dasharray="3,2" class="{"mark-failure" if failure else "mark-restart"}">'
            f"<title>{_e(label)} {_fmt_x(x, plot.x_is_time)}</title></line>"
        )
        if not failure:
            out.append(f'<text x="{sx(x) + 2:.1f}" y="{top + 9}" style="fill:#000">{_e(label)}</text>')
    out.append("</svg>")
    return "".join(out)


GAP_PX = 34
"""Width of a cut-out quiet stretch on the timeline axis."""


def _segments(times: list[float], width: float) -> list[tuple[float, float, float, float]]:
    """A piecewise time axis: clusters of events get the width, quiet stretches longer than a fifth of the span (and
    over 5 min) are cut to :data:`GAP_PX`. Returns (t0, t1, px0, px1) per cluster."""
    ts = sorted(set(times))
    span = ts[-1] - ts[0]
    cut = max(span / 5, 300.0)
    clusters: list[list[float]] = [[ts[0], ts[0]]]
    for t in ts[1:]:
        if t - clusters[-1][1] > cut:
            clusters.append([t, t])
        else:
            clusters[-1][1] = t
    for c in clusters:  # a lone instant still gets a minute either side
        pad = max((c[1] - c[0]) * 0.04, 30.0)
        c[0] -= pad
        c[1] += pad
    usable = width - GAP_PX * (len(clusters) - 1)
    total = sum(c[1] - c[0] for c in clusters)
    min_px = min(90.0, usable / len(clusters))
    shares = [max(min_px, usable * (c[1] - c[0]) / total) for c in clusters]
    scale = usable / sum(shares)
    out = []
    x = 0.0
    for c, share in zip(clusters, shares, strict=True):
        out.append((c[0], c[1], x, x + share * scale))
        x += share * scale + GAP_PX
    return out


def timeline_svg(points: list[TimelinePoint], clock: str, width: int = 1120) -> str:
    """Workers and AIS as two lanes on one time axis (long quiet stretches cut out); the chain's steps numbered."""
    if not points:
        return '<p class="note">No timed event.</p>'
    left, right, height = 70, 14, 160
    segs = _segments([p.t for p in points], width - left - right)

    def sx(t: float) -> float:
        for t0, t1, a, b in segs:
            if t <= t1:
                return left + a + (max(t, t0) - t0) / (t1 - t0) * (b - a)
        return float(width - right)

    ys = {"AIS": 60, "workers": 112}
    out = [f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">']
    for lane, y in ys.items():
        out.append(f'<text x="4" y="{y + 4}">{lane}</text>')
    for i, (t0, t1, a, b) in enumerate(segs):
        for y in ys.values():
            out.append(f'<line x1="{left + a:.1f}" x2="{left + b:.1f}" y1="{y}" y2="{y}" stroke="#ccc"/>')
        ticks = _ticks(t0, t1, True, max(1, int((b - a) / 80)))
        seconds = len(ticks) > 1 and (ticks[1] - ticks[0]) % 60 != 0
        for t in ticks:
            label = datetime.fromtimestamp(t, UTC).strftime("%H:%M:%S" if seconds else "%H:%M")
            out.append(
                f'<line x1="{sx(t):.1f}" x2="{sx(t):.1f}" y1="28" y2="{height - 22}" stroke="#f0f0f0"/>'
                f'<text x="{sx(t):.1f}" y="{height - 8}" text-anchor="middle">{label}</text>'
            )
        if i + 1 < len(segs):
            gap = (segs[i + 1][0] - t1) / 60
            gx = left + b + GAP_PX / 2
            out.append(
                f'<text x="{gx:.1f}" y="{ys["AIS"] + 28}" text-anchor="middle" style="fill:#999">≈</text>'
                f'<text x="{gx:.1f}" y="{height - 8}" text-anchor="middle" style="fill:#999">{gap:.0f} min</text>'
            )
    out.append(f'<text x="{width - right}" y="16" text-anchor="end">{_e(clock)}</text>')
    labels: dict[str, list[tuple[float, int]]] = {lane: [] for lane in ys}
    for p in sorted(points, key=lambda p: (p.chain_step is not None, p.t)):
        x, y = sx(p.t), ys[p.lane]
        when = datetime.fromtimestamp(p.t, UTC).strftime("%H:%M:%S")
        tip = f"<title>{when} {_e(p.label)}</title>"
        if p.chain_step is None:
            out.append(f'<circle cx="{x:.1f}" cy="{y}" r="4" fill="#888" opacity=".7">{tip}</circle>')
            continue
        out.append(f'<circle cx="{x:.1f}" cy="{y}" r="6" fill="#d62728">{tip}</circle>')
        labels[p.lane].append((x, p.chain_step))
    for lane, marks in labels.items():  # steps drawn on the same spot share one label: "2-4"
        groups: list[list[tuple[float, int]]] = []
        for x, step in sorted(marks):
            if groups and x - groups[-1][-1][0] < 16:
                groups[-1].append((x, step))
            else:
                groups.append([(x, step)])
        for g in groups:
            steps = sorted(st for _, st in g)
            text = str(steps[0]) if len(steps) == 1 else format_ranges(steps).replace(",", ", ")
            x = sum(gx for gx, _ in g) / len(g)
            ly = ys[lane] - 12 if lane == "AIS" else ys[lane] + 20
            out.append(
                f'<text x="{x:.1f}" y="{ly}" text-anchor="middle" style="fill:#d62728;font-weight:700;font-size:12px">'
                f"{text}</text>"
            )
    out.append("</svg>")
    return "".join(out)


# ---------------------------------------------------------------------------------------------------------------------
# Sections


def _header(data: ReportData) -> str:
    d = data.diagnosis
    v = d.verdict
    ok = d.verification.accepted
    who = f" — culprit rank(s) {format_ranges(v.culprit_ranks)}" if v.culprit_ranks else ""
    nodes = f" on {', '.join(v.suspect_nodes)}" if v.suspect_nodes else ""
    cov = d.coverage
    missing = f"<b>missing {_e(cov.missing_ranks)}</b>" if cov.missing_ranks else "none missing"
    rows = [
        ("Framework", d.job.framework),
        ("Scale", d.job.scale),
        ("Start / end (worker clock)", f"{d.job.start_time or '?'} → {d.job.end_time or '?'}"),
        ("Data source", d.job.data_source),
        ("Logs read", d.job.logs),
    ]
    table = "".join(f"<tr><th>{_e(k)}</th><td>{_e(val)}</td></tr>" for k, val in rows)
    return (
        f"<h1>{_e(v.category)}{_e(who)}{_e(nodes)}</h1>"
        f'<p><span class="badge">{_e(v.category)}</span><span class="badge">confidence {_e(v.confidence)}</span>'
        f'<span class="badge {"ok" if ok else "bad"}">verification: {"ACCEPTED" if ok else "REJECTED"}</span></p>'
        f"<p>{_e(v.explanation)}</p>"
        f"<p>Coverage: {cov.files_scanned:,} file(s), {cov.bytes_scanned:,} bytes; "
        f"ranks {_e(cov.ranks_found or 'none')}"
        f" of world size {_e(cov.world_size or 'unknown')}; {missing}.</p>"
        f"<table>{table}</table>"
        + (
            "<p><b>Next steps:</b></p><ul>" + "".join(f"<li>{_e(s)}</li>" for s in v.next_steps) + "</ul>"
            if v.next_steps
            else ""
        )
    )


def _grid(data: ReportData) -> str:
    total = sum(data.state_counts.values())
    big = total > BIG_GRID
    legend = "".join(
        f'<span title="{_e(STATE_MEANING[s])}"><i class="s-{s}"></i>{s.replace("_", " ")} '
        f"{data.state_counts[s]:,}</span>"
        for s in STATES
        if data.state_counts[s]
    )
    culprits = data.diagnosis.verdict.culprit_ranks
    parts = [
        f'<section id="ranks"{" class=small" if big else ""}><h2>Ranks by node ({total:,} ranks, '
        f"{len(data.nodes):,} nodes)</h2>",
        f'<div class="legend">{legend}<span><i style="outline:3px solid #000;background:#fff"></i>culprit '
        f"{_e(format_ranges(culprits) or 'none')}</span></div>",
        '<p class="note">Hover a cell for the line that put the rank in its state (file:line).</p><div class="grid">',
    ]
    for node in data.nodes:
        ranks = format_ranges([c.rank for c in node.cells])
        label = "" if big else f'<span class="nl">{_e(node.node)}</span>'
        cells = "".join(
            f'<i class="s-{c.state}{" c" if c.culprit else ""}" title="{_e(c.evidence)}"></i>' for c in node.cells
        )
        parts.append(
            f'<div class="nd" title="{_e(node.node)}: ranks {ranks}">{label}<div class="cs">{cells}</div></div>'
        )
    parts.append("</div></section>")
    return "".join(parts)


def _local(t: str | None) -> str:
    return (t or "").replace("T", " ")


def _timeline(data: ReportData) -> str:
    d = data.diagnosis
    utc = {(e.source, e.event): e.time_utc for e in d.timeline if e.time_utc}
    chain = "".join(
        f"<li><b>{_e(utc.get((c.source, c.event)) or _local(c.time_local) or '(' + c.time_note + ')')}</b> "
        f"{_e(c.event)} <code>{_e(c.source)}</code></li>"
        for c in d.root_cause_chain
    )
    return (
        f'<section id="timeline"><h2>Timeline ({_e(data.timeline_clock)})</h2>'
        '<p class="note">Red numbers: the root-cause chain, trigger first (hover a dot for the event and its line). '
        "Untimed lines are in the table only.</p>"
        + timeline_svg(data.timeline, data.timeline_clock)
        + '<h2 id="chain">Root-cause chain</h2><ol>'
        + (chain or "<li>(no event: see the explanation and the next steps)</li>")
        + "</ol></section>"
    )


def _timeline_table(data: ReportData) -> str:
    d = data.diagnosis
    chain_sources = {(c.source, c.event) for c in d.root_cause_chain}
    rows = []
    for e in d.timeline[:TIMELINE_ROWS]:
        when = e.time_utc or _local(e.time_local) or f"({e.time_note})"
        cls = ' class="chain"' if (e.source, e.event) in chain_sources else ""
        rows.append(
            f"<tr{cls}><td class=mono>{_e(when)}</td><td class=mono>{_e(e.source)}</td><td>{_e(e.ranks)}</td>"
            f"<td>{_e(e.event)}</td></tr>"
        )
    more = d.timeline_truncated + max(0, len(d.timeline) - TIMELINE_ROWS)
    return (
        '<section id="events"><h2>Timeline table (root-cause chain rows highlighted)</h2><table>'
        "<tr><th>Time</th><th>Source</th><th>Ranks</th><th>Event</th></tr>"
        + "".join(rows)
        + (f"<tr><td colspan=4>… {more} more event(s) (see --json)</td></tr>" if more else "")
        + "</table></section>"
    )


def _ais(data: ReportData) -> str:
    if not data.ais_plots:
        return f'<section id="ais"><h2>AIS counters</h2><p class="note">{_e(data.ais_note)}.</p></section>'
    parts = [
        '<section id="ais"><h2>AIS counters per daemon (increase per stats interval)</h2>',
        f'<p class="note">{_e(data.ais_note)}. Dashed black: restart or stats reset; dashed red: the stuck '
        "collective's start.</p>",
    ]
    for name, plots in data.ais_plots:
        parts.append(f'<div class="daemon">{_e(name)}</div><div class="plots">')
        parts += [plot_svg(p) for p in plots]
        parts.append("</div>")
    parts.append("</section>")
    return "".join(parts)


def _series(data: ReportData) -> str:
    if not data.series_plots:
        return (
            '<section id="series"><h2>Step time and memory</h2><p class="note">The logs carry no step-time or '
            "memory lines.</p></section>"
        )
    parts = ['<section id="series"><h2>Step time and memory per rank (worker clock)</h2><div class="plots">']
    for p in data.series_plots:
        parts.append(f"<div>{plot_svg(p, 550, 220)}" + (f'<div class="note">{_e(p.note)}</div>' if p.note else ""))
        flagged = [ln.label for ln in p.lines if ln.flagged]
        if flagged:
            parts.append('<div class="note">Flagged: ' + _e("; ".join(flagged[:8])) + "</div>")
        parts.append("</div>")
    parts.append("</div></section>")
    return "".join(parts)


def _verification(data: ReportData) -> str:
    v = data.diagnosis.verification
    mark = {"passed": "✔ passed", "failed": "✘ failed", "undecided": "? undecided", "not_applicable": "– n/a"}
    rows = "".join(
        f"<tr><td>{_e(c.rule)}</td><td>{mark.get(c.status, c.status)}</td><td>{_e(c.detail)}"
        + (f"<br><span class=note>next: {_e(c.next_step)}</span>" if c.next_step and not c.passed else "")
        + "</td><td class=mono>"
        + "<br>".join(_e(f"{ev.file}:{ev.line}") for ev in c.evidence[:4])
        + "</td></tr>"
        for c in v.checks
    )
    return (
        f'<section id="verification"><h2>Verification</h2><p>{_e(v.summary)}</p><table><tr><th>Rule</th>'
        f"<th>Result</th><th>Detail</th><th>Lines used</th></tr>{rows}</table></section>"
    )


def render_html(data: ReportData, source: str = "") -> str:
    """The whole page as one string (UTF-8, no external reference)."""
    v = data.diagnosis.verdict
    title = f"{v.category} {format_ranges(v.culprit_ranks)}".strip()
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{_e(title)} — debug-training-logs</title><style>{CSS}{_state_css()}</style></head><body>"
        '<nav><a href="#ranks">Ranks</a><a href="#timeline">Timeline</a><a href="#chain">Chain</a>'
        '<a href="#ais">AIS</a><a href="#series">Step time / memory</a><a href="#events">Events</a>'
        '<a href="#verification">Verification</a></nav>'
        + _header(data)
        + _grid(data)
        + _timeline(data)
        + _ais(data)
        + _series(data)
        + _timeline_table(data)
        + _verification(data)
        + f'<p class="note">debug-training-logs {__version__}{" · " + _e(source) if source else ""}</p>'
        "</body></html>\n"
    )
