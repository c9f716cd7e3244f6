"""The requests of each cell: bodies and the lengths each asked for, from the run's workload."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.backend import Messages, build_body
from harness.dataset import DatasetEntry, take
from harness.prompts import as_text, text_prompts, token_id_prompts, token_id_range
from harness.schemas import BenchmarkConfig, DatasetProvenance
from harness.workload import DatasetWorkload, Length, RandomWorkload, SharedPrefixWorkload


def draw_lengths(length: Length, count: int, rng: np.random.Generator) -> list[int]:
    """`count` lengths: the fixed one, or seeded draws of the distribution."""
    if isinstance(length, int):
        return [length] * count
    drawn = np.rint(rng.normal(length.mean, length.stddev, size=count))
    return [int(n) for n in np.clip(drawn, 1, length.longest)]


def shared_prefix_token_ids(
    workload: SharedPrefixWorkload,
    count: int,
    first: int,
    seed: int,
    suffix_seed: int,
    id_range: tuple[int, int],
) -> tuple[list[list[int]], list[int], list[int]]:
    """Requests `first` .. `first + count - 1` of the run: prompts, their lengths and their
    output lengths. The prefixes depend on `seed` alone (the same in every cell of a run, so a
    cache can hold them); request i takes prefix i mod groups."""
    low, high = id_range
    prefixes = np.random.default_rng(seed).integers(
        low, high, size=(workload.groups, workload.prefix_tokens)
    )
    rng = np.random.default_rng(suffix_seed)
    suffixes = draw_lengths(workload.suffix_tokens, count, rng)
    outputs = draw_lengths(workload.output_tokens, count, rng)
    prompts = [
        prefixes[(first + i) % workload.groups].tolist() + rng.integers(low, high, n).tolist()
        for i, n in enumerate(suffixes)
    ]
    return prompts, [workload.prefix_tokens + n for n in suffixes], outputs


@dataclass(frozen=True)
class Planned:
    """The requests of one cell (or the warm-up): bodies and the lengths each asked for."""

    bodies: list[bytes]
    input_lens: list[int | None]
    output_lens: list[int]


class Prompts:
    """Where a run's requests come from: its workload (harness.workload), planned cell by cell.

    Dataset lines are taken in turn across cells; generated prompts are seeded per cell, and a
    shared-prefix workload's prefixes are the same in every cell of the run.
    """

    def __init__(
        self,
        config: BenchmarkConfig,
        vocab_size: int | None,
        dataset: list[DatasetEntry] | None,
        provenance: DatasetProvenance | None = None,
    ) -> None:
        self._config = config
        self._workload = config.resolved_workload
        if isinstance(self._workload, DatasetWorkload) and dataset is None:
            raise ValueError("a dataset workload needs its entries (harness.dataset)")
        self._vocab_size = vocab_size
        self._id_range = token_id_range(vocab_size)
        self._dataset = dataset
        self._provenance = provenance
        self._taken = 0

    @property
    def provenance(self) -> DatasetProvenance | None:
        """The dataset, with the distinct lines taken so far."""
        if self._provenance is None or self._dataset is None:
            return self._provenance
        used = min(self._taken, len(self._dataset))
        return self._provenance.model_copy(update={"rows_used": used})

    def _body(self, prompt: str | list[int] | Messages, out: int) -> bytes:
        return build_body(self._config.endpoint, self._config.model, prompt, out)

    def plan(self, count: int, seed: int) -> Planned:
        config, workload = self._config, self._workload
        text = config.resolved_prompt_kind == "text"
        if isinstance(workload, DatasetWorkload):
            assert self._dataset is not None
            entries = take(self._dataset, self._taken, count)
            self._taken += count
            default = workload.output_tokens or config.output_len
            outs = [e.output_len or default for e in entries]
            bodies = [self._body(e.request_prompt(), n) for e, n in zip(entries, outs, strict=True)]
            return Planned(bodies, [None] * count, outs)
        if isinstance(workload, SharedPrefixWorkload):
            ids, lengths, outs = shared_prefix_token_ids(
                workload, count, self._taken, config.seed, seed, self._id_range
            )
            self._taken += count
            bodies = [
                self._body(as_text(p) if text else p, n) for p, n in zip(ids, outs, strict=True)
            ]
            return Planned(bodies, list(lengths), outs)
        assert isinstance(workload, RandomWorkload)
        if isinstance(workload.prompt_tokens, int) and isinstance(workload.output_tokens, int):
            # fixed lengths: the prompts every earlier run of this seed sent
            fixed_in, fixed_out = workload.prompt_tokens, workload.output_tokens
            prompts: list[str] | list[list[int]] = (
                text_prompts(count, fixed_in, seed)
                if text
                else token_id_prompts(count, fixed_in, seed, self._vocab_size)
            )
            bodies = [self._body(p, fixed_out) for p in prompts]
            return Planned(bodies, [fixed_in] * count, [fixed_out] * count)
        rng = np.random.default_rng(seed)
        lengths = draw_lengths(workload.prompt_tokens, count, rng)
        outs = draw_lengths(workload.output_tokens, count, rng)
        low, high = self._id_range
        ids = [rng.integers(low, high, n).tolist() for n in lengths]
        bodies = [self._body(as_text(p) if text else p, n) for p, n in zip(ids, outs, strict=True)]
        return Planned(bodies, list(lengths), outs)
