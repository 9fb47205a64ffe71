"""Have a cluster's group coordinators ready before a test's first consumer group.

A cluster creates ``__consumer_offsets`` on the first FindCoordinator and loads its
partitions right after (a few hundred ms). A consumer that joins in that window is told
COORDINATOR_LOAD_IN_PROGRESS, and librdkafka tries again only about 3 s later: a wait on
a client's timer in every test file whose first consumer group comes right after the
cluster started. `load_group_coordinators` asks for a coordinator itself (which creates
the topic) and returns once that coordinator describes a group (loaded); the offsets
partitions are created together, so the others are loaded by then too, or soon after.
"""

from __future__ import annotations

import time

from riverbed.cli.wire import WireClient, WireError
from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)
from riverbed.testing.cluster import scaled_s

#: The group whose coordinator is asked for (no member ever joins it).
PROBE_GROUP = "riverbed-test-coordinator-probe"
#: Seconds (before load scaling) the coordinator may take to be created and loaded.
LOAD_TIMEOUT_S = 30.0
#: Seconds between two tries.
POLL_S = 0.05
#: A loaded coordinator's answer for a group nobody joined: Dead (DescribeGroups v0-5) or
#: GROUP_ID_NOT_FOUND (v6+, KIP-1043); neither creates the group.
LOADED = (ErrorCode.NONE, ErrorCode.GROUP_ID_NOT_FOUND)
#: FindCoordinator v3: one key (v4+ batch them)
FIND_COORDINATOR_VERSION = 3


def load_group_coordinators(bootstrap: str, timeout_s: float = LOAD_TIMEOUT_S) -> None:
    """Return once the coordinator of `PROBE_GROUP` answers DescribeGroups as a loaded
    one does (``__consumer_offsets`` created and loaded); AssertionError after
    ``timeout_s``."""
    deadline = time.monotonic() + scaled_s(timeout_s)
    last: object = None
    while time.monotonic() < deadline:
        try:
            last = _probe(bootstrap)
        except (OSError, WireError) as exc:  # a node still on its way up: asked again
            last = exc
        if last in LOADED:
            return
        time.sleep(POLL_S)
    raise AssertionError(f"no loaded group coordinator at {bootstrap}: last answer {last!r}")


def _probe(bootstrap: str) -> object:
    """The coordinator's DescribeGroups error code for `PROBE_GROUP` (or why there is none)."""
    request = FindCoordinatorRequest(key=PROBE_GROUP)
    with WireClient(bootstrap) as client:
        found = client.request_at(ApiKey.FIND_COORDINATOR, FIND_COORDINATOR_VERSION, request)
    assert isinstance(found, FindCoordinatorResponse)
    if found.error_code != ErrorCode.NONE:
        return ErrorCode(found.error_code)
    with WireClient(f"{found.host}:{found.port}") as coordinator:
        described = coordinator.request(
            ApiKey.DESCRIBE_GROUPS, DescribeGroupsRequest(groups=[PROBE_GROUP])
        )
    assert isinstance(described, DescribeGroupsResponse)
    return ErrorCode(described.groups[0].error_code)
