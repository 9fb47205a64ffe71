"""`riverbed transactions list | describe | describe-producers | abort`, like
``kafka-transactions.sh``.

- ``list``: ListTransactions to every broker (each coordinator lists the transactional
  ids of the ``__transaction_state`` partitions it leads), one row per id: transactional
  id, coordinator, producer id, state. ``--state`` / ``--producer-id`` (repeatable) and
  ``--duration-filter MS`` (only transactions running longer) filter as Kafka's do.
- ``describe --transactional-id ID``: FindCoordinator (key type TRANSACTION), then
  DescribeTransactions to that coordinator: coordinator, producer id and epoch, state,
  timeout, start time, duration and the transaction's partitions.

- ``describe-producers --topic T --partition P``: DescribeProducers of the partition's
  leader: each active producer, its epoch, last coordinator epoch and the start offset of
  its open transaction (-1: none).
- ``find-hanging --topic T [--partition P] | --broker-id N [--max-transaction-timeout MIN]``
  (KIP-664): the open transactions of the partitions (led by broker N, or of topic T)
  older than the longest transaction timeout (minutes, default 15: Kafka's
  ``transaction.max.timeout.ms``) that their coordinator does not have Ongoing on that
  partition with that producer epoch: nothing will ever finish them, and they hold the
  last stable offset (abort them with ``abort``).
- ``abort --topic T --partition P --start-offset O`` (KIP-664): the producer whose open
  transaction starts at offset O (found with DescribeProducers) gets an ABORT marker
  written by the partition's leader (WriteTxnMarkers with that producer's epoch and last
  coordinator epoch), as Kafka's ``Admin.abortTransaction`` does: for a transaction that
  holds the last stable offset and that no coordinator will finish.

``--json`` prints the rows as one document.
"""

from __future__ import annotations

import argparse
import time
from functools import partial
from typing import Any, cast

from riverbed.cli.common import (
    CliError,
    add_bootstrap,
    add_json,
    print_json,
    print_table,
    run_guarded,
    verb_parser,
)

#: FindCoordinator key type of a transactional id.
KEY_TYPE_TRANSACTION = 1
#: Kafka's find-hanging default: transaction.max.timeout.ms's default, in minutes.
DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN = 15


def register(subparsers: Any) -> None:
    parser = verb_parser(subparsers, "transactions", "transactions (kafka-transactions.sh)")
    sub = parser.add_subparsers(dest="transactions_command", metavar="SUBCOMMAND")
    lst = verb_parser(sub, "list", "transactional ids on every coordinator")
    add_bootstrap(lst)
    lst.add_argument("--state", action="append", help="repeatable (e.g. Ongoing)")
    lst.add_argument("--producer-id", type=int, action="append", help="repeatable")
    lst.add_argument(
        "--duration-filter", type=int, default=-1, help="only transactions running longer (ms)"
    )
    add_json(lst)
    lst.set_defaults(func=run_guarded(list_cmd))
    desc = verb_parser(sub, "describe", "one transactional id on its coordinator")
    add_bootstrap(desc)
    desc.add_argument("--transactional-id", required=True, help="the producer's transactional.id")
    add_json(desc)
    desc.set_defaults(func=run_guarded(describe_cmd))
    _register_partition_verbs(sub)


def _register_partition_verbs(sub: Any) -> None:
    dp = verb_parser(sub, "describe-producers", "active producers of one partition")
    add_bootstrap(dp)
    dp.add_argument("--topic", required=True, help="the topic")
    dp.add_argument("--partition", type=int, required=True, help="the partition")
    add_json(dp)
    dp.set_defaults(func=run_guarded(describe_producers_cmd))
    fh = verb_parser(sub, "find-hanging", "open transactions no coordinator will finish")
    add_bootstrap(fh)
    scope = fh.add_mutually_exclusive_group(required=True)
    scope.add_argument("--topic", help="the topic")
    scope.add_argument("--broker-id", type=int, help="only the partitions this broker leads")
    fh.add_argument("--partition", type=int, help="with --topic")
    fh.add_argument(
        "--max-transaction-timeout",
        type=int,
        default=DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN,
        help="minutes a transaction may run (default 15)",
    )
    add_json(fh)
    fh.set_defaults(func=run_guarded(find_hanging_cmd))
    ab = verb_parser(sub, "abort", "abort the open transaction starting at an offset (KIP-664)")
    add_bootstrap(ab)
    ab.add_argument("--topic", required=True, help="the topic")
    ab.add_argument("--partition", type=int, required=True, help="the partition")
    ab.add_argument(
        "--start-offset",
        type=int,
        required=True,
        help="the first offset of the hanging transaction (from find-hanging)",
    )
    add_json(ab)
    ab.set_defaults(func=run_guarded(abort_cmd))


def _brokers(bootstrap: str) -> dict[int, str]:
    from riverbed.cli.wire import WireClient, WireError
    from riverbed.protocol.api_versions import ApiKey
    from riverbed.protocol.messages import MetadataRequest

    try:
        with WireClient(bootstrap) as client:
            md: Any = client.request(ApiKey.METADATA, MetadataRequest(topics=[]))
    except WireError as exc:
        raise CliError(str(exc)) from None
    return {b.node_id: f"{b.host}:{b.port}" for b in md.brokers}


def list_transactions(
    bootstrap: str, states: list[str], producer_ids: list[int], duration_ms: int
) -> list[dict[str, Any]]:
    from riverbed.cli.group_admin import until_coordinator_ready
    from riverbed.cli.wire import WireClient, WireError
    from riverbed.protocol.api_versions import ApiKey
    from riverbed.protocol.errors import ErrorCode
    from riverbed.protocol.messages import ListTransactionsRequest

    request = ListTransactionsRequest(
        state_filters=states, producer_id_filters=producer_ids, duration_filter=duration_ms
    )
    rows: list[dict[str, Any]] = []
    for broker, address in sorted(_brokers(bootstrap).items()):
        try:
            with WireClient(address) as client:
                # a broker answers COORDINATOR_LOAD_IN_PROGRESS while one of its
                # transaction state partitions loads: asked again, as Kafka's admin does
                resp: Any = until_coordinator_ready(
                    partial(client.request, ApiKey.LIST_TRANSACTIONS, request),
                    lambda r: int(cast(Any, r).error_code),
                )
        except WireError as exc:
            raise CliError(f"broker {broker} ({address}): {exc}") from None
        if resp.error_code:
            raise CliError(f"broker {broker}: {ErrorCode.of(resp.error_code).name}")
        for t in resp.transaction_states:
            rows.append(
                {
                    "transactional_id": t.transactional_id,
                    "coordinator": broker,
                    "producer_id": t.producer_id,
                    "state": t.transaction_state,
                }
            )
    return sorted(rows, key=lambda r: r["transactional_id"])


class TransactionGone(CliError):
    """DescribeTransactions answered TRANSACTIONAL_ID_NOT_FOUND: the id expired or never was."""


def describe(bootstrap: str, tid: str) -> dict[str, Any]:
    from riverbed.cli.group_admin import until_coordinator_ready
    from riverbed.cli.wire import WireClient, WireError
    from riverbed.protocol.api_versions import ApiKey
    from riverbed.protocol.errors import ErrorCode
    from riverbed.protocol.messages import DescribeTransactionsRequest, FindCoordinatorRequest

    def find() -> Any:
        with WireClient(bootstrap) as client:
            batched = client.version(ApiKey.FIND_COORDINATOR) >= 4
            lookup: Any = client.request(
                ApiKey.FIND_COORDINATOR,
                FindCoordinatorRequest(key_type=KEY_TYPE_TRANSACTION, coordinator_keys=[tid])
                if batched
                else FindCoordinatorRequest(key=tid, key_type=KEY_TYPE_TRANSACTION),
            )
        return lookup.coordinators[0] if batched else lookup

    def ask(coordinator: str) -> Any:
        with WireClient(coordinator) as client:
            resp: Any = client.request(
                ApiKey.DESCRIBE_TRANSACTIONS, DescribeTransactionsRequest(transactional_ids=[tid])
            )
        return resp.transaction_states[0]

    try:
        # a loading or moving coordinator is asked again (as Kafka's admin does): a
        # transaction whose coordinator loads is not "gone" (find-hanging relies on it)
        found = until_coordinator_ready(find, lambda f: int(f.error_code))
        if found.error_code:
            raise CliError(f"no coordinator for {tid}: {ErrorCode.of(found.error_code).name}")
        s = until_coordinator_ready(
            lambda: ask(f"{found.host}:{found.port}"), lambda d: int(d.error_code)
        )
    except WireError as exc:
        raise CliError(str(exc)) from None
    if s.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
        raise TransactionGone(f"{tid}: {ErrorCode.of(s.error_code).name}")
    if s.error_code:
        raise CliError(f"{tid}: {ErrorCode.of(s.error_code).name}")
    start = s.transaction_start_time_ms
    return {
        "coordinator": found.node_id,
        "transactional_id": tid,
        "producer_id": s.producer_id,
        "producer_epoch": s.producer_epoch,
        "state": s.transaction_state,
        "timeout_ms": s.transaction_timeout_ms,
        "start_time_ms": start,
        "duration_ms": int(time.time() * 1000) - start if start >= 0 else None,
        "partitions": [f"{t.topic}-{p}" for t in s.topics for p in t.partitions],
    }


def list_cmd(args: argparse.Namespace) -> int:
    rows = list_transactions(
        args.bootstrap_server, args.state or [], args.producer_id or [], args.duration_filter
    )
    if args.json:
        print_json({"transactions": rows})
        return 0
    print_table(
        "transactions",
        ["transactional id", "coordinator", "producer id", "state"],
        [(r["transactional_id"], r["coordinator"], r["producer_id"], r["state"]) for r in rows],
    )
    return 0


def describe_cmd(args: argparse.Namespace) -> int:
    d = describe(args.bootstrap_server, args.transactional_id)
    if args.json:
        print_json(d)
        return 0
    print_table(
        f"transaction {d['transactional_id']}",
        ["coordinator", "producer id", "epoch", "state", "timeout ms", "start time ms",
         "duration ms", "partitions"],
        [(d["coordinator"], d["producer_id"], d["producer_epoch"], d["state"], d["timeout_ms"],
          d["start_time_ms"], d["duration_ms"], ",".join(d["partitions"]))],
    )  # fmt: skip
    return 0


def _producers(bootstrap: str, topic: str, partition: int) -> dict[str, Any]:
    from riverbed.cli.producers import describe as describe_producers

    (row,) = describe_producers(bootstrap, topic, [partition])
    if row.get("error_code"):
        from riverbed.protocol.errors import ErrorCode

        raise CliError(f"{topic}-{partition}: {ErrorCode.of(row['error_code']).name}")
    if "error" in row:
        raise CliError(f"{topic}-{partition}: {row['error']}")
    return row


def describe_producers_cmd(args: argparse.Namespace) -> int:
    row = _producers(args.bootstrap_server, args.topic, args.partition)
    producers = row["producers"]
    if args.json:
        print_json({"topic": args.topic, "partition": args.partition,
                    "leader": row["leader"], "producers": producers})  # fmt: skip
        return 0
    print_table(
        f"producers of {args.topic}-{args.partition} (leader {row['leader']})",
        ["producer id", "epoch", "coordinator epoch", "last seq", "last timestamp",
         "txn start offset"],
        [(p["producer_id"], p["producer_epoch"], p["coordinator_epoch"], p["last_sequence"],
          p["last_timestamp"], p["current_txn_start_offset"]) for p in producers],
    )  # fmt: skip
    return 0


def abort(bootstrap: str, topic: str, partition: int, start_offset: int) -> dict[str, Any]:
    """KIP-664's abort of the transaction starting at ``start_offset``: the ABORT marker
    the partition's leader writes for its producer; what was aborted."""
    from riverbed.cli.wire import WireClient, WireError
    from riverbed.protocol.api_versions import ApiKey
    from riverbed.protocol.errors import ErrorCode
    from riverbed.protocol.messages import WriteTxnMarkersRequest as W

    row = _producers(bootstrap, topic, partition)
    found = [p for p in row["producers"] if p["current_txn_start_offset"] == start_offset]
    if not found:
        raise CliError(
            f"no open transaction starts at offset {start_offset} of {topic}-{partition}"
        )
    (p,) = found
    address = _brokers(bootstrap).get(row["leader"])
    if address is None:
        raise CliError(f"the leader of {topic}-{partition} ({row['leader']}) is not known")
    marker = W.WritableTxnMarker(
        producer_id=p["producer_id"],
        producer_epoch=p["producer_epoch"],
        transaction_result=False,
        topics=[W.WritableTxnMarkerTopic(name=topic, partition_indexes=[partition])],
        coordinator_epoch=p["coordinator_epoch"],
    )
    try:
        with WireClient(address) as client:
            resp: Any = client.request(ApiKey.WRITE_TXN_MARKERS, W(markers=[marker]))
    except WireError as exc:
        raise CliError(f"broker {row['leader']} ({address}): {exc}") from None
    code = ErrorCode.of(resp.markers[0].topics[0].partitions[0].error_code)
    if code != ErrorCode.NONE:
        raise CliError(f"aborting the transaction of producer {p['producer_id']}: {code.name}")
    return {"topic": topic, "partition": partition, "start_offset": start_offset,
            "producer_id": p["producer_id"], "producer_epoch": p["producer_epoch"],
            "coordinator_epoch": p["coordinator_epoch"]}  # fmt: skip


def abort_cmd(args: argparse.Namespace) -> int:
    done = abort(args.bootstrap_server, args.topic, args.partition, args.start_offset)
    if args.json:
        print_json(done)
        return 0
    print(
        f"aborted the transaction of producer {done['producer_id']} (epoch "
        f"{done['producer_epoch']}) starting at offset {done['start_offset']} of "
        f"{done['topic']}-{done['partition']}"
    )
    return 0


def _partitions_of(bootstrap: str, topic: str | None, broker: int | None) -> list[tuple[str, int]]:
    from riverbed.cli.wire import WireClient, WireError
    from riverbed.protocol.api_versions import ApiKey
    from riverbed.protocol.messages import MetadataRequest as M

    wanted = None if topic is None else [M.MetadataRequestTopic(name=topic)]
    try:
        with WireClient(bootstrap) as client:
            md: Any = client.request(ApiKey.METADATA, M(topics=wanted))
    except WireError as exc:
        raise CliError(str(exc)) from None
    return sorted(
        (t.name, p.partition_index)
        for t in md.topics
        if not t.error_code
        for p in t.partitions
        if broker is None or p.leader_id == broker
    )


def _is_hanging(bootstrap: str, tp: tuple[str, int], producer: dict[str, Any]) -> bool:
    """Kafka's ``isTransactionHanging``: no transactional id of the producer id is
    Ongoing with this producer epoch on this partition."""
    pid = producer["producer_id"]
    for row in list_transactions(bootstrap, [], [pid], -1):
        try:
            d = describe(bootstrap, row["transactional_id"])
        except TransactionGone:
            continue  # expired meanwhile: it cannot hold the partition open
        # any other error (a coordinator still loading after COORDINATOR_WAIT_S, a lost
        # connection) ends find-hanging: counting it as "gone" could call a live
        # transaction hanging, and the user would abort it (Kafka's tool fails too)
        if (
            d["producer_id"] == pid
            and d["producer_epoch"] == producer["producer_epoch"]
            and d["state"] == "Ongoing"
            and f"{tp[0]}-{tp[1]}" in d["partitions"]
        ):
            return False
    return True


def find_hanging(
    bootstrap: str, topic: str | None, partition: int | None, broker: int | None,
    max_timeout_min: int,
) -> list[dict[str, Any]]:  # fmt: skip
    parts = _partitions_of(bootstrap, topic, broker)
    if partition is not None:
        parts = [tp for tp in parts if tp[1] == partition]
    now_ms = int(time.time() * 1000)
    oldest_ms = now_ms - max_timeout_min * 60_000
    out = []
    for t, p in parts:
        row = _producers(bootstrap, t, p)
        for q in row["producers"]:
            start = q["current_txn_start_offset"]
            if start < 0 or q["last_timestamp"] > oldest_ms:
                continue
            if _is_hanging(bootstrap, (t, p), q):
                out.append({
                    "topic": t, "partition": p, "producer_id": q["producer_id"],
                    "producer_epoch": q["producer_epoch"],
                    "coordinator_epoch": q["coordinator_epoch"], "start_offset": start,
                    "last_timestamp": q["last_timestamp"],
                    "duration_min": (now_ms - q["last_timestamp"]) // 60_000,
                })  # fmt: skip
    return out


def find_hanging_cmd(args: argparse.Namespace) -> int:
    if args.partition is not None and args.topic is None:
        raise CliError("--partition needs --topic")
    rows = find_hanging(args.bootstrap_server, args.topic, args.partition, args.broker_id,
                        args.max_transaction_timeout)  # fmt: skip
    if args.json:
        print_json({"hanging": rows})
        return 0
    print_table(
        "hanging transactions",
        ["topic", "partition", "producer id", "epoch", "coordinator epoch", "start offset",
         "last timestamp", "duration min"],
        [(r["topic"], r["partition"], r["producer_id"], r["producer_epoch"],
          r["coordinator_epoch"], r["start_offset"], r["last_timestamp"], r["duration_min"])
         for r in rows],
    )  # fmt: skip
    return 0
