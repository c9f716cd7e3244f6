"""Store a boot's results: one DynamoDB row per load cell the sweep asked for, with its
workload, the boot's capacity and provenance; the raw report (with every capacity probe)
stays in S3 where the instance put it.

The report is read with the harness's own schema (`harness.schemas.BenchmarkReport`, which
parses the reports of every earlier harness); a row's metrics are the cell as the report
recorded it, so a figure an older harness did not record is absent from the row (read as
None, `harness.schemas.metric_value`), never a schema default. The table's keys and item
format live in functions/tables/results.py.
"""

from typing import Any, TypeVar

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import ClientError
from pydantic import BaseModel, ValidationError

from functions import clock
from functions.errors import ReportInvalid
from functions.events import BootState, Stored
from functions.instance_commands import (
    InstanceProvenance,
    warm_report_name,
    warm_start_name,
)
from functions.observability import instrumented, metrics
from functions.price_paid import spot_price_paid
from functions.report_keys import PROVENANCE, REPORT
from functions.settings import Clients, Settings
from functions.tables.ledger import month_of
from functions.tables.results import cell_key, config_key, row_key, to_item
from harness.agreement import AgreementProbe
from harness.boot_phases import (
    BootTiming,
    WarmStart,
    epoch,
    mean_warm_ready_s,
    phases_since_launch,
    startup_usd,
)
from harness.schemas import BenchmarkReport
from harness.workload import describe

M = TypeVar("M", bound=BaseModel)


def _read_s3_json(s3: Any, bucket: str, key: str, model: type[M], what: str) -> M:
    try:
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as exc:
        raise ReportInvalid(f"no {what} at s3://{bucket}/{key}: {exc}") from exc
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        raise ReportInvalid(f"the {what} s3://{bucket}/{key} does not parse: {exc}") from exc


def read_report(s3: Any, bucket: str, key: str) -> BenchmarkReport:
    return _read_s3_json(s3, bucket, key, BenchmarkReport, "harness report")


def read_instance_provenance(s3: Any, bucket: str, key: str) -> InstanceProvenance:
    return _read_s3_json(s3, bucket, key, InstanceProvenance, "provenance")


def row_agreement(probe: AgreementProbe | None) -> dict[str, Any] | None:
    """The agreement probe as a results row keeps it: token strings left out (the ids, text
    and margins say it all; the report in S3 keeps everything)."""
    if probe is None:
        return None
    return probe.model_dump(mode="json", exclude={"answers": {"__all__": {"tokens"}}})


def read_warm_starts(s3: Any, bucket: str, prefix: str, restarts: int) -> list[WarmStart]:
    """Each restart's warm start (harness.restart), or why it has none."""
    starts = []
    for n in range(1, restarts + 1):
        key = prefix + warm_start_name(n)
        try:
            starts.append(_read_s3_json(s3, bucket, key, WarmStart, "warm start"))
        except ReportInvalid as exc:
            starts.append(WarmStart(requested_at=0.0, error=str(exc)))
    return starts


def read_warm_cells(s3: Any, bucket: str, prefix: str, restarts: int) -> list[dict[str, Any]]:
    """The first cell measured again after each restart (absent where its restart failed)."""
    cells = []
    for n in range(1, restarts + 1):
        try:
            warm = read_report(s3, bucket, prefix + warm_report_name(n))
        except ReportInvalid:
            continue
        cells += [c.model_dump(mode="json", exclude_unset=True) for c in warm.cells[:1]]
    return cells


def price_paid(state: BootState, ec2: Any, now: float) -> tuple[float, str]:
    """What the instance was charged per hour: the spot price history of its zone and type
    over its life so far, else (on-demand, or no history) the reservation's price."""
    instance, reservation = state.instance, state.reservation
    assert instance is not None
    if instance.market == "spot":
        paid = spot_price_paid(
            ec2, instance.instance_type, instance.availability_zone, instance.launched_at, now
        )
        if paid is not None:
            return paid.usd_per_hour, paid.source
        source = f"the reservation's price (no spot price history for {instance.availability_zone})"
        return reservation.price_usd_per_hour, source
    return reservation.price_usd_per_hour, reservation.price_source


def boot_timing(
    state: BootState,
    report: BenchmarkReport,
    found: InstanceProvenance,
    price: tuple[float, str],
    warm_starts: list[WarmStart] | None = None,
    warm_cells: list[dict[str, Any]] | None = None,
) -> BootTiming:
    """The boot's phases (harness.boot_phases) and what its start cost at the price paid."""
    instance = state.instance
    assert instance is not None
    phases = phases_since_launch(
        instance.launched_at,
        launch_requested=instance.requested_at,
        install_phases=found.install_phases,
        agent_online=state.agent.online_at if state.agent else None,
        rig_marks=found.rig_marks,
        bench_started=epoch(report.started_at),
        bench_ended=epoch(report.finished_at),
    )
    ready_s = phases.get("ready")
    starts = warm_starts or []
    return BootTiming(
        phases=phases,
        ready_s=ready_s,
        startup_usd=startup_usd(ready_s, price[0]),
        price_usd_per_hour=price[0],
        price_source=price[1],
        warm_starts=starts,
        warm_ready_s=mean_warm_ready_s(starts),
        warm_cells=warm_cells or [],
    )


def result_rows(
    state: BootState,
    report: BenchmarkReport,
    found: InstanceProvenance,
    key: str,
    timing: BootTiming | None = None,
) -> list[dict[str, Any]]:
    sweep, instance = state.sweep, state.instance
    assert instance is not None
    provenance = {
        "harness_version": report.harness_version,
        "bundle_sha256": sweep.bundle.sha256,
        "served_model": found.served_model,
        # What the rig says it loaded (a hub model's commit), not what was asked of it.
        "model_revision": found.rig.get("model_revision", "unknown"),
        "model_revision_requested": sweep.model_revision,
        "instance_type": instance.instance_type,
        "availability_zone": instance.availability_zone,
        "image_id": instance.image_id,
        "market": instance.market,
        "instance_id": instance.instance_id,
        # Spot reclaims before this instance: the results come from relaunch N of the boot.
        "interruptions": state.interruptions,
        "driver": found.driver,
        "gpu": found.gpu,
        "rig": found.rig,
        # What the boot was asked to serve with (image, dtype and why, every serve setting).
        "boot_plan": state.plan.model_dump(mode="json"),
    }
    rows = []
    agreement = row_agreement(report.agreement)  # on every row of the boot: any one gives it
    # What the requests asked for, and the boot's capacity: on every row of the boot too.
    workload = {
        **report.config.resolved_workload.model_dump(mode="json"),
        "endpoint": report.endpoint,
        "words": describe(report.config.resolved_workload),
    }
    if report.dataset is not None:
        workload["dataset"] = report.dataset.model_dump(mode="json")
    capacity = None if report.capacity is None else report.capacity.model_dump(mode="json")
    for cell in report.cells:
        if cell.capacity_probe:
            continue  # its load is the search's, not the sweep's: kept in the report, in S3
        metrics_doc = cell.model_dump(mode="json", exclude_unset=True)
        key_of_cell = cell_key(cell)
        rows.append(
            {
                "sweep_id": sweep.sweep_id,
                "row_key": row_key(state.rig, state.boot, key_of_cell),
                "config_key": config_key(state.rig, sweep.model, sweep.instance_type),
                "month": month_of(report.started_at),
                "started_at": report.started_at,
                "rig": state.rig,
                "boot": state.boot,
                "model": sweep.model,
                "instance_type": sweep.instance_type,
                "cell": key_of_cell,
                "metrics": metrics_doc,
                "provenance": provenance,
                "report_key": key,
                "agreement": agreement,
                "workload": workload,
                "capacity": capacity,
                **(timing.row_fields() if timing is not None else {}),
            }
        )
    return rows


def store_results(state: BootState, clients: Clients, settings: Settings, now: float) -> Stored:
    if state.command is None or state.instance is None:
        raise ValueError("nothing to store: the benchmark did not run")
    key = state.command.report_key  # under this boot's instance's prefix (dispatch)
    prefix = key.removesuffix(REPORT)
    report = read_report(clients.s3, settings.bucket, key)
    found = read_instance_provenance(clients.s3, settings.bucket, prefix + PROVENANCE)
    restarts = state.sweep.restarts_per_boot
    timing = boot_timing(
        state,
        report,
        found,
        price_paid(state, clients.ec2, now),
        read_warm_starts(clients.s3, settings.bucket, prefix, restarts),
        read_warm_cells(clients.s3, settings.bucket, prefix, restarts),
    )
    rows = result_rows(state, report, found, key, timing)
    # Keys are deterministic, so a retried store overwrites its own rows and nothing else.
    for row in rows:
        clients.dynamodb.put_item(TableName=settings.results_table, Item=to_item(row))
    metrics.add_metric(name="ResultRowsStored", unit=MetricUnit.Count, value=len(rows))
    return Stored(rows=len(rows), report_key=key)


@instrumented
@event_parser(model=BootState)
def handler(event: BootState, context: LambdaContext) -> dict[str, Any]:
    stored = store_results(event, Clients(), Settings.from_env(), clock.now())
    return stored.model_dump(mode="json")
