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


def test_a_report_written_before_the_achieved_load_fields_still_loads() -> None:
    # Written by a local sweep with harness 0.1.0+df854acfb9, before achieved load, validity
    # and delivery were recorded: they take their defaults and the table still renders.
    from harness.output import results_table
    from harness.schemas import BenchmarkReport

    path = ROOT / "tests" / "harness" / "data" / "report-0.1-before-achieved-load.json"
    old = json.loads(path.read_text())
    assert "achieved_concurrency" not in old["cells"][0]
    report = BenchmarkReport.model_validate(old)
    cell = report.cells[0]
    assert cell.achieved_concurrency is None
    assert cell.load_shortfall is None
    assert cell.ttft_validity.p50
    assert cell.itl_validity.p50
    assert cell.delivery == "streamed"
    assert cell.first_token_shared_reads == 0
    assert results_table(report).row_count == len(old["cells"])
