"""The nemesis run's schedule and checks (riverbed.testing.nemesis_schedule,
riverbed.testing.nemesis_checks): a clean history passes, and each guarantee catches the
history that breaks it."""

from __future__ import annotations

import dataclasses

import pytest

from riverbed.testing.nemesis import longest_wait
from riverbed.testing.nemesis_checks import Acked, GroupRead, History, violations
from riverbed.testing.nemesis_schedule import (
    FAULT_KINDS,
    FAULT_TARGETS,
    HOLD_S_MAX,
    QUIET_S_MAX,
    Fault,
    fault_schedule,
    pick_nodes,
)

PARTITIONS = 3


def clean_history(sent: int = 30) -> History:
    """Every value acknowledged at the next offset of its partition, and read back so."""
    h = History(partitions=PARTITIONS, sent=sent)
    offsets = dict.fromkeys(range(PARTITIONS), 0)
    for value in range(sent):
        p = value % PARTITIONS
        h.acked.append(Acked(value, p, offsets[p]))
        h.logs.setdefault(p, []).append((offsets[p], value))
        offsets[p] += 1
    return h


def with_group(h: History) -> History:
    """``h`` with a group member that got every record once and committed each
    partition's end (halfway first), as a new client then reads it."""
    g = GroupRead("consumer")
    for p, rows in h.logs.items():
        g.delivered[p] = list(rows)
        end = rows[-1][0] + 1
        g.commits[p] = [end // 2, end]
        g.committed[p] = end
    h.group = g
    return h


def kinds(h: History) -> list[str]:
    return [line.split(":")[0] for line in violations(h)]


def test_a_clean_history_keeps_every_guarantee() -> None:
    assert violations(clean_history()) == []


def test_a_failed_value_may_be_in_the_log_or_not() -> None:
    h = clean_history()
    h.acked = [a for a in h.acked if a.value not in (4, 5)]
    h.failed = {4, 5}
    h.logs[2] = [(o, v) for o, v in h.logs[2] if v != 5]  # 5 never written, 4 written
    assert violations(h) == []


def test_an_acknowledged_value_missing_from_the_log_is_lost() -> None:
    h = clean_history()
    h.logs[1] = h.logs[1][:-2]  # the tail of partition 1 gone (a truncation)
    assert kinds(h) == ["acknowledged and lost"]
    assert "holds nothing" in violations(h)[0]


def test_an_acknowledged_offset_holding_another_value_is_lost() -> None:
    h = clean_history()
    h.acked[3] = dataclasses.replace(h.acked[3], offset=h.acked[3].offset + 1)
    assert kinds(h) == ["acknowledged and lost"]


def test_a_value_written_twice_is_a_duplicate() -> None:
    h = clean_history()
    last_offset, value = h.logs[0][-1]
    h.logs[0].append((last_offset + 1, value))  # a retry appended again
    assert "written twice" in kinds(h)
    assert "out of send order" in kinds(h)  # a repeat is also not in send order


def test_values_out_of_send_order_are_caught() -> None:
    h = clean_history()
    rows = h.logs[2]
    (o1, v1), (o2, v2) = rows[1], rows[2]
    rows[1], rows[2] = (o1, v2), (o2, v1)
    assert "out of send order" in kinds(h)


def test_a_value_in_the_wrong_partition_or_never_sent_is_foreign() -> None:
    h = clean_history()
    h.logs[0].append((len(h.logs[0]), 1))  # 1 belongs to partition 1
    assert "not sent there" in kinds(h)
    h = clean_history()
    h.logs[0].append((len(h.logs[0]), 999))  # never sent
    assert kinds(h) == ["not sent there"]


def test_offsets_read_twice_are_caught() -> None:
    h = clean_history()
    first = h.logs[0][0]
    h.logs[0].insert(1, first)
    assert "offsets read twice or backwards" in kinds(h)


def test_a_value_neither_acknowledged_nor_failed_is_unresolved() -> None:
    h = clean_history()
    h.sent += 1  # sent, and the producer never said what became of it
    assert kinds(h) == ["never acknowledged nor failed"]


def test_a_fatal_producer_error_is_a_violation() -> None:
    h = clean_history()
    h.fatal = "OUT_OF_ORDER_SEQUENCE_NUMBER"
    assert kinds(h) == ["fatal producer error"]


def test_examples_are_bounded_and_counted() -> None:
    h = clean_history(300)
    h.logs = {p: [] for p in range(PARTITIONS)}
    (line,) = violations(h)
    assert line.startswith("acknowledged and lost: 300: ")
    assert line.endswith("(and 295 more)")


@pytest.mark.parametrize("seed", range(20))
def test_a_schedule_is_the_same_for_its_seed_and_fits_its_length(seed: int) -> None:
    faults = fault_schedule(seed, 60)
    assert faults == fault_schedule(seed, 60)
    assert sum(f.quiet_s + f.hold_s for f in faults) <= 60
    assert len(faults) >= 60 // (QUIET_S_MAX + HOLD_S_MAX)
    for f in faults:
        assert f.kind in FAULT_KINDS and f.target in FAULT_TARGETS


def test_schedules_cover_every_kind_and_target() -> None:
    faults = [f for seed in range(10) for f in fault_schedule(seed, 60)]
    assert {f.kind for f in faults} == set(FAULT_KINDS)
    assert {f.target for f in faults} == set(FAULT_TARGETS)
    assert fault_schedule(1, 60) != fault_schedule(2, 60)


def test_a_fault_hits_the_leader_it_names_or_a_picked_node() -> None:
    nodes = [1, 2, 3]
    assert pick_nodes(Fault(1, "kill", "leader", 1, pick=0), nodes, 3, 2) == [3]
    assert pick_nodes(Fault(1, "kill", "controller", 1, pick=0), nodes, 3, 2) == [2]
    # unknown leader (mid-fault lookups fail): a picked node, deterministically
    assert pick_nodes(Fault(1, "kill", "leader", 1, pick=4), nodes, -1, 2) == [2]
    assert pick_nodes(Fault(1, "pause", "any", 1, pick=5), nodes, 3, 2) == [3]


def test_a_wide_fault_hits_its_target_and_one_other_never_all() -> None:
    nodes = [1, 2, 3]
    for pick in range(6):
        hit = pick_nodes(Fault(1, "kill", "leader", 1, pick=pick, width=2), nodes, 3, 2)
        assert hit[0] == 3 and len(set(hit)) == 2 and set(hit) < set(nodes)
    with pytest.raises(AssertionError):
        pick_nodes(Fault(1, "kill", "any", 1, width=2), [1, 2], 1, 1)
    wide = [f for seed in range(10) for f in fault_schedule(seed, 60) if f.width == 2]
    assert wide, "no schedule of ten has a two-node fault"


def test_longest_wait_is_cut_at_the_windows_edges() -> None:
    acks = [0.0, 1.0, 1.5, 4.0, 4.2, 9.0]
    assert longest_wait(acks, 1.2, 4.1) == pytest.approx(2.5)  # 1.5 -> 4.0
    # 4.2 -> 9.0 runs past the end: cut there (the next window counts from its start)
    assert longest_wait(acks, 4.1, 6.0) == pytest.approx(1.8)
    assert longest_wait(acks, 6.0, 12.0) == pytest.approx(3.0)  # 6.0 -> 9.0, then 9 -> 12
    assert longest_wait([], 2.0, 5.0) == pytest.approx(3.0)


def test_a_clean_group_read_keeps_every_guarantee() -> None:
    h = with_group(clean_history())
    assert violations(h) == []
    assert h.group is not None
    h.group.delivered[0] += h.group.delivered[0][:3]  # redelivered after a rebalance: allowed
    assert violations(h) == []


def test_a_record_the_log_does_not_hold_delivered_to_the_group_is_caught() -> None:
    h = with_group(clean_history())
    assert h.group is not None
    offset, _ = h.logs[1][-1]
    h.group.delivered[1].append((offset + 1, 1000))  # above the end: truncated later
    assert kinds(h) == ["delivered to the group, not in the log"]


def test_a_record_never_delivered_to_the_group_is_caught() -> None:
    h = with_group(clean_history())
    assert h.group is not None
    del h.group.delivered[2][4]
    assert kinds(h) == ["never delivered to the group"]


def test_group_commits_going_back_or_lost_are_caught() -> None:
    h = with_group(clean_history())
    assert h.group is not None
    h.group.commits[0] = [5, 3, h.group.commits[0][-1]]
    assert kinds(h) == ["group commits lost or behind"]
    h = with_group(clean_history())
    assert h.group is not None
    h.group.committed[1] -= 1  # the coordinator lost the last acknowledged commit
    assert kinds(h) == ["group commits lost or behind"]
    h = with_group(clean_history())
    assert h.group is not None
    h.group.commits[2][-1] -= 1  # never reached the end
    h.group.committed[2] -= 1
    assert kinds(h) == ["group commits lost or behind"]
