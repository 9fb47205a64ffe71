"""The copy job's copier ends itself when a step overruns (issue 19's copy soak: a
copier stuck in librdkafka's ``send_offsets_to_transaction`` past its timeout after the
group coordinator's node was killed never copied again, and the soak stalled)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from riverbed.testing.cluster import scaled_s

STUCK = textwrap.dedent(
    """
    import time
    import riverbed.testing.txn_copier as c

    c.STUCK_S = 0.5
    copier = c.Copier.__new__(c.Copier)
    copier.copy_one = lambda: time.sleep(60)  # a client call that never returns
    copier.run()
    """
)


def test_a_copier_stuck_in_one_step_dumps_its_stack_and_exits() -> None:
    """Its supervisor starts a new copier (which fences the stuck one): the run must
    end by itself, with the stack of the call it was stuck in on its log."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", STUCK], capture_output=True, text=True, timeout=scaled_s(30), env=env
    )
    assert done.returncode != 0
    assert "<lambda>" in done.stdout and "in run" in done.stdout, done.stdout
