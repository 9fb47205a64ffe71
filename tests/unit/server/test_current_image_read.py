"""The node's current metadata image is read several times per request (the Produce
check in `Broker._handle`, the produce handler, quotas): `QuorumMetadata.image` and
`MetadataService.image` are attributes set when an image is published, not properties.

Under callgrind a broker's 15-record Produce ran ~720,000 instructions; the property chain
`QuorumMetadata.image` -> `MetadataService.image` cost ~970 of them per read (two Python
frames), and the authorizer's Produce check added one more read per request than a broker
without an authorizer (benchmarks/RESULTS.md, "The authorizer's cost ... counted")."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from types import FrameType

from tests.unit.server.test_forward_retries import quorum_of_one

from riverbed.metadata.image import MetadataImage
from riverbed.protocol.messages import TopicRecord
from riverbed.server.quorum import QuorumMetadata


def _python_calls_reading(quorum: QuorumMetadata) -> tuple[MetadataImage, list[str]]:
    calls: list[str] = []

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event == "call":
            calls.append(frame.f_code.co_qualname)

    sys.setprofile(profile)
    try:
        image = quorum.image
        image = quorum.service.image
    finally:
        sys.setprofile(None)
    return image, calls


def test_reading_the_current_image_calls_no_python_function(tmp_path: Path) -> None:
    quorum = quorum_of_one(tmp_path)
    image, calls = _python_calls_reading(quorum)
    assert calls == [] and image is quorum.service.image


def test_a_published_image_is_current_before_any_listener_runs(tmp_path: Path) -> None:
    """Listeners (the partition manager, the views) read the current image while they
    react to a new one: it is already the new one, from the quorum and from the service."""
    quorum = quorum_of_one(tmp_path)
    seen: list[bool] = []
    quorum.add_listener(
        lambda old, new, delta: seen.append(quorum.image is new and quorum.service.image is new)
    )
    record = TopicRecord(name="orders", topic_id=uuid.UUID(int=1))
    quorum.service.apply_committed([(0, record)])
    assert seen == [True]
    assert quorum.image.topic("orders") is not None
    image, calls = _python_calls_reading(quorum)
    assert calls == [] and image is quorum.image
