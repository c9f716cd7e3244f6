"""DecideRound: after each round of an adaptive sweep ("boots_per_rig": "auto"), test its
headline comparisons at this look's level and say whether another round runs.

The headline comparisons are every rig pair x load cell x headline metric (output tokens/s,
TTFT p50, TPOT p50: `functions.regressions.HEADLINE`), each boot contributing its value, as
the verdicts use them. The test is the verdicts' (`analysis.stats`): Welch's t-test on log boot
values, Holm-corrected over the look's headline comparisons. The look's level is its
Hwang-Shih-DeCani (gamma -1) alpha-spending increment (`analysis.sequential.look_levels` over
the looks `SweepInput.looks` names: 3, 5 and the cap boots per rig), so the chance that an A/A sweep
decides anything at any look stays within 5% (the union bound over looks, Holm within each;
measured in docs/measurements.md, "Boots until decided"). A comparison decided at a look stays
decided with that look's verdict.

The sweep stops after a look when every headline comparison is decided, at the cap, when the
round stored no results to decide from, or when the next round's reservation would not fit in
what the budget has left. A fixed sweep passes through with one round and no look.
"""

import itertools
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext

from analysis.sequential import Spending, look_levels
from analysis.stats import Verdict, decide, difference, holm
from functions.boot_executions import boot_execution_name
from functions.events import (
    BootItem,
    DecideRoundEvent,
    Decision,
    HeadlineComparison,
    Round,
    SweepConfig,
    every_outcome,
)
from functions.execution_input import BootRounds
from functions.observability import instrumented, logger
from functions.regressions import HEADLINE
from functions.settings import Clients, Settings
from functions.tables.results import query_rows
from harness.schemas import cell_label, metric_value

SPENDING = Spending.HWANG_SHIH_DECANI
ALL_DECIDED = "every headline comparison decided"
AT_CAP = "max_boots_per_rig reached"
NO_RESULTS = "the round stored no results to decide from"
OVER_BUDGET = "the next round would not fit in the budget left"

# per rig, per cell key: (cell label, per metric the boots' values)
Values = dict[str, dict[str, tuple[str, dict[str, list[float]]]]]


def levels(sweep: BootRounds) -> list[float]:
    """The level each look of the sweep tests at."""
    return look_levels(SPENDING, sweep.looks())


def boot_values(rows: Iterable[Mapping[str, Any]]) -> Values:
    """Each rig's headline values per cell from the results rows (one row per boot and
    cell): a cell with no successful request, or a value that is not above 0, gives none."""
    found: Values = defaultdict(dict)
    for row in rows:
        cell = row.get("metrics") or {}
        if (cell.get("requests_ok") or 0) <= 0:
            continue
        _, by_metric = found[row["rig"]].setdefault(
            str(row["cell"]), (cell_label(cell), {m: [] for m in HEADLINE})
        )
        for metric in HEADLINE:
            value = metric_value(cell, metric)
            if value is not None and value > 0:
                by_metric[metric].append(value)
    return dict(found)


def look(
    values: Values,
    rigs: Sequence[str],
    number: int,
    level: float,
    before: Sequence[HeadlineComparison] = (),
) -> list[HeadlineComparison]:
    """The headline comparisons at look `number`, tested at `level` (Holm over them); those
    decided at an earlier look (`before`) keep that look's verdict."""
    decided = {
        (c.cell, c.metric, c.rig_a, c.rig_b): c for c in before if c.decided_in_round is not None
    }
    cells: dict[str, str] = {}
    for by_cell in values.values():
        for key, (label, _) in by_cell.items():
            cells.setdefault(key, label)
    tests = []
    for key in sorted(cells):
        for metric in HEADLINE:
            for a, b in itertools.combinations(rigs, 2):
                empty: tuple[str, dict[str, list[float]]] = ("", {})
                xa = values.get(a, {}).get(key, empty)[1].get(metric, [])
                xb = values.get(b, {}).get(key, empty)[1].get(metric, [])
                found = difference(xa, xb) if xa and xb else None
                tests.append((cells[key], metric, a, b, found))
    p_values = {i: t[4].p_value for i, t in enumerate(tests) if t[4] is not None}
    tested = {i: p for i, p in p_values.items() if p is not None}
    adjusted = dict(zip(tested, holm(list(tested.values())), strict=True))
    out = []
    for i, (label, metric, a, b, found) in enumerate(tests):
        earlier = decided.get((label, metric, a, b))
        if earlier is not None:
            out.append(earlier)
            continue
        p_holm = adjusted.get(i)
        significant = p_holm is not None and p_holm < level
        verdict = (
            Verdict.NO_VERDICT if found is None else decide(found, HEADLINE[metric], significant)
        )
        comparison = HeadlineComparison(
            cell=label, metric=metric, rig_a=a, rig_b=b, verdict=verdict.value,
            ratio=None if found is None else found.ratio,
            p_value=None if found is None else found.p_value, p_holm=p_holm,
            decided_in_round=number if significant else None,
            level=level if significant else None,
        )  # fmt: skip
        out.append(comparison)
    return out


def next_items(
    sweep: SweepConfig, items: Sequence[BootItem], done: int, upto: int
) -> list[BootItem]:
    """The next round's boots: every rig's boots done+1..upto, each with its rig's plan."""
    plans = {item.rig: item.plan for item in items}
    return [
        BootItem(
            rig=rig, boot=b, plan=plans[rig],
            execution_name=boot_execution_name(sweep.sweep_id, rig, b),
        )
        for b in range(done + 1, upto + 1)
        for rig in sweep.rigs
    ]  # fmt: skip


def decide_round(event: DecideRoundEvent, rows: Iterable[Mapping[str, Any]] | None) -> Decision:
    """The decision after the round in `event`, from the sweep's results rows so far (None
    for a fixed sweep, which has no look)."""
    sweep = event.sweep
    outcomes = every_outcome(event.boots, event.ran)
    if not sweep.adaptive or rows is None:
        return Decision(boots=outcomes, rounds=[], headline=[], items=[], more=False)
    looks = sweep.looks()
    number = len(event.rounds) + 1
    level = levels(sweep)[number - 1]
    headline = look(boot_values(rows), sweep.rigs, number, level, event.headline)
    decided = sum(c.decided_in_round is not None for c in headline)
    cost = round(sum(b.cost_usd for b in outcomes), 6)
    stop = ""
    upcoming: list[BootItem] = []
    if headline and decided == len(headline):
        stop = ALL_DECIDED
    elif number == len(looks):
        stop = AT_CAP
    elif not any(b.rows for b in event.ran):
        stop = NO_RESULTS
    else:
        upcoming = next_items(sweep, event.items, looks[number - 1], looks[number])
        if cost + len(upcoming) * event.reservation.per_boot_usd > sweep.budget_usd:
            stop, upcoming = OVER_BUDGET, []
    this = Round(
        round=number, boots_per_rig=looks[number - 1], level=level, comparisons=len(headline),
        decided=decided, boots=len(outcomes), cost_usd=cost, stop=stop,
    )  # fmt: skip
    return Decision(
        boots=outcomes, rounds=[*event.rounds, this], headline=headline, items=upcoming,
        more=not stop,
    )  # fmt: skip


@instrumented
@event_parser(model=DecideRoundEvent)
def handler(event: DecideRoundEvent, context: LambdaContext) -> dict[str, Any]:
    rows = None
    if event.sweep.adaptive:
        clients, settings = Clients(), Settings.from_env()
        now = datetime.now(UTC)
        rows = query_rows(
            clients.dynamodb, settings.results_table, since=now, until=now,
            sweep=event.sweep.sweep_id, consistent=True,  # the round's rows were just stored
        )  # fmt: skip
    decision = decide_round(event, rows)
    if decision.rounds:
        logger.info("round decided", extra={"round": decision.rounds[-1].model_dump()})
    return decision.model_dump(mode="json")
