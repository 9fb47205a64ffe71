"""The transactional history checker (issue 19): each anomaly in a hand-made history is
found, clean histories report none, and histories of a correct model are clean."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from riverbed.testing.txn_history import (
    CASES_PER_KIND_MAX,
    Outcome,
    Poll,
    Send,
    Txn,
    check,
)

OK, FAIL, INFO = Outcome.OK, Outcome.FAIL, Outcome.INFO


def writer(process: str, outcome: Outcome, *sends: Send, commit_at: int | None = 1) -> Txn:
    return Txn(process, outcome, sends=sends, invoke_at=0, commit_at=commit_at, complete_at=2)


def reader(process: str, *polls: Poll, at: int = 10) -> Txn:
    return Txn(process, OK, polls=polls, invoke_at=at, complete_at=at)


def test_clean_history_reports_nothing() -> None:
    history = [
        writer("w1", OK, Send(0, 1, 0), Send(1, 2, 0)),
        writer("w2", FAIL, Send(0, 3, 1)),
        writer("w3", INFO, Send(0, 4, 3)),  # unknown outcome, never read: fine
        writer("w1", OK, Send(0, 5, 5)),
        reader("r1", Poll(0, ((0, 1),)), Poll(1, ((0, 2),))),
        reader("r1", Poll(0, ((5, 5),)), at=11),
    ]
    report = check(history)
    assert report.clean, str(report)
    assert str(report) == "no anomaly"


def test_aborted_read() -> None:
    history = [writer("w", FAIL, Send(0, 1, 0)), reader("r", Poll(0, ((0, 1),)))]
    assert check(history).kinds() == {"aborted_read"}


def test_precommitted_read_before_the_commit_was_invoked() -> None:
    history = [
        writer("w", OK, Send(0, 1, 0), commit_at=20),
        reader("r", Poll(0, ((0, 1),)), at=10),
    ]
    assert check(history).kinds() == {"precommitted_read"}


def test_read_of_an_indeterminate_writer_that_never_asked_to_commit_is_precommitted() -> None:
    history = [
        writer("w", INFO, Send(0, 1, 0), commit_at=None),
        reader("r", Poll(0, ((0, 1),))),
    ]
    assert check(history).kinds() == {"precommitted_read"}


def test_read_before_the_commit_was_acknowledged_is_legal() -> None:
    # the markers are written before EndTxn answers: the read completes first
    history = [
        Txn("w", OK, sends=(Send(0, 1, 0),), invoke_at=0, commit_at=5, complete_at=30),
        reader("r", Poll(0, ((0, 1),)), at=10),
        Txn("w2", INFO, sends=(Send(0, 2, 2),), invoke_at=0, commit_at=6, complete_at=40),
        reader("r", Poll(0, ((2, 2),)), at=11),
    ]
    assert check(history).clean


def test_lost_write_only_once_a_reader_went_past_it() -> None:
    w = [writer("w", OK, Send(0, 1, 0)), writer("w", OK, Send(0, 2, 1))]
    past = check([*w, reader("r", Poll(0, ((1, 2),)))])
    assert past.kinds() == {"lost_write"}
    assert past.counts["lost_write"] == 1 and "value 1 " in past.cases["lost_write"][0]
    assert check([*w, reader("r", Poll(0, ((0, 1),)))]).clean  # 2 not reached yet


def test_lost_write_found_by_the_offset_another_reader_saw() -> None:
    # the delivery report was missing; a reader placed value 2 at offset 1
    history = [
        writer("w", OK, Send(0, 1, None), Send(0, 2, None)),
        reader("r1", Poll(0, ((0, 1), (1, 2)))),
        reader("r2", Poll(0, ((1, 2),))),
    ]
    assert check(history).clean  # value 1 was read by r1
    lost = [writer("w", OK, Send(0, 1, 0), Send(0, 2, None)), reader("r", Poll(0, ((1, 2),)))]
    assert check(lost).kinds() == {"lost_write"}


def test_duplicate() -> None:
    history = [writer("w", OK, Send(0, 1, 0)), reader("r", Poll(0, ((0, 1), (1, 1))))]
    assert check(history).kinds() == {"duplicate"}


def test_inconsistent_offset() -> None:
    history = [
        writer("w1", OK, Send(0, 1, 0)),
        writer("w2", OK, Send(0, 2, 1)),
        reader("r", Poll(0, ((1, 1),))),
    ]
    report = check(history)
    # value 1 at offsets 0 and 1 too; value 2 then unread below nothing read past it
    assert "inconsistent_offset" in report.kinds()
    assert report.cases["inconsistent_offset"] == ["p0@1: values [1, 2]"]


def test_nonmonotonic_poll() -> None:
    history = [
        writer("w", OK, Send(0, 1, 0), Send(0, 2, 1)),
        reader("r", Poll(0, ((1, 2),))),
        reader("r", Poll(0, ((0, 1),)), at=11),
    ]
    assert check(history).kinds() == {"nonmonotonic_poll"}
    # two processes each polling in order are fine
    other = [history[0], history[1], reader("r2", Poll(0, ((0, 1),)), at=11)]
    assert check(other).clean


def test_nonmonotonic_send() -> None:
    history = [writer("w", OK, Send(0, 1, 5)), writer("w", OK, Send(0, 2, 3))]
    assert check(history).kinds() == {"nonmonotonic_send"}
    assert check([writer("w", OK, Send(0, 1, 5)), writer("w", OK, Send(1, 2, 3))]).clean


def test_unwritten_read() -> None:
    assert check([reader("r", Poll(0, ((0, 9),)))]).kinds() == {"unwritten_read"}


def test_write_read_cycle_g1c() -> None:
    # each transaction read the other's write: impossible when reads need a commit
    t1 = Txn("a", OK, (Send(0, 1, 0),), (Poll(1, ((0, 2),)),), 0, 1, 10)
    t2 = Txn("b", OK, (Send(1, 2, 0),), (Poll(0, ((0, 1),)),), 0, 1, 10)
    report = check([t1, t2])
    assert report.kinds() == {"G1c"}
    assert report.cases["G1c"][0] in ("cycle 0(a) -> 1(b) -> 0(a)", "cycle 1(b) -> 0(a) -> 1(b)")


def test_longer_wr_cycle_through_a_third_transaction() -> None:
    t1 = Txn("a", OK, (Send(0, 1, 0),), (Poll(2, ((0, 3),)),), 0, 1, 10)
    t2 = Txn("b", OK, (Send(1, 2, 0),), (Poll(0, ((0, 1),)),), 0, 1, 10)
    t3 = Txn("c", OK, (Send(2, 3, 0),), (Poll(1, ((0, 2),)),), 0, 1, 10)
    report = check([t1, t2, t3])
    assert report.kinds() == {"G1c"}
    assert check([t1, t2]).kinds() == {"unwritten_read"}  # no cycle without c


def test_interleaved_writes_cycle_only_with_ww_edges() -> None:
    """T2 sends y@1; T1 sends y@2 and x@0 and commits; T2 polls x@0 and commits: Kafka
    allows it (T2 -ww-> T1 -wr-> T2), so it is a G1c only over offset-order ww edges."""
    t1 = Txn("t1", OK, (Send(1, 2, 2), Send(0, 1, 0)), (), 0, 5, 6)
    t2 = Txn("t2", OK, (Send(1, 3, 1),), (Poll(0, ((0, 1),)),), 0, 8, 9)
    assert check([t1, t2]).clean
    assert check([t1, t2], ww_edges=True).kinds() == {"G1c"}


def test_failed_transactions_are_not_in_the_graph() -> None:
    t1 = Txn("a", FAIL, (Send(0, 1, 0),), (Poll(1, ((0, 2),)),), 0, 1, 10)
    t2 = Txn("b", OK, (Send(1, 2, 0),), (Poll(0, ((0, 1),)),), 0, 1, 10)
    assert check([t1, t2]).kinds() == {"aborted_read"}


def test_cases_are_capped_and_counts_kept() -> None:
    history = [writer("w", FAIL, *(Send(0, v, v) for v in range(50)))]
    history.append(reader("r", Poll(0, tuple((v, v) for v in range(50)))))
    report = check(history)
    assert report.counts == {"aborted_read": 50}
    assert len(report.cases["aborted_read"]) == CASES_PER_KIND_MAX


# -- a correct model: Kafka's rules on an in-memory log ------------------------------


@dataclass
class Entry:
    value: int
    status: str = "open"  # open | committed | aborted


@dataclass
class Open:
    sends: list[Send] = field(default_factory=list)
    polls: list[Poll] = field(default_factory=list)
    entries: list[Entry] = field(default_factory=list)
    invoke_at: int = 0


@dataclass
class Model:
    """Producers p0..p2 run transactions that send and poll (interleaved, or one at a time
    when `serial`), consumers c-p0..c-p2 poll; `read_uncommitted` breaks the LSO rule."""

    rng: random.Random
    serial: bool = False
    read_uncommitted: bool = False
    partitions: int = 3
    clock: int = 0
    next_value: int = 0
    logs: list[list[Entry]] = field(default_factory=lambda: [[], [], []])
    positions: dict[tuple[str, int], int] = field(default_factory=dict)
    open: dict[str, Open] = field(default_factory=dict)
    history: list[Txn] = field(default_factory=list)

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    def poll(self, process: str) -> Poll:
        """Read committed: up to the first open offset, aborted records skipped."""
        p = self.rng.randrange(self.partitions)
        log = self.logs[p]
        end = self.positions.get((process, p), 0)
        records = []
        while end < len(log) and (self.read_uncommitted or log[end].status != "open"):
            if self.read_uncommitted or log[end].status == "committed":
                records.append((end, log[end].value))
            end += 1
        self.positions[(process, p)] = end
        return Poll(p, tuple(records))

    def step(self) -> None:
        process = f"p{self.rng.randrange(3)}"
        txn = self.open.get(process)
        choice = self.rng.random()
        if txn is None:
            if choice < 0.3:
                now = self.tick()
                poll = self.poll(f"c-{process}")
                self.history.append(Txn(f"c-{process}", OK, (), (poll,), now, None, now))
            elif not (self.serial and self.open):
                self.open[process] = Open(invoke_at=self.tick())
        elif choice < 0.45:
            p = self.rng.randrange(self.partitions)
            entry = Entry(self.next_value)
            self.logs[p].append(entry)
            txn.entries.append(entry)
            txn.sends.append(Send(p, entry.value, len(self.logs[p]) - 1))
            self.next_value += 1
        elif choice < 0.6:
            txn.polls.append(self.poll(process))
        else:
            self.finish(process, txn, choice)

    def finish(self, process: str, txn: Open, choice: float) -> None:
        """Commit or abort; the client may not learn which (INFO), or die first."""
        del self.open[process]
        commit = choice < 0.85
        commit_at = self.tick() if commit else None
        for entry in txn.entries:
            entry.status = "committed" if commit else "aborted"
        outcome = OK if commit else FAIL
        if choice > 0.97 or self.rng.random() < 0.1:
            outcome = INFO
        sends, polls = tuple(txn.sends), tuple(txn.polls)
        self.history.append(
            Txn(process, outcome, sends, polls, txn.invoke_at, commit_at, self.tick())
        )

    def run(self, steps: int = 120) -> list[Txn]:
        for _ in range(steps):
            self.step()
        for process in sorted(self.open):  # the rest abort (the coordinator's timeout)
            self.finish(process, self.open[process], 0.9)
        for p, log in enumerate(self.logs):  # a last reader from the start
            records = tuple((o, e.value) for o, e in enumerate(log) if e.status == "committed")
            now = self.tick()
            self.history.append(Txn(f"end-{p}", OK, (), (Poll(p, records),), now, None, now))
        return self.history


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_histories_of_a_correct_model_are_clean(seed: int) -> None:
    report = check(Model(random.Random(seed)).run())
    assert report.clean, f"seed {seed}:\n{report}"


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_serial_histories_are_clean_with_ww_edges(seed: int) -> None:
    report = check(Model(random.Random(seed), serial=True).run(), ww_edges=True)
    assert report.clean, f"seed {seed}:\n{report}"


def aborted_values_read(history: list[Txn]) -> bool:
    aborted = {s.value for t in history if t.outcome is FAIL for s in t.sends}
    return any(v in aborted for t in history for p in t.polls for _, v in p.records)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_a_model_with_a_broken_lso_rule_is_caught(seed: int) -> None:
    """read_uncommitted (open and aborted records returned): every history in which an
    aborted value was read is flagged, and so is each that read an open one."""
    history = Model(random.Random(seed), read_uncommitted=True).run()
    report = check(history)
    if aborted_values_read(history):
        assert "aborted_read" in report.kinds(), f"seed {seed}"


def test_the_broken_model_reads_aborted_data_often() -> None:
    # the property above is not vacuous
    hits = sum(
        aborted_values_read(Model(random.Random(s), read_uncommitted=True).run()) for s in range(20)
    )
    assert hits >= 10


def test_interleaved_correct_histories_have_ww_cycles() -> None:
    # why write-write edges are off by default: Kafka's own rules produce such cycles
    runs = [check(Model(random.Random(s)).run(), ww_edges=True) for s in range(100)]
    assert any("G1c" in r.kinds() for r in runs)
