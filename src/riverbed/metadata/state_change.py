"""The controller's side of ``state-change.log`` (Kafka's state-change logger).

Each partition state change the active controller decides is logged once its records are
committed and replayed (the epochs are those replay gives), as one line::

    controller 1 decided orders-0: leader 2 at leader epoch 5, partition epoch 9,
    replicas [2, 3, 1], ISR [2, 3], adding [], removing [] (was leader 1 at leader epoch 4)

A new partition reads ``(was none)``; a deleted topic ``controller 1 decided orders:
deleted``. Brokers log the ``received`` and ``completed`` side of the same changes to the
same logger (``riverbed.server.replication.manager``), so a node's file tells a change's
whole lifecycle.

One CreateTopics of 10,000 partitions logs 10,000 lines: written at once they held the
active controller's event loop (every client of the node) for a second. `decision_slices`
logs them in slices of ``DECISION_SLICE_RECORDS`` records, and the asyncio shell lets the
loop run between two slices.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

from riverbed.metadata.image import MetadataImage
from riverbed.protocol.messages import (
    Message,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
)

state_change_log = logging.getLogger("riverbed.state.change")
#: Records `decision_slices` looks at (and lines it logs, at most) between two yields.
DECISION_SLICE_RECORDS = 100


def log_decisions(
    node_id: int, before: MetadataImage, after: MetadataImage, records: Sequence[Message]
) -> None:
    """Log what ``records`` (committed, replayed from ``before`` into ``after``) changed."""
    for _ in decision_slices(node_id, before, after, records):
        pass


def decision_slices(
    node_id: int,
    before: MetadataImage,
    after: MetadataImage,
    records: Sequence[Message],
    slice_records: int = DECISION_SLICE_RECORDS,
) -> Iterator[None]:
    """`log_decisions`, yielding after every ``slice_records`` records (the caller may
    let other work run there: the images are immutable, the lines keep their order)."""
    if not state_change_log.isEnabledFor(logging.INFO):
        return
    seen: set[tuple[object, int]] = set()
    for done, record in enumerate(records, 1):
        if done % slice_records == 0:
            yield
        if isinstance(record, RemoveTopicRecord):
            gone = before.topic_by_id(record.topic_id)
            if gone is not None:
                state_change_log.info("controller %d decided %s: deleted", node_id, gone.name)
            continue
        if not isinstance(record, PartitionRecord | PartitionChangeRecord):
            continue
        key = (record.topic_id, record.partition_id)
        if key in seen:
            continue  # several records of one partition: its final state once
        seen.add(key)
        topic = after.topic_by_id(record.topic_id)
        reg = topic.partition(record.partition_id) if topic is not None else None
        if topic is None or reg is None:
            continue
        old_topic = before.topic_by_id(record.topic_id)
        old = old_topic.partition(record.partition_id) if old_topic is not None else None
        if old == reg:
            continue
        was = "none" if old is None else f"leader {old.leader} at leader epoch {old.leader_epoch}"
        state_change_log.info(
            "controller %d decided %s-%d: leader %d at leader epoch %d, partition epoch %d, "
            "replicas %s, ISR %s, adding %s, removing %s (was %s)",
            node_id,
            topic.name,
            record.partition_id,
            reg.leader,
            reg.leader_epoch,
            reg.partition_epoch,
            list(reg.replicas),
            list(reg.isr),
            list(reg.adding_replicas),
            list(reg.removing_replicas),
            was,
        )
