import uuid

import pytest

from riverbed.metadata.controller import Controller, ControllerConfig
from riverbed.metadata.image import BrokerEndpoint, MetadataImage, replay_all


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
    return image


@pytest.fixture
def controller() -> Controller:
    return make_controller()


@pytest.fixture
def image(controller: Controller) -> MetadataImage:
    return cluster_image(controller)
