"""The controller's side of ``state-change.log`` (Kafka's state-change logger).

Each partition state change the active controller decides is logged once its records are
committed and replayed (the epochs are those replay gives), as one line::

    controller 1 decided orders-0: leader 2 at leader epoch 5, partition epoch 9,
    replicas [2, 3, 1], ISR [2, 3], adding [], removing [] (was leader 1 at leader epoch 4)

A new partition reads ``(was none)``; a deleted topic ``controller 1 decided orders:
deleted``. Brokers log the ``received`` and ``completed`` side of the same changes to the
same logger (``riverbed.server.replication.manager``), so a node's file tells a change's
whole lifecycle.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from riverbed.metadata.image import MetadataImage
from riverbed.protocol.messages import (
    Message,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
)

state_change_log = logging.getLogger("riverbed.state.change")


def log_decisions(
    node_id: int, before: MetadataImage, after: MetadataImage, records: Sequence[Message]
) -> None:
    """Log what ``records`` (committed, replayed from ``before`` into ``after``) changed."""
    if not state_change_log.isEnabledFor(logging.INFO):
        return
    seen: set[tuple[object, int]] = set()
    for record in records:
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
