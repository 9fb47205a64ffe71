"""The partition core's rules one by one (the simulation covers their interplay)."""

from __future__ import annotations

import uuid

from riverbed.metadata.image import PartitionRegistration
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import AlterPartitionRequest, AlterPartitionResponse, decode, encode
from riverbed.replication.actions import (
    AlterIsr,
    AlterIsrResult,
    FetchAnswer,
    FetchPosition,
    FetchResult,
    HighWatermarkChanged,
    ProduceCompleted,
)
from riverbed.replication.config import ReplicaConfig
from riverbed.replication.follower import PartitionFollower
from riverbed.replication.leader import PartitionLeader
from riverbed.replication.partition import Partition, Role
from riverbed.replication.wire import alter_partition_request, alter_partition_results
from riverbed.testing.replication_sim_parts import MemLog

CONFIG = ReplicaConfig(replica_lag_time_max_ms=1000, min_insync_replicas=2)


def reg(
    isr: tuple[int, ...] = (1, 2, 3), leader: int = 1, epoch: int = 5, pepoch: int = 7
) -> PartitionRegistration:
    return PartitionRegistration(
        replicas=(1, 2, 3), isr=isr, leader=leader, leader_epoch=epoch, partition_epoch=pepoch
    )


def leader_with(
    records: int, isr: tuple[int, ...] = (1, 2, 3), now: int = 0
) -> tuple[PartitionLeader, MemLog]:
    log = MemLog()
    for i in range(records):
        log.append_as_leader(f"r{i}", 4)
    return PartitionLeader(1, reg(isr), log, CONFIG, high_watermark=0, now_ms=now), log


def fetch(replica: int, offset: int, epoch: int = 5, last_epoch: int = -1) -> FetchPosition:
    return FetchPosition(replica, epoch, offset, last_epoch)


def of(kind: type, actions: list) -> list:  # type: ignore[type-arg]
    return [a for a in actions if isinstance(a, kind)]


def test_high_watermark_is_min_log_end_over_isr_and_never_moves_back() -> None:
    ld, log = leader_with(10)
    assert ld.high_watermark == 0 and log.cache.end_offset_for(5, 10) == (5, 10)
    _, acts = ld.on_follower_fetch(fetch(2, 6, last_epoch=4), 10)
    assert ld.high_watermark == 0  # replica 3 has not fetched at this epoch
    answer, acts = ld.on_follower_fetch(fetch(3, 8, last_epoch=4), 20)
    assert of(HighWatermarkChanged, acts) == [HighWatermarkChanged(6)]
    assert answer == FetchAnswer(ErrorCode.NONE, 6, 0)
    ld.on_follower_fetch(fetch(2, 3, last_epoch=4), 30)  # a reordered old fetch
    assert ld.high_watermark == 6


def test_fetch_epoch_fencing_and_divergence() -> None:
    ld, _ = leader_with(10)
    assert ld.on_follower_fetch(fetch(2, 0, epoch=4), 0)[0].error is ErrorCode.FENCED_LEADER_EPOCH
    assert ld.on_follower_fetch(fetch(2, 0, epoch=6), 0)[0].error is ErrorCode.UNKNOWN_LEADER_EPOCH
    # the follower has epoch-4 records up to 12 but the leader's epoch 4 ends at 10
    answer, acts = ld.on_follower_fetch(fetch(2, 12, last_epoch=4), 0)
    assert answer.diverging_epoch == (4, 10) and acts == []
    assert ld.remotes[2].log_end_offset == -1  # a diverging fetch says nothing of progress
    assert ld.on_follower_fetch(fetch(9, 0), 0)[0].error is ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_a_reread_fetch_is_judged_as_on_arrival_and_records_nothing() -> None:
    """The purgatory's re-read of a parked fetch (Kafka: ``updateFetchState =
    !readFromPurgatory``): the same refusals, the current high watermark, and no progress
    recorded: no log end, fetch time, ISR change or high watermark move."""
    ld, log = leader_with(10)
    for pos in (
        fetch(2, 0, epoch=4),
        fetch(2, 0, epoch=6),
        fetch(2, 12, last_epoch=4),
        fetch(9, 0),
        fetch(2, 11, last_epoch=4),
    ):
        assert ld.reread_follower_fetch(pos) == ld.on_follower_fetch(pos, 0)[0]
    ld.on_follower_fetch(fetch(2, 6, last_epoch=4), 10)
    before = [
        (r.log_end_offset, r.last_fetch_ms, r.last_fetch_leader_end) for r in ld.remotes.values()
    ]
    log.append_as_leader("r10", 5)
    # replica 3 at 8 would move the high watermark to 6 if it were recorded
    assert ld.reread_follower_fetch(fetch(3, 8, last_epoch=4)) == FetchAnswer(ErrorCode.NONE, 0, 0)
    after = [
        (r.log_end_offset, r.last_fetch_ms, r.last_fetch_leader_end) for r in ld.remotes.values()
    ]
    assert after == before and ld.high_watermark == 0 and ld.isr.isr == (1, 2, 3)
    ld.on_follower_fetch(fetch(3, 8, last_epoch=4), 20)  # the fetch itself moves it
    assert ld.reread_follower_fetch(fetch(3, 8, last_epoch=4)) == FetchAnswer(ErrorCode.NONE, 6, 0)


def test_shrink_uses_maximal_isr_until_the_controller_agrees() -> None:
    ld, _ = leader_with(10)
    ld.on_follower_fetch(fetch(2, 10, last_epoch=4), 100)
    ld.on_follower_fetch(fetch(3, 4, last_epoch=4), 100)
    assert ld.tick(1000) == []  # within replica.lag.time.max.ms
    acts = ld.tick(1200)
    (req,) = of(AlterIsr, acts)
    assert req == AlterIsr(5, 7, (1, 2), (-1, -1))
    ld.on_follower_fetch(fetch(2, 10, last_epoch=4), 1210)
    assert ld.high_watermark == 4  # 3 still counts while the shrink is in flight
    acts = ld.on_alter_partition_response(
        AlterIsrResult(req, ErrorCode.NONE, 1, 5, 8, (1, 2)), 1300
    )
    assert ld.isr.isr == (1, 2) and ld.high_watermark == 10
    assert HighWatermarkChanged(10) in acts


def test_expand_needs_high_watermark_and_epoch_start() -> None:
    ld, log = leader_with(10, isr=(1, 2))
    ld.on_follower_fetch(fetch(2, 10, last_epoch=4), 0)
    assert ld.high_watermark == 10
    _, acts = ld.on_follower_fetch(fetch(3, 9, last_epoch=4), 0)
    assert of(AlterIsr, acts) == []  # below the high watermark
    _, acts = ld.on_follower_fetch(fetch(3, 10, last_epoch=4), 0)
    (req,) = of(AlterIsr, acts)
    assert req.new_isr == (1, 2, 3) and ld.isr.maximal == (1, 2, 3)
    log.append_as_leader("x", 5)
    ld.on_local_append(1)
    ld.on_follower_fetch(fetch(2, 11, last_epoch=5), 1)
    assert ld.high_watermark == 10  # the joining replica already holds it back


def test_no_expansion_below_the_start_of_the_leader_epoch() -> None:
    # a new leader whose high watermark lags (5) must not let in a replica at 7: records
    # 7..9 may be committed by the previous leader and that replica lacks them
    log = MemLog()
    for i in range(10):
        log.append_as_leader(f"r{i}", 4)
    ld = PartitionLeader(1, reg(isr=(1, 2)), log, CONFIG, high_watermark=5, now_ms=0)
    assert ld.epoch_start_offset == 10
    _, acts = ld.on_follower_fetch(fetch(3, 7, last_epoch=4), 0)
    assert of(AlterIsr, acts) == []
    _, acts = ld.on_follower_fetch(fetch(3, 10, last_epoch=4), 0)
    assert of(AlterIsr, acts) == [AlterIsr(5, 7, (1, 2, 3), (-1, -1, -1))]


def test_alter_partition_errors() -> None:
    ld, log = leader_with(10, isr=(1, 2))
    ld.on_follower_fetch(fetch(2, 10, last_epoch=4), 0)
    _, acts = ld.on_follower_fetch(fetch(3, 10, last_epoch=4), 0)
    (req,) = of(AlterIsr, acts)
    # NOT_CONTROLLER: the same request again after the back-off
    assert ld.on_alter_partition_response(AlterIsrResult(req, ErrorCode.NOT_CONTROLLER), 10) == []
    assert ld.tick(500) == []
    assert of(AlterIsr, ld.tick(1010)) == [req]
    # INELIGIBLE_REPLICA after a resend: the first copy may still be applied, so the
    # change stays in flight (maximal ISR) and is proposed again with fresh epochs
    ld.on_alter_partition_response(AlterIsrResult(req, ErrorCode.INELIGIBLE_REPLICA), 1020)
    assert ld.isr.in_flight and ld.isr.maximal == (1, 2, 3)
    (again,) = of(AlterIsr, ld.tick(2100))
    assert again.new_isr == req.new_isr
    # ... until every copy is presumed gone (4 timeouts): then back to the committed ISR,
    # and no new proposal for a back-off
    ld.on_alter_partition_response(AlterIsrResult(again, ErrorCode.INELIGIBLE_REPLICA), 30_000)
    assert ld.isr.maximal == (1, 2)
    assert of(AlterIsr, ld.on_follower_fetch(fetch(3, 10, last_epoch=4), 30_500)[1]) == []
    (req,) = of(AlterIsr, ld.on_follower_fetch(fetch(3, 10, last_epoch=4), 31_100)[1])
    # a request sent once and refused is reset at once
    ld.on_alter_partition_response(AlterIsrResult(req, ErrorCode.INELIGIBLE_REPLICA), 31_150)
    assert ld.isr.maximal == (1, 2)
    (req,) = of(AlterIsr, ld.on_follower_fetch(fetch(3, 10, last_epoch=4), 32_200)[1])
    # INVALID_UPDATE_VERSION / FENCED_LEADER_EPOCH: wait for metadata, never resend
    ld.on_alter_partition_response(AlterIsrResult(req, ErrorCode.INVALID_UPDATE_VERSION), 32_300)
    assert of(AlterIsr, ld.tick(60_000)) == [] and ld.isr.in_flight
    ld.update_registration(reg(isr=(1, 2, 3), pepoch=9), 60_000)
    assert not ld.isr.in_flight and ld.isr.isr == (1, 2, 3)
    # the same partition epoch again does not clear a change in flight
    log.append_as_leader("x", 5)
    ld.on_follower_fetch(fetch(2, 10, last_epoch=4), 60_000)
    (req,) = of(AlterIsr, ld.tick(70_000))
    assert req.new_isr == (1,)
    ld.update_registration(reg(isr=(1, 2, 3), pepoch=9), 70_000)
    assert ld.isr.in_flight
    ld.on_alter_partition_response(AlterIsrResult(req, ErrorCode.FENCED_LEADER_EPOCH), 70_001)
    assert of(AlterIsr, ld.tick(90_000)) == []


def test_acks_all_delayed_produce() -> None:
    ld, log = leader_with(0, isr=(1, 2))
    assert ld.check_produce(-1) is ErrorCode.NONE
    log.append_as_leader("a", 5)
    assert ld.on_local_append(0) == []
    assert ld.park_produce(1, 1, 100, 0) == []
    log.append_as_leader("b", 5)
    ld.park_produce(2, 2, 100, 0)
    _, acts = ld.on_follower_fetch(fetch(2, 1, last_epoch=5), 10)
    assert of(ProduceCompleted, acts) == [ProduceCompleted(1, ErrorCode.NONE)]
    assert of(ProduceCompleted, ld.tick(100)) == [ProduceCompleted(2, ErrorCode.REQUEST_TIMED_OUT)]
    log.append_as_leader("c", 5)
    ld.park_produce(3, 3, 5000, 100)
    # the ISR shrank below min.insync.replicas: committed, but not as safe as asked
    acts = ld.update_registration(reg(isr=(1,), pepoch=8), 200)
    assert ProduceCompleted(3, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND) in acts
    assert ld.check_produce(-1) is ErrorCode.NOT_ENOUGH_REPLICAS
    assert ld.check_produce(1) is ErrorCode.NONE
    log.append_as_leader("d", 5)
    ld.park_produce(4, 5, 5000, 300)
    assert ld.resign() == [ProduceCompleted(4, ErrorCode.NOT_LEADER_OR_FOLLOWER)]


def test_next_tick_is_the_first_time_a_tick_has_work() -> None:
    """The replica timer ticks a leader only at ``next_tick_ms``: no tick before it may
    have work, and the one at it does (ISR shrink, produce expiry, AlterPartition resend)."""
    never = 2**62
    ld, _ = leader_with(10)  # ISR (1, 2, 3) at 0: both followers caught up "at 0"
    ld.on_follower_fetch(fetch(2, 10, last_epoch=4), 100)  # at the log end: caught up at 100
    ld.on_follower_fetch(fetch(3, 4, last_epoch=4), 100)  # behind since 0
    assert ld.next_tick_ms(100) == (1001, False)  # 3 is out of sync after 0 + 1000 ms
    ld.park_produce(1, 10, 500, 100)
    assert ld.next_tick_ms(100) == (600, False)
    assert of(ProduceCompleted, ld.tick(599)) == [] and ld.tick(599) == []
    assert ld.tick(600) == [ProduceCompleted(1, ErrorCode.REQUEST_TIMED_OUT)]
    assert ld.tick(1000) == []
    (req,) = of(AlterIsr, ld.tick(1001))
    assert req.new_isr == (1, 2)
    resend = 1001 + CONFIG.alter_partition_timeout_ms  # in flight: no shrink, a resend
    assert ld.next_tick_ms(1001) == (resend, False)
    assert of(AlterIsr, ld.tick(resend - 1)) == [] and of(AlterIsr, ld.tick(resend)) == [req]
    # an ISR member at the log end is never out of sync, however long ago it fetched:
    # nothing is timed until the log grows
    ld, log = leader_with(10, isr=(1, 2))
    ld.on_follower_fetch(fetch(2, 10, last_epoch=4), 100)
    assert ld.next_tick_ms(500) == (1101, False)
    assert ld.next_tick_ms(5000) == (never, True)
    assert ld.tick(5000) == []
    log.append_as_leader("x", 5)
    ld.on_local_append(5001)
    assert ld.next_tick_ms(5001) == (1101, False)  # overdue: the next tick shrinks
    (req,) = of(AlterIsr, ld.tick(5001))
    assert req.new_isr == (1,)


def test_follower_truncates_by_epochs_never_to_the_high_watermark() -> None:
    log = MemLog()
    for i in range(6):
        log.append_as_leader(f"old{i}", 3 if i < 4 else 4)
    fl = PartitionFollower(2, 1, 5, log, CONFIG, high_watermark=2)
    assert fl.offset_lag() == 0  # nothing heard from the leader yet
    pos = fl.fetch_position(0)
    assert pos == FetchPosition(2, 5, 6, 4)
    # the leader never had epoch 4: its epoch 3 ends at 5
    fl.on_fetch_result(FetchResult(pos, FetchAnswer(ErrorCode.NONE, 5, 0, (3, 5))), 0)
    assert log.log_end_offset == 4  # our own end of epoch 3, not the high watermark 2
    pos = fl.fetch_position(0)
    assert pos is not None and pos.last_fetched_epoch == 3
    stale = FetchResult(
        FetchPosition(2, 5, 6, 4), FetchAnswer(ErrorCode.NONE, 6, 0), ((6, 4, "x"),)
    )
    assert fl.on_fetch_result(stale, 0) == []  # answers a position we left
    recs = ((4, 5, "n4"), (5, 5, "n5"))
    acts = fl.on_fetch_result(FetchResult(pos, FetchAnswer(ErrorCode.NONE, 9, 0), recs), 0)
    assert log.log_end_offset == 6 and acts == [HighWatermarkChanged(6)]  # min(9, own end)
    assert fl.offset_lag() == 3  # Kafka's fetcher lag: leader HW 9 - own log end 6
    pos = fl.fetch_position(0)
    assert pos is not None
    fl.on_fetch_result(FetchResult(pos, FetchAnswer(ErrorCode.FENCED_LEADER_EPOCH)), 50)
    assert fl.fetch_position(100) is None and fl.fetch_position(50 + 1000) is not None


def test_partition_role_changes_follow_leader_epochs() -> None:
    log = MemLog()
    p = Partition(2, log, CONFIG, high_watermark=0)
    p.apply_registration(reg(leader=1, epoch=5), 0)
    assert p.role is Role.FOLLOWER
    p.apply_registration(reg(leader=2, epoch=6), 0)
    assert p.leader is not None and log.cache.entries() == [(6, 0)]
    assert p.apply_registration(reg(leader=1, epoch=5, pepoch=99), 0) == []  # stale
    # a restarted sole-ISR leader commits its whole log at once
    log2 = MemLog()
    log2.append_as_leader("x", 3)
    solo = Partition(1, log2, CONFIG, high_watermark=0)
    acts = solo.apply_registration(reg(isr=(1,), leader=1, epoch=6), 0)
    assert HighWatermarkChanged(1) in acts and solo.high_watermark == 1
    log.append_as_leader("a", 6)
    assert p.leader is not None
    p.leader.park_produce(7, 1, 1000, 0)
    acts = p.apply_registration(reg(leader=3, epoch=7), 0)
    assert ProduceCompleted(7, ErrorCode.NOT_LEADER_OR_FOLLOWER) in acts
    assert p.role is Role.FOLLOWER and log.log_end_offset == 1  # no truncation yet
    p.apply_registration(PartitionRegistration((1, 3, 4), (1, 3), leader=1, leader_epoch=8), 0)
    assert p.leader is None and p.follower is None


def test_an_unclean_leader_marks_the_partition_recovered() -> None:
    log = MemLog()
    p = Partition(2, log, CONFIG, high_watermark=0)
    unclean = PartitionRegistration(
        (1, 2, 3), (2,), leader=2, leader_recovery_state=1, leader_epoch=4, partition_epoch=9
    )
    (req,) = of(AlterIsr, p.apply_registration(unclean, 0))
    assert req == AlterIsr(4, 9, (2,), (-1,))  # same ISR; the wire form says RECOVERED
    clean = reg(isr=(2,), leader=2, epoch=5, pepoch=10)
    assert of(AlterIsr, p.apply_registration(clean, 0)) == []


def test_alter_partition_through_kafka_wire_bytes() -> None:
    tid = uuid.uuid4()
    req = AlterIsr(5, 7, (1, 2), (10, 11))
    msg = alter_partition_request(1, 9, [(tid, 0, req)])
    back = decode(AlterPartitionRequest, encode(msg, 3), 3)
    (p,) = back.topics[0].partitions
    assert back.topics[0].topic_id == tid and p.partition_epoch == 7
    assert [(b.broker_id, b.broker_epoch) for b in p.new_isr_with_epochs] == [(1, 10), (2, 11)]
    part = AlterPartitionResponse.PartitionData(
        partition_index=0, leader_id=1, leader_epoch=5, isr=[1, 2], partition_epoch=8
    )
    resp = AlterPartitionResponse(
        topics=[AlterPartitionResponse.TopicData(topic_id=tid, partitions=[part])]
    )
    resp = decode(AlterPartitionResponse, encode(resp, 3), 3)
    (res,) = alter_partition_results([(tid, 0, req)], resp, ErrorCode.NONE)
    assert res == AlterIsrResult(req, ErrorCode.NONE, 1, 5, 8, (1, 2))
    resp.error_code = int(ErrorCode.NOT_CONTROLLER)
    assert alter_partition_results([(tid, 0, req)], resp, ErrorCode.NONE)[0].error is (
        ErrorCode.NOT_CONTROLLER
    )
    assert alter_partition_results([(tid, 0, req)], None, ErrorCode.REQUEST_TIMED_OUT)[0].error is (
        ErrorCode.REQUEST_TIMED_OUT
    )


def test_a_fetch_from_an_older_incarnation_of_the_follower_is_refused() -> None:
    """KIP-903 (Kafka's Replica.updateFetchStateOrThrow): a fetch carrying a broker epoch
    older than the follower's registration in the leader's metadata comes from a process
    that has restarted since; it is refused and counts for nothing (issue 18 defect 2)."""
    part = Partition(1, MemLog(), CONFIG, broker_epoch=7)
    part.set_registered_epochs({1: 7, 2: 40, 3: 45})
    part.apply_registration(reg(), 0)
    ld = part.leader
    assert ld is not None
    for i in range(10):
        ld.log.append_as_leader(f"r{i}", 5)
    stale = FetchPosition(2, 5, 10, 5, replica_epoch=30)  # caught up, but an old process
    answer, acts = ld.on_follower_fetch(stale, 10)
    assert answer.error is ErrorCode.NOT_LEADER_OR_FOLLOWER and acts == []
    assert ld.remotes[2].log_end_offset == -1 and ld.high_watermark == 0
    # the registered incarnation is served, and so is a newer one (our metadata is behind),
    # and a fetch without an epoch (Fetch before v15) is not checked
    assert ld.on_follower_fetch(FetchPosition(2, 5, 10, 5, replica_epoch=40), 20)[0].error is (
        ErrorCode.NONE
    )
    assert ld.on_follower_fetch(FetchPosition(3, 5, 10, 5, replica_epoch=46), 20)[0].error is (
        ErrorCode.NONE
    )
    assert ld.remotes[2].broker_epoch == 40 and ld.remotes[3].broker_epoch == 46
    assert ld.high_watermark == 10
    assert ld.on_follower_fetch(FetchPosition(2, 5, 10, 5), 30)[0].error is ErrorCode.NONE
    # new registrations reach the leader: the old epoch 40 is now stale too
    part.set_registered_epochs({1: 7, 2: 60, 3: 45})
    again = ld.on_follower_fetch(FetchPosition(2, 5, 10, 5, replica_epoch=40), 40)
    assert again[0].error is ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_follower_retries_a_leader_that_has_not_taken_over_yet_soon() -> None:
    # the new leader's broker applies the election a little after ours (the controller's
    # own broker applies it first): its NOT_LEADER_OR_FOLLOWER / UNKNOWN_LEADER_EPOCH meant
    # a replica.fetch.backoff.ms (1 s) wait, and an acks=all produce waited for it (issue
    # 23). Retries start at LEADER_NOT_READY_BACKOFF_MS and double up to the back-off.
    from riverbed.replication.follower import LEADER_NOT_READY_BACKOFF_MS as FIRST

    fl = PartitionFollower(2, 1, 5, MemLog(), CONFIG, high_watermark=0)
    now, waits = 0, []
    for error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_LEADER_EPOCH) * 4:
        pos = fl.fetch_position(now)
        assert pos is not None
        fl.on_fetch_result(FetchResult(pos, FetchAnswer(error, -1, -1)), now)
        waits.append(fl.backoff_until_ms - now)
        now = fl.backoff_until_ms
    backoff = CONFIG.replica_fetch_backoff_ms
    assert waits == [min(FIRST * 2**i, backoff) for i in range(8)]
    # an answer resets it; any other error waits the whole back-off
    pos = fl.fetch_position(now)
    assert pos is not None
    fl.on_fetch_result(FetchResult(pos, FetchAnswer(ErrorCode.NONE, 0, 0)), now)
    pos = fl.fetch_position(now)
    assert pos is not None
    fl.on_fetch_result(FetchResult(pos, FetchAnswer(ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, -1)), now)
    assert fl.backoff_until_ms - now == FIRST
    pos = fl.fetch_position(fl.backoff_until_ms)
    assert pos is not None
    fl.on_fetch_result(FetchResult(pos, FetchAnswer(ErrorCode.KAFKA_STORAGE_ERROR, -1, -1)), now)
    assert fl.backoff_until_ms - now == backoff
