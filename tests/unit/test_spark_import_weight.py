"""What a Spark Python worker imports (issue 22): every worker PySpark starts for the data
source (the driver's planning and commit workers, each executor task's) imports the
source, the sink and the reader afresh. They need riverbed's protocol and client modules,
never the broker's (metadata, storage, raft, the listeners' security): that weight made
each cold worker several seconds slower on a loaded machine, the first batch of every
restarted streaming query with it."""

from __future__ import annotations

import json
import subprocess
import sys

#: the modules a Spark worker imports for the data source
WORKER_MODULES = ("riverbed.spark.source", "riverbed.spark.sink", "riverbed.spark.fetch_reader")
#: riverbed packages a worker may load besides riverbed.spark and riverbed.protocol
ALLOWED = (
    "riverbed.cli.client_security",  # Kafka's client properties
    "riverbed.cli.wire",
    "riverbed.security.",  # the SASL client (PLAIN, SCRAM) and JAAS parsing
    "riverbed.server.client_login",
    "riverbed.server.tls",  # the client's TLS context
)


def test_spark_workers_import_no_broker_modules() -> None:
    code = (
        f"import sys\nfor m in {WORKER_MODULES!r}: __import__(m)\n"
        "import json; print(json.dumps(sorted(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.splitlines()[-1])
    heavy = [
        m
        for m in loaded
        if m.startswith("riverbed.")
        and not m.startswith(("riverbed.spark", "riverbed.protocol", *ALLOWED))
        and m not in ("riverbed.cli", "riverbed.security", "riverbed.server")
    ]
    assert heavy == [], f"a Spark worker imports broker modules: {heavy}"
