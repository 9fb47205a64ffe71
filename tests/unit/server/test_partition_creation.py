"""Partition logs are created off the event loop once the node serves.

A real node runs in this process; its log manager's ``get_or_create`` is held at a gate
(a threading.Event) so a creation is "slow" for as long as the test wants:

- other connections are served while a CreateTopics waits for its logs, and the
  CreateTopics answer comes only once they exist (produce right after it succeeds);
- a topic deleted while its logs are being created leaves no log behind, and a topic of
  the same name created afterwards starts empty.
"""

from __future__ import annotations

import asyncio
import itertools
import struct
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.headers import RequestHeader, decode_response, encode_request
from riverbed.protocol.messages import (
    ApiVersionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    ProduceRequest,
)
from riverbed.protocol.records import SimpleRecord, build_batch

#: Liveness bound for any one wait (not a timing under test).
WAIT_S = 20.0


class Conn:
    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, wait_s: float = WAIT_S
    ) -> None:
        self.reader, self.writer = reader, writer
        self.ids = itertools.count(1)
        self.wait_s = wait_s  # liveness bound of one answer

    def send(self, api: int, version: int, body: Any) -> RequestHeader:
        header = RequestHeader(api, version, next(self.ids), "creation-test")
        self.writer.write(encode_request(header, body))
        return header

    async def recv(self, header: RequestHeader) -> Any:
        header_bytes = await asyncio.wait_for(self.reader.readexactly(4), self.wait_s)
        (size,) = struct.unpack(">i", header_bytes)
        frame = await asyncio.wait_for(self.reader.readexactly(size), self.wait_s)
        return decode_response(header, frame)

    async def call(self, api: int, version: int, body: Any) -> Any:
        return await self.recv(self.send(api, version, body))


def create_req(name: str, partitions: int) -> Any:
    C = CreateTopicsRequest
    return C(
        topics=[C.CreatableTopic(name=name, num_partitions=partitions, replication_factor=1)],
        timeout_ms=10_000,
    )


def produce_req(name: str, partition: int) -> Any:
    P = ProduceRequest
    records = build_batch([SimpleRecord(b"v")], now_ms=1_700_000_000_000)
    return P(
        acks=-1,
        timeout_ms=5000,
        topic_data=[
            P.TopicProduceData(
                name=name, partition_data=[P.PartitionProduceData(index=partition, records=records)]
            )
        ],
    )


@asynccontextmanager
async def gated_node(
    tmp_path: Path,
) -> AsyncIterator[tuple[Any, threading.Event, Callable[[], Any]]]:
    from riverbed.server.config import ServerConfig
    from riverbed.server.node import Node

    config = ServerConfig.load(
        None,
        [
            "listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
            "advertised.listeners=PLAINTEXT://127.0.0.1:0",
            f"log.dirs={tmp_path / 'data'}",
            "riverbed.http.listeners=",  # no fixed port: another node may hold 9644
        ],
    )
    node = Node(config)
    await node.start()
    gate = threading.Event()
    lm = node.log_manager
    original = lm.get_or_create

    def held(*args: Any, **kw: Any) -> Any:
        assert gate.wait(WAIT_S), "the test never opened the gate"
        return original(*args, **kw)

    lm.get_or_create = held
    host, port = node.bound_listeners["PLAINTEXT"]

    async def connect() -> Conn:
        return Conn(*await asyncio.open_connection(host, port))

    try:
        yield node, gate, connect
    finally:
        gate.set()
        await node.stop()


def test_other_clients_are_served_while_logs_are_created(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with gated_node(tmp_path) as (node, gate, connect):
            a, b = await connect(), await connect()
            pending = asyncio.ensure_future(a.call(ApiKey.CREATE_TOPICS, 7, create_req("t", 3)))
            # The creation is held in its thread; the event loop still answers others.
            versions = await b.call(ApiKey.API_VERSIONS, 3, ApiVersionsRequest())
            assert versions.error_code == 0
            await asyncio.sleep(0.05)
            assert not pending.done(), "CreateTopics answered before its logs exist"
            gate.set()
            created = await pending
            assert created.topics[0].error_code == 0
            # Answered only once every log exists: the last partition takes data at once.
            resp = await a.call(ApiKey.PRODUCE, 9, produce_req("t", 2))
            assert resp.responses[0].partition_responses[0].error_code == 0
            assert sorted(k for k in node.partitions.partitions if k[0] == "t") == [
                ("t", 0),
                ("t", 1),
                ("t", 2),
            ]

    asyncio.run(scenario())


def test_topic_deleted_while_its_logs_are_created_leaves_no_log(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with gated_node(tmp_path) as (node, gate, connect):
            a, b = await connect(), await connect()
            pending = asyncio.ensure_future(a.call(ApiKey.CREATE_TOPICS, 7, create_req("d", 3)))
            await asyncio.sleep(0.05)  # the first log's creation is now held at the gate
            D = DeleteTopicsRequest
            deleted = await b.call(
                ApiKey.DELETE_TOPICS, 6, D(topics=[D.DeleteTopicState(name="d")], timeout_ms=5000)
            )
            assert deleted.responses[0].error_code == 0
            gate.set()
            assert (await pending).topics[0].error_code == 0
            assert [k for k in node.partitions.partitions if k[0] == "d"] == []
            assert [k for k in node.log_manager.all_logs() if k[0] == "d"] == []
            # The name is free again, and the new topic starts empty.
            assert (await b.call(ApiKey.CREATE_TOPICS, 7, create_req("d", 1))).topics[
                0
            ].error_code == 0
            resp = await b.call(ApiKey.PRODUCE, 9, produce_req("d", 0))
            part = resp.responses[0].partition_responses[0]
            assert (part.error_code, part.base_offset) == (0, 0)

    asyncio.run(scenario())
