"""Where a boot's instance puts what it measured in the bucket, and whose files a reader takes.

`reports/<sweep>/<rig>/<boot>/<instance ARN>/<file>`. The instance role may put objects only
under its own ARN (template.yaml's `${ec2:SourceInstanceARN}`, an IAM policy variable set for
instance-profile credentials), so an object's key names the instance that wrote it, and a
reader takes a boot's files only from an instance the ledger recorded for that boot. An
instance can still write below its own ARN in another sweep's prefix, where no reader looks:
it cannot overwrite or plant another boot's report.
"""

import re
from typing import NamedTuple

REPORTS_PREFIX = "reports/"
REPORT = "report.json"
RECORDS = "report.requests.jsonl"  # the harness's per-request records (harness.output)
PROVENANCE = "provenance.json"
# What an instance uploads before it ends (rigs/bootstrap: on failure, when it exits, and when
# it shuts down): its bootstrap's log and its rig's (the rig service's journal).
BOOTSTRAP_LOG = "bootstrap.log"
RIG_LOG = "rig.log"
LOG_NAMES = (BOOTSTRAP_LOG, RIG_LOG)
_INSTANCE_ARN = re.compile(r"arn:[a-z-]+:ec2:[a-z0-9-]*:\d*:instance")


def instance_arn(prefix: str, instance_id: str) -> str:
    """The instance's ARN, as `ec2:SourceInstanceARN` has it, from the stack's ARN prefix
    (`arn:<partition>:ec2:<region>:<account>:instance/`, INSTANCE_ARN_PREFIX)."""
    if not _INSTANCE_ARN.fullmatch(prefix.removesuffix("/")) or not prefix.endswith("/"):
        raise ValueError(f"not an EC2 instance ARN prefix: {prefix!r} (INSTANCE_ARN_PREFIX)")
    return prefix + instance_id


def boot_prefix(sweep_id: str, rig: str, boot: int, arn: str) -> str:
    return f"{REPORTS_PREFIX}{sweep_id}/{rig}/{boot:02d}/{arn}/"


def instances_prefix(sweep_id: str, rig: str, boot: int, arn_prefix: str) -> str:
    """The boot's prefix less the instance id, which the instance appends itself: with it,
    `boot_prefix` of that instance's ARN."""
    return boot_prefix(sweep_id, rig, boot, instance_arn(arn_prefix, "x"))[: -len("x/")]


class BootFile(NamedTuple):
    rig: str
    boot: int
    instance_id: str
    name: str


def parse_key(sweep_id: str, key: str) -> BootFile | None:
    """A key of `boot_prefix`'s layout, or None for any other key under the sweep's prefix."""
    parts = key.removeprefix(f"{REPORTS_PREFIX}{sweep_id}/").split("/")
    if key == "/".join(parts) or len(parts) != 5:
        return None
    rig, boot, arn, instance_id, name = parts
    if not boot.isdigit() or not _INSTANCE_ARN.fullmatch(arn) or not instance_id:
        return None
    return BootFile(rig, int(boot), instance_id, name)
