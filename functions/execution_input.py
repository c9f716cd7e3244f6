"""The execution input of a sweep: one pydantic model, its JSON Schema exported to the repo.

`rigbench run`, the EventBridge schedule and `aws stepfunctions start-execution` all send
this document; the first state validates it (`parse_sweep_input`) against the deployed
stack (which rigs the bundle holds, which instance types the stack allows) before anything
is spent.
"""

import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from functions.errors import InvalidInput
from functions.poll_schedule import polls_within
from harness.schemas import SLO, Arrival, CapacitySearch, Endpoint
from harness.workload import (
    DatasetWorkload,
    RandomWorkload,
    SharedPrefixWorkload,
    Workload,
    longest,
)

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "statemachine" / "sweep-input.schema.json"
MAX_BOOTS_PER_RIG = 50
DEFAULT_REGRESSION_RATIO = 1.05
# ReserveBudget reserves every boot in one DynamoDB transaction (functions.budget.reserve, at
# most 100 writes), and the sweep's state after DecideRound holds each boot's item and its
# outcome twice (about 2.3 KB a boot with the longest cause Finish keeps): 64 boots keep that
# state within 3/4 of the 256 KiB Step Functions passes between states (test_outcomes.py).
MAX_BOOTS_PER_SWEEP = 64
SWEEP_ID_PATTERN = r"^[a-z0-9][a-z0-9-]{0,62}$"
# Names that reach a shell on the instance: letters, digits and . _ - / : only.
MODEL_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._/:-]{0,255}$"
REVISION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
# A rig, or a rig with a label (`jax@b`): the label names that entry's rows, so one rig can be
# run twice in a sweep (an A/A check of the noise floor) or under two settings.
RIG_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,31}(@[a-z0-9][a-z0-9_-]{0,15})?$"
# Boots per rig when the input gives none: with 2 the test (Welch's t-test on log boot values)
# finds a real 1.5x difference at 10% boot-to-boot spread in about 1 comparison in 3; with 3
# in about 9 in 10 (benchmarks/verdict_calibration.py).
DEFAULT_BOOTS_PER_RIG = 3
# Adaptive boots ("boots_per_rig": "auto"): looks after 3 and 5 boots per rig and at the cap,
# each at its Hwang-Shih-DeCani alpha-spending increment (analysis/sequential.py, measured in
# docs/measurements.md "Boots until decided"). 3 is the fewest at which the test decides at all.
AUTO = "auto"
FIRST_LOOKS = (3, 5)
MIN_MAX_BOOTS_PER_RIG = FIRST_LOOKS[0]
DEFAULT_MAX_BOOTS_PER_RIG = 10
MAX_INPUT_BYTES = 64 * 1024
MAX_INPUT_DEPTH = 8  # the model nests 3 deep; anything deeper is not a sweep

# Step Functions ends an execution at 25,000 history events, uncatchably. Each boot runs as its
# own execution (statemachine/boot.asl.json): about 25 events for its fixed steps plus 9 per
# poll (Wait, Task, Choice). The sweep's execution writes a few per boot: its Map iteration,
# the Task that starts the boot and waits for it, and on the boot's failure Finish,
# MarkFinishFailed and FinishFailed. A sweep whose worst case (every poll loop running to its
# deadline) could pass the limit in either execution is refused before anything is spent.
HISTORY_EVENT_LIMIT = 25_000
HISTORY_EVENTS_RESERVED = 500  # each execution's own start and end, top-level states, retries
# Each further round of an adaptive sweep: the Map's own events, DecideRound, the Pass and the
# Choice after it (the first round's are within the reserve, as a fixed sweep's one round is).
EVENTS_PER_ROUND = 20
# A boot in the sweep's history: 8 events when its execution succeeds (MapIterationStarted,
# RunBoot's Entered, Scheduled, Started, Submitted, Succeeded, Exited, MapIterationSucceeded),
# 20 through Finish, MarkFinishFailed and FinishFailed when it does not.
EVENTS_PER_BOOT_IN_SWEEP = 20
EVENTS_PER_BOOT_FIXED = 25
EVENTS_PER_POLL = 9
COMMAND_GRACE_S = 60  # functions.dispatch.GRACE_S: polls go on this long after bench_s

Seconds = Annotated[int, Field(ge=0, le=3600)]
Scalar = str | int | float | bool
REQUESTS_PER_SLOT = 4  # a cell sends at least 4x its concurrency: steady state, not one wave


def _boots_per_rig(value: Any) -> int | str:
    """A number of boots, or "auto"; strict as the rest of the input (no `true`, no "2")."""
    if value == AUTO:
        return AUTO
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f'Input should be a valid number of boots or "{AUTO}"')
    if value < 1:
        raise ValueError("Input should be greater than or equal to 1")
    if value > MAX_BOOTS_PER_RIG:
        raise ValueError(f"Input should be less than or equal to {MAX_BOOTS_PER_RIG}")
    return value


BootsPerRig = Annotated[
    int | Literal["auto"],
    PlainValidator(_boots_per_rig),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 1, "maximum": MAX_BOOTS_PER_RIG},
                {"const": AUTO},
            ]
        }
    ),
]


class _Strict(BaseModel):
    # strict: a boolean or a string is never taken for a number (`boots_per_rig: true`).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)


class LoadCells(_Strict):
    """What the harness measures on each boot: fixed-concurrency and Poisson-rate cells."""

    concurrency: list[Annotated[int, Field(ge=1, le=1024)]] = Field(
        default=[1, 8],
        max_length=16,
        description="fixed-concurrency cells: requests in flight at once, one cell each",
    )
    rates: list[Annotated[float, Field(gt=0, le=1000)]] = Field(
        default=[],
        max_length=16,
        description="request-rate cells in requests/s, measured after the concurrency cells",
    )
    arrival: Arrival = Field(
        default="poisson",
        description='how rate cells space requests: "poisson", "constant", or {"gamma": '
        "SHAPE} (gamma-distributed gaps at the same mean: below 1 burstier)",
    )
    requests_per_cell: int = Field(
        default=32, ge=1, le=10_000, description="default: 32, or 4x the highest concurrency"
    )
    prompt_tokens: int = Field(
        default=512,
        ge=1,
        le=131_072,
        description="prompt length, tokens (a random workload; see the input's workload)",
    )
    output_tokens: int = Field(
        default=128,
        ge=1,
        le=32_768,
        description="generated length per request, tokens (forced; a random workload)",
    )
    warmup_requests: int = Field(
        default=2, ge=0, le=1000, description="requests sent before each cell, never measured"
    )

    @model_validator(mode="before")
    @classmethod
    def _steady_state_default(cls, data: Any) -> Any:
        if isinstance(data, dict) and "requests_per_cell" not in data:
            concurrency = data.get("concurrency", [1, 8]) or [1]
            if all(isinstance(c, int) for c in concurrency):
                data = {**data, "requests_per_cell": max(32, REQUESTS_PER_SLOT * max(concurrency))}
        return data

    @field_validator("rates")
    @classmethod
    def _some_cell(cls, rates: list[float], info: ValidationInfo) -> list[float]:
        concurrency = info.data.get("concurrency")
        if not rates and not concurrency:
            raise ValueError("give at least one concurrency or rate cell")
        return rates


class Deadlines(_Strict):
    """Seconds from launch; the instance shuts itself down at `instance_s` whatever happens."""

    ready_s: int = Field(
        default=1800, ge=1, le=4 * 3600, description="seconds for the rig to answer a completion"
    )
    bench_s: int = Field(default=3600, ge=1, le=12 * 3600, description="seconds for the harness")
    instance_s: int = Field(
        default=7200,
        ge=60,
        le=24 * 3600,
        description="seconds the instance lives at most (its dead-man timer; priced as budget)",
    )

    @field_validator("instance_s")
    @classmethod
    def _outlives_the_work(cls, instance_s: int, info: ValidationInfo) -> int:
        work = info.data.get("ready_s", 0) + info.data.get("bench_s", 0)
        if instance_s < work:
            raise ValueError(
                f"{instance_s} s is shorter than ready_s + bench_s = {work} s: the instance "
                "would power off before the benchmark could end"
            )
        return instance_s


class Waits(_Strict):
    """Wait-state intervals (seconds) of the polling loops; never below the stack's minimum
    (MinPollSeconds: 1 by default, 0 only in tests)."""

    agent_poll_s: Seconds = Field(20, description="seconds between checks for the SSM agent")
    ready_poll_s: Seconds = Field(30, description="seconds between readiness probes")
    command_poll_s: Seconds = Field(45, description="seconds between harness status polls")
    first_poll_s: Seconds | None = Field(
        None,
        description="where set, each loop's first wait: the wait then grows with the phase's "
        "age (a quarter of it) up to the loop's interval; a local sweep without waits uses 1",
    )

    @field_validator("agent_poll_s", "ready_poll_s", "command_poll_s", "first_poll_s")
    @classmethod
    def _not_below_minimum(cls, seconds: int | None, info: ValidationInfo) -> int | None:
        minimum = (info.context or {}).get("min_poll_s")
        if minimum is not None and seconds is not None and seconds < minimum:
            raise ValueError(f"{seconds} s is below the stack's minimum poll interval {minimum} s")
        return seconds


def adaptive_looks(cap: int) -> list[int]:
    """An adaptive sweep's looks: 3, 5 and the cap boots per rig (those within the cap)."""
    return sorted({n for n in FIRST_LOOKS if n < cap} | {cap})


class BootRounds:
    """The boots a sweep runs per rig, in rounds: what the input says and the state's record of
    it (`functions.events.SweepConfig`) both answer these, from the same three fields."""

    rigs: list[str]
    boots_per_rig: int | Literal["auto"]
    max_boots_per_rig: int | None

    @property
    def adaptive(self) -> bool:
        return self.boots_per_rig == AUTO

    def boots_cap(self) -> int:
        """Boots per rig at most: the fixed number, or the adaptive sweep's cap."""
        if isinstance(self.boots_per_rig, int):
            return self.boots_per_rig
        return self.max_boots_per_rig or self.default_max_boots()

    def default_max_boots(self) -> int:
        return DEFAULT_MAX_BOOTS_PER_RIG

    def looks(self) -> list[int]:
        """Boots per rig at the end of each round: one round for a fixed number; 3, 5 and the
        cap (those within the cap) when adaptive."""
        cap = self.boots_cap()
        return adaptive_looks(cap) if self.adaptive else [cap]

    def boot_count(self) -> int:
        """Boots the sweep may run: every rig x the cap (an adaptive sweep's worst case)."""
        return len(self.rigs) * self.boots_cap()


class SweepInput(BootRounds, _Strict):
    """One sweep: every rig booted `boots_per_rig` times, the harness run on each boot."""

    sweep_id: str | None = Field(
        default=None,
        pattern=SWEEP_ID_PATTERN,
        description="defaults to the execution name",
    )
    rigs: list[Annotated[str, Field(pattern=RIG_PATTERN)]] = Field(
        min_length=1,
        max_length=16,
        description="rigs to run; RIG@LABEL runs RIG again under LABEL (its rows are named "
        'RIG@LABEL): ["jax", "jax@b"] is an A/A sweep',
    )
    model: str = Field(
        pattern=MODEL_PATTERN,
        description="a Hugging Face id or random:<config>: letters, digits and . _ - / : only",
    )
    model_revision: str | None = Field(
        default=None,
        pattern=REVISION_PATTERN,
        description="a commit, branch or tag of the Hugging Face model repo; every boot loads "
        "the one commit it names at validation (without one: the main branch's commit then)",
    )
    instance_type: str = Field(
        default="g5g.2xlarge", description="the EC2 type every boot runs on (one GPU)"
    )
    boots_per_rig: BootsPerRig = Field(
        default=DEFAULT_BOOTS_PER_RIG,
        description="fresh instances per rig (the boot is the unit of replication): 1 gives no "
        "verdicts; 2 finds a 1.5x difference at 10% boot-to-boot spread about 1 time in 3, the "
        'default 3 about 9 in 10, 5 nearly always; "auto": boots in rounds (3, 5, then '
        "max_boots_per_rig per rig) until every headline comparison is decided, with the error "
        "rate held at 5% by alpha spending",
    )
    max_boots_per_rig: int | None = Field(
        default=None,
        ge=MIN_MAX_BOOTS_PER_RIG,
        le=MAX_BOOTS_PER_RIG,
        description='with boots_per_rig "auto" only: the most boots per rig (default: '
        f"{DEFAULT_MAX_BOOTS_PER_RIG}, fewer where the rigs x that many would pass the "
        f"{MAX_BOOTS_PER_SWEEP} boots a sweep may run); the budget reserves this worst case up "
        "front and releases what was not launched",
    )
    cells: LoadCells = Field(
        default=LoadCells(), description="the load cells the harness measures on every boot"
    )
    workload: Workload | None = Field(
        default=None,
        description='what every request asks for: {"kind": "random", "prompt_tokens": 512 or '
        '{"mean": 512, "stddev": 128}, "output_tokens": ...}, {"kind": "shared_prefix", '
        '"groups": G, "prefix_tokens": P, "suffix_tokens": S, "output_tokens": ...}, or '
        '{"kind": "dataset", "path": "sample-chat" or "s3://BUCKET/KEY"}; default: random '
        "prompts of cells.prompt_tokens, cells.output_tokens out",
    )
    endpoint: Endpoint = Field(
        default="completions",
        description='"completions" or "chat" (the server applies its chat template)',
    )
    slo: SLO | None = Field(
        default=None,
        description='latency targets, e.g. {"ttft_ms": 500, "tpot_ms": 50, "percentile": 90}: '
        "each cell's goodput (requests/s meeting every target) is then a metric, and a cell "
        "meets the SLO when percentile % of its requests did",
    )
    capacity: CapacitySearch | None = Field(
        default=None,
        description='{"by": "concurrency" or "rate", "max": N}: on every boot, after the '
        "cells, search the highest load that meets the slo (grow, then bisect; each probe a "
        "cell); the boot's capacity is compared across boots and rigs",
    )
    restarts_per_boot: int = Field(
        default=0,
        ge=0,
        le=5,
        description="after the cells (and any capacity search), restart the rig on the same "
        "instance this many times, each time timing its warm start (warm_ready_s: restart to "
        "its first real completion) and measuring the first cell again, within deadlines.bench_s",
    )
    budget_usd: float = Field(
        gt=0, le=10_000, description="the most this sweep may spend, USD (reserved up front)"
    )
    market: Literal["spot", "on-demand", "spot-or-on-demand"] = Field(
        default="spot",
        description="EC2 market; spot-or-on-demand launches on-demand (billed at its list "
        "price, reserved up front) when no zone has spot capacity",
    )
    subnets: list[str] | None = Field(
        default=None, min_length=1, description="defaults to the stack's subnets"
    )
    deadlines: Deadlines = Field(default=Deadlines(), description="per boot, seconds from launch")
    waits: Waits = Field(default=Waits(), description="poll intervals of the wait loops, seconds")
    max_concurrent_sequences: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="sequences every rig serves at once (its concurrency setting); "
        "default: the highest concurrency cell or capacity search max, else 8",
    )
    max_interruptions_per_boot: int = Field(
        default=1,
        ge=0,
        le=3,
        description="spot reclaims a boot survives: a reclaimed instance is replaced by a new "
        "one (any allowed zone) under the boot's reservation and deadline",
    )
    regression_ratio: float = Field(
        default=DEFAULT_REGRESSION_RATIO,
        ge=1.0,
        le=100.0,
        description="a rig is reported as regressed (an alert) when it is significantly worse "
        "than its own recent history on a headline metric by more than this factor: 1.05 is 5%",
    )
    rig_settings: dict[str, dict[str, Scalar]] = Field(
        default_factory=dict,
        description="per rig (or RIG@LABEL entry, as listed in rigs), serve settings over "
        "its rig.toml defaults (and over max_concurrent_sequences)",
    )

    @field_validator("rigs")
    @classmethod
    def _known_rigs(cls, rigs: list[str], info: ValidationInfo) -> list[str]:
        from rigs.registry import definition_name

        if len(set(rigs)) != len(rigs):
            raise ValueError("a rig is listed twice (to run it twice, label one: jax, jax@b)")
        known = (info.context or {}).get("rigs")
        if known is not None:
            unknown = [r for r in rigs if definition_name(r) not in known]
            if unknown:
                raise ValueError(
                    f"unknown rig {', '.join(map(repr, unknown))} (the bundle has: "
                    f"{', '.join(sorted(known)) or 'none'})"
                )
        return rigs

    @field_validator("model_revision")
    @classmethod
    def _hub_models_only(cls, revision: str | None, info: ValidationInfo) -> str | None:
        from rigs.sources import hub_repo

        model = info.data.get("model")
        if revision is not None and model is not None and hub_repo(model) is None:
            raise ValueError(f"{model!r} is not a Hugging Face model: only those have revisions")
        return revision

    @field_validator("boots_per_rig")
    @classmethod
    def _something_to_decide(cls, boots: int | str, info: ValidationInfo) -> int | str:
        if boots == AUTO and len(info.data.get("rigs") or []) < 2:
            raise ValueError(
                f'"{AUTO}" boots until the comparisons between rigs are decided: it needs two '
                'rigs or more (for one rig\'s noise floor run it twice: ["jax", "jax@b"])'
            )
        return boots

    @field_validator("max_boots_per_rig")
    @classmethod
    def _only_when_auto(cls, cap: int | None, info: ValidationInfo) -> int | None:
        if cap is not None and info.data.get("boots_per_rig") != AUTO:
            raise ValueError(
                f'only with "boots_per_rig": "{AUTO}" (a fixed boots_per_rig is its own cap)'
            )
        return cap

    @field_validator("instance_type")
    @classmethod
    def _allowed_type(cls, instance_type: str, info: ValidationInfo) -> str:
        allowed = (info.context or {}).get("allowed_instance_types")
        if allowed is not None and instance_type not in allowed:
            raise ValueError(
                f"instance type {instance_type!r} is not allowed by the stack "
                f"(allowed: {', '.join(allowed)})"
            )
        return instance_type

    @field_validator("instance_type")
    @classmethod
    def _catalogued_type(cls, instance_type: str) -> str:
        from hardware.instance_types import GPU_TYPES

        if instance_type not in GPU_TYPES:
            raise ValueError(
                f"instance type {instance_type!r} is not supported "
                f"(supported: {', '.join(GPU_TYPES)})"
            )
        return instance_type

    @field_validator("rig_settings")
    @classmethod
    def _declared_settings(
        cls, rig_settings: dict[str, dict[str, Scalar]], info: ValidationInfo
    ) -> dict[str, dict[str, Scalar]]:
        from rigs.contract import RigDefinitionError
        from rigs.registry import get_rig

        for rig, settings in rig_settings.items():
            if rig not in info.data.get("rigs", []):
                raise ValueError(f"settings for rig {rig!r}, which the sweep does not run")
            try:
                get_rig(rig).check_settings(settings)
            except RigDefinitionError as err:
                raise ValueError(str(err)) from None
        return rig_settings

    @field_validator("budget_usd")
    @classmethod
    def _within_stack_budget(cls, budget: float, info: ValidationInfo) -> float:
        limit = (info.context or {}).get("max_sweep_budget_usd")
        if limit is not None and budget > limit:
            raise ValueError(
                f"budget ${budget:.2f} is above the stack's per-sweep budget ${limit:.2f}"
            )
        return budget

    @field_validator("subnets")
    @classmethod
    def _subnet_ids(cls, subnets: list[str] | None) -> list[str] | None:
        for subnet in subnets or []:
            if not re.fullmatch(r"subnet-[0-9a-f]{8,17}", subnet):
                raise ValueError(f"{subnet!r} is not a subnet id")
        return subnets

    @model_validator(mode="after")
    def _one_workload(self) -> "SweepInput":
        given = {"prompt_tokens", "output_tokens"} & self.cells.model_fields_set
        if self.workload is not None and given:
            raise ValueError(
                f"cells.{' and cells.'.join(sorted(given))}: give the lengths in workload "
                "(the cells' lengths are the older form of a random workload)"
            )
        if self.capacity is not None and self.slo is None:
            raise ValueError("capacity: a capacity search needs an slo (the targets it keeps)")
        if isinstance(self.workload, DatasetWorkload):
            _check_dataset(self.workload.path, self.endpoint)
        return self

    def resolved_workload(self) -> RandomWorkload | SharedPrefixWorkload | DatasetWorkload:
        if self.workload is not None:
            return self.workload
        return RandomWorkload(
            prompt_tokens=self.cells.prompt_tokens, output_tokens=self.cells.output_tokens
        )

    def longest_request_tokens(self) -> int | None:
        """Prompt and output tokens of the longest request, None when a dataset's prompts
        are only known once the server tokenises them."""
        workload = self.resolved_workload()
        if isinstance(workload, RandomWorkload):
            return longest(workload.prompt_tokens) + longest(workload.output_tokens)
        if isinstance(workload, SharedPrefixWorkload):
            return (
                workload.prefix_tokens
                + longest(workload.suffix_tokens)
                + longest(workload.output_tokens)
            )
        return None

    def concurrent_sequences(self) -> int:
        if self.max_concurrent_sequences is not None:
            return self.max_concurrent_sequences
        loads = list(self.cells.concurrency)
        if self.capacity is not None and self.capacity.by == "concurrency":
            loads.append(int(self.capacity.max))  # room for every load the search may probe
        return max(loads) if loads else 8

    def history_events_per_boot(self) -> int:
        """Worst case of the events a boot's polls and steps write into its own execution: per
        attempt (the first launch and each relaunch after a spot reclaim)
        the agent and ready loops share the ready deadline and the harness loop runs to bench_s
        plus the poll's grace, and all attempts together poll no longer than the instance
        deadline (the faster loop taking the time first); a 0 s wait is counted as 1 s. With
        `first_poll_s` each attempt's loops start fast (functions/poll_schedule.py), most
        polls when the attempts share the time evenly."""
        waits, deadlines = self.waits, self.deadlines
        attempts = 1 + self.max_interruptions_per_boot
        ready_wait = max(1, min(waits.agent_poll_s, waits.ready_poll_s))
        bench_wait = max(1, waits.command_poll_s)
        ready_cap = attempts * deadlines.ready_s
        bench_cap = attempts * (deadlines.bench_s + COMMAND_GRACE_S)
        total = deadlines.instance_s + COMMAND_GRACE_S
        if ready_wait <= bench_wait:
            ready_time = min(ready_cap, total)
            bench_time = min(bench_cap, total - ready_time)
        else:
            bench_time = min(bench_cap, total)
            ready_time = min(ready_cap, total - bench_time)
        polls = (
            polls_within(ready_time, ready_wait, waits.first_poll_s, attempts)
            + polls_within(bench_time, bench_wait, waits.first_poll_s, attempts)
            + 3 * attempts
        )
        return EVENTS_PER_BOOT_FIXED * attempts + EVENTS_PER_POLL * polls

    def boot_history_events(self) -> int:
        """Worst case of one boot execution's history."""
        return HISTORY_EVENTS_RESERVED + self.history_events_per_boot()

    def history_events(self) -> int:
        """Worst case of the sweep execution's history: every rig run to the cap."""
        cap = self.boots_cap()
        rounds = len(adaptive_looks(cap)) if self.adaptive else 1
        return (
            HISTORY_EVENTS_RESERVED
            + EVENTS_PER_ROUND * (rounds - 1)
            + len(self.rigs) * cap * EVENTS_PER_BOOT_IN_SWEEP
        )

    def default_max_boots(self) -> int:
        """An adaptive sweep that names no cap gets DEFAULT_MAX_BOOTS_PER_RIG boots per rig at
        most, fewer where the rigs x that many would pass the boots a sweep may run (16 rigs,
        the most an input names, still get 4)."""
        return min(DEFAULT_MAX_BOOTS_PER_RIG, MAX_BOOTS_PER_SWEEP // len(self.rigs))


def _check_dataset(path: str, endpoint: Endpoint) -> None:
    """A dataset the instances can read: a bundled one (checked here, before any spend) or an
    s3 URI (read by the instance)."""
    from harness.dataset import BUNDLED_NAMES, DatasetError, is_s3_uri, open_dataset

    if is_s3_uri(path):
        return
    if path not in BUNDLED_NAMES:
        raise ValueError(
            f"workload.path {path!r}: give a bundled dataset ({', '.join(BUNDLED_NAMES)}) or "
            "an s3://BUCKET/KEY the instances can read"
        )
    try:
        open_dataset(path, endpoint)
    except DatasetError as exc:
        raise ValueError(f"workload.path: {exc}") from None


def execution_input(sweep: SweepInput) -> dict[str, Any]:
    """The execution input of a parsed sweep, as the caller gave it (defaults stay implicit,
    as in a file: ValidateInput applies the deployed stack's)."""
    return sweep.model_dump(mode="json", exclude_unset=True)


def describe_errors(error: ValidationError) -> str:
    """One line per problem, each naming the field by its path in the input."""
    lines = []
    for problem in error.errors():
        field = ".".join(str(part) for part in problem["loc"]) or "(input)"
        message = problem["msg"].removeprefix("Value error, ")
        lines.append(f"{field}: {message}")
    return "invalid sweep input: " + "; ".join(lines)


def _depth(value: Any) -> int:
    """Nesting depth of a JSON value, without recursion (so no RecursionError)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            if depth > MAX_INPUT_DEPTH:
                break
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return deepest


def read_input_file(path: Path) -> dict[str, Any]:
    """A sweep input file as the API would take it: at most MAX_INPUT_BYTES (read no further,
    so an endless file is refused too), one JSON object; InvalidInput naming the file."""
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_INPUT_BYTES + 1)
    except OSError as exc:
        raise InvalidInput(f"{path}: cannot read it ({exc.strerror or exc})") from None
    if len(data) > MAX_INPUT_BYTES:
        raise InvalidInput(
            f"{path}: larger than the {MAX_INPUT_BYTES} bytes a sweep input may have"
        )
    try:
        loaded = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"{path}: not valid JSON ({exc})") from None
    except RecursionError:
        raise InvalidInput(f"{path}: JSON nested too deeply to be a sweep input") from None
    if not isinstance(loaded, dict):
        raise InvalidInput(f"{path}: the sweep input must be a JSON object")
    return loaded


def parse_sweep_input(raw: Any, context: dict[str, Any] | None = None) -> SweepInput:
    """Validate raw input (a dict or a JSON string) or raise InvalidInput naming the field."""
    if isinstance(raw, str | bytes):
        if len(raw) > MAX_INPUT_BYTES:
            raise InvalidInput(
                f"invalid sweep input: {len(raw)} bytes, above the {MAX_INPUT_BYTES} a sweep "
                "input may have"
            )
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"invalid sweep input: malformed JSON ({exc})") from exc
        except RecursionError as exc:
            raise InvalidInput("invalid sweep input: nested too deeply") from exc
    if not isinstance(raw, dict):
        raise InvalidInput(f"invalid sweep input: expected a JSON object, got {type(raw).__name__}")
    if _depth(raw) > MAX_INPUT_DEPTH:
        raise InvalidInput(
            f"invalid sweep input: nested deeper than {MAX_INPUT_DEPTH} levels (a sweep input "
            "is at most 3)"
        )
    try:
        sweep = SweepInput.model_validate(raw, context=context)
    except ValidationError as exc:
        raise InvalidInput(describe_errors(exc)) from exc
    # An adaptive sweep is bounded by its worst case: every rig run to the cap.
    boots_field = "max_boots_per_rig" if sweep.adaptive else "boots_per_rig"
    if sweep.boot_count() > MAX_BOOTS_PER_SWEEP:
        raise InvalidInput(
            f"invalid sweep input: {boots_field}: {len(sweep.rigs)} rigs x {sweep.boots_cap()} "
            f"boots = {sweep.boot_count()} boots, above the {MAX_BOOTS_PER_SWEEP} a sweep may run"
        )
    if sweep.boot_history_events() > HISTORY_EVENT_LIMIT:
        raise InvalidInput(
            f"invalid sweep input: waits: a boot could write {sweep.boot_history_events()} "
            "history events into its execution at these waits and deadlines, above Step "
            f"Functions' limit of {HISTORY_EVENT_LIMIT} events per execution; raise the poll "
            "intervals or shorten the deadlines"
        )
    return sweep


def json_schema() -> dict[str, Any]:
    return SweepInput.model_json_schema()


def render_schema() -> str:
    return json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    SCHEMA_PATH.write_text(render_schema())
    print(f"wrote {SCHEMA_PATH}")
