"""A dry run against the deployed stack, read-only: the first three states of the sweep
(ValidateInput, CheckQuota, ReserveBudget) evaluated here with the handlers' own functions,
the deployed functions' settings, and the account's quota, instances, spot price and the
month's committed spend. Nothing is claimed, reserved, launched or started.

It does not rehearse on the embedded emulation as the local stack does: the emulated account
would stand in for the deployed one's subnets, zones, bundle and baked images, which are read
here as they are."""

import json
from datetime import datetime
from typing import Any

from functions.budget import (
    month_committed,
    over_monthly_cap,
    price_sweep,
    sweep_owner,
)
from functions.errors import InvalidInput, OverBudget, QuotaExhausted
from functions.events import ValidateEvent
from functions.quota import check_quota
from functions.settings import Clients, Settings
from functions.tables.ledger import to_micro, usd
from functions.validate import check_sweep
from rigbench.stack.models import MonthSpend, PlannedBoot, SweepPlan
from rigbench.stack_refs import StackRefs

# The sweep states whose functions' settings a plan applies (statemachine/sweep.asl.json).
VALIDATE_STATE = "ValidateInput"
RESERVE_STATE = "ReserveBudget"
PLAN_EXECUTION = "plan"  # the execution name a plan validates under (nothing is started)


def state_function(definition: dict[str, Any], state: str) -> str:
    """The Lambda function a Task state of the definition invokes."""
    try:
        return str(definition["States"][state]["Parameters"]["FunctionName"])
    except KeyError:
        raise ValueError(f"the state machine has no Lambda task state {state!r}") from None


def deployed_settings(
    clients: Clients, lam: Any, refs: StackRefs, region: str
) -> dict[str, Settings]:
    """The settings the deployed Validate and ReserveBudget functions enforce (their
    environment: allowed types, caps, subnets, tables), per state."""
    definition = json.loads(
        clients.stepfunctions.describe_state_machine(stateMachineArn=refs.state_machine_arn)[
            "definition"
        ]
    )
    found = {}
    for state in (VALIDATE_STATE, RESERVE_STATE):
        config = lam.get_function_configuration(FunctionName=state_function(definition, state))
        env = {"AWS_REGION": region, **config.get("Environment", {}).get("Variables", {})}
        found[state] = Settings.from_mapping(env)
    return found


def plan_deployed(
    clients: Clients, lam: Any, refs: StackRefs, sweep_input: dict[str, Any], now: datetime
) -> SweepPlan:
    """What a run of `sweep_input` on the deployed stack would do now, or why it would stop."""
    region = clients.ec2.meta.region_name
    settings = deployed_settings(clients, lam, refs, region)
    against = f"the deployed stack {refs.stack_name!r} ({region})"
    event = ValidateEvent(
        input=sweep_input,
        execution_name=PLAN_EXECUTION,
        execution_arn=refs.execution_arn(PLAN_EXECUTION),
    )
    try:
        state = check_sweep(event, clients, settings[VALIDATE_STATE], now)
        owner = sweep_owner(clients.dynamodb, refs.ledger_table, state.sweep.sweep_id)
        if owner is not None:
            raise InvalidInput(
                f"invalid sweep input: sweep_id: {state.sweep.sweep_id!r} already belongs to "
                f"{owner}; a sweep id names one execution only"
            )
        quota = check_quota(state, clients)
        budget = settings[RESERVE_STATE]
        reservation = price_sweep(state, clients, budget, now)
        committed = month_committed(clients.dynamodb, refs.ledger_table, reservation.month)
        total = to_micro(reservation.total_usd)
        month = MonthSpend(
            month=reservation.month,
            committed_usd=usd(committed),
            cap_usd=budget.monthly_cap_usd,
        )
        if committed + total > to_micro(budget.monthly_cap_usd):
            raise over_monthly_cap(budget, reservation.month, committed, total)
    except (InvalidInput, QuotaExhausted, OverBudget) as exc:
        return SweepPlan(valid=False, error=str(exc), planned_against=against)
    sweep = state.sweep
    return SweepPlan(
        valid=True,
        sweep=sweep.model_dump(mode="json", exclude_none=True),
        quota=quota,
        reservation=reservation,
        month=month,
        boots=[
            PlannedBoot(
                rig=item.rig,
                boot=item.boot,
                instance_type=sweep.instance_type,
                market=sweep.market,
                subnets=list(sweep.subnets),
            )
            for item in state.items
        ],
        planned_against=against,
    )
