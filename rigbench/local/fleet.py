"""The local fleet: emulated instances played by workspaces and processes on this machine.
It is the emulation's `Fleet` (rigbench.emulation.fleet): what moto cannot answer is answered
here. Quota and spot price are the emulated account's figures (set by flags or environment,
so a rehearsal can try a quota of 0 or a price that busts the budget); capacity is never
refused, except in a rehearsal, which refuses and records every launch.

A launched instance serves what its user data would serve on AWS (the boot's plan: rig,
model, dtype, settings), read back from the spec the user data carries
(rigs.bootstrap.user_data.read_spec); the stack plans local boots for this machine.

Each launched instance id gets a workspace under `instances/<id>/` and a rig process that
serves on a free loopback port (an instance's rig serves on 8000; here many share one host).
The workspace holds what the instance's bootstrap would leave: `bundle/` (this checkout),
`status.json` (starting, serving, or failed with the rig's last log lines if it exits).
Commands sent to an instance over SSM run in its workspace as `bash` subprocesses, the very
script text an instance runs; the instance scripts read their paths from the environment, which
is the only difference:
- RIGBENCH_HOME (the workspace), RIGBENCH_STATUS_FILE (its status.json), RIGBENCH_PYTHON (this
  interpreter), RIGBENCH_URL (the rig's URL), and AWS_ENDPOINT_URL & co (the emulation);
- `python3`, `python`, `rigbench` resolve to this interpreter (a shim directory on PATH).
Output and status are reported as SSM reports them (Pending, InProgress, Success, Failed,
TimedOut; stdout capped at 24,000 characters, stderr at 8,000). Terminating an instance
ends its rig's and its commands' process groups.
"""

import contextlib
import json
import os
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from functions.settings import RIG_TAG
from hardware.local_host import gpu_count
from rigbench.emulation.fleet import (
    CommandNotDelivered,
    CommandResult,
    LaunchedInstance,
    LaunchRequest,
)
from rigbench.local.emulated import NO_FREE_GPU, REFUSAL, EmulatedAccount
from rigbench.local.home import LocalHome
from rigbench.local.ports import free_port
from rigbench.local.procs import ProcessGroups
from rigbench.project_files import REPO_ROOT
from rigs.bootstrap.user_data import BootstrapSpec, read_spec
from rigs.log_tail import file_tail

STDOUT_LIMIT = 24_000  # what GetCommandInvocation returns inline
STDERR_LIMIT = 8_000

CommandStatus = Literal["Pending", "InProgress", "Success", "Failed", "TimedOut", "Cancelled"]


class UnknownInstanceError(LookupError):
    """An instance id the local fleet never launched, or one already terminated."""


class UnknownInvocationError(LookupError):
    """No command with that id was sent to that instance."""


class RigLaunch(BaseModel):
    """What starts an instance's rig: the argv and the port it will serve on."""

    argv: list[str]
    port: int


# Given the boot's spec (rig, model, dtype, settings) and a port, the argv serving that rig.
RigCommand = Callable[[BootstrapSpec, int], list[str]]


class Invocation(BaseModel):
    """One command on one instance, shaped like ssm:GetCommandInvocation's answer."""

    CommandId: str
    InstanceId: str
    Status: CommandStatus
    StatusDetails: str
    ResponseCode: int
    StandardOutputContent: str
    StandardErrorContent: str
    ExecutionStartDateTime: str = ""
    ExecutionEndDateTime: str = ""


@dataclass
class _Command:
    command_id: str
    instance_id: str
    directory: Path
    timeout_s: float
    status: CommandStatus = "Pending"
    details: str = "Pending"
    response_code: int = -1
    started_at: float = 0.0
    ended_at: float = 0.0
    pgid: int | None = None


@dataclass
class LocalInstance:
    instance_id: str
    rig: str
    model: str
    workspace: Path
    port: int
    rig_pgid: int  # 0 until the rig's process is started
    launched_at: float
    gpu: int | None = None  # the GPU it holds alone (CUDA_VISIBLE_DEVICES), None on a CPU
    terminated: bool = False
    argv: list[str] = field(default_factory=list)  # how its rig was started (and restarts)
    commands: dict[str, _Command] = field(default_factory=dict)


RIG_PGID = "rig.pgid"  # the rig's process group, in its workspace
RESTART_REQUEST = "restart.request"  # present while a restart is asked for and not yet done
# What `systemctl restart rigbench-rig.service` is on a local instance (harness.restart): ask,
# end the rig's group, and return once the fleet has started it again.
# (POSIX sh: dash's kill takes no "--"; a negative pid is the group.)
RESTART_COMMAND = (
    f'touch "$RIGBENCH_HOME/{RESTART_REQUEST}" && '
    f'{{ kill -TERM "-$(cat "$RIGBENCH_HOME/{RIG_PGID}")" || '
    f'{{ rm -f "$RIGBENCH_HOME/{RESTART_REQUEST}"; exit 1; }}; }} && '
    f'while [ -e "$RIGBENCH_HOME/{RESTART_REQUEST}" ]; do sleep 0.1; done'
)


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts % 1 * 1000):03d}Z"


def write_status(
    workspace: Path, phase: str, *, step: str | None = None, error: str | None = None
) -> None:
    """The instance's install status file (rigs.bootstrap.status), written atomically."""
    now, path = time.time(), workspace / "status.json"
    try:
        since = dict(json.loads(path.read_text()).get("since") or {})
    except (OSError, ValueError, AttributeError):
        since = {}
    since.setdefault(phase, now)
    body = {"phase": phase, "step": step, "error": error, "updated": now, "since": since}
    tmp = workspace / ".status.json.tmp"
    tmp.write_text(json.dumps(body))
    os.replace(tmp, workspace / "status.json")


def _tail(path: Path, limit: int) -> str:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
    return text[:limit]


class LocalFleet:
    """Instances as workspaces + process groups; thread-safe (Map iterations run in threads)."""

    def __init__(
        self,
        home: LocalHome,
        groups: ProcessGroups,
        rig_command: RigCommand,
        *,
        account: EmulatedAccount | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self._home = home.ensure()
        self._groups = groups
        self._rig_command = rig_command
        self.account = account or EmulatedAccount()
        self._env = dict(env or {})
        self._lock = threading.Lock()
        self._instances: dict[str, LocalInstance] = {}
        self._rehearsal: list[LaunchRequest] | None = None
        self._shims = self._write_shims()

    def set_env(self, env: Mapping[str, str]) -> None:
        """Extra environment for instance processes (how an instance reaches AWS)."""
        self._env.update(env)

    # -- the emulation's Fleet ---------------------------------------------------------------

    def bind(self, aws_env: dict[str, str]) -> None:
        self.set_env(aws_env)

    def quota_vcpus(self, quota_code: str) -> float:
        return self.account.quota_vcpus

    def spot_price_history(
        self, instance_type: str, availability_zone: str
    ) -> list[tuple[datetime, float]]:
        return [(datetime.now(UTC), self.account.spot_price_usd_per_hour)]

    def rehearse(self, on: bool = True) -> list[LaunchRequest]:
        """While on, every launch is recorded (in the list returned) and refused."""
        with self._lock:
            self._rehearsal = [] if on else None
            return self._rehearsal if self._rehearsal is not None else []

    def capacity_error(self, request: LaunchRequest) -> str | None:
        """A rehearsal refuses every launch; otherwise a machine with GPUs has room for one
        instance per GPU, as an AZ has room for so many instances of a type."""
        with self._lock:
            if self._rehearsal is not None:
                self._rehearsal.append(request)
                return REFUSAL
            if gpu_count() and self._free_gpu() is None:
                return NO_FREE_GPU
            return None

    def _free_gpu(self) -> int | None:
        """The lowest GPU no running instance holds (call with the lock held)."""
        held = {i.gpu for i in self._instances.values() if not i.terminated}
        return next((g for g in range(gpu_count()) if g not in held), None)

    def launched(self, instance: LaunchedInstance) -> None:
        """Serve what the instance's user data serves: its rig, model, dtype and settings."""
        if RIG_TAG not in instance.tags:
            return  # not a rig instance: nothing to play
        self.launch(instance.instance_id, read_spec(instance.user_data))

    def command_result(self, command_id: str, instance_id: str) -> CommandResult:
        try:
            invocation = self.invocation(command_id, instance_id)
        except (UnknownInstanceError, UnknownInvocationError) as exc:
            raise CommandNotDelivered(command_id) from exc
        return CommandResult(
            status=invocation.Status,
            stdout=invocation.StandardOutputContent,
            stderr=invocation.StandardErrorContent,
            response_code=invocation.ResponseCode,
        )

    def terminated(self, instance_id: str) -> None:
        self.terminate(instance_id)

    # -- instances ---------------------------------------------------------------------------

    def launch(self, instance_id: str, spec: BootstrapSpec) -> LocalInstance:
        """Boot an instance: a workspace and a rig process serving the spec on a free port."""
        workspace = self._home.instances / instance_id
        workspace.mkdir(parents=True, exist_ok=True)
        bundle = workspace / "bundle"  # an instance runs the harness from the fetched bundle
        if not bundle.exists():
            bundle.symlink_to(REPO_ROOT, target_is_directory=True)
        port = free_port()
        argv = self._rig_command(spec, port)
        write_status(workspace, "starting")
        with self._lock:
            gpu = self._free_gpu() if gpu_count() else None
            if gpu_count() and gpu is None:
                raise RuntimeError(f"no free GPU for {instance_id}: one instance per GPU")
            instance = LocalInstance(
                instance_id=instance_id,
                rig=spec.rig,
                model=spec.model,
                workspace=workspace,
                port=port,
                rig_pgid=0,
                launched_at=time.time(),
                gpu=gpu,
            )
            self._instances[instance_id] = instance  # holds its GPU from here
        instance.argv = argv
        try:
            proc = self._spawn_rig(instance)
        except BaseException:
            instance.terminated = True
            raise
        (workspace / "instance.json").write_text(
            RigLaunch(argv=argv, port=port).model_dump_json(indent=2)
        )
        write_status(workspace, "serving")  # as the bootstrap does once the unit is started
        threading.Thread(
            target=self._watch_rig, args=(instance, proc), name=f"rig-{instance_id}", daemon=True
        ).start()
        return instance

    def _spawn_rig(self, instance: LocalInstance) -> subprocess.Popen[bytes]:
        proc = self._groups.spawn(
            instance.argv,
            label=f"rig {instance.rig} on {instance.instance_id}",
            cwd=instance.workspace,
            log_path=instance.workspace / "rig.log",
            env=self._instance_env(instance),
        )
        instance.rig_pgid = proc.pid
        (instance.workspace / RIG_PGID).write_text(str(proc.pid))
        if instance.terminated:  # terminated while its rig was being spawned
            self._groups.stop(proc.pid)
        return proc

    def _watch_rig(self, instance: LocalInstance, proc: subprocess.Popen[bytes]) -> None:
        """A rig that exits on its own is a failed install/start, as status.json tells it; one
        ended by the instance's restart command (RESTART_COMMAND) is started again, as systemd
        restarts the rig's unit on an instance."""
        code = proc.wait()
        request = instance.workspace / RESTART_REQUEST
        while request.exists() and not instance.terminated:
            self._groups.stop(proc.pid, grace_s=1.0)  # whatever it left in its group
            with self._lock:
                if instance.terminated:
                    break
                proc = self._spawn_rig(instance)
            request.unlink(missing_ok=True)
            code = proc.wait()
        if instance.terminated:
            return
        log = file_tail(instance.workspace / "rig.log")
        write_status(
            instance.workspace,
            "failed",
            step="serve",
            error=f"rig {instance.rig} exited with code {code}: "
            + (f"the end of its log:\n{log}" if log else "its log is empty"),
        )

    def get(self, instance_id: str) -> LocalInstance:
        with self._lock:
            instance = self._instances.get(instance_id)
        if instance is None:
            raise UnknownInstanceError(f"no local instance {instance_id}")
        return instance

    def instances(self) -> list[LocalInstance]:
        with self._lock:
            return list(self._instances.values())

    def agent_online(self, instance_id: str) -> bool:
        """Online from launch to termination, as an instance's SSM agent is, whatever its rig
        does: a rig that dies is reported through status.json, so the readiness probe fails
        fast with the rig's own error instead of waiting out the deadline."""
        try:
            instance = self.get(instance_id)
        except UnknownInstanceError:
            return False
        return not instance.terminated

    def rig_alive(self, instance_id: str) -> bool:
        instance = self.get(instance_id)
        return (
            not instance.terminated
            and instance.rig_pgid > 0
            and self._groups.alive(instance.rig_pgid)
        )

    def online_instances(self) -> list[str]:
        return [i.instance_id for i in self.instances() if self.agent_online(i.instance_id)]

    def terminate(self, instance_id: str) -> bool:
        """End the rig and every command still running there; False if it was not running."""
        try:
            instance = self.get(instance_id)
        except UnknownInstanceError:
            return False
        with self._lock:
            if instance.terminated:
                return False
            instance.terminated = True
            running = [c for c in instance.commands.values() if c.pgid is not None]
        for command in running:
            if command.pgid is not None:
                self._groups.stop(command.pgid, grace_s=2.0)
        if instance.rig_pgid > 0:  # 0 while its rig is being spawned: that ends it (launch)
            self._groups.stop(instance.rig_pgid)
        return True

    def close(self) -> None:
        for instance in self.instances():
            self.terminate(instance.instance_id)

    # -- commands (ssm:SendCommand with AWS-RunShellScript) -----------------------------------

    def send_command(
        self, command_id: str, instance_id: str, commands: list[str], timeout_s: float
    ) -> None:
        """Run `commands` (shell lines) in the instance's workspace, in the background. A
        command for an instance that is not online is never delivered: as SSM answers, its
        invocation never exists."""
        with contextlib.suppress(UnknownInstanceError):
            self.run_command(command_id, instance_id, commands, timeout_s)

    def run_command(
        self, command_id: str, instance_id: str, commands: list[str], timeout_s: float
    ) -> None:
        """`send_command`, raising UnknownInstanceError when the instance is not online."""
        instance = self.get(instance_id)
        if not self.agent_online(instance_id):
            raise UnknownInstanceError(f"instance {instance_id} is not online")
        with self._lock:
            if command_id in instance.commands:
                return  # SSM delivers a command to an instance once
        directory = instance.workspace / "commands" / command_id
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "script.sh").write_text("\n".join(commands) + "\n")
        command = _Command(command_id, instance_id, directory, timeout_s)
        with self._lock:
            instance.commands[command_id] = command
        threading.Thread(
            target=self._run, args=(instance, command), name=f"ssm-{command_id}", daemon=True
        ).start()

    def invocation(self, command_id: str, instance_id: str) -> Invocation:
        instance = self.get(instance_id)
        with self._lock:
            command = instance.commands.get(command_id)
        if command is None:
            raise UnknownInvocationError(f"no command {command_id} on {instance_id}")
        return Invocation(
            CommandId=command_id,
            InstanceId=instance_id,
            Status=command.status,
            StatusDetails=command.details,
            ResponseCode=command.response_code,
            StandardOutputContent=_tail(command.directory / "stdout", STDOUT_LIMIT),
            StandardErrorContent=_tail(command.directory / "stderr", STDERR_LIMIT),
            ExecutionStartDateTime=_iso(command.started_at) if command.started_at else "",
            ExecutionEndDateTime=_iso(command.ended_at) if command.ended_at else "",
        )

    def _run(self, instance: LocalInstance, command: _Command) -> None:
        stdout = (command.directory / "stdout").open("wb")
        stderr = (command.directory / "stderr").open("wb")
        try:
            proc = self._groups.spawn_split(
                ["bash", str(command.directory / "script.sh")],
                label=f"command {command.command_id} on {instance.instance_id}",
                cwd=instance.workspace,
                stdout=stdout,
                stderr=stderr,
                env=self._instance_env(instance),
            )
        except (OSError, RuntimeError) as exc:
            stderr.write(f"failed to start: {exc}\n".encode())
            command.status, command.details, command.ended_at = "Failed", "Failed", time.time()
            return
        finally:
            stdout.close()
            stderr.close()
        with self._lock:
            command.pgid = proc.pid
            command.started_at = time.time()
            command.status, command.details = "InProgress", "InProgress"
            late = instance.terminated  # terminate() ran while this was starting
        if late:
            self._groups.stop(proc.pid, grace_s=1.0)
        try:
            code = proc.wait(timeout=command.timeout_s)
        except subprocess.TimeoutExpired:
            self._groups.stop(proc.pid, grace_s=2.0)
            command.response_code = -1
            command.status, command.details = "TimedOut", "ExecutionTimedOut"
        else:
            self._groups.stop(proc.pid, grace_s=1.0)  # anything it left in its group
            command.response_code = code
            if instance.terminated and code != 0:
                command.status, command.details = "Failed", "Terminated"
            elif code == 0:
                command.status, command.details = "Success", "Success"
            else:
                command.status, command.details = "Failed", "Failed"
        command.pgid = None
        command.ended_at = time.time()

    # -- environment -------------------------------------------------------------------------

    def _write_shims(self) -> Path:
        shims = self._home.root / "bin"
        shims.mkdir(parents=True, exist_ok=True)
        python = shlex.quote(sys.executable)
        scripts = {
            "python3": f'exec {python} "$@"',
            "python": f'exec {python} "$@"',
            "rigbench": f'exec {python} -m rigbench "$@"',
        }
        for name, body in scripts.items():
            path = shims / name
            path.write_text(f"#!/bin/sh\n{body}\n")
            path.chmod(0o755)
        return shims

    def _instance_env(self, instance: LocalInstance) -> dict[str, str]:
        workspace, port = instance.workspace, instance.port
        repo = str(REPO_ROOT)
        env = {**os.environ, **self._env}
        pythonpath = env.get("PYTHONPATH")
        env.update(
            PATH=f"{self._shims}{os.pathsep}{env.get('PATH', '')}",
            PYTHONPATH=f"{repo}{os.pathsep}{pythonpath}" if pythonpath else repo,
            RIGBENCH_HOME=str(workspace),
            RIGBENCH_STATUS_FILE=str(workspace / "status.json"),
            RIGBENCH_URL=f"http://127.0.0.1:{port}",
            RIGBENCH_PYTHON=sys.executable,
            RIG_PORT=str(port),
            RIGBENCH_RESTART_COMMAND=RESTART_COMMAND,
        )
        # A local instance shares this machine's cores with the other boots, the harness and
        # whatever else runs. torch's OpenMP pool (a thread per core) spins at each of its many
        # small ops for a thread the scheduler gave to another process: the agreement probe on
        # a 2-core machine took 5.3 CPU-s idle and 127 (timing out) with one core kept busy;
        # with one thread, 2.6 either way. One thread, unless the user chose a number.
        env.setdefault("OMP_NUM_THREADS", "1")
        if instance.gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = str(instance.gpu)
        return env
