"""`make test --dist loadgroup` keeps each file on one worker, in file order.

The real-process tests rely on it: a file's module-scoped cluster starts once, and some
tests build on what an earlier test of the file did. pytest 9.2 with pytest-xdist 3.8
grouped nothing (xdist writes the group into ``item._nodeid``, which pytest 9.2 no longer
reads): each test was scheduled alone, a file's tests ran on both workers, and
`test_acls.py::test_acl_admin_needs_alter_on_the_cluster` failed on the worker that had
not created the ACLs it describes.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FILES = (
    "tests/unit/server/test_txn_concurrent_wait.py",
    "tests/unit/server/test_coordinator_shell.py",
)


def test_each_file_runs_whole_on_one_worker_in_file_order() -> None:
    cmd = [sys.executable, "-m", "pytest", "-v", "-n", "2", "--dist", "loadgroup",
           "-p", "no:cacheprovider", *FILES]  # fmt: skip
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ran = re.findall(r"^\[(gw\d+)\] \[[ \d]+%\] PASSED (\S+?)::(\S+)\s*$", done.stdout, re.M)
    for name in FILES:
        mine = [(worker, test) for worker, path, test in ran if path == name]
        assert mine, f"nothing of {name} ran:\n{done.stdout[-3000:]}"
        assert len({worker for worker, _ in mine}) == 1, f"{name} ran on two workers: {mine}"
        assert all(test.endswith(f"@{ROOT / name}") for _, test in mine), mine  # the group
        source = (ROOT / name).read_text()
        order = [source.index(f"def {test.split('@')[0]}(") for _, test in mine]
        assert order == sorted(order), f"{name} ran out of file order: {mine}"
