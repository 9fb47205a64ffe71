"""The metrics page: live charts of throughput, p99 latency per request type and ISR
changes, from the nodes' ``/metrics`` given with ``--metrics-url`` (see
`riverbed.console.metrics_view`). The page polls ``/cluster-metrics/data`` every 2 s;
each poll scrapes every node once.
"""

from __future__ import annotations

import time

from aiohttp import web

from riverbed.console import metrics_view
from riverbed.console.app import Routes, console_of


def add_routes(router: Routes) -> None:
    router.add_get("/cluster-metrics", page)
    router.add_get("/cluster-metrics/data", data)


async def page(request: web.Request) -> web.Response:
    console = console_of(request)
    return console.render(request,
        "metrics.html", page="metrics", urls=console.metrics_urls,
        samples_max=metrics_view.SAMPLES_MAX,
    )  # fmt: skip


async def data(request: web.Request) -> web.Response:
    """{"t": [...], "messages_in": [...], ..., "p99_ms": {request: [...]}, "errors": [...]}.
    A scrape in which a node failed is not charted (its sum would dip), only reported."""
    console = console_of(request)
    if not console.metrics_urls:
        return web.json_response({"errors": ["no --metrics-url given"], "t": []})
    scrape, errors = await metrics_view.scrape_all(console.metrics_urls, time.time())
    if not errors:
        console.metrics.add(scrape)
    return web.json_response({**console.metrics.as_json(), "errors": errors})
