"""Kafka's topic name rules, defined once (the controller's) and used by every caller."""

from __future__ import annotations

import pytest

from riverbed.metadata.controller import TOPIC_NAME_LENGTH_MAX, topic_name_error
from riverbed.server.broker.cluster_info import valid_topic_name

NAMES = [
    "orders",
    "a.b_c-D9",
    "x" * TOPIC_NAME_LENGTH_MAX,
    "x" * (TOPIC_NAME_LENGTH_MAX + 1),
    "",
    ".",
    "..",
    "...",
    "has space",
    "emoji\u00e9",
    "trailing\n",
    "a/b",
]


@pytest.mark.parametrize("name", NAMES)
def test_metadata_and_create_topics_agree_on_every_name(name: str) -> None:
    assert valid_topic_name(name) == (topic_name_error(name) is None)


def test_a_trailing_newline_is_illegal() -> None:
    # a regex anchored with "$" matches before a final newline
    assert topic_name_error("trailing\n") is not None


def test_none_is_not_a_name() -> None:
    assert not valid_topic_name(None)
