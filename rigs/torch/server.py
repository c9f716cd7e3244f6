"""The torch rig's server: `python -m rigs.torch.server --model SPEC [--port 8000] ...`."""

from __future__ import annotations

import argparse
import logging

from rigs.serving.engine import Engine
from rigs.serving.serve import add_bound_arguments, serve
from rigs.serving.tokenizer import ServingTokenizer
from rigs.sources import resolve_model
from rigs.torch.engine import DTYPES


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="rigs.torch.server", description=__doc__)
    parser.add_argument("--model", required=True, help="random:tiny, a directory or a hub id")
    parser.add_argument("--host", default="127.0.0.1", help="0.0.0.0: every interface")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--dtype", default="auto", choices=["auto", *DTYPES])
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda if present)")
    parser.add_argument("--max-model-len", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0, help="seed of random:* weights")
    parser.add_argument("--batching", default="serial", choices=["serial", "batched", "continuous"])
    parser.add_argument(
        "--max-batch", type=int, default=32, help="rows per batch, or slots (continuous)"
    )
    parser.add_argument(
        "--batch-gap-ms",
        type=float,
        default=10.0,
        help="batched and continuous: a wave of requests ends after this long with no arrival",
    )
    parser.add_argument(
        "--batch-wait-ms",
        type=float,
        default=250.0,
        help="batched and continuous: the longest a wave is gathered after its first request",
    )
    parser.add_argument(
        "--compile",
        default="auto",
        choices=["auto", "inductor", "graphs", "off"],
        help="continuous: inductor = torch.compile + a CUDA graph per width at start-up; "
        "graphs = CUDA graphs of the eager step; auto = inductor on CUDA, off on CPUs",
    )
    parser.add_argument(
        "--test-logit-perturbation",
        type=float,
        default=0.0,
        help="tests only: add a fixed random vector of this scale to the logits (serial and "
        "batched), so that the agreement check has a wrong rig to find",
    )
    parser.add_argument(
        "--test-fail-at-load",
        default="none",
        help="tests only: the model load fails with this message (none: it does not)",
    )
    parser.add_argument("--served-model-name", action="append", default=[], help="repeatable")
    add_bound_arguments(parser)
    args = parser.parse_args(argv)
    if args.test_logit_perturbation and args.batching == "continuous":
        parser.error("--test-logit-perturbation works with serial or batched batching only")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")

    def load() -> tuple[Engine, ServingTokenizer]:
        from rigs.torch.continuous import ContinuousEngine
        from rigs.torch.engine import TorchEngine

        if args.test_fail_at_load != "none":
            raise RuntimeError(args.test_fail_at_load)
        source = resolve_model(args.model, seed=args.seed)
        tokenizer = ServingTokenizer.from_pretrained(source.path)
        engine: Engine
        if args.batching == "continuous":
            engine = ContinuousEngine(
                source,
                dtype=args.dtype,
                device=args.device,
                max_model_len=args.max_model_len,
                slots=args.max_batch,
                compile=args.compile,
                admit_gap_s=args.batch_gap_ms / 1000,
                admit_wait_s=args.batch_wait_ms / 1000,
            )
            return engine, tokenizer
        engine = TorchEngine(
            source,
            dtype=args.dtype,
            device=args.device,
            max_model_len=args.max_model_len,
            batching=args.batching,
            max_batch=args.max_batch,
            batch_gap_s=args.batch_gap_ms / 1000,
            batch_wait_s=args.batch_wait_ms / 1000,
            logit_perturbation=args.test_logit_perturbation,
        )
        return engine, tokenizer

    # As vLLM does, the served name defaults to the --model argument itself.
    serve(
        load,
        args.host,
        args.port,
        served_model_names=args.served_model_name or [args.model],
        max_waiting=args.max_waiting,
        request_timeout_s=args.request_timeout_s,
    )


if __name__ == "__main__":
    main()
