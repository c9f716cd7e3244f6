"""Cross-boot analysis: each boot's values in; comparisons, verdicts, sequential looks,
regressions' statistics and output agreement out. Pure functions and pydantic models (no
terminal, command line or plots: the views are rigbench's), so the Lambda functions that judge
a sweep (Summarize, DecideRound, Report) and the CLI share it.

metrics: the one metric table (`MetricSpec`), which every consumer reads; stats: Welch's test
on log boot values, Holm, intervals; sequential: alpha spending for boots in rounds;
boot_values: each boot's values from its report and its start; compare: the `Comparison` and
its words; capacity: each rig's capacity line; agreement: do the rigs compute the same thing.
It reads the harness's report models (harness.schemas), never the other way.
"""
