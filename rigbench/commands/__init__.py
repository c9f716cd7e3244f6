"""Commands of local mode, above the stack client (`rigbench.stack`), which they drive.

- `local`: `rigbench demo`, and what `rigbench run/status/results/reap --local` call.
- `local_sweep`: the local sweep with its comparison table.
- `dry_run`: the cloud rehearsal's plan, printed.
- `regressions`: `rigbench regressions`, the alerts sweeps raised (`regression_table` draws
  them, also at the end of a local sweep).
`rigbench.cloud` holds the cloud commands; `rigbench.cli` assembles both.
"""
