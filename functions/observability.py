"""Powertools Logger, Tracer and Metrics, created once; the service name and namespace come
from the environment (template Globals), with the same values as fallbacks so that importing
a handler outside Lambda (tests, the local emulation) behaves the same."""

import os

from aws_lambda_powertools import Logger, Metrics, Tracer

SERVICE = os.environ.get("POWERTOOLS_SERVICE_NAME", "rigbench")

logger = Logger(service=SERVICE)
tracer = Tracer(service=SERVICE)
metrics = Metrics(
    namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "rigbench"), service=SERVICE
)
