"""`riverbed transactions list | describe --transactional-id ID`, like ``kafka-transactions.sh``.

- ``list``: ListTransactions to every broker (each coordinator lists the transactional
  ids of the ``__transaction_state`` partitions it leads), one row per id: transactional
  id, coordinator, producer id, state. ``--state`` / ``--producer-id`` (repeatable) and
  ``--duration-filter MS`` (only transactions running longer) filter as Kafka's do.
- ``describe --transactional-id ID``: FindCoordinator (key type TRANSACTION), then
  DescribeTransactions to that coordinator: coordinator, producer id and epoch, state,
  timeout, start time, duration and the transaction's partitions.

``--json`` prints the rows as one document.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

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
    desc.add_argument("--transactional-id", required=True)
    add_json(desc)
    desc.set_defaults(func=run_guarded(describe_cmd))


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
                resp: Any = client.request(ApiKey.LIST_TRANSACTIONS, request)
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


def describe(bootstrap: str, tid: str) -> dict[str, Any]:
    from riverbed.cli.wire import WireClient, WireError
    from riverbed.protocol.api_versions import ApiKey
    from riverbed.protocol.errors import ErrorCode
    from riverbed.protocol.messages import DescribeTransactionsRequest, FindCoordinatorRequest

    try:
        with WireClient(bootstrap) as client:
            batched = client.version(ApiKey.FIND_COORDINATOR) >= 4
            lookup: Any = client.request(
                ApiKey.FIND_COORDINATOR,
                FindCoordinatorRequest(key_type=KEY_TYPE_TRANSACTION, coordinator_keys=[tid])
                if batched
                else FindCoordinatorRequest(key=tid, key_type=KEY_TYPE_TRANSACTION),
            )
        found = lookup.coordinators[0] if batched else lookup
        if found.error_code:
            raise CliError(f"no coordinator for {tid}: {ErrorCode.of(found.error_code).name}")
        with WireClient(f"{found.host}:{found.port}") as client:
            resp: Any = client.request(
                ApiKey.DESCRIBE_TRANSACTIONS, DescribeTransactionsRequest(transactional_ids=[tid])
            )
    except WireError as exc:
        raise CliError(str(exc)) from None
    (s,) = resp.transaction_states
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
