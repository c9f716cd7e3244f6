"""A sweep's report page: what ran and what it cost, the comparison in the table's own words,
the plots, cost per million output tokens, provenance, and what is missing."""

import json
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from markupsafe import Markup, escape

from analysis.boot_values import START_CELL
from analysis.compare import (
    Comparison,
    MetricComparison,
    RigResult,
    caption,
    footnotes,
    rig_heading,
    value_words,
)
from analysis.stats import BootAggregate, Verdict
from harness.boot_phases import PHASES
from harness.schemas import cell_label
from rigbench.progress import decision_row, round_row
from rigbench.report import analysis, figures
from rigbench.report.agreement import agreement_of, agreement_section, probe_cost
from rigbench.report.comparison import LOCAL_EMULATION, comparison_of
from rigbench.report.data import BootData, SweepData
from rigbench.report.html import TIME_FORMAT, Page, Section, figure_html, render_table

_VERSION = re.compile(r"^v?\d+\.\d+\.\d+\S*$")  # 2.11.0, 0.10.2+cpu: a version, not a setting
_VERDICT_CLASS = {Verdict.FASTER: "better", Verdict.SLOWER: "worse"}


def _span(css: str, text: str) -> Markup:
    return Markup('<span class="{}">{}</span>').format(css, text)


def _join(parts: Iterable[Markup | str]) -> Markup:
    return Markup("<br>").join(parts)


def _value(agg: BootAggregate | None) -> Markup:
    if agg is None:
        return _span("dim", "no data")
    return _span("v", value_words(agg)) + Markup("<br>") + _span("iv", agg.interval_words)


def _rig_cell(result: RigResult, baseline: str) -> Markup:
    parts = [_value(result.aggregate)]
    if result.rig == baseline:
        parts.append(_span("dim", "baseline"))
    elif result.words:
        css = _VERDICT_CLASS.get(result.verdict, "noise") if result.verdict else "noise"
        parts.append(_span(css, result.words))
    return _join(parts)


def _ranking_cell(metric: MetricComparison) -> Markup:
    if metric.withheld:
        return _span("withheld", metric.withheld)
    parts: list[Markup | str] = [escape(metric.ranking)]
    if metric.flip_words:
        parts.append(_span("flip", metric.flip_words))
    return _join(parts)


def comparison_table(comparison: Comparison) -> str:
    rows: list[list[Any]] = []
    for cell in comparison.cells:
        for metric in cell.metrics:
            by_rig = {r.rig: r for r in metric.results}
            rows.append(
                [
                    cell.cell,
                    metric.metric.heading,
                    *(_rig_cell(by_rig[rig], comparison.baseline) for rig in comparison.rigs),
                    _ranking_cell(metric),
                ]
            )
    headings = [
        _join(escape(part) for part in rig_heading(comparison, rig).split("\n"))
        for rig in comparison.rigs
    ]
    table = render_table(
        ["cell", "metric", *headings, "ranking"],
        rows,
        caption=f"baseline {comparison.baseline}; {caption(comparison)}",
        css="comparison",
    )
    notes = "".join(
        Markup('<p class="{}">{}</p>').format(
            "warn" if line.startswith(("not like for like", LOCAL_EMULATION)) else "summary", line
        )
        for line in footnotes(comparison)
    )
    return table + notes


def rounds_section(data: SweepData) -> Section:
    """An adaptive sweep's looks: what each decided, and the boots and dollars it took."""
    last = data.rounds[-1]
    looks = render_table(
        ["round", "boots per rig", "look's level", "decided so far", "boots", "spent", "then"],
        [round_row(r) for r in data.rounds],
        caption="each look tests every headline comparison at its level (Holm over them)",
    )  # fmt: skip
    decisions = render_table(
        ["cell", "metric", "rigs", "verdict", "ratio", "decided"],
        [decision_row(c, data.rounds) for c in data.headline],
        caption="a comparison decided at a look keeps that look's verdict; ratio: the first "
        "rig's centre over the second's",
    )  # fmt: skip
    return Section(
        "Rounds",
        "rounds",
        intro='"boots_per_rig": "auto": boots ran in rounds, and after each round the headline '
        "comparisons (every rig pair, cell and one of output tokens/s, TTFT p50, TPOT p50) were "
        "tested at that look's share of the 5% error rate (Hwang-Shih-DeCani alpha "
        'spending; docs/measurements.md, "Boots until decided"). The sweep stopped after '
        f"round {last.round} ({last.stop or 'it did not finish'}). The comparison table's "
        f"verdicts are at the final look's level, {last.level:.2g}, not at 5%: the looks "
        "before it spent the rest.",
        blocks=[looks, decisions],
    )


def notes(data: SweepData) -> list[str]:
    """What the report cannot show, or shows with a caveat, in plain words."""
    out: list[str] = []
    reported = [b for b in data.boots if b.report is not None]
    if data.status == "RUNNING":
        out.append(
            f"The sweep is still running: {len(reported)} of {len(data.boots)} boots have "
            "stored a report so far; figures will change. Make the report again when it ends."
        )
    elif data.status is None:
        out.append(
            "The sweep's execution is no longer available (a local sweep's execution lasts "
            "only as long as the run that started it): wall time, and why a boot failed, are "
            "unknown here; `make sweep` writes the full report at the end of the run."
        )
    failed = [b for b in data.boots if b.outcome == "failed"]
    if data.error and not failed:  # the sweep itself failed, not a boot (a round's decision)
        out.append(f"The sweep failed: {data.error}: {data.cause}")
    if failed:
        out.append(
            f"{len(failed)} of {len(data.boots)} boots failed: "
            + "; ".join(f"{b.rig} boot {b.boot}: {b.error or 'no reason recorded'}" for b in failed)
            + ". Their figures are missing from every table and plot."
        )
    silent = [b for b in data.boots if b.report is None and b.outcome != "failed"]
    if silent and data.status != "RUNNING":
        out.append(
            "No report stored for "
            + ", ".join(f"{b.rig} boot {b.boot}" for b in silent)
            + ": they are left out."
        )
    rigs_with_reports = {b.rig for b in reported}
    if not reported:
        out.append("No boot stored a report: there is nothing to compare or plot.")
    elif len(rigs_with_reports) == 1:
        (rig,) = rigs_with_reports
        out.append(
            f"Only one rig ({rig}) has results: there is nothing to compare it with; the table "
            "shows its figures with intervals, without verdicts."
        )
    boots_per_rig = [sum(1 for b in reported if b.rig == r) for r in rigs_with_reports]
    if boots_per_rig and max(boots_per_rig) == 1:
        out.append(
            "One boot per rig: no interval and no verdict is possible (the comparison's test "
            "needs 2 boots or more; run more boots: boots_per_rig)."
        )
    no_records = [b for b in reported if b.records is None]
    if no_records:
        out.append(
            "No per-request records for "
            + ", ".join(f"{b.rig} boot {b.boot}" for b in no_records)
            + ": the latency distribution leaves them out."
        )
    unpriced = [b for b in reported if b.price_paid is None]
    if unpriced:
        out.append(
            "No price in the spend ledger for "
            + ", ".join(f"{b.rig} boot {b.boot}" for b in unpriced)
            + ": their cost per token is unknown."
        )
    return out


def _hours(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m {secs:02d}s" if hours else f"{minutes}m {secs:02d}s"


def _when(moment: datetime | None) -> str:
    return "unknown" if moment is None else moment.astimezone(UTC).strftime(TIME_FORMAT)


def _usd(value: float | None) -> str:
    return "unknown" if value is None else f"${value:,.4f}"


def _distinct(values: Iterable[Any]) -> str:
    seen = sorted({str(v) for v in values if v not in (None, "")})
    return ", ".join(seen) or "unknown"


def _kv(mapping: Mapping[str, Any]) -> Markup:
    if not mapping:
        return _span("dim", "none recorded")
    return _join(_span("kv", f"{k}={v}") for k, v in sorted(mapping.items()))


def _cells_from_reports(data: SweepData) -> dict[str, Any]:
    """The load as the harness recorded it, when the sweep input is gone."""
    for boot in data.boots:
        config = (boot.report or {}).get("config") or {}
        if config:
            keys = ["concurrency", "rate", "requests", "warmup"]
            if not config.get("workload") and not config.get("dataset"):
                keys += ["input_len", "output_len"]  # else the workload gives the lengths
            return {k: config[k] for k in keys if config.get(k) is not None}
    return {}


def summary_blocks(data: SweepData, local: bool = False) -> list[str]:
    cells = (data.sweep_input or {}).get("cells") or _cells_from_reports(data)
    facts = [
        ["sweep", data.sweep_id],
        ["status", data.status or "unknown (execution not available)"],
        ["model", data.model or "unknown"],
        ["rigs", ", ".join(data.rigs)],
        ["instance type", data.instance_type or "unknown"],
        ["started", _when(data.started_at)],
        ["wall time", _hours(data.wall_s)],
        [
            "instance-hours",
            "unknown" if data.instance_hours is None else f"{data.instance_hours:.3f}",
        ],
        ["cost (spend ledger)", _usd(data.spent_usd)],
        ["budget", "unknown" if data.budget_usd is None else f"${data.budget_usd:,.2f}"],
        ["load cells", _kv(cells) if cells else "unknown"],
    ]
    if local:
        facts.insert(0, ["what ran", LOCAL_EMULATION])
    if data.reserved_usd:
        facts.append(["still reserved", _usd(data.reserved_usd)])
    per_rig = []
    for rig in data.rigs:
        boots = [b for b in data.boots if b.rig == rig]
        ok = sum(1 for b in boots if b.report is not None)
        failed = sum(1 for b in boots if b.outcome == "failed")
        settings: dict[str, str] = {}
        for b in boots:
            for k, v in (b.provenance.get("rig") or {}).items():
                settings.setdefault(k, str(v))
        per_rig.append(
            [
                rig,
                f"{ok} reported, {failed} failed, {len(boots)} in all",
                _distinct(b.provenance.get("instance_type") for b in boots),
                _distinct(b.provenance.get("image_id") for b in boots),
                settings.get("dtype", "unknown"),
                _kv({k: v for k, v in settings.items() if k != "dtype"}),
                _hours(sum(b.instance_seconds or 0 for b in boots) or None),
                _usd(sum(b.cost_usd or 0 for b in boots) if boots else None),
            ]
        )
    return [
        render_table(["", ""], facts, css="facts"),
        render_table(
            [
                "rig",
                "boots",
                "instance type",
                "AMI",
                "dtype",
                "settings it ran with",
                "instance time",
                "cost",
            ],
            per_rig,
            caption=LOCAL_EMULATION if local else "",
        ),
    ]


def logs_cell(data: SweepData, boot: BootData, local: bool) -> Markup:
    """The logs a boot's instances left: a link to each uploaded one, and the command that
    prints them (locally from the instance's folder)."""
    command = f"rigbench logs {data.sweep_id} --rig {boot.rig} --boot {boot.boot}"
    links = [
        Markup('<a href="{}">{}</a>').format(url, "/".join(url.rsplit("/", 2)[-2:]))
        for url in boot.logs
    ]
    return _join(
        [*links, Markup("<code>{}</code>").format(command + (" --local" if local else ""))]
    )


def failures_block(data: SweepData, local: bool = False) -> str | None:
    rows = [
        [
            b.rig, str(b.boot), b.outcome or "unknown", b.error or "no reason recorded",
            logs_cell(data, b, local),
        ]
        for b in data.boots
        if b.outcome == "failed" or (b.report is None and data.status != "RUNNING")
    ]  # fmt: skip
    if not rows:
        return None
    return render_table(["rig", "boot", "outcome", "why", "logs"], rows, css="failures")


def cost_table(by_rig: Mapping[str, list[analysis.Point]], local: bool = False) -> str:
    cells = sorted({(p.x, p.cell) for ps in by_rig.values() for p in ps})
    rows = []
    for rig, points in by_rig.items():
        at = {p.cell: p for p in points}
        rows.append(
            [
                rig,
                *(
                    _value(at[c].aggregate) if c in at else _span("dim", "no data")
                    for _, c in cells
                ),
            ]
        )
    return render_table(
        ["rig", *(c for _, c in cells)],
        rows,
        caption=(f"{LOCAL_EMULATION}. " if local else "")
        + "USD per million output tokens = price billed per hour (spot: its MaxPrice, the "
        "most EC2 may charge, up to 25% over the price when the sweep started) / (output "
        "tokens/s x 3600)"
        " x 10^6, per boot; geometric mean of boots [interval]. It prices the instance's time "
        "at that load, not the time it spent booting.",
    )


def provenance_blocks(data: SweepData, local: bool) -> list[str]:
    rows = []
    for b in data.boots:
        p = b.provenance
        rows.append(
            [
                b.rig,
                str(b.boot),
                p.get("instance_id", ""),
                p.get("availability_zone", ""),
                p.get("gpu", ""),
                p.get("driver", ""),
                p.get("harness_version", ""),
                (p.get("bundle_sha256") or "")[:12],
                p.get("served_model", ""),
                p.get("model_revision", ""),
                _usd(b.price_paid) + "/h",
                _kv({k: v for k, v in (p.get("rig") or {}).items() if _VERSION.match(str(v))}),
            ]
        )
    blocks = [
        render_table(
            [
                "rig",
                "boot",
                "instance",
                "zone",
                "GPU",
                "driver",
                "harness",
                "bundle",
                "served model",
                "revision",
                "price paid",
                "rig versions",
            ],
            rows,
        )
    ]
    flag = " --local" if local else ""
    if data.sweep_input is not None:
        body = {k: v for k, v in data.sweep_input.items() if k not in ("sweep_id",)}
        blocks.append(
            Markup(
                "<p>To reproduce, save this input as <code>sweep.json</code> and run "
                "<code>rigbench run{} sweep.json</code>:</p><pre>{}</pre>"
            ).format(flag, json.dumps(body, indent=2, sort_keys=True))
        )
    else:
        rigs = " ".join(f"--rig {r}" for r in data.rigs)
        boots = max((b.boot for b in data.boots), default=1)
        command = (
            f"rigbench run{flag} {rigs} --model {data.model} --instance-type "
            f"{data.instance_type} --boots {boots}"
        )
        blocks.append(
            Markup(
                "<p>To reproduce (the execution input is gone; the load cells are in the "
                "summary above):</p><pre>{}</pre>"
            ).format(command)
        )
    return blocks


def _boots_with_reports(data: SweepData, rig: str) -> list[BootData]:
    return [b for b in data.boots if b.rig == rig and b.report is not None]


def plot_blocks(data: SweepData, cell: str | None) -> list[str]:
    colours = figures.rig_colours(data.rigs)
    throughput = analysis.metric_series(data, "output_tok_s")
    if not throughput:
        return []
    latency = {
        key: analysis.metric_series(data, key)
        for key in ("ttft_ms.p50", "ttft_ms.p99", "tpot_ms.p50", "tpot_ms.p99")
    }
    blocks = []
    # one pair of load plots per kind of load: a concurrency and a rate share no axis
    for n, kind in enumerate(analysis.load_kinds(data)):
        suffix, x_title = ("" if n == 0 else f"-{kind}"), analysis.LOAD_TITLES[kind]
        by_load = analysis.metric_series(data, "output_tok_s", kind)
        latencies = {key: analysis.metric_series(data, key, kind) for key in latency}
        blocks += [
            figure_html(
                figures.throughput_figure(by_load, colours, x_title), f"plot-throughput{suffix}"
            ),
            figure_html(
                figures.latency_figure(latencies, colours, x_title), f"plot-latency{suffix}"
            ),
        ]
    chosen = analysis.chosen_cell(data, cell)
    if chosen is not None:
        lat = {
            rig: found
            for rig in data.rigs
            if (found := analysis.request_latencies(_boots_with_reports(data, rig), chosen))
        }
        if lat:
            blocks.append(figure_html(figures.cdf_figure(lat, colours, chosen), "plot-cdf"))
    blocks.append(
        figure_html(
            figures.tradeoff_figure(throughput, latency["tpot_ms.p50"], colours), "plot-tradeoff"
        )
    )
    return blocks


def answer_section(data: SweepData, comparison: Comparison | None, local: bool) -> Section | None:
    """The answer first: the workload, each rig's capacity within the SLO, and the Pareto view
    of every boot's cells."""
    blocks: list[str] = []
    if comparison is not None and (comparison.workload or comparison.capacity):
        rows = [["workload", comparison.workload or "unknown"]]
        rows += [[c.rig, c.words.split(": ", 1)[-1]] for c in comparison.capacity]
        caption = (
            "capacity: the highest load each boot's search found within the SLO, as the "
            "geometric mean of the rig's boots with their interval; whether two rigs differ is "
            "the comparison's 'capacity' row" + (f"; priced as {LOCAL_EMULATION}" if local else "")
        )
        blocks.append(render_table(["", ""], rows, css="facts", caption=caption))
    points = analysis.pareto_points(data)
    if points:
        colours = figures.rig_colours(data.rigs)
        blocks.append(figure_html(figures.pareto_figure(points, colours), "plot-pareto"))
    if not blocks:
        return None
    return Section(
        "The answer: capacity within the SLO",
        "answer",
        intro="How much traffic each rig carried within the latency targets, and the trade "
        "between each user's speed and the GPU's output (tokens per second per user: 1000 / "
        "TPOT p50 in ms; capacity probes are points too).",
        blocks=blocks,
    )


def start_section(data: SweepData, comparison: Comparison | None, local: bool) -> Section | None:
    """Time to ready: each boot's phases as a table and a timeline, and the rigs' ready times
    compared (the comparison's start-up cell, in its words)."""
    timed = [b for b in data.boots if b.timing is not None and b.timing.phases]
    if not timed:
        return None
    blocks: list[str] = []
    cells = comparison.cells if comparison is not None else []
    start = next((c for c in cells if c.cell == START_CELL), None)
    if comparison is not None and start is not None:
        rows = []
        for metric in start.metrics:
            for result in metric.results:
                agg = result.aggregate
                shown = "no data" if agg is None else value_words(agg)
                words = "baseline" if result.rig == comparison.baseline else result.words
                rows.append([metric.metric.heading, result.rig, shown, words])
        blocks.append(
            render_table(
                ["metric", "rig", "geometric mean of boots", "against the baseline"],
                rows,
                caption="time to ready: launch to the rig's own first real completion; start-up "
                "cost: those seconds at the price each instance paid; warm: a restart on the same "
                "instance to its first completion. Verdicts as in the comparison."
                + (f" {LOCAL_EMULATION}: no real instance booted." if local else ""),
            )
        )
    phases = [name for name in PHASES if any(name in b.timing.phases for b in timed if b.timing)]
    rows = []
    for b in timed:
        assert b.timing is not None
        rows.append(
            [b.rig, str(b.boot)]
            + [_seconds(b.timing.phases.get(name)) for name in phases]
            + [_usd(b.timing.startup_usd), _seconds(b.timing.warm_ready_s)]
        )
    blocks.append(
        render_table(
            ["rig", "boot", *(p.replace("_", " ") for p in phases), "start-up cost", "warm ready"],
            rows,
            caption="seconds since launch (EC2's launch time); agent online is when a poll saw "
            "it; ready and the steps before it are the rig's own record; terminated is the "
            "instance's billed run time",
        )
    )
    colours = figures.rig_colours(data.rigs)
    boots = [(b.rig, b.boot, b.timing.phases) for b in timed if b.timing]
    blocks.append(figure_html(figures.timeline_figure(boots, colours), "plot-timeline"))
    return Section(
        "Time to ready",
        "start",
        intro="What a boot costs before its first token: instances are paid from launch, and "
        "every spot reclaim is a cold start.",
        blocks=blocks,
    )


def gpu_section(data: SweepData) -> Section | None:
    """What the GPU burned in each boot's cells (harness.gpu_sampler), or why it was not
    sampled."""
    rows, reasons = [], set()
    for b in data.boots:
        for cell in (b.report or {}).get("cells", []):
            gpu = cell.get("gpu")
            if not isinstance(gpu, dict) or cell.get("capacity_probe"):
                continue
            if not gpu.get("available"):
                reasons.add(str(gpu.get("reason") or "not sampled"))
                continue
            rows.append(
                [b.rig, str(b.boot), cell_label(cell)]
                + [_number(gpu.get(k)) for k in ("mean_power_w", "energy_j", "j_per_output_token",
                                                  "max_memory_used_mib", "mean_utilization_pct")]
                + [str(gpu.get("energy_source") or "")]
            )  # fmt: skip
    if not rows and not reasons:
        return None
    blocks = []
    if rows:
        blocks.append(
            render_table(
                [
                    "rig",
                    "boot",
                    "cell",
                    "mean power (W)",
                    "energy (J)",
                    "J per output token",
                    "memory used, most (MiB)",
                    "utilisation (%)",
                    "energy from",
                ],
                rows,
                caption="sampled from NVML every 0.1 s while the cell ran (its warm-up left "
                "out); J per output token = the cell's energy / its output tokens; the "
                "comparison's 'GPU energy' rows give the verdicts",
            )
        )
    intro = "; ".join(f"not sampled: {r}" for r in sorted(reasons))
    return Section("What the GPU burned", "gpu", intro=intro, blocks=blocks)


def _number(value: Any) -> str:
    return f"{value:,.4g}" if isinstance(value, int | float) else ""


def _seconds(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}"


def sweep_page(data: SweepData, *, cell: str | None = None, local: bool = False) -> Page:
    comparison = comparison_of(data, local=local)
    found_notes = ([f"What ran: {LOCAL_EMULATION}."] if local else []) + notes(data)
    failed = any(b.outcome == "failed" for b in data.boots)
    if data.status == "RUNNING":
        badge, text = "warn", "still running"
    elif failed or data.status in ("FAILED", "TIMED_OUT", "ABORTED"):
        badge, text = "bad", (data.status or "boots failed").lower()
        if data.error:
            text = f"{text}: {data.error}"
    elif data.status is None:
        badge, text = "warn", "execution not available"
    else:
        badge, text = "ok", data.status.lower()
    sections = [Section("Sweep", "sweep", blocks=summary_blocks(data, local))]
    if answer := answer_section(data, comparison, local):
        sections.insert(0, answer)
    failures = failures_block(data, local)
    if failures:
        sections.append(Section("Failed boots", "failures", blocks=[failures]))
    if comparison is not None:
        sections.append(
            Section(
                "Comparison",
                "comparison",
                intro="Per cell and metric: each rig's geometric mean over its boots with an "
                "interval that says what it is and its n, and how it stands against the "
                "baseline (Welch's t-test on log boot values, Holm-corrected across the "
                "sweep). The same comparison, in the same words, ends `rigbench demo` in the "
                "terminal and is what `rigbench compare` and MCP `compare` return.",
                blocks=[comparison_table(comparison)],
            )
        )
    if start := start_section(data, comparison, local):
        sections.append(start)
    if gpu := gpu_section(data):
        sections.append(gpu)
    if data.rounds:
        sections.append(rounds_section(data))
    if pairs := agreement_of(data):
        sections.append(agreement_section(pairs, probe_cost(data)))
    plots = plot_blocks(data, cell)
    if plots:
        sections.append(
            Section(
                "Plots",
                "plots",
                intro="Lines: the geometric mean over boots; bands: its interval; open "
                "circles: each boot, so boot-to-boot spread is visible. Hover for values.",
                blocks=plots,
            )
        )
    cost = analysis.cost_series(data)
    if cost:
        colours = figures.rig_colours(data.rigs)
        sections.append(
            Section(
                "Cost per million output tokens",
                "cost",
                intro=f"Priced as {LOCAL_EMULATION}: no real instance ran or was paid for."
                if local
                else "",
                blocks=[
                    cost_table(cost, local),
                    figure_html(figures.cost_figure(cost, colours), "plot-cost"),
                ],
            )
        )
    sections.append(
        Section(
            "Provenance",
            "provenance",
            intro=f"{LOCAL_EMULATION}: instance ids, zones, AMIs and prices below are the "
            "emulation's, not AWS's."
            if local
            else "",
            blocks=provenance_blocks(data, local),
        )
    )
    subtitle = (
        f"{', '.join(data.rigs)} serving {data.model or 'unknown model'} on "
        f"{data.instance_type or 'unknown instance type'}"
        + (f" ({LOCAL_EMULATION})" if local else "")
    )
    return Page(
        title=f"rigbench sweep {data.sweep_id}",
        subtitle=subtitle,
        status=badge,
        status_text=text,
        notes=found_notes,
        sections=sections,
    )
