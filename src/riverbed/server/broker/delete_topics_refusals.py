"""The topics of a DeleteTopics that the authorizer refused, answered as Kafka's
ControllerApis.deleteTopics answers them.

Kafka resolves ids to names, then asks which names the principal may DESCRIBE and which it
may DELETE, and answers each topic in this order:

- named by id, not deletable: TOPIC_AUTHORIZATION_FAILED, with the topic's name when the
  principal may DESCRIBE it, without (the name stays hidden) when not;
- named by name: not describable -> TOPIC_AUTHORIZATION_FAILED; absent ->
  UNKNOWN_TOPIC_OR_PARTITION (the controller's findTopicIds); not deletable ->
  TOPIC_AUTHORIZATION_FAILED. So a principal that may DESCRIBE a topic learns it does not
  exist (as Metadata would tell it), one that may not learns nothing.

riverbed's authorizer refuses on DELETE alone (`riverbed.security.api_operations`); this
re-answers those refusals. The absent topics are answered here, never handed to the
controller: one created meanwhile must not be deleted by a principal without DELETE.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

from riverbed.metadata.image import MetadataImage
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import DeleteTopicsRequest, Message
from riverbed.protocol.primitives import ZERO_UUID

_State = DeleteTopicsRequest.DeleteTopicState


def refused_deletions(
    image: MetadataImage,
    may_describe: Callable[[str], bool],
    refused: list[tuple[ErrorCode, Message]],
) -> list[tuple[ErrorCode, Message]]:
    """``refused`` (error code, the part of the request refused with it) re-answered:
    topics named by id given their name when describable, absent describable topics
    named by name moved to an UNKNOWN_TOPIC_OR_PARTITION part."""

    def absent(name: str | None) -> bool:
        return name is not None and image.topic(name) is None and may_describe(name)

    out: list[tuple[ErrorCode, Message]] = []
    unknown_states: list[_State] = []
    unknown_names: list[str] = []
    for code, part in refused:
        if not isinstance(part, DeleteTopicsRequest):
            out.append((code, part))
            continue
        states: list[_State] = []
        for state in part.topics:  # v6+
            if state.topic_id == ZERO_UUID and absent(state.name):
                unknown_states.append(state)
            else:
                states.append(_named(image, may_describe, state))
        names: list[str] = []
        for name in part.topic_names:  # v0-5
            (unknown_names if absent(name) else names).append(name)
        if states or names:
            out.append((code, _with(part, states, names)))
    if unknown_states or unknown_names:
        template = refused[0][1]
        assert isinstance(template, DeleteTopicsRequest)
        gone = _with(template, unknown_states, unknown_names)
        out.append((ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, gone))
    return out


def _with(req: DeleteTopicsRequest, states: list[_State], names: list[str]) -> DeleteTopicsRequest:
    part = copy.copy(req)
    part.topics = states
    part.topic_names = names
    return part


def _named(image: MetadataImage, may_describe: Callable[[str], bool], state: _State) -> _State:
    """A topic named by id, given its name when the principal may DESCRIBE it."""
    by_id = None if state.name else image.topics_by_id.get(state.topic_id)
    if by_id is None or not may_describe(by_id.name):
        return state
    named = copy.copy(state)
    named.name = by_id.name
    return named
