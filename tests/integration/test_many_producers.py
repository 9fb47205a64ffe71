"""Many distinct idempotent producers against one broker: resident memory stays bounded
(issue 14; the benchmark runs one million, this test 60,000 to stay short).

With ``producer.id.cache.max.entries`` 1,000 and 256 KiB ledger files, 60,000 producer
ids cost the broker the ledger's Bloom filters (~1.2 bytes per id), one active file and
a 1,000-entry cache: a few MiB. The same ids kept as Kafka keeps them (a Python object per
producer: ~350 bytes each, measured by the benchmark) would take ~20 MiB more than that;
the bound sits between the two (12 MiB of growth, allocator noise included).
"""

from __future__ import annotations

import time

import pytest

from riverbed.testing.cluster import BrokerProcess
from riverbed.testing.many_producers import Pipe, create_topic, many_producers, rss_mib

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

PRODUCERS = 60_000
GROWTH_MAX_MIB = 12.0


def test_resident_memory_stays_bounded_with_many_producer_ids() -> None:
    overrides = {
        "producer.id.cache.max.entries": "1000",
        "riverbed.producer.id.ledger.file.bytes": str(256 * 1024),
    }
    with BrokerProcess(overrides=overrides) as broker:
        assert broker.pid is not None
        pipe = Pipe(broker.port)
        try:
            create_topic(pipe, "many")
            many_producers(pipe, "many", 2000)  # warm up: code paths, buffers, first blocks
            time.sleep(0.5)
            before = rss_mib(broker.pid)
            ids = many_producers(pipe, "many", PRODUCERS)
            after = rss_mib(broker.pid)
        finally:
            pipe.close()
        assert len(set(ids)) == PRODUCERS
        growth = after - before
        print(f"{PRODUCERS} producer ids: broker RSS {before:.1f} -> {after:.1f} MiB")
        assert growth < GROWTH_MAX_MIB, f"resident memory grew {growth:.1f} MiB"
        # the ids left memory for sealed ledger files (10-byte header, 46-byte entries)
        sealed = (broker.data_dir / "many-0").glob("*.snapshot")
        on_disk = sum((p.stat().st_size - 10) // 46 for p in sealed)
        assert on_disk >= PRODUCERS * 0.8, on_disk
