"""The metadata controller on top of the simulated quorum (issue 11: one operation = one batch).

Every simulated node runs a ``SimStateMachine``: the KV machine of ``raft_sim_checks`` for
``set`` records and, for every other data record, the image replay the server runs
(``server.metadata_quorum.MetadataStateMachine`` -> ``MetadataService.apply_committed`` /
``load_snapshot``). The simulation's client runs the real ``Controller`` operations
(bootstrap, register broker, create topics with several partitions, create partitions,
fence a broker, delete topics) against the active leader's image, one at a time as the
service does, and appends each operation's records with one ``RaftNode.append``.

``MetadataChecker`` holds what was appended (which (epoch, offset) ends an operation, and
which ends any batch) and checks every image any node publishes: it ends at the last
record of an operation, and it equals the replay of the committed log up to there (never
half a topic). A snapshot loaded into the image must end on a batch boundary and equal the
replay of the committed log below its end. Both views are deterministic: the controller's
topic ids and broker incarnations come from the seed.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from riverbed.metadata.control_common import ControllerConfig, ControllerError, ControllerResult
from riverbed.metadata.controller import Controller
from riverbed.metadata.image import BrokerEndpoint, MetadataDelta, MetadataImage, replay_all
from riverbed.metadata.records import decode_record, encode_record
from riverbed.protocol.messages import (
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    Message,
)
from riverbed.raft.messages import Entry, EntryKind, SnapshotId
from riverbed.raft.snapshot_format import encode_snapshot, read_snapshot
from riverbed.server.metadata_quorum import MetadataStateMachine
from riverbed.server.metadata_service import MetadataService
from riverbed.testing.raft_sim_checks import InvariantError, KVStateMachine

KV_PREFIX = b"set "  # KV records; every other data record is a metadata record
MD_SNAPSHOT_TAG = b"\x00"  # metadata records in a snapshot (KV ones are "key=value")
TOPIC_NAMES = tuple(f"t{i}" for i in range(6))  # a small pool: creates and deletes collide
BROKER_IDS = (1, 2, 3)
PARTITIONS_MAX = 6  # per created topic


def is_metadata(entry: Entry) -> bool:
    return entry.kind is EntryKind.DATA and not entry.value.startswith(KV_PREFIX)


class _NoLog:
    """The service's own log is unused here: commits arrive through the Raft node."""

    def read_committed(self) -> Iterator[tuple[int, Message]]:
        return iter(())

    async def append(self, records: Sequence[Message]) -> int:
        raise AssertionError("the simulation appends through RaftNode.append")

    def snapshot_due(self) -> bool:
        return False

    async def write_snapshot(self, records: object, end_offset: int) -> None:
        raise AssertionError("snapshots come from the Raft node")

    def close(self) -> None:
        pass


class _Clock:
    def __init__(self, now_ms: Callable[[], int]) -> None:
        self._now = now_ms

    def now_ms(self) -> int:
        return self._now()


ImageCheck = Callable[[MetadataImage, "SnapshotId | None"], None]


class SimulatedMachineError(RuntimeError):
    """A state-machine bug injected by the simulation (the node must halt on it)."""


class SimStateMachine:
    """KV records into ``KVStateMachine``, metadata records into a ``MetadataService``
    through ``MetadataStateMachine`` (the server's glue); ``on_image`` sees every image
    the service publishes, with the snapshot id when a snapshot load published it.
    ``fault()`` True makes the next apply or snapshot load raise before it changes
    anything (the simulation's injected state-machine exceptions)."""

    @staticmethod
    def fault() -> bool:
        return False

    def __init__(self, controller: Controller, now_ms: Callable[[], int], on_image: ImageCheck):
        self.kv = KVStateMachine()
        # any object with now_ms() is a clock (server.node passes storage clocks alike)
        clock: Any = _Clock(now_ms)
        self.service = MetadataService(controller, _NoLog(), clock)
        self.glue = MetadataStateMachine(self.service)
        self._loading: SnapshotId | None = None
        self.service.add_listener(lambda old, new, delta: on_image(new, self._loading))

    @property
    def data(self) -> dict[str, str]:
        return self.kv.data

    @property
    def image(self) -> MetadataImage:
        return self.service.image

    def apply(self, entries: tuple[Entry, ...]) -> None:
        if self.fault():
            raise SimulatedMachineError(f"injected: apply of {entries[0].offset}..")
        self.kv.apply(entries)
        metadata = tuple(e for e in entries if is_metadata(e))
        if metadata:
            self.glue.apply(metadata)

    def snapshot(self, sid: SnapshotId) -> bytes:
        if self.kv.applied != sid.end_offset:
            raise InvariantError(f"snapshot {sid} requested at applied offset {self.kv.applied}")
        return encode_snapshot(sid, self.snapshot_records())

    def snapshot_records(self) -> list[bytes]:
        records = [f"{k}={v}".encode() for k, v in sorted(self.kv.data.items())]
        return records + [MD_SNAPSHOT_TAG + v for v in self.glue.snapshot_records()]

    def load(self, sid: SnapshotId, data: bytes) -> None:
        self.load_snapshot(sid, read_snapshot(data).records)

    def load_snapshot(self, sid: SnapshotId, records: list[bytes]) -> None:
        if self.fault():
            raise SimulatedMachineError(f"injected: load of snapshot {sid}")
        kv = [r for r in records if not r.startswith(MD_SNAPSHOT_TAG)]
        self.kv.data = dict(r.decode().split("=", 1) for r in kv)
        self.kv.applied = sid.end_offset
        self._loading = sid
        try:
            self.glue.load_snapshot(sid, [r[1:] for r in records if r.startswith(MD_SNAPSHOT_TAG)])
        finally:
            self._loading = None


class MetadataClient:
    """Picks the next controller operation from the seed; returns its records."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        ids = random.Random(rng.getrandbits(64))
        self.controller = Controller(
            ControllerConfig(node_id=0),
            uuid_factory=lambda: uuid.UUID(int=ids.getrandbits(128)),
            rng=random.Random(ids.getrandbits(64)),
        )

    def next_op(self, image: MetadataImage, now_ms: int) -> tuple[str, list[Message]]:
        c, rng = self.controller, self.rng
        if not image.metadata_version:
            return "bootstrap", c.bootstrap_records()
        r = rng.random()
        try:
            if r < 0.25 or not image.brokers:
                bid = rng.choice(BROKER_IDS)
                inc = uuid.UUID(int=rng.getrandbits(128))
                endpoint = BrokerEndpoint("PLAINTEXT", f"broker{bid}", 9092)
                # the registration and the heartbeat that unfences it, as one operation
                # (this simulation checks batches, not the broker lifecycle)
                reg = c.register_broker(image, bid, inc, [endpoint], None, now_ms).records
                registered = replay_all(image, reg)
                up = c.unfence_broker(registered, bid, -1, now_ms, metadata_offset=image.offset)
                return "register", [*reg, *up.records]
            if r < 0.65:
                return "create", self._records(c.create_topics(image, self._create(), now_ms))
            if r < 0.75:
                name = rng.choice(TOPIC_NAMES)
                topic = image.topic(name)
                count = (len(topic.partitions) if topic else 1) + rng.randint(1, 3)
                req = CreatePartitionsRequest(
                    topics=[CreatePartitionsRequest.CreatePartitionsTopic(name=name, count=count)],
                    timeout_ms=1000,
                )
                return "add partitions", self._records(c.create_partitions(image, req, now_ms))
            if r < 0.87:
                bid = rng.choice(BROKER_IDS)
                return "fence", self._records(c.fence_broker(image, bid, now_ms))
            names = rng.sample(TOPIC_NAMES, rng.randint(1, 2))
            delete = DeleteTopicsRequest(
                topics=[DeleteTopicsRequest.DeleteTopicState(name=n) for n in names],
                timeout_ms=1000,
            )
            return "delete", self._records(c.delete_topics(image, delete, now_ms))
        except ControllerError:
            return "refused", []  # e.g. fencing a broker never registered

    def _create(self) -> CreateTopicsRequest:
        rng = self.rng
        ct = CreateTopicsRequest.CreatableTopic
        names = rng.sample(TOPIC_NAMES, rng.randint(1, 2))
        topics = [
            ct(name=n, num_partitions=rng.randint(1, PARTITIONS_MAX), replication_factor=1)
            for n in names
        ]
        return CreateTopicsRequest(topics=topics, timeout_ms=1000)

    @staticmethod
    def _records(result: ControllerResult) -> list[Message]:
        return list(result.records)


class MetadataChecker:
    """Ground truth for the atomicity invariant (see the module docstring)."""

    def __init__(self, committed: dict[int, tuple[int, bytes]]) -> None:
        self.committed = committed  # the raft checker's: offset -> (epoch, value)
        self.op_ends: set[tuple[int, int]] = set()  # (epoch, last offset) of each operation
        self.batch_ends: set[tuple[int, int]] = set()  # of every batch, LeaderChange included
        self.metadata_offsets: set[int] = set()
        self._refs: dict[int, MetadataImage] = {0: MetadataImage.EMPTY}
        self.images_checked = 0

    def on_append(self, epoch: int, last: int, metadata: bool) -> None:
        self.batch_ends.add((epoch, last))
        if metadata:
            self.op_ends.add((epoch, last))

    def on_commit(self, entries: tuple[Entry, ...]) -> None:
        """After the raft checker's ``on_commit`` (which checks agreement)."""
        for e in entries:
            if e.kind is EntryKind.LEADER_CHANGE:
                self.batch_ends.add((e.epoch, e.offset))
            elif is_metadata(e):
                self.metadata_offsets.add(e.offset)

    def is_batch_boundary(self, offset: int) -> bool:
        if offset == 0:
            return True
        prev = self.committed.get(offset - 1)
        return prev is not None and (prev[0], offset - 1) in self.batch_ends

    def reference(self, end_offset: int) -> MetadataImage:
        """The image replayed from every committed metadata record below ``end_offset``."""
        cached = self._refs.get(end_offset)
        if cached is not None:
            return cached
        base = max(o for o in self._refs if o <= end_offset)
        delta = MetadataDelta(self._refs[base])
        for off in range(base, end_offset):
            if off not in self.committed:
                raise InvariantError(f"image at {end_offset} but offset {off} never committed")
            if off in self.metadata_offsets:
                delta.replay(decode_record(self.committed[off][1]))
        image = delta.apply(end_offset - 1)
        self._refs[end_offset] = image
        return image

    def check_image(self, node_id: int, image: MetadataImage, loaded: SnapshotId | None) -> None:
        self.images_checked += 1
        if loaded is not None:
            end = loaded.end_offset
            if not self.is_batch_boundary(end):
                raise InvariantError(
                    f"node {node_id}: snapshot {loaded} ends inside a batch of the log"
                )
        else:
            last = image.offset
            prev = self.committed.get(last)
            if prev is None or (prev[0], last) not in self.op_ends:
                raise InvariantError(
                    f"node {node_id}: published an image ending at offset {last}, inside a "
                    f"controller operation (half an operation is visible)"
                )
            end = last + 1
        if image != self.reference(end):
            raise InvariantError(
                f"node {node_id}: the image at offset {end - 1} is not the replay of the "
                f"whole operations committed below {end}"
            )

    def check_state(self, node_id: int, image: MetadataImage, applied: int) -> None:
        if image != self.reference(applied):
            raise InvariantError(
                f"node {node_id}: metadata image differs from the committed log at {applied}"
            )


def encoded(records: list[Message]) -> list[bytes]:
    return [encode_record(r) for r in records]
