"""The "riverbed" data source: batch and micro-batch readers (and the writers' entry points).

Planning runs on the driver (partition discovery and ListOffsets through
:class:`riverbed.spark.client.OffsetClient`); each Spark partition is one
:class:`RangePartition` (``[from, until)`` of one Kafka partition) read on an executor by
:func:`riverbed.spark.fetch.read_range`, which yields Arrow record batches (riverbed's own
Fetch requests and columnar decoder by default, see the option ``reader``).

Streaming offsets are Spark's Kafka JSON (see :mod:`riverbed.spark.offsets`); the stream
reader implements admission control (``latestOffset(start, limit)`` with ``ReadMaxRows``
from ``maxOffsetsPerTrigger``) and ``Trigger.AvailableNow`` (the latest offsets at query
start are the target; admission control still splits the way there into micro-batches).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from riverbed.spark.client import OffsetClient, plan_ranges
from riverbed.spark.executor_import import ExecutorImportCheck
from riverbed.spark.fetch import read_range
from riverbed.spark.offsets import (
    OffsetRange,
    PartitionOffsets,
    from_json_dict,
    rate_limit,
    split_ranges,
    to_json_dict,
)
from riverbed.spark.options import (
    ReadOptions,
    RiverbedOptionError,
    parse_read_options,
    parse_write_options,
)
from riverbed.spark.schema import source_schema

FORMAT_NAME = "riverbed"


class RangePartition(ExecutorImportCheck, InputPartition):
    """One Spark partition: ``[from_offset, until_offset)`` of one Kafka partition."""

    def __init__(self, r: OffsetRange) -> None:
        super().__init__(r)
        self.range = r

    def __repr__(self) -> str:
        r = self.range
        return f"RangePartition({r.topic}-{r.partition} [{r.from_offset}, {r.until_offset}))"


def _check_schema(options: ReadOptions, schema: StructType) -> None:
    expected = source_schema(options.include_headers)
    if schema != expected:
        raise RiverbedOptionError(
            "the riverbed source has a fixed schema (that of Spark's Kafka source) and cannot "
            f"be read with a user-specified one; expected {expected.simpleString()}, "
            f"got {schema.simpleString()}"
        )


def _read(options: ReadOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition, RangePartition):
        return iter(())  # Spark's placeholder when there is nothing to read
    return read_range(
        options.client_config,
        partition.range,
        include_headers=options.include_headers,
        fail_on_data_loss=options.fail_on_data_loss,
        poll_timeout_ms=options.poll_timeout_ms,
        reader=options.reader,
    )


def _spark_partitions(options: ReadOptions, ranges: list[OffsetRange]) -> list[InputPartition]:
    split = split_ranges(ranges, options.min_partitions, options.max_records_per_partition)
    return [RangePartition(r) for r in split]


class RiverbedBatchReader(ExecutorImportCheck, DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        opts = self.options
        with OffsetClient(opts) as client:
            tps = client.partitions()
            if not tps:
                return []
            start = client.resolve(opts.starting, tps, is_start=True, option="startingOffsets")
            end = client.resolve(opts.ending, tps, is_start=False, option="endingOffsets")
            earliest = client.earliest(tps)
        backwards = sorted(tp for tp in tps if start[tp] > end[tp])
        by_time = {opts.starting.kind, opts.ending.kind} & {"timestamp", "timestamps"}
        if backwards and not by_time:
            raise RiverbedOptionError(
                "starting offsets are after ending offsets for "
                + ", ".join(f"{t}-{p} ({start[(t, p)]} > {end[(t, p)]})" for t, p in backwards)
            )
        for tp in backwards:
            # Resolved from times (e.g. nothing after the starting time): an empty range.
            start[tp] = end[tp]
        return _spark_partitions(opts, plan_ranges(start, end, earliest, opts.fail_on_data_loss))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition)


class RiverbedStreamReader(
    ExecutorImportCheck, DataSourceStreamReader, SupportsTriggerAvailableNow
):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._client: OffsetClient | None = None
        self._target: PartitionOffsets | None = None
        self._latest: PartitionOffsets | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Executors get a copy for read(); the driver's client must not travel with it.
        return {"options": self.options, "_client": None, "_target": None, "_latest": None}

    @property
    def client(self) -> OffsetClient:
        if self._client is None:
            self._client = OffsetClient(self.options)
        return self._client

    def initialOffset(self) -> dict[str, Any]:
        tps = self.client.partitions()
        offsets = self.client.resolve(
            self.options.starting, tps, is_start=True, option="startingOffsets"
        )
        return to_json_dict(offsets)

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.options.max_offsets_per_trigger
        return ReadMaxRows(n) if n is not None else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self.client.latest(self.client.partitions())

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = from_json_dict(start)
        if self._target is not None:
            latest = dict(self._target)
        else:
            latest = self.client.latest(self.client.partitions())
        self._latest = latest
        if isinstance(limit, ReadMaxRows):
            new = [tp for tp in latest if tp not in begin]
            frm = {**self.client.earliest(new), **begin}
            return to_json_dict(rate_limit(limit.max_rows, frm, latest))
        return to_json_dict(latest)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return to_json_dict(self._latest) if self._latest is not None else None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        begin = from_json_dict(start)
        until = from_json_dict(end)
        existing = set(self.client.partitions()) & set(until)
        earliest = self.client.earliest(sorted(existing))
        for tp in set(until) - existing:
            # Gone since latestOffset: the executor reports the loss per failOnDataLoss.
            earliest[tp] = begin.get(tp, 0)
        ranges = plan_ranges(begin, until, earliest, self.options.fail_on_data_loss)
        return _spark_partitions(self.options, ranges)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition)

    def commit(self, end: dict[str, Any]) -> None:
        # Progress lives in Spark's checkpoint; nothing is committed to the cluster.
        return None

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


class RiverbedDataSource(ExecutorImportCheck, DataSource):
    """``spark.read/readStream/write/writeStream.format("riverbed")``.

    It and its readers and partitions travel to executors through ExecutorImportCheck: an
    executor's Python without riverbed fails saying how to install it."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> StructType:
        include = str(self.options.get("includeHeaders", "false")).strip().lower() == "true"
        return source_schema(include)

    def reader(self, schema: StructType) -> DataSourceReader:
        options = parse_read_options(self.options, streaming=False)
        _check_schema(options, schema)
        return RiverbedBatchReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = parse_read_options(self.options, streaming=True)
        _check_schema(options, schema)
        return RiverbedStreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from riverbed.spark.sink import RiverbedWriter

        if overwrite:
            # As Spark's Kafka sink: a topic is append-only, there is nothing to overwrite.
            raise RiverbedOptionError(
                "save mode 'overwrite' is not allowed for riverbed topics; use mode('append')"
            )
        return RiverbedWriter(parse_write_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from riverbed.spark.sink import RiverbedStreamWriter

        return RiverbedStreamWriter(parse_write_options(self.options), schema)
