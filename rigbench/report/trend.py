"""A rig's figures across sweeps over time: the results rows of one rig and model (and
instance type), by Query on the table's `by_config` index (or `by_month` without a type)."""

from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

from analysis.metrics import HEADLINE, heading_of, metric_spec
from analysis.stats import aggregate_boots
from functions.regressions import METHOD, Regression
from harness.schemas import cell_label
from rigbench.report import analysis, figures
from rigbench.report.errors import ReportError
from rigbench.report.html import TIME_FORMAT, Page, Section, figure_html, render_table

Trend = dict[str, dict[str, list[tuple[datetime, str, analysis.Point]]]]


def _when(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def trend_points(rows: list[dict[str, Any]]) -> Trend:
    """`[metric][series]`: one point per sweep, oldest first. A series is a cell, suffixed
    with the instance type when the rows span several."""
    types = {r.get("instance_type") for r in rows}
    grouped: dict[str, dict[str, dict[str, list[tuple[int, float]]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    started: dict[str, datetime] = {}
    xs: dict[str, float] = {}
    for row in rows:
        cell = row.get("metrics") or {}
        if (cell.get("requests_ok") or 0) <= 0:
            continue
        label = cell_label(cell)
        if len(types) > 1:
            label = f"{label} {row.get('instance_type')}"
        xs[label] = analysis.cell_x(cell)
        sweep = row["sweep_id"]
        when = _when(row["started_at"])
        started[sweep] = min(started.get(sweep, when), when)
        for key in HEADLINE:  # the metrics regression alerts watch
            value = metric_spec(key).of_row(row)
            if value is not None:
                grouped[key][label][sweep].append((int(row["boot"]), value))
    out: Trend = {}
    for key in HEADLINE:
        by_series: dict[str, list[tuple[datetime, str, analysis.Point]]] = {}
        for label in sorted(grouped.get(key, {}), key=lambda s: (xs[s], s)):
            points = []
            for sweep, boots in grouped[key][label].items():
                agg = aggregate_boots([v for _, v in boots])
                points.append(
                    (
                        started[sweep],
                        sweep,
                        analysis.Point(cell=label, x=xs[label], boots=boots, aggregate=agg),
                    )
                )
            by_series[label] = sorted(points, key=lambda p: p[0])
        if by_series:
            out[key] = by_series
    return out


def _sweeps(n: int) -> str:
    return f"{n} sweep" if n == 1 else f"{n} sweeps"


def regression_marks(
    points: Trend, regressions: list[Regression], several_types: bool
) -> list[tuple[int, datetime, float, str]]:
    """Where each alert's sweep sits on the figure: (subplot row, when, value, hover text)."""
    marks = []
    for found in regressions:
        if found.metric not in points:
            continue
        label = found.cell_label + (f" {found.instance_type}" if several_types else "")
        row = list(points).index(found.metric) + 1
        for when, sweep, point in points[found.metric].get(label, []):
            if sweep == found.sweep_id:
                text = f"{found.headline}<br>{found.basis}"
                marks.append((row, when, point.aggregate.value, text))
    return marks


def regressions_section(regressions: list[Regression]) -> Section:
    rows = [
        [
            r.sweep_id, r.cell_label, heading_of(r.metric), f"{r.now:.4g}",
            f"{r.history:.4g}", f"{r.worse_by:.2f}x (> {r.threshold:g}x)", r.basis,
        ]
        for r in regressions
    ]  # fmt: skip
    return Section(
        "Regression alerts",
        "regressions",
        intro=f"A sweep whose rig was worse than its own recent history (same model, instance "
        f"type and setup) by more than the sweep's regression_ratio, marked x above. {METHOD}.",
        blocks=[
            render_table(
                ["sweep", "cell", "metric", "now", "history", "worse by", "rests on"], rows
            )
        ],
    )


def trend_page(
    rows: list[dict[str, Any]],
    rig: str,
    model: str,
    instance_type: str | None,
    regressions: list[Regression] | None = None,
) -> Page:
    where = f"{rig} serving {model}" + (f" on {instance_type}" if instance_type else "")
    if not rows:
        raise ReportError(
            f"no results for {where} in the period asked (widen it with --since, or check the "
            "names with `rigbench results`)"
        )
    points = trend_points(rows)
    sweeps = sorted(
        {r["sweep_id"] for r in rows},
        key=lambda s: min(r["started_at"] for r in rows if r["sweep_id"] == s),
    )
    notes = []
    if len(sweeps) == 1:
        notes.append(f"Only one sweep ({sweeps[0]}) so far: no trend yet, one point per cell.")
    fig = figures.trend_figure(
        points,
        {key: heading_of(key) for key in points},
        f"{where}: geometric mean over boots per sweep (o: each boot)",
    )
    shown = {r["sweep_id"] for r in rows}
    alerts = [
        r for r in regressions or []
        if r.sweep_id in shown and r.rig == rig and r.model == model
        and (instance_type is None or r.instance_type == instance_type)
    ]  # fmt: skip
    several_types = len({r.get("instance_type") for r in rows}) > 1
    figures.mark_regressions(fig, regression_marks(points, alerts, several_types))
    if alerts:
        notes.append(
            f"{len(alerts)} regression alert(s) in this period, in "
            f"{len({a.sweep_id for a in alerts})} sweep(s): marked x, listed below."
        )
    if len(sweeps) == 1:  # one instant: a day either side, not an axis of microseconds
        when = min(_when(r["started_at"]) for r in rows)
        fig.update_xaxes(range=[when - timedelta(days=1), when + timedelta(days=1)])
    throughput = metric_spec("output_tok_s")
    table_rows = []
    for sweep in sweeps:
        own = [r for r in rows if r["sweep_id"] == sweep]
        tok_s = [
            f"{cell_label(r['metrics'])}: {throughput.of_row(r) or 0:.1f}"
            for r in sorted(own, key=lambda r: (r["cell"], r["boot"]))
        ]
        table_rows.append(
            [
                sweep,
                min(_when(r["started_at"]) for r in own).astimezone(UTC).strftime(TIME_FORMAT),
                str(len({r["boot"] for r in own})),
                ", ".join(sorted({str(r.get("instance_type")) for r in own})),
                "; ".join(tok_s),
            ]
        )
    return Page(
        title=f"rigbench trend: {rig}",
        subtitle=f"{where}, {_sweeps(len(sweeps))}",
        status="warn" if alerts or len(sweeps) == 1 else "ok",
        status_text=_sweeps(len(sweeps))
        + (f", {len(alerts)} regression alert(s)" if alerts else ""),
        notes=notes,
        sections=[
            Section(
                "Over time",
                "trend",
                intro=f"Each point: one sweep's geometric mean over its boots of "
                f"{', '.join(metric_spec(k).label for k in HEADLINE)}, with its interval.",
                blocks=[figure_html(fig, "plot-trend")],
            ),
            Section(
                "Sweeps",
                "sweeps",
                blocks=[
                    render_table(
                        [
                            "sweep",
                            "started",
                            "boots",
                            "instance type",
                            f"{throughput.label} {throughput.unit} per boot",
                        ],
                        table_rows,
                    )
                ],
            ),
            *([regressions_section(alerts)] if alerts else []),
        ],
    )
