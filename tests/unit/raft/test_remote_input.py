"""Remote input that no correct peer sends is rejected by explicit checks, never by
``assert``: ``python -O`` strips asserts, and a node must neither crash nor act on such a
message (Kafka treats it as an invalid response, or answers INVALID_REQUEST).

Each ``scenario_*`` returns what the node did, without asserting, so the same scenarios
run here and in a ``python -O`` subprocess (``test_checks_hold_under_python_dash_O``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from riverbed.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    Errors,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    OffsetAndEpoch,
    SnapshotId,
)
from riverbed.raft.node import RaftNode
from riverbed.testing.raft_sim_helpers import (
    entries,
    fetch,
    fetch_reply,
    make_follower,
    make_leader,
    make_node,
    requests,
    responses,
)


def committed_follower() -> tuple[RaftNode, int]:
    """Node 2 follows leader 1 at epoch 1 with offsets 0-3 committed (HW 4) and flushed;
    returns it and the correlation id of its next Fetch."""
    node = make_node(2)
    corr = requests(make_follower(node, 1, 1), FetchRequest)[0][0].correlation_id
    reply = fetch_reply(1, 1, 4, entries(0, 1, "set a 1", "set b 2", "set c 3", "set d 4"))
    node.handle_response(1, corr, reply, 1)
    node.log.flush(node.log.end_offset)
    actions = node.on_log_flushed(node.log.end_offset, 1)
    return node, requests(actions, FetchRequest)[0][0].correlation_id


def follower_reply(reply: FetchResponse) -> dict[str, object]:
    node, corr = committed_follower()
    deadline = node.fetch_deadline_ms
    actions = node.handle_response(1, corr, reply, 2)
    return {
        "log_end": node.log.end_offset,
        "high_watermark": node.high_watermark,
        "rejected": node.rejected_inputs,
        "fetch_timer_kept": node.fetch_deadline_ms == deadline,
        "snapshot_download": node.snapshot_download is not None,
        "fetch_snapshot_sent": bool(requests(actions, FetchSnapshotRequest)),
    }


def scenario_diverging_below_committed() -> dict[str, object]:
    div = OffsetAndEpoch(1, 1)  # would truncate committed offsets 1-3
    return follower_reply(FetchResponse(Errors.NONE, 1, 1, 4, 0, diverging_epoch=div))


def scenario_diverging_from_the_future() -> dict[str, object]:
    div = OffsetAndEpoch(9, 7)  # an epoch above the leader's own
    return follower_reply(FetchResponse(Errors.NONE, 1, 1, 4, 0, diverging_epoch=div))


def scenario_snapshot_id_from_the_future() -> dict[str, object]:
    sid = SnapshotId(50, 3)  # epoch 3 > leader epoch 1
    return follower_reply(FetchResponse(Errors.NONE, 1, 1, 60, 50, snapshot_id=sid))


def scenario_negative_snapshot_id() -> dict[str, object]:
    sid = SnapshotId(-5, 1)
    return follower_reply(FetchResponse(Errors.NONE, 1, 1, 60, 50, snapshot_id=sid))


def scenario_second_leader_in_an_epoch() -> dict[str, object]:
    node = make_node(1)
    now, _ = make_leader(node)
    begin = BeginQuorumEpochRequest("test", 2, node.epoch)
    reply = responses(node.handle_request(2, 7, begin, now), BeginQuorumEpochResponse)
    return {
        "role": node.role.value,
        "error": reply[0].error_code,
        "rejected": node.rejected_inputs,
    }


def scenario_fetch_with_negative_last_epoch() -> dict[str, object]:
    node = make_node(1)
    now, _ = make_leader(node)
    reply = responses(node.handle_request(2, 7, fetch(2, 0, -1, node.epoch), now), FetchResponse)
    return {"role": node.role.value, "error": reply[0].error_code}


REJECTED_REPLY = {
    "log_end": 4,
    "high_watermark": 4,
    "rejected": 1,
    "fetch_timer_kept": True,
    "snapshot_download": False,
    "fetch_snapshot_sent": False,
}
EXPECTED = {
    "scenario_diverging_below_committed": REJECTED_REPLY,
    "scenario_diverging_from_the_future": REJECTED_REPLY,
    "scenario_snapshot_id_from_the_future": REJECTED_REPLY,
    "scenario_negative_snapshot_id": REJECTED_REPLY,
    "scenario_second_leader_in_an_epoch": {
        "role": "Leader",
        "error": int(Errors.INVALID_REQUEST),
        "rejected": 1,
    },
    "scenario_fetch_with_negative_last_epoch": {
        "role": "Leader",
        "error": int(Errors.INVALID_REQUEST),
    },
}


def test_diverging_epoch_below_committed_is_rejected() -> None:
    assert scenario_diverging_below_committed() == REJECTED_REPLY


def test_diverging_epoch_above_the_leader_epoch_is_rejected() -> None:
    assert scenario_diverging_from_the_future() == REJECTED_REPLY


def test_invalid_snapshot_ids_are_rejected() -> None:
    assert scenario_snapshot_id_from_the_future() == REJECTED_REPLY
    assert scenario_negative_snapshot_id() == REJECTED_REPLY


def test_a_valid_diverging_epoch_still_truncates() -> None:
    node, _ = committed_follower()
    node.log.append(entries(4, 1, "set x 1", "set y 2"))  # an uncommitted tail
    node.log.flush(6)
    node.on_log_flushed(6, 2)
    # the leader of epoch 2 ends epoch 1 at offset 4: the tail goes, the committed part stays
    corr = requests(make_follower(node, 1, 2, 3), FetchRequest)[0][0].correlation_id
    reply = FetchResponse(Errors.NONE, 1, 2, 4, 0, diverging_epoch=OffsetAndEpoch(4, 1))
    node.handle_response(1, corr, reply, 4)
    assert node.log.end_offset == 4 and node.rejected_inputs == 0


def test_a_second_leader_for_an_epoch_is_refused() -> None:
    assert scenario_second_leader_in_an_epoch() == EXPECTED["scenario_second_leader_in_an_epoch"]


def test_fetch_with_a_negative_last_fetched_epoch_is_an_invalid_request() -> None:
    got = scenario_fetch_with_negative_last_epoch()
    assert got == EXPECTED["scenario_fetch_with_negative_last_epoch"]


def test_checks_hold_under_python_dash_O() -> None:
    # the same scenarios with asserts stripped: the checks must not be asserts
    script = (
        "import json, runpy, sys\n"
        "assert False, 'asserts are on'\n"
        f"ns = runpy.run_path({str(Path(__file__))!r})\n"
        f"names = {sorted(EXPECTED)!r}\n"
        "print(json.dumps({'optimize': sys.flags.optimize,"
        " 'results': {n: ns[n]() for n in names}}))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-O", "-c", script], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["optimize"] == 1
    assert out["results"] == EXPECTED
