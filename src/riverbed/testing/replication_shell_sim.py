"""The replication simulation over the brokers' shells (``replication_sim`` with real brokers).

``replication_sim`` runs the partition cores over in-memory logs. Here every broker runs
what a riverbed node runs for replication, on a simulated disk, in the same seeded event
loop as the controller (``ReplicationSim``'s controller side, network and chaos):

- a real ``LogManager`` (start-up recovery, checkpoints, clean-shutdown markers) and real
  ``PartitionLog`` s over ``SimDisk`` (``testing/sim_disk.py``): a process crash keeps
  the page cache, a power loss rolls every file back to its last fsync (the unflushed
  tail is lost, sometimes torn mid-batch), a replaced disk loses everything;
- the real ``PartitionManager`` (which logs to host, config refresh on every image) and
  ``ReplicaManager`` (cores, ``PartitionReplicaLog``, high watermark, delayed produces,
  AlterPartition batches), driven through their decision parts: ``tick()``,
  ``take_alter_batch`` / ``alter_partition_answered``, ``park_produce``, and the replica
  fetchers' ``positions`` / ``request_for`` / ``answered`` / ``failed`` (no asyncio task
  runs: the seeded scheduler sends the requests, so a seed replays exactly);
- the leader side of a replica Fetch as ``server/broker/fetch.py`` does it for followers
  (``leader_partition`` epoch checks, the core's verdict, whole batches read from the
  log below its end; a fetch with nothing to return is parked until data or its wait).

Brokers register with what their ``LogManager`` found (the clean-shutdown marker's
broker epoch), apply images only after their registration, and a restart runs storage
recovery on whatever the crash left. Beyond the base chaos: power losses (of a running
broker or of a stopped one's machine) and replaced disks while another live ISR member
holds every committed record, clean shutdowns, dynamic ``min.insync.replicas`` and
``replica.lag.time.max.ms``, and a crashed broker's held-up Fetch reaching the leader
just after its next incarnation is unfenced (KIP-903's stale incarnation). The invariants are ``replication_sim_parts``'s over
the real logs (each high watermark a leader exposes is seen when the real purgatory is
woken by it), with one change: an ISR member is held to the committed records only while
its current incarnation is registered (a crashed broker may still be listed until the
controller learns of the restart; what it must never do is rejoin or stay in the ISR
with a shorter log). A partition left without an ISR by unclean restarts stays
leaderless; in the calm phase the simulation then does what a user would: it asks for an
unclean election, and the history starts again from the elected log.

Replay one seed or soak many (``make soak`` runs this too)::

    .venv/bin/python -m riverbed.testing.replication_shell_sim --seed 12 -v
    .venv/bin/python -m riverbed.testing.replication_shell_sim --seeds 10000
"""

from __future__ import annotations

import logging
import random
import shutil
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from riverbed.metadata.records import ResourceType
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    AlterPartitionResponse,
    ElectLeadersRequest,
    FetchRequest,
)
from riverbed.protocol.messages import IncrementalAlterConfigsRequest as IA
from riverbed.server.broker.hosted import NotServed
from riverbed.server.replication.manager import AlterBatch
from riverbed.testing import replication_sim
from riverbed.testing.replication_shell_parts import (
    DISK_REPLACED,
    POWER_LOSS,
    PROCESS_CRASH,
    FetchReq,
    FetchResp,
    InFlightFetch,
    ShellAlterAnswer,
    ShellAlterReq,
    ShellBroker,
    leader_fetch_response,
    record_batch,
)
from riverbed.testing.replication_sim import ReplicationSim, SimParams
from riverbed.testing.replication_sim_brokers import (
    PRODUCE_TIMEOUT_MS,
    TOPIC,
    HeartbeatAnswer,
    ProduceAnswer,
    ProduceReq,
    Registered,
    SimBroker,
)
from riverbed.testing.replication_sim_parts import CLIENT, CONTROLLER, Record

SIM = "replication_shell_sim"
OP_SET = 0  # IncrementalAlterConfigs' SET
#: One election type of ElectLeaders: any live replica (the user's explicit choice).
ELECTION_UNCLEAN = 1
#: The calm phase asks for an unclean election after the partition is this long without
#: a leader and an ISR (the user noticing an offline partition).
OFFLINE_BEFORE_UNCLEAN_MS = 3000
#: A crashed broker's in-flight Fetch reaches the leader this often, up to this long
#: after its next incarnation is unfenced (if that is within ORPHAN_KEPT_MS of the send).
LATE_FETCH_P = 0.5
LATE_FETCH_DELAY_MS = 300
ORPHAN_KEPT_MS = 15_000
#: A broker process's timers (the real ones, shortened as the simulation's are).
TICK_MS = 100  # ReplicaManager.TICK_MS
HW_CHECKPOINT_MS = 2500  # replica.high.watermark.checkpoint.interval.ms (5000)
ALTER_TIMEOUT_MS = 1000  # the AlterPartition request's timeout
FETCH_WAIT_MAX_MS = 100  # replica.fetch.wait.max.ms
FETCH_TIMEOUT_MS = 1000  # replica.fetch.wait.max.ms + replica.socket.timeout.ms
FETCH_BACKOFF_MS = 100  # replica.fetch.backoff.ms
IDLE_POLL_MS = 50  # fetcher.IDLE_POLL_S


def static_config(broker_id: int, min_insync: int) -> dict[str, str]:
    return {
        "node.id": str(broker_id),
        "replica.lag.time.max.ms": "1000",
        "min.insync.replicas": str(min_insync),
        "replica.fetch.wait.max.ms": str(FETCH_WAIT_MAX_MS),
        "replica.fetch.backoff.ms": str(FETCH_BACKOFF_MS),
        "replica.fetch.max.bytes": "4096",
    }


class ShellReplicationSim(ReplicationSim):
    def __init__(self, params: SimParams) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="repsim-", dir=_tmp_root()))
        self.fetch_ids = 0
        self.offline_since = -1
        self.final_logs: dict[int, list[Record]] = {}
        super().__init__(params)

    def now_ms(self) -> int:
        """The simulated clock every broker process reads (storage, cores, shells)."""
        return self.now

    def _new_broker(self, broker_id: int) -> SimBroker:
        b = ShellBroker(broker_id)
        config = static_config(broker_id, self.p.min_insync)
        b.attach(self.root / f"broker-{broker_id}", config, self)
        b.on_change = self._leader_check
        b.start(random.Random(self.rng.getrandbits(64)))
        return b

    def close(self) -> None:
        """Stop every process (what each log held is kept in ``final_logs``)."""
        for b in self.brokers.values():
            sb = shell(b)
            self.final_logs[sb.broker_id] = list(sb.view.records)
            sb.stop_process()
        shutil.rmtree(self.root, ignore_errors=True)

    # ------------------------------------------------------------------ controller side
    def _setup(self) -> None:
        super()._setup()
        # small segments (rolls, so flushes of rolled segments: some of the log is durable)
        # and, in some runs, flush.messages (more of it)
        self._alter_topic_config("segment.bytes", str(self.rng.choice((600, 2000, 1 << 20))))
        flush = self.rng.choice((None, None, 1, 5))
        if flush is not None:
            self._alter_topic_config("flush.messages", str(flush))

    def _alter_topic_config(self, name: str, value: str) -> None:
        self._alter_config(ResourceType.TOPIC, TOPIC, name, value)

    def _alter_config(self, kind: ResourceType, resource: str, name: str, value: str) -> None:
        """IncrementalAlterConfigs SET through the controller (brokers see it with the
        next image: ``PartitionManager.apply_image`` refreshes every core's config)."""
        resource_request = IA.AlterConfigsResource(
            resource_type=int(kind),
            resource_name=resource,
            configs=[IA.AlterableConfig(name=name, config_operation=OP_SET, value=value)],
        )
        result = self.controller.incremental_alter_configs(
            self.image, IA(resources=[resource_request]), self.now
        )
        self._commit(list(result.records))
        self.stats["config changes"] += 1

    def _controller_receive(self, src: int, msg: Any) -> None:
        if isinstance(msg, ShellAlterReq):
            if self.now < self.not_controller_until:
                answer = ShellAlterAnswer(msg.batch, None, ErrorCode.NOT_CONTROLLER)
                self.net.send(CONTROLLER, src, answer, self.now)
                return
            result = self.controller.alter_partition(self.image, msg.batch.request, self.now)
            self._commit(list(result.records))
            response = result.response
            assert isinstance(response, AlterPartitionResponse)
            self.stats["alter partition"] += 1
            answer = ShellAlterAnswer(msg.batch, response, ErrorCode.NONE)
            self.net.send(CONTROLLER, src, answer, self.now)
            return
        super()._controller_receive(src, msg)

    # ------------------------------------------------------------------ broker side
    def _broker_receive(self, b: SimBroker, src: int, msg: Any) -> None:
        sb = shell(b)
        proc = sb.proc
        assert proc is not None
        if isinstance(msg, Registered):
            if msg.incarnation == sb.incarnation and sb.broker_epoch < msg.broker_epoch:
                sb.broker_epoch = msg.broker_epoch
                sb.apply_image(msg.image)
        elif isinstance(msg, HeartbeatAnswer):
            if msg.error is ErrorCode.STALE_BROKER_EPOCH:
                sb.broker_epoch = -1  # register again
            elif sb.broker_epoch >= 0:
                sb.apply_image(msg.image)
        elif isinstance(msg, FetchReq):
            self._shell_fetch(sb, src, msg)
        elif isinstance(msg, FetchResp):
            self._fetch_answered(sb, src, msg)
        elif isinstance(msg, ShellAlterAnswer):
            if proc.alter is msg.batch:
                proc.alter = None
                if msg.response is not None:
                    self.stats["alter result NONE"] += 1
                else:
                    self.stats[f"alter result {msg.error.name}"] += 1
                proc.replicas.alter_partition_answered(msg.batch, msg.response, msg.error)
        elif isinstance(msg, ProduceReq):
            self._shell_produce(sb, msg)

    def _shell_fetch(self, sb: ShellBroker, src: int, msg: FetchReq) -> None:
        proc = sb.proc
        assert proc is not None
        response, has_data = leader_fetch_response(proc, msg.request)
        if not has_data and msg.parked_until < 0:
            # nothing to send: parked until data comes or replica.fetch.wait.max.ms
            proc.parked.append((src, msg.park(self.now + FETCH_WAIT_MAX_MS)))
            return
        for part in (p for t in response.responses for p in t.partitions):
            diverging = part.diverging_epoch is not None and part.diverging_epoch.epoch >= 0
            name = ErrorCode(part.error_code).name
            self.stats[f"fetch {name}{' diverging' if diverging else ''}"] += 1
        self.net.send(sb.broker_id, src, FetchResp(msg.request_id, response), self.now)

    def _fetch_answered(self, sb: ShellBroker, src: int, msg: FetchResp) -> None:
        proc = sb.proc
        assert proc is not None
        for key, flight in list(proc.fetches.items()):
            if flight.request_id != msg.request_id:
                continue
            del proc.fetches[key]
            fetcher = proc.replicas.fetchers.fetchers.get(key)
            if fetcher is None:
                return  # the partitions moved to another fetcher meanwhile
            before = sb.truncations()
            proc.next_fetch_ms[key] = self.now + fetcher.answered(flight.positions, msg.response)
            self.stats["truncations"] += sb.truncations() - before
            return

    def _shell_produce(self, sb: ShellBroker, msg: ProduceReq) -> None:
        proc = sb.proc
        assert proc is not None

        def answer(error: ErrorCode, offset: int = -1) -> None:
            reply = ProduceAnswer(msg.request_id, error, offset)
            self.net.send(sb.broker_id, CLIENT, reply, self.now)

        hosted = proc.partitions.leader_partition(TOPIC, 0)
        if isinstance(hosted, NotServed):
            answer(hosted.error)
            return
        error = proc.replicas.check_produce(hosted, -1)
        if error is not ErrorCode.NONE:
            self.stats[f"produce {error.name}"] += 1
            answer(error)
            return
        info = proc.partitions.append(hosted, bytearray(record_batch(msg.value, self.now)))
        offset = info.first_offset
        proc.replicas.park_produce(
            hosted,
            info.last_offset + 1,
            PRODUCE_TIMEOUT_MS,
            lambda error: answer(error, offset if error is ErrorCode.NONE else -1),
        )

    def _broker_tick(self, b: SimBroker) -> None:
        sb = shell(b)
        proc = sb.proc
        assert proc is not None
        now = self.now
        if sb.broker_epoch < 0:
            if now >= sb.next_register_ms:
                sb.next_register_ms = now + 300
                self.net.send(sb.broker_id, CONTROLLER, sb.register_message(), now)
            return
        if now >= sb.next_heartbeat_ms:
            sb.next_heartbeat_ms = now + 200
            self.net.send(sb.broker_id, CONTROLLER, sb.heartbeat_message(), now)
        if now >= proc.next_tick_ms:
            proc.next_tick_ms = now + TICK_MS
            proc.replicas.tick()
            proc.flush_due(now)  # the log manager's flush scheduler
        if now >= proc.next_checkpoint_ms:
            proc.next_checkpoint_ms = now + HW_CHECKPOINT_MS
            proc.log_manager.write_checkpoints()
        self._send_alter(sb)
        self._parked_fetches(sb)
        self._send_fetches(sb)

    def _send_alter(self, sb: ShellBroker) -> None:
        proc = sb.proc
        assert proc is not None
        if proc.alter is not None and self.now - proc.alter_sent_ms > ALTER_TIMEOUT_MS:
            batch, proc.alter = proc.alter, None
            proc.replicas.alter_partition_answered(batch, None, ErrorCode.REQUEST_TIMED_OUT)
        if proc.alter is None:
            batch_or_none: AlterBatch | None = proc.replicas.take_alter_batch()
            if batch_or_none is not None:
                proc.alter, proc.alter_sent_ms = batch_or_none, self.now
                msg = ShellAlterReq(batch_or_none)
                self.net.send(sb.broker_id, CONTROLLER, msg, self.now)

    def _parked_fetches(self, sb: ShellBroker) -> None:
        proc = sb.proc
        assert proc is not None
        parked, proc.parked = proc.parked, []
        for src, req in parked:
            response, has_data = leader_fetch_response(proc, req.request, reread=True)
            if has_data or self.now >= req.parked_until:
                self.net.send(sb.broker_id, src, FetchResp(req.request_id, response), self.now)
            else:
                proc.parked.append((src, req))

    def _send_fetches(self, sb: ShellBroker) -> None:
        proc = sb.proc
        assert proc is not None
        fetchers = proc.replicas.fetchers
        for key, fetcher in list(fetchers.fetchers.items()):
            flight = proc.fetches.get(key)
            if flight is not None:
                if self.now - flight.sent_ms < FETCH_TIMEOUT_MS:
                    continue
                del proc.fetches[key]  # timed out: back off and reconnect
                proc.next_fetch_ms[key] = self.now + fetcher.failed()
            if self.now < proc.next_fetch_ms.get(key, 0):
                continue
            positions = fetcher.positions()
            if not positions:
                proc.next_fetch_ms[key] = self.now + IDLE_POLL_MS
                continue
            self.fetch_ids += 1
            request: FetchRequest = fetchers.request_for(positions)
            msg = FetchReq(self.fetch_ids, request)
            flight = InFlightFetch(self.fetch_ids, positions, self.now, fetcher.leader_id, msg)
            proc.fetches[key] = flight
            self.net.send(sb.broker_id, fetcher.leader_id, msg, self.now)

    # ------------------------------------------------------------------ checks
    def _check(self) -> None:
        reg = self.partition_reg()
        assert reg is not None
        current = {}
        for b in self.brokers.values():
            sb = shell(b)
            if sb.holds_seat(self.image):
                current[sb.broker_id] = sb.view
        self.checker.check_isr(tuple(r for r in reg.isr if r in current), current)
        for b in self.brokers.values():
            self._leader_check(shell(b))
        self._watch_offline(reg.leader, reg.isr)

    def _leader_check(self, sb: ShellBroker) -> None:
        """One leader per leader epoch; what its high watermark exposes joins the ledger
        (after every step, and at once whenever the broker's partition changed)."""
        core = sb.leader_core()
        if core is None or core.leader is None:
            return
        hw, epoch = core.leader.high_watermark, core.leader.leader_epoch
        if (sb.broker_id, sb.incarnation, epoch) not in self.checker.leader_hw:
            self.stats["leaders"] += 1
        self.checker.on_leader(sb.broker_id, epoch)
        self.checker.on_leader_hw(sb.broker_id, sb.incarnation, epoch, sb.view, hw)

    def _watch_offline(self, leader: int, isr: tuple[int, ...]) -> None:
        if leader >= 0 or isr:
            self.offline_since = -1
        elif self.offline_since < 0:
            self.offline_since = self.now

    # ------------------------------------------------------------------ chaos
    def _chaos(self) -> None:
        r = self.rng.random()
        alive = [shell(b) for b in self.brokers.values() if b.alive]
        if r < 0.002 and alive:
            sb = self.rng.choice(alive)
            kind = self._crash_kind(sb)
            sb.crash_as(kind, self.rng)
            self.stats[kind] += 1
            self.stats["crashes"] += 1
            self._note(f"broker {sb.broker_id}: {kind}")
        elif r < 0.0025 and alive:
            sb = self.rng.choice(alive)
            sb.clean_shutdown()
            self.stats["clean shutdowns"] += 1
            self._note(f"broker {sb.broker_id}: clean shutdown")
        elif r < 0.0035 and (down := [shell(b) for b in self.brokers.values() if not b.alive]):
            # the machine of a stopped broker loses power: a clean shutdown flushed
            # everything (its marker vouches for it), a crash's page cache is gone now
            sb = self.rng.choice(down)
            if self._holders_besides(sb):
                assert sb.disk is not None
                sb.disk.power_loss(self.rng)
                self.stats["power losses while down"] += 1
                self._note(f"broker {sb.broker_id}: power loss while down")
        elif r < 0.0038:
            value = str(self.rng.choice((1, 2)))
            self._alter_topic_config("min.insync.replicas", value)
        elif r < 0.0041:
            # the cluster default (a dynamic broker config): every core's ISR timer
            value = str(self.rng.choice((600, 1000, 1400)))
            self._alter_config(ResourceType.BROKER, "", "replica.lag.time.max.ms", value)
        else:
            # the rest of the base simulation's chaos, with its crashes as process crashes
            super()._chaos()

    def _crash_kind(self, sb: ShellBroker) -> str:
        """A power loss or a replaced disk only while another live ISR member holds every
        committed record: Kafka's acks=all promises nothing against losing every copy's
        page cache at once (that is what flush.messages is for)."""
        if not self._holders_besides(sb):
            return PROCESS_CRASH
        return self.rng.choice((PROCESS_CRASH, POWER_LOSS, POWER_LOSS, DISK_REPLACED))

    def _holders_besides(self, sb: ShellBroker) -> bool:
        """Does a live ISR member other than ``sb`` hold every committed record?"""
        reg = self.partition_reg()
        assert reg is not None
        return any(
            r != sb.broker_id and shell(self.brokers[r]).holds_seat(self.image) for r in reg.isr
        )

    # ------------------------------------------------------------------ calm
    def step(self) -> None:
        self._late_fetches()
        super().step()
        if (
            self.now > self.p.chaos_ms
            and self.offline_since >= 0
            and self.now - self.offline_since > OFFLINE_BEFORE_UNCLEAN_MS
        ):
            self._unclean_election()

    def _late_fetches(self) -> None:
        """A crashed broker's Fetch held up in the network (a cut that heals, a
        retransmission) reaches the leader just after the broker restarted, maybe with a
        shorter log: KIP-903's stale incarnation, which must not count as its progress."""
        for b in self.brokers.values():
            sb = shell(b)
            if not sb.orphans or not self._unfenced_incarnation(sb):
                continue
            for flight in sb.orphans:
                if self.now - flight.sent_ms < ORPHAN_KEPT_MS and self.rng.random() < LATE_FETCH_P:
                    at_ms = self.now + self.rng.randint(0, LATE_FETCH_DELAY_MS)
                    self.net.deliver_at(sb.broker_id, flight.leader, flight.msg, at_ms)
                    self.stats["late fetches"] += 1
            sb.orphans.clear()

    def _unfenced_incarnation(self, sb: ShellBroker) -> bool:
        reg = self.image.brokers.get(sb.broker_id)
        return sb.holds_seat(self.image) and reg is not None and not reg.fenced

    def _unclean_election(self) -> None:
        req = ElectLeadersRequest(election_type=ELECTION_UNCLEAN, topic_partitions=None)
        result = self.controller.elect_leaders(self.image, req, self.now)
        if not result.records:
            return
        self._commit(list(result.records))
        self.stats["unclean elections"] += 1
        self._note("user: unclean election (a new history)")
        self.checker.new_history([shell(b).view for b in self.brokers.values()])
        self.offline_since = -1

    def _leader_log(self, broker_id: int) -> tuple[int, list[Record]] | None:
        sb = shell(self.brokers[broker_id])
        core = sb.leader_core()
        if core is None or core.leader is None:
            return None
        return core.leader.high_watermark, list(sb.view.records)

    def _log(self, broker_id: int) -> list[Record]:
        return list(shell(self.brokers[broker_id]).view.records)

    def _describe(self) -> str:
        reg = self.partition_reg()
        lines = [f"controller: {reg}"]
        for b in self.brokers.values():
            sb = shell(b)
            lines.append(f"broker {sb.broker_id}: {sb.describe()}")
        return "\n".join(lines)


def shell(b: SimBroker) -> ShellBroker:
    assert isinstance(b, ShellBroker)
    return b


def _tmp_root() -> str | None:
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() else None


def run_seed(params: SimParams) -> ShellReplicationSim:
    sim = ShellReplicationSim(replace(params, sim=SIM))
    try:
        return replication_sim.run_sim(sim)
    finally:
        sim.close()


def main(argv: list[str] | None = None) -> int:
    # recovery cutting a torn tail after a power loss is this simulation's daily bread
    logging.getLogger("riverbed.storage").setLevel(logging.ERROR)
    return replication_sim.main(argv, run_seed, SIM, __doc__.split("\n")[0])


if __name__ == "__main__":
    sys.exit(main())
