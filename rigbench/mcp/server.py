"""The rigbench MCP server: the tools of `rigbench.mcp.tools` and four resources, on the
official SDK's `MCPServer`.

    server = build_server(stack, ceiling_usd=5.0)     # stack: an entered StackClient
    server.run("stdio")

`plan_sweep` and `start_sweep` take the sweep input's fields as flat arguments (the fields of
`SweepInput`, with their constraints and descriptions; `rigs` and `instance_type` list the
values this stack can run as enums); other tools take typed parameters. Every output schema
comes from the model the tool returns. A refusal (`Refused`, `StackError`) becomes a tool
error (isError) whose text says what was wrong; arguments that fail the schema are refused by
the SDK the same way. Either way the server keeps serving.
"""

import inspect
import json
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase
from mcp.types import ToolAnnotations
from pydantic import ConfigDict, Field

from functions.errors import InvalidInput
from functions.execution_input import SweepInput
from rigbench import version
from rigbench.mcp.models import (
    InstanceList,
    PlanReport,
    Quotas,
    Reaped,
    RegressionList,
    ReportSummary,
    ResultsPage,
    RigList,
    SweepComparison,
    SweepList,
    SweepStart,
    SweepStatus,
    Terminated,
)
from rigbench.mcp.tools import Refused, SweepTools
from rigbench.project_files import REPO_ROOT
from rigbench.stack import ResultsQuery, StackClient, StackError, parse_sweep

T = TypeVar("T")

SCHEMA_URI = "rigbench://schema/sweep-input"
COMPARISON_URI = "rigbench://sweeps/{sweep_id}/comparison"
REPORT_URI = "rigbench://sweeps/{sweep_id}/report"
REPORT_HTML_URI = "rigbench://sweeps/{sweep_id}/report.html"

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
    except (Refused, InvalidInput, StackError) as exc:
        raise ToolError(str(exc)) from exc


CELLS_EXAMPLE = {"concurrency": [1, 8], "prompt_tokens": 512, "output_tokens": 128}


def instructions(tools: SweepTools) -> str:
    return (
        f"rigbench benchmarks LLM serving runtimes (rigs) on {tools.stack.kind} stack "
        f"{tools.stack.refs.stack_name!r}. Plan a sweep with plan_sweep (it writes nothing) "
        f"before start_sweep; both take the sweep's fields as arguments. This server refuses "
        f"any sweep whose budget_usd is above {tools.ceiling_usd:g} USD. Follow a sweep with "
        f"sweep_status until done, then read query_results and compare. The sweep input's "
        f"JSON Schema is the resource {SCHEMA_URI}."
    )


def reflow(doc: str) -> str:
    """A docstring as a tool description: no indentation, no hard breaks inside paragraphs."""
    paragraphs = inspect.cleandoc(doc).split("\n\n")
    return "\n\n".join(" ".join(p.split()) for p in paragraphs)


def without_titles(schema: Any) -> Any:
    """A JSON Schema less pydantic's generated titles ("Budget Usd"): names and descriptions
    say it better. A property that happens to be called "title" is a dict and stays."""
    if isinstance(schema, dict):
        return {
            k: without_titles(v)
            for k, v in schema.items()
            if not isinstance(v, str) or k != "title"
        }
    if isinstance(schema, list):
        return [without_titles(v) for v in schema]
    return schema


def refusing_unknown(arguments: type[ArgModelBase]) -> type[ArgModelBase]:
    """The SDK's argument model, refusing an argument the tool does not take (a misspelt
    field is an error that names it, not a silent default)."""

    class Strict(arguments):  # type: ignore[valid-type,misc]
        model_config = ConfigDict(**{**arguments.model_config, "extra": "forbid"})

    Strict.__name__ = arguments.__name__
    return Strict


def enum_of(values: list[str]) -> Any:
    """`Literal[values...]`: a JSON Schema enum of values known when the server starts."""
    return Literal.__getitem__(tuple(values))


def sweep_parameters(rigs: list[str], instance_types: list[str]) -> list[inspect.Parameter]:
    """The fields of `SweepInput` as keyword parameters, each with its constraints and
    description; rigs and instance types as enums of what this stack can run."""
    params = []
    for name, field in SweepInput.model_fields.items():
        annotation: Any = field.annotation
        extra: dict[str, Any] = {}
        if name == "rigs" and rigs:
            annotation = list[enum_of(rigs)]  # type: ignore[misc]
        elif name == "instance_type" and instance_types:
            annotation = enum_of(instance_types)
        elif name == "cells":
            extra["examples"] = [CELLS_EXAMPLE]
        described = Field(description=field.description, **extra)
        default = (
            inspect.Parameter.empty
            if field.is_required()
            else field.get_default(call_default_factory=True)
        )
        params.append(
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                annotation=Annotated[(annotation, *field.metadata, described)],
                default=default,
            )
        )
    return params


def sweep_from(arguments: dict[str, Any]) -> SweepInput:
    """The SweepInput of flat arguments; fields left at their default stay unset, as in a file.
    The nested models the server parsed (cells, deadlines, waits) go in as they are: the
    input's parse takes a model instance without validating it again."""
    given = {}
    for name, value in arguments.items():
        field = SweepInput.model_fields[name]
        if not field.is_required() and value == field.get_default(call_default_factory=True):
            continue
        given[name] = value
    return parse_sweep(given)


def sweep_tool(
    name: str,
    doc: str,
    params: list[inspect.Parameter],
    returns: type,
    body: Callable[[SweepInput], Any],
) -> Callable[..., Any]:
    """A tool function whose signature is the sweep input's fields, flat."""

    def tool(**arguments: Any) -> Any:
        return _refusals(lambda: body(sweep_from(arguments)))

    tool.__name__ = name
    tool.__doc__ = doc
    tool.__signature__ = inspect.Signature(params, return_annotation=returns)  # type: ignore[attr-defined]
    return tool


def build_server(stack: StackClient, ceiling_usd: float) -> MCPServer:
    """An MCP server over an entered stack client; it never raises the ceiling."""
    tools = SweepTools(stack, ceiling_usd)
    server: MCPServer = MCPServer(
        "rigbench", version=version(), instructions=instructions(tools), log_level="WARNING"
    )
    rigs = tools.runnable_rigs()
    instance_types = tools.allowed_instance_types()
    params = sweep_parameters(rigs, instance_types)

    @server.tool(annotations=READ_ONLY)
    def check_quotas(
        instance_type: Annotated[
            str, Field(description="an EC2 instance type, e.g. g5g.2xlarge")
        ] = "g5g.2xlarge",
    ) -> Quotas:
        """The G and VT vCPU quota for spot and on-demand, the vCPUs already running, the room
        left, and how many instances of `instance_type` fit."""
        return _refusals(lambda: tools.check_quotas(instance_type))

    server.tool(annotations=READ_ONLY)(
        sweep_tool(
            "plan_sweep",
            """A read-only dry run of a sweep: the stack's own validation, quota and budget
            checks against its settings and the account as they are, and whether this server's
            ceiling allows it. Says which boots would launch where and what would be reserved.
            Writes nothing anywhere: no execution, no ledger item, no report.""",
            params,
            PlanReport,
            tools.plan_sweep,
        )
    )
    server.tool(annotations=SPENDS)(
        sweep_tool(
            "start_sweep",
            """Start a sweep (launches instances, spends up to budget_usd); refused, with
            nothing launched, when budget_usd is above this server's ceiling or a rig cannot
            run on this stack. Returns the sweep id to follow with sweep_status.""",
            params,
            SweepStart,
            tools.start_sweep,
        )
    )

    @server.tool(annotations=READ_ONLY)
    def sweep_status(sweep_id: SweepId) -> SweepStatus:
        """A sweep's status and the phase of each rig and boot; failures explained."""
        return _refusals(lambda: tools.sweep_status(sweep_id))

    @server.tool(annotations=READ_ONLY)
    def list_sweeps(
        since: Annotated[
            datetime | None,
            Field(description="only sweeps started at or after this time (ISO 8601)"),
        ] = None,
        limit: Annotated[int, Field(ge=1, le=1000, description="at most this many sweeps")] = 20,
    ) -> SweepList:
        """The most recent sweeps, newest first."""
        return _refusals(lambda: tools.list_sweeps(since, limit))

    @server.tool(annotations=READ_ONLY)
    def query_results(
        sweep: Annotated[str | None, Field(description="one sweep id")] = None,
        rig: Annotated[str | None, Field(description="one rig, over time")] = None,
        model: Annotated[str | None, Field(description="one model, over time")] = None,
        instance_type: Annotated[
            str | None, Field(description="one instance type, over time")
        ] = None,
        since: Annotated[
            datetime | None,
            Field(description="rows started at or after this time (ISO 8601); default 30 days ago"),
        ] = None,
        limit: Annotated[int, Field(ge=1, le=10_000, description="at most this many rows")] = 500,
    ) -> ResultsPage:
        """Results rows (one per load cell of one boot) by Query: one sweep, or one rig, model
        or instance type over time (default: the last 30 days)."""
        return _refusals(
            lambda: tools.query_results(
                ResultsQuery(
                    sweep=sweep, rig=rig, model=model, instance_type=instance_type, since=since
                ),
                limit,
            )
        )

    @server.tool(annotations=READ_ONLY)
    def list_regressions(
        since: Annotated[
            datetime | None,
            Field(description="sweeps started at or after this time (ISO 8601); default: 30 days"),
        ] = None,
        sweep: Annotated[str | None, Field(description="only this sweep id")] = None,
    ) -> RegressionList:
        """Regression alerts: a rig significantly worse than its own recent history (same
        model, instance type and setup) by more than its sweep's regression_ratio, from
        Welch's t-test on log boot values against that ratio, Holm-corrected across the
        sweep; each with its figures, boots now and in history, and the report."""
        return _refusals(lambda: tools.list_regressions(since, sweep))

    @server.tool(annotations=READ_ONLY)
    def compare(
        sweep_id: SweepId,
        baseline: Annotated[
            str | None,
            Field(description="the rig the others are compared with; default: the first"),
        ] = None,
        detail: Annotated[
            bool,
            Field(
                description="also return every cell, metric and interval (large: ~20 kB per rig)"
            ),
        ] = False,
    ) -> SweepComparison:
        """Compare a sweep's rigs across boots: per cell and metric the geometric mean of the
        boots with an interval naming its n, a verdict from Welch's t-test on log boot values
        Holm-corrected across the sweep (5% family-wise), no verdict with 1 boot; the rigs'
        batching, slots and dtype; ranking flips flagged; each rig pair's output agreement.
        The table's and report's words. Compact (the verdict lines) unless detail is true."""
        return _refusals(lambda: tools.compare(sweep_id, baseline, detail))

    @server.tool(annotations=DESTRUCTIVE)
    def stop_sweep(sweep_id: SweepId) -> SweepStatus:
        """Stop a running sweep: its execution ends, every instance of it is terminated and
        each boot billed to when its instance ended; its status says an MCP client stopped it."""
        return _refusals(lambda: tools.stop_sweep(sweep_id))

    @server.tool(annotations=READ_ONLY)
    def list_instances() -> InstanceList:
        """Live instances this stack launched (by its project tag), with their deadline."""
        return _refusals(tools.list_instances)

    @server.tool(annotations=DESTRUCTIVE)
    def terminate(instance_id: InstanceId) -> Terminated:
        """Terminate one instance, only if this stack launched it (its project tag)."""
        return _refusals(lambda: tools.terminate(instance_id))

    @server.tool(annotations=DESTRUCTIVE)
    def reap(
        dry_run: Annotated[
            bool, Field(description="list what would be ended, end nothing")
        ] = False,
    ) -> Reaped:
        """End instances past their deadline or whose sweep ended, and release the budget
        reservations of ended sweeps (what the scheduled reaper does)."""
        return _refusals(lambda: tools.reap(dry_run))

    @server.tool(annotations=READ_ONLY)
    def list_rigs() -> RigList:
        """The rigs (serving runtimes) there are, and which this machine can serve."""
        return tools.list_rigs()

    for tool in server._tool_manager.list_tools():
        tool.description = reflow(tool.description)
        tool.fn_metadata.arg_model = refusing_unknown(tool.fn_metadata.arg_model)
        tool.parameters = without_titles(
            tool.fn_metadata.arg_model.model_json_schema(by_alias=True)
        )

    @server.resource(
        SCHEMA_URI,
        name="sweep-input-schema",
        description="JSON Schema of a sweep input (plan_sweep and start_sweep take its fields)",
        mime_type="application/schema+json",
    )
    def sweep_input_schema() -> str:
        return (REPO_ROOT / "statemachine" / "sweep-input.schema.json").read_text()

    @server.resource(
        COMPARISON_URI,
        name="sweep-comparison",
        description="A sweep's full comparison (what compare returns with detail=true), as JSON",
        mime_type="application/json",
    )
    def sweep_comparison(sweep_id: str) -> str:
        try:
            found = tools.compare(sweep_id, None, detail=True)
        except (Refused, StackError) as exc:
            raise ResourceError(str(exc)) from exc
        return json.dumps(found.model_dump(mode="json"), indent=1)

    @server.resource(
        REPORT_URI,
        name="sweep-report",
        description="What a sweep's report page holds, as JSON: its size, sections and "
        "headline verdicts, and the URI of the page itself",
        mime_type="application/json",
    )
    def sweep_report(sweep_id: str) -> str:
        try:
            summary: ReportSummary = tools.report_summary(
                sweep_id, REPORT_HTML_URI.format(sweep_id=sweep_id)
            )
        except (Refused, StackError) as exc:
            raise ResourceError(str(exc)) from exc
        return summary.model_dump_json(indent=1)

    @server.resource(
        REPORT_HTML_URI,
        name="sweep-report-html",
        description="A sweep's report: one self-contained HTML page (comparison, plots, cost "
        "per token, provenance, what is missing) that opens offline; up to 2 MB",
        mime_type="text/html",
    )
    def sweep_report_html(sweep_id: str) -> str:
        try:
            return tools.report(sweep_id)
        except (Refused, StackError) as exc:
            raise ResourceError(str(exc)) from exc

    return server
