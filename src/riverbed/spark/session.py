"""A SparkSession with the riverbed data source registered (examples, benchmarks).

Spark 4 needs Java 17+; :func:`check_java` says so clearly instead of letting the JVM
launch fail obscurely. Python workers must run the interpreter that has riverbed
installed, so ``PYSPARK_PYTHON`` defaults to this one; everything binds to 127.0.0.1.

The master is ``local[cores]`` unless ``RIVERBED_SPARK_MASTER`` names another (e.g.
``spark://host:7077``, what ``riverbed pipeline run --master`` sets). On a cluster the
executors' Python (``spark.pyspark.python``, default this interpreter's path) must have
riverbed installed: install the wheel of ``make wheel`` there (see the README, "Spark").
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from typing import Any

JAVA_MAJOR_MIN = 17
#: environment variable naming the Spark master of :func:`local_session` (default local[n])
MASTER_ENV = "RIVERBED_SPARK_MASTER"
#: memory of each executor on a cluster master (Spark's floor is about 450 MiB)
CLUSTER_EXECUTOR_MEMORY = "512m"


class JavaMissingError(RuntimeError):
    """No suitable Java runtime for Spark."""


def java_major_version() -> int:
    home = os.environ.get("JAVA_HOME")
    java = shutil.which("java", path=os.path.join(home, "bin")) if home else None
    java = java or shutil.which("java")
    if java is None:
        raise JavaMissingError(
            f"Spark needs Java {JAVA_MAJOR_MIN}+ but `java` is not on PATH: install "
            "openjdk-17-jre-headless (`make test` does so on Debian when it can)"
        )
    out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    text = out.stderr + out.stdout
    m = re.search(r'version "(\d+)(?:\.(\d+))?', text)
    if not m:
        raise JavaMissingError(f"cannot read the Java version from `java -version`: {text!r}")
    major = int(m.group(1))
    # Java 8 and older report "1.8.0_x".
    return int(m.group(2)) if major == 1 and m.group(2) else major


def check_java() -> None:
    major = java_major_version()
    if major < JAVA_MAJOR_MIN:
        raise JavaMissingError(
            f"Spark needs Java {JAVA_MAJOR_MIN}+, `java -version` reports {major}: install "
            "openjdk-17-jre-headless or point JAVA_HOME at a newer JDK"
        )


def local_session(app_name: str, cores: int = 2, **conf: str) -> Any:
    """``local[cores]`` session (or the master ``RIVERBED_SPARK_MASTER`` names), UI off,
    loopback only, UTC, riverbed registered."""
    return spark_session(app_name, local_session_master(cores), cores=cores, **conf)


def local_session_master(cores: int) -> str:
    """The master of :func:`local_session`: ``RIVERBED_SPARK_MASTER`` or ``local[cores]``."""
    return os.environ.get(MASTER_ENV) or f"local[{cores}]"


def spark_session(app_name: str, master: str, cores: int = 2, **conf: str) -> Any:
    """A session on ``master`` (``local[n]`` or ``spark://host:port``), riverbed registered.

    On a cluster the executors get ``spark.pyspark.python`` = this interpreter unless
    ``conf`` says otherwise (the driver's venv, shared by the workers on one machine)."""
    check_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from riverbed.spark import register

    if not master.startswith("local"):
        conf = {
            "spark.pyspark.python": sys.executable,
            "spark.pyspark.driver.python": sys.executable,
            "spark.executor.memory": CLUSTER_EXECUTOR_MEMORY,
            **conf,
        }
    if "spark.pyspark.python" in conf:
        # A Python driver takes its Python workers' interpreter (shipped with each task to
        # the executors) from PYSPARK_PYTHON alone; the conf is spark-submit's.
        os.environ["PYSPARK_PYTHON"] = conf["spark.pyspark.python"]
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(cores))
        .config("spark.sql.session.timeZone", "UTC")
    )
    if master.startswith("local") or "://127.0.0.1:" in master or "://localhost:" in master:
        # On one machine everything stays on loopback; a remote cluster's executors must
        # reach the driver at an address Spark picks (or spark.driver.host in conf).
        builder = builder.config("spark.driver.host", "127.0.0.1")
        builder = builder.config("spark.driver.bindAddress", "127.0.0.1")
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
