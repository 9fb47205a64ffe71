"""Issue 20/22: the riverbed source and sink against a SASL_SSL listener, configured with
the ``kafka.*`` options of Kafka's Spark connector (Java names: ``kafka.security.protocol``,
``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config``, ``kafka.ssl.truststore.*``).

One broker with a listener per protocol (`riverbed.testing.secure.start_secure_broker`),
users with PLAIN and SCRAM-SHA-512 logins, two-phase commit on for the exactly-once sink.
A wrong password is a clear error naming the failed authentication, on the driver (Spark)
and in the executors' clients (the columnar reader, the sink's transactional client),
never a retry until a time-out.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from riverbed.testing.secure import SecureBroker, running_secure_broker

# Every test starts its own secured riverbed broker: they run whatever
# RIVERBED_SPARK_BROKER names for the other Spark tests (Tansu has no SASL_SSL listener).
pytestmark = [pytest.mark.spark]

USERS = {"admin": "admin-secret", "alice": "alice-pw"}
SCRAM_USERS = {"bob": ("SCRAM-SHA-512", "bob-pw")}
_PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
_SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    with running_secure_broker(
        tmp_path_factory.mktemp("pki"),
        USERS,
        SCRAM_USERS,
        {"transaction.two.phase.commit.enable": "true"},
    ) as broker:
        yield broker


def kafka_options(
    secure: SecureBroker, user: str, password: str, mechanism: str = "SCRAM-SHA-512"
) -> dict[str, str]:
    """Spark's Kafka options for the SASL_SSL listener, as a Kafka user writes them."""
    module = _PLAIN if mechanism == "PLAIN" else _SCRAM
    return {
        "kafka.bootstrap.servers": secure.bootstrap("SASL_SSL"),
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": mechanism,
        "kafka.sasl.jaas.config": f'{module} required username="{user}" password="{password}";',
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": str(secure.pki.ca),
    }


def _topic(secure: SecureBroker, partitions: int = 2) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"sec-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": secure.bootstrap("PLAINTEXT")})
    for fut in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        fut.result(30)
    return name


def _write(spark: Any, rows: list[tuple[str, str]], options: dict[str, str]) -> None:
    df = spark.createDataFrame(rows, "key string, value string")
    writer = df.write.format("riverbed").mode("append")
    for k, v in options.items():
        writer = writer.option(k, v)
    writer.save()


def _read(spark: Any, options: dict[str, str], **more: str) -> list[tuple[str, str]]:
    reader = spark.read.format("riverbed")
    for k, v in {**options, **more}.items():
        reader = reader.option(k, v)
    rows = reader.load().selectExpr("CAST(key AS STRING) k", "CAST(value AS STRING) v").collect()
    return sorted((r.k, r.v) for r in rows)


def test_source_and_both_sinks_over_sasl_ssl(spark: Any, secure: SecureBroker) -> None:
    """The at-least-once sink (librdkafka), the exactly-once sink and the columnar reader
    (riverbed's wire client) over SASL_SSL, SCRAM-SHA-512 and PLAIN logins."""
    topic = _topic(secure)
    scram = kafka_options(secure, "bob", "bob-pw")
    plain = kafka_options(secure, "alice", "alice-pw", "PLAIN")
    _write(spark, [(f"a{i}", f"at-least-once {i}") for i in range(5)], {**plain, "topic": topic})
    eos = {**scram, "topic": topic, "exactlyOnce": "true"}
    _write(spark, [(f"e{i}", f"exactly-once {i}") for i in range(5)], eos)
    expected = sorted(
        [(f"a{i}", f"at-least-once {i}") for i in range(5)]
        + [(f"e{i}", f"exactly-once {i}") for i in range(5)]
    )
    assert _read(spark, scram, subscribe=topic) == expected
    assert _read(spark, plain, subscribe=topic, reader="consumer") == expected


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_wrong_password_is_a_clear_error(spark: Any, secure: SecureBroker, mechanism: str) -> None:
    topic = _topic(secure, 1)
    user = "alice" if mechanism == "PLAIN" else "bob"
    wrong = kafka_options(secure, user, "not-the-password", mechanism)
    expected = f"authentication with {secure.bootstrap('SASL_SSL')} failed"
    with pytest.raises(Exception, match=expected) as read:
        _read(spark, wrong, subscribe=topic)
    assert "kafka.sasl.mechanism=" + mechanism in str(read.value)
    for exactly_once in ("true", "false"):
        with pytest.raises(Exception, match=expected):
            _write(spark, [("k", "v")], {**wrong, "topic": topic, "exactlyOnce": exactly_once})


def test_executor_clients_fail_at_once_on_a_refused_login(secure: SecureBroker) -> None:
    """The executors' clients (the reader's fetches, a sink task's transaction) give up on
    a refused login with an error naming it, instead of retrying it as a lost connection
    until kafkaConsumer.pollTimeoutMs / the transaction's deadline."""
    from riverbed.spark.exactly_once import write_task
    from riverbed.spark.fetch_reader import read_range
    from riverbed.spark.offsets import OffsetRange
    from riverbed.spark.options import parse_write_options
    from riverbed.spark.txn_client import TxnSinkError

    topic = _topic(secure, 1)
    wrong = kafka_options(secure, "bob", "not-the-password")
    client = {k.removeprefix("kafka."): v for k, v in wrong.items()}
    with pytest.raises(Exception, match=rf"reading {topic}-0: authentication with .* failed"):
        list(
            read_range(
                client,
                OffsetRange(topic, 0, 0, 1),
                include_headers=False,
                fail_on_data_loss=True,
                poll_timeout_ms=60_000,
            )
        )
    options = parse_write_options({**wrong, "topic": topic}).with_default_exactly_once(True)
    with pytest.raises(TxnSinkError, match=r"authentication with .* failed"):
        write_task(options, iter([]), 0)


def test_untrusted_broker_certificate_is_refused(
    spark: Any, secure: SecureBroker, tmp_path: Path
) -> None:
    """A trust store without the broker's CA: the TLS handshake fails, named as such."""
    from riverbed.testing.certs import make_pki

    other_ca = make_pki(tmp_path).ca
    options = {
        **kafka_options(secure, "bob", "bob-pw"),
        "kafka.ssl.truststore.location": str(other_ca),
    }
    with pytest.raises(Exception, match=r"TLS handshake with .* failed"):
        _read(spark, options, subscribe=_topic(secure, 1))


def test_a_stream_reads_and_writes_exactly_once_over_sasl_ssl(
    spark: Any, secure: SecureBroker, tmp_path: Path
) -> None:
    """Structured Streaming, not only batch: a query reading one topic and writing another
    through the exactly-once sink, both over SASL_SSL with SCRAM-SHA-512, in micro-batches
    (``maxOffsetsPerTrigger``), then run again from its checkpoint after more records: the
    output holds every input record exactly once."""
    source, sink = _topic(secure), _topic(secure)
    scram = kafka_options(secure, "bob", "bob-pw")
    checkpoint = str(tmp_path / "checkpoint")

    def run_until_caught_up() -> None:
        reader = spark.readStream.format("riverbed")
        for k, v in {**scram, "subscribe": source, "startingOffsets": "earliest"}.items():
            reader = reader.option(k, v)
        writer = (
            reader.option("maxOffsetsPerTrigger", "4")
            .load()
            .selectExpr("key", "value")
            .writeStream.format("riverbed")
        )
        for k, v in {**scram, "topic": sink, "exactlyOnce": "true"}.items():
            writer = writer.option(k, v)
        query = (
            writer.option("transactional.id.prefix", f"sec-stream-{sink}")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        try:
            assert query.awaitTermination(180), "the availableNow query did not finish in 180 s"
        finally:
            query.stop()
        assert query.exception() is None, str(query.exception())

    # the sink's open transactions must not show: only committed records count
    committed = {"kafka.isolation.level": "read_committed"}
    first = [(f"k{i}", f"first {i}") for i in range(10)]
    _write(spark, first, {**scram, "topic": source})
    run_until_caught_up()
    assert _read(spark, scram, subscribe=sink, **committed) == sorted(first)
    more = [(f"m{i}", f"second {i}") for i in range(6)]
    _write(spark, more, {**scram, "topic": source})
    run_until_caught_up()
    got = _read(spark, scram, subscribe=sink, **committed)
    assert got == sorted(first + more)
