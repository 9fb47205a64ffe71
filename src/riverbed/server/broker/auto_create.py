"""Metadata's topic auto-creation, one creation per topic name in flight on a broker.

Kafka's rule (AutoTopicCreationManager): a broker keeps the set of topics whose creation it
has sent to the controller (``inflightTopics``) and sends none of them again until that
creation has been answered or has timed out; a Metadata request for such a topic is not a
second CreateTopics. Several producers starting at once on a topic that does not exist
(``auto.create.topics.enable=true``) therefore cost the controller one creation, not one per
request.

riverbed's Metadata waits for the creation's answer (and for this node's image to show the
topic: `QuorumMetadata.auto_create_topic`) instead of answering UNKNOWN_TOPIC_OR_PARTITION
at once as Kafka's KRaft broker does, so a request for a topic already in flight joins that
creation and gets its answer. Bounded: at most `AUTO_CREATE_INFLIGHT_MAX` topics are in
flight per broker; a request for another one while that many are is answered as Kafka
answers a topic whose creation it did not send (UNKNOWN_TOPIC_OR_PARTITION, retriable: the
client asks again).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from riverbed.protocol.api_versions import SUPPORTED_VERSIONS, ApiKey
from riverbed.protocol.messages import CreateTopicsResponse
from riverbed.server.forwarding import Origin

#: Topics whose auto-creation one broker has in flight at most.
AUTO_CREATE_INFLIGHT_MAX = 1024
#: The CreateTopics version an auto-creation counts as against its client's mutation
#: quota: Kafka's broker sends the controller's latest usable one (strict since v6).
AUTO_CREATE_TOPICS_VERSION = SUPPORTED_VERSIONS[ApiKey.CREATE_TOPICS][1]

CreateTopic = Callable[[str, Origin | None], Awaitable[CreateTopicsResponse]]


class AutoTopicCreations:
    """The auto-creations this broker has in flight, by topic name."""

    def __init__(self, create: CreateTopic, inflight_max: int = AUTO_CREATE_INFLIGHT_MAX) -> None:
        self._create = create
        self.inflight_max = inflight_max
        self._inflight: dict[str, asyncio.Task[CreateTopicsResponse]] = {}

    @property
    def inflight(self) -> int:
        return len(self._inflight)

    async def create(self, name: str, origin: Origin | None = None) -> CreateTopicsResponse | None:
        """The controller's answer to creating ``name``: the creation already in flight
        if there is one, else a new one for ``origin`` (the client whose Metadata asked:
        its mutation quota pays, as in Kafka the first request's context goes in the
        Envelope); None when `inflight_max` others are in flight (not sent). A waiter
        that goes away (its connection closed) does not cancel the creation the others
        wait for."""
        task = self._inflight.get(name)
        if task is None:
            if len(self._inflight) >= self.inflight_max:
                return None
            task = asyncio.ensure_future(self._create(name, origin))
            self._inflight[name] = task
            task.add_done_callback(lambda done: self._finished(name, done))
        return await asyncio.shield(task)

    def _finished(self, name: str, task: asyncio.Task[CreateTopicsResponse]) -> None:
        if self._inflight.get(name) is task:
            del self._inflight[name]
        # every waiter may have gone: the outcome is theirs to log, never an unread error
        with contextlib.suppress(asyncio.CancelledError):
            task.exception()

    def close(self) -> None:
        """Cancel the creations still in flight (the broker is stopping)."""
        for task in list(self._inflight.values()):
            task.cancel()
