"""Crash-only RaftDriver: an unexpected exception in a state-machine apply (leader and
follower), a snapshot load, the flush loop or the timer loop goes to the fault handler,
and the driver's applied offset never passes an entry the machine did not apply."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

from riverbed.raft.config import RaftConfig
from riverbed.raft.messages import Entry, SnapshotId
from riverbed.raft.roles import Role
from riverbed.server.fault_handler import FaultHalt, RecordingFaultHandler
from riverbed.server.raft_driver import RaftDriver
from riverbed.storage.log_manager import METADATA_PARTITION_DIR
from riverbed.testing.raft_kv import KV

from .test_raft_driver import Net, wait_for

ONE = RaftConfig(
    voters=frozenset({1}),
    election_timeout_ms=100,
    fetch_timeout_ms=200,
    request_timeout_ms=200,
    append_linger_ms=1,
    snapshot_minimum_records=5,
)
THREE = RaftConfig(
    voters=frozenset({1, 2, 3}),
    election_timeout_ms=150,
    fetch_timeout_ms=300,
    election_backoff_max_ms=50,
    request_timeout_ms=300,
    append_linger_ms=1,
    fetch_max_wait_ms=50,
)


class FaultyKV(KV):
    """KV whose apply raises on ``set boom 1``, as a state machine with a bug would."""

    def apply(self, entries: tuple[Entry, ...]) -> None:
        if any(e.value == b"set boom 1" for e in entries):
            raise ValueError("cannot apply boom")
        super().apply(entries)


class FaultyLoadKV(KV):
    def load_snapshot(self, snapshot_id: SnapshotId, records: list[bytes]) -> None:
        raise ValueError("snapshot record does not replay")


class NoPeers:
    async def send(self, dest: int, request: object) -> object:
        raise ConnectionError("single voter")


async def one_voter(path: Path, kv: KV, faults: RecordingFaultHandler) -> RaftDriver:
    driver = RaftDriver(1, ONE, path, NoPeers(), kv, fault_handler=faults)
    await driver.start()
    await wait_for(lambda: driver.node.role is Role.LEADER)
    return driver


def only_fault(faults: RecordingFaultHandler) -> tuple[str, BaseException | None]:
    assert len(faults.faults) == 1, faults.faults
    return faults.faults[0]


def test_leader_apply_failure_halts_and_applied_offset_stays_before_it(tmp_path: Path) -> None:
    async def run() -> None:
        faults = RecordingFaultHandler()
        kv = FaultyKV()
        driver = await one_voter(tmp_path, kv, faults)
        last = await driver.append([b"set a 1"])
        assert driver.applied_offset == last + 1
        # committed, but never applied: the fault handler halts the node (the recording
        # double keeps the process, so whether append returns does not matter here)
        with contextlib.suppress(TimeoutError, FaultHalt):
            await driver.append([b"set boom 1"], timeout_s=2)
        await wait_for(lambda: faults.faults)
        what, cause = only_fault(faults)
        assert what.startswith(f"state machine apply of offsets {last + 1}..")
        assert isinstance(cause, ValueError)
        assert driver.applied_offset == last + 1 == kv.position  # not past the bad entry
        await driver.close(graceful=False)

    asyncio.run(run())


def test_follower_apply_failure_halts_the_follower(tmp_path: Path) -> None:
    async def run() -> None:
        net = Net()
        faults = {i: RecordingFaultHandler() for i in (1, 2, 3)}
        kvs: dict[int, KV] = {1: KV(), 2: KV(), 3: FaultyKV()}  # only node 3 has the bug
        for i in (1, 2, 3):
            net.drivers[i] = RaftDriver(
                i, THREE, tmp_path / f"n{i}", net.transport(i), kvs[i], fault_handler=faults[i]
            )
        # node 3 must not lead (its own append path would fault instead)
        net.drivers[3].node.is_voter = False
        for driver in net.drivers.values():
            await driver.start()
        await wait_for(lambda: any(d.node.role is Role.LEADER for d in net.drivers.values()))
        leader = next(d for d in net.drivers.values() if d.node.role is Role.LEADER)
        first = await leader.append([b"set a 1"])
        await wait_for(lambda: kvs[3].position > first)
        bad = await leader.append([b"set boom 1"])
        await wait_for(lambda: faults[3].faults)
        what, cause = only_fault(faults[3])
        assert what == f"state machine apply of offsets {bad}..{bad} failed"
        assert isinstance(cause, ValueError)
        assert net.drivers[3].applied_offset == bad == kvs[3].position
        assert not faults[1].faults and not faults[2].faults
        for driver in net.drivers.values():
            await driver.close(graceful=False)

    asyncio.run(run())


def test_snapshot_load_failure_at_start_halts(tmp_path: Path) -> None:
    async def run() -> None:
        driver = await one_voter(tmp_path, KV(), RecordingFaultHandler())
        for i in range(8):
            await driver.append([f"set k{i} v".encode()])
        await wait_for(lambda: driver.snapshots.list())
        await driver.close()
        faults = RecordingFaultHandler()
        again = RaftDriver(1, ONE, tmp_path, NoPeers(), FaultyLoadKV(), fault_handler=faults)
        with pytest.raises(FaultHalt):
            await again.start()
        what, cause = only_fault(faults)
        assert what.startswith("state machine load of snapshot ")
        assert isinstance(cause, ValueError)
        assert again.applied_offset == 0

    asyncio.run(run())


def test_corrupt_snapshot_file_at_start_halts(tmp_path: Path) -> None:
    async def run() -> None:
        driver = await one_voter(tmp_path, KV(), RecordingFaultHandler())
        for i in range(8):
            await driver.append([f"set k{i} v".encode()])
        await wait_for(lambda: driver.snapshots.list())
        await driver.close()
        (snap,) = (tmp_path / METADATA_PARTITION_DIR).glob("*.checkpoint")
        data = bytearray(snap.read_bytes())
        data[len(data) // 2] ^= 0xFF
        snap.write_bytes(bytes(data))
        faults = RecordingFaultHandler()
        again = RaftDriver(1, ONE, tmp_path, NoPeers(), KV(), fault_handler=faults)
        with pytest.raises(FaultHalt):
            await again.start()
        what, _cause = only_fault(faults)
        assert "start-up" in what

    asyncio.run(run())


def test_flush_loop_failure_halts(tmp_path: Path) -> None:
    async def run() -> None:
        faults = RecordingFaultHandler()
        driver = await one_voter(tmp_path, KV(), faults)

        def failing_fsync(end_offset: int) -> int:
            raise OSError(5, "Input/output error")

        driver.log.flush_storage = failing_fsync  # type: ignore[method-assign]
        with pytest.raises((TimeoutError, FaultHalt)):
            await driver.append([b"set a 1"], timeout_s=2)
        await wait_for(lambda: faults.faults)
        what, cause = only_fault(faults)
        assert what == "raft driver flush loop failed" and isinstance(cause, OSError)
        await driver.close(graceful=False)

    asyncio.run(run())


def test_timer_loop_failure_halts(tmp_path: Path) -> None:
    async def run() -> None:
        faults = RecordingFaultHandler()
        driver = await one_voter(tmp_path, KV(), faults)

        def failing_tick(now_ms: int) -> list[object]:
            raise RuntimeError("tick bug")

        driver.node.tick = failing_tick  # type: ignore[method-assign,assignment]
        await wait_for(lambda: faults.faults)
        what, cause = only_fault(faults)
        assert what == "raft node failed a timer tick" and isinstance(cause, RuntimeError)
        assert driver._timer is not None and driver._timer.done()
        await driver.close(graceful=False)

    asyncio.run(run())
