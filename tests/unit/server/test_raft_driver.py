"""RaftDriver: three nodes on real files and asyncio timers, wired by an in-memory
transport; the leader is killed (no resignation) and a follower's disk is wiped."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from riverbed.raft.config import RaftConfig
from riverbed.raft.messages import Request, Response
from riverbed.raft.node import NotLeaderError
from riverbed.raft.roles import Role
from riverbed.server.raft_driver import RaftDriver
from riverbed.testing.raft_kv import KV

CONFIG = RaftConfig(
    voters=frozenset({1, 2, 3}),
    election_timeout_ms=200,
    fetch_timeout_ms=400,
    election_backoff_max_ms=100,
    request_timeout_ms=400,
    append_linger_ms=1,
    fetch_max_wait_ms=50,
    snapshot_minimum_records=20,
    max_replication_lag_ms=500,
    fetch_snapshot_bytes_max=64,
)


class Net:
    def __init__(self) -> None:
        self.drivers: dict[int, RaftDriver] = {}
        self.isolated: set[int] = set()  # nodes cut off from every other node

    def transport(self, src: int) -> Transport:
        return Transport(self, src)


class Transport:
    def __init__(self, net: Net, src: int) -> None:
        self.net, self.src = net, src

    async def send(self, dest: int, request: Request) -> Response:
        driver = self.net.drivers.get(dest)
        if driver is None or self.src not in self.net.drivers:
            raise ConnectionError(f"{dest} is down")
        if {self.src, dest} & self.net.isolated:
            raise ConnectionError(f"{self.src} and {dest} are partitioned")
        await asyncio.sleep(0.001)
        return await driver.handle_request(self.src, request)


async def boot(net: Net, tmp: Path, node_id: int) -> tuple[RaftDriver, KV]:
    kv = KV()
    driver = RaftDriver(node_id, CONFIG, tmp / f"node{node_id}", net.transport(node_id), kv)
    net.drivers[node_id] = driver
    await driver.start()
    return driver, kv


async def wait_for(cond, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


def leader_of(net: Net) -> RaftDriver | None:
    leaders = [d for d in net.drivers.values() if d.node.role is Role.LEADER]
    return leaders[0] if len(leaders) == 1 else None


async def append(net: Net, values: list[bytes]) -> int:
    for _ in range(100):
        leader = leader_of(net)
        if leader is not None:
            try:
                return await leader.append(values, timeout_s=3)
            except (NotLeaderError, TimeoutError):
                pass
        await asyncio.sleep(0.02)
    raise AssertionError("no leader accepted the append")


async def scenario(tmp: Path) -> None:
    net = Net()
    kvs: dict[int, KV] = {}
    for i in (1, 2, 3):
        _, kvs[i] = await boot(net, tmp, i)
    await wait_for(lambda: leader_of(net) is not None)
    for i in range(30):
        await append(net, [f"set k{i % 5} v{i}".encode()])
    last = await append(net, [b"set done 1"])
    await wait_for(lambda: all(kv.position > last for kv in kvs.values()))
    assert kvs[1].state == kvs[2].state == kvs[3].state

    # kill the leader (no EndQuorumEpoch): a new leader is elected and takes writes
    old = leader_of(net)
    assert old is not None
    old_id, old_epoch = old.node_id, old.node.epoch
    del net.drivers[old_id]
    await old.close(graceful=False)
    await wait_for(lambda: leader_of(net) is not None and leader_of(net).node.epoch > old_epoch)
    for i in range(30, 60):
        await append(net, [f"set k{i % 5} v{i}".encode()])
    # the old leader restarts from its files and catches up
    _, kvs[old_id] = await boot(net, tmp, old_id)
    last = await append(net, [b"set back 1"])
    await wait_for(lambda: all(kv.position > last for kv in kvs.values()))
    assert kvs[1].state == kvs[2].state == kvs[3].state

    # wipe a follower's disk: it comes back empty and must catch up from a snapshot
    follower = next(d for d in net.drivers.values() if d.node.role is Role.FOLLOWER)
    fid = follower.node_id
    del net.drivers[fid]
    await follower.close(graceful=False)
    shutil.rmtree(tmp / f"node{fid}")
    for i in range(60, 90):
        await append(net, [f"set k{i % 5} v{i}".encode()])
    await asyncio.sleep(0.6)  # past max.replication.lag.ms: the leader's LBO moves on
    for i in range(90, 100):
        await append(net, [f"set k{i % 5} v{i}".encode()])
    leader = leader_of(net)
    assert leader is not None and leader.node.log.start_offset > 0
    _, kvs[fid] = await boot(net, tmp, fid)
    last = await append(net, [b"set wiped 1"])
    await wait_for(lambda: all(kv.position > last for kv in kvs.values()))
    assert kvs[fid].loads, "the wiped node should have fetched a snapshot"
    assert kvs[1].state == kvs[2].state == kvs[3].state
    assert kvs[fid].state["k4"] == "v99"
    for d in list(net.drivers.values()):
        await d.close()


def test_three_drivers_kill_leader_restart_and_wipe(tmp_path: Path) -> None:
    asyncio.run(asyncio.wait_for(scenario(tmp_path), 60))


class _Unobserved(asyncio.Event):
    """Wake-ups nobody sees: a waiting task that is not scheduled in between (a driver
    that settled appends from a task polling its state depended on being scheduled)."""

    def set(self) -> None:
        pass


async def overtaken_append(tmp: Path) -> None:
    net = Net()
    for i in (1, 2, 3):
        await boot(net, tmp, i)
    await wait_for(lambda: leader_of(net) is not None)
    await append(net, [b"set a 1"])
    old = leader_of(net)
    assert old is not None
    epoch = old.node.epoch
    # the leader is cut off with an append in flight; it writes the batch locally
    net.isolated.add(old.node_id)
    end = old.node.log.end_offset
    pending = asyncio.create_task(old.append([b"set lost 1"], timeout_s=20))
    await wait_for(lambda: old.node.log.end_offset > end)
    last = old.node.log.end_offset - 1
    waiter_event = getattr(old, "_changed", None)
    if waiter_event is not None:
        # until the end, the append's waiter observes none of the steps in between
        old._changed = _Unobserved()
    # the others elect a leader, whose entries take the offset and commit past it
    others = Net()
    others.drivers = {i: d for i, d in net.drivers.items() if i != old.node_id}
    await wait_for(lambda: leader_of(others) is not None and leader_of(others).node.epoch > epoch)
    while leader_of(others) is None or leader_of(others).node.high_watermark <= last + 2:
        await append(others, [b"set other 1"])
    net.isolated.clear()
    await wait_for(lambda: old.node.high_watermark > last + 2)
    assert old.node.log.epoch_at(last) != epoch  # the offset holds another leader's entry
    if waiter_event is not None:
        waiter_event.set()
    try:
        outcome: object = await pending
    except NotLeaderError as exc:
        outcome = exc
    for d in list(net.drivers.values()):
        await d.close()
    assert isinstance(outcome, NotLeaderError), f"append reported committed at {outcome}"


def test_append_overtaken_by_another_leader_is_not_reported_committed(tmp_path: Path) -> None:
    """Commit detection checks the epoch of the committed entry and answers after every
    step, whatever the order asyncio runs the waiting task in (issue 11)."""
    asyncio.run(asyncio.wait_for(overtaken_append(tmp_path), 60))
