"""The rigbench MCP server: the tools of `rigbench.mcp.tools` and three resources, on the
official SDK's `MCPServer`.

    server = build_server(stack, ceiling_usd=5.0)     # stack: an entered StackClient
    server.run("stdio")

Each tool's input schema comes from its typed parameters (the sweep input is the pydantic
`SweepInput`, the results filters `ResultsQuery`), its output schema from the model it
returns. A refusal (`Refused`, `StackError`) becomes a tool error (isError) whose text says
what was wrong; arguments that fail the schema are refused by the SDK the same way. Either
way the server keeps serving.
"""

import json
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from functions.execution_input import SCHEMA_PATH, SweepInput
from rigbench.mcp.models import (
    InstanceList,
    PlanReport,
    Quotas,
    Reaped,
    ResultsPage,
    RigList,
    SweepComparison,
    SweepList,
    SweepStart,
    SweepStatus,
    Terminated,
)
from rigbench.mcp.tools import Refused, SweepTools
from rigbench.stack import ResultsQuery, StackClient, StackError

T = TypeVar("T")

SCHEMA_URI = "rigbench://schema/sweep-input"
COMPARISON_URI = "rigbench://sweeps/{sweep_id}/comparison"
REPORT_URI = "rigbench://sweeps/{sweep_id}/report"

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=True)
# Starts executions that launch instances and reserve budget: not read-only, not destructive.
SPENDS = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=True
)
DESTRUCTIVE = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=True
)

SweepId = Annotated[
    str, Field(min_length=1, max_length=2048, description="a sweep id (execution name) or ARN")
]
InstanceId = Annotated[
    str, Field(pattern=r"^i-[0-9a-f]{8,17}$", description="an EC2 instance id, i-...")
]


def _refusals(fn: Callable[[], T]) -> T:
    """Run a tool body; what it refuses reaches the client as a tool error with its reason."""
    try:
        return fn()
    except (Refused, StackError) as exc:
        raise ToolError(str(exc)) from exc


def instructions(tools: SweepTools) -> str:
    return (
        f"rigbench benchmarks LLM serving runtimes (rigs) on {tools.stack.kind} stack "
        f"{tools.stack.refs.stack_name!r}. Plan a sweep with plan_sweep before start_sweep; "
        f"this server refuses any sweep whose budget_usd is above {tools.ceiling_usd:g} USD. "
        f"Follow a sweep with sweep_status until done, then read query_results and compare. "
        f"The sweep input's JSON Schema is the resource {SCHEMA_URI}."
    )


def build_server(stack: StackClient, ceiling_usd: float) -> MCPServer:
    """An MCP server over an entered stack client; it never raises the ceiling."""
    tools = SweepTools(stack, ceiling_usd)
    server: MCPServer = MCPServer("rigbench", instructions=instructions(tools), log_level="WARNING")

    @server.tool(annotations=READ_ONLY)
    def check_quotas(instance_type: str = "g5g.2xlarge") -> Quotas:
        """The G and VT vCPU quota for spot and on-demand, the vCPUs already running, the room
        left, and how many instances of `instance_type` fit."""
        return _refusals(lambda: tools.check_quotas(instance_type))

    @server.tool(annotations=READ_ONLY)
    def plan_sweep(input: SweepInput) -> PlanReport:
        """A dry run of a sweep input: which boots would launch where, the quota and the
        budget reservation, and whether quota, budget and this server's ceiling allow it.
        Nothing is launched, nothing spent."""
        return _refusals(lambda: tools.plan_sweep(input))

    @server.tool(annotations=SPENDS)
    def start_sweep(input: SweepInput) -> SweepStart:
        """Start a sweep (launches instances, spends up to budget_usd); refused, with nothing
        launched, when budget_usd is above this server's ceiling. Returns the sweep id."""
        return _refusals(lambda: tools.start_sweep(input))

    @server.tool(annotations=READ_ONLY)
    def sweep_status(sweep_id: SweepId) -> SweepStatus:
        """A sweep's status and the phase of each rig and boot; failures explained."""
        return _refusals(lambda: tools.sweep_status(sweep_id))

    @server.tool(annotations=READ_ONLY)
    def list_sweeps(
        since: Annotated[
            datetime | None, Field(description="only sweeps started at or after this time")
        ] = None,
        limit: Annotated[int, Field(ge=1, le=1000)] = 20,
    ) -> SweepList:
        """The most recent sweeps, newest first."""
        return _refusals(lambda: tools.list_sweeps(since, limit))

    @server.tool(annotations=READ_ONLY)
    def query_results(
        filters: ResultsQuery, limit: Annotated[int, Field(ge=1, le=10_000)] = 500
    ) -> ResultsPage:
        """Results rows (one per load cell of one boot) by Query: one sweep, or one rig,
        model or instance type over time (default: the last 30 days)."""
        return _refusals(lambda: tools.query_results(filters, limit))

    @server.tool(annotations=READ_ONLY)
    def compare(
        sweep_id: SweepId,
        baseline: Annotated[str | None, Field(description="default: the first rig")] = None,
    ) -> SweepComparison:
        """Compare a sweep's rigs across boots: per cell and metric the geometric mean of the
        boots with an interval naming its n, a verdict from Welch's t-test on log boot values
        Holm-corrected across the sweep (5% family-wise), no verdict with 1 boot; the rigs'
        batching, slots and dtype; ranking flips flagged. The table's and report's words."""
        return _refusals(lambda: tools.compare(sweep_id, baseline))

    @server.tool(annotations=READ_ONLY)
    def list_instances() -> InstanceList:
        """Live instances this stack launched (by its project tag), with their deadline."""
        return _refusals(tools.list_instances)

    @server.tool(annotations=DESTRUCTIVE)
    def terminate(instance_id: InstanceId) -> Terminated:
        """Terminate one instance, only if this stack launched it (its project tag)."""
        return _refusals(lambda: tools.terminate(instance_id))

    @server.tool(annotations=DESTRUCTIVE)
    def reap(dry_run: bool = False) -> Reaped:
        """End instances past their deadline or whose sweep ended, and release the budget
        reservations of ended sweeps (what the scheduled reaper does). dry_run: list only."""
        return _refusals(lambda: tools.reap(dry_run))

    @server.tool(annotations=READ_ONLY)
    def list_rigs() -> RigList:
        """The rigs (serving runtimes) there are, and which this machine can serve."""
        return tools.list_rigs()

    @server.resource(
        SCHEMA_URI,
        name="sweep-input-schema",
        description="JSON Schema of a sweep input (plan_sweep and start_sweep take one)",
        mime_type="application/schema+json",
    )
    def sweep_input_schema() -> str:
        return SCHEMA_PATH.read_text()

    @server.resource(
        COMPARISON_URI,
        name="sweep-comparison",
        description="A sweep's comparison (what the compare tool returns), as JSON",
        mime_type="application/json",
    )
    def sweep_comparison(sweep_id: str) -> str:
        try:
            found = tools.compare(sweep_id, None)
        except (Refused, StackError) as exc:
            raise ResourceError(str(exc)) from exc
        return json.dumps(found.model_dump(mode="json"), indent=1)

    @server.resource(
        REPORT_URI,
        name="sweep-report",
        description="A sweep's report: one self-contained HTML page (comparison, plots, cost "
        "per token, provenance, what is missing) that opens offline, stored when the sweep ends",
        mime_type="text/html",
    )
    def sweep_report(sweep_id: str) -> str:
        try:
            return tools.report(sweep_id)
        except (Refused, StackError) as exc:
            raise ResourceError(str(exc)) from exc

    return server
