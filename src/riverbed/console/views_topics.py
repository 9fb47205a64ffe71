"""Topic pages: the list (records, partitions, health) with a create form, one topic's
partition table (leader, replicas, ISR, offsets) and configs with an alter form, and the
delete confirmation, which must be answered with the topic's name (as Redpanda Console
and AKHQ ask) before anything is deleted.
"""

from __future__ import annotations

from aiohttp import web

from riverbed.console.admin import ConsoleError
from riverbed.console.app import Routes, admin_of, console_of, form_of
from riverbed.console.browse import whole_number
from riverbed.console.wire_views import disk_use, topic_extras

#: Most partitions a topic may be created with from the console.
CREATE_PARTITIONS_MAX = 10_000
#: Longest topic name Kafka accepts (Topic.MAX_NAME_LENGTH).
TOPIC_NAME_CHARS_MAX = 249
_LEGAL = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def add_routes(router: Routes) -> None:
    router.add_get("/topics", topics)
    router.add_post("/topics", create)
    router.add_get("/topics/{topic}", topic)
    router.add_post("/topics/{topic}/configs", alter_configs)
    router.add_get("/topics/{topic}/delete", confirm_delete)
    router.add_post("/topics/{topic}/delete", delete)


def check_topic_name(name: str) -> str:
    """Kafka's Topic.validate: 1-249 characters of [a-zA-Z0-9._-], not "." or ".."."""
    if not name or name in (".", ".."):
        raise ConsoleError(400, "a topic name must not be empty, '.' or '..'")
    if len(name) > TOPIC_NAME_CHARS_MAX:
        raise ConsoleError(400, f"topic name is longer than {TOPIC_NAME_CHARS_MAX} characters")
    bad = sorted(set(name) - _LEGAL)
    if bad:
        raise ConsoleError(
            400, f"topic name {name!r} has illegal characters {''.join(bad)!r}: "
            "only ASCII letters, digits, '.', '_' and '-'",
        )  # fmt: skip
    return name


def parse_configs(text: str) -> dict[str, str]:
    """``key=value`` lines (blank lines ignored) -> dict; 400 for a line without '='."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise ConsoleError(400, f"config line {line.strip()!r} must have the form key=value")
        out[key.strip()] = value.strip()
    return out


async def topics(request: web.Request) -> web.Response:
    console = console_of(request)
    rows = await console.call(admin_of(request).topics)
    disks = await console.call(disk_use, console.bootstrap, admin_of(request).conf)
    show_internal = request.query.get("internal") == "1"
    shown = [t for t in rows if show_internal or not t.internal]
    return console.render(
        request, "topics.html", page="topics", topics=shown, show_internal=show_internal,
        topic_bytes=disks.topic_bytes,
        created=request.query.get("created"), deleted=request.query.get("deleted"),
    )  # fmt: skip


async def create(request: web.Request) -> web.Response:
    console = console_of(request)
    form = await form_of(request)
    name = check_topic_name(form.get("name", "").strip())
    partitions = whole_number(form, "partitions", -1)
    rf = whole_number(form, "replication_factor", -1)
    if partitions == 0 or partitions < -1 or partitions > CREATE_PARTITIONS_MAX:
        raise ConsoleError(
            400, f"partitions must be 1..{CREATE_PARTITIONS_MAX} (or empty for the default)"
        )
    if rf == 0 or rf < -1:
        raise ConsoleError(400, "replication factor must be at least 1 (or empty for the default)")
    configs = parse_configs(form.get("configs", ""))
    await console.call(admin_of(request).create_topic, name, partitions, rf, configs)
    raise web.HTTPSeeOther(f"/topics/{name}?created=1")


async def topic(request: web.Request) -> web.Response:
    console = console_of(request)
    name = request.match_info["topic"]
    row = await console.call(admin_of(request).topic, name)
    configs = await console.call(admin_of(request).topic_configs, name)
    extras = await console.call(topic_extras, console.bootstrap, admin_of(request).conf, name)
    return console.render(
        request, "topic.html", page="topics", topic=row, configs=configs, extras=extras,
        created=request.query.get("created"), altered=request.query.get("altered"),
        aborted=request.query.get("aborted"),
    )  # fmt: skip


async def alter_configs(request: web.Request) -> web.Response:
    console = console_of(request)
    name = request.match_info["topic"]
    form = await form_of(request)
    set_ = parse_configs(form.get("set", ""))
    delete = [k.strip() for k in form.get("delete", "").replace(",", "\n").splitlines() if k.strip()]  # fmt: skip
    if not set_ and not delete:
        raise ConsoleError(400, "nothing to change: give key=value lines to set or keys to delete")
    await console.call(admin_of(request).alter_topic_config, name, set_, delete)
    raise web.HTTPSeeOther(f"/topics/{name}?altered=1")


async def confirm_delete(request: web.Request) -> web.Response:
    console = console_of(request)
    row = await console.call(admin_of(request).topic, request.match_info["topic"])
    return console.render(request, "delete.html", page="topics", topic=row)


async def delete(request: web.Request) -> web.Response:
    console = console_of(request)
    name = request.match_info["topic"]
    form = await form_of(request)
    if form.get("confirm", "") != name:
        raise ConsoleError(
            400, f"not deleted: type the topic's name {name!r} to confirm its deletion"
        )
    await console.call(admin_of(request).delete_topic, name)
    raise web.HTTPSeeOther(f"/topics?deleted={name}")
