"""Every long-running asyncio task in ``server/`` runs under ``supervise`` (issue 18, defect 5).

Checked on the source: every ``create_task`` / ``ensure_future`` call in ``server/`` is in
``server/supervise.py`` itself or in one of the few functions listed below, whose tasks
serve one connection or one request (an error there ends that connection or answers that
request: a client's bytes must never halt a broker). A new background loop started with a
bare ``create_task`` fails this test. And ``supervise`` itself: an unexpected error goes
to the fault handler, cancellation does not.
"""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path
from typing import Any

import pytest

import riverbed
from riverbed.server.fault_handler import FaultHalt, RecordingFaultHandler
from riverbed.server.remote_log import RemoteLogManager, RemoteLogSettings
from riverbed.server.supervise import guarded, supervise
from riverbed.tiered.rsm import FsspecRemoteStorageManager

SERVER = Path(riverbed.__file__).parent / "server"
SPAWNS = ("create_task", "ensure_future")
#: Event-loop turns a test waits for a task to react (a positive event, not a sleep).
TURNS_MAX = 1000

#: (module under server/, function) -> why its tasks are not long-running node tasks.
PER_CONNECTION = {
    ("connection.py", "Connection.run"): "the reader and writer of one client connection",
    ("eager_start.py", "start_eagerly"): "the rest of one request's handler, started by"
    " Connection._read_loop: its error is answered",
    ("socket_server.py", "SocketServer._accept_loop"): "one accepted connection"
    " (_serve logs, ends it)",
    ("broker/auto_create.py", "AutoTopicCreations.create"): "one topic's auto-creation,"
    " shared by the Metadata requests that wait for it: its error is answered to them",
    ("jwks_https.py", "HttpsJwks.run"): "waits on two events inside the supervised JWKS"
    " refresh loop, cancelled before each round ends",
}

#: Modules whose long-running loops must be started with ``supervise``.
SUPERVISED_MODULES = (
    "replication/manager.py",  # replica ticker, AlterPartition sender
    "replication/fetcher.py",  # replica fetchers
    "remote_log.py",  # the remote log manager's scheduling loop
    "node.py",  # housekeeping, heartbeats, parent watch
    "quorum.py",  # the controller loop
    "raft_driver.py",  # the raft timer and driver tasks
    "raft_transport.py",  # raft connection readers
    "socket_server.py",  # acceptors
    "coordinator.py",  # the group coordinator's timer and loads
    "txn_coordinator.py",  # the transaction coordinator's timer, loads, writes, markers
    "broker/log_work.py",  # the partition log work (creations and deletions, off the loop)
    "broker/producers.py",  # the producer id block prefetch
)


def _calls(path: Path) -> list[tuple[str, str]]:
    """(enclosing Class.function, called name) of every call in ``path``."""
    out: list[tuple[str, str]] = []

    def visit(node: ast.AST, scope: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            inner = scope
            if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                inner = [*scope, child.name]
            if isinstance(child, ast.Call):
                f = child.func
                name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
                out.append((".".join(scope), name))
            visit(child, inner)

    visit(ast.parse(path.read_text()), [])
    return out


def _spawn_sites() -> list[tuple[str, str]]:
    return [
        (str(path.relative_to(SERVER)), where)
        for path in sorted(SERVER.rglob("*.py"))
        if path.name != "supervise.py"
        for where, name in _calls(path)
        if name in SPAWNS
    ]


def test_every_task_started_in_server_is_supervised() -> None:
    sites = _spawn_sites()
    unsupervised = [s for s in sites if s not in PER_CONNECTION]
    assert not unsupervised, (
        f"tasks started without supervise (riverbed.server.supervise): {unsupervised}"
    )
    assert set(PER_CONNECTION) <= set(sites), "the per-connection list names a gone site"


LOOP_CALLBACKS = ("call_soon", "call_soon_threadsafe", "call_later", "call_at")


def _callback_arg(call: ast.Call) -> ast.expr | None:
    """The callable a loop-scheduling call will run (through a nested ``call_later``)."""
    f = call.func
    name = f.attr if isinstance(f, ast.Attribute) else ""
    skip = 1 if name in ("call_later", "call_at") else 0
    if len(call.args) <= skip:
        return None
    arg = call.args[skip]
    nested = arg.attr if isinstance(arg, ast.Attribute) else ""
    if nested in ("call_later", "call_at") and len(call.args) > skip + 2:
        return call.args[skip + 2]
    return arg


def _is_guarded(arg: ast.expr | None) -> bool:
    if isinstance(arg, ast.Call):
        return isinstance(arg.func, ast.Name) and arg.func.id == "guarded"
    return isinstance(arg, ast.Attribute) and arg.attr.startswith("_guarded")


def test_every_loop_callback_in_server_is_guarded() -> None:
    """A callback asyncio runs (``call_soon_threadsafe`` from a pool thread, ``call_later``)
    that raises is only logged by the loop: it must be built with ``guarded`` (called
    inline, or kept as a ``self._guarded_*`` attribute)."""
    bare = [
        f"{path.relative_to(SERVER)}:{node.lineno}"
        for path in sorted(SERVER.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in LOOP_CALLBACKS
        and not _is_guarded(_callback_arg(node))
    ]
    assert not bare, f"loop callbacks not built with supervise.guarded: {bare}"


def test_guarded_callback_errors_halt() -> None:
    handler = RecordingFaultHandler()
    cause = KeyError("gone")
    seen: list[int] = []

    def bookkeeping(n: int) -> None:
        seen.append(n)
        if n < 0:
            raise cause

    run = guarded("the bookkeeping", bookkeeping, handler)
    run(1)
    with pytest.raises(FaultHalt):
        run(-1)
    assert seen == [1, -1] and handler.faults == [("the bookkeeping failed", cause)]


@pytest.mark.parametrize("module", SUPERVISED_MODULES)
def test_long_running_loops_are_started_with_supervise(module: str) -> None:
    # supervise_background is supervise in a fresh context, tracked by its owner
    supervised = ("supervise", "supervise_background")
    assert any(name in supervised for _, name in _calls(SERVER / module)), module


def test_supervise_halts_on_an_unexpected_error_and_not_on_cancellation() -> None:
    handler = RecordingFaultHandler()
    cause = ValueError("bug")

    async def failing() -> None:
        await asyncio.sleep(0)
        raise cause

    async def forever() -> None:
        await asyncio.Event().wait()

    async def run() -> None:
        task = supervise("the loop", failing(), handler)
        with pytest.raises(FaultHalt):
            await task
        assert handler.faults == [("the loop failed", cause)]
        quiet = supervise("another loop", forever(), handler)
        await asyncio.sleep(0)
        quiet.cancel()
        with pytest.raises(asyncio.CancelledError):
            await quiet
        assert len(handler.faults) == 1

    asyncio.run(run())


def test_an_unexpected_error_in_the_remote_log_loop_halts_the_node(tmp_path: Path) -> None:
    """Before: the loop logged "scheduling failed" and went round again, for ever."""
    handler = RecordingFaultHandler()
    cause = RuntimeError("bug in the partition bookkeeping")
    settings = RemoteLogSettings(
        enabled=True,
        task_interval_ms=1000,
        copier_threads=1,
        retry_backoff_ms=10,
        retry_backoff_max_ms=100,
        reader_threads=1,
        reader_max_pending=4,
        fetch_max_wait_ms=2000,
    )
    rsm = FsspecRemoteStorageManager(f"file://{tmp_path / 'remote'}")
    rlm = RemoteLogManager(settings, rsm, 1, fault_handler=handler)

    def broken() -> dict[tuple[str, int], Any]:
        raise cause

    async def run() -> None:
        rlm.start(broken, lambda: None)
        for _ in range(TURNS_MAX):
            if handler.faults:
                break
            await asyncio.sleep(0)
        assert handler.faults == [("remote log manager loop failed", cause)]
        await rlm.close()

    asyncio.run(run())
