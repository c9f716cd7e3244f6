"""`rigbench run --local`, `rigbench demo`: the sweep on this machine, no AWS account needed.

`run_local` is what `rigbench run` calls when given `--local`, or when no AWS credentials
are configured (after saying so in one line).
"""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from rigbench.local.home import HOME_ENV, PRICE_ENV, QUOTA_ENV, LocalHome

# The emulation, moto and the handlers load only when a local command runs (seconds).
if TYPE_CHECKING:
    from functions.execution_input import SweepInput
    from rigbench.local.emulated import EmulatedAccount
    from rigbench.stack.local import LocalStack

QuotaOption = Annotated[
    float | None,
    typer.Option(
        "--quota-vcpus",
        help=f"Emulated G/VT vCPU quota (env {QUOTA_ENV}; default: one g5g.2xlarge, 8 vCPU, "
        "per GPU of this machine, or per 4 cores without a GPU, so rigs do not measure each "
        "other; the local fleet never puts two boots on one GPU)",
        min=0,
    ),
]
PriceOption = Annotated[
    float | None,
    typer.Option(
        "--spot-price",
        help=f"Emulated spot price in USD/h (env {PRICE_ENV}; default 0.30)",
        min=0.000001,
    ),
]
LocalOption = Annotated[
    bool, typer.Option("--local", help="On this machine, on an embedded AWS emulation")
]
DryRunOption = Annotated[
    bool,
    typer.Option(
        "--dry-run",
        help="Plan, launch nothing: validate, check quota, price and budget against the AWS "
        "account (with credentials: its quota, spot price and month's spend), or with --local "
        "(or no credentials) rehearse on the embedded emulation's figures",
    ),
]
HomeOption = Annotated[
    Path | None,
    typer.Option("--home", help=f"Local state directory (env {HOME_ENV}; default ./.rigbench)"),
]


LOCAL_FALLBACK_NOTICE = (
    "no AWS credentials found: using the local embedded AWS emulation, as --local does "
    "(configure AWS credentials to use your account)"
)


def _account(quota_vcpus: float | None, spot_price: float | None) -> "EmulatedAccount":
    from rigbench.local.emulated import EmulatedAccount

    try:
        return EmulatedAccount.from_env(quota_vcpus, spot_price)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def run_local(
    sweep: "Path | dict[str, Any] | SweepInput | None" = None,
    *,
    dry_run: bool = False,
    quota_vcpus: float | None = None,
    spot_price: float | None = None,
    home: Path | None = None,
    console: Console | None = None,
) -> int:
    """The local sweep (the demo when no input is given) or, with `dry_run`, its rehearsal.
    `sweep` is an input file, the input itself, or the input parsed (`parse_sweep`).

    Returns the exit code: 0 when the sweep succeeded (or the plan is valid), 1 when not,
    2 for bad input, 130 when interrupted.
    """
    from functions.errors import InvalidInput
    from functions.execution_input import SweepInput, read_input_file
    from rigbench.commands.local_sweep import demo_input, local_rigs, run_sweep
    from rigbench.local.session import interrupts_as_keyboard_interrupt
    from rigbench.report.comparison import LOCAL_EMULATION
    from rigbench.stack import parse_sweep

    console = console or Console()
    account = _account(quota_vcpus, spot_price)
    local_home = LocalHome.resolve(home)
    if dry_run and sweep is None:
        console.print(
            "[red]error:[/] --dry-run needs a sweep input file: "
            "rigbench run --local --dry-run INPUT.json"
        )
        return 2
    if sweep is None:
        rigs = local_rigs()
        if not rigs:
            console.print("[red]error:[/] no rig supports this machine (see rigbench rig list)")
            return 2
        sweep = demo_input(rigs)
        console.print(
            f"local sweep: {', '.join(rigs)} with {sweep['model']}, "
            f"{sweep['boots_per_rig']} boots each (the fewest at which one comparison "
            "finds a 1.5x difference 9 times in 10), concurrency "
            f"{','.join(map(str, sweep['cells']['concurrency']))}; "
            f"{LOCAL_EMULATION}"
        )
    try:  # parsed here, once, before starting anything
        if isinstance(sweep, SweepInput):
            parsed = sweep
        else:
            parsed = parse_sweep(read_input_file(sweep) if isinstance(sweep, Path) else sweep)
    except InvalidInput as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)
        return 2
    try:
        with interrupts_as_keyboard_interrupt():
            if dry_run:
                return _dry_run(parsed, local_home, account, console)
            return run_sweep(parsed, home=local_home, account=account, console=console)
    except KeyboardInterrupt:
        console.print(
            "[yellow]interrupted:[/] the sweep was stopped, its local instances terminated, "
            f"and what it stored so far saved in {local_home.data}"
        )
        return 130


def _dry_run(
    sweep: "SweepInput", home: LocalHome, account: "EmulatedAccount", console: Console
) -> int:
    from rigbench.commands.dry_run import print_plan
    from rigbench.stack import StackError
    from rigbench.stack.local import LocalStack

    # a rehearsal of the cloud run: boots planned for the sweep's instance type, not this machine
    with LocalStack(
        home, account, console=console, keep_results=False, instance_host="ec2"
    ) as stack:
        try:
            plan = stack.plan(sweep)
        except StackError as exc:
            console.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)
            return 2
        zones = {
            s["SubnetId"]: s["AvailabilityZone"]
            for s in stack.client("ec2").describe_subnets()["Subnets"]
        }
        launched = stack.session.emu.running_instances()
    if launched:  # the seam refuses every launch; anything else is a bug worth shouting about
        console.print(f"[red]BUG: the dry run launched {launched}[/]")
        return 1
    if not plan.valid:  # refused (input, quota, budget): one line, as any bad input
        message = f"a cloud run of this input would fail: {plan.error}"
        console.print(f"[red]error:[/] {escape(message)}", soft_wrap=True)
        return 2
    print_plan(console, plan, zones, emulated=True)
    return 0


def demo_command(
    quota_vcpus: QuotaOption = None, spot_price: PriceOption = None, home: HomeOption = None
) -> None:
    """The local sweep: every rig this machine can run, random:tiny, three boots, a table."""
    raise typer.Exit(run_local(None, quota_vcpus=quota_vcpus, spot_price=spot_price, home=home))


def local_stack(home: Path | None = None, save: bool = False) -> "LocalStack":
    """The embedded stack with the saved results and executions and no running sweep: what
    `status`, `results` and `reap` work on locally (`save`: keep what the command changed)."""
    from rigbench.stack.local import LocalStack

    return LocalStack(LocalHome.resolve(home), keep_results=save, restore=True)
