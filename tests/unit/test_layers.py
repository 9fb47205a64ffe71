"""DESIGN.md's layers: below ``server/``, nothing reads a clock or opens a socket.

``storage/``, ``raft/`` and ``metadata/`` take ``now_ms`` (or a ``Clock``) from their
caller and exchange messages, never bytes on a socket; the asyncio shells that own the
clock, the sockets and the event loop live in ``server/``. Checked on the import graph
(imports under ``if TYPE_CHECKING:`` are annotations only) and on calls of the clock.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import riverbed

CORES = ("storage", "raft", "metadata")
FORBIDDEN_MODULES = ("time", "socket", "selectors", "datetime", "riverbed.server")
CLOCK_CALLS = ("time.time", "time.monotonic", "time.time_ns", "time.monotonic_ns")
ROOT = Path(riverbed.__file__).parent


def _runtime_imports(tree: ast.Module) -> list[str]:
    names: list[str] = []

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            if isinstance(node, ast.Import):
                names.extend(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.append(node.module)
            for field in ("body", "orelse", "finalbody", "handlers"):
                inner = getattr(node, field, None)
                if isinstance(inner, list):
                    visit(
                        [n for n in inner if isinstance(n, ast.stmt)]
                        + [s for h in inner if isinstance(h, ast.ExceptHandler) for s in h.body]
                    )

    visit(tree.body)
    for node in ast.walk(tree):  # imports inside functions count too
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            visit(node.body)
    return names


@pytest.mark.parametrize(
    "path", [p for core in CORES for p in sorted((ROOT / core).rglob("*.py"))], ids=str
)
def test_core_reads_no_clock_and_opens_no_socket(path: Path) -> None:
    tree = ast.parse(path.read_text())
    bad = [
        m
        for m in _runtime_imports(tree)
        if any(m == f or m.startswith(f + ".") for f in FORBIDDEN_MODULES)
    ]
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}"
    calls = [ast.unparse(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)]
    assert not [c for c in calls if c in CLOCK_CALLS], f"{path.relative_to(ROOT)} reads a clock"
