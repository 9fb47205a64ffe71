"""leader_epoch_error: Kafka's checkCurrentLeaderEpoch for Fetch, ListOffsets and
OffsetForLeaderEpoch partitions."""

from __future__ import annotations

from types import SimpleNamespace

from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import ListOffsetsRequest, decode, encode
from riverbed.server.broker.hosted import leader_epoch_error


def test_newer_is_unknown_older_is_fenced_and_minus_one_or_absent_is_not_checked() -> None:
    def claim(epoch: int) -> SimpleNamespace:
        return SimpleNamespace(current_leader_epoch=epoch)

    assert leader_epoch_error(claim(6), 5) is ErrorCode.UNKNOWN_LEADER_EPOCH
    assert leader_epoch_error(claim(4), 5) is ErrorCode.FENCED_LEADER_EPOCH
    assert leader_epoch_error(claim(0), 5) is ErrorCode.FENCED_LEADER_EPOCH
    assert leader_epoch_error(claim(5), 5) is None
    assert leader_epoch_error(claim(-1), 5) is None
    # versions without the field (e.g. ListOffsets v0-v3) never check it
    LO = ListOffsetsRequest
    v0 = LO(topics=[LO.ListOffsetsTopic(name="t", partitions=[LO.ListOffsetsPartition()])])
    old = decode(LO, encode(v0, 0), 0).topics[0].partitions[0]
    assert leader_epoch_error(old, 5) is None
