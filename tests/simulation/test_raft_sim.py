"""Seeded raft simulation: 900 seeds over clusters of 1, 3 and 5 voters with 0-2 observers,
and 60 more with every message through Kafka wire bytes.

Each seed runs chaos (crashes losing unflushed writes, restarts, partitions both ways and
one way, pauses, hosts down, refused connections, drops, duplicates, resignations, disk
wipes, client appends, snapshots every 25 records) with the
invariants of ``riverbed.testing.raft_sim_checks`` checked after every event, then a calm
phase that must commit new records on every node. The metadata controller runs on top
(``riverbed.testing.raft_sim_metadata``): every image any node publishes must be the
replay of whole controller operations. A failure message starts with the
one-line replay command. Soak: ``python -m riverbed.testing.raft_sim --seeds 100000``.
"""

from __future__ import annotations

import random
import uuid
from collections import Counter

import pytest

from riverbed.metadata.image import BrokerEndpoint, MetadataImage
from riverbed.testing.raft_sim import SimParams, params_for, run_seed
from riverbed.testing.raft_sim_links import BROKEN_REFUSAL_RULES

SEEDS_PER_CHUNK = 45
CHUNKS = 20  # 900 seeds


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_simulation_seeds(chunk: int) -> None:
    stats: Counter[str] = Counter()
    for seed in range(chunk * SEEDS_PER_CHUNK, (chunk + 1) * SEEDS_PER_CHUNK):
        sim = run_seed(params_for(seed))  # raises SimulationFailure with the replay command
        stats.update(sim.stats)
    # the chaos must actually exercise the interesting paths, or the test proves little
    assert stats["leaders elected"] > SEEDS_PER_CHUNK
    assert stats["crashes"] > 0
    assert stats["snapshots written"] > 0
    assert stats["fetch->snapshot id"] > 0
    assert stats["snapshot loads"] > 0
    assert stats["metadata ops"] > SEEDS_PER_CHUNK
    assert stats["metadata images checked"] > stats["metadata ops"]
    assert stats["state machine faults"] > 0
    # the refused-connection shortcut (riverbed.raft.refusals) under pauses, partitions
    # both ways and one way, hosts down and misdirected endpoints
    assert stats["refusal shortcuts"] > SEEDS_PER_CHUNK // 4
    assert stats["elections after a refusal shortcut"] > 0
    assert stats["observers' refusal shortcuts"] > 0
    assert stats["connections refused by a live peer (misdirected)"] > 0
    assert stats["pauses"] > SEEDS_PER_CHUNK // 2
    assert stats["one-way partitions"] > SEEDS_PER_CHUNK // 2


def test_simulation_through_kafka_wire_bytes() -> None:
    # every message encoded by raft.wire + the message engine and decoded again: record
    # batches (control batches for LeaderChange), DivergingEpoch, SnapshotId, PreVote tag
    for seed in range(1000, 1060):
        base = params_for(seed)
        run_seed(SimParams(seed=seed, voters=base.voters, observers=base.observers, wire=True))


def test_replay_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    from riverbed.testing.raft_sim import main

    assert main(["--seed", "4", "--voters", "3", "--observers", "1"]) == 0
    assert "1/1 seeds passed" in capsys.readouterr().out


@pytest.mark.parametrize("voters", [1, 3, 5])
def test_calm_cluster_commits_everything(voters: int) -> None:
    # no faults at all: a leader is elected and every record reaches every node
    sim = run_seed(SimParams(seed=7, voters=voters, observers=1, chaos_ms=0))
    assert sim.stats["leaders elected"] == 1
    states = [sn.sm.data for sn in sim.nodes.values()]
    assert all(s == states[0] for s in states)
    assert sum(1 for k in states[0] if k.startswith("calm")) == 5


def test_failure_message_has_replay_command(monkeypatch: pytest.MonkeyPatch) -> None:
    from riverbed.raft import leader_state
    from riverbed.testing.raft_sim import SimulationFailure

    # a broken high-watermark rule (a minority suffices) must be caught and reported
    def minority(self: leader_state.LeaderState, local_flushed: int) -> int:
        return local_flushed

    monkeypatch.setattr(leader_state.LeaderState, "majority_flushed_offset", minority)
    with pytest.raises(SimulationFailure) as info:
        for seed in range(1, 40, 3):  # 3-voter clusters
            run_seed(params_for(seed))
    text = str(info.value)
    assert text.startswith("replay: .venv/bin/python -m riverbed.testing.raft_sim --seed ")
    assert "voters hold it durably" in text


def test_atomicity_check_catches_operations_split_by_the_fetch_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from riverbed.raft import replication
    from riverbed.raft.messages import Entry, EntryKind
    from riverbed.testing.raft_sim import SimulationFailure

    # the leader writes every record as a batch of its own, as before operations were
    # batches: a small fetch budget or the high watermark then cuts an operation in two
    def one_batch_per_record(
        offset: int, epoch: int, value: bytes, kind: EntryKind = EntryKind.DATA, **_: bool
    ) -> Entry:
        return Entry(offset, epoch, value, kind)

    monkeypatch.setattr(replication, "Entry", one_batch_per_record)
    with pytest.raises(SimulationFailure, match="inside a"):
        for seed in range(1, 60, 3):  # 3-voter clusters
            run_seed(params_for(seed))


def test_half_a_topic_is_not_an_image_of_whole_operations() -> None:
    from riverbed.metadata.image import replay_all
    from riverbed.metadata.records import decode_record
    from riverbed.protocol.messages import CreateTopicsRequest
    from riverbed.raft.messages import Entry
    from riverbed.testing.raft_sim_checks import InvariantError
    from riverbed.testing.raft_sim_metadata import MetadataChecker, MetadataClient, encoded

    client = MetadataClient(random.Random(1))
    c = client.controller
    boot = c.bootstrap_records()
    image = replay_all(replay_all(MetadataImage.EMPTY, boot), [])
    reg = c.register_broker(image, 1, uuid.UUID(int=7), [BrokerEndpoint("P", "h", 1)], None, 0)
    fenced = replay_all(image, reg.records)
    up = c.unfence_broker(fenced, 1, -1, 0, metadata_offset=image.offset)
    registration = [*reg.records, *up.records]
    image = replay_all(image, registration)
    ct = CreateTopicsRequest.CreatableTopic(name="t", num_partitions=3, replication_factor=1)
    topic = c.create_topics(image, CreateTopicsRequest(topics=[ct], timeout_ms=1), 0).records
    ops = [boot, registration, topic]
    committed: dict[int, tuple[int, bytes]] = {}
    checker = MetadataChecker(committed)
    offset = 0
    for op in ops:
        values = encoded(op)
        for v in values:
            committed[offset] = (1, v)
            offset += 1
        checker.on_append(1, offset - 1, metadata=True)
    checker.on_commit(tuple(Entry(o, 1, v) for o, (_, v) in committed.items()))
    whole = [decode_record(v) for _, (_, v) in sorted(committed.items())]
    checker.check_image(1, replay_all(MetadataImage.EMPTY, whole, offset - 1), None)
    half = offset - 2  # the TopicRecord and two of its three PartitionRecords
    with pytest.raises(InvariantError, match="half an operation"):
        checker.check_image(1, replay_all(MetadataImage.EMPTY, whole[: half + 1], half), None)


def _soak(seeds: range) -> Counter[str]:
    stats: Counter[str] = Counter()
    for seed in seeds:
        stats.update(run_seed(params_for(seed)).stats)
    return stats


def test_state_machine_exceptions_halt_and_recover() -> None:
    # an apply or snapshot load that raises halts the node through its fault handler
    # (the shell's applied offset stays before the entries), a supervisor restarts it,
    # and every invariant holds through the recovery
    assert _soak(range(0, 60, 3))["state machine faults"] > 0


def test_a_node_that_carries_on_after_a_machine_exception_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from riverbed.server.fault_handler import RecordingFaultHandler
    from riverbed.testing.raft_sim import SimulationFailure

    # a handler that logs and returns (a wedged node) instead of halting
    monkeypatch.setattr(RecordingFaultHandler, "handle_fault", lambda self, what, cause=None: None)
    with pytest.raises(SimulationFailure, match="applied offset"):
        _soak(range(0, 60, 3))


def test_check_quorum_counts_snapshot_downloads() -> None:
    # a leader whose majority is downloading its snapshot keeps its leadership
    assert _soak(range(1, 120, 3))["leader kept by FetchSnapshot"] > 0


def test_check_quorum_without_snapshot_downloads_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from riverbed.raft import leader_state
    from riverbed.testing.raft_sim import SimulationFailure

    # the rule before issue 11: only Fetch counts, so a downloading majority is "gone"
    def fetch_only(self: leader_state.LeaderState, since_ms: int) -> int:
        others = (v for v in self.voters if v != self.local_id)
        return 1 + sum(1 for v in others if self.replicas[v].last_fetch_ms >= since_ms)

    monkeypatch.setattr(leader_state.LeaderState, "voters_active_since", fetch_only)
    with pytest.raises(SimulationFailure, match="downloading its snapshot"):
        _soak(range(1, 120, 3))


def first_failure(seeds: range) -> str:
    """The message of the first seed that fails (the test fails when none does)."""
    from riverbed.testing.raft_sim import SimulationFailure

    with pytest.raises(SimulationFailure) as info:
        _soak(seeds)
    return str(info.value)


@pytest.mark.parametrize("rule", BROKEN_REFUSAL_RULES)
def test_broken_refusal_rules_are_caught(monkeypatch: pytest.MonkeyPatch, rule: str) -> None:
    monkeypatch.setattr(*BROKEN_REFUSAL_RULES[rule])
    message = first_failure(range(60))  # seed 17 at the latest today
    assert message.startswith("replay: .venv/bin/python -m riverbed.testing.raft_sim --seed ")
    assert "on a refused connection to leader" in message


def test_a_timeout_taken_as_refusal_elects_while_the_leader_holds_the_quorum(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from riverbed.testing.raft_sim_links import RefusalChecks

    # the election-level invariant alone (the evidence check off): a paused or cut-off
    # leader's timeouts taken as refusals start an election while it holds the quorum
    monkeypatch.setattr(*BROKEN_REFUSAL_RULES["timeout-is-refusal"])
    monkeypatch.setattr(RefusalChecks, "check_evidence", lambda *args: None)
    assert "lives and holds the quorum" in first_failure(range(60))  # seed 19 today
