"""A fleet whose every answer a test sets (`rigbench.emulation.Fleet`); it records what it
was asked. The test double of the orchestrator tests; local mode has its own fleet of
processes (rigbench.local.fleet)."""

import copy
import json
import re
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

import boto3

from functions.instance_commands import BENCH_STEP, PROBE_STEP, report_uri_of, step_of
from functions.quota import ON_DEMAND_G_VT_QUOTA, SPOT_G_VT_QUOTA
from functions.settings import BOOT_TAG, RIG_TAG
from harness.schemas import BenchmarkReport
from rigbench.emulation.fleet import (
    CommandNotDelivered,
    CommandResult,
    LaunchedInstance,
    LaunchRequest,
)

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

BenchOutcome = Literal["success", "failed", "timed_out", "running", "bad_report"]


@dataclass
class ScriptedFleet:
    """A fleet whose every answer a test sets; it records what it was asked.

    Instances come online after `agent_after` agent checks (None: never), the rig answers a
    completion after `ready_after` probes (None: never), or the install fails with
    `install_error`. The harness command ends as `bench`; on success the fleet uploads a
    report in the harness's format to the S3 URI the command names, as an instance would.
    """

    quotas: dict[str, float] = field(
        default_factory=lambda: {SPOT_G_VT_QUOTA: 64.0, ON_DEMAND_G_VT_QUOTA: 64.0}
    )
    price_usd_per_hour: float = 0.30
    # Per availability zone, the spot price history the emulation answers (when each price took
    # effect, USD per hour); a zone not named: price_usd_per_hour, taking effect now.
    price_history: dict[str, list[tuple[datetime, float]]] = field(default_factory=dict)
    # The rig's own start marks its provenance reports, in seconds after the instance launched
    # (rigs.serving.marks; none: a rig that keeps no record).
    rig_marks_after_launch: dict[str, float] = field(default_factory=dict)
    refuse: dict[str, str] = field(default_factory=dict)  # availability zone -> error code
    refuse_markets: dict[str, str] = field(default_factory=dict)  # market -> error code
    busy: list[str] = field(default_factory=list)  # the first launch requests' error codes
    agent_after: int | None = 0
    ready_after: int | None = 0
    install_error: str | None = None
    bench: BenchOutcome = "success"
    bench_by_rig: dict[str, BenchOutcome] = field(default_factory=dict)
    # Times in a rig's reports scale by this factor (2.0: latencies doubled, throughput
    # halved); boot n of a rig is further scaled by 1 + boot_spread * (n % 3 - 1), so that
    # boots differ as real ones do (0: every boot alike).
    slowdown_by_rig: dict[str, float] = field(default_factory=dict)
    boot_spread: float = 0.0
    # Upload reports as a harness did before it recorded achieved load, validity and delivery.
    report_before_achieved_load: bool = False
    missing_invocations: int = 1  # GetCommandInvocation calls answered InvocationDoesNotExist
    gpu: str = "NVIDIA T4G"
    driver: str = "570.133.20"
    rig_provenance: dict[str, str] = field(
        default_factory=lambda: {"runtime": "torch 2.7.0", "transformers": "5.17.0"}
    )

    def __post_init__(self) -> None:
        self._defaults = {
            name: copy.deepcopy(getattr(self, name)) for name in self.__dataclass_fields__
        }
        self._lock = threading.Lock()
        self._aws_env: dict[str, str] = {}
        # built at the first upload after bind, not per upload (a boto3 client costs about 9 ms)
        self._s3: S3Client | None = None
        self._clear()

    def reset(self) -> None:
        """Back to the knobs it was built with, forgetting everything it recorded."""
        for name, value in self._defaults.items():
            setattr(self, name, copy.deepcopy(value))
        self._clear()

    def _clear(self) -> None:
        self.instances: dict[str, LaunchedInstance] = {}
        self.alive: set[str] = set()
        self.launch_requests: list[LaunchRequest] = []
        self.commands: dict[tuple[str, str], tuple[str, list[str]]] = {}
        self.agent_checks: dict[str, int] = {}
        self.probes: dict[str, int] = {}
        self.result_polls: dict[tuple[str, str], int] = {}
        self.bench_started = threading.Event()
        self.uploaded: set[str] = set()
        self.launched_at: dict[str, float] = {}  # when each instance was launched (epoch)

    def bind(self, aws_env: dict[str, str]) -> None:
        self._aws_env = dict(aws_env)
        self._s3 = None

    def quota_vcpus(self, quota_code: str) -> float:
        return self.quotas.get(quota_code, 0.0)

    def spot_price_history(
        self, instance_type: str, availability_zone: str
    ) -> list[tuple[datetime, float]]:
        if availability_zone in self.price_history:
            return list(self.price_history[availability_zone])
        return [(datetime.now(UTC), self.price_usd_per_hour)]

    def capacity_error(self, request: LaunchRequest) -> str | None:
        with self._lock:
            self.launch_requests.append(request)
            if len(self.launch_requests) <= len(self.busy):
                return self.busy[len(self.launch_requests) - 1]
        return self.refuse_markets.get(request.market) or self.refuse.get(request.availability_zone)

    def launched(self, instance: LaunchedInstance) -> None:
        with self._lock:
            self.instances[instance.instance_id] = instance
            self.alive.add(instance.instance_id)
            self.launched_at[instance.instance_id] = time.time()

    def terminated(self, instance_id: str) -> None:
        with self._lock:
            self.alive.discard(instance_id)

    def agent_online(self, instance_id: str) -> bool:
        with self._lock:
            self.agent_checks[instance_id] = self.agent_checks.get(instance_id, 0) + 1
            if self.agent_after is None or instance_id not in self.alive:
                return False
            return self.agent_checks[instance_id] > self.agent_after

    def send_command(
        self, command_id: str, instance_id: str, commands: list[str], timeout_s: int
    ) -> None:
        step = step_of(commands) or "unknown"
        with self._lock:
            self.commands[(command_id, instance_id)] = (step, commands)
        if step == BENCH_STEP:
            self.bench_started.set()
            self._upload_once(command_id, instance_id)

    def command_result(self, command_id: str, instance_id: str) -> CommandResult:
        key = (command_id, instance_id)
        with self._lock:
            polls = self.result_polls.get(key, 0) + 1
            self.result_polls[key] = polls
            step, _ = self.commands[key]
        if polls <= self.missing_invocations:
            raise CommandNotDelivered(command_id)
        if step == PROBE_STEP:
            return self._probe(instance_id)
        if step == BENCH_STEP:
            # A bench left "running" that the test then lets succeed uploads its report now.
            self._upload_once(command_id, instance_id)
            return {
                "success": CommandResult("Success", stdout="report uploaded", response_code=0),
                "bad_report": CommandResult("Success", stdout="report uploaded", response_code=0),
                "failed": CommandResult(
                    "Failed", stderr="httpx.ConnectError: connection refused", response_code=1
                ),
                "timed_out": CommandResult(
                    "TimedOut", stderr="command exceeded its executionTimeout", response_code=-1
                ),
                "running": CommandResult("InProgress"),
            }[self._bench_outcome(instance_id)]
        return CommandResult("Failed", stderr=f"unknown command step {step!r}", response_code=127)

    def _upload_once(self, command_id: str, instance_id: str) -> None:
        outcome = self._bench_outcome(instance_id)
        with self._lock:
            _, commands = self.commands[(command_id, instance_id)]
            if outcome not in ("success", "bad_report") or command_id in self.uploaded:
                return
            self.uploaded.add(command_id)
        self._upload_report(commands, outcome, self._slowdown(instance_id), instance_id)

    def bench_commands(self) -> int:
        """How many harness commands were sent (one per instance that reached its benchmark)."""
        with self._lock:
            return sum(1 for step, _ in self.commands.values() if step == BENCH_STEP)

    def _probe(self, instance_id: str) -> CommandResult:
        with self._lock:
            self.probes[instance_id] = self.probes.get(instance_id, 0) + 1
            count = self.probes[instance_id]
        # What rigs.bootstrap.ready_check_command prints, and its exit codes.
        if self.install_error is not None:
            status = {"phase": "failed", "step": "install", "error": self.install_error}
            return CommandResult("Failed", stdout=json.dumps(status) + "\n", response_code=3)
        if self.ready_after is not None and count > self.ready_after:
            state = {"ready": True, "phase": "ready", "model": "random:tiny", "text": " Paris"}
            return CommandResult("Success", stdout=json.dumps(state) + "\n", response_code=0)
        state = {"ready": False, "phase": "unreachable", "detail": "ConnectError: [Errno 111]"}
        return CommandResult("Failed", stdout=json.dumps(state) + "\n", response_code=1)

    def _slowdown(self, instance_id: str) -> float:
        tags = self.instances[instance_id].tags
        boot = int(tags.get(BOOT_TAG, "0") or 0)
        return self.slowdown_by_rig.get(tags.get(RIG_TAG, ""), 1.0) * (
            1 + self.boot_spread * (boot % 3 - 1)
        )

    def _bench_outcome(self, instance_id: str) -> BenchOutcome:
        instance = self.instances.get(instance_id)
        rig = instance.tags.get(RIG_TAG, "") if instance else ""
        return self.bench_by_rig.get(rig, self.bench)

    def _upload_report(
        self, commands: list[str], outcome: BenchOutcome, slowdown: float, instance_id: str
    ) -> None:
        uri = report_uri_of(commands)
        if uri is None:
            raise ValueError("the bench command names no report URI")
        bucket, key = uri.removeprefix("s3://").split("/", 1)
        body = (
            b"{not json"
            if outcome == "bad_report"
            else json.dumps(
                scripted_report(
                    commands, achieved_load=not self.report_before_achieved_load, slowdown=slowdown
                )
            ).encode()
        )
        launched = self.launched_at.get(instance_id, time.time())
        provenance = {
            "served_model": "random:tiny", "rig": self.rig_provenance,
            "gpu": self.gpu, "driver": self.driver,
            "rig_marks": {k: launched + s for k, s in self.rig_marks_after_launch.items()},
        }  # fmt: skip
        with self._lock:
            if self._s3 is None:
                self._s3 = boto3.client(
                    "s3",
                    endpoint_url=self._aws_env.get("AWS_ENDPOINT_URL"),
                    region_name=self._aws_env.get("AWS_DEFAULT_REGION", "us-east-1"),
                    aws_access_key_id=self._aws_env.get("AWS_ACCESS_KEY_ID", "testing"),
                    aws_secret_access_key=self._aws_env.get("AWS_SECRET_ACCESS_KEY", "testing"),
                )
            s3 = self._s3
        s3.put_object(Bucket=bucket, Key=key, Body=body)
        prefix = key.rsplit("/", 1)[0]
        s3.put_object(
            Bucket=bucket, Key=f"{prefix}/provenance.json", Body=json.dumps(provenance).encode()
        )


def _flag(commands: list[str], name: str) -> str | None:
    match = re.search(rf"--{name} (\S+)", "\n".join(commands))
    return match.group(1).strip("'\"") if match else None


def scripted_report(
    commands: list[str], *, achieved_load: bool = True, slowdown: float = 1.0
) -> dict[str, Any]:
    """A report in the harness's format (`harness.schemas.BenchmarkReport`, which Store reads)
    with one cell per concurrency the command asks for; without `achieved_load`, as a harness
    wrote it before it recorded the achieved load, validity and delivery (before
    0.1.0+6b5b9daab5). Each cell's ITL p99 is flagged invalid, the rest valid. Every time is
    multiplied by `slowdown`."""
    concurrency = [int(c) for c in (_flag(commands, "concurrency") or "1").split(",")]
    output_len = int(_flag(commands, "output-len") or "16")
    requests = int(_flag(commands, "requests") or "4")
    cells = []
    for c in concurrency:
        tokens = requests * output_len
        duration = (1.0 + 0.1 * c) * slowdown

        def summary(base: float, c: int = c) -> dict[str, float]:
            at = base * c * slowdown
            return {"mean": at, "p50": at, "p90": at * 1.2, "p99": at * 1.5}

        cell: dict[str, Any] = {
            "concurrency": c,
            "requests_ok": requests,
            "requests_failed": 0,
            "output_tokens": tokens,
            "duration_s": duration,
            "output_tok_s": tokens / duration,
            "ttft_ms": summary(40.0),
            "itl_ms": summary(10.0),
            "tpot_ms": summary(10.0),
            "e2e_ms": summary(40.0 + 10.0 * output_len),
            "queue_wait_ms": summary(0.0),
        }
        if achieved_load:
            cell |= {
                "achieved_concurrency": 0.95 * c,
                "achieved_request_rate": requests / duration,
                "load_shortfall": None,
                "ttft_validity": {"predicted_error_ms": {"p50": 0.1, "count": requests}},
                "itl_validity": {
                    "p99": False,
                    "predicted_error_ms": {"p99": 0.9, "count": requests},
                    "reason": "ITL p99: chunks read late (predicted error 0.9 ms)",
                },
                "delivery": "streamed",
            }
        cells.append(cell)
    url, model = "http://127.0.0.1:8000", "random:tiny"
    report = {
        "harness_version": "0.1.0+scripted",
        "url": url,
        "model": model,
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "endpoint": "completions",
        "config": {
            "url": url,
            "model": model,
            "concurrency": concurrency,
            "output_len": output_len,
            "requests": requests,
        },
        "cells": cells,
        "harness_ceiling_note": "scripted: no client ran",
    }
    if not achieved_load:
        return report
    # As the harness writes it: every field, defaults included (harness.output).
    loaded: dict[str, Any] = json.loads(BenchmarkReport.model_validate(report).model_dump_json())
    return loaded
