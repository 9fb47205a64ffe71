import uuid
from collections.abc import Sequence

import pytest

from riverbed.metadata.controller import Controller, ControllerConfig
from riverbed.metadata.image import BrokerEndpoint, BrokerRegistration, MetadataImage, replay_all
from riverbed.server.metadata_service import MetadataService


class SeqUuids:
    """Deterministic topic ids for tests."""

    def __init__(self, start: int = 1000) -> None:
        self.n = start

    def __call__(self) -> uuid.UUID:
        self.n += 1
        return uuid.UUID(int=self.n << 64 | self.n)


def make_controller(**kw) -> Controller:
    cfg = ControllerConfig(node_id=1, **kw)
    return Controller(cfg, uuid_factory=SeqUuids())


def register_live(
    controller: Controller, image: MetadataImage, broker_id: int, rack: str | None = None
) -> MetadataImage:
    """`image` with `broker_id` registered (a new incarnation) and unfenced by its first
    caught-up heartbeat."""
    endpoint = [BrokerEndpoint("PLAINTEXT", "localhost", 9090 + broker_id)]
    res = controller.register_broker(image, broker_id, uuid.uuid4(), endpoint, rack, 0)
    image = replay_all(image, res.records)
    up = controller.unfence_broker(image, broker_id, -1, 0, metadata_offset=image.offset)
    return replay_all(image, up.records)


async def register_unfenced(
    svc: MetadataService, broker_id: int, endpoints: Sequence[BrokerEndpoint] = ()
) -> BrokerRegistration:
    """Register `broker_id` with the service and unfence it (its caught-up heartbeat)."""
    reg = await svc.register_broker(broker_id, endpoints)
    return await svc.unfence_broker(broker_id, reg.broker_epoch, svc.image.offset)


def cluster_image(controller: Controller, brokers: int = 1) -> MetadataImage:
    image = replay_all(MetadataImage.EMPTY, controller.bootstrap_records())
    for b in range(1, brokers + 1):
        res = controller.register_broker(
            image,
            b,
            uuid.UUID(int=b),
            [BrokerEndpoint("PLAINTEXT", "localhost", 9090 + b)],
            None,
            0,
        )
        image = replay_all(image, res.records)
        # registrations start fenced; the broker's first caught-up heartbeat unfences it
        up = controller.unfence_broker(image, b, -1, 0, metadata_offset=image.offset)
        image = replay_all(image, up.records)
    return image


@pytest.fixture
def controller() -> Controller:
    return make_controller()


@pytest.fixture
def image(controller: Controller) -> MetadataImage:
    return cluster_image(controller)
