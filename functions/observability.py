"""Powertools Logger, Tracer and Metrics, created once; the service name and namespace come
from the environment (template Globals), with the same values as fallbacks so that importing
a handler outside Lambda (tests, the local emulation) behaves the same."""

import os
import warnings
from collections.abc import Callable
from typing import Any, TypeVar, cast

from aws_lambda_powertools import Logger, Metrics, Tracer

Handler = TypeVar("Handler", bound=Callable[..., Any])
# A step that refuses before it measures anything (Validate on bad input) has no metrics;
# Powertools warns on every such invocation, and in a CLI the warning lands before the error.
warnings.filterwarnings("ignore", message="No application metrics to publish")

SERVICE = os.environ.get("POWERTOOLS_SERVICE_NAME", "rigbench")

logger = Logger(service=SERVICE)
tracer = Tracer(service=SERVICE)
metrics = Metrics(
    namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "rigbench"), service=SERVICE
)


def instrumented(handler: Handler) -> Handler:
    """What every Lambda handler wears: the invocation's context in the logs, a trace
    segment, and its metrics flushed at the end (outermost first, as powertools documents)."""
    # Each wrapper keeps the handler's signature (functools.wraps); powertools types it loosely.
    wrapped = logger.inject_lambda_context(
        tracer.capture_lambda_handler(metrics.log_metrics(handler))
    )
    return cast(Handler, wrapped)
