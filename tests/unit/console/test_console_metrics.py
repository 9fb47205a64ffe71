"""The metrics page's arithmetic: totals and request-time buckets parsed from a node's
exposition, summed over nodes, rates per second and the p99 over each interval (not
since the node started)."""

from __future__ import annotations

import math

import pytest

from riverbed.console import metrics_view as m

EXPOSITION = """\
# HELP kafka_server_brokertopicmetrics_messagesin_total Records appended by produce
# TYPE kafka_server_brokertopicmetrics_messagesin_total counter
kafka_server_brokertopicmetrics_messagesin_total{topic="a"} 70.0
kafka_server_brokertopicmetrics_messagesin_total{topic="b"} 30.0
kafka_server_brokertopicmetrics_messagesin_total 100.0
# HELP kafka_server_brokertopicmetrics_bytesin_total Bytes appended
# TYPE kafka_server_brokertopicmetrics_bytesin_total counter
kafka_server_brokertopicmetrics_bytesin_total 5000.0
# HELP kafka_server_replicamanager_isrshrinks_total ISR shrinks
# TYPE kafka_server_replicamanager_isrshrinks_total counter
kafka_server_replicamanager_isrshrinks_total 2.0
# HELP kafka_network_requestmetrics_totaltimems Request time
# TYPE kafka_network_requestmetrics_totaltimems histogram
kafka_network_requestmetrics_totaltimems_bucket{request="Produce",le="5.0"} 8.0
kafka_network_requestmetrics_totaltimems_bucket{request="Produce",le="50.0"} 10.0
kafka_network_requestmetrics_totaltimems_bucket{request="Produce",le="+Inf"} 10.0
kafka_network_requestmetrics_totaltimems_sum{request="Produce"} 90.0
kafka_network_requestmetrics_totaltimems_count{request="Produce"} 10.0
"""


def test_parse_takes_all_topic_totals_and_buckets() -> None:
    s = m.parse(EXPOSITION, 1.0)
    assert s.totals["messages_in"] == 100.0  # not 200: per-topic samples left out
    assert s.totals["bytes_in"] == 5000.0
    assert s.totals["isr_shrinks"] == 2.0
    assert s.totals["bytes_out"] == 0.0
    assert s.latency == {"Produce": {5.0: 8.0, 50.0: 10.0, math.inf: 10.0}}


def test_combine_sums_the_nodes() -> None:
    one = m.parse(EXPOSITION, 1.0)
    both = m.combine([one, one], 2.0)
    assert both.totals["messages_in"] == 200.0
    assert both.latency["Produce"][50.0] == 20.0


def test_quantile_interpolates_inside_its_bucket() -> None:
    assert m.quantile(0.99, {1.0: 0.0, 5.0: 10.0, 10.0: 10.0, math.inf: 10.0}) == pytest.approx(
        4.96
    )
    assert m.quantile(0.5, {1.0: 0.0, math.inf: 5.0}) == 1.0  # +Inf answers its lower bound
    assert m.quantile(0.99, {1.0: 0.0, math.inf: 0.0}) is None
    assert m.quantile(0.99, {}) is None


def test_a_point_is_the_interval_not_the_lifetime() -> None:
    fast = {5.0: 1000.0, 50.0: 1000.0, math.inf: 1000.0}
    slow_since = {5.0: 1000.0, 50.0: 1010.0, math.inf: 1010.0}
    prev = m.Scrape(10.0, dict.fromkeys(m._TOTALS.values(), 0.0), {"Produce": fast})
    totals = {**prev.totals, "messages_in": 400.0, "isr_expands": 3.0}
    cur = m.Scrape(12.0, totals, {"Produce": slow_since})
    p = m.point(prev, cur)
    assert p.rates["messages_in"] == 200.0  # per second over the 2 s
    assert p.rates["isr_expands"] == 3.0  # per interval
    # the 10 requests of the interval took 5..50 ms; over the lifetime the p99 is ~5 ms
    assert p.p99_ms["Produce"] == pytest.approx(5 + 45 * 9.9 / 10)
    assert p.requests["Produce"] == 10.0


def test_history_is_bounded_and_charts_the_busiest_requests() -> None:
    h = m.MetricsHistory()
    zero = dict.fromkeys(m._TOTALS.values(), 0.0)
    for i in range(m.SAMPLES_MAX + 5):
        buckets = {
            f"R{k}": {1.0: float(i * (k + 1)), math.inf: float(i * (k + 1))}
            for k in range(m.REQUEST_TYPES_SHOWN_MAX + 2)
        }
        h.add(m.Scrape(float(i), zero, buckets))
    data = h.as_json()
    assert len(data["t"]) == m.SAMPLES_MAX  # type: ignore[arg-type]
    shown = set(data["p99_ms"])  # type: ignore[arg-type]
    assert len(shown) == m.REQUEST_TYPES_SHOWN_MAX
    assert "R0" not in shown and "R1" not in shown  # the two least busy


def test_a_scrape_reads_the_whole_exposition_however_many_chunks() -> None:
    """A node's exposition is hundreds of KiB once every request type has its stage
    histograms: the scrape must read to the end, not the first chunk that arrived."""
    import asyncio

    import aiohttp
    from aiohttp import web

    topics = "".join(
        f'kafka_server_brokertopicmetrics_messagesin_total{{topic="t{i}"}} 1.0\n'
        for i in range(20_000)
    )
    body = EXPOSITION.replace("# HELP kafka_server_brokertopicmetrics_bytesin", topics + "# HELP kafka_server_brokertopicmetrics_bytesin", 1)  # fmt: skip
    assert len(body) > 10 * m.SCRAPE_CHUNK_BYTES

    async def main() -> m.Scrape:
        async def metrics(_request: web.Request) -> web.StreamResponse:
            resp = web.StreamResponse()
            await resp.prepare(_request)
            for i in range(0, len(body), 4096):  # as a slow node sends it
                await resp.write(body[i : i + 4096].encode())
                await asyncio.sleep(0)
            await resp.write_eof()
            return resp

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        try:
            async with aiohttp.ClientSession() as session:
                return await m.scrape_one(session, f"http://127.0.0.1:{port}/metrics", 1.0)
        finally:
            await runner.cleanup()

    scrape = asyncio.run(main())
    assert scrape.totals["messages_in"] == 100.0
    assert scrape.latency["Produce"][math.inf] == 10.0
