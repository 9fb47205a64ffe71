"""End to end (issue 22): a streaming query copies topic ``in`` (read_committed) to topic
``out`` through the riverbed sink on a 3-node riverbed cluster while its Spark driver, a
process of its own, is SIGKILLed at random points of its run (starting, reading, writing,
committing) and restarted from its checkpoint, and one of the riverbed nodes is SIGKILLed
and restarted while the driver writes. With the exactly-once sink a read_committed
consumer of ``out`` reads every record of ``in`` exactly once; the same job with the
at-least-once sink writes duplicates (so the check can fail).

A soak, not part of ``make test`` (the file name keeps pytest from collecting it unless it
is named): every kill restarts a Spark driver (a JVM and its Python workers), minutes each
on a loaded machine. Run it with ``make soak-spark`` (``.venv/bin/pytest
tests/spark/soak_exactly_once_kills.py``); ``RIVERBED_EOS_KILLS`` sets the number of kills
of each run (default 10); the seed of the kill points is printed (``RIVERBED_EOS_SEED``
replays it).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from riverbed.testing.cluster import LOAD_SCALE_MAX, scaled_s
from riverbed.testing.quorum_cluster import QuorumCluster

KILLS = int(os.environ.get("RIVERBED_EOS_KILLS", "10"))
RECORDS = 1_000
PER_TRIGGER = 40  # 25 small batches: kills land before, during and after commits
DRIVER = Path(__file__).with_name("eos_driver.py")
#: The longest one driver run may take to finish the copy (stretched by the load).
RUN_TIMEOUT_S = 240.0
#: A kill comes this long at most after the driver's first write to ``out`` of its run.
KILL_DELAY_MAX_S = 3.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QuorumCluster]:
    overrides = {
        "transaction.two.phase.commit.enable": "true",
        "default.replication.factor": "3",
        "offsets.topic.replication.factor": "3",
        "transaction.state.log.replication.factor": "3",
        "num.partitions": "2",
    }
    c = QuorumCluster(tmp_path_factory.mktemp("eos-kills"), 3, overrides=overrides)
    c.start(scaled_s(120))
    try:
        yield c
    finally:
        c.stop()


def _fill_in(bootstrap: str) -> set[bytes]:
    """``in``: RECORDS committed records and an aborted transaction that read_committed
    must not copy."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(t, 2, 3) for t in ("in", "out")]).values():
        fut.result(60)
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "eos-fill"})
    p.init_transactions(60)
    p.begin_transaction()
    for i in range(50):
        p.produce("in", b"aborted-%d" % i, partition=i % 2)
    p.abort_transaction(60)
    values = {b"v%06d" % i for i in range(RECORDS)}
    p.begin_transaction()
    for i, v in enumerate(sorted(values)):
        p.produce("in", v, b"k%d" % (i % 7), partition=i % 2)
    p.commit_transaction(60)
    return values


def _read_out(bootstrap: str) -> Counter[bytes]:
    """Every record of ``out`` as a read_committed consumer sees it (up to the LSO)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{time.monotonic_ns()}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        ends = {}
        for p in (0, 1):
            _low, high = c.get_watermark_offsets(TopicPartition("out", p), timeout=30)
            ends[p] = high
        c.assign([TopicPartition("out", p, 0) for p in (0, 1)])
        got: Counter[bytes] = Counter()
        done = {p for p, end in ends.items() if end == 0}
        deadline = time.monotonic() + scaled_s(60)
        while len(done) < 2 and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                # read_committed stops at the LSO: positions past the last record count
                for tp in c.position([TopicPartition("out", p) for p in (0, 1)]):
                    if tp.offset >= ends[tp.partition]:
                        done.add(tp.partition)
                continue
            if msg.error():
                if msg.error().code() == -191:  # _PARTITION_EOF
                    done.add(msg.partition())
                continue
            got[msg.value()] += 1
            if (msg.offset() or 0) + 1 >= ends[msg.partition()]:
                done.add(msg.partition())
        assert len(done) == 2, f"out not read to its end: {ends}"
        return got
    finally:
        c.close()


def _start_driver(bootstrap: str, checkpoint: Path, exactly_once: bool, log: Any) -> Any:
    return subprocess.Popen(
        [
            sys.executable,
            str(DRIVER),
            bootstrap,
            str(checkpoint),
            "true" if exactly_once else "false",
            str(PER_TRIGGER),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its JVM and Python workers die with it (killpg)
    )


def _kill(proc: Any) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(60)


def _out_end(bootstrap: str) -> int:
    """Sum of ``out``'s high watermarks (records, markers, aborted records)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "eos-kill-watch"})
    try:
        return sum(c.get_watermark_offsets(TopicPartition("out", p), timeout=30)[1] for p in (0, 1))
    finally:
        c.close()


def _kill_broker(cluster: QuorumCluster, rng: random.Random, proc: Any) -> None:
    """SIGKILL a random node while the driver writes, and restart it while the driver
    goes on (its tasks' and commits' clients follow the new leaders and coordinators)."""
    node = rng.choice(sorted(cluster.nodes))
    began = time.monotonic()
    cluster.kill(node)
    cluster.start_nodes([node], scaled_s(120))
    alive = "still running" if proc.poll() is None else f"exited {proc.returncode}"
    say(
        f"broker {node} SIGKILLed and restarted in {time.monotonic() - began:.0f} s (driver {alive})"
    )


def say(what: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {what}", flush=True)


def _run_with_kills(cluster: QuorumCluster, tmp: Path, exactly_once: bool, kills: int,
                    seed: int, broker_kill_round: int | None = None) -> int:  # fmt: skip
    """Start the driver, wait until it writes to ``out`` (a batch's tasks are producing, or
    its commit's markers land), SIGKILL it after a random delay (within the batch, its
    commit, or the next batch), restart from the checkpoint; ``kills`` times; then run to
    the end. In round ``broker_kill_round`` a broker is SIGKILLed (and restarted) first,
    at the same kind of point. A run that fails by itself (a loaded machine: Spark's
    "Python worker failed to connect back") is one more crash, and restarted. Returns
    those failed runs."""
    bootstrap = cluster.bootstrap_servers
    rng = random.Random(seed)
    checkpoint = tmp / f"ckpt-{exactly_once}"
    killed = failed = rounds = 0
    deadline = time.monotonic() + scaled_s(RUN_TIMEOUT_S) * (kills + 2)
    with open(tmp / f"driver-{exactly_once}.log", "ab") as log:
        while killed < kills:
            assert time.monotonic() < deadline, f"{killed} kills, {failed} failed runs"
            began = time.monotonic()
            proc = _start_driver(bootstrap, checkpoint, exactly_once, log)
            start = _out_end(bootstrap)
            while proc.poll() is None and _out_end(bootstrap) == start:
                assert time.monotonic() < deadline, "the driver made no progress"
                time.sleep(0.05)
            say(f"run {rounds}: first write to out {time.monotonic() - began:.0f} s after start")
            if proc.poll() is None:
                time.sleep(rng.uniform(0.0, KILL_DELAY_MAX_S))
            if rounds == broker_kill_round and proc.poll() is None:
                _kill_broker(cluster, rng, proc)
            rounds += 1
            if proc.poll() is None:
                _kill(proc)
                killed += 1
            elif proc.returncode == 0:
                raise AssertionError(f"the copy ended after {killed} kills: raise RECORDS")
            else:
                failed += 1
        while True:  # to the end
            assert time.monotonic() < deadline, f"the copy did not finish: see {tmp}"
            began = time.monotonic()
            proc = _start_driver(bootstrap, checkpoint, exactly_once, log)
            try:
                if proc.wait(scaled_s(RUN_TIMEOUT_S)) == 0:
                    say(f"the last run copied the rest in {time.monotonic() - began:.0f} s")
                    return failed
            except subprocess.TimeoutExpired:
                _kill(proc)
            failed += 1


def _reset_out(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.delete_topics(["out"]).values():
        fut.result(60)
    deadline = time.monotonic() + scaled_s(60)
    while time.monotonic() < deadline:
        try:
            admin.create_topics([NewTopic("out", 2, 3)])["out"].result(60)
            break
        except Exception:  # still being deleted
            time.sleep(0.5)
    else:
        raise AssertionError("could not recreate topic out")
    while time.monotonic() < deadline:  # every node knows the new partitions
        try:
            if _out_end(bootstrap) == 0:
                return
        except Exception:  # UNKNOWN_PARTITION while the metadata spreads
            pass
        time.sleep(0.5)
    raise AssertionError("the recreated topic out has no readable partitions")


@pytest.mark.spark
@pytest.mark.timeout(int(RUN_TIMEOUT_S * LOAD_SCALE_MAX * (2 * KILLS + 6)))
def test_exactly_once_under_driver_kills_and_at_least_once_duplicates(
    cluster: QuorumCluster, tmp_path: Path
) -> None:
    bootstrap = cluster.bootstrap_servers
    expected = _fill_in(bootstrap)
    seed = int(os.environ.get("RIVERBED_EOS_SEED", str(random.randrange(2**32))))
    print(f"kill points: RIVERBED_EOS_SEED={seed} RIVERBED_EOS_KILLS={KILLS}")

    # a broker SIGKILLed (and restarted) mid-copy too, half-way through the driver kills
    failed = _run_with_kills(cluster, tmp_path, True, KILLS, seed, broker_kill_round=KILLS // 2)
    got = _read_out(bootstrap)
    missing = expected - set(got)
    dups = {v: n for v, n in got.items() if n > 1}
    assert not missing and not dups and set(got) == expected, (
        f"seed {seed}: {len(missing)} missing, {len(dups)} duplicated "
        f"(e.g. {sorted(dups.items())[:3]}), {len(set(got) - expected)} unexpected; "
        f"after {KILLS} kills, a broker kill and {failed} runs that failed by themselves"
    )
    say(f"exactly-once: {len(got)} records once each after {KILLS} driver kills and a broker kill")

    # the same job, at-least-once: a kill between a batch's writes and Spark's commit
    # log makes the restarted query write the batch again
    _reset_out(bootstrap)
    _run_with_kills(cluster, tmp_path, False, KILLS, seed)
    got = _read_out(bootstrap)
    assert set(got) == expected  # nothing lost either
    assert sum(got.values()) > len(expected), f"seed {seed}: no duplicate at-least-once"
    say(f"at-least-once: {sum(got.values()) - len(expected)} duplicates")
