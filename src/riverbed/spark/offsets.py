"""Offset maps, offset ranges, admission control and range splitting (pure functions).

Checkpoint format (Spark's Kafka source): a JSON object of topics, each an object from the
partition number as a *string* to the next offset to read, e.g. ``{"clicks": {"0": 42,
"1": 17}}``. Keys are emitted sorted (topics by name, partitions numerically) so the same
offsets always serialise to the same JSON: Spark compares offsets by their JSON text to
decide whether a micro-batch has new data.

The range calculator and the rate limiter follow Spark's ``KafkaOffsetRangeCalculator``
and ``KafkaMicroBatchStream.rateLimit`` so that a query plans the same micro-batches and
Spark partitions as it would with Spark's own Kafka source.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from riverbed.spark.options import RiverbedOptionError, TopicPartition

PartitionOffsets = dict[TopicPartition, int]


def to_json_dict(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Offsets as Spark's checkpoint JSON object (sorted, partition keys as strings)."""
    out: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(offsets):
        out.setdefault(topic, {})[str(partition)] = int(offsets[(topic, partition)])
    return out


def from_json_dict(data: Any) -> PartitionOffsets:
    """Inverse of :func:`to_json_dict`; raises RiverbedOptionError on a malformed map."""
    if not isinstance(data, dict):
        raise RiverbedOptionError(f"offsets must be a JSON object of topics, got {data!r}")
    out: PartitionOffsets = {}
    for topic, parts in data.items():
        if not isinstance(parts, dict):
            raise RiverbedOptionError(
                f"offsets of topic {topic!r} must be an object, got {parts!r}"
            )
        for p, off in parts.items():
            try:
                out[(str(topic), int(p))] = int(off)
            except (TypeError, ValueError):
                raise RiverbedOptionError(
                    f"bad offset entry {topic!r}/{p!r}: {off!r} in checkpointed offsets"
                ) from None
    return out


@dataclass(frozen=True)
class OffsetRange:
    """Records ``[from_offset, until_offset)`` of one Kafka partition."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def size(self) -> int:
        return self.until_offset - self.from_offset


def rate_limit(
    limit: int, start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int]
) -> PartitionOffsets:
    """End offsets admitting about ``limit`` records, split in proportion to each backlog.

    As in Spark, a partition whose share rounds below one record still gets one (small
    partitions are not starved), so the total may exceed ``limit`` by the number of such
    partitions; no end ever passes ``latest``.
    """
    assert limit > 0, limit
    sizes = {tp: end - start[tp] for tp, end in latest.items() if tp in start and end > start[tp]}
    total = sum(sizes.values())
    if total < 1:
        return dict(latest)
    out: PartitionOffsets = {}
    for tp, end in latest.items():
        if tp not in sizes:
            out[tp] = end
            continue
        prorate = limit * (sizes[tp] / total)
        share = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        out[tp] = min(end, start[tp] + share)
    return out


def _divide(parts: int, r: OffsetRange) -> list[OffsetRange]:
    remaining = r.size
    start = r.from_offset
    out: list[OffsetRange] = []
    for part in range(parts):
        # Integer division; the last part takes the remainder.
        this = remaining // (parts - part)
        remaining -= this
        end = min(start + this, r.until_offset)
        if end > start:
            out.append(OffsetRange(r.topic, r.partition, start, end))
        start = end
    return out


def _part_count(size: int, total: int, min_parts: int) -> int:
    # Scala's math.round rounds half up.
    return max(math.floor(size / total * min_parts + 0.5), 1)


def split_ranges(
    ranges: list[OffsetRange], min_partitions: int | None, max_records_per_partition: int | None
) -> list[OffsetRange]:
    """Spark partitions for the given non-empty ranges (Spark's KafkaOffsetRangeCalculator)."""
    ranges = [r for r in ranges if r.size > 0]
    if (
        min_partitions is None or len(ranges) >= min_partitions
    ) and max_records_per_partition is None:
        return ranges
    if max_records_per_partition is not None:
        divided = [
            piece
            for r in ranges
            for piece in _divide(math.ceil(r.size / max_records_per_partition), r)
        ]
    else:
        divided = ranges
    if min_partitions is None or min_partitions <= len(divided):
        return divided
    total = sum(r.size for r in divided)
    unsplit = [r for r in divided if _part_count(r.size, total, min_partitions) == 1]
    unsplit_tps = {(r.topic, r.partition) for r in unsplit}
    split_total = total - sum(r.size for r in unsplit)
    split_min = max(min_partitions - len(unsplit), 1)
    out: list[OffsetRange] = []
    for r in divided:
        if (r.topic, r.partition) in unsplit_tps or split_total <= 0:
            parts = 1
        else:
            parts = _part_count(r.size, split_total, split_min)
        out.extend(_divide(parts, r))
    return out
