"""AllocateProducerIds: blocks of 1000 from the image, never reused after replay/restart."""

import asyncio

from riverbed.metadata.image import BrokerEndpoint, MetadataImage, image_to_records, replay_all
from riverbed.metadata.producer_id_control import PRODUCER_ID_BLOCK_SIZE
from riverbed.producer.id_blocks import IdBlock, ProducerIdBlocks
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import AllocateProducerIdsRequest
from riverbed.server.metadata_log import LocalMetadataLog
from riverbed.server.metadata_service import MetadataService

from .conftest import cluster_image, make_controller, register_unfenced


def req(broker: int, epoch: int) -> AllocateProducerIdsRequest:
    return AllocateProducerIdsRequest(broker_id=broker, broker_epoch=epoch)


def test_blocks_are_consecutive_and_survive_snapshot_replay() -> None:
    c = make_controller()
    image = cluster_image(c, brokers=2)
    starts = []
    for broker in (1, 2, 1):
        res = c.allocate_producer_ids(image, req(broker, image.brokers[broker].broker_epoch), 0)
        assert res.response.error_code == 0
        assert res.response.producer_id_len == PRODUCER_ID_BLOCK_SIZE
        starts.append(res.response.producer_id_start)
        image = replay_all(image, res.records)
    assert starts == [0, 1000, 2000] and image.next_producer_id == 3000
    # a new controller that loads a snapshot of this image continues after the last block
    reloaded = replay_all(MetadataImage.EMPTY, list(image_to_records(image)))
    res = make_controller().allocate_producer_ids(reloaded, req(1, -1), 0)
    assert res.response.producer_id_start == 3000


def test_stale_broker_epoch_or_unknown_broker() -> None:
    c = make_controller()
    image = cluster_image(c)
    stale = c.allocate_producer_ids(image, req(1, image.brokers[1].broker_epoch + 5), 0)
    assert stale.response.error_code == ErrorCode.STALE_BROKER_EPOCH and not stale.records
    unknown = c.allocate_producer_ids(image, req(9, 0), 0)
    assert unknown.response.error_code == ErrorCode.STALE_BROKER_EPOCH


class FixedClock:
    def now_ms(self) -> int:
        return 1_700_000_000_000


def test_service_persists_next_block_across_restart(tmp_path) -> None:
    async def run() -> int:
        svc = MetadataService(make_controller(), LocalMetadataLog(tmp_path), FixedClock(), "c")
        await svc.start()
        reg = await register_unfenced(svc, 1, [BrokerEndpoint("PLAINTEXT", "127.0.0.1", 9092)])
        resp = await svc.allocate_producer_ids(req(1, reg.broker_epoch))
        svc.close()
        return int(resp.producer_id_start)

    first = asyncio.run(run())
    second = asyncio.run(run())
    assert second == first + PRODUCER_ID_BLOCK_SIZE


def test_broker_blocks_hand_out_in_order_and_prefetch_at_90_percent() -> None:
    b = ProducerIdBlocks()
    assert b.next_id() is None and b.needs_prefetch()
    b.add_block(IdBlock(1000, 10))
    got = [b.next_id() for _ in range(8)]
    assert got == list(range(1000, 1008)) and not b.needs_prefetch()
    assert b.next_id() == 1008 and b.needs_prefetch()  # 9 of 10 used
    b.add_block(IdBlock(5000, 10))
    assert not b.needs_prefetch()
    assert [b.next_id(), b.next_id(), b.next_id()] == [1009, 5000, 5001]
