"""Opt-in XLA flags for the JAX rig, set in XLA_FLAGS before JAX starts its backend.

RIGBENCH_JAX_COMMAND_BUFFERS=1 adds while loops and conditionals to the operations XLA
records into CUDA graphs (command buffers), so a chunk of decode steps (one while loop)
launches as one graph instead of one kernel launch per operation per step. Opt-in until
measured: `benchmarks/jax_gpu_perf.py` times decode with and without it. XLA parses
its GPU flags on every platform, so the flag is harmless on a CPU."""

import os

ENV = "RIGBENCH_JAX_COMMAND_BUFFERS"
# XLA's default command buffer types plus WHILE and CONDITIONAL (names from
# xla.DebugOptions.CommandBufferCmdType)
COMMAND_BUFFERS = (
    "--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,WHILE,CONDITIONAL"
)


def configure(environ: dict[str, str] | None = None) -> list[str]:
    """Add the opted-in flags to XLA_FLAGS (call before the first JAX computation);
    returns the flags added."""
    env = os.environ if environ is None else environ
    added = []
    if env.get(ENV, "") not in ("", "0"):
        added.append(COMMAND_BUFFERS)
    flags = env.get("XLA_FLAGS", "").split()
    new = [f for f in added if f not in flags]
    if new:
        env["XLA_FLAGS"] = " ".join([*flags, *new])
    return added
