"""The message browser: search (a bounded server-side scan, `riverbed.console.browse`),
produce one record, and the live tail as server-sent events (`riverbed.console.tail`).

The search form works without JavaScript (a GET of the page); with htmx it replaces only
the results. Each tail event is ``event: record`` with the rendered table row as JSON
``{"html": ...}``; ``event: ready`` says the tail is assigned at the end of every
partition (``event: failed`` that it could not start, and why), ``event: dropped`` how many
records a slow browser lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

from aiohttp import web

from riverbed.console import browse, tail
from riverbed.console.admin import ConsoleError
from riverbed.console.app import Console, Routes, admin_of, console_of, form_of

#: Most headers one produced record may carry.
PRODUCE_HEADERS_MAX = 64


def add_routes(router: Routes) -> None:
    router.add_get("/topics/{topic}/messages", messages)
    router.add_post("/topics/{topic}/messages", produce)
    router.add_get("/topics/{topic}/tail", live_tail)


async def messages(request: web.Request) -> web.Response:
    console = console_of(request)
    name = request.match_info["topic"]
    query = dict(request.query)
    search = browse.parse_search(name, query)  # 400s before touching the cluster
    topic = await console.call(admin_of(request).topic, name)
    result = None
    if query.get("run") == "1":
        result = await console.call(browse.search, admin_of(request), search)
    template = "_results.html" if request.headers.get("HX-Request") else "messages.html"
    return console.render(
        request, template, page="topics", topic=topic, q=query, search=search, result=result,
        limits={"scan_max": browse.SCAN_RECORDS_MAX, "results_max": browse.RESULTS_MAX,
                "time_max_s": browse.SCAN_TIME_MAX_S},
        produced=query.get("produced"),
    )  # fmt: skip


def _headers(text: str) -> list[tuple[str, bytes]]:
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        name, sep, value = line.partition("=")
        if not sep or not name.strip():
            raise ConsoleError(400, f"header line {line.strip()!r} must have the form name=value")
        out.append((name.strip(), value.encode()))
    if len(out) > PRODUCE_HEADERS_MAX:
        raise ConsoleError(400, f"{len(out)} headers is above PRODUCE_HEADERS_MAX = {PRODUCE_HEADERS_MAX}")  # fmt: skip
    return out


async def produce(request: web.Request) -> web.Response:
    console = console_of(request)
    name = request.match_info["topic"]
    form = await form_of(request)
    raw_partition = form.get("partition", "").strip()
    try:
        partition = int(raw_partition) if raw_partition else None
    except ValueError:
        raise ConsoleError(
            400, f"partition must be a whole number, not {raw_partition!r}"
        ) from None
    key = form.get("key", "")
    headers = _headers(form.get("headers", ""))
    topic = await console.call(admin_of(request).topic, name)
    if partition is not None and partition not in {p.partition for p in topic.partitions}:
        raise ConsoleError(404, f"topic {name!r} has no partition {partition}")
    done = await console.call(
        admin_of(request).produce, name, partition, key.encode() if key else None,
        form.get("value", "").encode(), headers,
    )  # fmt: skip
    raise web.HTTPSeeOther(
        f"/topics/{name}/messages?produced={done.partition}:{done.offset}"
        f"&seek=offset&partition={done.partition}&offset={done.offset}&run=1"
    )


def _event(name: str, data: object) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


async def live_tail(request: web.Request) -> web.StreamResponse:
    console = console_of(request)
    name = request.match_info["topic"]
    filters = browse.parse_filters(
        request.query.get("key", ""), request.query.get("value", ""), request.query.get("header", "")
    )  # fmt: skip
    decode = request.query.get("decode", "auto")
    if decode not in browse.DECODINGS:
        raise ConsoleError(400, f"decode must be one of {', '.join(browse.DECODINGS)}")
    if console.tails_running >= tail.TAILS_MAX:
        raise ConsoleError(429, f"{tail.TAILS_MAX} live tails are running (TAILS_MAX): close one")
    topic = await console.call(admin_of(request).topic, name)
    console.tails_running += 1
    running = tail.Tail(admin_of(request), topic, filters, decode, asyncio.get_running_loop())
    try:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        running.start()
        with contextlib.suppress(ConnectionResetError):  # the browser went away
            await _stream(console, running, response)
        return response
    finally:
        console.tails_running -= 1
        await console.call(running.stop)


async def _stream(console: Console, running: tail.Tail, response: web.StreamResponse) -> None:
    row = console.templates.get_template("_row.html")
    deadline = time.monotonic() + tail.TAIL_SECONDS_MAX
    await running.ready.wait()
    if running.failed is not None:
        await response.write(_event("failed", {"error": running.failed}))
        return
    await response.write(_event("ready", {"topic": running.topic.name}))
    while time.monotonic() < deadline:
        try:
            item = await asyncio.wait_for(running.queue.get(), tail.TAIL_KEEPALIVE_S)
        except TimeoutError:
            await response.write(b": keepalive\n\n")
            continue
        if isinstance(item, tail.Dropped):
            await response.write(_event("dropped", {"count": item.count}))
        else:
            await response.write(_event("record", {"html": row.render(r=item)}))
