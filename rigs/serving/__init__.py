"""The OpenAI-compatible HTTP layer shared by rigs that have no server of their own."""
