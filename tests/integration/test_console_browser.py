"""The web console in a real browser (issue 21): headless Chromium from Debian's packages
(``make sysdeps``), driven by Selenium through the system chromedriver, against a 3-node
riverbed cluster and a `riverbed console` process.

Every page loads without a JavaScript console error (CSP violations included); a topic
is created, a record produced and found by the message search; the live tail shows a
new record within a second of its acknowledgement; a group's lag chart draws and
updates; an offset reset shows its dry run and commits exactly that plan once the
group's id is typed. Screenshots of each page go to ``$RIVERBED_CONSOLE_SCREENSHOTS``
(the README's are ``docs/console/*.png``, taken with
``RIVERBED_CONSOLE_SCREENSHOTS=docs/console``) or else to the test's temp dir.

Bad input over plain HTTP: malformed filters, a huge scan, unknown topics and groups,
other methods, oversized bodies and cross-origin posts get clear 4xx pages, and the
cluster keeps serving Kafka clients.
"""

from __future__ import annotations

import os
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from riverbed.testing.cluster import scaled_s
from riverbed.testing.console import console_process
from riverbed.testing.group_coordinators import load_group_coordinators
from riverbed.testing.quorum_cluster import QuorumCluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1400,1000",
)
OVERRIDES = {
    "default.replication.factor": "3",
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "3",
    "num.partitions": "3",
    "group.initial.rebalance.delay.ms": "0",
}
QUIET = {"log_level": 3}
#: The issue's bound: a new record shows in the live tail within a second.
TAIL_VISIBLE_S = 1.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QuorumCluster]:
    c = QuorumCluster(tmp_path_factory.mktemp("console"), 3, overrides=OVERRIDES)
    try:
        c.start(timeout_s=60)
        load_group_coordinators(c.bootstrap_servers)  # not in a consumer's first join (3 s)
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def console(cluster: QuorumCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A `riverbed console` process; yields its base URL."""
    args = ["-b", cluster.bootstrap_servers]
    for node in cluster.nodes.values():
        args += ["--metrics-url", f"{node.http_url}/metrics"]
    log_path = tmp_path_factory.mktemp("console-log") / "console.log"
    with console_process(args, log_path) as url:
        yield url


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = os.environ.get("RIVERBED_CONSOLE_SCREENSHOTS")
    path = Path(where) if where else tmp_path_factory.mktemp("console-screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.fail("chromium and chromedriver are missing: run `make sysdeps`")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


def console_errors(browser: Any) -> list[str]:
    """The browser's SEVERE console entries since the last call (JS errors, CSP
    violations, failed loads)."""
    return [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]


def wait_for(browser: Any, css: str, timeout_s: float = 10.0) -> Any:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, scaled_s(timeout_s), poll_frequency=0.02).until(
        ec.presence_of_element_located((By.CSS_SELECTOR, css))
    )


def visit(browser: Any, url: str, shots: Path, name: str) -> None:
    browser.get(url)
    wait_for(browser, "html[data-console-ready]")  # every script ran (or its error is logged)
    browser.save_screenshot(str(shots / f"{name}.png"))
    assert console_errors(browser) == [], f"console errors on {url}"


def fill(browser: Any, form: str, **fields: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    for name, value in fields.items():
        element = browser.find_element(By.CSS_SELECTOR, f"#{form} [name={name}]")
        if element.tag_name == "select":
            Select(element).select_by_value(value)
        else:
            element.clear()
            element.send_keys(value)


def submit(browser: Any, form: str) -> None:
    from selenium.webdriver.common.by import By

    browser.find_element(By.CSS_SELECTOR, f"#{form} button[type=submit]").click()


def produce(bootstrap: str, topic: str, value: bytes, key: bytes | None = None) -> None:
    produce_all(bootstrap, topic, [value], key)


def produce_all(bootstrap: str, topic: str, values: list[bytes], key: bytes | None = None) -> None:
    """``values`` in order from one idempotent producer (its start is most of the cost)."""
    p = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 0, **QUIET}
    )
    for value in values:
        p.produce(topic, value=value, key=key)
    assert p.flush(scaled_s(15)) == 0


def create_topic(browser: Any, console: str, shots: Path, topic: str, partitions: int) -> None:
    visit(browser, f"{console}/topics", shots, "topics")
    fill(browser, "create-topic", name=topic, partitions=str(partitions))
    submit(browser, "create-topic")
    assert f"Created topic {topic}." in wait_for(browser, "#flash").text


def test_every_page_loads_without_console_errors(
    browser: Any, console: str, cluster: QuorumCluster, shots: Path
) -> None:
    topic = "console-pages"
    create_topic(browser, console, shots, topic, 3)
    produce(cluster.bootstrap_servers, topic, b'{"order": 1, "amount": 42}', b"user-1")
    group = "console-pages-group"
    consume_and_commit(cluster.bootstrap_servers, group, topic, 1)
    for path, name in [
        ("/", "overview"),
        ("/topics", "topics"),
        (f"/topics/{topic}", "topic"),
        (f"/topics/{topic}/messages?run=1&seek=oldest", "messages"),
        (f"/topics/{topic}/delete", "delete-confirmation"),
        ("/groups", "groups"),
        (f"/group?id={group}", "group"),
        ("/transactions", "transactions"),
        ("/security", "security"),
    ]:
        visit(browser, console + path, shots, name)
    from selenium.webdriver.common.by import By

    browser.get(console + "/")
    brokers = browser.find_elements(By.CSS_SELECTOR, "#brokers tbody tr")
    assert len(brokers) == 3
    assert len(browser.find_elements(By.CSS_SELECTOR, "#quorum tbody tr")) == 3
    assert browser.find_element(By.ID, "offline").text == "0"
    dirs = browser.find_elements(By.CSS_SELECTOR, "#log-dirs tbody tr")
    assert len(dirs) == 3 and all("online" in d.text for d in dirs)  # one dir per node
    browser.get(f"{console}/topics")
    size = browser.find_element(By.XPATH, f"//tr[td/a[text()='{topic}']]/td[5]").text
    assert size.endswith(("B", "KiB")) and size != "0 B"  # DescribeLogDirs: bytes on disk
    # riverbed's extras on the topic page: leader epochs and the idempotent producer
    browser.get(f"{console}/topics/{topic}")
    epochs = browser.find_elements(By.CSS_SELECTOR, "#partitions tbody tr td:nth-child(3)")
    assert len(epochs) == 3 and all(e.text.isdigit() for e in epochs)
    producers = browser.find_elements(By.CSS_SELECTOR, "#producers tbody tr")
    assert len(producers) == 1  # one record, one partition, one producer id
    assert browser.find_elements(By.CSS_SELECTOR, "#ledger tbody tr")


def test_create_produce_and_find_with_the_message_search(
    browser: Any, console: str, shots: Path
) -> None:
    from selenium.webdriver.common.by import By

    topic = "console-search"
    create_topic(browser, console, shots, topic, 2)
    browser.find_element(By.LINK_TEXT, "Browse messages").click()
    wait_for(browser, "#produce")
    fill(browser, "produce", key="order-17", value='{"sku": "kettle", "qty": 3}')
    fill(browser, "produce", headers="source=console-test")
    submit(browser, "produce")
    assert "Produced a record" in wait_for(browser, "#flash").text
    for value in ("filler one", "filler two"):
        browser.get(f"{console}/topics/{topic}/messages")
        fill(browser, "produce", value=value)
        submit(browser, "produce")
        wait_for(browser, "#flash")
    browser.get(f"{console}/topics/{topic}/messages")
    fill(browser, "search", value='"sku":\\s*"kettle"', header="source=console")
    submit(browser, "search")  # htmx: only #results is replaced
    summary = wait_for(browser, "#scan-summary")
    assert summary.text.startswith("Scanned 3 records, 1 matched")
    rows = browser.find_elements(By.CSS_SELECTOR, "#records tbody tr.record")
    assert len(rows) == 1
    assert "order-17" in rows[0].text and "kettle" in rows[0].text
    assert "source=console-test" in rows[0].text
    assert "value=" in browser.current_url  # the search is in the URL (hx-push-url)
    browser.save_screenshot(str(shots / "search.png"))
    assert console_errors(browser) == []


def test_live_tail_shows_a_new_record_within_a_second(
    browser: Any, console: str, cluster: QuorumCluster, shots: Path
) -> None:
    from selenium.webdriver.common.by import By

    topic = "console-tail"
    create_topic(browser, console, shots, topic, 3)
    browser.get(f"{console}/topics/{topic}/messages")
    wait_for(browser, "#tail-toggle").click()
    wait_for(browser, "#tail-status[data-state=live]")
    produce(cluster.bootstrap_servers, topic, b"tail-me", b"k")
    acknowledged = time.monotonic()
    row = wait_for(browser, "#tail-rows tr.record", timeout_s=5.0)
    seen_s = time.monotonic() - acknowledged
    assert "tail-me" in row.text
    assert seen_s < scaled_s(TAIL_VISIBLE_S), f"the tail showed the record after {seen_s:.2f} s"
    browser.save_screenshot(str(shots / "tail.png"))
    browser.find_element(By.ID, "tail-toggle").click()
    assert console_errors(browser) == []


def consume_and_commit(bootstrap: str, group: str, topic: str, count: int) -> None:
    """Read ``count`` records of ``topic`` as ``group``, commit, leave (the group is Empty)."""
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
         "enable.auto.commit": False, **QUIET}
    )  # fmt: skip
    try:
        c.subscribe([topic])
        got = 0
        deadline = time.monotonic() + scaled_s(30)
        while got < count and time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is not None and msg.error() is None:
                got += 1
        assert got == count
        c.commit(asynchronous=False)
    finally:
        c.close()


def committed(bootstrap: str, group: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, **QUIET})
    try:
        (tp,) = c.committed([TopicPartition(topic, 0)], timeout=scaled_s(20))
        return int(tp.offset)
    finally:
        c.close()


def test_lag_chart_updates_and_an_offset_reset_shows_its_dry_run(
    browser: Any, console: str, cluster: QuorumCluster, shots: Path
) -> None:
    from selenium.webdriver.common.by import By

    boot = cluster.bootstrap_servers
    topic, group = "console-lag", "console-lag-group"
    create_topic(browser, console, shots, topic, 1)
    produce_all(boot, topic, [f"r{i}".encode() for i in range(5)])
    consume_and_commit(boot, group, topic, 3)
    visit(browser, f"{console}/group?id={group}", shots, "group-lag")
    assert browser.find_element(By.ID, "total-lag").text == "2"
    wait_for(browser, "#lag-chart canvas")
    produce_all(boot, topic, [f"more{i}".encode() for i in range(4)])
    # the chart polls every 2 s: the newest sample shows the 4 new records
    deadline = time.monotonic() + scaled_s(15)
    while browser.find_element(By.ID, "total-lag").text != "6":
        assert time.monotonic() < deadline, "the lag chart did not update"
        time.sleep(0.1)
    assert int(browser.find_element(By.ID, "lag-chart").get_attribute("data-samples")) >= 2
    browser.save_screenshot(str(shots / "group.png"))

    fill(browser, "reset", strategy="earliest")
    submit(browser, "reset")
    note = wait_for(browser, "#dry-run-note")
    assert note.text.startswith("Dry run: nothing is committed yet")
    cells = [c.text for c in browser.find_elements(By.CSS_SELECTOR, "#plan tbody td")]
    assert cells == [topic, "0", "3", "0"]
    browser.save_screenshot(str(shots / "reset-dry-run.png"))
    assert committed(boot, group, topic) == 3  # the dry run changed nothing
    button = browser.find_element(By.CSS_SELECTOR, "#execute-reset button")
    assert not button.is_enabled()  # until the group's id is typed
    assert button.text == f"Commit these 1 offsets for group {group}"
    fill(browser, "execute-reset", confirm=group)
    assert button.is_enabled()
    button.click()
    assert "Reset the committed offsets of 1 partition" in wait_for(browser, "#flash").text
    assert committed(boot, group, topic) == 0
    assert console_errors(browser) == []


def test_the_metrics_page_charts_what_the_cluster_did(
    browser: Any, console: str, cluster: QuorumCluster, shots: Path
) -> None:
    from selenium.webdriver.common.by import By

    topic = "console-metrics"
    create_topic(browser, console, shots, topic, 3)
    visit(browser, f"{console}/cluster-metrics", shots, "metrics-empty")
    charts = wait_for(browser, "#metrics-charts[data-points]")
    before = float(charts.get_attribute("data-messages-in-total"))
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", **QUIET})
    for i in range(50):
        p.produce(topic, value=f"m{i}".encode())
    assert p.flush(scaled_s(15)) == 0
    # leaders count MessagesIn (Kafka's rule): 50 records, whatever the replication factor
    deadline = time.monotonic() + scaled_s(15)
    while float(charts.get_attribute("data-messages-in-total")) < before + 50:
        assert time.monotonic() < deadline, "the metrics page never saw the 50 records"
        time.sleep(0.1)
    assert float(charts.get_attribute("data-messages-in-total")) == before + 50
    assert browser.find_element(By.ID, "metrics-errors").text == ""
    assert len(browser.find_elements(By.CSS_SELECTOR, "#metrics-charts canvas")) == 4
    browser.save_screenshot(str(shots / "metrics.png"))
    assert console_errors(browser) == []


def last_stable_offset(bootstrap: str, topic: str) -> tuple[int, int]:
    """(LSO, high watermark) of partition 0: ListOffsets read_committed and read_uncommitted."""
    from confluent_kafka import IsolationLevel
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    tp = TopicPartition(topic, 0)
    out = []
    for level in (IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED):
        futures = admin.list_offsets({tp: OffsetSpec.latest()}, isolation_level=level)
        out.append(futures[tp].result(timeout=scaled_s(30)).offset)
    return out[0], out[1]


def test_an_open_transaction_is_aborted_after_its_confirmation(
    browser: Any, console: str, cluster: QuorumCluster, shots: Path
) -> None:
    from selenium.webdriver.common.by import By

    boot = cluster.bootstrap_servers
    topic = "console-txn"
    create_topic(browser, console, shots, topic, 1)
    p = Producer({"bootstrap.servers": boot, "transactional.id": "console-txn-1", **QUIET})
    p.init_transactions(scaled_s(30))
    p.begin_transaction()
    p.produce(topic, value=b"in-doubt")
    assert p.flush(scaled_s(15)) == 0
    assert last_stable_offset(boot, topic) == (0, 1)  # the open transaction holds the LSO
    browser.get(f"{console}/topics/{topic}")
    browser.find_element(By.LINK_TEXT, "abort…").click()
    note = wait_for(browser, "#abort-note")
    assert f"leader of {topic}-0 to write an ABORT marker" in note.text
    browser.save_screenshot(str(shots / "abort-transaction.png"))
    button = browser.find_element(By.CSS_SELECTOR, "#abort-transaction button")
    assert not button.is_enabled()
    fill(browser, "abort-transaction", confirm=f"{topic}-0")
    button.click()
    assert "Aborted the transaction of producer" in wait_for(browser, "#flash").text
    lso, hw = last_stable_offset(boot, topic)
    assert lso == hw == 2  # the record and the ABORT marker; nothing holds the LSO
    assert browser.find_elements(By.LINK_TEXT, "abort…") == []
    assert console_errors(browser) == []


def http(method: str, url: str, body: bytes | None = None, **headers: str) -> tuple[int, str]:
    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=scaled_s(30)) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_bad_input_gets_clear_4xx_and_kafka_clients_keep_working(
    console: str, cluster: QuorumCluster
) -> None:
    topic = "console-bad-input"
    form = urllib.parse.urlencode({"name": topic, "partitions": "1"}).encode()
    assert http("POST", f"{console}/topics", form)[0] == 200  # after the redirect
    msgs = f"{console}/topics/{topic}/messages?run=1"
    cases = [
        ("GET", msgs + "&value=%28", None, 400, "malformed value filter"),
        ("GET", msgs + "&key=%5Ba-", None, 400, "malformed key filter"),
        ("GET", msgs + "&header=%3Dx", None, 400, "malformed header filter"),
        ("GET", msgs + "&scan=999999999", None, 400, "SCAN_RECORDS_MAX = 100000"),
        ("GET", f"{console}/topics/no-such-topic", None, 404, "unknown topic"),
        ("GET", f"{console}/topics/no-such-topic/messages?run=1", None, 404, "unknown topic"),
        ("GET", f"{console}/group?id=no-such-group", None, 404, "unknown consumer group"),
        ("GET", f"{console}/group", None, 400, "give the group"),
        ("GET", f"{console}/no/such/page", None, 404, "Not Found"),
        ("DELETE", f"{console}/topics/{topic}", None, 405, "Method Not Allowed"),
        ("POST", f"{console}/topics/{topic}/messages", b"v" * (2 * 1024 * 1024), 413,
         "REQUEST_BODY_BYTES_MAX"),
        ("POST", f"{console}/topics/{topic}/delete", b"confirm=wrong", 400, "not deleted"),
        ("POST", f"{console}/topics", b"name=bad%20name", 400, "illegal characters"),
        ("POST", f"{console}/topics", b"name=x&partitions=many", 400, "whole number"),
        ("GET", f"{console}/transactions/abort?topic={topic}", None, 400, "start_offset"),
        ("GET", f"{console}/transactions/abort?topic={topic}&partition=0&start_offset=5", None,
         404, "no open transaction starts at offset 5"),
        ("POST", f"{console}/transactions/abort", f"topic={topic}&partition=0&start_offset=0"
         .encode(), 400, "not aborted"),
    ]  # fmt: skip
    for method, url, body, status, says in cases:
        got, page = http(method, url, body, **{"Content-Type": "application/x-www-form-urlencoded"})
        assert (got, says in page) == (status, True), (method, url, got, page[-400:])
    got, page = http(
        "POST", f"{console}/topics/{topic}/delete", f"confirm={topic}".encode(),
        Origin="http://elsewhere.example", **{"Content-Type": "application/x-www-form-urlencoded"},
    )  # fmt: skip
    assert got == 403 and "another origin" in page
    # nothing above changed the cluster: the topic is there and serves Kafka clients
    produce(cluster.bootstrap_servers, topic, b"still-serving")
    c = Consumer(
        {"bootstrap.servers": cluster.bootstrap_servers, "group.id": "bad-input-check",
         "auto.offset.reset": "earliest", **QUIET}
    )  # fmt: skip
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + scaled_s(30)
        msg = None
        while (msg is None or msg.error() is not None) and time.monotonic() < deadline:
            msg = c.poll(0.2)
        assert msg is not None and msg.value() == b"still-serving"
    finally:
        c.close()
