"""rigbench: apples-to-apples benchmarks of LLM serving runtimes."""


def version() -> str:
    """The package version and the hash of the harness code (`harness.version`)."""
    from harness.version import harness_version

    return harness_version()
