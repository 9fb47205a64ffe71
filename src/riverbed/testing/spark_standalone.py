"""A Spark standalone cluster on loopback for tests and benchmarks: one master, N workers.

Started from PySpark's own launcher (``pyspark/bin/spark-class``, shipped in the pip
package: no Spark download), as Spark's ``start-master.sh`` / ``start-worker.sh`` would:

    spark-class org.apache.spark.deploy.master.Master --host 127.0.0.1 --port P --webui-port W
    spark-class org.apache.spark.deploy.worker.Worker spark://127.0.0.1:P --cores 1 --memory 512m

Every process binds 127.0.0.1 (``SPARK_LOCAL_IP``) on ports from riverbed.testing.ports;
logs and the workers' work directories live under one temp directory. ``start`` waits
until the master's JSON status (``http://127.0.0.1:W/json/``) lists every worker ALIVE;
``stop`` ends the processes it started, by PID (SIGTERM, then SIGKILL).

Executors run in the workers' own JVMs with their own Python workers, so the Python they
run (``spark.pyspark.python``) must have riverbed installed (see the README, "Spark").
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from riverbed.testing.cluster import scaled_s
from riverbed.testing.ports import free_port

#: Seconds (before load scaling) to wait for the master and every worker to register.
START_TIMEOUT_S = 60.0
#: Seconds to wait after SIGTERM before SIGKILL.
STOP_TIMEOUT_S = 10.0
#: Cores and memory each worker offers (one executor of that size per application).
WORKER_CORES = 1
WORKER_MEMORY = "512m"
#: Bytes of a process log quoted in a start error.
LOG_TAIL_BYTES = 3000
#: Seconds between polls of the master's JSON status.
POLL_INTERVAL_S = 0.5
#: JVM options for a quick start of short-lived JVMs on a small machine: the C1 compiler
#: only and the serial collector. The master and workers get them; a test's driver and
#: executors can (spark.driver/executor.extraJavaOptions). Only start-up time changes.
QUICK_START_JAVA_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


class SparkClusterStartError(RuntimeError):
    """The master or a worker exited or did not register in time."""


def spark_class() -> Path:
    """PySpark's ``bin/spark-class`` launcher."""
    import pyspark

    path = Path(pyspark.__file__).parent / "bin" / "spark-class"
    if not path.is_file():
        raise SparkClusterStartError(f"PySpark's launcher is missing: {path}")
    return path


@dataclass
class _Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path


@dataclass
class StandaloneCluster:
    """A master and ``workers`` workers; ``master_url`` is ``spark://127.0.0.1:P``."""

    workers: int = 2
    worker_cores: int = WORKER_CORES
    worker_memory: str = WORKER_MEMORY
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="riverbed-spark-")))
    master_port: int = 0
    webui_port: int = 0
    _procs: list[_Proc] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    @property
    def status_url(self) -> str:
        return f"http://127.0.0.1:{self.webui_port}/json/"

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["SPARK_LOCAL_IP"] = "127.0.0.1"
        env["SPARK_LOCAL_DIRS"] = str(self.workdir / "local")
        env["SPARK_LOG_DIR"] = str(self.workdir / "logs")
        env["SPARK_NO_DAEMONIZE"] = "1"
        daemon_opts = env.get("SPARK_DAEMON_JAVA_OPTS", "")
        env["SPARK_DAEMON_JAVA_OPTS"] = f"{daemon_opts} {QUICK_START_JAVA_OPTS}".strip()
        return env

    def _launch(self, name: str, args: list[str]) -> None:
        log = self.workdir / f"{name}.log"
        with log.open("wb") as out:
            popen = subprocess.Popen(
                [str(spark_class()), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self._env(),
                start_new_session=True,  # its own process group: stop() ends the JVM's children
            )
        self._procs.append(_Proc(name, popen, log))

    def start(self) -> StandaloneCluster:
        self.master_port = free_port()
        self.webui_port = free_port()
        args = ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1"]
        args += ["--port", str(self.master_port), "--webui-port", str(self.webui_port)]
        self._launch("master", args)
        for i in range(self.workers):
            work = self.workdir / f"worker-{i}"
            work.mkdir(parents=True, exist_ok=True)
            args = ["org.apache.spark.deploy.worker.Worker", self.master_url]
            args += ["--host", "127.0.0.1", "--port", str(free_port())]
            args += ["--webui-port", str(free_port()), "--work-dir", str(work)]
            args += ["--cores", str(self.worker_cores), "--memory", self.worker_memory]
            self._launch(f"worker-{i}", args)
        try:
            self._wait_registered()
        except BaseException:
            self.stop()
            raise
        return self

    def alive_workers(self) -> int:
        """Workers the master lists ALIVE (0 while its status page is not up)."""
        try:
            with urllib.request.urlopen(self.status_url, timeout=5) as resp:
                status = json.load(resp)
        except (OSError, ValueError):
            return 0
        return sum(1 for w in status.get("workers", []) if w.get("state") == "ALIVE")

    def _wait_registered(self) -> None:
        deadline = time.monotonic() + scaled_s(START_TIMEOUT_S)
        while time.monotonic() < deadline:
            for proc in self._procs:
                if proc.popen.poll() is not None:
                    raise SparkClusterStartError(
                        f"spark {proc.name} exited with {proc.popen.returncode}:\n"
                        + self._tail(proc)
                    )
            if self.alive_workers() >= self.workers:
                return
            time.sleep(POLL_INTERVAL_S)
        raise SparkClusterStartError(
            f"{self.workers} workers did not register with {self.master_url} in time:\n"
            + "\n".join(self._tail(p) for p in self._procs)
        )

    def _tail(self, proc: _Proc) -> str:
        data = proc.log.read_bytes()[-LOG_TAIL_BYTES:] if proc.log.exists() else b""
        return f"--- {proc.log} ---\n" + data.decode(errors="replace")

    def stop(self) -> None:
        # Workers first, so that the master does not log them lost and retry.
        for proc in reversed(self._procs):
            _terminate(proc.popen)
        self._procs.clear()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _terminate(popen: subprocess.Popen[bytes]) -> None:
    if popen.poll() is not None:
        return
    # The process group is the one start_new_session made for this launch alone.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(popen.pid, signal.SIGTERM)
    try:
        popen.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(popen.pid, signal.SIGKILL)
        popen.wait(timeout=STOP_TIMEOUT_S)
