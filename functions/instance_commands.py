"""The shell commands the state machine sends to an instance over SSM RunCommand.

The one place the orchestrator meets the rig readiness contract (`status.json` written by the
rig bootstrap, a real completion on port 8000) and the harness CLI (`python -m rigbench
bench`). Each command starts with `RIGBENCH_STEP=...` so a fleet can tell them apart, and
the bench command names the S3 URI its report goes to in `RIGBENCH_REPORT_S3=...`.
"""

import json
import shlex

from pydantic import BaseModel, ConfigDict, ValidationError

from functions.bootstrap import RIGBENCH_HOME
from functions.execution_input import LoadCells

PROBE_STEP = "probe"
BENCH_STEP = "bench"
RIG_URL = "http://127.0.0.1:8000"

_PROBE_PY = r"""
import json, sys, urllib.request
status_path, url = sys.argv[1], sys.argv[2]
try:
    with open(status_path) as f:
        status = json.load(f)
except FileNotFoundError:
    status = {"phase": "booting"}
except ValueError as exc:
    status = {"phase": "booting", "error": "status.json unreadable: %s" % exc}
out = {
    "phase": status.get("phase", "unknown"),
    "error": status.get("error"),
    "provenance": {str(k): str(v) for k, v in (status.get("provenance") or {}).items()},
}
if out["phase"] != "failed":
    try:
        with urllib.request.urlopen(url + "/v1/models", timeout=10) as r:
            model = json.load(r)["data"][0]["id"]
        body = json.dumps({"model": model, "prompt": "The capital of France is",
                           "max_tokens": 4, "min_tokens": 1, "temperature": 0}).encode()
        req = urllib.request.Request(url + "/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            text = json.load(r)["choices"][0]["text"]
        out["completion"] = text
        if text:
            out["phase"] = "ready"
    except Exception as exc:
        out["detail"] = "%s: %s" % (type(exc).__name__, exc)
print(json.dumps(out))
"""

_UPLOAD_PY = r"""
import sys, boto3
path, bucket, key = sys.argv[1:4]
boto3.client("s3").upload_file(path, bucket, key)
"""


class ProbeResult(BaseModel):
    model_config = ConfigDict(extra="ignore")

    phase: str
    error: str | None = None
    detail: str | None = None
    completion: str | None = None
    provenance: dict[str, str] = {}

    @property
    def ready(self) -> bool:
        return self.phase == "ready" and bool(self.completion)


def _python() -> str:
    return f'"${{RIGBENCH_PYTHON:-${{RIGBENCH_HOME:-{RIGBENCH_HOME}}}/venv/bin/python}}"'


def probe_commands() -> list[str]:
    return [
        f"RIGBENCH_STEP={PROBE_STEP}",
        "set -u",
        f'HOME_DIR="${{RIGBENCH_HOME:-{RIGBENCH_HOME}}}"',
        f'python3 - "$HOME_DIR/status.json" "${{RIGBENCH_URL:-{RIG_URL}}}" <<\'PY\''
        + _PROBE_PY
        + "PY",
    ]


def parse_probe(stdout: str) -> ProbeResult:
    lines = [line for line in stdout.strip().splitlines() if line.strip()]
    if not lines:
        return ProbeResult(phase="unknown", detail="the probe printed nothing")
    try:
        return ProbeResult.model_validate(json.loads(lines[-1]))
    except (ValueError, ValidationError) as exc:
        return ProbeResult(phase="unknown", detail=f"unparsable probe output: {exc}")


def report_key(sweep_id: str, rig: str, boot: int) -> str:
    return f"reports/{sweep_id}/{rig}/{boot:02d}/report.json"


def bench_commands(
    *, sweep_id: str, rig: str, boot: int, model: str, cells: LoadCells, bucket: str
) -> list[str]:
    key = report_key(sweep_id, rig, boot)
    bench = [
        "-m",
        "rigbench",
        "bench",
        "--url",
        f"${{RIGBENCH_URL:-{RIG_URL}}}",
        "--model",
        model,
        "--requests",
        str(cells.requests_per_cell),
        "--input-len",
        str(cells.prompt_tokens),
        "--output-len",
        str(cells.output_tokens),
        "--warmup",
        str(cells.warmup_requests),
        "--out",
        '"$OUT/report.json"',
    ]
    if cells.concurrency:
        bench += ["--concurrency", ",".join(map(str, cells.concurrency))]
    if cells.rates:
        bench += ["--rate", ",".join(f"{r:g}" for r in cells.rates)]
    quoted = [a if a.startswith(('"', "$")) else shlex.quote(a) for a in bench]
    return [
        f"RIGBENCH_STEP={BENCH_STEP}",
        f"RIGBENCH_REPORT_S3=s3://{bucket}/{key}",
        "set -euo pipefail",
        f'HOME_DIR="${{RIGBENCH_HOME:-{RIGBENCH_HOME}}}"',
        f'OUT="$HOME_DIR/runs/{sweep_id}/{rig}/{boot:02d}"',
        'mkdir -p "$OUT"',
        'cd "$HOME_DIR/bundle"',
        f"{_python()} " + " ".join(quoted),
        f"{_python()} - \"$OUT/report.json\" {shlex.quote(bucket)} {shlex.quote(key)} <<'PY'"
        + _UPLOAD_PY
        + "PY",
    ]


def step_of(commands: list[str]) -> str | None:
    for line in commands:
        if line.startswith("RIGBENCH_STEP="):
            return line.split("=", 1)[1]
    return None


def report_uri_of(commands: list[str]) -> str | None:
    for line in commands:
        if line.startswith("RIGBENCH_REPORT_S3="):
            return line.split("=", 1)[1]
    return None
