"""How often the comparison's verdicts are wrong, and how often they find a real difference.

    PYTHONPATH=$PWD python -m benchmarks.verdict_calibration [--trials 4000] [--sweeps 400]

Simulated boots, per number of boots per rig from 2 to 10: each boot's value is lognormal
around 1 with a 10% boot-to-boot spread (sigma of the log 0.1); "heavy tails" makes one boot in
ten (each boot independently, probability 0.1) 1.5x slow on top. Per comparison: two rigs
drawn from one distribution (A/A) through `analysis.stats.verdict`, counting any verdict other
than indistinguishable / no verdict possible as false; and a rig 1.5x slower (power: the
share called, and called the right way round). Per sweep: two rigs, the default metrics (11) x
2 cells = 22 comparisons through `analysis.compare.compare` (Holm across the 22); an A/A sweep is
wrong when it reports any difference, and power is the share of the 22 real 1.5x differences it
called. Each figure is a share of trials: its Monte Carlo error (two standard errors) is printed
under the table.
"""

import argparse
import time
from collections.abc import Callable

import numpy as np

from analysis.compare import compare
from analysis.metrics import Direction, default_metrics
from analysis.stats import Verdict, verdict

SPREAD = 0.1  # sigma of log boot values: 10% boot-to-boot spread
SLOW_SHARE, SLOW_BY = 0.1, 1.5  # heavy tails: one boot in ten 1.5x slow
RATIO = 1.5  # the real difference whose detection is the power
CELLS = ("c=1", "c=4")
BOOTS = range(2, 11)

Draw = Callable[[np.random.Generator, int], np.ndarray]


def boot_draws(heavy: bool) -> Draw:
    def draw(rng: np.random.Generator, n: int) -> np.ndarray:
        values = rng.lognormal(0.0, SPREAD, n)
        if heavy:
            values = values * np.where(rng.random(n) < SLOW_SHARE, SLOW_BY, 1.0)
        return values

    return draw


def comparison_rate(
    n: int, trials: int, rng: np.random.Generator, draw: Draw, ratio: float = 1.0
) -> float:
    """The share of single comparisons (B = ratio x A's distribution, lower is better) in
    which `verdict` called A faster when ratio > 1, or called anything when ratio == 1."""
    hits = 0
    for _ in range(trials):
        judged = verdict(draw(rng, n), ratio * draw(rng, n), Direction.LOWER_IS_BETTER)
        if ratio == 1.0:
            hits += judged in (Verdict.FASTER, Verdict.SLOWER)
        else:
            hits += judged is Verdict.FASTER
    return hits / trials


def sweep_rates(
    n: int, sweeps: int, rng: np.random.Generator, draw: Draw, ratio: float = 1.0
) -> float:
    """A/A (ratio 1): the share of sweeps that reported any difference. Otherwise: the mean
    share of the sweep's 22 real differences it called, the right way round."""
    found = 0.0
    for _ in range(sweeps):
        values = {
            rig: {
                cell: {metric: list(scale * draw(rng, n)) for metric in default_metrics()}
                for cell in CELLS
            }
            for rig, scale in (("a", 1.0), ("b", ratio))
        }
        # b is the "slow" rig on every metric: for throughput (higher is better) invert it.
        for cell in CELLS:
            for rig in ("a", "b"):
                series = values[rig][cell]["output_tok_s"]
                values[rig][cell]["output_tok_s"] = [1 / v for v in series]
        comparison = compare(values, baseline="b")
        judged = [m.results[0].verdict for c in comparison.cells for m in c.metrics]
        if ratio == 1.0:
            found += any(v in (Verdict.FASTER, Verdict.SLOWER) for v in judged)
        else:
            found += sum(v is Verdict.FASTER for v in judged) / len(judged)
    return found / sweeps


def table(trials: int, sweeps: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    normal, heavy = boot_draws(False), boot_draws(True)
    comparisons = len(default_metrics()) * len(CELLS)
    lines = [
        "| boots per rig | A/A verdicts per comparison | same, heavy tails | power at 1.5x "
        "per comparison | same, heavy tails | A/A sweeps with any verdict | same, heavy tails "
        f"| power at 1.5x per sweep (share of its {comparisons} differences called) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for n in BOOTS:
        row = [
            comparison_rate(n, trials, rng, normal),
            comparison_rate(n, trials, rng, heavy),
            comparison_rate(n, trials, rng, normal, RATIO),
            comparison_rate(n, trials, rng, heavy, RATIO),
            sweep_rates(n, sweeps, rng, normal),
            sweep_rates(n, sweeps, rng, heavy),
            sweep_rates(n, sweeps, rng, normal, RATIO),
        ]
        lines.append(f"| {n} | " + " | ".join(f"{v:.1%}" for v in row) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=4000, help="comparisons per figure")
    parser.add_argument("--sweeps", type=int, default=400, help="sweeps per figure")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    started = time.monotonic()
    print(
        f"lognormal boots, {SPREAD:.0%} spread; heavy tails: {SLOW_SHARE:.0%} of boots "
        f"{SLOW_BY}x slow; {args.trials} comparisons and {args.sweeps} sweeps (2 rigs x "
        f"{len(default_metrics())} metrics x {len(CELLS)} cells, Holm) per figure; seed {args.seed}"
    )
    for line in table(args.trials, args.sweeps, args.seed):
        print(line)
    for what, count in (("comparison", args.trials), ("sweep", args.sweeps)):
        error = 2 * (0.05 * 0.95 / count) ** 0.5
        print(f"Monte Carlo error of a 5% {what} figure: +-{error:.1%} (two standard errors)")
    print(f"({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
