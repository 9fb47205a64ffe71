"""`riverbed dev`'s replication defaults cover the internal topics too."""

from __future__ import annotations

from riverbed.cli.dev import dev_overrides


def test_internal_topics_are_replicated_like_the_others() -> None:
    one = dev_overrides(1)
    assert one["offsets.topic.replication.factor"] == "1"
    assert one["transaction.state.log.min.isr"] == "1"
    three = dev_overrides(5)
    assert three["default.replication.factor"] == "3"
    assert three["offsets.topic.replication.factor"] == "3"
    assert three["transaction.state.log.replication.factor"] == "3"
    assert three["transaction.state.log.min.isr"] == three["min.insync.replicas"] == "2"


def test_a_new_groups_first_rebalance_is_not_held_as_in_kafkas_quickstart() -> None:
    assert dev_overrides(3)["group.initial.rebalance.delay.ms"] == "0"
