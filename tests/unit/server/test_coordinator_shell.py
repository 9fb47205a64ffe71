"""The group coordinator shell: a failure in its timers halts the node (crash-only)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from riverbed.server.config import ServerConfig
from riverbed.server.coordinator import GroupCoordinator
from riverbed.server.fault_handler import FaultHalt, RecordingFaultHandler
from riverbed.storage import ManualClock
from riverbed.storage.log_files import ReadResult
from riverbed.testing.cluster import scaled_s


class BrokenShard:
    groups: dict[str, Any] = {}

    def next_deadline(self) -> int:
        return 0

    def tick(self, now_ms: int) -> None:
        raise RuntimeError("a bug in a group state machine")


def test_a_failing_shard_tick_goes_to_the_fault_handler() -> None:
    faults = RecordingFaultHandler()
    metadata = SimpleNamespace(image=SimpleNamespace(topic=lambda name: None))
    partitions = SimpleNamespace(get=lambda topic, index: None)

    async def run() -> None:
        coordinator = GroupCoordinator(
            ServerConfig.embedded_default(), 1, partitions, metadata, ManualClock(5), faults
        )
        coordinator.shards[0] = BrokenShard()  # type: ignore[assignment]
        coordinator.start()
        assert coordinator._timer_task is not None
        with pytest.raises(FaultHalt):
            await asyncio.wait_for(coordinator._timer_task, 5)

    asyncio.run(run())
    ((what, cause),) = faults.faults
    assert what == "group coordinator timers failed" and isinstance(cause, RuntimeError)


def test_a_commit_below_min_insync_replicas_is_coordinator_not_available() -> None:
    """acks=all for the coordinator's writes: an ISR below min.insync.replicas refuses the
    write up front, and the commit answers what Kafka's coordinator answers."""
    import random

    from riverbed.coordinator.shard import GroupConfig, GroupShard
    from riverbed.protocol.errors import ErrorCode
    from riverbed.protocol.messages import OffsetCommitRequest as R
    from riverbed.server.coordinator import append_error

    appended: list[bytes] = []
    replicas = SimpleNamespace(check_produce=lambda hosted, acks: ErrorCode.NOT_ENOUGH_REPLICAS)
    partitions = SimpleNamespace(
        get=lambda topic, index: SimpleNamespace(log=None),
        replicas=replicas,
        append=lambda hosted, batch: appended.append(bytes(batch)),
    )
    metadata = SimpleNamespace(image=SimpleNamespace(topic=lambda name: None))
    req = R(
        group_id="g",
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            R.OffsetCommitRequestTopic(
                name="t",
                partitions=[R.OffsetCommitRequestPartition(partition_index=0, committed_offset=1)],
            )
        ],
    )

    async def run() -> Any:
        coordinator = GroupCoordinator(
            ServerConfig.embedded_default(), 1, partitions, metadata, ManualClock(5)
        )
        shard = GroupShard(0, GroupConfig(), random.Random(0))
        coordinator.shards[0] = shard
        return await coordinator.call_shard(
            0, shard, 8, lambda s, reply, now: s.offset_commit(reply, req, now)
        )

    resp = asyncio.run(run())
    assert resp.topics[0].partitions[0].error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert appended == []  # nothing was written
    assert append_error(ErrorCode.NOT_LEADER_OR_FOLLOWER) == ErrorCode.NOT_COORDINATOR
    assert append_error(ErrorCode.RECORD_LIST_TOO_LARGE) == ErrorCode.INVALID_COMMIT_OFFSET_SIZE


# ---------------------------------------------------------------------------------------
# Leadership is checked at every use; a write in doubt reloads the shard (issue 18)
class FakeLog:
    def __init__(self) -> None:
        self.log_start_offset = 0
        self.log_end_offset = 0
        self.high_watermark = 0

    def read(self, offset: int, max_bytes: int, end: int) -> ReadResult:
        return ReadResult([], -1, offset, self.high_watermark, 0, self.log_end_offset)


class Registration:
    def __init__(self, leader: int, leader_epoch: int) -> None:
        self.leader, self.leader_epoch = leader, leader_epoch


def _offsets_topic(reg: Registration) -> Any:
    topic = SimpleNamespace(partitions={0: reg})
    return SimpleNamespace(image=SimpleNamespace(topic=lambda name: topic))


def _coordinator_over(partitions: Any, reg: Registration | None = None) -> GroupCoordinator:
    """Node 1's coordinator; ``__consumer_offsets`` has one partition, led per ``reg``
    (node 1 at leader epoch 5 unless given)."""
    reg = Registration(1, 5) if reg is None else reg
    return GroupCoordinator(
        ServerConfig.embedded_default(), 1, partitions, _offsets_topic(reg), ManualClock(5)
    )


def _loaded(coordinator: GroupCoordinator, epoch: int, load_end: int = 0) -> Any:
    import random

    from riverbed.coordinator.shard import GroupConfig, GroupShard

    shard = GroupShard(0, GroupConfig(), random.Random(0))
    coordinator.shards[0] = shard
    coordinator._epochs[0] = epoch
    coordinator._load_end[0] = load_end
    return shard


def test_a_deposed_coordinator_answers_not_coordinator_at_once() -> None:
    """No 200 ms window: the image's leader and leader epoch are checked when a shard is
    used (OffsetFetch, heartbeats), not only by the timer's reconcile."""
    from riverbed.protocol.errors import ErrorCode
    from riverbed.server.coordinator import CoordinatorError

    reg = Registration(leader=1, leader_epoch=5)
    hosted = SimpleNamespace(log=FakeLog())
    partitions = SimpleNamespace(get=lambda topic, index: hosted)

    async def run() -> None:
        coordinator = _coordinator_over(partitions, reg)
        shard = _loaded(coordinator, 5)
        assert coordinator.shard_of("g") == (0, shard)
        reg.leader = 2  # the image moved leadership away; no timer ran since
        with pytest.raises(CoordinatorError) as info:
            coordinator.shard_of("g")
        assert info.value.code == ErrorCode.NOT_COORDINATOR
        assert 0 not in coordinator.shards
        reg.leader, reg.leader_epoch = 1, 6
        _loaded(coordinator, 5)  # leading again, at a newer epoch: the old shard is stale
        with pytest.raises(CoordinatorError) as info:
            coordinator.shard_of("g")
        assert info.value.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        coordinator.close()

    asyncio.run(run())


def test_a_loaded_shard_answers_once_what_it_loaded_is_committed() -> None:
    from riverbed.protocol.errors import ErrorCode
    from riverbed.server.coordinator import CoordinatorError

    log = FakeLog()
    hosted = SimpleNamespace(log=log)
    partitions = SimpleNamespace(get=lambda topic, index: hosted)

    async def run() -> None:
        coordinator = _coordinator_over(partitions)
        shard = _loaded(coordinator, 5, load_end=10)
        log.high_watermark = 9  # the previous leader's tail is not committed yet
        with pytest.raises(CoordinatorError) as info:
            coordinator.shard_of("g")
        assert info.value.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        log.high_watermark = 10
        assert coordinator.shard_of("g") == (0, shard)

    asyncio.run(run())


def test_a_write_in_doubt_answers_its_error_and_reloads_the_groups() -> None:
    """Appended but not acknowledged in time: the commit answers REQUEST_TIMED_OUT, the
    shard put the group back, and since the records may still commit the groups are
    loaded again from the log. What waited behind it is not written on that state (the
    group simulation found it): it answers NOT_COORDINATOR and nothing more is appended."""
    from riverbed.protocol.errors import ErrorCode
    from riverbed.testing.group_harness import commit_req

    log = FakeLog()
    hosted = SimpleNamespace(log=log)

    async def wait_for_acks(hosted: Any, end: int, timeout_ms: int) -> ErrorCode:
        await asyncio.sleep(0)  # the second commit arrives meanwhile
        return ErrorCode.REQUEST_TIMED_OUT

    def append(hosted: Any, batch: bytes, *, origin: str = "client") -> Any:
        log.log_end_offset += 1
        end = log.log_end_offset
        return SimpleNamespace(first_offset=end - 1, last_offset=end - 1)

    replicas = SimpleNamespace(
        check_produce=lambda hosted, acks: ErrorCode.NONE,
        wait_for_acks=wait_for_acks,
        on_local_append=lambda hosted: None,
    )
    partitions = SimpleNamespace(get=lambda topic, index: hosted, replicas=replicas, append=append)

    async def run() -> tuple[list[Any], Any, Any]:
        coordinator = _coordinator_over(partitions)
        shard = _loaded(coordinator, 5)

        def commit(offset: int) -> Any:
            req = commit_req("", -1, {("t", 0): offset})
            return coordinator.call("g", 8, lambda s, reply, now: s.offset_commit(reply, req, now))

        resps = await asyncio.gather(commit(1), commit(2))
        for _ in range(100):  # the reload runs in a worker thread
            if 0 in coordinator.shards:
                break
            await asyncio.sleep(0.01)
        return resps, shard, coordinator.shards.get(0)

    (first, second), old, new = asyncio.run(run())
    assert first.topics[0].partitions[0].error_code == ErrorCode.REQUEST_TIMED_OUT
    assert second.topics[0].partitions[0].error_code == ErrorCode.NOT_COORDINATOR
    assert log.log_end_offset == 1  # only the first commit's batch
    assert old.groups == {}  # nothing of either commit stayed in the old shard
    assert new is not None and new is not old


def test_txn_offset_commit_verification_errors_by_version() -> None:
    """KIP-890: a transaction coordinator's verification error as the TxnOffsetCommit
    answers it (TRANSACTION_ABORTABLE only to v4+, which know it)."""
    from riverbed.protocol.errors import ErrorCode as E
    from riverbed.server.broker.groups import txn_commit_error

    assert txn_commit_error(E.TRANSACTION_ABORTABLE, 3) == E.INVALID_TXN_STATE
    assert txn_commit_error(E.TRANSACTION_ABORTABLE, 4) == E.TRANSACTION_ABORTABLE
    assert txn_commit_error(E.PRODUCER_FENCED, 4) == E.INVALID_PRODUCER_EPOCH
    assert txn_commit_error(E.CONCURRENT_TRANSACTIONS, 0) == E.COORDINATOR_NOT_AVAILABLE
    assert txn_commit_error(E.NETWORK_EXCEPTION, 4) == E.COORDINATOR_LOAD_IN_PROGRESS
    assert txn_commit_error(E.INVALID_TXN_STATE, 4) == E.INVALID_TXN_STATE


def test_a_failing_marker_halts_the_node() -> None:
    """Crash-only: a marker the shard cannot apply leaves memory unlike the log, so the
    node halts (the start-up path reloads from the log) instead of answering on."""

    class BrokenMarkers:
        def apply_marker(self, producer_id: int, commit: bool) -> None:
            raise RuntimeError("a bug in the pending offsets")

    faults = RecordingFaultHandler()
    metadata = SimpleNamespace(image=SimpleNamespace(topic=lambda name: None))
    partitions = SimpleNamespace(get=lambda topic, index: None)
    coordinator = GroupCoordinator(
        ServerConfig.embedded_default(), 1, partitions, metadata, ManualClock(5), faults
    )
    coordinator.shards[0] = BrokenMarkers()  # type: ignore[assignment]
    with pytest.raises(FaultHalt):
        coordinator.on_txn_marker(0, 7, True, 10)
    ((what, cause),) = faults.faults
    assert what == "group coordinator marker failed" and isinstance(cause, RuntimeError)
    coordinator.on_txn_marker(1, 7, True, 10)  # a partition not coordinated here: ignored


def test_a_marker_between_verification_and_append_refuses_the_txn_commit() -> None:
    """KIP-890: a TxnOffsetCommit verified while its transaction was ongoing, whose
    producer's marker is appended before the commit's own write (it waited behind the
    group's write in flight, say), is refused INVALID_TXN_STATE and nothing is appended:
    appended after the marker, its offsets would wait for (and commit with) the producer's
    next transaction."""
    from riverbed.protocol.errors import ErrorCode
    from riverbed.testing.group_harness import txn_commit_req

    log = FakeLog()
    hosted = SimpleNamespace(log=log)
    appended: list[str] = []

    def append(hosted: Any, batch: bytes, *, origin: str = "client") -> Any:
        appended.append(origin)
        log.log_end_offset += 1
        log.high_watermark = log.log_end_offset
        end = log.log_end_offset
        return SimpleNamespace(first_offset=end - 1, last_offset=end - 1)

    partitions = SimpleNamespace(get=lambda topic, index: hosted, replicas=None, append=append)
    marker_seen = [False]

    async def run() -> list[Any]:
        coordinator = _coordinator_over(partitions)
        shard = _loaded(coordinator, 5)
        out = []

        def still_holds() -> bool:
            return not marker_seen[0]

        for pid in (7, 8):
            key = coordinator.hold_txn_guard("g", pid, still_holds)
            req = txn_commit_req(pid, {("t", 0): pid})
            out.append(
                await coordinator.call(
                    "g", 3, lambda s, r, now, req=req: s.txn_offset_commit(r, req, now)
                )
            )
            coordinator.release_txn_guard(key, still_holds)
            marker_seen[0] = True  # producer 8's marker lands after its verification
        assert set(shard.pending_txn) == {7}
        return out

    first, second = asyncio.run(run())
    assert first.topics[0].partitions[0].error_code == ErrorCode.NONE
    assert second.topics[0].partitions[0].error_code == ErrorCode.INVALID_TXN_STATE
    assert appended == ["coordinator"]  # the refused commit appended nothing


# ---------------------------------------------------------------------------------------
# A node becoming a group's coordinator holds the request instead of bouncing it
def test_a_request_waits_while_its_replica_is_created_and_its_shard_loaded() -> None:
    """The image names this node the leader before its replica exists (FindCoordinator
    created the topic a moment ago): COORDINATOR_LOAD_IN_PROGRESS, not NOT_COORDINATOR,
    and a request waits until the replica exists and its shard is loaded. librdkafka
    backs off ~3 s after either answer; a fresh cluster's first group waited that long."""
    from riverbed.protocol.errors import ErrorCode
    from riverbed.server.coordinator import CoordinatorError

    created: dict[str, Any] = {}
    replicas = SimpleNamespace(on_local_append=lambda hosted: None)
    partitions = SimpleNamespace(get=lambda topic, index: created.get("0"), replicas=replicas)

    async def run() -> None:
        coordinator = _coordinator_over(partitions)
        with pytest.raises(CoordinatorError) as info:
            coordinator.shard_of("g")
        assert info.value.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        waiting = asyncio.ensure_future(coordinator.ready_shard("g"))
        await asyncio.sleep(0.05)
        assert not waiting.done()  # still no replica: held, not answered
        created["0"] = SimpleNamespace(log=FakeLog())
        partition, shard = await asyncio.wait_for(waiting, scaled_s(10))
        assert (partition, shard) == (0, coordinator.shards[0])
        coordinator.close()

    asyncio.run(run())


def test_the_wait_for_a_coordinator_is_bounded_and_skips_other_errors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past READY_WAIT_MS the request answers COORDINATOR_LOAD_IN_PROGRESS after all (the
    client backs off); a group another node leads answers NOT_COORDINATOR with no wait."""
    import riverbed.server.coordinator_log as coordinator_log
    from riverbed.protocol.errors import ErrorCode
    from riverbed.server.coordinator import CoordinatorError

    monkeypatch.setattr(coordinator_log, "READY_WAIT_MS", 50)
    reg = Registration(1, 5)
    partitions = SimpleNamespace(get=lambda topic, index: None)

    async def run() -> None:
        coordinator = _coordinator_over(partitions, reg)
        with pytest.raises(CoordinatorError) as info:
            await asyncio.wait_for(coordinator.ready_shard("g"), scaled_s(10))
        assert info.value.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        reg.leader = 2
        waited = asyncio.ensure_future(coordinator.ready_shard("g"))
        await asyncio.sleep(0)  # one turn: no poll round
        assert waited.done()
        with pytest.raises(CoordinatorError) as info:
            waited.result()
        assert info.value.code == ErrorCode.NOT_COORDINATOR
        coordinator.close()

    asyncio.run(run())
