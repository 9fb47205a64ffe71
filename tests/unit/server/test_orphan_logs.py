"""Start-up's stray-log clean-up never deletes a partition the metadata image still has.

Once the broker serves, new partition logs are created off the event loop: `apply_image`
only queues them (``_pending``) and the log creator opens them in a worker thread. The
node's start-up applies the image and then deletes the logs it found on disk that the
image does not have (a topic deleted while the broker was down). A queued partition is
in the image: its log on disk holds acknowledged records and must survive (a restart of
a single-node cluster lost every record of its topics this way).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.unit.server.test_leader_checks import NODE, _image

from riverbed.metadata.storage_format import uuid_to_str
from riverbed.protocol.records import SimpleRecord, build_batch
from riverbed.server.broker.partitions import PartitionManager
from riverbed.server.purgatory import Purgatory
from riverbed.storage.clock import ManualClock
from riverbed.storage.log_manager import LogManager

NOW_MS = 1_700_000_000_000


def _write_led_partition(logs_dir: Path) -> None:
    """A previous incarnation's log of partition t-1 (led by this node in `_image`)."""
    image = _image()
    logs = LogManager([logs_dir], ManualClock(NOW_MS))
    topic_id = uuid_to_str(image.topic("t").topic_id)
    plog = logs.get_or_create("t", 1, topic_id=topic_id)
    plog.append_as_leader(build_batch([SimpleRecord(b"acknowledged")], now_ms=NOW_MS), 0)
    plog.flush()
    logs.shutdown()


def test_a_partition_whose_log_is_still_being_created_is_not_an_orphan(tmp_path: Path) -> None:
    _write_led_partition(tmp_path / "logs")

    async def restart() -> int:
        logs = LogManager([tmp_path / "logs"], ManualClock(NOW_MS))
        partitions = PartitionManager(logs, NODE, {}, Purgatory())
        partitions.create_logs_off_loop()  # the broker serves: logs come from the creator
        partitions.apply_image(_image())
        partitions.delete_orphans()
        await asyncio.wait_for(partitions.settled(), 10)
        end = partitions.partitions[("t", 1)].log.log_end_offset
        logs.shutdown()
        return end

    assert asyncio.run(restart()) == 1
