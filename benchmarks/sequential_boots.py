"""Boots until decided: the stopping rule's error rate and the boots it spends, against
fixed-n designs.

    PYTHONPATH=$PWD python -m benchmarks.sequential_boots [--trials 10000] [--cap 10]
        [--first 2] [--looks 3,5,10]

Simulated boots as in `benchmarks/verdict_calibration.py`: lognormal around 1 with a 10%
boot-to-boot spread (sigma of the log 0.1); rig B is `ratio` x rig A (lower is better). One
comparison, `analysis.stats.difference` (Welch's t-test on log boot values) at each look.

Designs:
- fixed n: n boots per rig, one test at 5%;
- sequential (analysis/sequential.py): looks after the first round of `--first` boots per rig
  and after each further boot per rig up to `--cap` (or at `--looks`); each look tests at its
  alpha-spending increment; the sweep stops at the first look that decides (a significant
  difference) or at the cap, which then reports no difference.

Per ratio: "decided" is the share of trials that called a difference (at ratio 1.0: the error
rate; above: the power, counting only the right direction), and "boots" the mean boots per rig
spent. Monte Carlo error (two standard errors) is printed under the table.
"""

import argparse
import time

import numpy as np

from analysis.sequential import Spending, look_levels
from analysis.stats import ALPHA, difference

SPREAD = 0.1
RATIOS = (1.0, 1.1, 1.3, 2.0)
FIXED = (3, 5, 10)


def look_p_values(
    ratio: float, looks: list[int], trials: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Per trial and look: Welch's p-value, and whether B's centre came out above A's (the
    right direction when ratio > 1)."""
    cap = looks[-1]
    p = np.ones((trials, len(looks)))
    right = np.zeros((trials, len(looks)), dtype=bool)
    for trial in range(trials):
        a = rng.lognormal(0.0, SPREAD, cap)
        b = ratio * rng.lognormal(0.0, SPREAD, cap)
        for k, n in enumerate(looks):
            found = difference(b[:n], a[:n])
            p[trial, k] = 1.0 if found.p_value is None else found.p_value
            right[trial, k] = found.ratio is not None and found.ratio > 1
    return p, right


def sequential(
    p: np.ndarray, right: np.ndarray, looks: list[int], levels: list[float], ratio: float
) -> tuple[float, float]:
    """(share decided, mean boots per rig) of the stop-at-first-decision rule."""
    decides = p < np.asarray(levels)
    first = np.where(decides.any(axis=1), decides.argmax(axis=1), len(looks) - 1)
    stopped = decides[np.arange(len(p)), first]
    if ratio != 1.0:
        stopped &= right[np.arange(len(p)), first]
    boots = np.asarray(looks)[first]
    return float(stopped.mean()), float(boots.mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--first", type=int, default=2, help="boots per rig in the first round")
    parser.add_argument("--cap", type=int, default=10, help="max_boots_per_rig")
    parser.add_argument(
        "--looks", help="boots per rig at each look, e.g. 3,5,10 (default: every boot)"
    )
    parser.add_argument("--seed", type=int, default=26)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    if args.looks:
        looks = sorted({int(n) for n in args.looks.split(",")})
    else:
        looks = list(range(args.first, args.cap + 1))
    for n in FIXED:
        if n not in looks:
            raise SystemExit(f"fixed design n={n} is outside --first..--cap")
    started = time.perf_counter()
    results: dict[str, list[str]] = {}
    designs = [(f"fixed n={n}", n) for n in FIXED]
    spendings = [(f"sequential, {kind.value} spending", kind) for kind in Spending]
    for ratio in RATIOS:
        p, right = look_p_values(ratio, looks, args.trials, rng)
        for name, n in designs:
            k = looks.index(n)
            hit = p[:, k] < ALPHA
            if ratio != 1.0:
                hit &= right[:, k]
            results.setdefault(name, []).append(f"{hit.mean():.1%} / {n:.1f}")
        for name, kind in spendings:
            decided, boots = sequential(p, right, looks, look_levels(kind, looks), ratio)
            results.setdefault(name, []).append(f"{decided:.1%} / {boots:.1f}")
    elapsed = time.perf_counter() - started
    header = " | ".join(f"ratio {r:g}" for r in RATIOS)
    print(f"| design | {header} |")
    print("|---" * (len(RATIOS) + 1) + "|")
    for name, cells in results.items():
        print(f"| {name} | {' | '.join(cells)} |")
    error = 2 * np.sqrt(ALPHA * (1 - ALPHA) / args.trials)
    print(
        f"\neach cell: decided (ratio 1: false verdicts; above: right-way verdicts) / mean boots "
        f"per rig; looks at {looks[0]}..{looks[-1]} boots per rig; {args.trials} trials per "
        f"ratio, Monte Carlo error +-{error:.1%} at 5%, at most +-{1 / np.sqrt(args.trials):.1%}; "
        f"{elapsed:.0f} s"
    )


if __name__ == "__main__":
    main()
