"""A dead broker is fenced without waiting out its session (issue 23), on 3 real processes.

The session (``broker.session.timeout.ms``) is 120 s here, far beyond every wait, so only
the early fence (`riverbed.metadata.broker_liveness`: silent, and its registered endpoint,
once reached, refuses connections) can move leadership in time:

- a SIGKILLed partition leader that is not the active controller: the controller fences it
  and elects another in-sync replica;
- a SIGKILLed partition leader that is the active controller: the newly active controller
  knows when it last heard from it (it followed it) and fences it as soon as it is active.

Each controller's log names the rule. Before the rule (on main before it) the leader stayed
on the dead broker for the whole session.

And the Metadata side of a fail-over (`riverbed.metadata.recently_fenced`): the first answer
that names a dead leader's successor still lists the dead broker, so that librdkafka moves
the partition to the new leader before it drops the broker (the two in one answer cost its
producer a second).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from riverbed.testing.cluster import scaled_s
from riverbed.testing.quorum_cluster import QUICK_ELECTIONS, QuorumCluster

from .test_quorum import metadata_of
from .test_replication import partition_state, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

SESSION_MS = 120_000
#: How long a survivor still lists the dead broker (the default is 3 s; longer here so that
#: a loaded machine's pause between two polls cannot hide the window).
GRACE_MS = 8_000
OVERRIDES = {
    **QUICK_ELECTIONS,
    "broker.session.timeout.ms": str(SESSION_MS),
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "riverbed.metadata.fenced.broker.listing.grace.ms": str(GRACE_MS),
}
#: Liveness bound of one wait (a quarter of the session: only the early fence meets it).
WAIT_S = 30.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QuorumCluster]:
    with QuorumCluster(tmp_path_factory.mktemp("early-fence"), 3, overrides=OVERRIDES) as c:
        c.start()
        yield c


def controller_id(admin: AdminClient) -> int:
    return int(admin.describe_cluster().result(15).controller.id)


def kill_leader_and_wait(cluster: QuorumCluster, topic: str, leader: int) -> str:
    """Create ``topic`` led by ``leader``, SIGKILL it, wait for another leader; the logs
    of the survivors."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    replicas = [leader] + [i for i in cluster.ids if i != leader]
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[replicas])])[topic].result(30)
    wait_for("ISR of 3", lambda: len(partition_state(admin, topic)[2]) == 3, scaled_s(WAIT_S))
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    producer.produce(topic, b"before")
    assert producer.flush(30) == 0
    cluster.kill(leader)
    survivor = next(f"127.0.0.1:{cluster.ports[i][0]}" for i in cluster.ids if i != leader)
    wait_for(
        "a new leader well inside the session",
        lambda: partition_state(admin, topic, via=survivor)[0] not in (leader, -1),
        scaled_s(WAIT_S),
    )
    producer.produce(topic, b"after")
    assert producer.flush(scaled_s(WAIT_S)) == 0
    return "".join(cluster.nodes[i].log_path.read_text() for i in cluster.ids if i != leader)


def test_dead_leader_fenced_early_by_the_active_controller(cluster: QuorumCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    active = controller_id(admin)
    leader = next(i for i in cluster.ids if i != active)
    logs = kill_leader_and_wait(cluster, "early-fence", leader)
    assert f"fencing broker {leader}: its process is gone" in logs
    cluster.nodes[leader].start()  # the quorum needs it for the next test


def test_dead_controller_fenced_early_by_its_successor(cluster: QuorumCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    active = controller_id(admin)
    # every voter's broker registered and unfenced (the previous test restarted one)
    wait_for(
        "3 brokers",
        lambda: len(admin.describe_cluster().result(15).nodes) == 3,
        scaled_s(WAIT_S),
    )
    logs = kill_leader_and_wait(cluster, "early-fence-controller", active)
    assert f"fencing broker {active}: its process is gone" in logs
    cluster.nodes[active].start()  # the next test needs all three


def test_metadata_lists_a_dead_leader_with_its_successor_then_drops_it(
    cluster: QuorumCluster,
) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    wait_for(
        "3 brokers",
        lambda: len(admin.describe_cluster().result(15).nodes) == 3,
        scaled_s(WAIT_S),
    )
    active = controller_id(admin)
    leader = next(i for i in cluster.ids if i != active)
    topic = "listed-while-moving"
    replicas = [leader] + [i for i in cluster.ids if i != leader]
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[replicas])])[topic].result(30)
    wait_for("ISR of 3", lambda: len(partition_state(admin, topic)[2]) == 3, scaled_s(WAIT_S))
    port = cluster.ports[active][0]
    cluster.kill(leader)

    def successor_named() -> dict[str, object] | None:
        md = metadata_of(port)
        return md if md["topics"][topic][1][0][1] not in (leader, -1) else None

    first = wait_for("the successor in Metadata", successor_named, scaled_s(WAIT_S))
    assert leader in [b for b, _ in first["brokers"]], first  # still listed: the grace
    wait_for(
        "the dead broker dropped after the grace period",
        lambda: leader not in [b for b, _ in metadata_of(port)["brokers"]],
        scaled_s(WAIT_S) + GRACE_MS / 1000,
    )
    cluster.nodes[leader].start()
