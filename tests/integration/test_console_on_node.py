"""The web console served by a node's own HTTP listener (``riverbed.http.console.enable``,
issue 21: "riverbed console (and, configured, the node's HTTP listener) serves a web
console"): the pages beside /metrics and /health, an admin client of the node's PLAINTEXT
listener, the console's 4xx pages; off by default."""

from __future__ import annotations

import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from riverbed.testing.cluster import BrokerProcess, scaled_s

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


#: Tiering to a file:// "object store" with small segments and no local retention, so a
#: tiered topic's older records soon live only in the remote tier.
TIERED = {
    "remote.log.storage.system.enable": "true",
    "remote.log.manager.task.interval.ms": "200",
    "log.retention.check.interval.ms": "300",
}
TIERED_TOPIC = {"remote.storage.enable": "true", "segment.bytes": str(16 * 1024),
                "local.retention.bytes": "0", "retention.ms": "-1"}  # fmt: skip


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    remote = tmp_path_factory.mktemp("console-remote")
    overrides = {"riverbed.http.console.enable": "true", "num.partitions": "1", **TIERED,
                 "rsm.config.url": f"file://{remote}"}  # fmt: skip
    proc = BrokerProcess(overrides=overrides)
    proc.start()
    try:
        yield proc
    finally:
        proc.close()


def get(url: str, data: bytes | None = None) -> tuple[int, str, str]:
    """(status, content type, body); redirects followed."""
    try:
        with urllib.request.urlopen(url, data=data, timeout=scaled_s(30)) as resp:
            return resp.status, resp.headers["Content-Type"], resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


def test_the_node_serves_the_console_beside_metrics(node: BrokerProcess) -> None:
    status, ctype, page = get(node.http_url + "/")
    assert status == 200 and ctype.startswith("text/html")
    assert "<h1>Cluster" in page and node.bootstrap in page
    form = urllib.parse.urlencode({"name": "made-on-the-node", "partitions": "2"}).encode()
    status, _, page = get(node.http_url + "/topics", form)
    assert status == 200 and "Created topic made-on-the-node." in page
    md = AdminClient({"bootstrap.servers": node.bootstrap}).list_topics(timeout=scaled_s(30))
    assert len(md.topics["made-on-the-node"].partitions) == 2
    status, ctype, body = get(node.http_url + "/metrics")
    assert status == 200 and ctype.startswith("text/plain")
    assert "kafka_server_replicamanager_partitioncount" in body
    assert get(node.http_url + "/static/vendor/htmx.min.js")[0] == 200
    status, ctype, page = get(node.http_url + "/topics/no-such-topic")
    assert (status, ctype.startswith("text/html")) == (404, True)
    assert "unknown topic" in page


def test_the_console_is_off_unless_configured(tmp_path: object) -> None:
    with BrokerProcess(overrides={"num.partitions": "1"}) as plain:
        status, ctype, _ = get(plain.http_url + "/topics")
        assert status == 404 and ctype.startswith("application/json")
        assert get(plain.http_url + "/metrics")[0] == 200


def test_the_topic_page_shows_remote_and_local_ranges(node: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": node.bootstrap, "log_level": 3})
    for f in admin.create_topics([NewTopic("tiered-on-node", 1, 1, config=TIERED_TOPIC)]).values():
        f.result(timeout=scaled_s(30))
    # batches well below the 16 KiB segments (a larger one is RECORD_LIST_TOO_LARGE)
    p = Producer({"bootstrap.servers": node.bootstrap, "linger.ms": 5, "batch.size": 4096,
                  "log_level": 3})  # fmt: skip
    failed: list[object] = []
    for i in range(1500):
        p.produce(
            "tiered-on-node", value=f"{i:0100d}".encode(),
            on_delivery=lambda err, _msg: failed.append(err) if err else None,
        )  # fmt: skip
    assert p.flush(scaled_s(30)) == 0 and failed == []
    deadline = time.monotonic() + scaled_s(60)
    while True:  # segments roll, are copied, then leave the local log
        _status, _ctype, page = get(node.http_url + "/topics/tiered-on-node")
        found = re.search(r'class="tiers">remote 0\.\.(\d+) · local (\d+)\.\.1499<', page)
        if found:
            break
        assert time.monotonic() < deadline, re.findall(r'class="tiers">[^<]*', page)
        time.sleep(0.5)
    assert int(found.group(1)) + 1 == int(found.group(2)) > 0
    deadline = time.monotonic() + scaled_s(30)
    while True:  # "-" while the page's offset requests have no answer yet (a loaded machine)
        _status, _ctype, page = get(node.http_url + "/topics/made-on-the-node")
        cells = re.findall(r'class="tiers">([^<]*)<', page)
        if cells and "-" not in cells:
            break
        assert time.monotonic() < deadline, cells
        time.sleep(0.5)
    assert cells == ["all local", "all local"]
