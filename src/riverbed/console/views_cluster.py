"""Cluster-wide pages: the overview (brokers, controller, quorum, partition health,
alerts), transactions (open and hanging) and security (ACLs, SCRAM users).

The quorum comes from DescribeQuorum sent to the bootstrap broker (riverbed's brokers
and Kafka's pass it on to the quorum leader), over a plain connection: a cluster reached
through TLS or SASL shows the quorum as unavailable. Transactions use riverbed's own
wire client the same way (ListTransactions to every broker, DescribeProducers for the
hanging ones). ACLs and SCRAM users come through the admin client, so a secured cluster
shows what the console's principal may describe.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from riverbed.console.admin import ADMIN_TIMEOUT_S, ClusterView, ConsoleAdmin, cluster_error
from riverbed.console.app import Routes, admin_of, console_of
from riverbed.console.wire_views import DiskUse, disk_use

#: How long the overview waits for DescribeQuorum, seconds.
QUORUM_TIMEOUT_S = 3.0
#: A quorum follower further behind the leader than this many records raises an alert.
QUORUM_LAG_ALERT_RECORDS = 1000
#: A log dir with less free space than this share of its disk raises an alert.
DISK_FREE_ALERT_RATIO = 0.1
#: Transactions whose producer has been silent this long are searched as hanging, minutes.
HANGING_AFTER_MIN = 5


@dataclass(frozen=True, slots=True)
class Alert:
    level: str  # "critical" or "warning"
    text: str


def add_routes(router: Routes) -> None:
    router.add_get("/", overview)
    router.add_get("/transactions", transactions)
    router.add_get("/security", security)


def alerts(view: ClusterView, quorum: dict[str, Any] | None, disks: DiskUse) -> list[Alert]:
    """What an operator is paged for: Kafka's OfflinePartitionsCount > 0,
    UnderReplicatedPartitions > 0, ActiveControllerCount == 0, a lagging quorum voter,
    an offline log dir (OfflineLogDirectoryCount > 0), a log dir nearly full."""
    out = []
    for d in disks.dirs:
        if d.error is not None:
            out.append(Alert("critical", f"broker {d.broker}: log dir {d.path} is offline ({d.error})"))  # fmt: skip
        elif d.total_bytes > 0 and d.usable_bytes < d.total_bytes * DISK_FREE_ALERT_RATIO:
            out.append(Alert("warning", f"broker {d.broker}: log dir {d.path} has {d.usable_bytes * 100 // d.total_bytes}% free"))  # fmt: skip
    offline = sum(t.offline for t in view.topics)
    urp = sum(t.under_replicated for t in view.topics)
    if view.controller_id < 0:
        out.append(Alert("critical", "no active controller"))
    if offline:
        out.append(Alert("critical", f"{offline} offline partition(s): no leader"))
    if urp:
        out.append(Alert("warning", f"{urp} under-replicated partition(s): ISR < replicas"))
    for row in (quorum or {}).get("replication", []):
        if (row["lag"] or 0) > QUORUM_LAG_ALERT_RECORDS:
            out.append(Alert("warning", f"quorum node {row['node_id']} is {row['lag']} records behind"))  # fmt: skip
    return out


async def _quorum(console_bootstrap: str, conf: dict[str, Any]) -> dict[str, Any]:
    from riverbed.cli.common import CliError
    from riverbed.cli.quorum import describe_quorum, replication_rows
    from riverbed.console.wire_views import console_security

    host, _, port = console_bootstrap.split(",")[0].strip().rpartition(":")
    try:
        reply = await asyncio.wait_for(
            describe_quorum(host.strip("[]") or "localhost", int(port), console_security(conf)),
            QUORUM_TIMEOUT_S,
        )
    except CliError as exc:
        return {"error": str(exc)}
    except (OSError, TimeoutError, ValueError) as exc:
        return {"error": f"DescribeQuorum failed: {exc or 'timed out'}"}
    if reply.error_code:
        return {"error": f"DescribeQuorum answered error code {reply.error_code}"}
    return {
        "leader_id": reply.leader_id,
        "leader_epoch": reply.leader_epoch,
        "high_watermark": reply.high_watermark,
        "replication": replication_rows(reply),
    }


async def overview(request: web.Request) -> web.Response:
    console = console_of(request)
    view = await console.call(admin_of(request).cluster)
    quorum = await _quorum(console.bootstrap, admin_of(request).conf)
    disks = await console.call(disk_use, console.bootstrap, admin_of(request).conf)
    return console.render(
        request,
        "overview.html",
        page="overview",
        view=view,
        quorum=quorum,
        alerts=alerts(view, quorum if "error" not in quorum else None, disks),
        disks=disks,
        partitions=sum(len(t.partitions) for t in view.topics),
        offline=[(t.name, p) for t in view.topics for p in t.partitions if p.offline],
        under_replicated=[
            (t.name, p) for t in view.topics for p in t.partitions if p.under_replicated
        ],
    )


def _transactions(bootstrap: str, conf: dict[str, Any], hanging: bool) -> dict[str, Any]:
    from riverbed.cli.common import CliError
    from riverbed.cli.transactions import find_hanging, list_transactions
    from riverbed.console.wire_views import run_secured

    try:
        rows = run_secured(conf, list_transactions, bootstrap, [], [], -1)
        stuck = (
            run_secured(conf, find_hanging, bootstrap, None, None, None, HANGING_AFTER_MIN)
            if hanging
            else None
        )
    except CliError as exc:
        return {"error": str(exc), "transactions": [], "hanging": None}
    return {"error": None, "transactions": rows, "hanging": stuck}


async def transactions(request: web.Request) -> web.Response:
    console = console_of(request)
    hanging = request.query.get("hanging") == "1"
    data = await console.call(_transactions, console.bootstrap, admin_of(request).conf, hanging)
    return console.render(
        request,
        "transactions.html",
        page="transactions",
        hanging_after_min=HANGING_AFTER_MIN,
        **data,
    )


def _security(admin: ConsoleAdmin) -> dict[str, Any]:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    out: dict[str, Any] = {"acls": [], "acls_error": None, "users": [], "users_error": None}
    # None: any name, principal, host (the stubs say str)
    everything = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None,  # type: ignore[arg-type]
        AclOperation.ANY, AclPermissionType.ANY,
    )  # fmt: skip
    no_authorizer = (
        "no authorizer is configured (authorizer.class.name): every principal may do everything"
    )
    try:
        acls = admin.client.describe_acls(everything, request_timeout=ADMIN_TIMEOUT_S)
        out["acls"] = sorted(acls.result(timeout=ADMIN_TIMEOUT_S), key=str)
        if not out["acls"] and _security_disabled(admin):
            out["acls_error"] = no_authorizer
    except KafkaException as exc:
        err = exc.args[0] if exc.args else None
        disabled = isinstance(err, KafkaError) and err.code() == KafkaError.SECURITY_DISABLED
        out["acls_error"] = (
            no_authorizer if disabled else cluster_error(exc, "cannot describe ACLs").message
        )
    try:
        users = admin.client.describe_user_scram_credentials(request_timeout=ADMIN_TIMEOUT_S)
        # users=None (every user): one future of {user: description}
        described = users.result(timeout=ADMIN_TIMEOUT_S)  # type: ignore[union-attr]
        out["users"] = sorted(described.values(), key=lambda d: d.user)
    except Exception as exc:
        out["users_error"] = cluster_error(exc, "cannot describe SCRAM users").message
    return out


def _security_disabled(admin: ConsoleAdmin) -> bool:
    """confluent-kafka lists no ACLs for a DescribeAcls refused with SECURITY_DISABLED:
    ask riverbed's own client, as the console's admin connects (False: it cannot)."""
    from riverbed.cli.acls import security_disabled
    from riverbed.cli.common import CliError
    from riverbed.console.wire_views import run_secured

    bootstrap = str(admin.conf.get("bootstrap.servers", ""))
    try:
        return run_secured(admin.conf, security_disabled, bootstrap) is not None
    except CliError:  # a client config riverbed's wire client cannot follow
        return False


async def security(request: web.Request) -> web.Response:
    console = console_of(request)
    data = await console.call(_security, admin_of(request))
    return console.render(request, "security.html", page="security", **data)
