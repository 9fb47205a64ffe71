"""Bad input gives a typed error, never a crash: configs, properties text, log files."""

import asyncio
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.messages import TopicRecord
from riverbed.server.config import CONFIG_DEFS, ConfigError, ServerConfig, parse_properties
from riverbed.server.metadata_log import LocalMetadataLog, MetadataLogError, metadata_partition_dir

KEYS = st.sampled_from(sorted(CONFIG_DEFS))
VALUES = st.one_of(
    st.text(max_size=30),
    st.integers(-(2**70), 2**70).map(str),
    st.sampled_from(["true", "false", "", "PLAINTEXT://h:1", "broker", "CreateTime", "-1"]),
)


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=400))
def test_properties_text_never_crashes(text):
    props = parse_properties(text)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in props.items())


@settings(max_examples=200, deadline=None)
@given(overrides=st.dictionaries(KEYS, VALUES, max_size=6))
def test_any_values_give_config_or_config_error(overrides):
    base = ServerConfig.embedded_default()
    try:
        cfg = base.with_overrides(overrides)
    except ConfigError as exc:
        assert exc.key  # names what is wrong
        return
    assert cfg.node_id >= 0 and cfg.listeners


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(garbage=st.binary(max_size=300), keep=st.integers(0, 200))
def test_garbage_metadata_log_is_recovered_or_refused(tmp_path_factory, garbage, keep):
    path = tmp_path_factory.mktemp("log")
    log = LocalMetadataLog(path)
    asyncio.run(log.append([TopicRecord(name="a", topic_id=uuid.UUID(int=7))]))
    log.close()
    seg = metadata_partition_dir(path) / "00000000000000000000.log"
    data = seg.read_bytes()
    seg.write_bytes(data[: min(keep, len(data))] + garbage)
    try:
        reopened = LocalMetadataLog(path)
        records = list(reopened.read_committed())
        reopened.close()
    except (MetadataLogError, ProtocolError):
        return
    assert len(records) <= 1


def test_config_error_is_a_value_error():
    with pytest.raises(ValueError):
        ServerConfig.load(overrides=["num.partitions=-4"])
