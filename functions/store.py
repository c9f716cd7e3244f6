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

from functions.errors import ReportInvalid
from functions.events import BootState, Stored
from functions.instance_commands import InstanceProvenance
from functions.observability import instrumented, metrics
from functions.report_keys import PROVENANCE, REPORT
from functions.settings import Clients, Settings
from functions.tables.ledger import month_of
from functions.tables.results import cell_key, config_key, row_key, to_item
from harness.agreement import AgreementProbe
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


def result_rows(
    state: BootState, report: BenchmarkReport, found: InstanceProvenance, key: str
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
            }
        )
    return rows


def store_results(state: BootState, clients: Clients, settings: Settings) -> Stored:
    if state.command is None or state.instance is None:
        raise ValueError("nothing to store: the benchmark did not run")
    key = state.command.report_key  # under this boot's instance's prefix (dispatch)
    report = read_report(clients.s3, settings.bucket, key)
    found = read_instance_provenance(
        clients.s3, settings.bucket, key.removesuffix(REPORT) + PROVENANCE
    )
    rows = result_rows(state, report, found, key)
    # Keys are deterministic, so a retried store overwrites its own rows and nothing else.
    for row in rows:
        clients.dynamodb.put_item(TableName=settings.results_table, Item=to_item(row))
    metrics.add_metric(name="ResultRowsStored", unit=MetricUnit.Count, value=len(rows))
    return Stored(rows=len(rows), report_key=key)


@instrumented
@event_parser(model=BootState)
def handler(event: BootState, context: LambdaContext) -> dict[str, Any]:
    stored = store_results(event, Clients(), Settings.from_env())
    return stored.model_dump(mode="json")
