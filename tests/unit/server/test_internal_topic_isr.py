"""A configuration whose internal topics cannot take a write is named at start
(`riverbed.server.config.internal_topic_isr_problems`): a replication factor below the
in-sync replicas the topic's writes need refuses every group or transactional write."""

from __future__ import annotations

import logging

import pytest

from riverbed.server import config as config_module
from riverbed.server.config import EMBEDDED_DEFAULTS, ServerConfig, internal_topic_isr_problems


def values(**overrides: int) -> dict[str, object]:
    """The four parsed values `internal_topic_isr_problems` reads: 1 each unless given
    (keys with "_" for ".")."""
    parsed: dict[str, object] = dict.fromkeys(
        (
            "offsets.topic.replication.factor",
            "min.insync.replicas",
            "transaction.state.log.replication.factor",
            "transaction.state.log.min.isr",
        ),
        1,
    )
    parsed.update({k.replace("_", "."): v for k, v in overrides.items()})
    return parsed


def test_offsets_below_min_insync_replicas_is_named() -> None:
    (problem,) = internal_topic_isr_problems(
        values(offsets_topic_replication_factor=1, min_insync_replicas=2)
    )
    assert "offsets.topic.replication.factor=1 is below min.insync.replicas=2" in problem
    assert "consumer group" in problem and "COORDINATOR_NOT_AVAILABLE" in problem


def test_transaction_state_below_its_min_isr_is_named() -> None:
    (problem,) = internal_topic_isr_problems(
        values(transaction_state_log_replication_factor=1, transaction_state_log_min_isr=2)
    )
    assert "transaction.state.log.replication.factor=1 is below" in problem
    assert "transaction.state.log.min.isr=2" in problem and "transactional producer" in problem


def test_a_replication_factor_at_least_the_isr_is_fine() -> None:
    assert internal_topic_isr_problems(values()) == []
    assert (
        internal_topic_isr_problems(
            values(
                offsets_topic_replication_factor=3,
                min_insync_replicas=3,
                transaction_state_log_replication_factor=3,
                transaction_state_log_min_isr=2,
            )
        )
        == []
    )


def test_a_node_with_such_a_config_starts_and_warns_once(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(config_module, "_WARNED", set())
    props = {**EMBEDDED_DEFAULTS, "min.insync.replicas": "2"}
    with caplog.at_level(logging.WARNING, logger="riverbed.server.config"):
        ServerConfig(props)
        ServerConfig(props)  # built again (a dynamic change): not news
    warned = [r.getMessage() for r in caplog.records if "min.insync.replicas=2" in r.getMessage()]
    assert len(warned) == 1 and "offsets.topic.replication.factor=1" in warned[0]
