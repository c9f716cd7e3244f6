"""`rigbench deploy`: `sam build` and `sam deploy` the stack on the network it needs, then
upload the rig + harness bundle."""

import os
import subprocess
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from rigbench.bundle import REPO_ROOT
from rigbench.commands.stack_choice import (
    DEFAULT_STACK,
    CloudError,
    StackOption,
    fail,
    open_stack,
    require_aws_credentials,
)
from rigbench.stack import StackError

if TYPE_CHECKING:  # boto3 loads only when the command runs
    from rigbench.stack.network import Network

SAM_INSTALL = "https://docs.aws.amazon.com/serverless-application-model/latest/developerguide/install-sam-cli.html"


def deploy_command(
    guided: Annotated[
        bool, typer.Option("--guided", help="Ask for parameters (first deploy)")
    ] = False,
    parameter: Annotated[
        list[str] | None, typer.Option("--parameter", help="Key=Value template parameter")
    ] = None,
    vpc: Annotated[
        str | None,
        typer.Option(
            "--vpc", help="VPC of the instances (default: the stack's, else the default VPC)"
        ),
    ] = None,
    subnets: Annotated[
        str | None,
        typer.Option(
            "--subnets",
            help="Subnets to launch in, comma-separated, tried in order (default: the stack's, "
            "else the default VPC's); they need a route to the internet",
        ),
    ] = None,
    bundle_only: Annotated[
        bool, typer.Option("--bundle-only", help="Only upload the bundle")
    ] = False,
    stack: StackOption = DEFAULT_STACK,
) -> None:
    """`sam build` and `sam deploy` the stack, then upload the rig + harness bundle (needs
    AWS credentials and the AWS SAM CLI; local sweeps need no deploy). Its network: --vpc and
    --subnets, else the stack's own, else the account's default VPC and subnets."""
    import shutil

    import boto3

    from rigbench import version

    console = Console()
    require_aws_credentials("deploy", "nothing deployed or uploaded; local sweeps need no deploy")
    session = boto3.session.Session()
    if not session.region_name:
        fail(
            CloudError("no AWS region: `aws configure set region us-east-1`, or export AWS_REGION")
        )
    if not bundle_only:
        if shutil.which("sam") is None:
            fail(CloudError(f"the AWS SAM CLI (`sam`) is not on PATH: install it ({SAM_INSTALL})"))
        given = dict(p.split("=", 1) for p in parameter or [] if "=" in p)
        overrides = [*(parameter or [])]
        if "VpcId" not in given and "SubnetIds" not in given:
            network = find_network(session, stack, vpc, subnets)
            console.print(
                f"network: {network.vpc_id}, subnets {', '.join(network.subnet_ids)} "
                f"({network.source})"
            )
            overrides = [*network.parameters(), *overrides]
        if "RigbenchVersion" not in given:
            overrides.append(f"RigbenchVersion={version()}")
        deploy = ["sam", "deploy", "--stack-name", stack, "--capabilities", "CAPABILITY_IAM",
                  "--resolve-s3", "--no-fail-on-empty-changeset",
                  "--parameter-overrides", *overrides]  # fmt: skip
        if guided:
            deploy.append("--guided")
        for command in (["sam", "build"], deploy):
            console.print(f"[bold]$ {escape(' '.join(command))}[/]", soft_wrap=True)
            # functions/Makefile builds the Lambda package with this Python (rigbench's own)
            env = {**os.environ, "PYTHON": sys.executable}
            if subprocess.run(command, cwd=REPO_ROOT, env=env).returncode != 0:
                console.print(f"[red]{command[1]} failed[/]")
                raise typer.Exit(1)
    with open_stack(False, stack) as client:
        try:
            manifest = client.upload_bundle(REPO_ROOT)
        except StackError as exc:
            fail(exc)
        bucket = client.refs.bucket
    console.print(
        f"bundle {manifest.sha256[:12]} (rigs: {', '.join(manifest.rigs)}) "
        f"-> s3://{bucket}/{manifest.key}"
    )
    console.print(f"next: `rigbench doctor --stack {stack}` checks what a sweep needs")


def find_network(session: Any, stack: str, vpc: str | None, subnets: str | None) -> "Network":
    """The VPC and subnets the deploy passes (`rigbench.stack.network`); fails in one line."""
    from rigbench.stack.boto import aws_errors
    from rigbench.stack.network import (
        default_network,
        deployed_network,
        given_network,
        subnets_of,
    )

    ec2 = session.client("ec2")
    try:
        with aws_errors("finding the network"):
            if subnets:
                return given_network(ec2, vpc, [s.strip() for s in subnets.split(",") if s.strip()])
            if vpc:
                return subnets_of(ec2, vpc)
            found = deployed_network(session.client("cloudformation"), stack)
            return found or default_network(ec2, session.region_name)
    except StackError as exc:
        fail(exc)
