"""Kafka's fault handler: a fault the node cannot handle halts the process (crash-only).

A node that keeps running must be correct, so an unexpected exception in a driver loop, a
state-machine apply, a snapshot load, or a failed fsync of the last healthy log dir is never
logged-and-ignored: the handler writes ONE line

    FATAL riverbed node <id>: <what failed>: <ExceptionType>: <message>

to the log and to stderr, then ends the process at once with ``FATAL_EXIT_CODE`` (no
clean-shutdown markers, no flush: the start-up path is the recovery path, as with Kafka's
``ProcessTerminatingFaultHandler`` / ``Exit.halt``). A supervisor (or ``riverbed dev``)
restarts it.

Tests inject a ``RecordingFaultHandler`` instead, which keeps the faults and raises
``FaultHalt`` so the code after the fault never runs, exactly as after a real halt.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from typing import NoReturn, Protocol

log = logging.getLogger(__name__)

#: Exit status of a halted node (Kafka's Exit.halt(1)).
FATAL_EXIT_CODE = 1


class FaultHandler(Protocol):
    def handle_fault(self, what: str, cause: BaseException | None = None) -> NoReturn:
        """Report the fault and never return."""
        ...


def fatal_line(node_id: int, what: str, cause: BaseException | None) -> str:
    reason = f": {type(cause).__name__}: {cause}" if cause is not None else ""
    return f"FATAL riverbed node {node_id}: {what}{reason}"


class ProcessTerminatingFaultHandler:
    """The production handler: FATAL line, traceback, then ``os._exit`` (no cleanup runs)."""

    def __init__(self, node_id: int, exit_code: int = FATAL_EXIT_CODE) -> None:
        self.node_id = node_id
        self.exit_code = exit_code

    def handle_fault(self, what: str, cause: BaseException | None = None) -> NoReturn:
        line = fatal_line(self.node_id, what, cause)
        try:
            log.critical(line, exc_info=cause)
            sys.stderr.write(line + "\n")
            if cause is not None:
                traceback.print_exception(cause, file=sys.stderr)
            sys.stderr.flush()
        finally:
            # os._exit, not sys.exit: no finally blocks, atexit hooks or clean-shutdown
            # markers may run after a fault (the recovery path must see an unclean stop)
            os._exit(self.exit_code)


class FaultHalt(BaseException):
    """Raised by ``RecordingFaultHandler``: a BaseException so ``except Exception`` blocks
    between the fault and the test cannot swallow the halt."""


class RecordingFaultHandler:
    """Test double: records each fault and raises ``FaultHalt``."""

    def __init__(self) -> None:
        self.faults: list[tuple[str, BaseException | None]] = []

    def handle_fault(self, what: str, cause: BaseException | None = None) -> NoReturn:
        self.faults.append((what, cause))
        raise FaultHalt(what) from cause
