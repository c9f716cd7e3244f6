"""The errors a sweep step raises; their class names are the `Error` Step Functions sees.

    SweepError
    ├── InvalidInput          bad execution input (first state, nothing launched)
    ├── QuotaExhausted        no vCPU room under the Service Quotas limit
    ├── OverBudget            estimate above the per-sweep budget or the monthly cap
    ├── CapacityRefused       every subnet/AZ refused this try (retried after a backoff)
    ├── CapacityUnavailable   every subnet/AZ kept refusing until the ready deadline
    ├── AgentNeverOnline      the SSM agent did not come online before the ready deadline
    ├── RigNeverReady         the rig never answered a real completion before the deadline
    ├── InstallFailed         the instance reported a failed rig install
    ├── CommandFailed         the harness command ended in a failed status
    ├── CommandTimedOut       the harness command ran past its deadline
    ├── InstanceLost          the instance stopped under a running step
    │   └── InstanceInterrupted   EC2 reclaimed the spot instance (the boot may relaunch)
    └── ReportInvalid         the harness report is missing or does not parse

Lambda reports an unhandled exception as `errorType` = the class name, so a Catch or a
Choice in the state machine can match these names exactly.
"""

import json
from typing import Any


class SweepError(Exception):
    """Base of every error a sweep step raises on purpose."""


class InvalidInput(SweepError):
    pass


class QuotaExhausted(SweepError):
    pass


class OverBudget(SweepError):
    pass


class CapacityRefused(SweepError):
    pass


class CapacityUnavailable(SweepError):
    pass


class AgentNeverOnline(SweepError):
    pass


class RigNeverReady(SweepError):
    pass


class InstallFailed(SweepError):
    pass


class CommandFailed(SweepError):
    pass


class CommandTimedOut(SweepError):
    pass


class InstanceLost(SweepError):
    pass


class InstanceInterrupted(InstanceLost):
    """A spot reclaim: the state machine relaunches the boot up to max_interruptions_per_boot."""


class ReportInvalid(SweepError):
    pass


def _ended_execution(parsed: Any) -> dict[str, Any] | None:
    """A boot execution's DescribeExecution answer: the cause its sweep's
    `startExecution.sync:2` Task fails with when the boot's execution did not succeed."""
    if isinstance(parsed, dict) and "ExecutionArn" in parsed and "Status" in parsed:
        return parsed
    return None


def _parsed(cause: str) -> Any:
    try:
        return json.loads(cause)
    except ValueError:
        return None


def error_message(cause: str) -> str:
    """The readable part of a Step Functions `Cause`: a Lambda error's cause is a JSON
    document whose `errorMessage` is the message; a boot execution that did not succeed reads
    as its name, status and own error; any other cause is shown as it is. The one place that
    reads it (handlers, CLI and progress alike)."""
    parsed = _parsed(cause)
    if isinstance(parsed, dict) and parsed.get("errorMessage"):
        return str(parsed["errorMessage"])
    ended = _ended_execution(parsed)
    if ended is not None:
        said = f"execution {ended.get('Name', ended['ExecutionArn'])} ended {ended['Status']}"
        inner = error_message(str(ended.get("Cause") or ""))
        own = ": ".join(str(part) for part in (ended.get("Error"), inner) if part)
        return f"{said}: {own}" if own else said
    return cause.strip()


def error_name(error: str, cause: str) -> str:
    """The name a caught error is reported under: a boot execution that did not succeed as
    `BootExecution<Status>` (`BootExecutionAborted`, ...), not Step Functions' own
    States.TaskFailed, which may not name a Fail state's error; any other as it is."""
    ended = _ended_execution(_parsed(cause))
    if ended is None:
        return error
    return "BootExecution" + "".join(w.title() for w in str(ended["Status"]).split("_"))


def error_code(exc: BaseException) -> str:
    """The AWS error code of a botocore ClientError ("" for anything else): the one place
    that reads it."""
    from botocore.exceptions import ClientError  # loaded already wherever one is raised

    if isinstance(exc, ClientError):
        return str(exc.response.get("Error", {}).get("Code", ""))
    return ""
