"""A Spark driver in its own process for the exactly-once kill test: copies topic ``in``
(read_committed) to topic ``out`` through the riverbed sink, from a checkpoint, with small
micro-batches, until ``in`` is consumed (trigger availableNow); exit 0 when done.

    python eos_driver.py BOOTSTRAP CHECKPOINT_DIR EXACTLY_ONCE(true|false) MAX_PER_TRIGGER
"""

from __future__ import annotations

import sys
import time
from typing import Any

_T0 = time.monotonic()


def say(what: str) -> None:
    """A line of the driver's log with the seconds since its process started."""
    print(f"[eos-driver +{time.monotonic() - _T0:.1f}s] {what}", flush=True)


def progress_listener() -> Any:
    """Prints each micro-batch's phases (Spark's durationMs), where a run's time goes."""
    from pyspark.sql.streaming import StreamingQueryListener

    class Progress(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            say("query started")

        def onQueryProgress(self, event: Any) -> None:
            p = event.progress
            say(f"batch {p.batchId}: {p.numInputRows} rows, durationMs {p.durationMs}")

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            say("query terminated")

    return Progress()


def main(argv: list[str]) -> int:
    bootstrap, checkpoint, exactly_once, per_trigger = argv
    from riverbed.spark.session import local_session

    conf = {
        "spark.sql.streaming.pollingDelay": "10ms",
        # a loaded machine starts Python workers slowly ("failed to connect back")
        "spark.python.authenticate.socketTimeout": "120s",
    }
    spark = local_session("eos-driver", **conf)
    say("session up")
    spark.streams.addListener(progress_listener())
    query = (
        spark.readStream.format("riverbed")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", "in")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", per_trigger)
        .load()
        .selectExpr("key", "value")
        .writeStream.format("riverbed")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", "out")
        .option("exactlyOnce", exactly_once)
        .option("transactional.id.prefix", "eos-kill-test")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    error = query.exception()
    if error is not None:
        print(f"query failed: {error}", file=sys.stderr, flush=True)
        return 1
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
