"""Fit a response built for the newest version to the version the client asked for.

Handlers build one response shape for all versions; fields a lower version cannot carry
are reset to their schema defaults here (the codec refuses to write a non-default value
of a non-ignorable field that the version lacks, rightly: the client would never see
it). Produce and Fetch skip this walk (hot path) and are built version-correct.
"""

from __future__ import annotations

from typing import TypeVar

from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import DeleteTopicsResponse, Message, message_spec
from riverbed.protocol.schema import StructSpec

M = TypeVar("M", bound=Message)


def _fit_struct(obj: Message, spec: StructSpec, version: int) -> None:
    for f in spec.fields:
        if version not in f.versions:
            if not f.ignorable:
                setattr(obj, f.attr, f.default())
            continue
        if f.struct is None:
            continue
        value = getattr(obj, f.attr)
        if value is None:
            continue
        if f.is_array:
            for item in value:
                _fit_struct(item, f.struct, version)
        else:
            _fit_struct(value, f.struct, version)


#: DeleteTopics answers TOPIC_DELETION_DISABLED from this version on; Kafka's controller
#: refuses an older request with ``InvalidRequestException("Topic deletion is disabled.")``
#: instead, an error every version's clients know.
DELETE_TOPICS_DELETION_DISABLED_VERSION = 3


def fit_to_version(msg: M, version: int) -> M:
    """Reset, in place, the fields ``msg`` cannot carry at ``version``, and answer with an
    older error an error code the version does not have; returns ``msg``."""
    _fit_struct(msg, message_spec(msg).struct, version)
    if isinstance(msg, DeleteTopicsResponse) and version < DELETE_TOPICS_DELETION_DISABLED_VERSION:
        for result in msg.responses:
            if result.error_code == ErrorCode.TOPIC_DELETION_DISABLED:
                result.error_code = ErrorCode.INVALID_REQUEST
    return msg
