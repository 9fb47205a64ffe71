"""`riverbed quorum describe` (a real CLI process) against three in-process controllers
serving raft RPCs over TCP on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from riverbed.raft.config import RaftConfig
from riverbed.raft.messages import Entry, SnapshotId
from riverbed.raft.node import NotLeaderError
from riverbed.raft.roles import Role
from riverbed.server.raft_driver import RaftDriver
from riverbed.server.raft_transport import KafkaRaftTransport
from riverbed.testing.raft_sim_helpers import raft_listener

CONFIG = RaftConfig(
    voters=frozenset({1, 2, 3}),
    election_timeout_ms=300,
    fetch_timeout_ms=1000,
    election_backoff_max_ms=100,
    request_timeout_ms=1000,
    append_linger_ms=1,
    fetch_max_wait_ms=100,
)


class Sink:
    def apply(self, entries: tuple[Entry, ...]) -> None:
        pass

    def snapshot_records(self) -> list[bytes]:
        return []

    def load_snapshot(self, snapshot_id: SnapshotId, records: list[bytes]) -> None:
        pass


async def cli(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "riverbed.cli.main",
        "quorum",
        "describe",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(), err.decode()


async def scenario(tmp: Path) -> None:
    drivers: dict[int, RaftDriver] = {}
    errors: list[BaseException] = []
    servers = {i: await raft_listener(drivers, i, errors) for i in (1, 2, 3)}
    endpoints = {i: s.sockets[0].getsockname()[:2] for i, s in servers.items()}
    for i in (1, 2, 3):
        drivers[i] = RaftDriver(i, CONFIG, tmp / f"n{i}", KafkaRaftTransport(i, endpoints), Sink())
        await drivers[i].start()
    try:
        committed = -1
        for _ in range(500):
            leaders = [d for d in drivers.values() if d.node.role is Role.LEADER]
            if len(leaders) == 1:
                try:
                    committed = await leaders[0].append([b"x"] * 5, timeout_s=3)
                    break
                except (NotLeaderError, TimeoutError):
                    pass
            await asyncio.sleep(0.02)
        assert committed >= 0
        leader = next(d for d in drivers.values() if d.node.role is Role.LEADER)
        host, port = endpoints[leader.node_id]
        code, out, err = await cli("--bootstrap-controller", f"{host}:{port}", "--json")
        assert code == 0, err
        data = json.loads(out)
        status = data["status"]
        assert status["leader_id"] == leader.node_id
        assert status["leader_epoch"] == leader.node.epoch
        assert status["high_watermark"] > committed
        assert sorted(status["current_voters"]) == [1, 2, 3]
        roles = {r["node_id"]: r["role"] for r in data["replication"]}
        assert roles[leader.node_id] == "Leader"
        assert sorted(roles.values()).count("Voter") == 2
        code, out, _ = await cli("--bootstrap-controller", f"{host}:{port}")
        assert code == 0 and f"LeaderId: {leader.node_id}" in out and "LogEndOffset" in out
        # a follower names the leader in its error
        follower = next(i for i in (1, 2, 3) if i != leader.node_id)
        fhost, fport = endpoints[follower]
        code, _, err = await cli("--bootstrap-controller", f"{fhost}:{fport}")
        assert code == 1 and "NOT_LEADER_OR_FOLLOWER" in err
        assert f"leader is node {leader.node_id}" in err
        assert not errors
    finally:
        for d in drivers.values():
            await d.close()
        for s in servers.values():
            s.close()


def test_quorum_describe_cli(tmp_path: Path) -> None:
    asyncio.run(asyncio.wait_for(scenario(tmp_path), 120))
