import json

from harness.schemas import report_json_schema
from tests.harness.conftest import ROOT


def test_committed_schema_matches_the_models() -> None:
    committed = json.loads((ROOT / "harness" / "report.schema.json").read_text())
    assert committed == report_json_schema(), (
        "harness/report.schema.json is stale: run `python -m harness.schema_export`"
    )


def test_report_has_the_cli_contract_fields() -> None:
    schema = report_json_schema()
    assert {"cells", "harness_version", "url", "model", "started_at"} <= set(
        schema["required"]  # type: ignore[arg-type]
    )
    cell = schema["$defs"]["CellReport"]  # type: ignore[index]
    contract = {"concurrency", "rate", "requests_ok", "requests_failed", "output_tokens",
                "duration_s", "output_tok_s", "ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"}  # fmt: skip
    assert contract <= set(cell["properties"])
    summary = schema["$defs"]["MetricSummary"]  # type: ignore[index]
    assert {"mean", "p50", "p90", "p99"} <= set(summary["properties"])
