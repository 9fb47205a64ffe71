"""The copy job of issue 19 ("## Tests", third bullet) on 3 real nodes: a transactional
consume-transform-produce copier (confluent-kafka, its own process,
``send_offsets_to_transaction``) copies a topic that a feeder keeps writing, while the
copier and random nodes are SIGKILLed and started again, two of each. The output then
holds every input record exactly once, in order, per partition; the group's offsets
reached the input's end; a read_committed consumer that polled the output throughout read
the same, and its history with the copier's transactions is clean to the history checker.
See `riverbed.testing.txn_copy` (``python -m riverbed.testing.txn_copy`` is the longer
soak).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from riverbed.testing.quorum_cluster import QuorumCluster
from riverbed.testing.txn_copy import FEED_PER_S, OVERRIDES, run_copy_job

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ROUNDS, SECONDS, SEED = 4, 12.0, 19


def test_the_copy_job_copies_exactly_once_under_kills(tmp_path: Path) -> None:
    cluster = QuorumCluster(tmp_path / "cluster", 3, overrides=OVERRIDES)
    try:
        cluster.start(timeout_s=60)
        out = run_copy_job(cluster, tmp_path, rounds=ROUNDS, seconds=SECONDS, seed=SEED)
    finally:
        cluster.stop()
    assert not out.problems and out.report.clean, str(out)
    assert (out.copier_kills, out.node_kills) == (2, 2), str(out)
    # the copy went on between the kills: many transactions; and the feeder wrote all
    # along the fault schedule (FEED_PER_S a second; the node restarts add more, as many
    # as the machine is slow: >= 2,000 records at stop 31, 1,860 on a faster machine),
    # every record of it copied once (judged above)
    assert out.committed >= 20, str(out)
    assert out.records >= 0.9 * FEED_PER_S * out.schedule_s, str(out)


def test_the_copy_job_catches_the_at_least_once_copier(tmp_path: Path) -> None:
    """The broken copier (offsets committed outside the transaction) must fail the job
    with the same kills: its copier kills copy records again."""
    cluster = QuorumCluster(tmp_path / "cluster", 3, overrides=OVERRIDES)
    try:
        cluster.start(timeout_s=60)
        out = run_copy_job(
            cluster, tmp_path, rounds=ROUNDS, seconds=SECONDS, seed=SEED, mode="at-least-once"
        )
    finally:
        cluster.stop()
    assert out.copier_kills == 2, str(out)
    assert any("output keys differ from the input" in p for p in out.problems), str(out)
