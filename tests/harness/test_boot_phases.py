"""A boot's phases, its start cost, the price an instance paid, and time to ready compared as
any metric (harness.boot_phases, functions.price_paid, analysis.compare)."""

import pytest

from analysis.boot_values import START_CELL, values_from_timings
from analysis.compare import compare, ratio_words
from analysis.metrics import metric_spec
from analysis.stats import Verdict
from functions.price_paid import mean_price
from harness.boot_phases import (
    PHASES,
    BootTiming,
    WarmStart,
    mean_warm_ready_s,
    phases_since_launch,
    startup_usd,
    warm_ready_s,
)
from harness.gpu_sampler import GpuSampler
from harness.restart import restart_rig

LAUNCH = 1_000.0


def test_phases_are_seconds_since_launch_in_order_and_absent_when_unrecorded() -> None:
    phases = phases_since_launch(
        LAUNCH,
        launch_requested=LAUNCH - 0.4,
        install_phases={"starting": LAUNCH + 30, "booting": LAUNCH + 12, "serving": LAUNCH + 31},
        agent_online=LAUNCH + 20,
        rig_marks={"loading": LAUNCH + 32, "ready": LAUNCH + 95.5, "compiled": LAUNCH + 90},
        bench_started=LAUNCH + 101,
    )
    assert phases == {
        "launch_requested": -0.4,
        "running": 12.0,  # the first status-file entry: the instance runs its user data
        "agent_online": 20.0,
        "install_done": 30.0,
        "compiled": 90.0,
        "ready": 95.5,
        "bench_started": 101.0,
    }
    assert list(phases) == [p for p in PHASES if p in phases]
    assert phases_since_launch(LAUNCH) == {}


def test_start_up_cost_is_the_seconds_before_ready_at_the_price_paid() -> None:
    assert startup_usd(180.0, 2.0) == pytest.approx(0.1)
    assert startup_usd(None, 2.0) is None
    assert startup_usd(180.0, None) is None


def test_a_warm_start_is_timed_from_the_restart_to_the_new_process_s_ready() -> None:
    assert warm_ready_s({"loading": 101.0, "ready": 124.5}, 100.0) == 24.5
    assert warm_ready_s({"loading": 101.0}, 100.0) is None
    assert warm_ready_s({"ready": 99.0}, 100.0) is None  # the process before the restart
    starts = [
        WarmStart(requested_at=1, ready_s=20.0),
        WarmStart(requested_at=2, error="x"),
        WarmStart(requested_at=3, ready_s=30.0),
    ]
    assert mean_warm_ready_s(starts) == 25.0
    assert mean_warm_ready_s([]) is None


def test_a_row_without_phases_reads_as_an_empty_timing() -> None:
    assert BootTiming.of_row({"rig": "torch"}) == BootTiming()
    timing = BootTiming(phases={"ready": 3.0}, ready_s=3.0, warm_ready_s=1.5)
    assert BootTiming.of_row(timing.row_fields()) == timing


@pytest.mark.parametrize(
    ("changes", "start", "end", "paid"),
    [
        ([(0.0, 1.0)], 10.0, 20.0, 1.0),
        ([(0.0, 1.0), (50.0, 3.0)], 0.0, 100.0, 2.0),  # half the life at each price
        ([(0.0, 9.0), (5.0, 1.0), (75.0, 5.0)], 25.0, 125.0, 3.0),  # 9.0 ended before launch
        ([(50.0, 2.0)], 0.0, 100.0, 2.0),  # the first known price stands for before it too
        ([(0.0, 1.0), (10.0, 4.0)], 20.0, 20.0, 4.0),  # no time: the price in force then
        ([], 0.0, 100.0, None),
    ],
)
def test_the_price_paid_is_weighted_by_how_long_each_price_held(
    changes: list[tuple[float, float]], start: float, end: float, paid: float | None
) -> None:
    assert mean_price(changes, start, end) == (None if paid is None else pytest.approx(paid))


def test_time_to_ready_reads_in_its_own_words() -> None:
    spec = metric_spec("ready_s")
    assert ratio_words(2.1, spec.name, spec) == "ready 2.1x later"
    assert ratio_words(1.9, spec.name, spec) == "ready 90% later"  # under 2x: as every metric
    assert ratio_words(0.8, spec.name, spec) == "ready 20% sooner"
    assert ratio_words(2.1, "TTFT") == "2.1x higher TTFT"


def test_time_to_ready_is_compared_across_rigs_with_a_verdict() -> None:
    def timing(ready: float) -> BootTiming:
        return BootTiming(ready_s=ready, startup_usd=ready / 3600)

    timings = {
        "jax": [timing(100.0), timing(101.0), timing(99.0)],
        "torch": [timing(210.0), timing(212.0), timing(209.0)],
    }
    values = values_from_timings(timings)
    assert set(values["jax"][START_CELL]) == {"ready_s", "startup_usd"}  # no restarts: no warm
    comparison = compare(values, baseline="jax")
    (cell,) = comparison.cells
    ready = next(m for m in cell.metrics if m.metric.key == "ready_s")
    torch = next(r for r in ready.results if r.rig == "torch")
    assert torch.verdict is Verdict.SLOWER
    assert torch.words == "ready 2.1x later (worse)"
    assert ready.ranking == "jax > torch"
    assert values_from_timings({"jax": [None, BootTiming()]}) == {}


def test_a_machine_without_nvml_says_why_nothing_was_sampled() -> None:
    sampler = GpuSampler()
    sampler.start()
    usage = sampler.stop()
    try:
        import pynvml  # noqa: F401
    except ImportError:
        assert usage.available is False
        assert usage.reason == "no NVML binding installed (pip install nvidia-ml-py)"
        assert usage.per_token(100) == usage  # no energy: no J/token
    else:  # a machine with the binding: a GPU sampled, or the driver's own reason
        assert usage.available or usage.reason


@pytest.mark.slow  # it runs the command
def test_a_restart_command_that_fails_gives_no_warm_time_and_says_why() -> None:
    warm = restart_rig("http://127.0.0.1:9", "echo no unit >&2; exit 5", timeout_s=5)
    assert warm.ready_s is None
    assert warm.error == "restart command 'echo no unit >&2; exit 5' exited 5: no unit"
