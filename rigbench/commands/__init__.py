"""Commands of local mode and those every mode shares, above the stack client
(`rigbench.stack`), which they drive.

- `local`: `rigbench demo`, and what `rigbench run/status/results/reap --local` call.
- `local_sweep`: the local sweep with its comparison table.
- `dry_run`: the cloud rehearsal's plan, printed.
- `regressions`: `rigbench regressions`, the alerts sweeps raised (`regression_table` draws
  them, also at the end of a local sweep).
- `report`: `rigbench report` and `rigbench compare`, over the pages of `rigbench.report`.
- `stack_choice`: which stack a command works on (`open_stack`) and how it fails (`fail`).
`rigbench.cloud` holds the cloud commands, `rigbench.bake` the bake and `rigbench.mcp` the MCP
server, all above these; `rigbench.cli` assembles them.
"""
