"""Where a deployed stack's instances run: a VPC and its subnets, for `rigbench deploy`.

Given nothing, the stack keeps the network it was deployed with, else takes the account's
default VPC and its default subnets (one per zone, each with a route to the internet: the
instances reach SSM, S3, PyPI and the model hub, and nothing reaches them)."""

import re
from typing import Any

from botocore.exceptions import ClientError
from pydantic import BaseModel

from rigbench.stack.client import StackError


class Network(BaseModel):
    vpc_id: str
    subnet_ids: list[str]
    source: str  # how it was found, said to the user

    def parameters(self) -> list[str]:
        """As `sam deploy --parameter-overrides` takes them."""
        return [f"VpcId={self.vpc_id}", f"SubnetIds={','.join(self.subnet_ids)}"]


def deployed_network(cfn: Any, stack_name: str) -> Network | None:
    """The VPC and subnets the stack was deployed with; None when there is no such stack."""
    try:
        stack = cfn.describe_stacks(StackName=stack_name)["Stacks"][0]
    except ClientError:
        return None
    given = {p["ParameterKey"]: p.get("ParameterValue", "") for p in stack.get("Parameters", [])}
    if not given.get("VpcId") or not given.get("SubnetIds"):
        return None
    return Network(
        vpc_id=given["VpcId"],
        # "subnet-a,subnet-b" (moto writes the list's repr instead)
        subnet_ids=re.findall(r"subnet-[0-9a-f]+", given["SubnetIds"]),
        source=f"as stack {stack_name!r} was deployed",
    )


def default_network(ec2: Any, region: str) -> Network:
    """The account's default VPC and its default subnets, by zone; a StackError, in one line,
    when the region has none."""
    vpcs = ec2.describe_vpcs(Filters=[{"Name": "is-default", "Values": ["true"]}])["Vpcs"]
    if not vpcs:
        raise StackError(
            f"no default VPC in {region}: give --vpc VPC_ID --subnets SUBNET,SUBNET (subnets "
            "whose route table reaches the internet, through an internet or NAT gateway)"
        )
    vpc_id = vpcs[0]["VpcId"]
    subnets = ec2.describe_subnets(
        Filters=[
            {"Name": "vpc-id", "Values": [vpc_id]},
            {"Name": "default-for-az", "Values": ["true"]},
        ]
    )["Subnets"]
    if not subnets:
        raise StackError(
            f"the default VPC {vpc_id} in {region} has no default subnets: give --subnets"
        )
    ordered = sorted(subnets, key=lambda s: s["AvailabilityZone"])
    zones = ", ".join(s["AvailabilityZone"] for s in ordered)
    return Network(
        vpc_id=vpc_id,
        subnet_ids=[s["SubnetId"] for s in ordered],
        source=f"the default VPC of {region} and its subnets in {zones}",
    )


def given_network(ec2: Any, vpc_id: str | None, subnet_ids: list[str]) -> Network:
    """The network the user named: the subnets must exist, and be in the VPC when one is
    named (else their VPC is the stack's)."""
    try:
        found = ec2.describe_subnets(SubnetIds=subnet_ids)["Subnets"]
    except ClientError as exc:
        raise StackError(f"--subnets {','.join(subnet_ids)}: {exc}") from exc
    vpcs = {s["VpcId"] for s in found}
    if len(vpcs) != 1 or (vpc_id is not None and vpcs != {vpc_id}):
        raise StackError(
            f"--subnets {','.join(subnet_ids)} are in {', '.join(sorted(vpcs))}"
            + (f", not all in --vpc {vpc_id}" if vpc_id else ": give subnets of one VPC")
        )
    return Network(vpc_id=vpcs.pop(), subnet_ids=subnet_ids, source="as given")


def subnets_of(ec2: Any, vpc_id: str) -> Network:
    """A named VPC: one of its subnets per zone (the first by id), by zone."""
    found = ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [vpc_id]}])["Subnets"]
    if not found:
        raise StackError(f"--vpc {vpc_id} has no subnets (or no such VPC): give --subnets")
    by_zone: dict[str, str] = {}
    for subnet in sorted(found, key=lambda s: (s["AvailabilityZone"], s["SubnetId"])):
        by_zone.setdefault(subnet["AvailabilityZone"], subnet["SubnetId"])
    return Network(
        vpc_id=vpc_id,
        subnet_ids=list(by_zone.values()),
        source=f"one subnet of {vpc_id} per zone ({', '.join(by_zone)}); --subnets to choose",
    )
