"""Each object's lock is its own: no code takes another object's private lock.

A partition log's lock guards its segments, offsets and the producer state beside it;
code outside it asks the log for an operation that runs its change under that lock
(``PartitionLog.attach_producer_state``, ``update_producer_state``, ``replace_with``)
instead of reaching for ``plog._lock``. Checked on the syntax tree: a private attribute
whose name ends in ``lock`` is only ever read from ``self`` (or ``cls``).

The partition log is split as Kafka's is (``storage/local_log.py``'s LocalLog under
``storage/log.py``'s unified PartitionLog): no module but ``storage/local_log.py`` touches
the local log's lock or its segment list, and nothing reaches into the local log's
private state (``plog._local._segments``): the unified log uses the local log's methods.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import riverbed

ROOT = Path(riverbed.__file__).parent


def _foreign_locks(tree: ast.AST) -> list[str]:
    return [
        f"line {node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and node.attr.endswith("lock")
        and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
    ]


LOCAL_LOG = ROOT / "storage" / "local_log.py"
#: The local log's private state: its lock and its segment list (with the base offsets).
LOCAL_LOG_STATE = ("_lock", "_segments", "_bases")


def _local_log_reach_ins(tree: ast.AST, *, storage: bool) -> list[str]:
    """Accesses of the local log's private state from outside it: anything private read
    through a ``_local`` attribute, and (in storage/, whose only segment list is the
    local log's) any ``_segments`` / ``_bases``, even on ``self``."""
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and node.attr.startswith("_")):
            continue
        through_local = isinstance(node.value, ast.Attribute) and node.value.attr == "_local"
        segment_list = storage and node.attr in LOCAL_LOG_STATE[1:]
        if through_local or segment_list:
            found.append((node.lineno, node.col_offset, ast.unparse(node)))
    return [f"line {line}: {text}" for line, _, text in sorted(found)]


@pytest.mark.parametrize("path", sorted(p for p in ROOT.rglob("*.py") if p != LOCAL_LOG), ids=str)
def test_only_the_local_log_touches_its_lock_and_segments(path: Path) -> None:
    storage = path.parent == ROOT / "storage"
    found = _local_log_reach_ins(ast.parse(path.read_text()), storage=storage)
    assert not found, f"{path.relative_to(ROOT)} reaches into the local log: {found}"


def test_the_local_log_check_sees_reach_ins() -> None:
    code = (
        "def f(self, plog):\n"
        "    with self._local._lock:\n"
        "        plog._local._segments.pop()\n"
        "    return self._segments[0], self._local.segments\n"
    )
    tree = ast.parse(code)
    assert _local_log_reach_ins(tree, storage=False) == [
        "line 2: self._local._lock",
        "line 3: plog._local._segments",
    ]
    assert _local_log_reach_ins(tree, storage=True) == [
        "line 2: self._local._lock",
        "line 3: plog._local._segments",
        "line 4: self._segments",
    ]
    # the local log itself is where they live
    assert "self._segments" in LOCAL_LOG.read_text() and "self._lock" in LOCAL_LOG.read_text()


@pytest.mark.parametrize("path", sorted(ROOT.rglob("*.py")), ids=str)
def test_no_code_takes_another_objects_private_lock(path: Path) -> None:
    found = _foreign_locks(ast.parse(path.read_text()))
    assert not found, f"{path.relative_to(ROOT)} takes another object's lock: {found}"


def test_the_check_sees_a_reach_in() -> None:
    """The rule catches the shape it forbids (what producer/manager.py once did)."""
    code = "def attach(plog):\n    with plog._lock:\n        plog.producer_state = 1\n"
    assert _foreign_locks(ast.parse(code)) == ["line 2: plog._lock"]
    assert _foreign_locks(ast.parse("with self._lock:\n    pass\n")) == []
