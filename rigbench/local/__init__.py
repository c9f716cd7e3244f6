"""Local mode: the sweep's control plane on an embedded AWS emulation, instances as processes.

- `home`: where local state lives (`$RIGBENCH_HOME`, else `./.rigbench`).
- `procs`: process groups with pidfiles, so nothing outlives a run (`watchdog` covers SIGKILL).
- `fleet`: instance ids mapped to workspaces and rig processes; SSM commands run as subprocesses.
- `persist`: emulated DynamoDB tables and S3 objects saved to and restored from disk.
"""
