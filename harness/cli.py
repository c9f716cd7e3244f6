"""`rigbench bench`: the harness's command line (a contract other tooling depends on).

Exit codes: 0 when the run finished with every cell within --max-failed-share of failed
requests; 1 when the server cannot be reached, the pre-flight request fails (the server's
own message and a hint), or a cell had no successful request or too many failed (the report
is written first); 2 for an invalid argument; 130 after Ctrl-C (the partial report is
written first). Every error is one line on stderr. A line per cell goes to stdout as each
completes (under a live bar on a terminal).
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
import typer.core
from pydantic import ValidationError
from rich.console import Console
from typer.exceptions import TyperException

from harness.backend import ServerUnreachableError
from harness.capacity import capacity_line
from harness.dataset import DatasetEntry, DatasetError, open_dataset
from harness.output import records_path, results_table, write_report
from harness.progress import CellProgress
from harness.runner import PreflightError, failed_cells, run_benchmark
from harness.schemas import (
    SLO,
    Arrival,
    BenchmarkConfig,
    BenchmarkReport,
    DatasetProvenance,
    Endpoint,
    GammaArrival,
    RequestRecord,
)
from harness.workload import DatasetWorkload

EXIT_UNREACHABLE = 1  # also: the pre-flight failed, or cells failed
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class BenchCommand(typer.core.TyperCommand):
    """Reports a usage error as one line instead of Click's usage block."""

    def make_context(
        self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any
    ) -> Any:
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except TyperException as exc:  # typer's vendored click UsageError derives from it
            message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
            _die(f"invalid argument: {message}", EXIT_USAGE)


def _die(message: str, code: int) -> NoReturn:
    print(f"rigbench bench: error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(code)


def _numbers(text: str | None, option: str, kind: type[int] | type[float]) -> list[Any] | None:
    if text is None:
        return None
    try:
        return [kind(part) for part in text.split(",")]
    except ValueError:
        _die(f"{option} takes comma-separated {kind.__name__}s, got {text!r}", EXIT_USAGE)


_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP token (RFC 9110)


def _headers(pairs: list[str], api_key: str | None) -> dict[str, str]:
    headers: dict[str, str] = {}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    for pair in pairs:
        name, colon, value = pair.partition(":")
        name, value = name.strip(), value.strip()
        if not colon or not _HEADER_NAME.match(name):
            _die(f"--header {pair!r}: give NAME:VALUE, NAME an HTTP header name", EXIT_USAGE)
        if any(c in value for c in "\r\n\0") or not value.isascii():
            _die(f"--header {name}: the value must be printable ASCII on one line", EXIT_USAGE)
        headers[name] = value  # a given Authorization header wins over --api-key
    return headers


_TARGETS = ("ttft_ms", "tpot_ms", "e2e_ms")


def _slo(text: str | None, percentile: float) -> SLO | None:
    if text is None:
        return None
    if not 0 < percentile < 100:
        _die(f"--slo-percentile must be within (0, 100), got {percentile:g}", EXIT_USAGE)
    names = ", ".join(_TARGETS)
    targets: dict[str, float] = {}
    for part in text.split(","):
        name, equals, value = part.partition("=")
        try:
            if not equals or name.strip() not in _TARGETS:
                raise ValueError
            targets[name.strip()] = float(value)
        except ValueError:
            _die(f"--slo {text!r}: give NAME=MS pairs, NAME one of {names}", EXIT_USAGE)
    try:
        return SLO(**targets, percentile=percentile)
    except ValidationError as exc:
        _die(f"--slo {text!r}: {_config_error(exc).split(': ', 1)[-1]}", EXIT_USAGE)


def _arrival(text: str) -> Arrival:
    if text in ("poisson", "constant"):
        return "poisson" if text == "poisson" else "constant"
    name, colon, shape = text.partition(":")
    try:
        if name != "gamma" or not colon:
            raise ValueError
        return GammaArrival(gamma=float(shape))
    except (ValueError, ValidationError):
        _die(f"--arrival {text!r}: give poisson, constant or gamma:SHAPE (SHAPE > 0)", EXIT_USAGE)


def _workload(text: str | None) -> Any:
    """The --workload JSON object (validated with the config, which names what is wrong)."""
    if text is None:
        return None
    try:
        found = json.loads(text)
    except ValueError:
        _die(f"--workload takes a JSON object, got {text!r}", EXIT_USAGE)
    if not isinstance(found, dict):
        _die(f"--workload takes a JSON object, got {text!r}", EXIT_USAGE)
    return found


def _config_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    message = str(error["msg"]).removeprefix("Value error, ")
    if error["loc"]:
        return f"--{str(error['loc'][0]).replace('_', '-')}: {message}"
    return message


def bench(
    url: Annotated[str | None, typer.Option(help="Server base URL, http://HOST:PORT")] = None,
    model: Annotated[str | None, typer.Option(help="Model name the server serves")] = None,
    endpoint: Annotated[str, typer.Option(help="completions or chat")] = "completions",
    concurrency: Annotated[
        str | None, typer.Option(help="Fixed-concurrency cells, e.g. 1,4,16")
    ] = None,
    rate: Annotated[
        str | None,
        typer.Option(help="Request-rate cells in req/s, e.g. 2.5,5 (after any concurrency cells)"),
    ] = None,
    arrival: Annotated[
        str, typer.Option(help="How rate cells space requests: poisson, constant or gamma:SHAPE")
    ] = "poisson",
    input_len: Annotated[int, typer.Option(help="Prompt length in tokens")] = 128,
    output_len: Annotated[int, typer.Option(help="Output length in tokens")] = 64,
    requests: Annotated[int, typer.Option(help="Measured requests per cell")] = 64,
    warmup: Annotated[int, typer.Option(help="Warm-up requests before the first cell")] = 4,
    warmup_each_cell: Annotated[
        bool,
        typer.Option("--warmup-each-cell", help="Warm up again before every later cell"),
    ] = False,
    max_concurrency: Annotated[
        int | None, typer.Option(help="Cap on in-flight requests in rate cells")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed for prompts and arrivals")] = 0,
    workers: Annotated[
        int, typer.Option(help="Client processes sharing each cell (beyond one event loop)")
    ] = 1,
    agreement: Annotated[
        bool,
        typer.Option(
            "--agreement",
            help="Before the cells, answer the agreement probe (fixed prompts, greedy, "
            "logprobs) that sweeps compare across rigs",
        ),
    ] = False,
    out: Annotated[Path, typer.Option(help="Report path; records go beside it")] = Path(
        "report.json"
    ),
    api_key: Annotated[
        str | None,
        typer.Option(
            envvar="OPENAI_API_KEY",
            show_envvar=True,
            help="Sent as Authorization: Bearer KEY (never written to the report)",
        ),
    ] = None,
    header: Annotated[
        list[str] | None, typer.Option(help="An extra request header NAME:VALUE (repeatable)")
    ] = None,
    dataset: Annotated[
        str | None,
        typer.Option(
            help="JSONL prompts, one request a line: prompt or messages, optional "
            "output_tokens; a path, s3://BUCKET/KEY, or a bundled name: sample-chat, "
            "sample-prompts"
        ),
    ] = None,
    workload: Annotated[
        str | None,
        typer.Option(
            help='The workload as JSON, as a sweep gives it: {"kind": "random", '
            '"prompt_tokens": {"mean": 512, "stddev": 128}, "output_tokens": 128}, '
            '{"kind": "shared_prefix", "groups": 4, "prefix_tokens": 256, "suffix_tokens": '
            '64}, {"kind": "dataset", "path": "sample-chat"}'
        ),
    ] = None,
    slo: Annotated[
        str | None,
        typer.Option(help="Targets for goodput, e.g. ttft_ms=500,tpot_ms=50 (and e2e_ms)"),
    ] = None,
    slo_percentile: Annotated[
        float, typer.Option(help="Share of requests (%) that must meet every --slo target")
    ] = 90.0,
    capacity: Annotated[
        str | None,
        typer.Option(
            help="After the cells, search the highest concurrency or rate that meets --slo"
        ),
    ] = None,
    capacity_max: Annotated[
        float, typer.Option(help="The highest load the capacity search probes")
    ] = 64,
    deadline_s: Annotated[
        float | None,
        typer.Option(help="Start no capacity probe that would end past this many seconds"),
    ] = None,
    percentiles: Annotated[
        str | None, typer.Option(help="Percentiles to show, e.g. 50,90,99 (default 50,99)")
    ] = None,
    max_failed_share: Annotated[
        float, typer.Option(help="Failed share of a cell above which the run exits 1")
    ] = 0.01,
) -> None:
    """Benchmark an OpenAI-compatible server: one JSON report plus per-request JSONL."""
    if url is None or model is None:
        _die("--url and --model are required", EXIT_USAGE)
    headers = _headers(header or [], api_key)
    if endpoint not in ("completions", "chat"):
        _die(f"--endpoint must be completions or chat, got {endpoint!r}", EXIT_USAGE)
    chosen: Endpoint = "chat" if endpoint == "chat" else "completions"
    if capacity not in (None, "concurrency", "rate"):
        _die(f"--capacity must be concurrency or rate, got {capacity!r}", EXIT_USAGE)
    try:
        config = BenchmarkConfig(
            url=url,
            model=model,
            endpoint=chosen,
            concurrency=_numbers(concurrency, "--concurrency", int),
            rate=_numbers(rate, "--rate", float),
            input_len=input_len,
            output_len=output_len,
            requests=requests,
            warmup=warmup,
            warmup_each_cell=warmup_each_cell,
            max_concurrency=max_concurrency,
            seed=seed,
            workers=workers,
            dataset=dataset,
            workload=_workload(workload),
            arrival=_arrival(arrival),
            slo=_slo(slo, slo_percentile),
            capacity=None if capacity is None else {"by": capacity, "max": capacity_max},
            deadline_s=deadline_s,
            percentiles=_numbers(percentiles, "--percentiles", float) or [],
            max_failed_share=max_failed_share,
            agreement_probe=agreement,
        )
    except ValidationError as exc:
        _die(f"invalid argument: {_config_error(exc)}", EXIT_USAGE)
    entries: list[DatasetEntry] | None = None
    provenance: DatasetProvenance | None = None
    if isinstance(config.resolved_workload, DatasetWorkload):
        option = "--dataset" if dataset is not None else "--workload"
        try:
            entries, provenance = open_dataset(config.resolved_workload.path, chosen)
        except DatasetError as exc:
            _die(f"{option} {exc}", EXIT_USAGE)
    if out.is_dir():
        _die(f"--out {out} is a directory; give a file path", EXIT_USAGE)
    _check_writable(out)

    # Piped output would otherwise wrap at 80 columns and squash the table.
    console = Console(width=None if sys.stdout.isatty() else 240)
    report = run_and_write(
        config, out, headers=headers, dataset=entries, provenance=provenance, console=console
    )
    console.print(results_table(report))
    if report.capacity is not None:
        print(capacity_line(report.capacity), flush=True)
    print(f"report: {out}  records: {records_path(out)}", flush=True)
    if report.interrupted:
        print("interrupted: the partial report above was written", file=sys.stderr)
        raise SystemExit(EXIT_INTERRUPTED)
    if failed := failed_cells(report):
        _die(
            f"{len(failed)} of {len(report.cells)} cells failed (over "
            f"{100 * config.max_failed_share:g}% of requests, or none succeeded): "
            + "; ".join(failed),
            EXIT_UNREACHABLE,
        )


def _check_writable(out: Path) -> None:
    """Before any request: a run whose report cannot be written is a run thrown away."""
    folder = out.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".rigbench-write-check-"):
            pass
    except OSError as exc:
        _die(f"--out {out}: cannot write in {folder} ({exc.strerror})", EXIT_USAGE)


def run_and_write(
    config: BenchmarkConfig,
    out: Path,
    *,
    headers: dict[str, str] | None = None,
    dataset: list[DatasetEntry] | None = None,
    provenance: DatasetProvenance | None = None,
    console: Console | None = None,
) -> BenchmarkReport:
    """Run with Ctrl-C stopping the run gracefully; files written after every cell."""

    records: list[RequestRecord] = []
    cells = len(config.concurrency or []) + len(config.rate or [])
    progress = CellProgress(cells, console or Console())

    def save(report: BenchmarkReport, so_far: list[RequestRecord]) -> None:
        records[:] = so_far
        write_report(report, records, out)
        progress.update(report)

    async def main() -> BenchmarkReport:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGINT, stop.set)
        return await run_benchmark(
            config,
            stop=stop,
            on_cell=save,
            headers=headers,
            dataset=dataset,
            dataset_provenance=provenance,
        )

    try:
        with progress:
            report = asyncio.run(main())
    except (ServerUnreachableError, PreflightError) as exc:
        _die(str(exc), EXIT_UNREACHABLE)
    write_report(report, records, out)
    return report
