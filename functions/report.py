"""The one place the orchestrator reads what an instance uploads: the harness report
(`harness.schemas.BenchmarkReport`, report.schema.json) and the provenance beside it.

Only the fields a results row needs are modelled; everything else in the report stays in S3.
"""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


def _row_agreement(probe: dict[str, Any]) -> dict[str, Any]:
    """The agreement probe as a results row keeps it: token strings left out (the ids, text
    and margins say it all; the report in S3 keeps everything)."""
    answers = [{k: v for k, v in a.items() if k != "tokens"} for a in probe.get("answers", [])]
    return {**probe, "answers": answers}


class Summary(_Lenient):
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None


class Validity(_Lenient):
    """`harness.schemas.MetricValidity`: which figures were measured within tolerance."""

    mean: bool = True
    p50: bool = True
    p90: bool = True
    p99: bool = True
    predicted_error_ms: Summary = Summary()
    reason: str | None = None


class Cell(_Lenient):
    concurrency: int | None = None
    rate: float | None = None
    requests_ok: int
    requests_failed: int
    output_tokens: int
    duration_s: float
    output_tok_s: float
    ttft_ms: Summary
    itl_ms: Summary
    tpot_ms: Summary
    e2e_ms: Summary
    # Recorded by harnesses since the achieved-load fields; None in a report from before,
    # where the load, validity and delivery were not recorded (not "valid" or "streamed").
    achieved_concurrency: float | None = None
    achieved_request_rate: float | None = None
    load_shortfall: str | None = None
    ttft_validity: Validity | None = None
    itl_validity: Validity | None = None
    delivery: Literal["streamed", "burst"] | None = None
    # Recorded since the pre-flight and goodput: the first failed request's reason and the
    # server's message; goodput where the run had SLOs.
    first_failure: str | None = None
    goodput_req_s: float | None = None
    slo_met: int | None = None

    @property
    def key(self) -> str:
        if self.concurrency is not None:
            return f"c{self.concurrency:05d}"
        if self.rate is not None:
            return f"r{self.rate:011.4f}"
        raise ValueError("a cell has neither concurrency nor rate")


class Report(_Lenient):
    harness_version: str
    url: str
    model: str
    started_at: str
    cells: list[Cell] = Field(min_length=1)
    # The agreement probe (harness.agreement.AgreementProbe), kept as the report has it.
    agreement: dict[str, Any] | None = None

    def row_agreement(self) -> dict[str, Any] | None:
        return None if self.agreement is None else _row_agreement(self.agreement)


class InstanceProvenance(_Lenient):
    """What the bench command collected on the instance: see instance_commands."""

    served_model: str
    rig: dict[str, str] = {}
    gpu: str
    driver: str
