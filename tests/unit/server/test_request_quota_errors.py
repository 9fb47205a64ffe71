"""A failing handler's time counts against the request quota (``request_percentage``), as
in Kafka: KafkaApis.handle's ``handleError`` answers through
RequestHandlerHelper.sendErrorResponseMaybeThrottle, which records the request's handler
time and puts the throttle in the error response (and mutes the channel). Exempt, as
``handleError`` decides: the errors of Kafka's ``clusterAction`` APIs (here
UpdateFeatures), unless they are a ClusterAuthorizationException.

A real node runs in this process with handlers replaced by ones that work for a while and
then raise (a handler bug cannot be provoked from outside a real broker process).
"""

from __future__ import annotations

import asyncio
import itertools
import struct
import time
from pathlib import Path
from typing import Any

import pytest

from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.headers import RequestHeader, decode_response, encode_request
from riverbed.protocol.messages import (
    AlterClientQuotasRequest,
    ListOffsetsRequest,
    UpdateFeaturesRequest,
)
from riverbed.server.broker import dispatch

CLIENT_ID = "crashy"
#: requests sent at most before the client must have been throttled
REQUESTS_MAX = 300
U = int(ErrorCode.UNKNOWN_SERVER_ERROR)


async def _busy_then_boom(broker: Any, ctx: Any, req: Any) -> Any:
    end = time.perf_counter() + 0.002  # 2 ms of handler time: 20 times the quota's second
    while time.perf_counter() < end:
        pass
    raise RuntimeError("handler bug for the test")


class _Client:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.ids = itertools.count(1)

    async def call(self, api: int, version: int, body: Any) -> Any:
        header = RequestHeader(api, version, next(self.ids), CLIENT_ID)
        self.writer.write(encode_request(header, body))
        await self.writer.drain()
        (size,) = struct.unpack(">i", await asyncio.wait_for(self.reader.readexactly(4), 20))
        return decode_response(header, await asyncio.wait_for(self.reader.readexactly(size), 20))


def _list_offsets() -> ListOffsetsRequest:
    L = ListOffsetsRequest
    return L(
        replica_id=-1,
        topics=[
            L.ListOffsetsTopic(
                name="t", partitions=[L.ListOffsetsPartition(partition_index=0, timestamp=-1)]
            )
        ],
    )


def _request_percentage(percent: float) -> AlterClientQuotasRequest:
    A = AlterClientQuotasRequest
    return A(
        entries=[
            A.EntryData(
                entity=[A.EntityData(entity_type="client-id", entity_name=CLIENT_ID)],
                ops=[A.OpData(key="request_percentage", value=percent)],
            )
        ]
    )


def test_a_failing_handlers_time_is_counted_and_throttled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from riverbed.server.config import ServerConfig
    from riverbed.server.node import Node

    monkeypatch.setitem(dispatch.HANDLERS, ApiKey.LIST_OFFSETS, _busy_then_boom)
    monkeypatch.setitem(dispatch.HANDLERS, ApiKey.UPDATE_FEATURES, _busy_then_boom)
    config = ServerConfig.load(
        None,
        [
            "listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
            "advertised.listeners=PLAINTEXT://127.0.0.1:0",
            f"log.dirs={tmp_path / 'data'}",
            "riverbed.http.listeners=",  # no fixed port: another node may hold 9644
            "quota.window.num=2",
        ],
    )

    async def scenario() -> None:
        node = Node(config)
        await node.start()
        try:
            client = _Client(*await asyncio.open_connection(*node.bound_listeners["PLAINTEXT"]))
            altered = await client.call(ApiKey.ALTER_CLIENT_QUOTAS, 1, _request_percentage(0.01))
            assert [e.error_code for e in altered.entries] == [0]
            for _ in range(REQUESTS_MAX):
                sent = time.monotonic()
                failed = await client.call(ApiKey.LIST_OFFSETS, 7, _list_offsets())
                assert failed.topics[0].partitions[0].error_code == U
                if failed.throttle_time_ms > 0:
                    break
            assert failed.throttle_time_ms > 0, "failing requests were never throttled"
            # muted: the next request is not handled before the throttle ends
            update = UpdateFeaturesRequest(timeout_ms=1000, feature_updates=[])
            exempt = await client.call(ApiKey.UPDATE_FEATURES, 1, update)
            assert time.monotonic() - sent >= (failed.throttle_time_ms - 1) / 1000
            # a cluster action's failure: answered without the quota, over it or not
            assert (exempt.error_code, exempt.throttle_time_ms) == (U, 0)
            client.writer.close()
        finally:
            await node.stop()

    asyncio.run(scenario())
