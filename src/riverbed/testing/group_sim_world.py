"""The group simulation's world: its topics, groups and configuration, the model
consumers' state, and the plumbing between them and the real `GroupShard` (requests,
answers, the ``__consumer_offsets`` model log). See `riverbed.testing.group_sim`."""

from __future__ import annotations

import random
import uuid
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from riverbed.coordinator.consumer_membership import StaticTopics
from riverbed.coordinator.group import Reply
from riverbed.coordinator.shard import GroupConfig, GroupShard, Write
from riverbed.protocol.errors import ErrorCode
from riverbed.testing.group_harness import LogEntry, replay_into, replay_log

E = ErrorCode
TOPICS = {"t": (uuid.UUID(int=1), 6), "u": (uuid.UUID(int=2), 4)}
#: Topic ``u`` gains partitions now and then, up to this many.
U_PARTITIONS_MAX = 8
NAMES = {tid: name for name, (tid, _n) in TOPICS.items()}
GROUPS = ("g0", "g1")
CLIENTS_PER_GROUP_MAX = 5
CONFIG = GroupConfig(
    initial_rebalance_delay_ms=0,
    consumer_session_timeout_ms=3000,
    consumer_heartbeat_interval_ms=100,
    offsets_retention_ms=4000,
)
#: Errors of writes that never reached the log, as the shell reports them (append_error:
#: NOT_ENOUGH_REPLICAS is COORDINATOR_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER NOT_COORDINATOR).
REFUSED = (E.REQUEST_TIMED_OUT, E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR)
RETRIABLE = (
    E.UNRELEASED_INSTANCE_ID,  # a static instance whose previous member is still in
    E.REQUEST_TIMED_OUT,
    E.NOT_ENOUGH_REPLICAS,
    E.NOT_COORDINATOR,
    E.COORDINATOR_NOT_AVAILABLE,
)
Tp = tuple[str, int]
#: The metadata of the admin commits (offset resets of an empty group).
ADMIN = "admin reset"
#: A consumer's position in a partition whose committed offset is unstable (KIP-447).
UNKNOWN_POSITION = -1
#: Producer ids of the consumers' transactions: this plus the consumer's number.
PRODUCER_ID_BASE = 5000


class InvariantError(AssertionError):
    pass


@dataclass(frozen=True)
class SimParams:
    seed: int
    steps: int = 200
    verbose: bool = False

    def replay_command(self) -> str:
        return (
            f".venv/bin/python -m riverbed.testing.group_sim --seed {self.seed} "
            f"--steps {self.steps} -v"
        )


@dataclass
class Client:
    """A KIP-848 consumer: what it was told, what it consumes, where it is."""

    name: str
    group: str
    member: str
    topics: list[str]
    epoch: int = 0
    told: set[Tp] = field(default_factory=set)
    owned: set[Tp] = field(default_factory=set)
    positions: dict[Tp, int] = field(default_factory=dict)
    heartbeat_in_flight: bool = False
    #: group.instance.id of a static member (None: dynamic)
    instance: str | None = None
    #: fenced by the coordinator (its member is gone) and does not know it yet
    zombie: bool = False
    #: its transactional producer's id, and TxnOffsetCommits not answered yet
    producer_id: int = -1
    txn_outstanding: int = 0
    #: the next heartbeat sends every field: Kafka's consumer resets its HeartbeatState
    #: after a failed heartbeat (an error, a lost response, a coordinator gone)
    full: bool = False
    #: what its last heartbeat listed as owned (Kafka's SentFields.localAssignment)
    sent: tuple[frozenset[Tp], frozenset[Tp]] | None = None


class SimWorld:
    """The state of one seed and the plumbing every part of the simulation uses."""

    def __init__(self, params: SimParams) -> None:
        self.params = params
        self.rng = random.Random(params.seed)
        self.now = 1_000_000
        self.log: list[LogEntry] = []
        #: the committed records replayed as they commit: what a reload would give
        self.mirror = GroupShard(0, CONFIG, random.Random(0))
        self.shard = replay_log([], CONFIG, self.now)
        self.pending: list[Write] = []
        self.handlers: dict[int, Callable[[Any], None]] = {}
        self.clients: dict[str, Client] = {}
        self.floors: dict[tuple[str, Tp], int] = {}
        self.stats: Counter[str] = Counter()
        self.trace: deque[str] = deque(maxlen=40)
        self.topics = StaticTopics(dict(TOPICS))
        self._next_reply = 0
        self._names = 0
        #: producer id -> the number of its current transaction (its commits' metadata)
        self.txn_number: dict[int, int] = {}
        #: metadata of the transactions that ended with ABORT
        self.aborted: set[str] = set()
        #: producers that sent a TxnOffsetCommit in their current transaction
        self.txn_open: set[int] = set()
        #: token -> first offset of a write appended while it was still in flight (a
        #: marker followed it): it commits or is in doubt, never refused
        self.appended: dict[int, int] = {}

    def note(self, line: str) -> None:
        self.trace.append(f"t={self.now} {line}")
        if self.params.verbose:
            print(self.trace[-1])

    # ------------------------------------------------------------------ plumbing
    def send(self, op: Callable[[Reply], None], handle: Callable[[Any], None], v: int) -> None:
        self._next_reply += 1
        reply = Reply(self._next_reply, v)
        self.handlers[reply.id] = handle
        op(reply)
        self.pump()

    def pump(self, refuse_writes: bool = False) -> None:
        """Deliver the shard's answers and collect its writes (or refuse them, as the
        shell does for a shard it is about to reload)."""
        while True:
            out, writes = self.shard.take_output()
            if not out and not writes:
                return
            for write in writes:
                if refuse_writes:
                    self.shard.complete_write(write.token, E.NOT_COORDINATOR)
                else:
                    self.pending.append(write)
            for reply, response in out:
                handle = self.handlers.pop(reply.id, None)
                if handle is None:
                    raise InvariantError(f"reply {reply.id} answered twice or unknown")
                handle(response)

    def append(self, entries: list[LogEntry]) -> int:
        """Append to the model log (and its replay); returns the first entry's offset."""
        base = len(self.log)
        self.log.extend(entries)
        replay_into(self.mirror, entries, base)
        return base
