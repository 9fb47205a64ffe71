"""The web console served by a node's own HTTP listener (``riverbed.http.console.enable``,
issue 21: "riverbed console (and, configured, the node's HTTP listener) serves a web
console"): the pages beside /metrics and /health, an admin client of the node's PLAINTEXT
listener, the console's 4xx pages; off by default."""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient

from riverbed.testing.cluster import BrokerProcess, scaled_s

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def node() -> Iterator[BrokerProcess]:
    proc = BrokerProcess(overrides={"riverbed.http.console.enable": "true", "num.partitions": "1"})
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
