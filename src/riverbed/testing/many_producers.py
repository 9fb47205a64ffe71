"""Many distinct idempotent producers against one broker (tests and benchmarks).

``many_producers(port, topic, n)``: ``n`` producer ids, each from an InitProducerId and
used for one idempotent one-record batch (sequence 0) to partition 0 of ``topic``,
pipelined ``ROUND`` requests at a time on one connection (riverbed's own codec);
``rss_mib(pid)`` is a process's resident memory from ``/proc``.
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Any, Final

from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.headers import RequestHeader, decode_response, encode_request
from riverbed.protocol.messages import (
    CreateTopicsRequest,
    InitProducerIdRequest,
    ProduceRequest,
)
from riverbed.protocol.records import SimpleRecord, build_batch

__all__ = ["ROUND", "Pipe", "create_topic", "many_producers", "rss_mib"]

#: Requests in flight per round trip.
ROUND: Final = 1000
_SIZE: Final = struct.Struct(">i")


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class Pipe:
    """Pipelined raw Kafka requests on one connection."""

    def __init__(self, port: int, timeout_s: float = 60.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        self.reader = self.sock.makefile("rb")
        self.corr = 0

    def call_many(self, key: int, version: int, bodies: list[Any]) -> list[Any]:
        headers = []
        out = bytearray()
        for body in bodies:
            self.corr += 1
            h = RequestHeader(key, version, self.corr, "many-producers")
            headers.append(h)
            out += encode_request(h, body)
        self.sock.sendall(out)
        answers = []
        for h in headers:
            (size,) = _SIZE.unpack(self.reader.read(4))
            answers.append(decode_response(h, self.reader.read(size)))
        return answers

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


def create_topic(pipe: Pipe, topic: str) -> None:
    ct = CreateTopicsRequest
    (resp,) = pipe.call_many(
        ApiKey.CREATE_TOPICS,
        7,
        [ct(topics=[ct.CreatableTopic(name=topic, num_partitions=1, replication_factor=1)])],
    )
    if resp.topics[0].error_code:
        raise RuntimeError(f"CreateTopics {topic}: error {resp.topics[0].error_code}")


def _produce(topic: str, pid: int, now: int) -> ProduceRequest:
    batch = build_batch(
        [SimpleRecord(b"x", timestamp=now)], producer_id=pid, producer_epoch=0, base_sequence=0
    )
    return ProduceRequest(
        acks=1,
        timeout_ms=30000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)],
            )
        ],
    )


def many_producers(pipe: Pipe, topic: str, n: int) -> list[int]:
    """Run ``n`` producers (InitProducerId + one batch each); their producer ids."""
    init = InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000)
    ids: list[int] = []
    while len(ids) < n:
        count = min(ROUND, n - len(ids))
        answers = pipe.call_many(ApiKey.INIT_PRODUCER_ID, 4, [init] * count)
        pids = [r.producer_id for r in answers if r.error_code == 0]
        now = int(time.time() * 1000)
        for r in pipe.call_many(ApiKey.PRODUCE, 9, [_produce(topic, p, now) for p in pids]):
            code = r.responses[0].partition_responses[0].error_code
            if code:
                raise RuntimeError(f"produce failed with error {code}")
        ids += pids
    return ids
