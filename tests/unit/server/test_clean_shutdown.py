"""A clean stop of a node leaves nothing running and nothing to recover.

Kafka's clean shutdown (LogManager.shutdown) flushes and closes every log, writes the
recovery-point and log-start checkpoints and then the clean-shutdown marker, so that the
next start loads each log without recovery; and the broker's threads are stopped and
joined (KafkaScheduler, the log cleaner, the replica fetchers...). A real node runs in this
process: after `Node.stop` no thread of its pools is alive, each log dir holds the marker,
and the recovery point of each partition is its log end (the next start skips recovery:
`LogManager._submit_dir_loads`).
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from tests.unit.server.test_partition_creation import Conn, create_req, produce_req

from riverbed.protocol.api_versions import ApiKey
from riverbed.storage.checkpoints import RECOVERY_POINT_CHECKPOINT, read_offset_checkpoint
from riverbed.storage.log_manager import CLEAN_SHUTDOWN_FILE

#: the name prefixes of the node's worker threads (its ThreadPoolExecutors)
NODE_THREADS = (
    "producer-ledger-flush",
    "partition-log-work",
    "riverbed-flush",
    "riverbed-close",
    "riverbed-cleaner",
)


def _node_threads(before: set[threading.Thread]) -> list[str]:
    """The live pool threads started since ``before`` (not an earlier test's leftovers in
    this process)."""
    return sorted(
        t.name
        for t in threading.enumerate()
        if t.is_alive() and t not in before and t.name.startswith(NODE_THREADS)
    )


def test_a_clean_stop_joins_the_node_threads_and_leaves_no_recovery(tmp_path: Path) -> None:
    """Before: the producer ledger flush threads outlived the node (`PartitionManager.close`
    was never called on shutdown)."""

    async def scenario() -> list[str]:
        from riverbed.server.config import ServerConfig
        from riverbed.server.node import Node

        config = ServerConfig.load(
            None,
            [
                "listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
                "advertised.listeners=PLAINTEXT://127.0.0.1:0",
                f"log.dirs={tmp_path / 'data'}",
                "riverbed.http.listeners=",
            ],
        )
        before = set(threading.enumerate())
        node = Node(config)
        await node.start()
        try:
            host, port = node.bound_listeners["PLAINTEXT"]
            conn = Conn(*await asyncio.open_connection(host, port))
            assert (await conn.call(ApiKey.CREATE_TOPICS, 7, create_req("t", 2))).topics[
                0
            ].error_code == 0
            for _ in range(3):
                resp = await conn.call(ApiKey.PRODUCE, 9, produce_req("t", 0))
                assert resp.responses[0].partition_responses[0].error_code == 0
            # a producer ledger flush ran in its pool (as the housekeeping tick's do)
            node.partitions.ledger_flusher.submit(lambda: None).result()
            assert _node_threads(before), "the node's pools have threads while it serves"
            conn.writer.close()
        finally:
            await node.stop()
        return _node_threads(before)

    assert asyncio.run(scenario()) == []
    data = tmp_path / "data"
    assert (data / CLEAN_SHUTDOWN_FILE).exists()
    assert read_offset_checkpoint(data / RECOVERY_POINT_CHECKPOINT) == {("t", 0): 3, ("t", 1): 0}
