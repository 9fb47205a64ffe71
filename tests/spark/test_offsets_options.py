"""Pure parts of the data source: option validation, offsets JSON, admission control, splits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from riverbed.spark.offsets import (
    OffsetRange,
    from_json_dict,
    rate_limit,
    split_ranges,
    to_json_dict,
)
from riverbed.spark.options import (
    RiverbedOptionError,
    parse_read_options,
    parse_write_options,
)

BS = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def test_defaults_follow_spark() -> None:
    batch = parse_read_options({**BS, "subscribe": "a, b"}, streaming=False)
    assert batch.subscribe == ("a", "b")
    assert batch.starting.kind == "earliest" and batch.ending.kind == "latest"
    assert batch.fail_on_data_loss is True and batch.include_headers is False
    stream = parse_read_options({**BS, "subscribePattern": "a.*"}, streaming=True)
    assert stream.starting.kind == "latest"
    assert stream.client_config == {"bootstrap.servers": "127.0.0.1:9092"}


def test_options_are_case_insensitive_and_client_settings_pass_through() -> None:
    opts = parse_read_options(
        {
            **BS,
            "ASSIGN": '{"t": [1, 0]}',
            "kafka.fetch.max.bytes": "1000",
            "FailOnDataLoss": "false",
        },
        streaming=False,
    )
    assert opts.assign == (("t", 0), ("t", 1))
    assert opts.client_config["fetch.max.bytes"] == "1000"
    assert opts.fail_on_data_loss is False


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({"subscribe": "t"}, False, "kafka.bootstrap.servers"),
        (BS, False, "'subscribe', 'subscribePattern', 'assign'"),
        ({**BS, "subscribe": "t", "assign": '{"t":[0]}'}, False, "only one"),
        ({**BS, "subscribe": "t", "bogus": "1", "other": "2"}, False, "'bogus', 'other'"),
        ({**BS, "subscribe": "t", "startingOffsets": "latest"}, False, "not valid for batch"),
        ({**BS, "subscribe": "t", "endingOffsets": "latest"}, True, "'endingoffsets'"),
        ({**BS, "subscribe": "t", "maxOffsetsPerTrigger": "0"}, True, "maxOffsetsPerTrigger"),
        ({**BS, "subscribe": "t", "maxOffsetsPerTrigger": "5"}, False, "only valid in streaming"),
        (
            {**BS, "subscribe": "t", "startingOffsets": "earliest", "startingTimestamp": "5"},
            False,
            "conflicting options: 'startingOffsets', 'startingTimestamp'",
        ),
        ({**BS, "subscribe": "t", "startingOffsets": '{"t": {"x": 1}}'}, False, "partition 'x'"),
        ({**BS, "subscribe": "t", "startingOffsets": "{oops"}, False, "not valid JSON"),
        ({**BS, "subscribe": "t", "startingOffsets": '{"t": {"0": -1}}'}, False, "-1 (latest)"),
        ({**BS, "subscribe": "t", "failOnDataLoss": "maybe"}, False, "failOnDataLoss"),
        ({**BS, "subscribe": "t", "kafka.auto.offset.reset": "earliest"}, False, "startingOffsets"),
        ({**BS, "subscribe": "t", "minOffsetsPerTrigger": "5"}, True, "minOffsetsPerTrigger"),
        ({**BS, "subscribePattern": "("}, True, "not a regex"),
        ({**BS, "assign": '{"t": ["0"]}'}, True, "list of partition numbers"),
    ],
)
def test_bad_read_options_name_the_problem(
    options: dict[str, str], streaming: bool, message: str
) -> None:
    with pytest.raises(RiverbedOptionError) as info:
        parse_read_options(options, streaming=streaming)
    assert message.lower() in str(info.value).lower()


def test_write_options() -> None:
    assert parse_write_options({**BS, "topic": "out"}).topic == "out"
    with pytest.raises(RiverbedOptionError, match="'subscribe'"):
        parse_write_options({**BS, "subscribe": "x"})
    with pytest.raises(RiverbedOptionError, match=r"kafka\.bootstrap\.servers"):
        parse_write_options({"topic": "x"})
    # exactly-once: the default of streaming writes, not of batch writes (issue 22)
    plain = parse_write_options({**BS, "topic": "out"})
    assert plain.with_default_exactly_once(True).exactly_once is True
    assert plain.with_default_exactly_once(False).exactly_once is False
    forced = parse_write_options({**BS, "topic": "out", "exactlyOnce": "false"})
    assert forced.with_default_exactly_once(True).exactly_once is False
    assert plain.with_default_exactly_once(True).prefix() == "riverbed-spark-out"
    assert plain.with_default_exactly_once(False).prefix() == "riverbed-spark-batch-out"
    custom = parse_write_options(
        {**BS, "topic": "o", "transactional.id.prefix": "q1", "transaction.timeout.ms": "5000"}
    )
    assert (custom.prefix(), custom.transaction_timeout_ms) == ("q1", 5000)
    with pytest.raises(RiverbedOptionError, match="exactlyOnce"):
        parse_write_options({**BS, "topic": "o", "exactlyOnce": "maybe"})
    with pytest.raises(RiverbedOptionError, match=r"transactional\.id\.prefix"):
        parse_write_options(BS).prefix()  # rows name their topics: no default prefix


def test_offsets_json_is_spark_format_and_canonical() -> None:
    offsets = {("b", 10): 5, ("b", 2): 7, ("a", 0): 42}
    data = to_json_dict(offsets)
    assert json.dumps(data) == '{"a": {"0": 42}, "b": {"2": 7, "10": 5}}'
    assert from_json_dict(json.loads(json.dumps(data))) == offsets
    with pytest.raises(RiverbedOptionError):
        from_json_dict({"a": {"0": "x"}})


def test_rate_limit_splits_in_proportion_to_backlog() -> None:
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 10}
    latest = {("t", 0): 300, ("t", 1): 200, ("t", 2): 10}
    # Backlogs 300 and 100 -> 3:1 of 40; the idle partition keeps its end.
    assert rate_limit(40, start, latest) == {("t", 0): 30, ("t", 1): 110, ("t", 2): 10}
    # A share below one record is rounded up so no partition starves.
    assert rate_limit(2, {("t", 0): 0, ("t", 1): 0}, {("t", 0): 1000, ("t", 1): 1}) == {
        ("t", 0): 1,
        ("t", 1): 1,
    }


@given(
    st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 1000)), min_size=1, max_size=6),
    st.integers(1, 500),
)
def test_rate_limit_never_passes_latest_and_admits_about_the_limit(
    pairs: list[tuple[int, int]], limit: int
) -> None:
    start = {("t", i): a for i, (a, _) in enumerate(pairs)}
    latest = {("t", i): a + b for i, (a, b) in enumerate(pairs)}
    end = rate_limit(limit, start, latest)
    assert all(start[tp] <= end[tp] <= latest[tp] for tp in latest)
    admitted = sum(end[tp] - start[tp] for tp in latest)
    backlog = sum(latest[tp] - start[tp] for tp in latest)
    assert admitted <= limit + len(pairs)
    assert admitted >= min(backlog, limit) - len(pairs)


def test_split_ranges_like_sparks_range_calculator() -> None:
    r = [OffsetRange("t", 0, 0, 100), OffsetRange("t", 1, 0, 10), OffsetRange("t", 2, 5, 5)]
    # No options: one Spark partition per non-empty Kafka partition.
    assert split_ranges(r, None, None) == r[:2]
    # maxRecordsPerPartition=30: ceil(100/30)=4 pieces + 1.
    pieces = split_ranges(r, None, 30)
    assert [(p.partition, p.from_offset, p.until_offset) for p in pieces] == [
        (0, 0, 25),
        (0, 25, 50),
        (0, 50, 75),
        (0, 75, 100),
        (1, 0, 10),
    ]
    # minPartitions=5: the small range stays whole, the large one takes the other 4.
    parts = split_ranges(r, 5, None)
    assert len(parts) == 5
    assert sum(p.size for p in parts if p.partition == 0) == 100
    assert [p.size for p in parts if p.partition == 1] == [10]


@given(
    st.lists(st.integers(0, 10_000), min_size=1, max_size=5),
    st.none() | st.integers(1, 20),
    st.none() | st.integers(1, 3000),
)
def test_split_ranges_covers_every_offset_once(
    sizes: list[int], min_parts: int | None, max_records: int | None
) -> None:
    ranges = [OffsetRange("t", i, 7, 7 + s) for i, s in enumerate(sizes)]
    out = split_ranges(ranges, min_parts, max_records)
    for i, s in enumerate(sizes):
        mine = sorted((p.from_offset, p.until_offset) for p in out if p.partition == i)
        covered = [o for a, b in mine for o in range(a, b)]
        assert covered == list(range(7, 7 + s))
    if max_records is not None:
        assert all(p.size <= max_records for p in out)


def test_client_settings_librdkafka_rejects_are_option_errors() -> None:
    from riverbed.spark.client import OffsetClient
    from riverbed.spark.sink import check_producer_config

    with pytest.raises(RiverbedOptionError, match=r"no\.such\.setting"):
        OffsetClient(
            parse_read_options(
                {**BS, "subscribe": "t", "kafka.no.such.setting": "1"}, streaming=False
            )
        )
    with pytest.raises(RiverbedOptionError, match="Invalid value for configuration property"):
        check_producer_config(parse_write_options({**BS, "topic": "t", "kafka.linger.ms": "soon"}))


def test_sink_column_conversions() -> None:
    import datetime as dt

    import pyarrow as pa

    from riverbed.spark.sink import _as_bytes, _headers, _timestamps_ms

    assert _as_bytes(pa.array(["a", None, "é"]), 3) == [b"a", None, "é".encode()]
    assert _as_bytes(None, 2) == [None, None]
    when = dt.datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=dt.UTC)
    stamps = pa.array([when, None], type=pa.timestamp("us", tz="UTC"))
    assert _timestamps_ms(stamps, 2) == [int(when.timestamp() * 1000), 0]  # 0 = now
    assert _timestamps_ms(pa.array([1_700_000_000_123, None], type=pa.int64()), 2) == [
        1_700_000_000_123,
        0,
    ]
    headers_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    headers = pa.array(
        [[{"key": "a", "value": b"1"}, {"key": "b", "value": None}], [], None], type=headers_type
    )
    assert _headers(headers, 3) == [[("a", b"1"), ("b", None)], None, None]


def test_reader_option_and_the_kafka_settings_it_maps() -> None:
    from riverbed.spark.options import FetchSettings, fetch_settings

    opts = parse_read_options({**BS, "subscribe": "t"}, streaming=False)
    assert opts.reader == "fetch"
    assert fetch_settings(opts.client_config) == FetchSettings("127.0.0.1:9092")
    assert fetch_settings(opts.client_config).read_committed is True  # librdkafka's default
    mapped = fetch_settings(
        {
            "bootstrap.servers": "h:1",
            "client.id": "etl",
            "fetch.max.bytes": "4000",
            "max.partition.fetch.bytes": "2000",
            "fetch.wait.max.ms": "50",
            "fetch.min.bytes": "10",
            "socket.timeout.ms": "9000",
            "isolation.level": "read_uncommitted",
            "queued.max.messages.kbytes": "100",  # librdkafka's: the driver's look-ups only
        }
    )
    assert mapped == FetchSettings("h:1", "etl", 4000, 2000, 50, 10, 9000, False)
    consumer = parse_read_options({**BS, "subscribe": "t", "reader": "Consumer"}, streaming=False)
    assert consumer.reader == "consumer"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"reader": "kafka"}, "'reader' must be fetch or consumer"),
        # Kafka's default mechanism, GSSAPI, is not one riverbed's client logs in with
        ({"kafka.security.protocol": "SASL_SSL"}, "sasl.mechanism=GSSAPI"),
        (
            {"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "PLAIN"},
            "SASL needs a login: sasl.jaas.config",
        ),
        (
            {"kafka.security.protocol": "SSL", "kafka.ssl.truststore.location": "/no/such.pem"},
            "JKS trust stores are not supported: use PEM or PKCS12",  # Kafka's default type
        ),
        (
            {
                "kafka.security.protocol": "SSL",
                "kafka.ssl.truststore.type": "PEM",
                "kafka.ssl.truststore.location": "/no/such.pem",
            },
            "ssl.truststore.location: cannot read /no/such.pem",
        ),
        ({"kafka.security.protocol": "TLS"}, "security.protocol=TLS is not a Kafka protocol"),
        ({"kafka.isolation.level": "dirty"}, "read_committed or read_uncommitted"),
        ({"kafka.fetch.max.bytes": "-1"}, "'kafka.fetch.max.bytes' must be positive"),
    ],
)
def test_reader_settings_fail_fast(settings: dict[str, str], message: str) -> None:
    with pytest.raises(RiverbedOptionError, match=message):
        parse_read_options({**BS, "subscribe": "t", **settings}, streaming=False)


def test_reader_security_settings_are_kafkas_spark_connector_options(tmp_path: Path) -> None:
    """The ``kafka.*`` security options of Kafka's Spark connector (Java names) reach
    riverbed's wire client (TLS context, SASL login) and, in librdkafka's names, the
    confluent-kafka clients."""
    from riverbed.spark.options import fetch_settings, librdkafka_settings
    from riverbed.testing.certs import make_pki

    pki = make_pki(tmp_path)
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="alice" password="alice-pw";'
    )
    opts = parse_read_options(
        {
            **BS,
            "subscribe": "t",
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.jaas.config": jaas,
            "kafka.ssl.truststore.type": "PEM",
            "kafka.ssl.truststore.location": str(pki.ca),
        },
        streaming=False,
    )
    security = fetch_settings(opts.client_config).security
    assert (security.protocol, security.mechanism) == ("SASL_SSL", "SCRAM-SHA-512")
    assert (security.username, security.password) == ("alice", "alice-pw")
    assert security.ssl_context is not None
    assert security.ssl_context.check_hostname  # Kafka's default: https identification
    rdkafka = librdkafka_settings(opts.client_config)
    assert rdkafka["sasl.username"] == "alice" and rdkafka["sasl.password"] == "alice-pw"
    assert rdkafka["ssl.ca.pem"].startswith("-----BEGIN CERTIFICATE-----")
    assert "sasl.jaas.config" not in rdkafka and "ssl.truststore.location" not in rdkafka
