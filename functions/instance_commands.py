"""The shell commands the state machine sends to an instance over SSM RunCommand.

The one place the orchestrator meets the harness CLI (`python -m rigbench bench`) and the
rig's readiness check (`rigs.bootstrap.ready_check_command`, which prints a ReadyState JSON
and exits 0 ready, 3 on a terminal failure, 1 not yet). Each command list starts with
`export RIGBENCH_STEP=...` so a fleet can tell them apart; the bench command names where its
report goes in `export RIGBENCH_REPORT_S3=...`. Paths honour RIGBENCH_HOME and RIGBENCH_PYTHON, so
a local fleet can run the same commands in a workspace.
"""

import json
import shlex

from pydantic import BaseModel, ConfigDict, ValidationError

from functions.bootstrap import RIGBENCH_HOME, InstancePlan, readiness_command
from functions.events import CellsConfig, SweepConfig
from functions.report_keys import REPORT, boot_prefix
from rigs.bootstrap.status import STATUS_FILE

PROBE_STEP = "probe"
BENCH_STEP = "bench"
RIG_URL = "http://127.0.0.1:8000"

# Run on the instance before the benchmark: the served model's name, the rig's own
# provenance (GET /provenance), and the GPU and driver nvidia-smi reports.
_PROVENANCE_PY = r"""
import json, subprocess, sys, urllib.request
url, out, status_file = sys.argv[1], sys.argv[2], sys.argv[3]
def get(path):
    with urllib.request.urlopen(url + path, timeout=30) as r:
        return json.load(r)
doc = {"served_model": get("/v1/models")["data"][0]["id"]}
try:
    doc["rig"] = {str(k): str(v) for k, v in get("/provenance").items()}
except Exception as exc:
    doc["rig"] = {"error": "no /provenance: %s" % exc}
try:
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version",
                          "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
    name, driver = [part.strip() for part in smi.stdout.splitlines()[0].split(",")][:2]
    doc["gpu"], doc["driver"] = name, driver
except Exception as exc:
    doc["gpu"], doc["driver"] = "none", "none (%s)" % type(exc).__name__
try:  # the rig's own record of its start (rigs.serving.marks); a rig without one says so
    doc["rig_marks"] = {str(k): float(v) for k, v in get("/boot")["marks"].items()}
except Exception:
    doc["rig_marks"] = {}
try:  # when the instance entered each install phase (rigs.bootstrap.status)
    with open(status_file) as f:
        doc["install_phases"] = {str(k): float(v) for k, v in json.load(f)["since"].items()}
except Exception:
    doc["install_phases"] = {}
with open(out, "w") as f:
    json.dump(doc, f)
print(doc["served_model"])
"""

_UPLOAD_PY = r"""
import os, sys, boto3
bucket, prefix = sys.argv[1], sys.argv[2]
paths = sys.argv[3:]
optional = paths.index("--") if "--" in paths else len(paths)  # after "--": where they exist
s3 = boto3.client("s3")
for i, path in enumerate(p for p in paths if p != "--"):
    if i < optional or os.path.exists(path):  # a warm cell is absent when its restart failed
        s3.upload_file(path, bucket, prefix + path.rsplit("/", 1)[1])
"""


class InstanceProvenance(BaseModel):
    """What the bench command collected on the instance (`_PROVENANCE_PY`), uploaded beside
    the report."""

    served_model: str
    rig: dict[str, str] = {}
    gpu: str
    driver: str
    # epoch seconds: the rig's own start marks (GET /boot), the instance's install phases
    rig_marks: dict[str, float] = {}
    install_phases: dict[str, float] = {}


class ProbeResult(BaseModel):
    """A ReadyState printed by the readiness check, or the install status file it falls back
    to before the rig's environment exists."""

    model_config = ConfigDict(extra="ignore")

    ready: bool = False
    phase: str = "unknown"
    terminal: bool = False
    detail: str | None = None
    error: str | None = None
    text: str | None = None

    @property
    def is_ready(self) -> bool:
        return self.ready and bool(self.text)

    @property
    def install_failed(self) -> bool:
        return self.phase == "failed"

    def explain(self) -> str:
        return self.error or self.detail or "no detail"


def probe_commands(plan: InstancePlan) -> list[str]:
    command = readiness_command(plan)
    probe = "-m rigs.readiness"
    if probe not in command:
        raise ValueError(f"the rig readiness command no longer runs {probe}: {command}")
    # Name the rig's URL (default port 8000) so that a fleet serving elsewhere can say where.
    command = command.replace(probe, f'{probe} --base-url "${{RIGBENCH_URL:-{RIG_URL}}}"', 1)
    return [f"export RIGBENCH_STEP={PROBE_STEP}", command]


def parse_probe(stdout: str) -> ProbeResult:
    lines = [line for line in stdout.strip().splitlines() if line.strip()]
    if not lines:
        return ProbeResult(detail="the readiness check printed nothing")
    try:
        return ProbeResult.model_validate(json.loads(lines[-1]))
    except (ValueError, ValidationError) as exc:
        return ProbeResult(detail=f"unparsable readiness output {lines[-1][:200]!r}: {exc}")


# The capacity search starts no probe that would end later than this before the command's own
# deadline: room for the upload after it, on a machine whose probes ran long.
BENCH_DEADLINE_MARGIN_S = 60


def measure_options(sweep: SweepConfig, *, capacity: bool = True) -> list[str]:
    """What the harness measures beyond the cells' loads and counts: the workload, endpoint,
    arrivals, SLO and (unless `capacity` is False) the capacity search, as `rigbench bench`
    options (shell-quoted)."""
    options: list[str] = []
    if sweep.workload is not None:
        options += ["--workload", shlex.quote(json.dumps(sweep.workload, sort_keys=True))]
    if sweep.endpoint != "completions":
        options += ["--endpoint", sweep.endpoint]
    arrival = sweep.cells.arrival
    if sweep.cells.rates and arrival != "poisson":
        shown = f"gamma:{arrival['gamma']:g}" if isinstance(arrival, dict) else arrival
        options += ["--arrival", shown]
    if sweep.slo is not None:
        targets = {k: v for k, v in sweep.slo.items() if k != "percentile" and v is not None}
        options += ["--slo", ",".join(f"{k}={v:g}" for k, v in sorted(targets.items()))]
        options += ["--slo-percentile", f"{sweep.slo.get('percentile', 90):g}"]
    if sweep.capacity is not None and capacity:
        deadline = max(sweep.deadlines.bench_s - BENCH_DEADLINE_MARGIN_S, 1)
        options += ["--capacity", str(sweep.capacity["by"])]
        options += ["--capacity-max", f"{sweep.capacity['max']:g}", "--deadline-s", str(deadline)]
    return options


def bench_commands(
    *,
    sweep_id: str,
    rig: str,
    boot: int,
    cells: CellsConfig,
    bucket: str,
    instance_arn: str,
    options: list[str] | None = None,
    restarts: int = 0,
    warm_options: list[str] | None = None,
    restart_timeout_s: int = 600,
) -> list[str]:
    """The harness run and its upload, under the instance's own prefix (functions.report_keys:
    the instance role may write nowhere else); `options` from `measure_options`. With
    `restarts`, the rig is then restarted that many times, each warm start timed
    (`rigbench restart-rig`, at most `restart_timeout_s`) and the first cell measured again
    with `warm_options` (no capacity search)."""
    prefix = boot_prefix(sweep_id, rig, boot, instance_arn)
    common = [
        "--url", '"$URL"',
        "--model", '"$MODEL"',
        "--requests", str(cells.requests_per_cell),
        "--input-len", str(cells.prompt_tokens),
        "--output-len", str(cells.output_tokens),
        "--warmup", str(cells.warmup_requests), "--warmup-each-cell",
    ]  # fmt: skip
    bench = [*common, "--agreement", "--out", '"$OUT/report.json"']
    if cells.concurrency:
        bench += ["--concurrency", ",".join(map(str, cells.concurrency))]
    if cells.rates:
        bench += ["--rate", ",".join(f"{r:g}" for r in cells.rates)]
    bench += options or []
    first = (
        ["--concurrency", str(cells.concurrency[0])]
        if cells.concurrency
        else ["--rate", f"{cells.rates[0]:g}"]
    )
    warm: list[str] = []
    uploads = ['"$OUT/report.json"', '"$OUT/report.requests.jsonl"', '"$OUT/provenance.json"']
    for n in range(1, restarts + 1):
        start, report = f'"$OUT/{warm_start_name(n)}"', f'"$OUT/{warm_report_name(n)}"'
        warm += [
            # A restart with no ready time says why in its file, and its cell is not run (the
            # rig may be down); a warm cell that fails leaves no report, the cold rows stand.
            f'if "$PY" -m rigbench restart-rig --url "$URL" --out {start} '
            f"--timeout-s {restart_timeout_s}; then "
            '"$PY" -m rigbench bench '
            + " ".join([*common, *first, *(warm_options or []), "--out", report])
            + f" || true; elif [ ! -s {start} ]; then exit 1; fi",
        ]
        uploads += ["--", start, report] if n == 1 else [start, report]
    return [
        f"export RIGBENCH_STEP={BENCH_STEP}",
        f"export RIGBENCH_REPORT_S3=s3://{bucket}/{prefix}{REPORT}",
        "set -euo pipefail",
        f'HOME_DIR="${{RIGBENCH_HOME:-{RIGBENCH_HOME}}}"',
        'PY="${RIGBENCH_PYTHON:-$HOME_DIR/venv/bin/python}"',
        f'URL="${{RIGBENCH_URL:-{RIG_URL}}}"',
        f'OUT="$HOME_DIR/runs/{sweep_id}/{rig}/{boot:02d}"',
        'mkdir -p "$OUT"',
        'cd "$HOME_DIR/bundle"',
        f'STATUS="${{RIGBENCH_STATUS_FILE:-{STATUS_FILE}}}"',
        f'MODEL=$("$PY" - "$URL" "$OUT/provenance.json" "$STATUS" <<\'PY\'{_PROVENANCE_PY}PY\n)',
        # Exit 1 with a report written: cells with failed requests, kept (with each cell's first
        # failure) for the results; exit 1 without one (the pre-flight failed) or any other
        # exit ends the command here.
        '"$PY" -m rigbench bench '
        + " ".join(bench)
        + ' || { [ $? -eq 1 ] && [ -s "$OUT/report.json" ]; }',
        *warm,
        f'"$PY" - {shlex.quote(bucket)} {shlex.quote(prefix)} {" ".join(uploads)} '
        f"<<'PY'{_UPLOAD_PY}PY",
    ]


def warm_start_name(n: int) -> str:
    """The file restart `n` (from 1) of a boot writes its warm start to (harness.restart)."""
    return f"warm-{n}.json"


def warm_report_name(n: int) -> str:
    """The report of the first cell measured again after restart `n`."""
    return f"warm-{n}.report.json"


def step_of(commands: list[str]) -> str | None:
    return _marker(commands, "RIGBENCH_STEP")


def report_uri_of(commands: list[str]) -> str | None:
    return _marker(commands, "RIGBENCH_REPORT_S3")


def _marker(commands: list[str], name: str) -> str | None:
    for line in commands:
        if line.startswith(f"export {name}="):
            return line.split("=", 1)[1]
    return None
