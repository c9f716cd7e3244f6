"""The report's plots, as plotly figures in one style: one colour per rig, the geometric mean of
the boots as a line, its interval (analysis.stats) as a band, every boot as a faint point."""

import math
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from harness.boot_phases import PHASES
from rigbench.report.analysis import Latencies, ParetoPoint, Point, pareto_frontier

PALETTE = qualitative.Safe
FONT = "system-ui, -apple-system, Segoe UI, Roboto, sans-serif"


def rig_colours(rigs: Sequence[str]) -> dict[str, str]:
    return {rig: PALETTE[i % len(PALETTE)] for i, rig in enumerate(rigs)}


def _rgba(hex_colour: str, alpha: float) -> str:
    if hex_colour.startswith("rgb("):
        return hex_colour.replace("rgb(", "rgba(").replace(")", f", {alpha})")
    h = hex_colour.lstrip("#")
    r, g, b = (int(h[i : i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r}, {g}, {b}, {alpha})"


def _style(fig: go.Figure, title: str, height: int = 380) -> go.Figure:
    fig.update_layout(  # the template is put in as the figure is written (report/html.py)
        title={"text": title, "x": 0.01, "font": {"size": 15}},
        font={"family": FONT, "size": 12},
        height=height,
        margin={"l": 60, "r": 20, "t": 60, "b": 50},
        legend={"orientation": "h", "y": -0.18, "x": 0},
        hovermode="closest",
    )
    return fig


def _log_if_wide(xs: Sequence[float], spread: float = 8) -> str:
    positive = [x for x in xs if x > 0]
    return "log" if positive and max(positive) / min(positive) >= spread else "linear"


def _value_axis(
    update: Callable[..., Any],
    values: Sequence[float],
    title: str,
    log_title: str | None = None,
    **where: Any,
) -> None:
    """An axis of measured values (`update`: a figure's update_xaxes or update_yaxes) from
    zero, or on a log scale where they span 8x or more: rigs far apart (a CPU port beside a GPU
    server) would leave the fast or the slow one flat on a linear axis. Its title says which."""
    if _log_if_wide(values) == "log":
        update(title=log_title or f"{title} (log scale)", **where, **_log_axis(values))
    else:
        update(title=title, rangemode="tozero", **where)


def log_ticks(values: Sequence[float]) -> list[float]:
    """Labelled ticks of a log axis: the decades the values span (at least two of them), or
    1-2-5 steps where they span less than two decades; never plotly's bare minor digits."""
    positive = [v for v in values if v > 0]
    if not positive:
        return []
    low = math.floor(math.log10(min(positive)))
    high = math.ceil(math.log10(max(positive)))
    decades = [10.0**e for e in range(low, high + 1)]
    if sum(1 for t in decades if min(positive) <= t <= max(positive)) >= 2:
        return decades
    return [m * 10.0**e for e in range(low, high + 1) for m in (1, 2, 5)]


def _log_axis(values: Sequence[float]) -> dict[str, Any]:
    ticks = log_ticks(values)
    return {
        "type": "log",
        "tickvals": ticks,
        "ticktext": [f"{t:,.10g}" for t in ticks],
        "minor": {"showgrid": False},
    }


def _band(
    fig: go.Figure,
    points: Sequence[Point],
    name: str,
    colour: str,
    *,
    dash: str = "solid",
    group: str,
    row: int | None = None,
    col: int | None = None,
    boots: bool = True,
    show_legend: bool = True,
) -> None:
    """Geometric-mean line, interval band and per-boot points of one rig's series."""
    where = {"row": row, "col": col} if row is not None else {}
    xs = [p.x for p in points]
    if any(p.aggregate.has_interval for p in points):
        fig.add_trace(
            go.Scatter(
                x=[*xs, *reversed(xs)],
                y=[p.aggregate.ci_high for p in points]
                + [p.aggregate.ci_low for p in reversed(points)],
                fill="toself",
                fillcolor=_rgba(colour, 0.18),
                mode="lines",  # the band's corners are no data: no markers of their own
                line={"width": 0},
                hoverinfo="skip",
                name=f"{name} interval",
                legendgroup=group,
                showlegend=False,
            ),
            **where,
        )
    fig.add_trace(
        go.Scatter(
            x=xs,
            y=[p.aggregate.value for p in points],
            mode="lines+markers",
            line={"color": colour, "width": 2.5, "dash": dash},
            marker={"size": 7},
            name=name,
            legendgroup=group,
            showlegend=show_legend,
            customdata=[
                [p.cell, p.aggregate.ci_low, p.aggregate.ci_high, p.aggregate.n_boots]
                for p in points
            ],
            hovertemplate=(
                f"{name}<br>%{{customdata[0]}}: geometric mean %{{y:.4g}} "
                "[%{customdata[1]:.4g}, %{customdata[2]:.4g}] of %{customdata[3]} boots"
                "<extra></extra>"
            ),
        ),
        **where,
    )
    if boots:
        fig.add_trace(
            go.Scatter(
                x=[p.x for p in points for _ in p.boots],
                y=[v for p in points for _, v in p.boots],
                mode="markers",
                marker={
                    "color": colour,
                    "size": 8,
                    "symbol": "circle-open",
                    "line": {"color": colour, "width": 1.5},
                },
                name=f"{name}: each boot",
                legendgroup=group,
                showlegend=show_legend,
                customdata=[[b] for p in points for b, _ in p.boots],
                hovertemplate=f"{name} boot %{{customdata[0]}}: %{{y:.4g}}<extra></extra>",
            ),
            **where,
        )


def _boot_values(point: Point) -> list[float]:
    return [v for _, v in point.boots]


def throughput_figure(
    by_rig: Mapping[str, Sequence[Point]], colours: Mapping[str, str], x_title: str
) -> go.Figure:
    fig = go.Figure()
    for rig, points in by_rig.items():
        _band(fig, points, rig, colours[rig], group=rig)
    xs = [p.x for ps in by_rig.values() for p in ps]
    fig.update_xaxes(title=x_title, type=_log_if_wide(xs), tickvals=sorted(set(xs)))
    ys = [v for ps in by_rig.values() for p in ps for v in (p.aggregate.value, *_boot_values(p))]
    _value_axis(fig.update_yaxes, ys, "output tokens/s")
    return _style(
        fig, "Output throughput vs load (geometric mean of boots, band: interval, o: boots)"
    )


def latency_figure(
    series: Mapping[str, Mapping[str, Sequence[Point]]],
    colours: Mapping[str, str],
    x_title: str,
) -> go.Figure:
    """`series[metric key][rig]`, for ttft_ms.p50/p99 and tpot_ms.p50/p99."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("TTFT (ms)", "TPOT (ms)"))
    xs: list[float] = []
    for col, field in ((1, "ttft_ms"), (2, "tpot_ms")):
        ys: list[float] = []
        for stat, dash in (("p50", "solid"), ("p99", "dot")):
            for rig, points in series.get(f"{field}.{stat}", {}).items():
                xs += [p.x for p in points]
                ys += [v for p in points for v in (p.aggregate.value, *_boot_values(p))]
                _band(
                    fig,
                    points,
                    f"{rig} {stat}",
                    colours[rig],
                    dash=dash,
                    group=f"{rig}{stat}",
                    row=1,
                    col=col,
                    boots=stat == "p50",
                    show_legend=col == 1,
                )
        _value_axis(fig.update_yaxes, ys, "ms", row=1, col=col)
    ticks = sorted(set(xs))
    fig.update_xaxes(title=x_title, type=_log_if_wide(xs), tickvals=ticks)
    return _style(fig, "TTFT and TPOT vs load: p50 (solid) and p99 (dotted)", height=460)


def _cdf(values: Sequence[float]) -> tuple[list[float], list[float]]:
    ordered = sorted(values)
    n = len(ordered)
    return ordered, [(i + 1) / n for i in range(n)]


def cdf_figure(by_rig: Mapping[str, Latencies], colours: Mapping[str, str], cell: str) -> go.Figure:
    fig = make_subplots(rows=1, cols=2, subplot_titles=("TTFT (ms)", "TPOT per request (ms)"))
    for col, field in ((1, "ttft_ms"), (2, "tpot_ms")):
        every = [v for lat in by_rig.values() for v in getattr(lat, field)]
        if _log_if_wide(every) == "log":  # one rig far faster: keep its curve readable
            fig.update_xaxes(title="ms (log scale)", row=1, col=col, **_log_axis(every))
    for rig, lat in by_rig.items():
        for col, values in ((1, lat.ttft_ms), (2, lat.tpot_ms)):
            if not values:
                continue
            xs, ys = _cdf(values)
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=ys,
                    mode="lines",
                    line={"shape": "hv", "color": colours[rig], "width": 2.5},
                    name=f"{rig} ({len(values)} requests)",
                    legendgroup=rig,
                    showlegend=col == 1,
                    hovertemplate=f"{rig}: %{{y:.0%}} of requests ≤ %{{x:.4g}} ms<extra></extra>",
                ),
                row=1,
                col=col,
            )
    fig.update_yaxes(title="share of requests", tickformat=".0%", range=[0, 1.02])
    return _style(fig, f"Latency distribution per rig at {cell} (every request of every boot)")


def tradeoff_figure(
    throughput: Mapping[str, Sequence[Point]],
    tpot: Mapping[str, Sequence[Point]],
    colours: Mapping[str, str],
) -> go.Figure:
    """Throughput against per-user decode latency, one point per cell: pick an operating
    point on the curve."""
    fig = go.Figure()
    for rig, points in throughput.items():
        latency = {p.cell: p for p in tpot.get(rig, [])}
        both = [(latency[p.cell], p) for p in points if p.cell in latency]
        if not both:
            continue
        fig.add_trace(
            go.Scatter(
                x=[lat.aggregate.value for lat, _ in both],
                y=[tp.aggregate.value for _, tp in both],
                error_x={
                    "type": "data",
                    "symmetric": False,
                    "color": colours[rig],
                    "array": [lat.aggregate.ci_high - lat.aggregate.value for lat, _ in both],
                    "arrayminus": [lat.aggregate.value - lat.aggregate.ci_low for lat, _ in both],
                },
                error_y={
                    "type": "data",
                    "symmetric": False,
                    "color": colours[rig],
                    "array": [tp.aggregate.ci_high - tp.aggregate.value for _, tp in both],
                    "arrayminus": [tp.aggregate.value - tp.aggregate.ci_low for _, tp in both],
                },
                mode="lines+markers+text",
                text=[tp.cell for _, tp in both],
                textposition="top right",
                cliponaxis=False,  # a label at the plot's edge is drawn whole
                line={"color": colours[rig], "width": 2.5},
                marker={"size": 8},
                name=rig,
                hovertemplate=f"{rig} %{{text}}: %{{y:.4g}} tok/s at TPOT p50 %{{x:.4g}} ms"
                "<extra></extra>",
            )
        )
    tpots = [p.aggregate.value for ps in tpot.values() for p in ps]
    tok_s = [p.aggregate.value for ps in throughput.values() for p in ps]
    x_title = "TPOT p50 (ms per output token, per request)"
    _value_axis(fig.update_xaxes, tpots, x_title, f"{x_title}, log scale")
    _value_axis(fig.update_yaxes, tok_s, "output tokens/s")
    styled = _style(fig, "Throughput vs latency: each point a load cell (up and left is better)")
    return styled.update_layout(margin={"t": 70, "r": 40})  # room for the cells' labels


def pareto_figure(
    by_rig: Mapping[str, Sequence[ParetoPoint]], colours: Mapping[str, str]
) -> go.Figure:
    """Output tok/s per user against output tok/s per GPU, as the field draws runtimes: every
    boot's cells as points, each rig's Pareto frontier as a line (up and right is better)."""
    fig = go.Figure()
    for rig, points in by_rig.items():
        fig.add_trace(
            go.Scatter(
                x=[p.per_user for p in points],
                y=[p.per_gpu for p in points],
                mode="markers",
                marker={"color": _rgba(colours[rig], 0.45), "size": 7},
                text=[f"{p.cell}, boot {p.boot}" for p in points],
                name=f"{rig}: cells",
                legendgroup=rig,
                hovertemplate=f"{rig} %{{text}}: %{{x:.4g}} tok/s per user, %{{y:.4g}} tok/s "
                "per GPU<extra></extra>",
            )
        )
        frontier = pareto_frontier(points)
        fig.add_trace(
            go.Scatter(
                x=[p.per_user for p in frontier],
                y=[p.per_gpu for p in frontier],
                mode="lines+markers",
                line={"color": colours[rig], "width": 2.5, "shape": "hv"},
                marker={"size": 9},
                text=[f"{p.cell}, boot {p.boot}" for p in frontier],
                name=f"{rig}: frontier",
                legendgroup=rig,
                hovertemplate=f"{rig} frontier %{{text}}: %{{x:.4g}} tok/s per user, %{{y:.4g}} "
                "tok/s per GPU<extra></extra>",
            )
        )
    users = [p.per_user for ps in by_rig.values() for p in ps]
    gpu = [p.per_gpu for ps in by_rig.values() for p in ps]
    x_title = "output tokens/s per user (1000 / TPOT p50 in ms)"
    _value_axis(fig.update_xaxes, users, x_title, f"{x_title}, log scale")
    _value_axis(fig.update_yaxes, gpu, "output tokens/s per GPU")
    return _style(
        fig, "Pareto view: every boot's cells, each rig's frontier (up and right is better)"
    )


def cost_figure(by_rig: Mapping[str, Sequence[Point]], colours: Mapping[str, str]) -> go.Figure:
    fig = go.Figure()
    for rig, points in by_rig.items():
        fig.add_trace(
            go.Bar(
                x=[p.cell for p in points],
                y=[p.aggregate.value for p in points],
                error_y={
                    "type": "data",
                    "symmetric": False,
                    "array": [p.aggregate.ci_high - p.aggregate.value for p in points],
                    "arrayminus": [p.aggregate.value - p.aggregate.ci_low for p in points],
                },
                marker={"color": colours[rig]},
                name=rig,
                hovertemplate=f"{rig} %{{x}}: $%{{y:.4g}} per million output tokens<extra></extra>",
            )
        )
    fig.update_layout(barmode="group")
    fig.update_xaxes(title="load cell", type="category")
    costs = [p.aggregate.value for ps in by_rig.values() for p in ps]
    _value_axis(fig.update_yaxes, costs, "USD per million output tokens")
    return _style(fig, "Cost per million output tokens, at the price each boot paid")


def trend_figure(
    by_metric: Mapping[str, Mapping[str, Sequence[tuple[datetime, str, Point]]]],
    titles: Mapping[str, str],
    title: str,
) -> go.Figure:
    """`by_metric[metric][cell]`: that cell's point in each sweep, oldest first."""
    metrics = list(by_metric)
    fig = make_subplots(
        rows=len(metrics),
        cols=1,
        shared_xaxes=True,
        subplot_titles=[titles[m] for m in metrics],
        vertical_spacing=0.08,
    )
    cells = sorted({c for per_cell in by_metric.values() for c in per_cell})
    colours = rig_colours(cells)
    for row, metric in enumerate(metrics, start=1):
        for cell, points in by_metric[metric].items():
            colour = colours[cell]
            fig.add_trace(
                go.Scatter(
                    x=[when for when, _, _ in points],
                    y=[p.aggregate.value for _, _, p in points],
                    error_y={
                        "type": "data",
                        "symmetric": False,
                        "color": colour,
                        "array": [p.aggregate.ci_high - p.aggregate.value for _, _, p in points],
                        "arrayminus": [
                            p.aggregate.value - p.aggregate.ci_low for _, _, p in points
                        ],
                    },
                    mode="lines+markers",
                    line={"color": colour, "width": 2.5},
                    marker={"size": 8},
                    name=cell,
                    legendgroup=cell,
                    showlegend=row == 1,
                    text=[sweep for _, sweep, _ in points],
                    hovertemplate=f"{cell}, sweep %{{text}}: %{{y:.4g}}<extra></extra>",
                ),
                row=row,
                col=1,
            )
            fig.add_trace(
                go.Scatter(
                    x=[when for when, _, p in points for _ in p.boots],
                    y=[v for _, _, p in points for _, v in p.boots],
                    mode="markers",
                    marker={"color": colour, "size": 6, "opacity": 0.45, "symbol": "circle-open"},
                    name=f"{cell} per boot",
                    legendgroup=cell,
                    showlegend=False,
                    hovertemplate=f"{cell} one boot: %{{y:.4g}}<extra></extra>",
                ),
                row=row,
                col=1,
            )
    fig.update_yaxes(rangemode="tozero")
    return _style(fig, title, height=260 * len(metrics) + 80)


def mark_regressions(
    fig: go.Figure, marks: Sequence[tuple[int, datetime, float, str]]
) -> go.Figure:
    """A cross over each point that raised a regression alert: (subplot row, when, y, text)."""
    for n, (row, when, y, text) in enumerate(marks):
        fig.add_trace(
            go.Scatter(
                x=[when], y=[y], mode="markers", name="regression alert",
                legendgroup="regression", showlegend=n == 0,
                marker={"color": "#d62728", "size": 16, "symbol": "x-thin-open",
                        "line": {"width": 3, "color": "#d62728"}},
                text=[text], hovertemplate="%{text}<extra></extra>",
            ),
            row=row, col=1,
        )  # fmt: skip
    return fig


def timeline_figure(
    boots: Sequence[tuple[str, int, Mapping[str, float]]], colours: Mapping[str, str]
) -> go.Figure:
    """Each boot's phases (rig, boot, phase -> seconds since launch) as one row of segments:
    a segment per phase, from the phase reached before it, in PHASES order."""
    fig = go.Figure()
    rows = [f"{rig} boot {boot}" for rig, boot, _ in boots]
    shown: set[str] = set()
    for (rig, _, phases), row in zip(boots, rows, strict=True):
        previous = 0.0
        reached = [(name, phases[name]) for name in PHASES if name in phases]
        for index, (name, at) in enumerate(sorted(reached, key=lambda item: item[1])):
            fig.add_trace(
                go.Bar(
                    y=[row],
                    x=[max(at - previous, 0.0)],
                    base=[previous],
                    orientation="h",
                    marker={
                        "color": _rgba(colours[rig], 0.35 + 0.6 * (index % 2)),
                        "line": {"color": colours[rig], "width": 1},
                    },
                    name=rig,
                    legendgroup=rig,
                    showlegend=rig not in shown,
                    text=[name],
                    textposition="inside",
                    insidetextanchor="middle",
                    hovertemplate=f"{row}: {name} at {at:.1f} s (+{at - previous:.1f} s)"
                    "<extra></extra>",
                )
            )
            shown.add(rig)
            previous = max(previous, at)
    fig.update_layout(barmode="overlay")
    fig.update_xaxes(title="seconds since launch", rangemode="tozero")
    fig.update_yaxes(type="category", autorange="reversed")
    return _style(fig, "Each boot's phases, from launch", height=max(260, 60 + 40 * len(rows)))
