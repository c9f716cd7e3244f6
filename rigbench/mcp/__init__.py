"""`rigbench mcp`: rigbench's sweeps as MCP tools, on the same stack client as the CLI
(the deployed stack or the embedded emulation), inside a spend ceiling fixed at start."""
