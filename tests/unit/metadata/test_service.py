import asyncio

from riverbed.metadata.image import BrokerEndpoint
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import CreateTopicsRequest, DeleteTopicsRequest
from riverbed.server.metadata_log import LocalMetadataLog
from riverbed.server.metadata_service import MetadataService

from .conftest import make_controller, register_unfenced


class FixedClock:
    def now_ms(self) -> int:
        return 1_700_000_000_000


def new_service(path):
    return MetadataService(make_controller(), LocalMetadataLog(path), FixedClock(), "cid")


def test_service_persists_and_replays(tmp_path):
    async def first():
        svc = new_service(tmp_path)
        seen = []
        svc.add_listener(lambda old, new, delta: seen.append(set(new.topics_by_name)))
        await svc.start()
        assert svc.image.metadata_version > 0
        await register_unfenced(svc, 1, [BrokerEndpoint("PLAINTEXT", "127.0.0.1", 9092)])
        CT = CreateTopicsRequest
        resp = await svc.create_topics(
            CT(topics=[CT.CreatableTopic(name="t", num_partitions=2, replication_factor=1)])
        )
        assert resp.topics[0].error_code == 0
        auto = await svc.auto_create_topic("auto")
        assert auto.topics[0].error_code == 0
        await svc.delete_topics(DeleteTopicsRequest(topic_names=["auto"]))
        assert seen[-1] == {"t"}
        image = svc.image
        svc.close()
        return image

    image = asyncio.run(first())

    async def second():
        svc = new_service(tmp_path)
        await svc.start()
        assert svc.image == image
        assert svc.image.offset == image.offset
        # re-registering after a restart bumps the broker epoch
        reg = await register_unfenced(svc, 1, [BrokerEndpoint("PLAINTEXT", "127.0.0.1", 9092)])
        assert reg.broker_epoch > image.brokers[1].broker_epoch
        svc.close()

    asyncio.run(second())


def test_concurrent_creates_are_serialized(tmp_path):
    async def run():
        svc = new_service(tmp_path)
        await svc.start()
        await register_unfenced(svc, 1, [])
        results = await asyncio.gather(*[svc.auto_create_topic("same") for _ in range(5)])
        codes = sorted(r.topics[0].error_code for r in results)
        assert codes.count(0) == 1 and len(set(codes)) == 2
        svc.close()

    asyncio.run(run())


def test_service_snapshots_and_restarts_from_snapshot(tmp_path):
    CT = CreateTopicsRequest

    async def first():
        svc = MetadataService(
            make_controller(), LocalMetadataLog(tmp_path, snapshot_bytes=300), FixedClock()
        )
        await svc.start()
        await register_unfenced(svc, 1, [])
        for i in range(6):
            await svc.create_topics(
                CT(topics=[CT.CreatableTopic(name=f"t{i}", num_partitions=3, replication_factor=1)])
            )
        await svc.delete_topics(DeleteTopicsRequest(topic_names=["t0"]))
        image = svc.image
        assert svc.log.latest_snapshot is not None
        svc.close()
        return image

    image = asyncio.run(first())

    async def second():
        svc = MetadataService(make_controller(), LocalMetadataLog(tmp_path), FixedClock())
        await svc.start()
        assert svc.image == image
        assert svc.image.offset == image.offset
        svc.close()

    asyncio.run(second())


def test_follower_side_apply_and_snapshot_load(tmp_path):
    from riverbed.metadata.image import image_to_records

    leader = new_service(tmp_path / "leader")
    follower = new_service(tmp_path / "follower")
    seen = []
    follower.add_listener(lambda old, new, delta: seen.append(new.offset))

    async def run():
        await leader.start()
        await register_unfenced(leader, 1, [])
        await leader.auto_create_topic("f")

    asyncio.run(run())
    committed = list(leader.log.read_committed())
    follower.apply_committed(committed[:2])
    follower.apply_committed(committed[2:])
    assert follower.image == leader.image and follower.image.offset == leader.image.offset
    assert seen == [1, committed[-1][0]]
    # records the image already has (the active controller's own) are skipped
    follower.apply_committed(committed[-1:])
    assert follower.image == leader.image and seen == [1, committed[-1][0]]
    fresh = new_service(tmp_path / "fresh")
    fresh.load_snapshot(image_to_records(leader.image), leader.image.offset + 1)
    assert fresh.image == leader.image and fresh.image.offset == leader.image.offset
    for svc in (leader, follower, fresh):
        svc.close()


def test_service_leadership_operations(tmp_path):
    from riverbed.protocol.messages import (
        AlterPartitionReassignmentsRequest,
        ElectLeadersRequest,
        ListPartitionReassignmentsRequest,
    )

    async def run():
        svc = new_service(tmp_path)
        await svc.start()
        await register_unfenced(svc, 1, [])
        await svc.auto_create_topic("l", num_partitions=1)
        ET = ElectLeadersRequest.TopicPartitions
        resp = await svc.elect_leaders(
            ElectLeadersRequest(election_type=0, topic_partitions=[ET(topic="l", partitions=[0])])
        )
        (res,) = resp.replica_election_results
        assert res.partition_result[0].error_code == ErrorCode.ELECTION_NOT_NEEDED
        # over every partition (null), the ones that need no election are left out (Kafka)
        resp = await svc.elect_leaders(ElectLeadersRequest(election_type=0, topic_partitions=None))
        (res,) = resp.replica_election_results
        assert res.topic == "l" and res.partition_result == []
        AR = AlterPartitionReassignmentsRequest
        resp = await svc.alter_partition_reassignments(
            AR(
                topics=[
                    AR.ReassignableTopic(
                        name="l",
                        partitions=[AR.ReassignablePartition(partition_index=0, replicas=[1])],
                    )
                ]
            )
        )
        assert resp.responses[0].partitions[0].error_code == 0
        listed = svc.list_partition_reassignments(ListPartitionReassignmentsRequest(topics=None))
        assert listed.topics == []
        assert await svc.controlled_shutdown(1) == 0
        assert svc.image.partition("l", 0).leader == -1
        fenced = await svc.fence_broker(1)
        assert fenced.fenced
        svc.close()

    asyncio.run(run())


def test_controller_logs_each_partition_state_change_it_decides(tmp_path, caplog):
    import logging

    async def run():
        svc = new_service(tmp_path)
        await svc.start()
        await register_unfenced(svc, 1, [])
        await svc.auto_create_topic("s", num_partitions=1)
        before = svc.image.partition("s", 0)
        assert await svc.controlled_shutdown(1) == 0
        after = svc.image.partition("s", 0)
        await svc.delete_topics(DeleteTopicsRequest(topic_names=["s"]))
        svc.close()
        return before, after

    with caplog.at_level(logging.INFO, logger="riverbed.state.change"):
        before, after = asyncio.run(run())
    lines = [r.getMessage() for r in caplog.records if r.name == "riverbed.state.change"]
    assert after.leader_epoch > before.leader_epoch
    assert lines == [
        f"controller 1 decided s-0: leader 1 at leader epoch {before.leader_epoch}, "
        f"partition epoch {before.partition_epoch}, replicas [1], ISR [1], adding [], "
        "removing [] (was none)",
        f"controller 1 decided s-0: leader -1 at leader epoch {after.leader_epoch}, "
        f"partition epoch {after.partition_epoch}, replicas [1], ISR [1], adding [], "
        f"removing [] (was leader 1 at leader epoch {before.leader_epoch})",
        "controller 1 decided s: deleted",
    ]


def test_a_large_operations_state_change_lines_let_the_loop_run_between_slices(tmp_path, caplog):
    """10,000 lines of one CreateTopics written at once held the event loop for a second:
    other tasks run between slices of ``DECISION_SLICE_RECORDS`` records now."""
    import logging

    from riverbed.metadata.state_change import DECISION_SLICE_RECORDS

    partitions = 5 * DECISION_SLICE_RECORDS
    passes = [0]
    seen_at: list[int] = []

    class Seen(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen_at.append(passes[0])

    async def other_task(stop: asyncio.Event) -> None:
        while not stop.is_set():
            passes[0] += 1
            await asyncio.sleep(0)

    async def run():
        svc = new_service(tmp_path)
        await svc.start()
        await register_unfenced(svc, 1, [])
        stop = asyncio.Event()
        other = asyncio.ensure_future(other_task(stop))
        CT = CreateTopicsRequest
        request = CT(
            topics=[CT.CreatableTopic(name="big", num_partitions=partitions, replication_factor=1)]
        )
        resp = await svc.create_topics(request)
        stop.set()
        await other
        svc.close()
        assert resp.topics[0].error_code == 0

    handler = Seen()
    logging.getLogger("riverbed.state.change").addHandler(handler)
    try:
        with caplog.at_level(logging.INFO, logger="riverbed.state.change"):
            asyncio.run(run())
    finally:
        logging.getLogger("riverbed.state.change").removeHandler(handler)
    assert len(seen_at) == partitions  # every line, in slices the other task ran between
    assert len(set(seen_at)) >= partitions // DECISION_SLICE_RECORDS
