"""Compare rigs across boots: centres, intervals and verdicts, as a model, and its words.

Input is plain: `values[rig][cell][metric]` is the list of that metric's per-boot values (index =
boot; None where the boot produced no value). `analysis.boot_values` builds it from run reports
(the `rigbench bench` JSON contract) and boots' starts, `compare` turns it into a `Comparison`.
Which metrics there are, and how each is named, read and judged, is `analysis.metrics`'s table.

`Comparison` is the one comparison of a sweep: the terminal table (rigbench.report.terminal),
the report (`rigbench.report.sweep`), `rigbench compare SWEEP` and the MCP `compare` tool all
show this model, in the words it carries (`RigResult.words`, `MetricComparison.ranking`,
`summary`), so they cannot contradict each other. The statistics are `analysis.stats`'s:
Welch's t-test on log boot values, Holm-corrected across every verdict of the comparison.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from analysis.agreement import PairAgreement
from analysis.boot_values import DECLARED, BootValues
from analysis.capacity import RigCapacity
from analysis.metrics import METRICS, Direction, MetricSpec, metric_spec
from analysis.stats import (
    ALPHA,
    DEFAULT_CONFIDENCE,
    POWER,
    BootAggregate,
    Difference,
    RankingFlips,
    Verdict,
    aggregate_boots,
    decide,
    difference,
    holm,
    ranking_flips,
)


class RigSetup(BaseModel):
    """How a rig served: what moves latency and throughput besides the runtime itself."""

    model_config = ConfigDict(frozen=True)

    batching: str = "unknown"  # serial, batched, continuous
    slots: str = "unknown"  # sequences served at once
    dtype: str = "unknown"
    token_delivery: str = "unknown"  # per_token, burst (several tokens per write)

    def words(self) -> str:
        return f"{self.batching} batching, {self.slots} slots, {self.dtype}"


_SLOTS = re.compile(r"(\d+)\s*slots")


def rig_setup(settings: Mapping[str, Any]) -> RigSetup:
    """A rig's setup from the settings it reported (its /provenance, stored with each boot):
    torch says `batching=continuous, max_batch=4`; JAX `batching="continuous, 4 slots"`."""
    batching = str(settings.get("batching") or "unknown")
    slots = settings.get("max_batch") or settings.get("max_slots") or settings.get("slots")
    found = _SLOTS.search(batching)
    if slots is None and found:
        slots = found.group(1)
    return RigSetup(
        batching=batching.split(",")[0].strip() or "unknown",
        slots=str(slots) if slots is not None else "unknown",
        dtype=str(settings.get("dtype") or "unknown"),
        token_delivery=str(settings.get("token_delivery") or "unknown"),
    )


def setup_warnings(setups: Mapping[str, RigSetup]) -> list[str]:
    """One line per setting the rigs differ in that moves the metrics themselves."""
    out = []
    for field, moves in (
        ("batching", "how requests share the device: TTFT, TPOT and throughput under load"),
        ("slots", "how many requests run at once: throughput and queueing above that load"),
        ("dtype", "the arithmetic: every latency and throughput"),
    ):
        seen = {rig: getattr(setup, field) for rig, setup in setups.items()}
        known = {v for v in seen.values() if v != "unknown"}
        if len(known) > 1:
            who = ", ".join(f"{rig}: {v}" for rig, v in seen.items())
            out.append(
                f"not like for like: the rigs differ in {field} ({who}), which moves {moves}; "
                "a difference may be that setting, not the runtime"
            )
    return out


class RigResult(BaseModel):
    # an undetectable ratio (~1 degree of freedom at Holm's level) is infinite: "Infinity" in JSON
    model_config = ConfigDict(frozen=True, ser_json_inf_nan="strings")

    rig: str
    boots: list[float | None]  # the per-boot values the aggregate was built from
    aggregate: BootAggregate | None  # None: no boot produced a value
    verdict: Verdict | None  # against the baseline; None for the baseline or without data
    change_vs_baseline: float | None  # centre / baseline centre - 1
    p_value: float | None = None  # Welch's test against the baseline, alone
    p_holm: float | None = None  # the same, Holm-adjusted over the comparison's verdicts
    detectable_ratio: float | None = None  # found 80% of the time at this n and spread
    words: str = ""  # the verdict as people read it: "2.3x higher throughput (better)"


class PairVerdict(BaseModel):
    """One rig pair on one metric in one cell: `rig_a` against `rig_b`."""

    model_config = ConfigDict(frozen=True)

    rig_a: str
    rig_b: str
    verdict: Verdict
    ratio: float | None  # rig_a's centre over rig_b's
    p_value: float | None
    p_holm: float | None
    reason: str = ""  # why no verdict is possible


class MetricComparison(BaseModel):
    model_config = ConfigDict(frozen=True)

    metric: MetricSpec
    results: list[RigResult]
    pairs: list[PairVerdict] = []  # every rig pair with data, in rig order
    flips: RankingFlips | None  # None when fewer than two rigs have data
    ranking: str = ""  # best first: "jax > torch" (shown apart), "jax ≈ torch" (not shown)
    flip_words: str = ""  # "order flipped between boots: jax/torch (boots 1,2)"
    withheld: str = ""  # why this metric gets no verdicts in this cell (burst delivery)


class CellComparison(BaseModel):
    model_config = ConfigDict(frozen=True)

    cell: str
    metrics: list[MetricComparison]
    burst_rigs: list[str] = []  # rigs that delivered tokens in bursts in this cell
    # Boots that did not load the server as asked (under 95% of the concurrency in flight, or
    # sends behind a rate's schedule), in words: "jax boot 2: 6.1 of 8 requests in flight (76%)"
    load_short: list[str] = []


METHOD = (
    "Welch's t-test on log boot values, Holm-corrected across the comparison's "
    "{family} verdicts at {alpha:.0%} family-wise"
)


class Comparison(BaseModel):
    """A sweep's comparison: per cell, metric and rig its centre, interval, n and verdict,
    the rigs' setups, and the sweep-level summary. Other fields may be added (a model)."""

    model_config = ConfigDict(frozen=True)

    baseline: str
    rigs: list[str]
    alpha: float = ALPHA  # family-wise, over every verdict below
    confidence: float = DEFAULT_CONFIDENCE  # of the printed t-intervals
    family: int = 0  # the verdicts Holm corrects together (tests that could be made)
    method: str = ""
    cells: list[CellComparison]
    setups: dict[str, RigSetup] = {}
    setup_warnings: list[str] = []
    summary: list[str] = []  # the sweep-level ranking, one line per rig pair
    emulated: str = ""  # what ran, where it was not the real thing (a local sweep)
    refused: str = ""  # why the comparison gives no verdict at all (different model revisions)
    # Per rig pair, whether the rigs computed the same greedy outputs (analysis.agreement).
    output_agreement: list[PairAgreement] = []
    # The answer first: per rig, the load it carries within the SLO (analysis.capacity).
    capacity: list[RigCapacity] = []
    workload: str = ""  # what the requests asked for, in words (harness.workload.describe)

    @property
    def any_flip(self) -> bool:
        return any(m.flips is not None and m.flips.flipped for c in self.cells for m in c.metrics)


def ratio_words(ratio: float, noun: str, spec: MetricSpec | None = None) -> str:
    """A ratio of medians as people say it: "2.3x higher TTFT", "41% lower throughput",
    "6.9x lower throughput" (a ratio of 0.144: "86% lower" would hide how far apart); in the
    metric's own words where it has them ("ready 1.9x later")."""
    if not math.isfinite(ratio) or ratio < 0:
        raise ValueError(f"ratio must be a finite number >= 0, got {ratio!r}")
    higher, lower = (spec.higher, spec.lower) if spec else ("higher", "lower")
    if ratio == 0:
        return f"no {noun}"
    if ratio == 1:
        return f"same {noun}"
    word = higher if ratio > 1 else lower
    far = ratio if ratio > 1 else 1 / ratio
    if far >= 2:
        size = f"{far:.1f}x" if far < 10 else f"{far:.0f}x"
    else:
        size = f"{ratio - 1:.0%}" if ratio > 1 else f"{1 - ratio:.0%}"
    return f"{noun} {size} {word}" if spec and spec.noun_first else f"{size} {word} {noun}"


MOST_DETECTABLE = 100.0  # above this a detectable ratio is printed as "not even 100x"


def ratio_text(ratio: float) -> str:
    """A detectable ratio as printed: "1.35x", "4.6x", "40x"."""
    return f"{ratio:.2f}x" if ratio < 2 else f"{ratio:.1f}x" if ratio < 10 else f"{ratio:.0f}x"


def verdict_words(
    agg: BootAggregate | None,
    base: BootAggregate | None,
    judged: Verdict | None,
    noun: str,
    found: Difference | None = None,
    detectable: float | None = None,
    spec: MetricSpec | None = None,
) -> str:
    """A rig's result against the baseline's, in the words every view of a comparison shares."""
    if agg is None:
        return "no data"
    if base is None:
        return "baseline has no data"
    if judged is None:
        return ""
    if base.value == 0:
        return f"baseline {noun} is 0: no ratio"
    words = ratio_words(agg.value / base.value, noun, spec) if agg.value >= 0 else f"{noun} below 0"
    if judged is Verdict.FASTER:
        return f"{words} (better)"
    if judged is Verdict.SLOWER:
        return f"{words} (worse)"
    if judged is Verdict.NO_VERDICT:
        reason = found.reason if found is not None else ""
        if reason == "1 boot":
            return f"{words} (1 boot: no verdict possible)"
        return f"{words} (no verdict possible: {reason or 'untestable'})"
    if detectable is None:
        return f"{words} (within noise)"
    boots = (
        f"{agg.n_boots} boots"
        if agg.n_boots == base.n_boots
        else f"{agg.n_boots} and {base.n_boots} boots"
    )
    if detectable > MOST_DETECTABLE:  # a t quantile on ~1 degree of freedom: say so plainly
        return f"{words} (within noise; {boots} could not tell even {MOST_DETECTABLE:.0f}x)"
    return f"{words} (within noise; {boots} could tell {ratio_text(detectable)})"


def _ranking(
    aggregates: Mapping[str, BootAggregate | None],
    pairs: Mapping[frozenset[str], PairVerdict],
    direction: Direction,
) -> str:
    """Rigs best first; ">" where the (corrected) test tells them apart, "≈" where not; no
    ranking at all where a pair cannot be tested."""
    present = [(rig, agg) for rig, agg in aggregates.items() if agg is not None]
    if len(present) < 2:
        return ""
    single = [rig for rig, agg in present if agg.n_boots < 2]
    if single:
        return f"no ranking: {', '.join(single)} {'has' if len(single) == 1 else 'have'} 1 boot"
    sign = 1.0 if direction is Direction.LOWER_IS_BETTER else -1.0
    present.sort(key=lambda item: sign * item[1].value)
    text = present[0][0]
    for (ahead, _), (rig, _) in itertools.pairwise(present):
        pair = pairs[frozenset((ahead, rig))]
        if pair.verdict is Verdict.NO_VERDICT:
            return f"no ranking: no verdict possible ({pair.reason})"
        apart = pair.verdict in (Verdict.FASTER, Verdict.SLOWER)
        text += f" {'>' if apart else '≈'} {rig}"
    return text


def _summary(rigs: Sequence[str], cells: Sequence[CellComparison]) -> list[str]:
    """The sweep-level ranking: per rig pair, how many (metric, cell) verdicts went each way."""
    lines = []
    for rig_a, rig_b in itertools.combinations(rigs, 2):
        a_better = b_better = same = untestable = 0
        for cell in cells:
            for metric in cell.metrics:
                for pair in metric.pairs:
                    if {pair.rig_a, pair.rig_b} != {rig_a, rig_b}:
                        continue
                    judged = pair.verdict
                    if judged is Verdict.NO_VERDICT:
                        untestable += 1
                    elif judged is Verdict.INDISTINGUISHABLE:
                        same += 1
                    elif (judged is Verdict.FASTER) == (pair.rig_a == rig_a):
                        a_better += 1
                    else:
                        b_better += 1
        tested = a_better + b_better + same
        if tested + untestable == 0:
            continue
        if tested == 0:
            line = f"{rig_a} vs {rig_b}: no verdict possible in any of {untestable} comparisons"
        elif a_better == b_better == 0:
            line = f"{rig_a} vs {rig_b}: no difference shown in any of {tested} comparisons"
        else:
            line = (
                f"{rig_a} vs {rig_b}: {rig_a} better in {a_better}, {rig_b} better in "
                f"{b_better}, no difference shown in {same} of {tested} comparisons"
            )
        if tested and untestable:
            line += f"; no verdict possible in {untestable} more"
        lines.append(line)
    return lines


def _flip_words(flips: RankingFlips | None) -> str:
    if flips is None or not flips.flipped:
        return ""
    pairs = ", ".join(f"{p.rig_a}/{p.rig_b}" for p in flips.pairs)
    boots = ",".join(str(b + 1) for b in flips.boots)
    return f"order flipped between boots: {pairs} (boots {boots})"


def burst_rigs(
    bursts: Mapping[str, Mapping[str, str]], setups: Mapping[str, RigSetup], cell: str
) -> dict[str, str]:
    """Rigs whose tokens came in groups in `cell`, each with the evidence in words: what the
    reports showed (`bursts_from_reports`), or a declaration recorded with its boots."""
    found = {rig: by_cell[cell] for rig, by_cell in bursts.items() if cell in by_cell}
    for rig, setup in setups.items():
        shown = found.get(rig, "")
        if setup.token_delivery == "burst" and not shown.startswith(DECLARED):
            found[rig] = " and ".join(filter(None, (DECLARED, shown)))
    return found


def _withheld(spec: MetricSpec, bursts: Mapping[str, str]) -> str:
    """Every ITL verdict of a cell where any rig delivered in groups, whichever rig is ahead:
    its ITL times the gaps inside and between its groups, not its decode."""
    if not spec.key.startswith("itl_ms.") or not bursts:
        return ""
    who = "; ".join(f"{rig} {evidence}" for rig, evidence in bursts.items())
    return f"no ITL verdict: {who}: its ITL times groups of tokens, not its decode; compare TPOT"


def compare(
    values: BootValues,
    *,
    baseline: str | None = None,
    metrics: Sequence[str] | None = None,
    alpha: float = ALPHA,
    confidence: float = DEFAULT_CONFIDENCE,
    setups: Mapping[str, RigSetup] | None = None,
    emulated: str = "",
    bursts: Mapping[str, Mapping[str, str]] | None = None,
    load_short: Mapping[str, Sequence[str]] | None = None,
    refused: str = "",
) -> Comparison:
    """Aggregate every rig's boots per cell and metric, test every rig pair, correct the tests
    together (Holm) and judge each rig against the baseline.

    `baseline` defaults to the first rig; `metrics` to every metric found in `values`, in the
    order of `METRICS`; `setups` are the rigs' settings as they served (shown, and compared);
    `bursts` the evidence of burst delivery per rig and cell (`bursts_from_reports`): a cell
    with any gets no ITL verdict; `load_short` per cell the boots that did not load the server
    as asked (`shortfalls_from_reports`), marked on the cell; `refused` why no verdict at all
    may be given (rigs that served different weights), said in place of every verdict.
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be strictly between 0 and 1, got {alpha!r}")
    rigs = list(values)
    if not rigs:
        raise ValueError("compare: no rigs given")
    base = rigs[0] if baseline is None else baseline
    if base not in values:
        raise ValueError(f"baseline rig {base!r} is not among the rigs: {', '.join(rigs)}")

    cells: list[str] = []
    found: set[str] = set()
    for rig, by_cell in values.items():
        for cell, by_metric in by_cell.items():
            if cell not in cells:
                cells.append(cell)
            for key in by_metric:
                try:
                    metric_spec(key)
                except ValueError as exc:
                    raise ValueError(f"rig {rig!r} cell {cell!r}: {exc}") from None
                found.add(key)
    keys = [k for k in METRICS if k in found] if metrics is None else list(metrics)
    specs = [metric_spec(k) for k in keys]

    grouped = {cell: burst_rigs(bursts or {}, setups or {}, cell) for cell in cells}
    drafts = [
        _Draft.measure(values, cell, spec, confidence, refused or _withheld(spec, grouped[cell]))
        for cell in cells
        for spec in specs
        if any(spec.key in by_cell.get(cell, {}) for by_cell in values.values())
    ]
    tested = [(d, pair) for d in drafts for pair, t in d.tests.items() if t.p_value is not None]
    adjusted = holm([d.tests[pair].p_value for d, pair in tested])  # type: ignore[misc]
    for (draft, pair), p in zip(tested, adjusted, strict=True):
        draft.p_holm[pair] = p
    family = len(tested)
    level = alpha / max(1, family)  # Holm's first step: what a difference must pass here

    compared: list[CellComparison] = []
    for cell in cells:
        compared.append(
            CellComparison(
                cell=cell,
                metrics=[d.judge(base, alpha, level) for d in drafts if d.cell == cell],
                burst_rigs=list(grouped[cell]),
                load_short=list((load_short or {}).get(cell, [])),
            )
        )
    found_setups = {rig: setups[rig] for rig in rigs if setups and rig in setups}
    return Comparison(
        baseline=base,
        rigs=rigs,
        alpha=alpha,
        confidence=confidence,
        family=family,
        method=METHOD.format(family=family, alpha=alpha)
        if family
        else "Welch's t-test on log boot values, where any pair could be tested (none here)",
        cells=compared,
        setups=found_setups,
        setup_warnings=setup_warnings(found_setups),
        refused=refused,
        summary=_summary(rigs, compared),
        emulated=emulated,
    )


class _Draft:
    """One cell and metric between its tests and its Holm-corrected verdicts."""

    def __init__(
        self,
        cell: str,
        spec: MetricSpec,
        per_boot: dict[str, list[float | None]],
        aggregates: dict[str, BootAggregate | None],
        withheld: str,
    ) -> None:
        self.cell, self.spec, self.per_boot, self.aggregates = cell, spec, per_boot, aggregates
        self.withheld = withheld
        self.present = {
            rig: [v for v in series if v is not None] for rig, series in per_boot.items()
        }
        with_data = [rig for rig, agg in aggregates.items() if agg is not None]
        self.tests: dict[tuple[str, str], Difference] = (
            {}
            if withheld
            else {
                (a, b): difference(self.present[a], self.present[b])
                for a, b in itertools.combinations(with_data, 2)
            }
        )
        self.p_holm: dict[tuple[str, str], float] = {}

    @classmethod
    def measure(
        cls,
        values: BootValues,
        cell: str,
        spec: MetricSpec,
        confidence: float,
        withheld: str,
    ) -> _Draft:
        per_boot: dict[str, list[float | None]] = {
            rig: list(by_cell.get(cell, {}).get(spec.key, [])) for rig, by_cell in values.items()
        }
        aggregates: dict[str, BootAggregate | None] = {}
        for rig, series in per_boot.items():
            present = [v for v in series if v is not None]
            try:
                aggregates[rig] = (
                    aggregate_boots(present, confidence=confidence) if present else None
                )
            except ValueError as exc:
                raise ValueError(f"rig {rig!r} cell {cell!r} metric {spec.key!r}: {exc}") from None
        return cls(cell, spec, per_boot, aggregates, withheld)

    def _pair(self, a: str, b: str, alpha: float) -> PairVerdict:
        key = (a, b) if (a, b) in self.tests else (b, a)
        test = self.tests[key]
        if key != (a, b):  # the same test seen from the other side
            ratio = None if not test.ratio else 1 / test.ratio
            test = test.model_copy(update={"ratio": ratio, "n_a": test.n_b, "n_b": test.n_a})
        p_holm = self.p_holm.get(key)
        judged = decide(test, self.spec.direction, p_holm is not None and p_holm < alpha)
        return PairVerdict(
            rig_a=a,
            rig_b=b,
            verdict=judged,
            ratio=test.ratio,
            p_value=test.p_value,
            p_holm=p_holm,
            reason=test.reason,
        )

    def judge(self, baseline: str, alpha: float, level: float) -> MetricComparison:
        spec, base = self.spec, self.aggregates[baseline]
        pairs = {frozenset(k): self._pair(*k, alpha) for k in self.tests}
        results: list[RigResult] = []
        for rig, agg in self.aggregates.items():
            judged: Verdict | None = None
            change = detectable = p_value = p_holm = None
            found: Difference | None = None
            if rig != baseline and agg is not None and base is not None and not self.withheld:
                pair = self._pair(rig, baseline, alpha)
                judged, p_value, p_holm = pair.verdict, pair.p_value, pair.p_holm
                found = difference(self.present[rig], self.present[baseline])
                detectable = found.min_detectable_ratio(level, POWER)
                if base.value != 0:
                    change = agg.value / base.value - 1
            words = (
                ""
                if rig == baseline or self.withheld
                else verdict_words(agg, base, judged, spec.name, found, detectable, spec)
            )
            results.append(
                RigResult(
                    rig=rig,
                    boots=self.per_boot[rig],
                    aggregate=agg,
                    verdict=judged,
                    change_vs_baseline=change,
                    p_value=p_value,
                    p_holm=p_holm,
                    detectable_ratio=detectable,
                    words=words,
                )
            )
        with_data = {r: s for r, s in self.per_boot.items() if self.aggregates[r] is not None}
        flips = ranking_flips(with_data, spec.direction) if len(with_data) >= 2 else None
        return MetricComparison(
            metric=spec,
            results=results,
            pairs=list(pairs.values()),
            flips=flips,
            ranking="" if self.withheld else _ranking(self.aggregates, pairs, spec.direction),
            flip_words="" if self.withheld else _flip_words(flips),
            withheld=self.withheld,
        )


def fmt_value(value: float) -> str:
    """A number as the table and the report print it."""
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 100:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def value_words(agg: BootAggregate) -> str:
    """A rig's centre and its interval as printed: "61.2 [60.2, 62.0]", or "14.5" alone."""
    if agg.ci_low == agg.ci_high:
        return fmt_value(agg.value)
    return f"{fmt_value(agg.value)} [{fmt_value(agg.ci_low)}, {fmt_value(agg.ci_high)}]"


def rig_heading(comparison: Comparison, rig: str) -> str:
    """A rig's column heading: its name, and how it served when known."""
    setup = comparison.setups.get(rig)
    return rig if setup is None else f"{rig}\n{setup.words()}"


CAPTION = (
    "each rig: the geometric mean of its boots [and an interval, named under it: the range of "
    "2 boots, or a {level} t-interval from 3 boots]; against the baseline as a ratio of those "
    "means, (better)/(worse) only where {method}, else (within noise) with the ratio its boots "
    "could tell 80% of the time; ranking best first, '>' told apart, '≈' not; a flipped order "
    "between boots is called out; a rig delivering tokens in bursts gets TPOT, not ITL, verdicts"
)


def caption(comparison: Comparison) -> str:
    return CAPTION.format(level=f"{comparison.confidence:.0%}", method=comparison.method)


LOAD_SHORT = "load not reached"
NO_VERDICTS = "no verdicts"


def footnotes(comparison: Comparison) -> list[str]:
    """What the table's end says, in order: why no verdict at all, what ran, setup warnings,
    cells whose load was not reached, the sweep-level ranking."""
    lines = [comparison.refused] if comparison.refused else []
    lines += [comparison.emulated] if comparison.emulated else []
    lines += comparison.setup_warnings
    lines += [
        f"{LOAD_SHORT} in {cell.cell}: {'; '.join(cell.load_short)}; its figures are of a "
        "lighter load than the cell's"
        for cell in comparison.cells
        if cell.load_short
    ]
    lines += [f"sweep: {line}" for line in comparison.summary]
    return lines


def capacity_header(comparison: Comparison) -> list[str]:
    """The answer first: the workload, then per rig the load it carries within the SLO."""
    lines = [f"workload: {comparison.workload}"] if comparison.workload else []
    if comparison.capacity:
        lines.append("capacity within the SLO, per rig (verdicts: the 'capacity' rows below)")
        lines += [f"  {c.words}" for c in comparison.capacity]
    return lines
