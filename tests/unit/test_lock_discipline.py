"""Each object's lock is its own: no code takes another object's private lock.

A partition log's lock guards its segments, offsets and the producer state beside it;
code outside it asks the log for an operation that runs its change under that lock
(``PartitionLog.attach_producer_state``, ``update_producer_state``, ``replace_with``)
instead of reaching for ``plog._lock``. Checked on the syntax tree: a private attribute
whose name ends in ``lock`` is only ever read from ``self`` (or ``cls``).
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


@pytest.mark.parametrize("path", sorted(ROOT.rglob("*.py")), ids=str)
def test_no_code_takes_another_objects_private_lock(path: Path) -> None:
    found = _foreign_locks(ast.parse(path.read_text()))
    assert not found, f"{path.relative_to(ROOT)} takes another object's lock: {found}"


def test_the_check_sees_a_reach_in() -> None:
    """The rule catches the shape it forbids (what producer/manager.py once did)."""
    code = "def attach(plog):\n    with plog._lock:\n        plog.producer_state = 1\n"
    assert _foreign_locks(ast.parse(code)) == ["line 2: plog._lock"]
    assert _foreign_locks(ast.parse("with self._lock:\n    pass\n")) == []
