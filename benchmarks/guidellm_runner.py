"""Run GuideLLM (PyPI `guidellm`, 0.8.x CLI) against an OpenAI-compatible server, offline.

GuideLLM lives in its own virtualenv (its torch/CUDA dependencies would clash with ours); this
module drives its CLI as a subprocess and reads back its JSON report:

    from benchmarks.guidellm_runner import run_guidellm
    result = run_guidellm("http://127.0.0.1:8000", "tiny", concurrency=16, requests=200,
                          input_len=128, output_len=64)
    result["ttft_ms"]["p50"], result["itl_ms"]["p50"], result["request_rate"]

The CLI is found at $RIGBENCH_GUIDELLM, else /work/venv-guidellm/bin/guidellm, which
`python3 -m venv /work/venv-guidellm && /work/venv-guidellm/bin/pip install guidellm==0.8.1`
makes (the version whose reports the tests parse; a few GB, torch included). Offline use needs
a local tokenizer directory (made by make_guidellm_tokenizer.py with GuideLLM's own interpreter
on first use) and HF_HUB_OFFLINE=1.

What GuideLLM measures, in rigbench's terms (docs/design.md):
- TTFT: request start to the first streamed line carrying text; same definition as ours.
- ITL: GuideLLM has no per-gap ITL. Its `inter_token_latency_ms` is per request
  (last token - first token) / (tokens - 1), which is rigbench's TPOT without the stream's tail;
  `itl_ms` below is that per-request figure.
- Its `time_per_output_token_ms` is (last token - request start) / tokens, TTFT included;
  reported here as `guidellm_tpot_ms`, not to be confused with rigbench's TPOT.
Statistics are recomputed from GuideLLM's per-request records (requests that started inside the
measured window), with rigbench's percentile definition, so the numbers compare like for like.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from analysis.stats import Percentiles, percentiles

DEFAULT_GUIDELLM = "/work/venv-guidellm/bin/guidellm"
TOKENIZER_SCRIPT = Path(__file__).with_name("make_guidellm_tokenizer.py")
DEFAULT_TOKENIZER_DIR = Path.home() / ".cache" / "rigbench" / "guidellm-byte-tokenizer"
SCHEDULE_ATTEMPTS = 3  # GuideLLM's intermittent poisson burst: see GuidellmScheduleError
ENDPOINTS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


class GuidellmResult(BaseModel):
    concurrency: int | None
    rate: float | None
    requests_ok: int
    requests_failed: int
    requests_incomplete: int
    duration_s: float
    request_rate: float  # successful requests / measured duration
    achieved_concurrency: float | None = None  # requests in flight, averaged over the window
    output_tokens: int
    output_tok_s: float  # output tokens of successful requests / measured duration
    ttft_ms: Percentiles
    itl_ms: Percentiles  # per-request (last - first token) / (tokens - 1)
    e2e_ms: Percentiles
    guidellm_tpot_ms: Percentiles  # per-request (last token - start) / tokens
    guidellm_version: str
    report_path: str | None
    command: list[str]


class GuidellmScheduleError(RuntimeError):
    """GuideLLM sent requests on a schedule not anchored to the benchmark's start.

    Seen with GuideLLM 0.8.1's poisson profile, intermittently: the workers read the shared
    arrival offset before the main process set it to the start time, so the first arrivals are
    scheduled near t=-1 s (Unix epoch) and fire at once, a burst instead of the rate asked for.
    """


def guidellm_executable() -> Path:
    path = Path(os.environ.get("RIGBENCH_GUIDELLM", DEFAULT_GUIDELLM))
    if not path.is_file():
        raise FileNotFoundError(
            f"GuideLLM CLI not found at {path} (set RIGBENCH_GUIDELLM to its `guidellm` "
            "executable; install with: python3 -m venv /work/venv-guidellm && "
            "/work/venv-guidellm/bin/pip install guidellm==0.8.1)"
        )
    return path


def ensure_tokenizer(guidellm: Path, directory: Path = DEFAULT_TOKENIZER_DIR) -> Path:
    """Build the byte-level tokenizer with GuideLLM's interpreter unless it already exists.

    Built beside the target and renamed into place, so a concurrent run never reads a
    half-written directory.
    """
    if (directory / "tokenizer.json").is_file():
        return directory
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}-", dir=directory.parent))
    try:
        done = subprocess.run(
            [str(guidellm.parent / "python"), str(TOKENIZER_SCRIPT), str(staging)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"building the GuideLLM tokenizer in {directory} failed:\n{done.stderr}"
            )
        try:
            staging.rename(directory)
        except OSError:
            if not (directory / "tokenizer.json").is_file():
                raise  # not a concurrent build that won the race
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return directory


def guidellm_command(
    guidellm: Path,
    *,
    url: str,
    model: str,
    concurrency: int | None,
    rate: float | None,
    rate_kind: Literal["poisson", "constant"],
    requests: int,
    warmup: int,
    input_len: int,
    output_len: int,
    endpoint: Literal["completions", "chat"],
    tokenizer_dir: Path,
    report: Path,
    seed: int,
) -> list[str]:
    """The exact `guidellm run` command line; every option as JSON to avoid quoting surprises."""
    if (concurrency is None) == (rate is None):
        raise ValueError("give exactly one of concurrency or rate")
    if concurrency is not None and concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    if rate is not None and rate <= 0:
        raise ValueError(f"rate must be positive, got {rate}")
    if requests < 1 or warmup < 0 or input_len < 1 or output_len < 1:
        raise ValueError(
            "requests, input_len and output_len must be at least 1 and warmup at least 0; "
            f"got requests={requests} warmup={warmup} input_len={input_len} "
            f"output_len={output_len}"
        )
    if endpoint not in ENDPOINTS:
        raise ValueError(f"endpoint must be one of {sorted(ENDPOINTS)}, got {endpoint!r}")
    backend = {
        "kind": "openai_http",
        "target": url,
        "model": model,
        "request_format": ENDPOINTS[endpoint],
        "http2": False,  # plaintext http is HTTP/1.1 either way; say so explicitly
        # GuideLLM already sends max_tokens + ignore_eos from output_tokens; min_tokens too,
        # since some servers need it to honour the length.
        "extras": {"body": {"min_tokens": output_len}},
    }
    profile: dict[str, Any] = (
        {"kind": "concurrent", "streams": [concurrency]}
        if concurrency is not None
        else {"kind": rate_kind, "rate": [rate]}
    )
    if warmup:
        profile["warmup"] = {"value": warmup, "mode": "requests"}
    data = {"kind": "synthetic_text", "prompt_tokens": input_len, "output_tokens": output_len}
    return [
        str(guidellm),
        "run",
        "--backend",
        json.dumps(backend),
        "--tokenizer",
        json.dumps({"kind": "hf_auto", "model": str(tokenizer_dir)}),
        "--profile",
        json.dumps(profile),
        "--constraint",
        json.dumps({"kind": "max_requests", "count": requests + warmup}),
        "--data",
        json.dumps(data),
        "--seed",
        json.dumps({"kind": "static", "value": seed}),
        "--output",
        json.dumps({"kind": "json", "path": str(report)}),
        "--disable-console-interactive",
    ]


def _run(command: Sequence[str], env: dict[str, str], cwd: Path, timeout_s: float) -> str:
    """Run GuideLLM in its own process group, so a timeout or Ctrl-C ends all its workers."""
    with subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    ) as proc:
        try:
            output, _ = proc.communicate(timeout=timeout_s)
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
    if proc.returncode != 0:
        tail = "\n".join(output.splitlines()[-30:])
        raise RuntimeError(f"guidellm exited with {proc.returncode}:\n{tail}")
    return output


def parse_report(
    path: Path, *, concurrency: int | None = None, rate: float | None = None
) -> GuidellmResult:
    """Read one benchmark from a GuideLLM JSON report into rigbench's figures."""
    report = json.loads(path.read_text())
    benchmarks = report.get("benchmarks") or []
    if len(benchmarks) != 1:
        raise ValueError(f"{path}: expected one benchmark, found {len(benchmarks)}")
    bench = benchmarks[0]
    start, end = float(bench["start_time"]), float(bench["end_time"])
    duration = end - start
    measured = [r for r in bench["requests"]["successful"] if r["request_start_time"] >= start]
    failed = [r for r in bench["requests"]["errored"] if r["request_start_time"] >= start]
    incomplete = [r for r in bench["requests"]["incomplete"] if r["request_start_time"] >= start]
    unanchored = [
        r
        for r in bench["requests"]["successful"]
        if (target := r["info"]["timings"].get("targeted_start")) is not None
        and target < start - 3600.0
    ]
    if unanchored:
        raise GuidellmScheduleError(
            f"{path}: {len(unanchored)} requests were scheduled at Unix time "
            f"{unanchored[0]['info']['timings']['targeted_start']:.2f}, not near the start "
            f"{start:.2f}: GuideLLM sent them as a burst, not at the requested rate"
        )
    if not measured:
        errors = {str(r.get("info", {}).get("error")) for r in failed}
        raise RuntimeError(f"{path}: no successful request in the measured window; errors {errors}")

    def series(key: str, scale: float = 1.0) -> Percentiles:
        values = [r[key] * scale for r in measured if r.get(key) is not None]
        return percentiles(values)

    output_tokens = sum(int(r["output_tokens"] or 0) for r in measured)
    spans = [
        (r["request_start_time"], r["request_end_time"])
        for kind in ("successful", "errored", "incomplete")
        for r in bench["requests"][kind]
        if r.get("request_start_time") is not None and r.get("request_end_time") is not None
    ]
    busy = sum(max(min(e, end) - max(s, start), 0.0) for s, e in spans)
    return GuidellmResult(
        concurrency=concurrency,
        rate=rate,
        requests_ok=len(measured),
        requests_failed=len(failed),
        requests_incomplete=len(incomplete),
        duration_s=duration,
        request_rate=len(measured) / duration,
        achieved_concurrency=busy / duration if duration > 0 else None,
        output_tokens=output_tokens,
        output_tok_s=output_tokens / duration,
        ttft_ms=series("time_to_first_token_ms"),
        itl_ms=series("inter_token_latency_ms"),
        e2e_ms=series("request_latency", 1000.0),
        guidellm_tpot_ms=series("time_per_output_token_ms"),
        guidellm_version=str(report.get("metadata", {}).get("guidellm_version", "unknown")),
        report_path=str(path),
        command=[],
    )


def run_guidellm(
    url: str,
    model: str,
    concurrency: int | None = None,
    requests: int = 100,
    input_len: int = 128,
    output_len: int = 64,
    *,
    rate: float | None = None,
    rate_kind: Literal["poisson", "constant"] = "poisson",
    warmup: int = 0,
    endpoint: Literal["completions", "chat"] = "completions",
    out_dir: Path | None = None,
    worker_processes: int | None = None,
    timeout_s: float = 600.0,
    seed: int = 42,
) -> dict[str, Any]:
    """Benchmark `url` with GuideLLM at one concurrency (or one request rate); see GuidellmResult.

    `requests` are measured; `warmup` more are sent first and GuideLLM leaves them out (it turns
    the count into a time window, so the measured count can differ slightly: see requests_ok).
    Reports and GuideLLM's log go to `out_dir` when given, else a temporary directory that is
    removed afterwards (report_path is then None).
    """
    guidellm = guidellm_executable()
    tokenizer_dir = ensure_tokenizer(guidellm)
    with tempfile.TemporaryDirectory(prefix="rigbench-guidellm-") as tmp:
        work = Path(tmp) if out_dir is None else out_dir
        work.mkdir(parents=True, exist_ok=True)
        report = work / "guidellm-report.json"
        command = guidellm_command(
            guidellm,
            url=url,
            model=model,
            concurrency=concurrency,
            rate=rate,
            rate_kind=rate_kind,
            requests=requests,
            warmup=warmup,
            input_len=input_len,
            output_len=output_len,
            endpoint=endpoint,
            tokenizer_dir=tokenizer_dir,
            report=report,
            seed=seed,
        )
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "GUIDELLM__LOGGING__LOG_FILE": str(work / "guidellm.log"),
        }
        if worker_processes is not None:
            env["GUIDELLM__MAX_WORKER_PROCESSES"] = str(worker_processes)
        for attempt in range(1, SCHEDULE_ATTEMPTS + 1):
            _run(command, env, work, timeout_s)
            try:
                result = parse_report(report, concurrency=concurrency, rate=rate)
                break
            except GuidellmScheduleError:
                if attempt == SCHEDULE_ATTEMPTS:
                    raise
        result.command = command
        if out_dir is None:
            result.report_path = None
        return result.model_dump(mode="json")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run GuideLLM offline and print its figures")
    parser.add_argument("--url", required=True)
    parser.add_argument("--model", required=True)
    load = parser.add_mutually_exclusive_group(required=True)
    load.add_argument("--concurrency", type=int)
    load.add_argument("--rate", type=float)
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=0)
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--endpoint", choices=sorted(ENDPOINTS), default="completions")
    parser.add_argument("--workers", type=int, default=None, help="GuideLLM worker processes")
    parser.add_argument("--out-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    try:
        result = run_guidellm(
            args.url,
            args.model,
            args.concurrency,
            args.requests,
            args.input_len,
            args.output_len,
            rate=args.rate,
            warmup=args.warmup,
            endpoint=args.endpoint,
            worker_processes=args.workers,
            out_dir=args.out_dir,
        )
    except (FileNotFoundError, RuntimeError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({k: v for k, v in result.items() if k != "command"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
