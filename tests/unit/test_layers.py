"""DESIGN.md's layers: below ``server/``, nothing reads a clock or opens a socket.

Every core (``storage/``, ``raft/``, ``metadata/``, ``replication/``, ``coordinator/``,
``transaction/``, ``producer/``, ``tiered/``, ``protocol/`` and ``security/``) takes ``now_ms`` (or a
``Clock``) from its caller and exchanges messages, never bytes on a socket; the asyncio
shells that own the clock, the sockets and the event loop live in ``server/``.
"Dependencies point down only": no core imports ``server/`` or a layer above it.
DESIGN.md's one exception: ``tiered/``'s remote storage managers, adapters around fsspec
that only ``server/``'s bounded pools call.
Checked on the import graph (imports under ``if TYPE_CHECKING:`` are annotations only) and
on calls of the clock.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import riverbed

CORES = (
    "storage",
    "raft",
    "metadata",
    "replication",
    "coordinator",
    "transaction",
    "producer",
    "tiered",
    "protocol",
    "security",
)
#: the layers at or above server/: the process, its command line and the test harnesses
UPPER = ("server", "cli", "spark", "console", "testing")
FORBIDDEN_MODULES = (
    "time",
    "socket",
    "selectors",
    "datetime",
    "asyncio",
    "ssl",
    "http",
    "urllib",
    "fsspec",
    *(f"riverbed.{u}" for u in UPPER),
)
#: DESIGN.md's one exception: the remote storage managers adapt fsspec (remote I/O that
#: only server/'s bounded pools call)
ALLOWED = {"tiered/rsm.py": ("fsspec",)}
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


def _all_imports(tree: ast.Module) -> list[str]:
    return [
        *(a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names),
        *(n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module),
    ]


@pytest.mark.parametrize(
    "path", [p for core in CORES for p in sorted((ROOT / core).rglob("*.py"))], ids=str
)
def test_core_reads_no_clock_and_opens_no_socket(path: Path) -> None:
    tree = ast.parse(path.read_text())
    allowed = ALLOWED.get(str(path.relative_to(ROOT)), ())
    bad = [
        m
        for m in _runtime_imports(tree)
        if any(m == f or m.startswith(f + ".") for f in FORBIDDEN_MODULES) and m not in allowed
    ]
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}"
    upward = [  # not even for annotations: a core that names a shell's class wraps a shell
        m for m in _all_imports(tree) if any(m.startswith(f"riverbed.{u}") for u in UPPER)
    ]
    assert not upward, f"{path.relative_to(ROOT)} imports {upward} from a layer above it"
    calls = [ast.unparse(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)]
    assert not [c for c in calls if c in CLOCK_CALLS], f"{path.relative_to(ROOT)} reads a clock"


def test_cores_list_every_package_below_server() -> None:
    """A new package is either a core (checked above) or one of the upper layers."""
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    assert packages - set(UPPER) == set(CORES)
