"""When a node runs its metadata on the Raft quorum, and which Raft settings it uses."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from riverbed.server.config import ConfigError, ServerConfig
from riverbed.server.quorum import raft_config


def load(**overrides: str) -> ServerConfig:
    base = {
        "node.id": "1",
        "process.roles": "broker,controller",
        "listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        "controller.listener.names": "CONTROLLER",
        "log.dirs": "/tmp/riverbed-unit-unused",
    }
    base.update({k.replace("_", "."): v for k, v in overrides.items()})
    return ServerConfig.load(None, [f"{k}={v}" for k, v in base.items()])


def test_a_node_without_voters_is_its_own_one_voter() -> None:
    # one metadata path: the embedded default runs the Raft quorum with one voter
    assert raft_config(load(), "abcdefghijklmnopqrstuv").voters == frozenset({1})
    assert raft_config(load(node_id="7"), "c").voters == frozenset({7})


def test_configured_voters_are_the_quorum() -> None:
    voters = "1@127.0.0.1:9093,2@127.0.0.1:9095,3@127.0.0.1:9097"
    assert raft_config(load(controller_quorum_voters=voters), "c").voters == {1, 2, 3}


def test_raft_settings_come_from_kafka_names_and_the_cluster_id() -> None:
    cfg = load(
        controller_quorum_voters="1@127.0.0.1:9093,2@127.0.0.1:9095",
        **{
            "controller_quorum_election_timeout_ms": "700",
            "controller_snapshot_minimum_records": "123",
        },
    )
    raft = raft_config(cfg, "abcdefghijklmnopqrstuv")
    assert raft.voters == frozenset({1, 2})
    assert raft.election_timeout_ms == 700
    assert raft.snapshot_minimum_records == 123
    assert raft.cluster_id == "abcdefghijklmnopqrstuv"


def test_a_bad_raft_setting_is_an_error_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"controller\.snapshot\.minimum\.records"):
        load(
            controller_quorum_voters="1@127.0.0.1:9093,2@127.0.0.1:9095",
            controller_snapshot_minimum_records="0",
        )


def test_bootstrap_servers_without_voters_is_refused_at_start(tmp_path: Path) -> None:
    from riverbed.server.node import Node, NodeConfigError

    cfg = ServerConfig.load(
        None,
        [
            "node.id=1",
            "process.roles=broker,controller",
            "listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
            "controller.listener.names=CONTROLLER",
            "controller.quorum.bootstrap.servers=127.0.0.1:9093",
            f"log.dirs={tmp_path}",
            "riverbed.http.listeners=",  # no fixed port: another node may hold 9644
        ],
    )

    async def start() -> None:
        node = Node(cfg)
        try:
            await node.start()
        finally:
            await node.stop()

    with pytest.raises(NodeConfigError, match=r"controller\.quorum\.voters"):
        asyncio.run(start())
