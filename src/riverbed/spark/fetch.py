"""Executor side: which reader reads a task's offset range.

``reader=fetch`` (the default): riverbed's own Fetch requests and the columnar decoder
(:mod:`riverbed.spark.fetch_reader`). ``reader=consumer``: a confluent-kafka consumer record
by record (:mod:`riverbed.spark.consumer_reader`), kept as the fallback for what the own
reader does not speak yet (TLS and SASL) and for comparison; both yield the same rows.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pyarrow as pa

from riverbed.spark import consumer_reader, fetch_reader
from riverbed.spark.consumer_reader import arrow_batch_rows_max
from riverbed.spark.offsets import OffsetRange

__all__ = ["arrow_batch_rows_max", "read_range"]


def read_range(
    client_config: Mapping[str, str],
    r: OffsetRange,
    *,
    include_headers: bool,
    fail_on_data_loss: bool,
    poll_timeout_ms: int,
    reader: str = "fetch",
) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``r`` as Arrow batches (never a record outside the range)."""
    read = fetch_reader.read_range if reader == "fetch" else consumer_reader.read_range
    return read(
        client_config,
        r,
        include_headers=include_headers,
        fail_on_data_loss=fail_on_data_loss,
        poll_timeout_ms=poll_timeout_ms,
    )
