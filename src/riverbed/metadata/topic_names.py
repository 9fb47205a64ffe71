"""Kafka's topic name rules, and the names and ids one CreateTopics request may not reuse.

A topic name is 1 to 249 characters of ASCII alphanumerics, '.', '_' and '-', and not "."
or ".." (Kafka's Topic.validate). Two names that differ only in '.' versus '_' collide (they
share metric names), so a new topic may not take one whose unified form is taken.
"""

from __future__ import annotations

import re
import uuid

from riverbed.metadata.control_common import ControllerError
from riverbed.metadata.image import MetadataImage
from riverbed.protocol.errors import ErrorCode

TOPIC_NAME_LENGTH_MAX = 249
#: Kafka's internal topics (``Topic.INTERNAL_TOPICS``): Metadata marks these, and only these,
#: ``is_internal`` (clients' ``exclude.internal.topics`` hides them from pattern
#: subscriptions; a user topic named ``__events`` is not internal), and no client adds them
#: to a transaction.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")


def is_internal_topic(name: str) -> bool:
    """Kafka's ``Topic.isInternal``."""
    return name in INTERNAL_TOPICS


def topic_name_error(name: str) -> str | None:
    """Kafka's Topic.validate: None when `name` is a legal topic name."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return 'Topic name cannot be "." or ".."'
    if len(name) > TOPIC_NAME_LENGTH_MAX:
        return (
            f"Topic name is illegal, it can't be longer than {TOPIC_NAME_LENGTH_MAX} "
            f"characters, topic name: {name}"
        )
    if not _LEGAL_TOPIC.fullmatch(name):
        return (
            f'Topic name "{name}" is illegal, it contains a character other than ASCII '
            "alphanumerics, '.', '_' and '-'"
        )
    return None


def _unify(name: str) -> str:
    # '.' and '_' collide in metric names, so Kafka refuses topics differing only there.
    return name.replace(".", "_")


class TakenTopics:
    """The topic names and ids a CreateTopics request must not reuse: the image's and
    those of the request's earlier topics. Kafka's collision rule ('.' and '_' unified)
    is a lookup in an index built once per request, so a request of N topics costs
    O(existing + N), not O(N x existing) (a request of 10,000 topics took minutes)."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.unified: dict[str, str] = {_unify(n): n for n in image.topics_by_name}
        self.ids: set[uuid.UUID] = set()

    def check_new_name(self, name: str) -> None:
        """Kafka's rules: a valid name, not taken, and no collision with an existing name
        once '.' and '_' are unified (they share metric names)."""
        problem = topic_name_error(name)
        if problem is not None:
            raise ControllerError(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
        other = self.unified.get(_unify(name))
        if other == name:
            raise ControllerError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        if other is not None:
            raise ControllerError(
                ErrorCode.INVALID_TOPIC_EXCEPTION,
                f"Topic '{name}' collides with existing topic: {other}",
            )

    def id_taken(self, topic_id: uuid.UUID) -> bool:
        return topic_id in self.image.topics_by_id or topic_id in self.ids

    def add(self, name: str, topic_id: uuid.UUID) -> None:
        self.unified[_unify(name)] = name
        self.ids.add(topic_id)
