"""Seeded deterministic simulation of partition replication (``riverbed.replication``).

Brokers each run the real partition core (``replication.partition.Partition``) over an
in-memory log; a model controller runs the real controller logic
(``metadata.controller.Controller``: registration, fencing on session timeout, unfencing,
AlterPartition through its wire form, preferred elections) on an image it replays itself;
brokers learn metadata from heartbeat answers (so late, but never backwards); a client
produces acks=all to whoever the controller names leader. One ``random.Random(seed)``
drives everything: message delays (reordering), drops, duplicates, cut links (between
brokers or to the controller), slow followers (beyond ``replica.lag.time.max.ms``),
broker crashes (SIGKILL model: the log survives, memory and unsent messages do not; the
high watermark comes back from its last checkpoint) and restarts, forced fencing,
preferred-leader elections, controller fail-overs (NOT_CONTROLLER for a while).

After every step the invariants of ``replication_sim_parts`` are checked. Then a calm
phase (everyone up, network healed) must bring every replica back into the ISR, agree on
every log and acknowledge every new record.

This module holds the model controller, the client, the chaos, the driver and the command
line; the brokers (their state, the messages they exchange and how a broker handles them)
are ``replication_sim_brokers``, the in-memory log, the network and the invariant checker
``replication_sim_parts``.

Replay one seed or soak many (``make soak`` runs this too)::

    .venv/bin/python -m riverbed.testing.replication_sim --seed 12 -v
    .venv/bin/python -m riverbed.testing.replication_sim --seeds 10000

A failure raises ``SimulationFailure`` whose message starts with the replay command.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from riverbed.metadata.control_common import ControllerConfig, ControllerError
from riverbed.metadata.controller import Controller
from riverbed.metadata.image import BrokerEndpoint, MetadataImage, PartitionRegistration, replay_all
from riverbed.metadata.partition_control import ELECTION_PREFERRED
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    AlterPartitionResponse,
    CreateTopicsRequest,
    ElectLeadersRequest,
    Message,
)
from riverbed.replication.config import ReplicaConfig
from riverbed.replication.wire import alter_partition_request
from riverbed.testing.replication_sim_brokers import (
    TOPIC,
    AlterAnswer,
    AlterReq,
    BrokerSide,
    Heartbeat,
    HeartbeatAnswer,
    ProduceAnswer,
    ProduceReq,
    Register,
    Registered,
    SimBroker,
)
from riverbed.testing.replication_sim_parts import (
    CLIENT,
    CONTROLLER,
    Checker,
    InvariantError,
    Net,
    Record,
)
from riverbed.testing.sim_seeds import add_seed_options, chosen_seeds

STEP_MS = 10
LAG_MAX_MS = 1000  # replica.lag.time.max.ms
SESSION_TIMEOUT_MS = 1500  # broker.session.timeout.ms


#: A soak prints how far it got every this many seeds.
PROGRESS_EVERY_SEEDS = 500
#: Mixed into the run's seed for the controller's placement randomness.
PLACEMENT_SEED_SALT = 0x5EED


class SimulationFailure(AssertionError):
    pass


@dataclass(frozen=True)
class SimParams:
    seed: int
    brokers: int = 3
    replication_factor: int = 3
    min_insync: int = 2
    chaos_ms: int = 12_000
    calm_ms: int = 20_000
    calm_records: int = 10
    verbose: bool = False
    sim: str = "replication_sim"  # the module that runs it (replication_shell_sim too)

    def replay_command(self) -> str:
        return (
            f".venv/bin/python -m riverbed.testing.{self.sim} --seed {self.seed} "
            f"--brokers {self.brokers} --rf {self.replication_factor} "
            f"--min-insync {self.min_insync} --chaos-ms {self.chaos_ms} -v"
        )


def params_for(seed: int) -> SimParams:
    rng = random.Random(seed * 7919 + 1)
    brokers = rng.choice((3, 3, 3, 4, 5))
    rf = rng.choice((3, 3, 2)) if brokers == 3 else rng.choice((3, brokers))
    return SimParams(
        seed=seed, brokers=brokers, replication_factor=rf, min_insync=rng.choice((1, 2))
    )


class ReplicationSim(BrokerSide):
    def __init__(self, params: SimParams) -> None:
        self.p = params
        self.rng = random.Random(params.seed)
        self.now = 0
        self.net = Net(self.rng)
        self.checker = Checker()
        self.stats: Counter[str] = Counter()
        self.trace: deque[str] = deque(maxlen=60)
        self.config = ReplicaConfig(
            replica_lag_time_max_ms=LAG_MAX_MS,
            min_insync_replicas=params.min_insync,
            replica_fetch_backoff_ms=100,
            alter_partition_timeout_ms=800,
        )
        self.brokers = {b: self._new_broker(b) for b in range(1, params.brokers + 1)}
        ids = random.Random(self.rng.getrandbits(64))
        self.controller = Controller(
            ControllerConfig(node_id=CONTROLLER),
            uuid_factory=lambda: uuid.UUID(int=ids.getrandbits(128)),
            # placement's own stream: the run's other draws stay as they were
            rng=random.Random(params.seed ^ PLACEMENT_SEED_SALT),
        )
        self.image = MetadataImage.EMPTY
        self.image_offset = 0
        self.last_heartbeat: dict[int, int] = {}
        self.not_controller_until = -1
        self.next_request_id = 0
        self.pending_produces: dict[int, str] = {}
        self.acked: dict[str, int] = {}
        self._setup()

    def _new_broker(self, broker_id: int) -> SimBroker:
        return SimBroker(broker_id)

    # ------------------------------------------------------------------ controller side
    def _commit(self, records: list[Message]) -> None:
        if records:
            self.image_offset += 1
            self.image = replay_all(self.image, records, offset=self.image_offset)

    def _setup(self) -> None:
        self._commit(self.controller.bootstrap_records())
        for b in self.brokers.values():
            self._register(b.broker_id, 0)
            b.broker_epoch = self.image.brokers[b.broker_id].broker_epoch
            # its first heartbeat, caught up with the metadata: unfenced
            up = self.controller.unfence_broker(
                self.image, b.broker_id, b.broker_epoch, 0, metadata_offset=self.image_offset
            )
            self._commit(list(up.records))
        ct = CreateTopicsRequest.CreatableTopic
        req = CreateTopicsRequest(
            topics=[ct(name=TOPIC, num_partitions=1, replication_factor=self.p.replication_factor)]
        )
        self._commit(list(self.controller.create_topics(self.image, req, 0).records))
        assert self.partition_reg() is not None, "topic creation failed"

    def _register(self, broker_id: int, incarnation: int, previous: int | None = None) -> None:
        inc = uuid.UUID(int=broker_id << 32 | incarnation)
        endpoint = BrokerEndpoint("PLAINTEXT", f"broker{broker_id}", 9092)
        old = self.image.brokers.get(broker_id)
        live = old is not None and self.now - self.last_heartbeat.get(broker_id, 0) <= (
            SESSION_TIMEOUT_MS
        )
        # This simulation's crashes keep the whole log (the page cache survives a
        # SIGKILL), so a restart reports the clean shutdown a broker that lost nothing
        # would: the registered epoch as PreviousBrokerEpoch.
        result = self.controller.register_broker(
            self.image,
            broker_id,
            inc,
            [endpoint],
            None,
            self.now,
            session_live=live,
            previous_broker_epoch=(
                previous if previous is not None else old.broker_epoch if old is not None else -1
            ),
        )
        self._commit(list(result.records))
        self.last_heartbeat[broker_id] = self.now
        self.stats["registrations"] += 1

    def partition_reg(self, image: MetadataImage | None = None) -> PartitionRegistration | None:
        topic = (image or self.image).topic(TOPIC)
        return None if topic is None else topic.partitions.get(0)

    def _controller_receive(self, src: int, msg: Any) -> None:
        if self.now < self.not_controller_until:
            if isinstance(msg, AlterReq):
                self.net.send(
                    CONTROLLER,
                    src,
                    AlterAnswer(msg.topic_id, None, ErrorCode.NOT_CONTROLLER, msg.req),
                    self.now,
                )
            return  # registrations and heartbeats are retried by the broker's timers
        if isinstance(msg, Register):
            try:
                self._register(src, msg.incarnation, msg.previous_epoch)
            except ControllerError:  # DUPLICATE_BROKER_REGISTRATION: the broker retries
                self.stats["registration refused"] += 1
                return
            epoch = self.image.brokers[src].broker_epoch
            self.net.send(CONTROLLER, src, Registered(epoch, msg.incarnation, self.image), self.now)
        elif isinstance(msg, Heartbeat):
            reg = self.image.brokers.get(src)
            if reg is None or reg.broker_epoch != msg.broker_epoch:
                self.net.send(
                    CONTROLLER,
                    src,
                    HeartbeatAnswer(ErrorCode.STALE_BROKER_EPOCH, self.image),
                    self.now,
                )
                return
            self.last_heartbeat[src] = self.now
            if reg.fenced:
                result = self.controller.unfence_broker(
                    self.image, src, msg.broker_epoch, self.now, metadata_offset=msg.metadata_offset
                )
                self._commit(list(result.records))
                self.stats["unfenced" if result.records else "unfence refused"] += 1
            self.net.send(CONTROLLER, src, HeartbeatAnswer(ErrorCode.NONE, self.image), self.now)
        elif isinstance(msg, AlterReq):
            request = alter_partition_request(src, msg.broker_epoch, [(msg.topic_id, 0, msg.req)])
            result = self.controller.alter_partition(self.image, request, self.now)
            self._commit(list(result.records))
            response = result.response
            assert isinstance(response, AlterPartitionResponse)
            self.stats["alter partition"] += 1
            self.net.send(
                CONTROLLER,
                src,
                AlterAnswer(msg.topic_id, response, ErrorCode.NONE, msg.req),
                self.now,
            )

    def _controller_tick(self) -> None:
        for bid, reg in self.image.brokers.items():
            if not reg.fenced and self.now - self.last_heartbeat.get(bid, 0) > SESSION_TIMEOUT_MS:
                self._commit(list(self.controller.fence_broker(self.image, bid, self.now).records))
                self.stats["fenced"] += 1

    # ------------------------------------------------------------------ broker side
    # ------------------------------------------------------------------ client
    def _client_produce(self, tag: str) -> str | None:
        """Send a new record to the leader; its value (None: no leader to send it to)."""
        reg = self.partition_reg()
        if reg is None or reg.leader < 0:
            return None
        self.next_request_id += 1
        value = f"{tag}{self.next_request_id}"
        self.pending_produces[self.next_request_id] = value
        self.net.send(CLIENT, reg.leader, ProduceReq(self.next_request_id, value), self.now)
        return value

    def _client_receive(self, msg: ProduceAnswer) -> None:
        value = self.pending_produces.pop(msg.request_id, None)
        if value is None:
            return  # a duplicate answer
        self.stats[f"acks {msg.error.name}"] += 1
        if msg.error is ErrorCode.NONE:
            self.checker.on_ack(msg.offset, value)
            self.acked[value] = msg.offset
        elif value.startswith("calm"):
            # a client retries a failed produce (NOT_ENOUGH_REPLICAS while the ISR grows
            # back, NOT_LEADER_OR_FOLLOWER...): the calm phase resends what is pending
            self.pending_produces[msg.request_id] = value

    # ------------------------------------------------------------------ chaos
    def _chaos(self) -> None:
        rng, now = self.rng, self.now
        alive = [b for b in self.brokers.values() if b.alive]
        dead = [b for b in self.brokers.values() if not b.alive]
        r = rng.random()
        if r < 0.002 and alive:
            b = rng.choice(alive)
            b.crash()
            self.stats["crashes"] += 1
            self._note(f"broker {b.broker_id} crashed")
        elif r < 0.006 and dead:
            b = rng.choice(dead)
            b.restart(now)
            self._note(f"broker {b.broker_id} restarted")
        elif r < 0.009:
            nodes = [*self.brokers, CONTROLLER]
            a, c = rng.sample(nodes, 2)
            self.net.cut[frozenset((a, c))] = now + rng.randint(200, 3000)
            self.stats["cuts"] += 1
        elif r < 0.011:
            b = rng.choice(list(self.brokers.values()))
            self.net.slow[b.broker_id] = now + rng.randint(1000, 4000)
            self.stats["slow periods"] += 1
        elif r < 0.012:
            self.not_controller_until = now + rng.randint(200, 1500)
            self.stats["controller fail-overs"] += 1
        elif r < 0.013:
            req = ElectLeadersRequest(election_type=ELECTION_PREFERRED, topic_partitions=None)
            result = self.controller.elect_leaders(self.image, req, now)
            self._commit(list(result.records))
            self.stats["preferred elections"] += bool(result.records)
        elif r < 0.014 and alive:
            bid = rng.choice(alive).broker_id
            try:
                self._commit(list(self.controller.fence_broker(self.image, bid, now).records))
                self.stats["forced fences"] += 1
            except ControllerError:
                pass

    # ------------------------------------------------------------------ driver
    def _note(self, line: str) -> None:
        line = f"[{self.now:>6} ms] {line}"
        self.trace.append(line)
        if self.p.verbose:
            print(line)

    def step(self) -> None:
        self.now += STEP_MS
        for src, dst, msg in self.net.due(self.now):
            if dst == CONTROLLER:
                self._controller_receive(src, msg)
            elif dst == CLIENT:
                self._client_receive(msg)
            elif self.brokers[dst].alive:
                self._broker_receive(self.brokers[dst], src, msg)
        self._controller_tick()
        for b in self.brokers.values():
            if b.alive:
                self._broker_tick(b)
        self._check()

    def _check(self) -> None:
        reg = self.partition_reg()
        assert reg is not None
        self.checker.check_isr(reg.isr, {b.broker_id: b.log for b in self.brokers.values()})
        for b in self.brokers.values():
            if b.part is not None and b.part.leader is not None:
                self.checker.on_leader(b.broker_id, b.part.leader.leader_epoch)

    def run(self) -> None:
        rng = self.rng
        self.net.drop_p, self.net.dup_p = rng.choice((0.0, 0.01, 0.05)), rng.choice((0.0, 0.01))
        while self.now < self.p.chaos_ms:
            self._chaos()
            if rng.random() < 0.15:
                self._client_produce("v")
            self.step()
        self._calm()

    def _calm(self) -> None:
        self.net.heal()
        self.not_controller_until = -1
        for b in self.brokers.values():
            if not b.alive:
                b.restart(self.now)
        start = self.now
        wanted: list[str] = []
        while self.now - start < self.p.calm_ms:
            self.step()
            if (
                len(wanted) < self.p.calm_records
                and self.now - start > 3000
                and self.now % 200 == 0
            ):
                value = self._client_produce("calm")
                if value is not None:
                    wanted.append(value)
            elif self.pending_produces and self.now % 1000 == 0:
                # a produce that timed out or failed is retried (as a client does), once
                # there is a leader to send it to
                for rid, value in list(self.pending_produces.items()):
                    if value.startswith("calm") and (again := self._client_produce("calm")):
                        del self.pending_produces[rid]
                        wanted[wanted.index(value)] = again
            if len(wanted) == self.p.calm_records and self._settled(wanted):
                self.stats["calm ms"] += self.now - start
                return
        raise InvariantError(f"calm phase did not settle: {self._describe()}")

    def _settled(self, wanted: list[str]) -> bool:
        reg = self.partition_reg()
        if reg is None or reg.leader < 0 or set(reg.isr) != set(reg.replicas):
            return False
        if any(v not in self.acked for v in wanted):
            return False
        leading = self._leader_log(reg.leader)
        if leading is None:
            return False
        hw, records = leading
        return hw == len(records) and all(self._log(r) == records for r in reg.replicas)

    def _leader_log(self, broker_id: int) -> tuple[int, list[Record]] | None:
        """(high watermark, log) of ``broker_id`` if it leads now."""
        b = self.brokers[broker_id]
        if b.part is None or b.part.leader is None:
            return None
        return b.part.high_watermark, b.log.records

    def _log(self, broker_id: int) -> list[Record]:
        return self.brokers[broker_id].log.records

    def _describe(self) -> str:
        reg = self.partition_reg()
        lines = [f"controller: {reg}"]
        for b in self.brokers.values():
            part = b.part
            role = part.role.value if part else "-"
            hw = part.high_watermark if part else -1
            lines.append(
                f"broker {b.broker_id}: alive={b.alive} epoch={b.broker_epoch} role={role} "
                f"leo={b.log.log_end_offset} hw={hw} last={b.log.records[-3:]}"
            )
        return "\n".join(lines)


S = TypeVar("S", bound=ReplicationSim)


def run_seed(params: SimParams) -> ReplicationSim:
    return run_sim(ReplicationSim(params))


def run_sim(sim: S) -> S:
    """Run ``sim``; a broken invariant, or an error the code under test raised, raises
    SimulationFailure with the replay command (a soak goes on with the next seed)."""
    try:
        sim.run()
    except Exception as err:  # InvariantError included
        what = str(err) if isinstance(err, InvariantError) else f"unexpected error: {err!r}"
        trace = "\n".join(sim.trace)
        raise SimulationFailure(
            f"replay: {sim.p.replay_command()}\n{what}\n{sim._describe()}\nlast events:\n{trace}"
        ) from err
    return sim


def main(
    argv: list[str] | None = None,
    run: Callable[[SimParams], ReplicationSim] = run_seed,
    sim: str = "replication_sim",
    description: str = __doc__.split("\n")[0],
) -> int:
    """The command line of this simulation, or of ``sim`` whose seeds ``run`` runs."""
    ap = argparse.ArgumentParser(description=description)
    add_seed_options(ap)  # --seed runs with the params given; --seeds with params per seed
    ap.add_argument("--brokers", type=int, default=3)
    ap.add_argument("--rf", type=int, default=3)
    ap.add_argument("--min-insync", type=int, default=2)
    ap.add_argument("--chaos-ms", type=int, default=SimParams.chaos_ms)
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    if args.seed is not None:
        todo = [
            SimParams(
                args.seed,
                args.brokers,
                args.rf,
                args.min_insync,
                args.chaos_ms,
                verbose=args.verbose,
                sim=sim,
            )
        ]
    else:
        todo = [replace(params_for(s), sim=sim) for s in chosen_seeds(args)]
    failed, stats = 0, Counter[str]()
    started = time.monotonic()
    for done, params in enumerate(todo, 1):
        try:
            stats.update(run(params).stats)
        except SimulationFailure as err:
            failed += 1
            print(f"FAILED seed {params.seed}:\n{err}\n", file=sys.stderr, flush=True)
        if done % PROGRESS_EVERY_SEEDS == 0 and done < len(todo):  # a long soak's pulse
            took = time.monotonic() - started
            print(f"{done - failed}/{done} seeds passed so far in {took:.1f} s", flush=True)
    took = time.monotonic() - started
    print(f"{len(todo) - failed}/{len(todo)} seeds passed in {took:.1f} s")
    if args.verbose or len(todo) > 1:
        for key, count in sorted(stats.items()):
            print(f"  {key}: {count}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
