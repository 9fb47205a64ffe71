"""Seeded model check of the producer-id ledger (issue 18, defect 1).

The real :class:`riverbed.producer.manager.ProducerStateManager` (its ledger, its
write-through cache) over a fake log (:mod:`riverbed.testing.ledger_model_log`), against a
reference that holds every batch appended and not truncated away. One
``random.Random(seed)`` picks the sizes (ledger files of 1-4 entries, caches of 1-3
producers, 2-7 producers, expiry or none, flushes in the caller's thread or a manual
background pool) and the operations: idempotent appends and epoch bumps, retries of a
producer's last batch, plain batches, segment rolls, timer flushes and expiry checks as
the clock advances, log fsyncs, truncations (full ones too), DeleteRecords, retention,
complete snapshots as of any offset, and reopens: clean (close, then open), a process
crash (the page cache keeps the mapped files) and a power failure (the log keeps only
what was fsynced or a random part beyond; each mapped ``.ledger`` file is lost or keeps a
random prefix of its entries; sealed files, written with fsync and rename, survive, and
so do deletions: the model assumes the file system keeps its metadata operations in
order, and trusts the code's fsyncs rather than checking them, so it runs on tmpfs).

After every step, every producer must read as the reference says: its newest batch
below the log end (whatever retention deleted), or absent once expired; a retry of its
last batch must be answered as a duplicate with the original offsets, never appended
again; every append in sequence must be taken. Some steps also check DescribeProducers
and complete snapshots as of an offset between the log start and the end.

Replay or soak (``make soak`` runs this too)::

    .venv/bin/python -m riverbed.testing.ledger_model --seed 12 -v
    .venv/bin/python -m riverbed.testing.ledger_model --seeds 10000

``--mutation NAME`` runs with a deliberately broken rule (:data:`MUTATIONS`), which the
check must catch. A failure raises :class:`ModelFailure`, whose message starts with the
replay command.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, ParamSpec, TypeVar

from riverbed.producer.ledger import LedgerConfig
from riverbed.producer.ledger_files import HEADER, Fields
from riverbed.producer.manager import ProducerStateConfig, ProducerStateManager
from riverbed.producer.snapshot import ENTRY, decode_snapshot, entry_fields
from riverbed.testing.ledger_model_log import ModelLog, Reference, alive, header
from riverbed.testing.ledger_model_mutations import MUTATIONS
from riverbed.testing.sim_seeds import add_seed_options, chosen_seeds

__all__ = ["MUTATIONS", "ModelFailure", "ModelParams", "ModelResult", "main", "run_seed"]

P = ParamSpec("P")
T = TypeVar("T")
T0: Final = 1_700_000_000_000
NO_EXPIRY_MS: Final = 10**12
#: steps per seed
STEPS: Final = 120
#: (operation, weight)
OPS: Final = (
    ("append", 30),
    ("retry", 8),
    ("bump_epoch", 2),
    ("plain", 4),
    ("roll", 12),
    ("tick", 6),
    ("run_pool", 4),
    ("fsync", 4),
    ("truncate", 6),
    ("truncate_fully", 1),
    ("delete_records", 6),
    ("retention", 4),
    ("reopen_clean", 5),
    ("reopen_crash", 3),
    ("reopen_power_loss", 4),
    ("complete", 3),
)


class ModelFailure(AssertionError):
    """The ledger disagreed with the reference (message: replay command first)."""


@dataclass(frozen=True, slots=True)
class ModelParams:
    seed: int
    mutation: str | None = None
    verbose: bool = False

    def replay(self) -> str:
        extra = f" --mutation {self.mutation}" if self.mutation else ""
        return f"python -m riverbed.testing.ledger_model --seed {self.seed}{extra} -v"


@dataclass
class ModelResult:
    stats: Counter[str] = field(default_factory=Counter)


class ManualPool(Executor):
    """The background flush pool, run when the model says (steps 4-8 of a flush)."""

    def __init__(self) -> None:
        self.tasks: list[tuple[Callable[..., object], tuple[object, ...]]] = []

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        self.tasks.append((lambda: fn(*args, **kwargs), ()))
        return Future()

    def run(self) -> int:
        tasks, self.tasks = self.tasks, []
        for fn, args in tasks:
            fn(*args)
        return len(tasks)


@dataclass
class Client:
    """One idempotent producer's view: its epoch, next sequence and last batch sent."""

    pid: int
    epoch: int = 0
    next_seq: int = 0
    last: tuple[int, int, int] | None = None  # (epoch, base sequence, count)


class Model:
    """One seed's run (see the module docstring)."""

    def __init__(self, params: ModelParams, directory: Path) -> None:
        self.params = params
        self.rng = random.Random(params.seed)
        rng = self.rng
        self.dir = directory
        self.now = T0
        self.expiration_ms = rng.choice([NO_EXPIRY_MS, 60_000])
        self.config = ProducerStateConfig(
            producer_id_expiration_ms=self.expiration_ms,
            cache_max_entries=rng.randint(1, 3),
            ledger=LedgerConfig(
                file_bytes=HEADER + rng.randint(1, 4) * ENTRY.size,
                flush_interval_ms=rng.choice([5_000, 20_000]),
            ),
        )
        self.pool = ManualPool() if rng.random() < 0.4 else None
        self.clients = [Client(pid) for pid in rng.sample(range(1, 40), rng.randint(2, 7))]
        self.log = ModelLog()
        self.log.settle = self.settle
        self.ref = Reference()
        self.stats: Counter[str] = Counter()
        self.trace: list[str] = []
        self.mgr = self._attach()

    # ---- plumbing ---------------------------------------------------------------------------

    def _attach(self) -> ProducerStateManager:
        mgr = ProducerStateManager(
            self.dir, lambda: self.now, self.config, "model", flush_executor=self.pool
        )
        mgr.attach(self.log)
        return mgr

    def fail(self, what: str) -> ModelFailure:
        steps = "\n".join(self.trace[-40:])
        return ModelFailure(
            f"replay: {self.params.replay()}\n{what}\nlast steps:\n{steps}\n"
            f"files: {sorted(p.name for p in self.dir.iterdir())}"
        )

    def note(self, text: str) -> None:
        self.trace.append(text)
        if self.params.verbose:
            print(text)

    def settle(self) -> None:
        """Run the pending background flushes (the real pool runs them concurrently; a
        truncation, deletion, roll or close would wait for them)."""
        if self.pool is not None:
            self.stats["background flushes"] += self.pool.run()

    def expected(self, as_of: int | None = None) -> dict[int, Fields]:
        return {
            pid: f
            for pid, f in self.ref.state(as_of).items()
            if alive(f, self.now, self.expiration_ms)
        }

    # ---- checks -----------------------------------------------------------------------------

    def check_reads(self) -> None:
        want = self.expected()
        for c in self.clients:
            entry = self.mgr.table.get(c.pid)
            got = entry_fields(entry) if entry is not None else None
            if got != want.get(c.pid):
                raise self.fail(f"producer {c.pid} reads {got}, expected {want.get(c.pid)}")
        self.stats["reads checked"] += len(self.clients)

    def check_describe(self) -> None:
        got = {f[0]: f for f in (entry_fields(e) for e in self.mgr.describe())}
        if got != self.expected():
            raise self.fail(f"describe {got}, expected {self.expected()}")

    def check_complete(self) -> None:
        low, end = self.log.log_start_offset, self.log.log_end_offset
        as_of = self.rng.choice([low, end, self.rng.randint(low, end)])
        self.settle()
        data = self.mgr.complete_snapshot_bytes(as_of)
        got = {f[0]: f for f in (entry_fields(e) for e in decode_snapshot(data))}
        want = self.expected(as_of)
        if got != want:
            raise self.fail(f"complete snapshot as of {as_of}: {got}, expected {want}")
        self.stats["complete snapshots checked"] += 1

    # ---- operations: producers --------------------------------------------------------------

    def op_append(self, c: Client, count: int) -> None:
        want = self.expected().get(c.pid)
        if want is not None:
            c.epoch = max(c.epoch, want[1])
            c.next_seq = want[2] + 1 if c.epoch == want[1] else 0
        h = header(self.log.log_end_offset, c.pid, c.epoch, c.next_seq, count, self.now)
        try:
            dup = self.log.append(h)
        except Exception as e:
            raise self.fail(f"append {h} refused: {e!r}") from e
        if dup is not None:
            raise self.fail(f"append {h} taken for a duplicate of {dup}")
        self.ref.append(h)
        c.last, c.next_seq = (c.epoch, c.next_seq, count), c.next_seq + count
        self.stats["appends"] += 1

    def op_retry(self, c: Client) -> None:
        """A retry of the producer's last batch while the state still ends with it."""
        want = self.expected().get(c.pid)
        if c.last is None or want is None:
            return
        epoch, seq, count = c.last
        if (want[1], want[2], want[4]) != (epoch, seq + count - 1, count - 1):
            return  # truncated away or overtaken: not a retry the broker must recognise
        h = header(self.log.log_end_offset, c.pid, epoch, seq, count, self.now)
        try:
            dup = self.log.append(h)
        except Exception as e:
            raise self.fail(f"retry {h} refused: {e!r}") from e
        if dup is None:
            raise self.fail(f"retry {h} appended again (state {want})")
        if (dup.first_offset, dup.last_offset) != (want[3] - want[4], want[3]):
            raise self.fail(f"retry {h} answered with offsets of {dup}, expected {want}")
        self.stats["retries recognised"] += 1

    # ---- operations: the log --------------------------------------------------------------

    def op_truncate(self) -> None:
        self.settle()
        points = self.log.boundaries(self.log.bases[0])
        if len(points) < 2:
            return
        to = self.rng.choice(points[:-1])
        below_complete = any(p.suffix == ".complete" and int(p.stem) > to for p in self._files())
        self.log.truncate_to(to)
        self.ref.truncate(to)
        self.stats["truncations"] += 1
        self.stats["truncations below a complete file"] += below_complete

    def op_truncate_fully(self) -> None:
        self.settle()
        self.log.truncate_fully(self.log.log_end_offset + self.rng.randint(0, 3))
        self.ref.clear()
        self.stats["full truncations"] += 1

    def op_delete(self, retention: bool) -> None:
        self.settle()
        before = {p.name for p in self._files() if p.suffix in (".snapshot", ".complete")}
        carried = self.mgr.ledger.carried_files
        if retention:
            n = self.log.delete_oldest_segments(self.rng.randint(1, 3))
        else:
            low, end = self.log.log_start_offset, self.log.log_end_offset
            n = self.log.delete_records_before(self.rng.randint(low, end))
            self.stats["delete records"] += 1
        after = {p.name for p in self._files() if p.suffix in (".snapshot", ".complete")}
        self.stats["segment deletions"] += n > 0
        self.stats["ledger files deleted"] += sum(n.endswith(".snapshot") for n in before - after)
        self.stats["complete files deleted"] += sum(n.endswith(".complete") for n in before - after)
        self.stats["files carried into"] += self.mgr.ledger.carried_files - carried

    def _files(self) -> list[Path]:
        return sorted(self.dir.iterdir())  # sorted: the rng draws per file in one order

    # ---- operations: reopening --------------------------------------------------------------

    def reopen(self, kind: str) -> None:
        if kind == "clean":
            self.settle()
            self.log.close()
        else:
            # a crash: nothing more is written (a pending background flush never runs)
            self.mgr.ledger.abandon()
            if self.pool is not None:
                self.stats["crashes with a pending flush"] += bool(self.pool.tasks)
                self.pool.tasks.clear()
            self.log.producer_state = None
        if kind == "power_loss":
            self.lose_unsynced()
        self.mgr = self._attach()
        self.stats[f"reopens {kind}"] += 1

    def lose_unsynced(self) -> None:
        low = max(self.log.flushed, self.log.bases[0])
        keep_to = self.rng.choice(self.log.boundaries(low))
        self.stats["power losses that lost batches"] += keep_to < self.log.log_end_offset
        self.log.lose_unflushed(keep_to)
        self.ref.truncate(keep_to)
        for p in self._files():
            if p.suffix != ".ledger":
                continue
            if self.rng.random() < 0.5:
                p.unlink()
                self.stats["mapped files lost"] += 1
            else:
                data = bytearray(p.read_bytes())
                count = int.from_bytes(data[6:10], "big")
                data[6:10] = self.rng.randint(0, max(count, 0)).to_bytes(4, "big")
                p.write_bytes(bytes(data))
                self.stats["mapped files cut"] += 1

    # ---- the run ----------------------------------------------------------------------------

    def step(self, op: str) -> None:
        rng, c = self.rng, self.rng.choice(self.clients)
        self.note(f"{op} (pid {c.pid}, end {self.log.log_end_offset}, t+{self.now - T0})")
        if op == "append":
            self.op_append(c, rng.randint(1, 3))
        elif op == "retry":
            self.op_retry(c)
        elif op == "bump_epoch":
            c.epoch, c.next_seq = c.epoch + 1, 0
            self.op_append(c, 1)
        elif op == "plain":
            self.log.append(header(self.log.log_end_offset, -1, -1, -1, rng.randint(1, 2), 0))
        elif op == "roll":
            self.settle()
            self.stats["rolls"] += self.log.roll()
        elif op == "tick":
            self.now += rng.choice([0, 1_000, 10_000, 30_000, 60_000])
            self.stats["timer flushes"] += self.mgr.flush_if_due()
            self.mgr.remove_expired()
        elif op == "run_pool":
            self.settle()
        elif op == "fsync":
            self.log.fsync()
        elif op == "truncate":
            self.op_truncate()
        elif op == "truncate_fully":
            self.op_truncate_fully()
        elif op in ("delete_records", "retention"):
            self.op_delete(op == "retention")
        elif op.startswith("reopen_"):
            self.reopen(op.removeprefix("reopen_"))
        elif op == "complete":
            self.check_complete()
            self.check_describe()

    def run(self) -> ModelResult:
        names = [name for name, _ in OPS]
        weights = [w for _, w in OPS]
        for _ in range(STEPS):
            self.step(self.rng.choices(names, weights)[0])
            self.check_reads()
        self.stats["expired producers"] += sum(
            1 for f in self.ref.state().values() if not alive(f, self.now, self.expiration_ms)
        )
        self.settle()
        self.log.close()
        return ModelResult(self.stats)


def run_seed(params: ModelParams) -> ModelResult:
    """One seed in a fresh directory (tmpfs when there is one: fsyncs cost nothing)."""
    shm = Path("/dev/shm")
    base = tempfile.mkdtemp(prefix="ledger-model-", dir=shm if shm.is_dir() else None)
    try:
        with MUTATIONS[params.mutation]() if params.mutation else contextlib.nullcontext():
            model = Model(params, Path(base))
            try:
                return model.run()
            except ModelFailure:
                raise
            except Exception as e:
                raise model.fail(f"unexpected {e!r}") from e
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_seed_options(ap)
    ap.add_argument("--mutation", choices=sorted(MUTATIONS), help="a deliberately broken rule")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    seeds = chosen_seeds(args)
    failed, stats = 0, Counter[str]()
    started = time.monotonic()
    for seed in seeds:
        try:
            stats.update(run_seed(ModelParams(seed, args.mutation, args.verbose)).stats)
        except ModelFailure as err:
            failed += 1
            print(f"FAILED seed {seed}:\n{err}\n", file=sys.stderr)
    took = time.monotonic() - started
    print(f"ledger model: {len(seeds) - failed}/{len(seeds)} seeds passed in {took:.1f} s")
    if args.verbose or len(seeds) > 1:
        for key, count in sorted(stats.items()):
            print(f"  {key}: {count}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
