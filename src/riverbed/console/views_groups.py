"""Consumer group pages: the list, one group (members, assignment, lag per partition and
a lag chart fed by ``/group/lag``), and offset resets: the form posts a dry run, whose
page shows every partition's current and new offset and a button naming what it will
commit; only that second post (with the group's id as confirmation) changes offsets.

Group ids may hold any character, so they travel in the query string (``?id=``), not
in the path.
"""

from __future__ import annotations

import json

from aiohttp import web

from riverbed.console import groups
from riverbed.console.admin import ConsoleError
from riverbed.console.app import Routes, admin_of, console_of, form_of
from riverbed.console.browse import parse_time_ms


def add_routes(router: Routes) -> None:
    router.add_get("/groups", group_list)
    router.add_get("/group", group)
    router.add_get("/group/lag", lag)
    router.add_post("/group/reset", reset)


def _group_id(values: dict[str, str] | web.Request) -> str:
    source = values.query if isinstance(values, web.Request) else values
    group_id = source.get("id", "")
    if not group_id:
        raise ConsoleError(400, "give the group's id: ?id=GROUP")
    return group_id


async def group_list(request: web.Request) -> web.Response:
    console = console_of(request)
    rows = await console.call(groups.list_groups, admin_of(request))
    return console.render(request, "groups.html", page="groups", groups=rows)


async def group(request: web.Request) -> web.Response:
    console = console_of(request)
    group_id = _group_id(request)
    view = await console.call(groups.describe, admin_of(request), group_id)
    console.lag.add(group_id, view.total_lag)
    return console.render(
        request, "group.html", page="groups", view=view, strategies=groups.RESET_STRATEGIES,
        reset_done=request.query.get("reset"),
    )  # fmt: skip


async def lag(request: web.Request) -> web.Response:
    """The lag chart's data: {"t": [seconds], "lag": [total lag]}, one sample added."""
    console = console_of(request)
    group_id = _group_id(request)
    view = await console.call(groups.describe, admin_of(request), group_id)
    samples = console.lag.add(group_id, view.total_lag)
    return web.json_response(
        {
            "group": group_id,
            "state": view.state,
            "t": [t for t, _ in samples],
            "lag": [n for _, n in samples],
        }
    )


def _value(strategy: str, form: dict[str, str]) -> int:
    raw = form.get("value", "").strip()
    if strategy in ("earliest", "latest"):
        return 0
    if strategy == "timestamp":
        return parse_time_ms(raw)
    try:
        return int(raw)
    except ValueError:
        raise ConsoleError(400, f"{strategy} needs a whole number, not {raw!r}") from None


async def reset(request: web.Request) -> web.Response:
    console = console_of(request)
    form = await form_of(request)
    group_id = _group_id(form)
    strategy = form.get("strategy", "")
    if strategy not in groups.RESET_STRATEGIES and form.get("action") != "execute":
        raise ConsoleError(400, f"strategy must be one of {', '.join(groups.RESET_STRATEGIES)}")
    if form.get("action") == "execute":
        return await _execute(request, group_id, form)
    value = _value(strategy, form)
    topic = form.get("topic", "").strip()
    view = await console.call(groups.describe, admin_of(request), group_id)
    plan = await console.call(groups.plan_reset, admin_of(request), view, strategy, topic, value)
    return console.render(
        request, "reset.html", page="groups", view=view, plan=plan, strategy=strategy,
        value=form.get("value", ""), topic=topic,
        plan_json=json.dumps([[r.topic, r.partition, r.new] for r in plan]),
    )  # fmt: skip


def parse_plan(text: str) -> list[groups.ResetRow]:
    """The dry run's plan as posted back: [[topic, partition, new offset], ...]."""
    try:
        rows = json.loads(text)
        plan = [groups.ResetRow(str(t), int(p), None, int(off)) for t, p, off in rows]
    except (ValueError, TypeError):
        raise ConsoleError(400, "malformed reset plan: run the dry run again") from None
    if not plan or len(plan) > groups.RESET_PARTITIONS_MAX:
        raise ConsoleError(400, f"a reset plan needs 1..{groups.RESET_PARTITIONS_MAX} partitions")
    return plan


async def _execute(request: web.Request, group_id: str, form: dict[str, str]) -> web.Response:
    """Commit exactly the plan the dry run showed (not a new one: the log moved since)."""
    console = console_of(request)
    if form.get("confirm") != group_id:
        raise ConsoleError(400, f"not reset: confirm with the group's id {group_id!r}")
    plan = parse_plan(form.get("plan", ""))
    await console.call(groups.execute_reset, admin_of(request), group_id, plan)
    quoted = console.templates.filters["q"](group_id)
    raise web.HTTPSeeOther(f"/group?id={quoted}&reset={len(plan)}")
