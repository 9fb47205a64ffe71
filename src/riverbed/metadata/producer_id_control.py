"""AllocateProducerIds (api key 67): blocks of producer ids from the controller.

A broker hands out producer ids (InitProducerId) from a block the active controller
allocated to it; the controller writes ``ProducerIdsRecord(brokerId, brokerEpoch,
nextProducerId)`` to the metadata log, so the next block's start is in every replica's
image (``MetadataImage.next_producer_id``) and in every metadata snapshot. A block is
therefore never handed out twice: not after a controller failover (the new active
controller computes from the same committed image) nor after a restart (replay). Kafka's
``ProducerIdControlManager``: blocks of ``PRODUCER_ID_BLOCK_SIZE`` (1000); a request
naming an unknown broker or a stale broker epoch gets STALE_BROKER_EPOCH; running out of
the int64 space UNKNOWN_SERVER_ERROR.
"""

from __future__ import annotations

from typing import Final

from riverbed.metadata.control_common import ControllerBase, ControllerResult
from riverbed.metadata.image import MetadataImage
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    ProducerIdsRecord,
)

#: Producer ids per block (Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE).
PRODUCER_ID_BLOCK_SIZE: Final = 1000
_LONG_MAX: Final = 2**63 - 1


class ProducerIdControl(ControllerBase):
    def allocate_producer_ids(
        self, image: MetadataImage, request: AllocateProducerIdsRequest, now_ms: int
    ) -> ControllerResult:
        del now_ms
        reg = image.brokers.get(request.broker_id)
        if reg is None or (request.broker_epoch >= 0 and reg.broker_epoch != request.broker_epoch):
            return ControllerResult(
                [], AllocateProducerIdsResponse(error_code=int(ErrorCode.STALE_BROKER_EPOCH))
            )
        start = image.next_producer_id
        if start > _LONG_MAX - PRODUCER_ID_BLOCK_SIZE:
            return ControllerResult(
                [], AllocateProducerIdsResponse(error_code=int(ErrorCode.UNKNOWN_SERVER_ERROR))
            )
        record = ProducerIdsRecord(
            broker_id=request.broker_id,
            broker_epoch=reg.broker_epoch,
            next_producer_id=start + PRODUCER_ID_BLOCK_SIZE,
        )
        response = AllocateProducerIdsResponse(
            error_code=0, producer_id_start=start, producer_id_len=PRODUCER_ID_BLOCK_SIZE
        )
        return ControllerResult([record], response)
