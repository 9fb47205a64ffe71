"""The web console against Tansu (issue 21: "it must also work against Tansu for the views
a plain Kafka API allows"): a `riverbed console` process over a Tansu broker
(`riverbed.testing.tansu`): every page answers, a topic is created, a record produced
and found by the search, a group's lag shown; riverbed-only views (the quorum) say they
are not available instead of failing the page."""

from __future__ import annotations

import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer

from riverbed.testing.cluster import scaled_s
from riverbed.testing.console import console_process
from riverbed.testing.tansu import TansuBroker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
QUIET = {"log_level": 3}
#: Tansu holds a JoinGroup for half the member's session timeout (librdkafka's default
#: 45 s: a 23 s join); 6 s is Kafka's group.min.session.timeout.ms, heartbeats well inside
SHORT_SESSION = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}


@pytest.fixture(scope="module")
def tansu() -> Iterator[TansuBroker]:
    broker = TansuBroker()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def console(tansu: TansuBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log_path = tmp_path_factory.mktemp("console-tansu") / "console.log"
    with console_process(["-b", tansu.bootstrap], log_path) as url:
        yield url


def call(url: str, form: dict[str, str] | None = None) -> tuple[int, str]:
    data = urllib.parse.urlencode(form).encode() if form is not None else None
    try:
        with urllib.request.urlopen(url, data=data, timeout=scaled_s(30)) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_the_console_works_against_tansu(console: str, tansu: TansuBroker) -> None:
    status, page = call(f"{console}/topics", {"name": "on-tansu", "partitions": "2"})
    assert status == 200 and "Created topic on-tansu." in page
    status, page = call(
        f"{console}/topics/on-tansu/messages", {"key": "k1", "value": '{"where": "tansu"}'}
    )
    assert status == 200 and "Produced a record" in page
    status, page = call(f"{console}/topics/on-tansu/messages?run=1&value=tansu&seek=oldest")
    assert status == 200
    summary = re.search(r'id="scan-summary">([^<]*)', page)
    assert summary is not None and summary.group(1).startswith("Scanned 1 records, 1 matched")
    c = Consumer(
        {"bootstrap.servers": tansu.bootstrap, "group.id": "tansu-group",
         "auto.offset.reset": "earliest", "enable.auto.commit": False, **SHORT_SESSION,
         **QUIET}
    )  # fmt: skip
    try:
        c.subscribe(["on-tansu"])
        deadline = time.monotonic() + scaled_s(30)
        msg = None
        while (msg is None or msg.error() is not None) and time.monotonic() < deadline:
            msg = c.poll(0.2)
        assert msg is not None and msg.error() is None
        c.commit(asynchronous=False)
    finally:
        c.close()
    status, page = call(f"{console}/group?id=tansu-group")
    assert status == 200 and 'id="total-lag">0<' in page
    for path in ("/", "/topics", "/topics/on-tansu", "/groups", "/transactions", "/security",
                 "/topics/on-tansu/delete"):  # fmt: skip
        status, page = call(console + path)
        assert status == 200, (path, page[-300:])
    status, page = call(f"{console}/topics/no-such-topic")
    assert status == 404 and "unknown topic" in page
