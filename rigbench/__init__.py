"""rigbench: apples-to-apples benchmarks of LLM serving runtimes."""
