"""The transaction coordinator's shell: the marker sender and crash-only timers."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from riverbed.metadata.controller import Controller, ControllerConfig
from riverbed.metadata.image import BrokerEndpoint, MetadataImage, replay_all
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    CreateTopicsRequest,
    Message,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from riverbed.server.config import ServerConfig
from riverbed.server.fault_handler import FaultHalt, RecordingFaultHandler
from riverbed.server.txn_coordinator import TransactionCoordinatorShell
from riverbed.server.txn_markers import MARKER_RETRY_BACKOFF_MAX_MS, MarkerSender
from riverbed.storage import ManualClock
from riverbed.testing.cluster import scaled_s
from riverbed.transaction.markers import BrokerMarkers, MarkerRequest, TxnMarker

R = WriteTxnMarkersResponse


def image_with_topic(txn_state: bool = False) -> MetadataImage:
    """Brokers 1 and 2 (PLAINTEXT), topic ``t`` with partitions 0 (on 1) and 1 (on 2);
    with ``txn_state``, ``__transaction_state`` with one partition on broker 1."""
    c = Controller(ControllerConfig(node_id=1))
    image = replay_all(MetadataImage.EMPTY, c.bootstrap_records())
    for b in (1, 2):
        eps = [BrokerEndpoint("PLAINTEXT", f"host{b}", 9090 + b)]
        image = replay_all(
            image, c.register_broker(image, b, uuid.UUID(int=b), eps, None, 0).records
        )
        image = replay_all(
            image, c.unfence_broker(image, b, -1, 0, metadata_offset=image.offset).records
        )
    CT = CreateTopicsRequest
    topic = CT.CreatableTopic(
        name="t",
        num_partitions=-1,
        replication_factor=-1,
        assignments=[
            CT.CreatableReplicaAssignment(partition_index=0, broker_ids=[1]),
            CT.CreatableReplicaAssignment(partition_index=1, broker_ids=[2]),
        ],
    )
    topics = [topic]
    if txn_state:
        topics.append(
            CT.CreatableTopic(
                name="__transaction_state",
                num_partitions=-1,
                replication_factor=-1,
                assignments=[CT.CreatableReplicaAssignment(partition_index=0, broker_ids=[1])],
            )
        )
    req = CT(topics=topics, timeout_ms=0, validate_only=False)
    return replay_all(image, c.create_topics(image, req, 0).records)


class FakeChannel:
    def __init__(self, answer: Message | Exception) -> None:
        self.answer = answer
        self.sent: list[tuple[int, int, Message]] = []
        self.closed = False

    async def request(self, api_key: int, version: int, body: Message, timeout_s: float) -> Message:
        self.sent.append((api_key, version, body))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer

    def close(self) -> None:
        self.closed = True


def batch_to(broker: int) -> BrokerMarkers:
    marker = TxnMarker("tid", 7, 3, 5, True, (("t", 0), ("t", 1), ("u", 2)))
    return BrokerMarkers(broker, (MarkerRequest(1, 0, broker, (marker,)),))


def test_markers_are_sent_per_topic_and_answered_per_partition() -> None:
    answer = R(
        markers=[
            R.WritableTxnMarkerResult(
                producer_id=7,
                topics=[
                    R.WritableTxnMarkerTopicResult(
                        name="t",
                        partitions=[
                            R.WritableTxnMarkerPartitionResult(partition_index=0, error_code=0),
                            R.WritableTxnMarkerPartitionResult(
                                partition_index=1,
                                error_code=int(ErrorCode.NOT_LEADER_OR_FOLLOWER),
                            ),
                        ],
                    )
                ],
            )
        ]
    )
    channel = FakeChannel(answer)
    clock = ManualClock(1000)
    sender = MarkerSender(
        1, SimpleNamespace(image=image_with_topic()), "PLAINTEXT", clock.now_ms, 30_000,
        channel_factory=lambda broker: channel,
    )  # fmt: skip
    errors = asyncio.run(sender.send(batch_to(1)))
    assert errors == {
        (7, ("t", 0)): ErrorCode.NONE,
        (7, ("t", 1)): ErrorCode.NOT_LEADER_OR_FOLLOWER,
    }
    ((api_key, version, body),) = channel.sent
    assert (api_key, version) == (27, 1)
    assert isinstance(body, WriteTxnMarkersRequest)
    (m,) = body.markers
    assert (m.producer_id, m.producer_epoch, m.transaction_result, m.coordinator_epoch) == (
        7, 3, True, 5,
    )  # fmt: skip
    assert [(t.name, t.partition_indexes) for t in m.topics] == [("t", [0, 1]), ("u", [2])]


def test_a_lost_marker_request_backs_its_broker_off() -> None:
    """Lost (a connection error): the answer is None, the connection is dropped, and the
    broker's partitions wait (leader -1) until its back-off has passed."""
    channel = FakeChannel(ConnectionRefusedError("down"))
    clock = ManualClock(1000)
    sender = MarkerSender(
        1, SimpleNamespace(image=image_with_topic()), "PLAINTEXT", clock.now_ms, 30_000,
        channel_factory=lambda broker: channel, rng=random.Random(1),
    )  # fmt: skip
    assert sender.leader_of(("t", 1)) == 2
    assert asyncio.run(sender.send(batch_to(2))) is None
    assert channel.closed and sender.lost == 1
    assert sender.leader_of(("t", 1)) == -1  # backing off
    assert sender.leader_of(("t", 0)) == 1  # another broker is not
    assert sender.leader_of(("gone", 0)) is None  # no such partition: no marker needed
    clock.advance(MARKER_RETRY_BACKOFF_MAX_MS * 2)
    assert sender.leader_of(("t", 1)) == 2


def test_this_nodes_own_markers_are_written_in_process() -> None:
    """Broker 1's coordinator writes broker 1's markers through ``local`` (no connection
    to itself, no request encoded: fewer hops before the Complete record that the
    producer's next transaction waits for); broker 2's still go over the network."""
    written: list[WriteTxnMarkersRequest] = []

    async def local(req: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
        written.append(req)
        return R(markers=[R.WritableTxnMarkerResult(producer_id=7, topics=[
            R.WritableTxnMarkerTopicResult(name="t", partitions=[
                R.WritableTxnMarkerPartitionResult(partition_index=0, error_code=0)])])])  # fmt: skip

    channels: list[int] = []
    channel = FakeChannel(R(markers=[]))

    def connect(broker: int) -> FakeChannel:
        channels.append(broker)
        return channel

    sender = MarkerSender(
        1, SimpleNamespace(image=image_with_topic()), "PLAINTEXT", ManualClock(1000).now_ms,
        30_000, channel_factory=connect, local=local,
    )  # fmt: skip
    assert asyncio.run(sender.send(batch_to(1))) == {(7, ("t", 0)): ErrorCode.NONE}
    ((m,),) = [req.markers for req in written]
    assert (m.producer_id, m.producer_epoch, m.coordinator_epoch) == (7, 3, 5)
    assert channels == [] and sender.answered == 1
    assert asyncio.run(sender.send(batch_to(2))) == {}
    assert channels == [2]


def test_a_failing_local_marker_write_is_lost_and_backed_off() -> None:
    """An exception out of the in-process write is what dispatch would have answered
    UNKNOWN_SERVER_ERROR over the network: the batch is lost (its partitions planned
    again after the back-off), the node does not halt."""

    async def local(req: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
        raise RuntimeError("boom")

    sender = MarkerSender(
        1, SimpleNamespace(image=image_with_topic()), "PLAINTEXT", ManualClock(1000).now_ms,
        30_000, local=local, rng=random.Random(1),
    )  # fmt: skip
    assert asyncio.run(sender.send(batch_to(1))) is None
    assert sender.lost == 1 and sender.leader_of(("t", 0)) == -1


def test_a_failing_core_tick_goes_to_the_fault_handler() -> None:
    faults = RecordingFaultHandler()
    metadata = SimpleNamespace(image=image_with_topic())
    partitions = SimpleNamespace(get=lambda topic, index: None, replicas=None)

    async def run() -> None:
        shell = TransactionCoordinatorShell(
            ServerConfig.embedded_default(),
            1,
            partitions,  # type: ignore[arg-type]
            metadata,
            ManualClock(5),
            SimpleNamespace(allocate=lambda: 1),
            faults,
        )

        def broken(now_ms: int) -> Any:
            raise RuntimeError("a bug in the transaction core")

        shell.core.tick = broken  # type: ignore[method-assign]
        shell.start()
        assert shell._timer_task is not None
        with pytest.raises(FaultHalt):
            await asyncio.wait_for(shell._timer_task, 5)
        shell.close()

    asyncio.run(run())
    ((what, cause), *_) = faults.faults
    assert "transaction coordinator timers failed" in what and isinstance(cause, RuntimeError)


class Acks:
    """The shell's view of acks=all, driven by the test: appends succeed at once, their
    acknowledgement waits for ``answer``; loads read nothing."""

    def __init__(self) -> None:
        self.appended: list[list[tuple[bytes, bytes | None]]] = []
        self.loads = 0
        self.acked: asyncio.Future[ErrorCode] | None = None

    def append_records(
        self, partitions: Any, hosted: Any, records: Any, comp: int, now: int
    ) -> int:
        self.appended.append(list(records))
        return len(self.appended)

    async def wait_high_watermark(
        self, partitions: Any, hosted: Any, end: int, timeout_ms: int
    ) -> bool:
        return True  # a load's wait for the log end it read

    async def wait_committed(
        self, partitions: Any, hosted: Any, end: int, timeout_ms: int
    ) -> ErrorCode:
        self.acked = asyncio.get_running_loop().create_future()
        return await self.acked

    def read_records(self, plog: Any, read_bytes: int) -> tuple[list[Any], int]:
        self.loads += 1
        return [], 0


async def _turns(until: Any, turns: int = 1000) -> None:
    """Until ``until()``: event-loop turns first, then short sleeps up to a deadline (a
    load reads its partition in a worker thread, which a loaded machine may not have run
    within the turns: the in-doubt test failed so about once in 25 runs at load 7)."""
    for _ in range(turns):
        if until():
            return
        await asyncio.sleep(0)
    deadline = time.monotonic() + scaled_s(10)
    while time.monotonic() < deadline:
        if until():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("not reached")


def _shell_over(acks: Acks, monkeypatch: pytest.MonkeyPatch) -> TransactionCoordinatorShell:
    import riverbed.server.txn_coordinator as shell_module

    for name in ("append_records", "wait_committed", "wait_high_watermark", "read_records"):
        monkeypatch.setattr(shell_module, name, getattr(acks, name))
    config = ServerConfig.load(None, ["transaction.state.log.num.partitions=1"])
    partitions = SimpleNamespace(get=lambda topic, index: SimpleNamespace(log=None), replicas=None)
    return TransactionCoordinatorShell(
        config, 1, partitions,  # type: ignore[arg-type]
        SimpleNamespace(image=image_with_topic(txn_state=True)), ManualClock(5),
        SimpleNamespace(allocate=lambda: 42), RecordingFaultHandler(),
    )  # fmt: skip


def _shell_of(partitions: Any) -> TransactionCoordinatorShell:
    """A shell over ``partitions`` with one ``__transaction_state`` partition, on broker 1."""
    return TransactionCoordinatorShell(
        ServerConfig.load(None, ["transaction.state.log.num.partitions=1"]), 1, partitions,
        SimpleNamespace(image=image_with_topic(txn_state=True)), ManualClock(5),
        SimpleNamespace(allocate=lambda: 42), RecordingFaultHandler(),
    )  # fmt: skip


def _init(shell: TransactionCoordinatorShell) -> Any:
    core = shell.core
    return shell.call(lambda rid, now: core.init_producer_id(rid, "tid", 60_000, None, 4, now))


def test_init_producer_id_is_answered_once_its_record_is_committed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    acks = Acks()

    async def run() -> Any:
        shell = _shell_over(acks, monkeypatch)
        assert shell.check("tid") == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS  # starts the load
        await _turns(lambda: shell.check("tid") == ErrorCode.NONE)
        pending = asyncio.ensure_future(_init(shell))
        await _turns(lambda: acks.acked is not None)
        assert len(acks.appended) == 1 and not pending.done()  # written, not answered
        assert acks.acked is not None
        acks.acked.set_result(ErrorCode.NONE)
        result = await asyncio.wait_for(pending, 5)
        shell.close()
        return result

    result = asyncio.run(run())
    assert (result.error, result.producer_id, result.producer_epoch) == (ErrorCode.NONE, 42, 0)


def test_a_write_in_doubt_is_answered_and_the_partition_loaded_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Appended but not acknowledged in time: the record may still commit, so the shard is
    not trusted: the request answers COORDINATOR_NOT_AVAILABLE (REQUEST_TIMED_OUT mapped as
    Kafka's coordinator maps it: the client retries) and the partition is read again."""
    acks = Acks()

    async def run() -> Any:
        shell = _shell_over(acks, monkeypatch)
        shell.reconcile()
        await _turns(lambda: shell.check("tid") == ErrorCode.NONE)
        assert acks.loads == 1
        pending = asyncio.ensure_future(_init(shell))
        await _turns(lambda: acks.acked is not None)
        assert acks.acked is not None
        acks.acked.set_result(ErrorCode.REQUEST_TIMED_OUT)
        result = await asyncio.wait_for(pending, 5)
        await _turns(lambda: acks.loads == 2 and shell.check("tid") == ErrorCode.NONE)
        shell.close()
        return result

    result = asyncio.run(run())
    assert result.error == ErrorCode.COORDINATOR_NOT_AVAILABLE


def test_a_load_needs_the_high_watermark_not_min_insync_replicas(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the ISR below min.insync.replicas an acks=all wait is refused
    (NOT_ENOUGH_REPLICAS_AFTER_APPEND) even for records already committed; the load only
    needs them committed (high watermark >= the log end it read), so it completes: the
    coordinator answers (reads, and the errors of its refused writes) instead of
    reloading the partition forever."""
    import riverbed.server.txn_coordinator as shell_module

    monkeypatch.setattr(shell_module, "read_records", lambda plog, n: ([], 5))

    async def refused(hosted: Any, end: int, timeout_ms: int) -> ErrorCode:
        return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND

    async def wait_until(keys: Any, ready: Any, timeout_ms: int) -> bool:
        return bool(ready())

    hosted = SimpleNamespace(topic="__transaction_state", index=0,
                             log=SimpleNamespace(high_watermark=5))  # fmt: skip
    partitions = SimpleNamespace(
        get=lambda topic, index: hosted,
        replicas=SimpleNamespace(on_local_append=lambda h: None, wait_for_acks=refused),
        purgatory=SimpleNamespace(wait_until=wait_until),
    )

    async def run() -> ErrorCode:
        shell = _shell_of(partitions)
        shell.reconcile()
        try:
            await _turns(lambda: shell.check("tid") == ErrorCode.NONE)
            return shell.check("tid")
        finally:
            shell.close()

    assert asyncio.run(run()) == ErrorCode.NONE


class AutoAcks(Acks):
    """Every write is acknowledged at the next event-loop turn."""

    async def wait_committed(
        self, partitions: Any, hosted: Any, end: int, timeout_ms: int
    ) -> ErrorCode:
        await asyncio.sleep(0)
        return ErrorCode.NONE


def test_a_commit_runs_from_end_txn_to_complete_without_a_timer_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A transaction's steps are driven by its own events: the Prepare record's commit
    sends the markers, their answer writes the Complete record. No request, write or
    marker answer wakes the timer task (each wake was a full turn over leadership and
    every shard's timers and markers in the middle of one commit), so with the timer's
    interval out of reach the core's ``tick`` runs no more after the load, while init,
    add, EndTxn, the markers and the Complete record all happen, in that order."""
    import riverbed.server.txn_coordinator as shell_module

    monkeypatch.setattr(shell_module, "TIMER_INTERVAL_MS", 3_600_000)
    acks = AutoAcks()
    marked: list[int] = []

    async def local(req: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
        marked.append(len(acks.appended))  # the writes before the markers
        return R(markers=[R.WritableTxnMarkerResult(producer_id=m.producer_id, topics=[
            R.WritableTxnMarkerTopicResult(name=t.name, partitions=[
                R.WritableTxnMarkerPartitionResult(partition_index=p, error_code=0)
                for p in t.partition_indexes]) for t in m.topics]) for m in req.markers])  # fmt: skip

    async def run() -> tuple[int, int, list[Any]]:
        shell = _shell_over(acks, monkeypatch)
        shell.markers.local = local
        ticks: list[int] = []
        tick = shell.core.tick
        monkeypatch.setattr(shell.core, "tick", lambda now: ticks.append(now) or tick(now))
        shell.start()
        await _turns(lambda: shell.check("tid") == ErrorCode.NONE and not shell._wake.is_set())
        for _ in range(10):  # the turn the finished load woke
            await asyncio.sleep(0)
        after_load = len(ticks)
        core = shell.core
        init = await asyncio.wait_for(_init(shell), 5)
        pid, epoch = init.producer_id, init.producer_epoch
        tp = frozenset({("t", 0)})
        answers = [init.error]
        add = await shell.call(lambda r, now: core.add_partitions(r, "tid", pid, epoch, tp, 0, now))
        answers.append(dict(add.errors)[("t", 0)])
        end = await shell.call(lambda r, now: core.end_txn(r, "tid", pid, epoch, True, 1, now))
        answers.append(end.error)
        await _turns(lambda: core.shards[0].txns["tid"].state.kafka_name == "CompleteCommit")
        shell.close()
        return after_load, len(ticks), answers

    after_load, ticks, answers = asyncio.run(run())
    assert answers == [ErrorCode.NONE] * 3
    assert ticks == after_load >= 1  # no timer turn from init to the Complete record
    # init, the add's Ongoing, PrepareCommit, then the markers, then CompleteCommit
    assert marked == [3] and len(acks.appended) == 4


class HeldAtOnce:
    """A replica manager whose ISR holds every append at once (a leader alone in its
    ISR): ``park_produce`` calls back before it returns; the awaitable forms of the same
    wait (the ones the old paths used) complete one loop turn later."""

    def __init__(self) -> None:
        self.parked = 0

    def on_local_append(self, hosted: Any) -> None:
        pass

    def park_produce(self, hosted: Any, end: int, timeout_ms: int, done: Any) -> None:
        self.parked += 1
        done(ErrorCode.NONE)

    async def wait_for_acks(self, hosted: Any, end: int, timeout_ms: int) -> ErrorCode:
        await asyncio.sleep(0)
        return ErrorCode.NONE

    def acks_future(self, hosted: Any, end: int, timeout_ms: int) -> asyncio.Future[ErrorCode]:
        self.parked += 1
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(ErrorCode.NONE)
        return fut

    def check_produce(self, hosted: Any, acks: int) -> ErrorCode:
        return ErrorCode.NONE


def _finished_without_a_turn(coro: Any) -> Any:
    """``coro``'s result when it runs to its end without yielding to the loop once."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise AssertionError("it waited for a loop turn")


def test_a_write_the_isr_holds_at_once_is_answered_in_the_same_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A leader alone in its ISR commits a ``__transaction_state`` record as it appends
    it: InitProducerId, AddPartitionsToTxn and EndTxn are answered in the turn that wrote
    their record (the write's wait is parked with the replica manager, not a task per
    write: each was a loop turn between the commit and the answer, and a turn more
    between the Prepare record and its markers)."""
    import riverbed.server.txn_coordinator as shell_module

    acks = Acks()
    monkeypatch.setattr(shell_module, "append_records", acks.append_records)
    monkeypatch.setattr(shell_module, "read_records", acks.read_records)
    replicas = HeldAtOnce()
    hosted = SimpleNamespace(topic="__transaction_state", index=0,
                             log=SimpleNamespace(high_watermark=0))  # fmt: skip

    async def wait_until(keys: Any, ready: Any, timeout_ms: int) -> bool:
        return bool(ready())

    partitions = SimpleNamespace(get=lambda topic, index: hosted, replicas=replicas,
                                 purgatory=SimpleNamespace(wait_until=wait_until))  # fmt: skip

    async def run() -> list[ErrorCode]:
        shell = _shell_of(partitions)
        shell.reconcile()
        await _turns(lambda: shell.check("tid") == ErrorCode.NONE)
        core = shell.core
        init = _finished_without_a_turn(_init(shell))
        pid, epoch, tp = init.producer_id, init.producer_epoch, frozenset({("t", 0)})
        add = _finished_without_a_turn(
            shell.call(lambda r, now: core.add_partitions(r, "tid", pid, epoch, tp, 0, now))
        )
        end = _finished_without_a_turn(
            shell.call(lambda r, now: core.end_txn(r, "tid", pid, epoch, True, 1, now))
        )
        shell.close()
        return [init.error, dict(add.errors)[("t", 0)], end.error]

    assert asyncio.run(run()) == [ErrorCode.NONE] * 3
    assert len(acks.appended) == 3 and replicas.parked == 3


def test_markers_the_isr_holds_at_once_are_answered_in_the_same_turn() -> None:
    """WriteTxnMarkers (and the coordinator's in-process call of it) waits for each
    marker's acks=all through the delayed produce's future itself: markers a leader alone
    in its ISR committed as it appended them are answered without a loop turn (a task
    per partition and a gather cost turns between the Prepare record and the Complete
    record that the producer's next transaction waits for)."""
    from riverbed.server.broker.txn_markers import write_txn_markers

    replicas = HeldAtOnce()
    appended: list[bytearray] = []

    def append(hosted: Any, batch: bytearray, origin: str = "") -> Any:
        appended.append(batch)
        return SimpleNamespace(first_offset=len(appended) - 1, last_offset=len(appended) - 1)

    broker = SimpleNamespace(
        partitions=SimpleNamespace(
            leader_partition=lambda topic, index: SimpleNamespace(topic=topic, index=index),
            replicas=replicas,
            append=append,
        ),
        txn_marker_listener=None,
        config=ServerConfig.embedded_default(),
    )
    W = WriteTxnMarkersRequest
    req = W(markers=[W.WritableTxnMarker(
        producer_id=7, producer_epoch=3, transaction_result=True, coordinator_epoch=5,
        topics=[W.WritableTxnMarkerTopic(name="t", partition_indexes=[0, 1])])])  # fmt: skip

    async def run() -> WriteTxnMarkersResponse:
        return _finished_without_a_turn(write_txn_markers(broker, req))  # type: ignore[arg-type]

    response = asyncio.run(run())
    ((topic,),) = [m.topics for m in response.markers]
    assert [(p.partition_index, p.error_code) for p in topic.partitions] == [(0, 0), (1, 0)]
    assert len(appended) == 2 and replicas.parked == 2


def test_a_transactional_id_waits_while_its_replica_is_created(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The image names this node the leader of the id's partition before the replica
    exists: COORDINATOR_LOAD_IN_PROGRESS (not NOT_COORDINATOR), and `wait_ready` holds
    the request until the replica exists and its shard is loaded (librdkafka backs off
    ~0.5 s after either answer). Bounded: past READY_WAIT_MS it returns all the same; an
    id another node coordinates is not waited for."""
    import riverbed.server.coordinator_log as coordinator_log
    import riverbed.server.txn_coordinator as shell_module

    acks = AutoAcks()
    for name in ("append_records", "wait_committed", "wait_high_watermark", "read_records"):
        monkeypatch.setattr(shell_module, name, getattr(acks, name))
    created: dict[str, Any] = {}
    partitions = SimpleNamespace(get=lambda topic, index: created.get("0"), replicas=None)

    async def run() -> None:
        shell = _shell_of(partitions)
        elsewhere = TransactionCoordinatorShell(
            ServerConfig.load(None, ["transaction.state.log.num.partitions=1"]), 2, partitions,
            SimpleNamespace(image=image_with_topic(txn_state=True)), ManualClock(5),
            SimpleNamespace(allocate=lambda: 42), RecordingFaultHandler(),
        )  # fmt: skip
        assert shell.check("tid") == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        waiting = asyncio.ensure_future(shell.wait_ready(["tid"]))
        await asyncio.sleep(0.05)
        assert not waiting.done()  # no replica yet: held
        created["0"] = SimpleNamespace(log=None)
        await asyncio.wait_for(waiting, scaled_s(10))
        assert shell.check("tid") == ErrorCode.NONE
        assert elsewhere.check("tid") == ErrorCode.NOT_COORDINATOR
        other = asyncio.ensure_future(elsewhere.wait_ready(["tid"]))
        await asyncio.sleep(0)
        assert other.done()
        del created["0"]
        monkeypatch.setattr(coordinator_log, "READY_WAIT_MS", 50)
        fresh = _shell_of(partitions)
        await asyncio.wait_for(fresh.wait_ready(["tid"]), scaled_s(10))
        assert fresh.check("tid") == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        for s in (shell, elsewhere, fresh):
            s.close()

    asyncio.run(run())
