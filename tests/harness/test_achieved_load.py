"""A cell whose client could not keep its concurrency says so, in the report and the comparison:
its figures are of a lighter load than the cell's."""

import asyncio

import pytest

from analysis.boot_values import shortfalls_from_reports, values_from_reports
from analysis.compare import compare
from harness.backend import OpenAIBackend, build_body
from harness.load import run_concurrency
from harness.metrics import SHORTFALL, cell_report
from harness.schemas import CellReport, RequestRecord
from rigbench.report.terminal import render_text
from tests.harness.conftest import StartServer

pytestmark = pytest.mark.slow

ASKED = 8
CONNECTIONS = 2


class FewConnections(OpenAIBackend):
    """A client that holds at most CONNECTIONS connections, whatever the cell asks: a request
    waits for one before it is sent (queue wait, not latency)."""

    def __init__(self, url: str) -> None:
        super().__init__(url, "completions")
        self._free = asyncio.Semaphore(CONNECTIONS)

    async def generate(self, body: bytes, record: RequestRecord) -> None:
        async with self._free:
            await super().generate(body, record)


async def _cell(backend: OpenAIBackend, requests: int) -> CellReport:
    bodies = [build_body("completions", "reference", [5 + i] * 8, 16) for i in range(requests)]
    records: list[RequestRecord] = []

    def make(index: int, ready: float) -> RequestRecord:
        return RequestRecord(
            request_id=index, cell=0, input_len=8, output_len=16, ready_time=ready, send_time=ready
        )

    async with backend:
        await run_concurrency(backend, bodies, ASKED, make, records)
    return cell_report(records, concurrency=ASKED)


def test_a_client_with_fewer_connections_than_asked_is_marked(
    reference_server: StartServer,
) -> None:
    url = reference_server("--ttft-ms", "20", "--itl-ms", "5")
    limited = asyncio.run(_cell(FewConnections(url), 4 * ASKED))
    full = asyncio.run(_cell(OpenAIBackend(url, "completions"), 4 * ASKED))

    assert limited.requests_ok == 4 * ASKED
    assert limited.achieved_concurrency is not None
    assert limited.achieved_concurrency <= CONNECTIONS + 1e-9  # never more than it could hold
    assert limited.load_shortfall is not None
    assert f"of {ASKED} requests in flight" in limited.load_shortfall
    assert (limited.queue_wait_ms.p50 or 0.0) > 0  # they waited for a connection, not sent
    # The same cell with a connection per request: marked exactly when it fell short.
    assert full.achieved_concurrency is not None
    assert (full.load_shortfall is None) == (full.achieved_concurrency >= SHORTFALL * ASKED)

    reports = {
        rig: [{"cells": [cell.model_dump(mode="json")]}]
        for rig, cell in (("full", full), ("limited", limited))
    }
    comparison = compare(values_from_reports(reports), load_short=shortfalls_from_reports(reports))
    marked = comparison.cells[0].load_short
    assert [m.split(":")[0] for m in marked if m.startswith("limited")] == ["limited boot 1"]
    assert any(m.startswith("full") for m in marked) == (full.load_shortfall is not None)
    text = render_text(comparison, width=240)
    assert "load not reached" in text
    assert f"limited boot 1: {limited.achieved_concurrency:.1f} of {ASKED} requests" in text
