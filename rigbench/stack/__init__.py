"""The stack client: one interface to the control plane (the deployed stack or the embedded
emulation). The CLI depends on this package; the two implementations depend on nothing of
the CLI. See `rigbench.stack.client` for the interface."""

from rigbench.stack.client import StackClient, StackError, parse_sweep
from rigbench.stack.models import (
    DONE,
    BootLog,
    BootProgress,
    BundleManifest,
    Phase,
    PlannedBoot,
    QuotaCheck,
    ReapReport,
    ResultRow,
    ResultsQuery,
    StackInstance,
    SweepPlan,
    SweepProgress,
    SweepStarted,
    SweepSummary,
)
from rigbench.stack_refs import StackRefs

__all__ = [
    "DONE",
    "BootLog",
    "BootProgress",
    "BundleManifest",
    "Phase",
    "PlannedBoot",
    "QuotaCheck",
    "ReapReport",
    "ResultRow",
    "ResultsQuery",
    "StackClient",
    "StackError",
    "StackInstance",
    "StackRefs",
    "SweepPlan",
    "SweepProgress",
    "SweepStarted",
    "SweepSummary",
    "parse_sweep",
]
