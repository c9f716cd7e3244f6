"""harness_ceiling's per-level table: medians over the runs, the tools side by side."""

from benchmarks.harness_ceiling import Level, median_line


def level(
    tool: str, c: int, ttft: float, itl: float, in_flight: float, warned: bool | None = None
) -> Level:
    # The server kept TTFT 20 ms and gaps of 5 ms; the errors are ttft - 20 and itl - 5.
    return Level(
        tool, c, 2 * c, 2 * c, 0, 1000.0, ttft, itl, 20.0, 5.0, 1.0,
        achieved_concurrency=in_flight, warned=warned,
    )  # fmt: skip


def test_median_line_puts_both_tools_side_by_side() -> None:
    rigbench = [
        level("rigbench", 16, 20.1, 5.0, in_flight=15.0, warned=False),
        level("rigbench", 16, 20.3, 5.1, in_flight=16.0, warned=False),
        level("rigbench", 16, 29.0, 0.0, in_flight=12.0, warned=False),
        level("rigbench", 32, 20.0, 5.0, in_flight=31.0, warned=True),
    ]
    guidellm = [level("guidellm", 16, 24.0, 5.2, in_flight=14.0)]
    line = median_line(16, {"rigbench": rigbench, "guidellm": guidellm})
    assert line == (
        "c=  16 | rigbench: failed 0, in flight 15.0, TTFT +0.30 ITL +0.00 ms, sustained 2/3, "
        "warning fired 0/3 right 2/3 | guidellm: failed 0, in flight 14.0, TTFT +4.00 ITL "
        "+0.20 ms, sustained 0/1"
    )
    assert median_line(64, {"rigbench": rigbench, "guidellm": guidellm}) == (
        "c=  64 | rigbench: not reached | guidellm: not reached"
    )
