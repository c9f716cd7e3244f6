"""The torch rig's server: `python -m rigs.torch.server --model SPEC [--port 8000] ...`."""

from __future__ import annotations

import argparse
import logging

from rigs.registry import get_rig
from rigs.serving import marks
from rigs.serving.engine import Engine
from rigs.serving.serve import serve_options
from rigs.serving.sizing import AUTO, AUTO_SLOTS_NO_STATS, slots_arg
from rigs.serving.tokenizer import ServingTokenizer
from rigs.settings import add_options
from rigs.sources import resolve_model
from rigs.torch.engine import DTYPES

RIG = get_rig("torch")


def options() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rigs.torch.server", description=__doc__)
    parser.add_argument("--model", required=True, help="random:tiny, a directory or a hub id")
    parser.add_argument("--host", default="127.0.0.1", help="0.0.0.0: every interface")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--dtype", default="auto", choices=["auto", *DTYPES])
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda if present)")
    parser.add_argument("--seed", type=int, default=0, help="seed of random:* weights")
    # The tuned settings, their types, bounds and defaults: rigs/torch/rig.toml, one place.
    add_options(parser, RIG.name, RIG.serve.settings, converters={"max_batch": slots_arg})
    parser.add_argument("--served-model-name", action="append", default=[], help="repeatable")
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = options()
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
        marks.mark("model_on_disk")
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
            max_batch=AUTO_SLOTS_NO_STATS if args.max_batch == AUTO else args.max_batch,
            batch_gap_s=args.batch_gap_ms / 1000,
            batch_wait_s=args.batch_wait_ms / 1000,
            logit_perturbation=args.test_logit_perturbation,
        )
        return engine, tokenizer

    serve_options(load, args)


if __name__ == "__main__":
    main()
