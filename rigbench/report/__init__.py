"""Sweep reports people would rather look at: one self-contained HTML file per sweep (or per
rig over time), with the comparison in the terminal table's words, plots and cost per token.

data: gather a sweep from the results table, ledger, bucket and execution; comparison: the
sweep's comparison, the one builder behind every view of it; analysis: the figures' numbers;
figures: plotly figures; sweep / trend: the pages; html: the template; writer: a page to a
file or the bucket; terminal: the comparison as a terminal table. The comparison itself, its
words and the metric table are analysis/'s. The `rigbench report` and `compare` commands are
`rigbench.commands.report`.
"""
