"""`riverbed quorum describe [--bootstrap-controller|--bootstrap-server|-b HOST:PORT]`: the
KRaft quorum's state (default: the broker at localhost:9092).

Like ``kafka-metadata-quorum --bootstrap-controller HOST:PORT describe --status
--replication``: sends DescribeQuorum (api key 55) to a controller listener, or to a broker
listener with ``--bootstrap-server`` (the broker passes it on to the quorum leader, as
Kafka's brokers do), and prints the leader,
its epoch and high watermark, and for each voter and observer its log end offset, its lag
behind the leader's log end offset and how long ago it last fetched / was caught up.
DescribeQuorum is answered by the leader; another controller answers
NOT_LEADER_OR_FOLLOWER with the leader's id, which is printed as the error.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import TYPE_CHECKING, Any

from riverbed.cli.common import (
    DEFAULT_BOOTSTRAP_SERVER,
    CliError,
    add_client_settings,
    add_json,
    print_json,
    print_table,
    run_guarded,
    verb_parser,
)

if TYPE_CHECKING:
    from riverbed.raft.messages import DescribeQuorumResponse
    from riverbed.server.client_login import ClientSecurity

DESCRIBE_TIMEOUT_S = 10.0


def register(subparsers: Any) -> None:
    parser = verb_parser(subparsers, "quorum", "inspect the KRaft metadata quorum")
    sub = parser.add_subparsers(dest="quorum_command", metavar="SUBCOMMAND")
    desc = verb_parser(sub, "describe", "leader, epoch, high watermark, replicas and lag")
    where = desc.add_mutually_exclusive_group()
    where.add_argument(
        "--bootstrap-controller",
        metavar="HOST:PORT",
        help="a controller listener (controller.quorum.voters endpoint)",
    )
    where.add_argument(
        "--bootstrap-server",
        "-b",
        metavar="HOST:PORT",
        help="a broker listener (it forwards the request to the quorum leader; default:"
        f" {DEFAULT_BOOTSTRAP_SERVER} unless --bootstrap-controller is given)",
    )
    desc.set_defaults(bootstrap_server=DEFAULT_BOOTSTRAP_SERVER)
    add_client_settings(desc)  # a secured listener: SASL / TLS as kafka-metadata-quorum's
    show = desc.add_argument_group("what to print (kafka-metadata-quorum's; default both)")
    show.add_argument("--status", action="store_true", help="the leader, epoch, high watermark")
    show.add_argument("--replication", action="store_true", help="each voter's and observer's lag")
    add_json(desc)
    desc.set_defaults(func=run_guarded(describe_cmd))


def _address(text: str, flag: str) -> tuple[str, int]:
    host, colon, port = text.split(",")[0].rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise CliError(f"{flag}: {text!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


async def describe_quorum(host: str, port: int, security: ClientSecurity | None = None) -> Any:
    """DescribeQuorum to ``host:port``, connecting with ``security`` (default: the
    command's, `riverbed.cli.wire.current_security`)."""
    from riverbed.cli.wire import current_security
    from riverbed.raft.messages import DescribeQuorumRequest
    from riverbed.server.raft_transport import KafkaRaftTransport

    transport = KafkaRaftTransport(
        -1, {0: (host, port)}, security=security if security is not None else current_security()
    )
    try:
        return await asyncio.wait_for(
            transport.send(0, DescribeQuorumRequest()), DESCRIBE_TIMEOUT_S
        )
    finally:
        await transport.close()


def quorum_leader(bootstrap: str) -> int | None:
    """The KRaft quorum's leader (the active controller), from DescribeQuorum sent to the
    first broker of ``bootstrap``; None when there is none or the broker cannot tell."""
    try:
        host, port = _address(bootstrap, "--bootstrap-server")
        reply = asyncio.run(describe_quorum(host, port))
    except Exception:  # unreachable, or a broker that does not serve DescribeQuorum
        return None
    return int(reply.leader_id) if reply.error_code == 0 and reply.leader_id >= 0 else None


def describe_cmd(args: argparse.Namespace) -> int:
    from riverbed.raft.messages import Errors

    if args.bootstrap_controller:
        host, port = _address(args.bootstrap_controller, "--bootstrap-controller")
        what = "controller"
    else:  # a broker listener: the one given, else the embedded default's
        host, port = _address(args.bootstrap_server, "--bootstrap-server")
        what = "broker"
    try:
        reply = asyncio.run(describe_quorum(host, port))
    except (OSError, TimeoutError) as exc:
        from riverbed.cli.wire import current_security, dropped_hint

        hint = dropped_hint(current_security())
        raise CliError(f"cannot reach {what} {host}:{port}: {exc or 'timed out'}{hint}") from None
    if reply.error_code != Errors.NONE:
        try:
            name = Errors(reply.error_code).name
        except ValueError:
            name = f"error {reply.error_code}"
        hint = f" (the leader is node {reply.leader_id})" if reply.leader_id >= 0 else ""
        raise CliError(f"{host}:{port} answered {name}{hint}")
    rows = replication_rows(reply)
    status = {
        "leader_id": reply.leader_id,
        "leader_epoch": reply.leader_epoch,
        "high_watermark": reply.high_watermark,
        "max_follower_lag": max((r["lag"] or 0 for r in rows), default=0),
        "current_voters": [r.replica_id for r in reply.current_voters],
        "current_observers": [r.replica_id for r in reply.observers],
    }
    both = args.status == args.replication  # neither flag (or both): print both
    if args.json:
        out = {"status": status, "replication": rows}
        print_json(
            out if both else {k: out[k] for k in ("status", "replication") if getattr(args, k)}
        )
        return 0
    if both or args.status:
        print(
            f"LeaderId: {reply.leader_id}  LeaderEpoch: {reply.leader_epoch}  "
            f"HighWatermark: {reply.high_watermark}  MaxFollowerLag: {status['max_follower_lag']}"
        )
    if both or args.replication:
        _print_replication(rows)
    return 0


def _print_replication(rows: list[dict[str, Any]]) -> None:
    keys = [
        "node_id",
        "role",
        "log_end_offset",
        "lag",
        "last_fetch_ms_ago",
        "last_caught_up_ms_ago",
    ]
    print_table(
        None,
        ["NodeId", "Role", "LogEndOffset", "Lag", "LastFetch (ms ago)", "LastCaughtUp (ms ago)"],
        [[r[k] for k in keys] for r in rows],
    )


def replication_rows(reply: DescribeQuorumResponse) -> list[dict[str, Any]]:
    """One row per voter and observer: its lag behind the leader's log end, and how long
    ago (by the leader's clock) it last fetched and was last caught up."""
    leader_state = next((r for r in reply.current_voters if r.replica_id == reply.leader_id), None)
    leader_leo = leader_state.log_end_offset if leader_state else reply.high_watermark
    leader_now = leader_state.last_fetch_timestamp if leader_state else -1

    def ago(ts: int) -> int | None:
        return None if ts < 0 or leader_now < 0 else max(0, leader_now - ts)

    rows = []
    for role, states in (("Voter", reply.current_voters), ("Observer", reply.observers)):
        for r in states:
            rows.append(
                {
                    "node_id": r.replica_id,
                    "role": "Leader" if r.replica_id == reply.leader_id else role,
                    "log_end_offset": r.log_end_offset,
                    "lag": max(0, leader_leo - r.log_end_offset) if r.log_end_offset >= 0 else None,
                    "last_fetch_ms_ago": ago(r.last_fetch_timestamp),
                    "last_caught_up_ms_ago": ago(r.last_caught_up_timestamp),
                }
            )
    return rows
