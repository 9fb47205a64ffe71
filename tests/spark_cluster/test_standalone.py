"""The riverbed data source on a Spark standalone cluster (a master and two workers on
loopback, started from PySpark's own launcher), driven by ``riverbed pipeline run --master``:
executors in the workers' JVMs with their own Python workers read every record exactly once,
in a batch and in a streaming query restarted from its checkpoint, and write through the
exactly-once sink; an executor Python without riverbed fails saying how to install it, for
the source and for the sink.

The driver runs in a subprocess (one SparkSession per JVM: the other Spark tests keep
their local[2] session).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from riverbed.testing.cluster import LOAD_SCALE_MAX, scaled_s, start_broker
from riverbed.testing.spark_standalone import StandaloneCluster

#: seconds (before load scaling) a driver subprocess may take: JVM start, executors, jobs
DRIVER_TIMEOUT_S = 240.0
# a deadline for hangs: a driver's run with its cluster's start, at the highest load scale
pytestmark = [
    pytest.mark.spark,
    pytest.mark.integration,
    pytest.mark.timeout(int(DRIVER_TIMEOUT_S * LOAD_SCALE_MAX + 120)),
]

PIPELINE = Path(__file__).with_name("standalone_pipeline.py")
#: set only in the driver's environment (the workers' JVMs never see it)
DRIVER_SIDE_ENV = "RIVERBED_TEST_DRIVER_SIDE"


@pytest.fixture(scope="module")
def cluster() -> Iterator[StandaloneCluster]:
    with StandaloneCluster(workers=2) as c:
        yield c


@pytest.fixture(scope="module")
def bootstrap() -> Iterator[str]:
    overrides = {"num.partitions": "2", "transaction.two.phase.commit.enable": "true"}
    node = start_broker(overrides=overrides)
    try:
        yield node.bootstrap
    finally:
        node.stop()


def _topic(bootstrap: str, count: int) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"sa-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(name, 2, 1)]).values():
        fut.result(30)
    sys.path.insert(0, str(PIPELINE.parent))
    try:
        from standalone_pipeline import produce
    finally:
        sys.path.remove(str(PIPELINE.parent))
    produce(bootstrap, name, 0, count)
    return name


def _run(
    cluster: StandaloneCluster,
    bootstrap: str,
    out: Path,
    *args: str,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "riverbed.cli.main", "pipeline", "run"]
    cmd += ["--master", cluster.master_url, "-b", bootstrap, str(PIPELINE), "--out", str(out)]
    done = subprocess.run(
        [*cmd, *args],
        capture_output=True,
        text=True,
        timeout=scaled_s(DRIVER_TIMEOUT_S),
        env=env,
    )
    assert out.exists(), (
        f"the driver wrote no result (exit {done.returncode}):\n{done.stderr[-3000:]}"
    )
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def test_reads_and_exactly_once_writes_on_two_workers(
    cluster: StandaloneCluster, bootstrap: str, tmp_path: Path
) -> None:
    """One driver (a JVM start saved): a batch read, a streaming read restarted from its
    checkpoint, then the exactly-once sink, whose tasks on the workers' executors write
    and prepare while the driver commits: a batch write of rows made on the executors,
    and a streaming copy run twice from its checkpoint (records produced in between);
    a read_committed read of the target holds every row once."""
    topic, target = _topic(bootstrap, 400), _topic(bootstrap, 0)
    result = _run(
        cluster, bootstrap, tmp_path / "result.json", "--topic", topic,
        "--stream-dir", str(tmp_path / "stream"), "--more", "100",
        "--write-local", "20", "--copy-to", target, "--copy-dir", str(tmp_path / "copy"),
        "--copy-more", "100",
    )  # fmt: skip
    assert "error" not in result and "write_error" not in result, result
    assert result["master"] == cluster.master_url
    assert result["executors"] >= 1, "no executor of the workers registered"
    assert result["batch"] == sorted(f"v{i}" for i in range(400))
    # the second availableNow run resumed from the checkpoint: each record once
    assert result["stream"] == sorted(f"v{i}" for i in range(500))
    expected = sorted([f"w{i}" for i in range(20)] + [f"v{i}" for i in range(600)])
    assert result["copied"] == expected
    with urllib.request.urlopen(cluster.status_url, timeout=10) as resp:
        apps = json.load(resp)["completedapps"]
    assert any(app["name"] == "riverbed-standalone-test" for app in apps), apps


def test_an_executor_python_without_riverbed_says_how_to_install_it(
    cluster: StandaloneCluster, bootstrap: str, tmp_path: Path
) -> None:
    # One path, two installs, as on a cluster whose driver machine has riverbed and whose
    # workers do not: on the driver (its planning Python workers) the venv's Python; on the
    # executors the same Python without its .pth files (-S): PySpark and pyarrow from
    # site-packages, but not riverbed (an editable install is a .pth file).
    bare = tmp_path / "bare-python"
    bare.write_text(
        "#!/bin/sh\n"
        f'[ -n "${DRIVER_SIDE_ENV}" ] && exec {sys.executable} "$@"\n'
        f"export PYTHONPATH={sysconfig.get_paths()['purelib']}\n"
        f'exec {sys.executable} -S "$@"\n'
    )
    bare.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != DRIVER_SIDE_ENV}
    probe = subprocess.run([str(bare), "-c", "import riverbed"], capture_output=True, env=env)
    assert probe.returncode != 0, "riverbed is importable without the venv's .pth files"
    topic = _topic(bootstrap, 10)
    out = tmp_path / "result.json"
    result = _run(
        cluster, bootstrap, out, "--topic", topic, "--executor-python", str(bare),
        "--write-local", "5", env={**os.environ, DRIVER_SIDE_ENV: "1"},
    )  # fmt: skip
    # the reader's classes and the sink's writer, each unpickled on an executor
    for stage in ("error", "write_error"):
        error = result.get(stage, "")
        assert "riverbed is not installed on this Spark executor's Python" in error, (
            stage,
            error[-3000:],
        )
        assert "make wheel" in error and "spark.submit.pyFiles" in error
