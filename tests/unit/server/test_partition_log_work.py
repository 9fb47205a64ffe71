"""Partition logs are created and deleted off the event loop, in order per partition.

`riverbed.server.broker.log_work` runs the file work of new and deleted partition logs in
worker threads (``LOG_WORK_THREADS`` at once); the partition manager serves a partition
once its log exists. Checked here by the order of events, never by timing:

- the worker: jobs of one partition in order, others overlapping, at most the bound;
- a partition manager with a replica manager: a new log this node leads gets its leader
  epoch in the worker (no file call on the loop's thread), one whose leadership moved
  while it was being created ends a follower at the new epoch, a topic re-created while
  the old log is being deleted gets a new empty log after the deletion;
- a real node in this process: ApiVersions and Metadata answered while a thousand logs
  are created and deleted, none of their file calls on the loop's thread; a deletion
  whose log has an fsync in flight does not hold the loop; a creation failing on the disk
  takes its log dir offline and the partition answers KAFKA_STORAGE_ERROR.
"""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from tests.unit.server.test_partition_creation import Conn, create_req, produce_req

from riverbed.metadata.image import MetadataImage, replay_all
from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    AlterPartitionRequest,
    AlterPartitionResponse,
    ApiVersionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    MetadataRequest,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from riverbed.protocol.records import SimpleRecord, build_batch
from riverbed.server.broker.log_work import LOG_WORK_THREADS, Job, LogWork
from riverbed.server.broker.partitions import PartitionManager
from riverbed.server.fault_handler import RecordingFaultHandler
from riverbed.server.purgatory import Purgatory
from riverbed.server.replication.manager import ReplicaManager
from riverbed.storage.clock import ManualClock
from riverbed.storage.log_manager import LogManager
from riverbed.testing.faulty_files import FaultyFileIO

#: Liveness bound of any one wait (not a timing under test).
WAIT_S = 30.0
NODE = 1
NOW_MS = 1_700_000_000_000


async def until(condition: Callable[[], bool]) -> None:
    """Wait (bounded) until ``condition()`` holds; the loop runs meanwhile."""
    for _ in range(int(WAIT_S * 100)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition never held")


async def wait_event(event: threading.Event) -> None:
    assert await asyncio.to_thread(event.wait, WAIT_S), "event never set"


# ---------------------------------------------------------------------------- the worker
def test_jobs_run_in_order_per_partition_and_overlap_up_to_the_bound() -> None:
    events: list[str] = []
    gate = threading.Event()
    active = [0, 0]  # now, most at once
    lock = threading.Lock()

    def job(name: str, *, hold: bool = False) -> Job:
        def work() -> object:
            with lock:
                active[0] += 1
                active[1] = max(active)
            if hold:
                assert gate.wait(WAIT_S)
            with lock:
                active[0] -= 1
            return name

        def finish(result: object, error: BaseException | None) -> None:
            assert error is None
            events.append(f"done {result}")

        return Job(lambda: work, finish)

    async def scenario() -> None:
        work = LogWork(RecordingFaultHandler(), threads=2)
        work.submit(("a", 0), job("a1", hold=True))
        work.submit(("a", 0), job("a2"))
        work.submit(("a", 0), job("a0"), first=True)  # before a1
        for i in range(6):
            work.submit(("b", i), job(f"b{i}"))
        # a0 runs, then a1 is held: b's jobs go on beside it in the other thread
        await until(lambda: "done b5" in events)
        assert "done a2" not in events  # a2 waits for a1 (its partition's order)
        gate.set()
        await asyncio.wait_for(work.idle(), WAIT_S)
        a_events = [e for e in events if e.startswith("done a")]
        assert a_events == ["done a0", "done a1", "done a2"]
        assert active[1] == 2  # the bound, and reached
        await work.close()

    asyncio.run(scenario())


def test_a_skipped_job_runs_nothing_and_finish_errors_reach_the_fault_handler() -> None:
    ran: list[str] = []

    async def scenario() -> None:
        handler = RecordingFaultHandler()
        work = LogWork(handler)
        work.submit(("a", 0), Job(lambda: None, lambda r, e: ran.append("finished")))
        await asyncio.wait_for(work.idle(), WAIT_S)
        assert ran == []  # prepared, not wanted: no work, no finish

        def boom() -> object:
            raise ValueError("not a disk error")

        def finish(result: object, error: BaseException | None) -> None:
            if error is not None:
                raise error

        work.submit(("a", 0), Job(lambda: boom, finish))
        await until(lambda: bool(handler.faults))
        assert isinstance(handler.faults[0][1], ValueError)

    asyncio.run(scenario())


# ------------------------------------------------------------- the partition manager
class Broker:
    """A partition manager and replica manager over a real log manager, fed images."""

    def __init__(self, tmp_path: Path) -> None:
        self.io = FaultyFileIO()  # records each file call with its thread
        self.logs = LogManager([tmp_path / "logs"], ManualClock(NOW_MS), io=self.io)
        self.purgatory = Purgatory()
        self.faults = RecordingFaultHandler()
        self.partitions = PartitionManager(
            self.logs, NODE, {}, self.purgatory, fault_handler=self.faults
        )
        self.image = MetadataImage.EMPTY
        self.now_ms = NOW_MS
        self.replicas = ReplicaManager(
            NODE,
            {},
            self.partitions,
            self.purgatory,
            lambda: self.now_ms,
            self._alter_partition,
            lambda: self.image,
            "PLAINTEXT",
            fault_handler=self.faults,
            run_fetchers=False,
        )
        self.partitions.replicas = self.replicas
        self.calls: list[tuple[str, str]] = []  # (what, thread) of the wrapped calls
        self.create_gate = threading.Event()
        self.create_gate.set()
        self.delete_gate = threading.Event()
        self.delete_gate.set()
        self.creating = threading.Event()
        self.deleting = threading.Event()
        create, delete = self.logs.get_or_create, self.logs.delete

        def held_create(topic: str, partition: int, *args: Any, **kw: Any) -> Any:
            self.calls.append((f"create {topic}-{partition}", threading.current_thread().name))
            self.creating.set()
            assert self.create_gate.wait(WAIT_S)
            return create(topic, partition, *args, **kw)

        def held_delete(topic: str, partition: int) -> bool:
            self.calls.append((f"delete {topic}-{partition}", threading.current_thread().name))
            self.deleting.set()
            assert self.delete_gate.wait(WAIT_S)
            return delete(topic, partition)

        self.logs.get_or_create = held_create  # type: ignore[method-assign]
        self.logs.delete = held_delete  # type: ignore[method-assign]

    async def _alter_partition(self, req: AlterPartitionRequest) -> AlterPartitionResponse:
        raise AssertionError("no ISR change in these tests")

    def publish(self, *records: Any) -> None:
        self.image = replay_all(self.image, list(records))
        self.partitions.apply_image(self.image)

    def loop_file_calls(self) -> list[tuple[str, str]]:
        """Storage file calls made on the calling (event loop) thread."""
        me = threading.current_thread().name
        return [(op, path) for op, path, thread in self.io.calls if thread == me]


def topic(name: str, topic_id: uuid.UUID, leader: int, replicas: list[int]) -> list[Any]:
    return [
        TopicRecord(name=name, topic_id=topic_id),
        PartitionRecord(
            partition_id=0,
            topic_id=topic_id,
            replicas=replicas,
            isr=replicas,
            leader=leader,
            leader_epoch=0,
            partition_epoch=0,
        ),
    ]


@asynccontextmanager
async def serving_broker(tmp_path: Path) -> AsyncIterator[Broker]:
    b = Broker(tmp_path)
    b.partitions.create_logs_off_loop()  # as the broker does once it serves
    try:
        yield b
    finally:
        b.create_gate.set()
        b.delete_gate.set()
        await b.partitions.stop_log_work()
        b.logs.shutdown()
        assert b.faults.faults == []


def test_a_new_log_this_node_leads_gets_its_epoch_in_the_worker(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with serving_broker(tmp_path) as b:
            b.publish(*topic("t", uuid.UUID(int=1), NODE, [NODE, 2]))
            await asyncio.wait_for(b.partitions.settled(), WAIT_S)
            hosted = b.partitions.get("t", 0)
            assert hosted is not None
            epoch = b.image.partition("t", 0).leader_epoch
            assert hosted.log.epoch_entries() == [(epoch, 0)]
            assert b.replicas.cores[("t", 0)].leader is not None
            # the checkpoint was written by the worker; the become-leader wrote nothing
            assert b.loop_file_calls() == []
            assert any("leader-epoch-checkpoint" in path for _, path, _ in b.io.calls)

    asyncio.run(scenario())


def test_leadership_moved_while_the_log_was_created_ends_a_follower(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with serving_broker(tmp_path) as b:
            b.create_gate.clear()
            tid = uuid.UUID(int=2)
            b.publish(*topic("t", tid, NODE, [NODE, 2]))
            await wait_event(b.creating)  # the creation (as leader) is in the worker now
            assert b.partitions.leader_partition("t", 0).error == (  # type: ignore[union-attr]
                ErrorCode.NOT_LEADER_OR_FOLLOWER
            )
            b.publish(PartitionChangeRecord(partition_id=0, topic_id=tid, leader=2, isr=[2, 1]))
            moved = b.image.partition("t", 0)
            b.create_gate.set()
            await asyncio.wait_for(b.partitions.settled(), WAIT_S)
            core = b.replicas.cores[("t", 0)]
            assert core.leader is None and core.follower is not None
            assert core.follower.leader_id == 2 and core.leader_epoch == moved.leader_epoch
            hosted = b.partitions.get("t", 0)
            assert hosted is not None and hosted.registration == moved
            err = b.partitions.leader_partition("t", 0)
            assert err.error == ErrorCode.NOT_LEADER_OR_FOLLOWER  # type: ignore[union-attr]

    asyncio.run(scenario())


def test_a_topic_recreated_while_its_old_log_is_deleted_starts_empty(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with serving_broker(tmp_path) as b:
            old, new = uuid.UUID(int=3), uuid.UUID(int=4)
            b.publish(*topic("t", old, NODE, [NODE]))
            await asyncio.wait_for(b.partitions.settled(), WAIT_S)
            hosted = b.partitions.get("t", 0)
            assert hosted is not None
            b.partitions.append(hosted, build_batch([SimpleRecord(b"old")], now_ms=NOW_MS))
            b.delete_gate.clear()
            b.publish(RemoveTopicRecord(topic_id=old))
            # not served from now on, although its log is still being deleted
            assert b.partitions.get("t", 0) is None
            await wait_event(b.deleting)
            b.publish(*topic("t", new, NODE, [NODE]))
            b.delete_gate.set()
            await asyncio.wait_for(b.partitions.settled(), WAIT_S)
            hosted = b.partitions.get("t", 0)
            assert hosted is not None and hosted.topic_id == new
            assert hosted.log.log_end_offset == 0  # a new log, not the old one's
            loop = threading.current_thread().name
            assert [what for what, _ in b.calls] == ["create t-0", "delete t-0", "create t-0"]
            assert all(thread != loop for _, thread in b.calls)  # all in workers

    asyncio.run(scenario())


def test_creations_run_in_parallel_up_to_the_bound(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with serving_broker(tmp_path) as b:
            b.create_gate.clear()
            for i in range(8):
                b.publish(*topic(f"t{i}", uuid.UUID(int=100 + i), NODE, [NODE]))
            # the first LOG_WORK_THREADS creations are held in their workers together
            await until(lambda: len(b.calls) == LOG_WORK_THREADS)
            b.create_gate.set()
            await asyncio.wait_for(b.partitions.settled(), WAIT_S)
            assert len(b.calls) == 8
            assert sorted(b.partitions.partitions) == [(f"t{i}", 0) for i in range(8)]

    asyncio.run(scenario())


# ------------------------------------------------------------------- a real node
@asynccontextmanager
async def node_in_process(tmp_path: Path, *extra: str) -> AsyncIterator[tuple[Any, Any]]:
    from riverbed.server.config import ServerConfig
    from riverbed.server.node import Node

    config = ServerConfig.load(
        None,
        [
            "listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
            "advertised.listeners=PLAINTEXT://127.0.0.1:0",
            f"log.dirs={tmp_path / 'data'}",
            "riverbed.http.listeners=",  # no fixed port: another node may hold 9644
            *extra,
        ],
    )
    node = Node(config, fault_handler=RecordingFaultHandler())
    await node.start()
    host, port = node.bound_listeners["PLAINTEXT"]

    async def connect() -> Conn:
        return Conn(*await asyncio.open_connection(host, port), wait_s=WAIT_S * 4)

    try:
        yield node, connect
    finally:
        await node.stop()


def many_topics_req(prefix: str, topics: int, partitions: int) -> Any:
    C = CreateTopicsRequest
    return C(
        topics=[
            C.CreatableTopic(name=f"{prefix}{i}", num_partitions=partitions, replication_factor=1)
            for i in range(topics)
        ],
        timeout_ms=120_000,
    )


def delete_req(*names: str) -> Any:
    D = DeleteTopicsRequest
    return D(topics=[D.DeleteTopicState(name=n) for n in names], timeout_ms=120_000)


def test_the_loop_answers_while_a_thousand_logs_are_created_and_deleted(
    tmp_path: Path,
) -> None:
    topics, per_topic = 20, 50
    total = topics * per_topic

    async def probe_until_done(
        b: Conn, pending: asyncio.Future[Any], done: Callable[[], int]
    ) -> int:
        """ApiVersions and Metadata answered while ``pending`` is not: how many answers came
        while some (not all) of the logs' work was done."""
        between = 0
        while not pending.done():
            before = done()
            versions = await b.call(ApiKey.API_VERSIONS, 3, ApiVersionsRequest())
            meta = await b.call(ApiKey.METADATA, 12, MetadataRequest(topics=[]))
            assert versions.error_code == 0 and meta.brokers
            if before > 0 and done() < total and not pending.done():
                between += 1
        return between

    async def scenario() -> None:
        async with node_in_process(tmp_path) as (node, connect):
            io = FaultyFileIO()  # records the thread of each file call of the new logs
            node.log_manager._io = io
            a, b = await connect(), await connect()
            mine = lambda: len([k for k in node.partitions.partitions if k[0].startswith("m")])  # noqa: E731
            created = asyncio.ensure_future(
                a.call(ApiKey.CREATE_TOPICS, 7, many_topics_req("m", topics, per_topic))
            )
            assert await probe_until_done(b, created, mine) > 0
            assert {t.error_code for t in (await created).topics} == {0}
            assert mine() == total
            on_disk = lambda: len([k for k in node.log_manager.all_logs() if k[0][0] == "m"])  # noqa: E731
            gone = lambda: total - on_disk()  # noqa: E731
            deleted = asyncio.ensure_future(
                a.call(ApiKey.DELETE_TOPICS, 6, delete_req(*[f"m{i}" for i in range(topics)]))
            )
            assert {r.error_code for r in (await deleted).responses} == {0}
            assert mine() == 0  # not served from the image change on
            await asyncio.wait_for(node.partitions.settled(), WAIT_S * 4)
            assert on_disk() == 0 and gone() == total
            loop = threading.current_thread().name
            on_loop = [(op, path) for op, path, thread in io.calls if thread == loop]
            assert on_loop == [], on_loop[:5]  # every creation / deletion file call in workers

    asyncio.run(scenario())


class HeldFsync(FaultyFileIO):
    """Holds the first fsync of a file under ``under`` once armed, until released."""

    def __init__(self, under: Path) -> None:
        super().__init__()
        self.hold_under = str(under)
        self.armed = False
        self.entered = threading.Event()
        self.release = threading.Event()
        self.timed_out = threading.Event()

    def fsync(self, fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        if self.armed and path.startswith(self.hold_under) and not self.entered.is_set():
            self.entered.set()
            if not self.release.wait(WAIT_S / 3):
                self.timed_out.set()
        super().fsync(fd)


def test_a_deletion_waiting_for_an_fsync_in_flight_does_not_hold_the_loop(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with node_in_process(tmp_path) as (node, connect):
            io = HeldFsync(tmp_path / "data" / "f-0")
            node.log_manager._io = io
            a, b = await connect(), await connect()
            C = CreateTopicsRequest
            req = C(
                topics=[
                    C.CreatableTopic(
                        name="f",
                        num_partitions=1,
                        replication_factor=1,
                        configs=[C.CreatableTopicConfig(name="flush.messages", value="1")],
                    )
                ],
                timeout_ms=10_000,
            )
            assert (await a.call(ApiKey.CREATE_TOPICS, 7, req)).topics[0].error_code == 0
            resp = await a.call(ApiKey.PRODUCE, 9, produce_req("f", 0))
            assert resp.responses[0].partition_responses[0].error_code == 0
            io.armed = True
            node.log_manager.flush_due(2**62)  # the partition's fsync, now in flight
            await wait_event(io.entered)
            deleted = asyncio.ensure_future(a.call(ApiKey.DELETE_TOPICS, 6, delete_req("f")))
            await until(lambda: node.partitions.get("f", 0) is None)  # the image applied
            versions = await b.call(ApiKey.API_VERSIONS, 3, ApiVersionsRequest())
            assert versions.error_code == 0
            # answered while the fsync was still held: the deletion waits in a worker
            assert not io.timed_out.is_set()
            io.release.set()
            assert (await deleted).responses[0].error_code == 0
            await asyncio.wait_for(node.partitions.settled(), WAIT_S)
            assert node.log_manager.get("f", 0) is None

    asyncio.run(scenario())


def test_a_creation_failing_on_the_disk_takes_its_dir_offline(tmp_path: Path) -> None:
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"

    async def scenario() -> None:
        extra = (f"log.dirs={a_dir},{b_dir}", f"metadata.log.dir={tmp_path / 'meta'}")
        async with node_in_process(tmp_path, *extra) as (node, connect):
            (a_dir / "t-0").write_text("in the way")  # t-0's mkdir fails in dir a
            c = await connect()
            assert (await c.call(ApiKey.CREATE_TOPICS, 7, create_req("t", 1))).topics[
                0
            ].error_code == 0
            resp = await c.call(ApiKey.PRODUCE, 9, produce_req("t", 0))
            part = resp.responses[0].partition_responses[0]
            assert part.error_code == ErrorCode.KAFKA_STORAGE_ERROR  # Kafka's offline replica
            assert set(node.log_manager.offline_dirs()) == {a_dir.resolve()}
            # the other dir takes new partitions
            assert (await c.call(ApiKey.CREATE_TOPICS, 7, create_req("u", 1))).topics[
                0
            ].error_code == 0
            resp = await c.call(ApiKey.PRODUCE, 9, produce_req("u", 0))
            assert resp.responses[0].partition_responses[0].error_code == 0
            assert node.log_manager.log_dir_of("u", 0) == b_dir.resolve()

    asyncio.run(scenario())


def test_the_timer_ticks_only_leaders_with_something_due(tmp_path: Path) -> None:
    """A broker leading thousands of partitions walked them all every tick (100 ms): a
    loop stall growing with the partitions, a fifth of a core at 10,000. The timer ticks a
    leader only when its ``next_tick_ms`` comes: a parked produce expiring, an ISR member
    that may have fallen out of sync (``replica.lag.time.max.ms`` after it was last caught
    up), a resend."""

    async def scenario() -> None:
        async with serving_broker(tmp_path) as b:
            b.publish(*topic("alone", uuid.UUID(int=5), NODE, [NODE]))
            b.publish(*topic("pair", uuid.UUID(int=6), NODE, [NODE, 2]))
            await asyncio.wait_for(b.partitions.settled(), WAIT_S)
            ticked: list[str] = []
            for (name, _), core in b.replicas.cores.items():
                leader = core.leader
                assert leader is not None
                real = leader.tick

                def spy(now_ms: int, name: str = name, real: Any = real) -> Any:
                    ticked.append(name)
                    return real(now_ms)

                leader.tick = spy  # type: ignore[method-assign]
            b.replicas.tick()
            assert ticked == []  # nothing due: 2 is in sync for replica.lag.time.max.ms
            # a parked produce on the lone leader is timed: it expires
            outcome: list[ErrorCode] = []
            alone = b.partitions.get("alone", 0)
            assert alone is not None
            b.replicas.park_produce(alone, 5, 1000, outcome.append)
            assert outcome == []  # parked
            b.now_ms += 999
            b.replicas.tick()
            assert ticked == [] and outcome == []
            b.now_ms += 1
            b.replicas.tick()
            assert ticked == ["alone"] and outcome == [ErrorCode.REQUEST_TIMED_OUT]
            # replica 2 never fetched: out of sync once replica.lag.time.max.ms has passed
            lag_ms = b.replicas.cores[("pair", 0)].config.replica_lag_time_max_ms
            b.now_ms += lag_ms - 1000
            b.replicas.tick()
            assert ticked == ["alone"]
            b.now_ms += 1
            b.replicas.tick()
            assert ticked == ["alone", "pair"]
            assert list(b.replicas._alter_queue) == [("pair", 0)]  # the shrink, proposed
            b.replicas.tick()
            assert ticked == ["alone", "pair"]  # in flight: only its resend is timed

    asyncio.run(scenario())
