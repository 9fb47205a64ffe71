"""Aborting an open transaction from the console (KIP-664, as ``kafka-transactions abort``
and ``riverbed transactions abort``): the partition leader writes an ABORT marker for the
producer whose transaction starts at the given offset, which releases the partition's
last stable offset. The confirmation page names the partition, the producer, its epoch and
the first offset, and the abort happens only when the partition (``topic-partition``) is
typed. It uses riverbed's wire client, connecting as the signed-in user (`run_secured`):
the cluster decides whether that principal may abort.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from riverbed.console.admin import ConsoleError
from riverbed.console.app import Routes, admin_of, console_of, form_of
from riverbed.console.browse import whole_number
from riverbed.console.wire_views import run_secured


def add_routes(router: Routes) -> None:
    router.add_get("/transactions/abort", confirm_abort)
    router.add_post("/transactions/abort", abort)


def _target(values: Any) -> tuple[str, int, int]:
    topic = values.get("topic", "")
    if not topic:
        raise ConsoleError(400, "give topic, partition and start_offset")
    partition = whole_number(values, "partition", -1)
    start = whole_number(values, "start_offset", -1)
    if partition < 0 or start < 0:
        raise ConsoleError(400, "give topic, partition and start_offset (whole numbers)")
    return topic, partition, start


def _open_transaction(
    conf: dict[str, Any], bootstrap: str, topic: str, partition: int, start: int
) -> dict[str, Any]:
    """The producer whose transaction starts at ``start`` (blocking; 404 when none)."""
    from riverbed.cli.common import CliError
    from riverbed.cli.producers import describe

    try:
        (row,) = run_secured(conf, describe, bootstrap, topic, [partition])
    except CliError as exc:
        raise ConsoleError(404, str(exc)) from None
    for p in row["producers"]:
        if p["current_txn_start_offset"] == start:
            return dict(p)
    raise ConsoleError(404, f"no open transaction starts at offset {start} of {topic}-{partition}")


async def confirm_abort(request: web.Request) -> web.Response:
    console = console_of(request)
    topic, partition, start = _target(request.query)
    conf = admin_of(request).conf
    producer = await console.call(
        _open_transaction, conf, console.bootstrap, topic, partition, start
    )
    return console.render(
        request, "abort.html", page="transactions", topic=topic, partition=partition,
        start=start, producer=producer,
    )  # fmt: skip


async def abort(request: web.Request) -> web.Response:
    from riverbed.cli.common import CliError
    from riverbed.cli.transactions import abort as abort_transaction

    console = console_of(request)
    form = await form_of(request)
    topic, partition, start = _target(form)
    if form.get("confirm") != f"{topic}-{partition}":
        raise ConsoleError(400, f"not aborted: type {topic}-{partition} to confirm")
    try:
        done = await console.call(
            run_secured, admin_of(request).conf, abort_transaction, console.bootstrap,
            topic, partition, start,
        )  # fmt: skip
    except CliError as exc:
        raise ConsoleError(409, f"not aborted: {exc}") from None
    raise web.HTTPSeeOther(f"/topics/{topic}?aborted={done['producer_id']}")
