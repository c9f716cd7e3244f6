"""Local mode's infrastructure: the sweep's control plane on an embedded AWS emulation,
instances as processes. Below the stack client; the commands are in `rigbench.commands`.

- `home`: where local state lives (`$RIGBENCH_HOME`, else `./.rigbench`).
- `procs`: process groups with pidfiles, so nothing outlives a run (`watchdog` covers SIGKILL;
  the next run reaps what a dead run left).
- `fleet`: the emulation's `Fleet`: instance ids mapped to workspaces and rig processes,
  SSM commands run there; quota and price from `emulated` (the emulated account's figures).
- `persist`: emulated DynamoDB tables and S3 objects saved to and restored from disk.
- `session`: one run: emulation + fleet + saved state, cleaned up however it ends.
- `executions`: execution descriptions and histories saved for later `status --local`.
`rigbench.stack.local.LocalStack` is the stack client over all of this.
"""
