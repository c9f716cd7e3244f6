"""What the harness records and reports: pydantic models, the report's JSON Schema source.

Raw per-request timestamps live in `RequestRecord` (flat, written as JSONL); every figure in
`CellReport` is derived from those records afterwards (see `harness.metrics`).
All times in a record are seconds on the monotonic clock (`time.perf_counter`), relative to
the run's start, so records from several worker processes share one time base.

Every report a harness ever wrote parses here (the orchestrator's Store reads reports with
these models). A report field added after the first report format has a default, and a
`# since <harness_version>` comment names the first harness that wrote it; fields are added,
never renamed or removed. A reader that must tell "not recorded" from a default (a results
row: an older report did not measure achieved load, so its cells are not "valid" or
"streamed") keeps only what the report set: `model_dump(exclude_unset=True)`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from harness.agreement import AgreementProbe
from harness.workload import DatasetWorkload, RandomWorkload, SharedPrefixWorkload, Workload

Endpoint = Literal["completions", "chat"]
# How a cell's tokens reached the client: one chunk at a time ("streamed"), or in groups
# written back to back ("burst", e.g. a server that emits several tokens per device call).
Delivery = Literal["streamed", "burst"]
# How a server says it delivers tokens (/v1/models of a rigbench rig): as produced, or in groups.
TokenDelivery = Literal["per_token", "burst"]
PromptKind = Literal["token_ids", "text"]
BunchingCause = Literal["client", "server_or_network"]

# Failure reasons a request can end with ("not_streamed": the server answered one JSON body,
# ignoring `stream: true`). "interrupted" (Ctrl-C) is kept in the records but is
# not a server failure, so it is not counted in `requests_failed`.
FailureReason = Literal[
    "connect_error",
    "timeout",
    "http_error",
    "stream_dropped",
    "malformed_sse",
    "error_event",
    "missing_done",
    "empty_output",
    "not_streamed",
    "interrupted",
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SLO(_Model):
    """Service-level objectives: a request meets them when every figure given is at or under
    its target (vLLM's `--goodput`, after DistServe)."""

    ttft_ms: float | None = Field(default=None, gt=0)
    tpot_ms: float | None = Field(default=None, gt=0)
    e2e_ms: float | None = Field(default=None, gt=0)
    # since the workloads harness (issue 48)
    percentile: float = Field(
        default=90,
        gt=0,
        lt=100,
        description="A cell meets the SLO when at least this share (%) of its requests met "
        "every target (failed requests never do).",
    )

    @model_validator(mode="after")
    def _some_target(self) -> SLO:
        if self.ttft_ms is None and self.tpot_ms is None and self.e2e_ms is None:
            raise ValueError("give at least one target: ttft_ms, tpot_ms or e2e_ms")
        return self

    def targets(self) -> dict[str, float]:
        """The targets given, by name (ttft_ms, tpot_ms, e2e_ms)."""
        found = {"ttft_ms": self.ttft_ms, "tpot_ms": self.tpot_ms, "e2e_ms": self.e2e_ms}
        return {name: value for name, value in found.items() if value is not None}

    def words(self) -> str:
        """The targets in words: 'TTFT <= 500 ms, TPOT <= 50 ms'."""
        names = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "e2e_ms": "E2E"}
        return ", ".join(f"{names[name]} <= {value:g} ms" for name, value in self.targets().items())


class GammaArrival(_Model):
    """Gamma-distributed gaps between arrivals at the cell's mean rate: shape 1 is Poisson,
    below 1 burstier, above 1 more even (vLLM's --burstiness)."""

    gamma: float = Field(gt=0, le=1000, allow_inf_nan=False)


Arrival = Literal["poisson", "constant"] | GammaArrival


class CapacitySearch(_Model):
    """Search the highest load that meets the SLO: probe cells growing (doubling) from the
    lowest load, then bisecting between the last that met it and the first that did not."""

    by: Literal["concurrency", "rate"]
    max: float = Field(gt=0, le=100_000, allow_inf_nan=False, description="the highest load probed")

    @model_validator(mode="after")
    def _whole_concurrency(self) -> CapacitySearch:
        if self.by == "concurrency" and (self.max != int(self.max) or self.max > 1024):
            raise ValueError("max: a concurrency is a whole number of requests, at most 1024")
        return self


class BenchmarkConfig(_Model):
    """Everything that defines a run; the CLI builds one, `run_benchmark` takes one."""

    url: str = Field(
        pattern=r"^https?://[^/\s]+",
        description="Base URL of the server, e.g. http://127.0.0.1:8000",
    )
    model: str = Field(min_length=1)
    endpoint: Endpoint = "completions"
    concurrency: list[int] | None = Field(
        default=None, description="Fixed-concurrency cells, in order (closed loop)."
    )
    rate: list[Annotated[float, Field(gt=0, allow_inf_nan=False)]] | None = Field(
        default=None,
        description="Request-rate cells in requests/s, in order, after any concurrency cells.",
    )
    input_len: int = Field(default=128, ge=1, description="Prompt length in tokens.")
    output_len: int = Field(default=64, ge=1, description="Forced output length in tokens.")
    requests: int = Field(default=64, ge=1, description="Measured requests per cell.")
    warmup: int = Field(default=4, ge=0, description="Warm-up requests before the first cell.")
    # since the workloads harness (issue 48)
    warmup_each_cell: bool = Field(
        default=False,
        description="Send the warm-up requests again before every later cell (and capacity "
        "probe), at up to its concurrency; never measured.",
    )
    prompt_kind: PromptKind | None = Field(
        default=None,
        description="token_ids (exact length) or text; default token_ids for completions, "
        "text for chat.",
    )
    max_concurrency: int | None = Field(
        default=None, ge=1, description="Cap on in-flight requests in rate cells (None: no cap)."
    )
    seed: int = 0
    # since 0.1.0+ae488cccd4
    agreement_probe: bool = Field(
        default=False,
        description="Before the cells, answer the agreement probe (harness/agreement_probe.py): "
        "fixed prompts, greedy, with logprobs; every sweep boot does.",
    )
    # since 0.1.0+da341d8262
    workers: int = Field(
        default=1,
        ge=1,
        description="Client processes that share each cell (for loads one process cannot "
        "carry; see benchmarks/harness_ceiling.py).",
    )
    request_timeout_s: float = Field(default=600.0, gt=0)
    connect_timeout_s: float = Field(default=10.0, gt=0)
    # since 0.1.0+a208cb0855
    dataset: str | None = Field(
        default=None,
        description="JSONL file the prompts came from (harness.dataset), in place of "
        "generated prompts of input_len tokens; output_len is the default output length.",
    )
    # since 0.1.0+a208cb0855
    slo: SLO | None = Field(
        default=None, description="Latency targets; each cell then reports its goodput."
    )
    # since 0.1.0+a208cb0855
    percentiles: list[float] = Field(
        default_factory=list,
        description="Percentiles reported beside p50, p90 and p99 (MetricSummary.percentiles).",
    )
    # since 0.1.0+a208cb0855
    max_failed_share: float = Field(
        default=0.01,
        ge=0,
        le=1,
        description="Share of failed requests in a cell above which the run counts as failed "
        "(`rigbench bench` exits 1); a cell with no successful request always does.",
    )

    # since the workloads harness (issue 48)
    workload: Workload | None = Field(
        default=None,
        description="What the requests ask for (harness.workload); None: random prompts of "
        "input_len tokens and output_len out, or the dataset's lines.",
    )
    # since the workloads harness (issue 48)
    arrival: Arrival = Field(default="poisson", description="How rate cells space their requests.")
    # since the workloads harness (issue 48)
    capacity: CapacitySearch | None = Field(
        default=None,
        description="After the cells, search the highest load that meets the SLO "
        "(harness.capacity); each probe is kept as a cell.",
    )
    # since the workloads harness (issue 48)
    deadline_s: float | None = Field(
        default=None,
        gt=0,
        description="Seconds from the run's start after which no capacity probe is started "
        "that would not end in time (its length guessed from the last one).",
    )

    @model_validator(mode="after")
    def _one_load_kind(self) -> BenchmarkConfig:
        if self.concurrency is None and self.rate is None:
            self.concurrency = [1]
        if self.concurrency is not None and (
            not self.concurrency or any(c < 1 for c in self.concurrency)
        ):
            raise ValueError("concurrency values must be integers >= 1")
        if self.rate is not None and (not self.rate or any(r <= 0 for r in self.rate)):
            raise ValueError("rate values must be > 0 requests/s")
        if self.endpoint == "chat" and self.prompt_kind == "token_ids":
            raise ValueError("the chat endpoint takes text prompts only")
        if any(not 0 < p < 100 for p in self.percentiles):
            raise ValueError("percentiles must be within (0, 100)")
        if self.capacity is not None and self.slo is None:
            raise ValueError("a capacity search needs an slo: the targets it searches within")
        if self.dataset is not None and self.workload is not None:
            raise ValueError("give either dataset or workload, not both")
        return self

    @property
    def resolved_workload(self) -> RandomWorkload | SharedPrefixWorkload | DatasetWorkload:
        """The workload: as given, else the dataset's lines, else random prompts of input_len
        tokens (the run's first form, which every older report describes)."""
        if self.workload is not None:
            return self.workload
        if self.dataset is not None:
            return DatasetWorkload(kind="dataset", path=self.dataset)
        return RandomWorkload(prompt_tokens=self.input_len, output_tokens=self.output_len)

    @property
    def resolved_prompt_kind(self) -> PromptKind:
        if self.prompt_kind is not None:
            return self.prompt_kind
        return "token_ids" if self.endpoint == "completions" else "text"


class RequestRecord(_Model):
    """Raw timings of one request, as the client saw them (seconds since run start)."""

    request_id: int
    cell: int = Field(description="Index of the cell; -1 for warm-up requests.")
    warmup: bool = False
    input_len: int | None = Field(
        description="Requested prompt length in tokens; None for a dataset's text prompt."
    )
    output_len: int = Field(description="Requested output length in tokens.")
    ready_time: float = Field(
        description="When the request was due: its Poisson arrival, or when its concurrency "
        "slot became free."
    )
    send_time: float = Field(description="When the request was handed to the HTTP client.")
    first_content_time: float | None = Field(
        default=None, description="Arrival of the first chunk carrying generated content."
    )
    content_times: list[float] = Field(
        default_factory=list, description="Arrival time of every content-carrying chunk."
    )
    end_time: float | None = Field(default=None, description="When the stream completed.")
    usage_output_tokens: int | None = Field(
        default=None, description="completion_tokens from the usage chunk, if sent."
    )
    usage_prompt_tokens: int | None = None
    content_chunks: int = Field(default=0, description="Chunks that carried generated content.")
    shared_read_chunks: int = Field(
        default=0,
        description="Content chunks that reached the client in one socket read with an earlier "
        "one (read late), so they share its arrival stamp: a sign of client strain.",
    )
    first_token_shared_read: bool = Field(
        default=False,
        description="The first content chunk reached the client in one socket read with the "
        "next one, so its stamp is the later chunk's arrival: TTFT reads late by about a gap.",
    )
    http_status: int | None = None
    error: FailureReason | None = None
    error_detail: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def output_tokens(self) -> int:
        """Tokens generated: the usage figure when present, else one per content chunk."""
        if self.usage_output_tokens is not None:
            return self.usage_output_tokens
        return self.content_chunks

    @property
    def queue_wait(self) -> float:
        return self.send_time - self.ready_time


class MetricSummary(_Model):
    """Distribution of one metric in milliseconds; None where there was no sample."""

    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    count: int = Field(default=0, description="Number of samples summarised.")
    # since 0.1.0+a208cb0855
    percentiles: dict[str, float] = Field(
        default_factory=dict,
        description="The percentiles asked for beside p50, p90 and p99, keyed p95, p99.9, ...",
    )


class MetricValidity(_Model):
    """Which figures of one metric the harness measured within its tolerance, and who is to
    answer for tokens that reached the client together.

    Chunks that reached the client in one socket read share one arrival stamp. Each figure
    is computed again with every such group spread evenly over the gap that ends in its
    stamp (see `harness.metrics.validity`); the difference is `predicted_error_ms`. Who
    bunched the chunks decides what that difference means (`cause`):
    - "client": the client's own event loop stalled long enough, often enough, to have read
      them late. The figure is the client's error: a figure whose predicted error exceeds
      the tolerance (2 ms for TTFT, 0.5 ms for ITL) is invalid, kept here for the record
      but never shown as a clean number.
    - "server_or_network": the client's loop was not stalled enough to explain them, so the
      server or the network delivered them together (e.g. Nagle's algorithm, or a server
      that flushes several tokens per write). The figure is what the server's users see and
      stays valid as measured; `predicted_error_ms` is then the bunching's effect on it.
    """

    mean: bool = True
    p50: bool = True
    p90: bool = True
    p99: bool = True
    # since 0.1.0+a208cb0855
    percentiles: dict[str, bool] = Field(
        default_factory=dict, description="Validity of MetricSummary.percentiles, by key."
    )
    predicted_error_ms: MetricSummary = Field(
        default_factory=MetricSummary,
        description="Each figure as measured minus the same figure with bunched chunks spread "
        "out, in ms: the client's error when cause is client.",
    )
    # since 0.1.0+a208cb0855
    cause: BunchingCause | None = Field(
        default=None,
        description="Who bunched the chunks, when bunching moved a figure past the tolerance.",
    )
    reason: str | None = Field(
        default=None, description="In words: how many chunks were bunched, and by whom."
    )

    def valid(self, figure: str) -> bool:
        if figure in self.percentiles:
            return self.percentiles[figure]
        return bool(getattr(self, figure, True))


class GpuUsage(_Model):
    """What the GPU burned during one cell (harness.gpu_sampler), or why nothing was sampled."""

    available: bool = Field(description="False: no GPU was sampled; `reason` says why.")
    reason: str = ""
    devices: list[str] = []
    samples: int = 0
    mean_power_w: float | None = Field(default=None, description="Energy / the cell's time.")
    energy_j: float | None = None
    energy_source: str = Field(
        default="", description="'energy counter' (the driver's) or 'power samples' (integrated)."
    )
    j_per_output_token: float | None = Field(
        default=None, description="energy_j / the cell's output tokens (successful requests)."
    )
    max_memory_used_mib: float | None = None
    mean_utilization_pct: float | None = None

    def per_token(self, output_tokens: int) -> GpuUsage:
        """With `j_per_output_token` for the cell's output tokens."""
        if self.energy_j is None or output_tokens <= 0:
            return self
        return self.model_copy(
            update={"j_per_output_token": round(self.energy_j / output_tokens, 4)}
        )


class CellReport(_Model):
    """One load cell: a fixed concurrency or a Poisson rate, `requests` measured requests."""

    concurrency: int | None = None
    rate: float | None = None
    requests_ok: int
    requests_failed: int
    output_tokens: int = Field(description="Output tokens of the successful requests.")
    duration_s: float = Field(description="First send to last completion in the cell.")
    output_tok_s: float = Field(description="output_tokens / duration_s.")
    ttft_ms: MetricSummary
    itl_ms: MetricSummary
    tpot_ms: MetricSummary
    e2e_ms: MetricSummary
    queue_wait_ms: MetricSummary = Field(
        description="Time a request waited for a slot before it was sent; not in any latency."
    )
    failure_reasons: dict[str, int] = Field(default_factory=dict)
    # since 0.1.0+a208cb0855
    first_failure: str | None = Field(
        default=None,
        description="The first failed request's reason and message, e.g. the server's own "
        "words in an HTTP error.",
    )
    # since 0.1.0+a208cb0855
    goodput_req_s: float | None = Field(
        default=None,
        description="Requests per second that met every SLO in config.slo (successful "
        "requests only, over duration_s); None without an SLO.",
    )
    # since 0.1.0+a208cb0855
    slo_met: int | None = Field(
        default=None, description="Requests that met every SLO; None without an SLO."
    )
    # since the workloads harness (issue 48)
    slo_attainment: float | None = Field(
        default=None,
        description="Share of the requests sent that met every SLO (failed ones never do); "
        "None without an SLO.",
    )
    # since the workloads harness (issue 48)
    meets_slo: bool | None = Field(
        default=None,
        description="slo_attainment reached the SLO's percentile (90: 90% of requests met "
        "every target); None without an SLO.",
    )
    # since the workloads harness (issue 48)
    capacity_probe: bool = Field(
        default=False,
        description="A probe of the capacity search (BenchmarkReport.capacity), not a cell "
        "the config asked for: its load differs between runs, so it is not compared by cell.",
    )
    # since the timed boots (issue 49)
    gpu: GpuUsage | None = Field(
        default=None,
        description="What the GPU burned while the cell ran (power, energy per output token), "
        "or why nothing was sampled; None from a harness before it sampled.",
    )
    length_mismatches: int = Field(
        default=0, description="Successful requests whose output token count != output_len."
    )
    prompt_length_mismatches: int = Field(
        default=0, description="Requests whose usage.prompt_tokens != input_len."
    )
    requests_without_usage: int = Field(
        default=0, description="Successful requests whose tokens were counted, not reported."
    )
    multi_token_chunk_requests: int = Field(
        default=0,
        description="Requests whose chunks carried several tokens; their ITL gaps are spread "
        "evenly over the tokens (see harness.metrics).",
    )
    requests_interrupted: int = Field(default=0, description="In flight when Ctrl-C came.")
    # since 0.1.0+da341d8262
    shared_read_fraction: float = Field(
        default=0.0,
        description="Share of content chunks that arrived in one socket read with an earlier "
        "one, so their ITL gap reads as zero: above about 1% the client read its sockets too "
        "late and ITL is not to be trusted.",
    )
    event_loop_lag_ms: MetricSummary = Field(
        default_factory=MetricSummary,
        description="How late the client's event loop woke during the cell; a p99 above "
        "about 1 ms means the harness itself is near its ceiling.",
    )
    complete: bool = Field(default=True, description="False when Ctrl-C cut the cell short.")
    # since 0.1.0+6b5b9daab5
    achieved_concurrency: float | None = Field(
        default=None,
        description="Requests in flight (sent, not yet complete), averaged over time: for a "
        "concurrency cell over the stretch in which the nominal number should have been in "
        "flight (from the first request due to the completion that left fewer requests to "
        "send than slots); for a rate cell from first send to last completion.",
    )
    # since 0.1.0+6b5b9daab5
    achieved_request_rate: float | None = Field(
        default=None,
        description="Requests completed (ok or failed) per second over duration_s.",
    )
    # since 0.1.0+6b5b9daab5
    load_shortfall: str | None = Field(
        default=None,
        description="Set, in words, when the cell did not reach its nominal load (achieved "
        "concurrency under 95% of nominal, or sends behind a rate's schedule by over 5%).",
    )
    # since 0.1.0+6b5b9daab5
    first_token_shared_reads: int = Field(
        default=0,
        description="Successful requests whose first content chunk was read together with the "
        "next one (their TTFT is late by about one token gap).",
    )
    # since 0.1.0+6b5b9daab5
    ttft_validity: MetricValidity = Field(default_factory=MetricValidity)
    # since 0.1.0+6b5b9daab5
    itl_validity: MetricValidity = Field(default_factory=MetricValidity)
    # since 0.1.0+6b5b9daab5
    burst_share: float | None = Field(
        default=None,
        description="The share of token intervals under 0.2 ms (tokens that arrived together: "
        "in one chunk, one read or back-to-back writes), pooled over successful requests; "
        "None without a request of two tokens.",
    )
    # since 0.1.0+6b5b9daab5
    delivery: Delivery = Field(
        default="streamed",
        description="burst: burst_share is over one half, so the server delivered tokens in "
        "groups and ITL describes the groups, not a per-token pace; the comparison gives such "
        "cells no ITL verdict (compare TPOT).",
    )


def metric_value(cell: Mapping[str, Any], key: str) -> float | None:
    """A report cell's (or a results row's) metric by its dotted key, `ttft_ms.p50`: None
    where it is missing or not a finite number (an older row, a failed cell)."""
    node: Any = cell
    for part in key.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    if isinstance(node, bool) or not isinstance(node, int | float) or not math.isfinite(node):
        return None
    return float(node)


def cell_label(cell: CellReport | Mapping[str, Any]) -> str:
    """The one label of a load cell, wherever one is shown: `c=4` for a fixed concurrency,
    `rate=2.5/s` for a rate, `probe c=4` for a capacity search's probe (a parsed cell, or a
    report's or a row's plain dict)."""
    if isinstance(cell, CellReport):
        concurrency, rate, probe = cell.concurrency, cell.rate, cell.capacity_probe
    else:
        concurrency, rate = cell.get("concurrency"), cell.get("rate")
        probe = bool(cell.get("capacity_probe"))
    prefix = "probe " if probe else ""
    if concurrency is not None:
        return f"{prefix}c={concurrency}"
    if rate is not None:
        return f"{prefix}rate={rate}/s"
    raise ValueError(f"report cell has neither 'concurrency' nor 'rate': keys {sorted(cell)}")


class CapacityProbe(_Model):
    """One probe cell of a capacity search."""

    load: float = Field(description="Its concurrency or rate (requests/s).")
    meets_slo: bool
    slo_attainment: float = Field(description="Share of its requests that met every target.")
    cell: int = Field(description="Its index in BenchmarkReport.cells.")


class CapacityResult(_Model):
    """The highest load that met the SLO, and how the search found it."""

    by: Literal["concurrency", "rate"]
    value: float = Field(
        description="The highest load probed that met the SLO, every lower probe meeting it "
        "too; 0 when the lowest probe did not."
    )
    slo: SLO
    max: float = Field(description="The highest load the search was allowed to probe.")
    probes: list[CapacityProbe]
    stopped: Literal["bracketed", "max", "deadline", "interrupted", "floor"] = Field(
        description="Why the search ended: the value lies between two probes it measured "
        "(bracketed), every load up to max met the SLO (max), the deadline or Ctrl-C came "
        "first, or the lowest load it may probe did not meet the SLO (floor)."
    )
    output_tok_s: float | None = Field(
        default=None, description="Output tokens/s of the probe at the value."
    )
    goodput_req_s: float | None = Field(
        default=None, description="Goodput of the probe at the value."
    )


class DatasetProvenance(_Model):
    """Which dataset a run's prompts came from, exactly."""

    name: str = Field(description="As the run named it: a bundled name, a path or an s3 URI.")
    sha256: str
    rows: int = Field(description="Requests in the file.")
    rows_used: int = Field(description="Distinct lines the run sent (warm-up included).")


class BenchmarkReport(_Model):
    """One run: the JSON report written by `rigbench bench`."""

    harness_version: str
    url: str
    model: str
    started_at: str = Field(description="UTC, ISO 8601.")
    finished_at: str | None = None
    endpoint: Endpoint
    config: BenchmarkConfig
    cells: list[CellReport]
    # since 0.1.0+ae488cccd4
    agreement: AgreementProbe | None = Field(
        default=None,
        description="The agreement probe's answers (when the config asked for it), which the "
        "comparison checks across rigs (analysis/agreement.py).",
    )
    token_delivery: TokenDelivery | None = Field(
        default=None,
        description="How the server said it delivers tokens (/v1/models; rigbench rigs say it, "
        "an OpenAI server need not): burst, several tokens per write, gets no ITL verdicts.",
    )
    # since the workloads harness (issue 48)
    capacity: CapacityResult | None = Field(
        default=None, description="The capacity search's answer, when the config asked for one."
    )
    # since the workloads harness (issue 48)
    dataset: DatasetProvenance | None = Field(
        default=None, description="The dataset the prompts came from, when they did."
    )
    interrupted: bool = False
    harness_ceiling_note: str = Field(
        description="How close the client came to its own ceiling during the run."
    )


def report_json_schema() -> dict[str, object]:
    return BenchmarkReport.model_json_schema()
