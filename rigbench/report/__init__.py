"""Sweep reports people would rather look at: one self-contained HTML file per sweep (or per
rig over time), with the comparison in the terminal table's words, plots and cost per token.

data: gather a sweep from the results table, ledger, bucket and execution; analysis: the
figures' numbers; figures: plotly figures; sweep / trend: the pages; html: the template;
cli: the `rigbench report` command.
"""
