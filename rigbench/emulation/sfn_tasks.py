"""The Step Functions integration (`arn:aws:states:::states:startExecution.sync:2`) as AWS runs
it, in moto 5.2.6's parser.

moto took the parser from LocalStack but left out its request and response normalisation
(`StateTaskService._normalise_parameters` and `_normalise_response` do nothing): a Task's
`StateMachineArn`, `Name` and `Input` reach botocore unchanged and fail (KeyError
'StateMachineArn'), and the answers keep botocore's casing where the parser then reads
`ExecutionArn`. These put LocalStack's normalisation back for this one integration, from the
same botocore service model: parameters to botocore's member names, answers to the Pascal case
AWS gives a state (`ExecutionArn`, `Output`, `Status`, ...).
"""

from functools import cache
from typing import Any

import botocore.session
from botocore.model import OperationModel
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service_sfn import (  # noqa: E501
    StateTaskServiceSfn,
)
from moto.stepfunctions.parser.utils import camel_to_snake_case

_original_normalise_parameters = StateTaskServiceSfn._normalise_parameters


@cache
def _operation(action: str) -> OperationModel:
    """The Step Functions operation whose snake-case name is `action` (`start_execution`)."""
    service = botocore.session.get_session().get_service_model("stepfunctions")
    for name in service.operation_names:
        if camel_to_snake_case(name) == action:
            return service.operation_model(name)
    raise KeyError(f"no Step Functions operation {action!r}")


def normalise_parameters(
    task: StateTaskServiceSfn,
    parameters: dict[str, Any],
    boto_service_name: str | None = None,
    service_action_name: str | None = None,
) -> None:
    _original_normalise_parameters(task, parameters, boto_service_name, service_action_name)
    shape = _operation(task._get_boto_service_action(service_action_name)).input_shape
    if shape is not None:
        task._to_boto_request(parameters, shape)


def normalise_response(
    task: StateTaskServiceSfn,
    response: Any,
    boto_service_name: str | None = None,
    service_action_name: str | None = None,
) -> None:
    shape = _operation(task._get_boto_service_action(service_action_name)).output_shape
    if shape is not None:
        task._from_boto_response(response, shape)
