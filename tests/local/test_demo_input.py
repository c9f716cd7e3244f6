"""`rigbench demo`'s input is valid for every rig there is (`make sweep` runs it first)."""

from rigbench.commands.local_sweep import demo_input
from rigbench.stack import parse_sweep
from rigs.registry import discover


def test_the_demo_of_every_rig_fits_the_input_rules_and_the_history_cap() -> None:
    rigs = sorted(discover())
    assert len(rigs) >= 3  # torch, jax, vllm: the most a machine with a GPU serves
    parsed = parse_sweep(demo_input(rigs))
    assert parsed.rigs == rigs
    assert parsed.history_events() <= 25_000  # Step Functions' cap on an execution's history
