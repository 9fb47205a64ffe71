import pytest

from riverbed.metadata.config_defs import ConfigSource
from riverbed.server.config import (
    CONFIG_DEFS,
    ConfigError,
    ServerConfig,
    parse_override,
    parse_properties,
)


def test_embedded_default_is_one_combined_node():
    c = ServerConfig.load()
    assert c.process_roles == {"broker", "controller"}
    assert c.node_id == 1
    assert [str(x) for x in c.listeners] == ["PLAINTEXT://localhost:9092"]
    assert c.advertised_listeners == c.listeners
    assert c.log_dirs == ("./riverbed-data",)
    assert c.metadata_log_dir == "./riverbed-data"
    assert c.auto_format is True
    assert c.offsets_topic_replication_factor == 1


def test_kafka_defaults():
    c = ServerConfig.load()
    assert c.num_partitions == 1
    assert c.default_replication_factor == 1
    assert c.auto_create_topics_enable is True
    assert c.message_max_bytes == 1048588
    assert c.log_segment_bytes == 1073741824
    assert c.log_roll_ms == 168 * 3_600_000
    assert c.log_retention_ms == 168 * 3_600_000
    assert c.log_retention_bytes == -1
    assert c.log_message_timestamp_type == "CreateTime"
    assert c.socket_request_max_bytes == 104857600
    assert c.connections_max_idle_ms == 600000
    assert c.queued_max_requests == 500
    assert c.group_initial_rebalance_delay_ms == 3000
    assert c.log_flush_interval_ms is None
    assert c.get("num.io.threads") == 8


def test_retention_precedence_ms_over_minutes_over_hours():
    base = ServerConfig.load()
    assert base.with_overrides({"log.retention.hours": "1"}).log_retention_ms == 3_600_000
    c = base.with_overrides({"log.retention.hours": "1", "log.retention.minutes": "2"})
    assert c.log_retention_ms == 120_000
    c = base.with_overrides({"log.retention.minutes": "2", "log.retention.ms": "5"})
    assert c.log_retention_ms == 5
    assert base.with_overrides({"log.retention.ms": "-5"}).log_retention_ms == -1
    assert base.with_overrides({"log.roll.ms": "77"}).log_roll_ms == 77


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("num.partitions", "0"),
        ("num.partitions", "many"),
        ("node.id", "-1"),
        ("process.roles", "broker,sidecar"),
        ("process.roles", ""),
        ("listeners", "PLAINTEXT//localhost:9092"),
        ("listeners", "PLAINTEXT://localhost:99999"),
        # SSL listeners are served since issue 20; an unknown protocol is still refused
        ("listener.security.protocol.map", "SSL:TLS"),
        ("ssl.client.auth", "sometimes"),
        ("sasl.server.max.receive.size", "0"),
        ("listeners", "FOO://localhost:9092"),
        ("auto.create.topics.enable", "yes"),
        ("log.message.timestamp.type", "WallClock"),
        ("message.max.bytes", "99999999999"),
        ("log.segment.bytes", "10"),
        ("advertised.listeners", "PLAINTEXT://0.0.0.0:9092"),
        ("inter.broker.listener.name", "CONTROLLER"),
        ("security.inter.broker.protocol", "SASL_SSL"),
        ("connection.failed.authentication.delay.ms", "600000"),
    ],
)
def test_bad_value_names_the_key(key, value):
    with pytest.raises(ConfigError) as info:
        ServerConfig.load(overrides=[f"{key}={value}"])
    assert info.value.key == key
    assert key in str(info.value)


def test_duplicate_listener_port_rejected():
    with pytest.raises(ConfigError, match="listeners"):
        ServerConfig.load(
            overrides=[
                "listeners=PLAINTEXT://localhost:9092,INTERNAL://localhost:9092",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
            ]
        )


def test_controller_listener_defaults_to_plaintext_and_is_not_advertised():
    c = ServerConfig.load(overrides=["listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0"])
    assert [x.name for x in c.listeners] == ["PLAINTEXT", "CONTROLLER"]
    assert [x.name for x in c.advertised_listeners] == ["PLAINTEXT"]
    assert c.listener("CONTROLLER").security_protocol == "PLAINTEXT"
    assert c.inter_broker_listener_name == "PLAINTEXT"


def test_a_controller_listener_in_advertised_listeners_is_no_broker_endpoint():
    c = ServerConfig.load(
        overrides=[
            "listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
            "advertised.listeners=PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093",
        ]
    )
    assert [x.name for x in c.advertised_listeners] == ["PLAINTEXT"]


def test_unknown_keys_are_kept_not_fatal():
    c = ServerConfig.load(overrides=["some.plugin.key=1"])
    assert c.unknown_keys == ("some.plugin.key",)
    assert c.originals["some.plugin.key"] == "1"


def test_override_syntax():
    assert parse_override("a.b=c=d") == ("a.b", "c=d")
    with pytest.raises(ConfigError, match="key=value"):
        parse_override("novalue")


def test_parse_properties_java_format():
    text = (
        "# comment\n"
        "! another\n"
        "node.id=3\n"
        "listeners : PLAINTEXT://h:1\n"
        "log.dirs /a,\\\n"
        "    /b\n"
        "key\\ with\\ space=v\\tx\n"
        "empty=\n"
    )
    props = parse_properties(text)
    assert props == {
        "node.id": "3",
        "listeners": "PLAINTEXT://h:1",
        "log.dirs": "/a,/b",
        "key with space": "v\tx",
        "empty": "",
    }


def test_load_file_and_overrides(tmp_path):
    f = tmp_path / "server.properties"
    f.write_text(
        "process.roles=broker,controller\nnode.id=7\nlisteners=PLAINTEXT://127.0.0.1:0\n"
        f"log.dirs={tmp_path}/a,{tmp_path}/b\nnum.partitions=3\n"
    )
    c = ServerConfig.load(f, ["num.partitions=4"])
    assert c.node_id == 7
    assert c.num_partitions == 4
    assert c.log_dirs == (f"{tmp_path}/a", f"{tmp_path}/b")
    assert c.metadata_log_dir == f"{tmp_path}/a"
    assert c.auto_format is False


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        ServerConfig.load(tmp_path / "nope.properties")


def test_describe_sources_and_synonyms():
    c = ServerConfig.load(overrides=["log.retention.hours=5"])
    rows = {e.name: e for e in c.describe()}
    assert set(rows) == set(CONFIG_DEFS)
    assert rows["log.retention.hours"].source == ConfigSource.STATIC_BROKER_CONFIG
    assert rows["log.retention.hours"].value == "5"
    assert rows["num.io.threads"].source == ConfigSource.DEFAULT_CONFIG
    syn = rows["log.retention.ms"].synonyms
    assert syn[0].name == "log.retention.hours"
    assert syn[0].source == ConfigSource.STATIC_BROKER_CONFIG


def test_controller_config_carries_static_broker_config():
    c = ServerConfig.load(overrides=["num.partitions=6", "log.retention.ms=1000"])
    cc = c.controller_config()
    assert cc.num_partitions == 6
    assert cc.static_broker_config["log.retention.ms"] == "1000"
    assert cc.node_id == 1


def test_quorum_voters():
    c = ServerConfig.load(
        overrides=[
            "controller.quorum.voters=1@127.0.0.1:9093,2@[::1]:9094",
            # the other voter connects to this node's controller listener
            "listeners=PLAINTEXT://localhost:9092,CONTROLLER://127.0.0.1:9093",
        ]
    )
    assert c.quorum_voters == {1: ("127.0.0.1", 9093), 2: ("::1", 9094)}
    assert ServerConfig.load().quorum_voters == {}
    for bad in ["1@host", "x@h:1", "1@h:1,1@h:2", "2@h:9093"]:
        with pytest.raises(ConfigError) as info:
            ServerConfig.load(overrides=[f"controller.quorum.voters={bad}"])
        assert info.value.key == "controller.quorum.voters"


def test_broker_only_node_needs_the_controller_quorum():
    with pytest.raises(ConfigError, match="must name the controller quorum") as info:
        ServerConfig.load(overrides=["process.roles=broker"])
    assert info.value.key == "controller.quorum.voters"
    c = ServerConfig.load(
        overrides=["process.roles=broker", "node.id=2", "controller.quorum.voters=1@h:9093"]
    )
    assert c.process_roles == {"broker"} and c.quorum_voters == {1: ("h", 9093)}


def test_shipped_server_properties_load():
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "config" / "server.properties"
    c = ServerConfig.load(path)
    assert c.process_roles == {"broker", "controller"}
    assert [x.name for x in c.advertised_listeners] == ["PLAINTEXT"]
    assert c.quorum_voters == {1: ("localhost", 9093)}
    assert c.unknown_keys == ()
    assert c.auto_format and c.group_initial_rebalance_delay_ms == 0
