"""The metadata service on a (single-voter) Raft quorum: commits, restart, snapshots."""

import asyncio

from riverbed.protocol.messages import CreateTopicsRequest, DeleteTopicsRequest
from riverbed.raft.config import RaftConfig
from riverbed.raft.roles import Role
from riverbed.server.metadata_quorum import MetadataStateMachine, RaftMetadataLog
from riverbed.server.metadata_service import MetadataService
from riverbed.server.raft_driver import RaftDriver

from .conftest import make_controller, register_unfenced

CONFIG = RaftConfig(
    voters=frozenset({1}),
    election_timeout_ms=100,
    fetch_timeout_ms=200,
    election_backoff_max_ms=50,
    request_timeout_ms=200,
    append_linger_ms=1,
    fetch_max_wait_ms=20,
    snapshot_minimum_records=8,
)


class NoPeers:
    async def send(self, dest, request):
        raise ConnectionError("single voter: no peers")


class Clock:
    def now_ms(self) -> int:
        return 0


async def boot(path):
    svc = MetadataService(make_controller(), None, Clock(), "cid")  # log set below
    driver = RaftDriver(1, CONFIG, path, NoPeers(), MetadataStateMachine(svc))
    svc.log = RaftMetadataLog(driver)
    await driver.start()
    await svc.start(bootstrap=False)
    for _ in range(500):
        if driver.node.role is Role.LEADER:
            break
        await asyncio.sleep(0.01)
    assert driver.node.role is Role.LEADER
    return svc, driver


async def wait_for(cond):
    for _ in range(500):
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


def test_commits_restart_and_snapshot(tmp_path):
    CT = CreateTopicsRequest

    async def first():
        svc, driver = await boot(tmp_path)
        assert await svc.bootstrap_if_needed() is True
        assert await svc.bootstrap_if_needed() is False
        await register_unfenced(svc, 1, [])
        for i in range(6):
            resp = await svc.create_topics(
                CT(topics=[CT.CreatableTopic(name=f"q{i}", num_partitions=2, replication_factor=1)])
            )
            assert resp.topics[0].error_code == 0
        await svc.delete_topics(DeleteTopicsRequest(topic_names=["q0"]))
        assert sorted(svc.image.topics_by_name) == [f"q{i}" for i in range(1, 6)]
        await wait_for(lambda: driver.snapshots.list())
        image = svc.image
        await driver.close()
        return image

    image = asyncio.run(first())

    async def second():
        svc, driver = await boot(tmp_path)
        await wait_for(lambda: svc.image.offset >= image.offset)
        assert svc.image == image
        assert await svc.bootstrap_if_needed() is False
        await driver.close()

    asyncio.run(second())
