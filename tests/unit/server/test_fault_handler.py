"""The process-terminating fault handler halts at once with a FATAL line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from riverbed.server.fault_handler import (
    FATAL_EXIT_CODE,
    FaultHalt,
    RecordingFaultHandler,
    fatal_line,
)

_HALTING_CHILD = """
import atexit
from riverbed.server.fault_handler import ProcessTerminatingFaultHandler
atexit.register(lambda: print("atexit ran"))
try:
    ProcessTerminatingFaultHandler(7).handle_fault("raft driver timer loop", OSError(5, "boom"))
finally:
    print("finally ran")
"""


def test_process_terminating_handler_exits_with_fatal_line_and_runs_no_cleanup() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _HALTING_CHILD], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == FATAL_EXIT_CODE
    assert "FATAL riverbed node 7: raft driver timer loop: OSError: [Errno 5] boom" in done.stderr
    assert "finally ran" not in done.stdout
    assert "atexit ran" not in done.stdout


def test_recording_handler_raises_past_except_exception() -> None:
    handler = RecordingFaultHandler()
    cause = ValueError("bad")
    with pytest.raises(FaultHalt):
        try:
            handler.handle_fault("apply", cause)
        except Exception:
            pytest.fail("FaultHalt was caught as an Exception")
    assert handler.faults == [("apply", cause)]


def test_fatal_line_without_cause() -> None:
    assert (
        fatal_line(1, "last log dir failed", None) == "FATAL riverbed node 1: last log dir failed"
    )
