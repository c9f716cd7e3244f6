"""The one place the orchestrator meets the instance bootstrap (owned by `rigs/`).

`rigs.bootstrap.render_user_data(spec)` renders the user data that arms the dead-man timer,
installs the rig and starts it; it writes install progress to `status.json` under
RIGBENCH_HOME, which the readiness probe reads over SSM.
"""

import shlex
from dataclasses import dataclass


@dataclass(frozen=True)
class InstancePlan:
    sweep_id: str
    rig: str
    boot: int
    model: str
    model_revision: str | None
    bucket: str
    bundle_key: str
    bundle_sha256: str
    token_secret_arn: str
    deadline_s: int  # the instance powers itself off this long after boot


RIGBENCH_HOME = "/var/lib/rigbench"


def render_user_data(plan: InstancePlan) -> str:
    try:
        from rigs.bootstrap import BootstrapSpec
        from rigs.bootstrap import render_user_data as render_rig_user_data
    except ImportError:
        return _without_rig_bootstrap(plan)
    spec = BootstrapSpec(
        rig=plan.rig,
        model=plan.model,
        model_revision=plan.model_revision,
        bucket=plan.bucket,
        bundle_key=plan.bundle_key,
        bundle_sha256=plan.bundle_sha256,
        token_secret_arn=plan.token_secret_arn,
        deadline_s=plan.deadline_s,
    )
    return str(render_rig_user_data(spec))


def _without_rig_bootstrap(plan: InstancePlan) -> str:
    """Used only when the bundle lacks rigs.bootstrap: arm the timer, then report the failure
    so the readiness wait fails fast with InstallFailed instead of waiting out its deadline."""
    minutes = max(1, plan.deadline_s // 60)
    status = (
        '{"phase": "failed", "error": "this bundle has no rigs.bootstrap: cannot install rig '
        + plan.rig
        + '"}'
    )
    return "\n".join(
        [
            "#!/bin/bash",
            "set -euo pipefail",
            f"shutdown -P +{minutes}",
            f"mkdir -p {RIGBENCH_HOME}",
            f"echo {shlex.quote(status)} > {RIGBENCH_HOME}/status.json",
            "",
        ]
    )
