"""The names of a deployed stack's resources, below both the stack client (which works on
them) and the emulation (which deploys a stack and names them)."""

from pydantic import BaseModel, ConfigDict


class StackRefs(BaseModel):
    """The stack's outputs every command works on (CloudFormation outputs on AWS; the
    emulation's physical names locally)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    stack_name: str
    state_machine_arn: str
    results_table: str
    ledger_table: str
    bucket: str

    def execution_arn(self, name: str) -> str:
        """The ARN of the execution called `name` (an ARN is returned as it is)."""
        if name.startswith("arn:"):
            return name
        return f"{self.state_machine_arn.replace(':stateMachine:', ':execution:')}:{name}"
