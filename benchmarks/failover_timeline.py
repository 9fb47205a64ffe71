"""One fail-over trial's timeline, from the nodes' logs and the client's own log (issue 23).

Every step between the SIGKILL of a partition leader and the client's next acknowledged
write, as seconds after the kill:

- ``quorum-leader``: a new Raft leader of the metadata quorum (only when the killed node
  was the active controller): ``node N: epoch E leader L`` with L >= 0;
- ``fenced``: the active controller fences the killed broker (``fencing broker K``);
- ``elected``: the controller's committed election record (``controller N decided
  <topic>-0: leader M``);
- ``metadata``: the last surviving broker to apply it (``broker N received <topic>-0:
  leader M``);
- ``become-leader``: the new leader's ``become-leader`` state change;
- ``client-leader``: the client (librdkafka) applies the new leader from Metadata;
- ``not-leader``: the client's first NOT_LEADER_OR_FOLLOWER (``-`` when it got none: a dead
  leader answers nothing, so the client learns the new leader from its Metadata refresh);
- ``acked``: the delivery report of the first record produced after the kill.

The node lines are read from ``broker-N.log`` (the text format's ``asctime``, local time,
milliseconds), the client's from librdkafka's debug log handed to a Python logger and
stamped when ``poll`` serves it (the benchmark polls every 5 ms).
"""

from __future__ import annotations

import datetime
import logging
import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

#: The steps in the order they are printed.
STEPS = (
    "quorum-leader",
    "fenced",
    "elected",
    "metadata",
    "become-leader",
    "client-leader",
    "not-leader",
    "acked",
)
_STAMP = re.compile(r"^\[?(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})")


def node_lines(path: Path, since: float) -> Iterator[tuple[float, str]]:
    """(wall time, line) of every time-stamped line of a node's log at or after ``since``."""
    if not path.exists():
        return
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = _STAMP.match(line)
            if m is None:
                continue
            stamp = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            if stamp >= since - 0.001:  # the log's stamps are truncated to milliseconds
                yield stamp, line[m.end() :].rstrip()


@dataclass
class Timeline:
    """Seconds after the kill at which each step happened (absent: it did not)."""

    killed: int
    steps: dict[str, float] = field(default_factory=dict)

    def mark(self, step: str, at: float) -> None:
        """Keep the first time a step was seen."""
        if step not in self.steps or at < self.steps[step]:
            self.steps[step] = at

    def row(self) -> str:
        cells = []
        for step in STEPS:
            at = self.steps.get(step)
            cells.append(f"{step} {'-' if at is None else f'{at:.2f}'}")
        return ", ".join(cells)


def read_nodes(
    timeline: Timeline, logs: Iterable[Path], topic: str, killed_at: float, until: float
) -> None:
    """Mark the node-side steps found in ``logs`` between the kill and ``until``."""
    k = timeline.killed
    quorum = re.compile(r"node \d+: epoch \d+ leader (\d+)$")
    fenced = re.compile(rf"fencing broker {k}\b")
    elected = re.compile(rf"controller \d+ decided {re.escape(topic)}-0: leader (-?\d+)")
    received = re.compile(rf"broker (\d+) received {re.escape(topic)}-0: leader (-?\d+)")
    became = re.compile(rf"broker \d+: {re.escape(topic)}-0 become-leader")
    applied: dict[int, float] = {}
    for path in logs:
        for stamp, line in node_lines(path, killed_at):
            if stamp > until:
                break
            at = stamp - killed_at
            if (m := quorum.search(line)) is not None and int(m.group(1)) >= 0:
                timeline.mark("quorum-leader", at)
            elif fenced.search(line):
                timeline.mark("fenced", at)
            elif (m := elected.search(line)) is not None and int(m.group(1)) not in (k, -1):
                timeline.mark("elected", at)
            elif (m := received.search(line)) is not None and int(m.group(2)) not in (k, -1):
                applied.setdefault(int(m.group(1)), at)
            elif became.search(line):
                timeline.mark("become-leader", at)
    if applied:
        timeline.mark("metadata", max(applied.values()))


class ClientLog(logging.Handler):
    """librdkafka's debug lines (``debug``: broker,topic,msg,metadata), stamped on arrival,
    reduced to the two client-side steps of the timeline."""

    _LEADER = re.compile(r"leader (-?\d+) epoch -?\d+ -> leader (-?\d+) epoch")

    def __init__(self, topic: str) -> None:
        super().__init__(logging.DEBUG)
        self.topic = topic
        self.since = 0.0
        self.killed = -1
        self.client_leader: float | None = None
        self.not_leader: float | None = None

    def reset(self, killed: int) -> None:
        self.since = time.time()
        self.killed = killed
        self.client_leader = self.not_leader = None

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        at = time.time() - self.since
        if self.not_leader is None and ("NOT_LEADER" in text or "Not leader" in text):
            self.not_leader = at
        m = self._LEADER.search(text)
        if (
            self.client_leader is None
            and m is not None
            and f"{self.topic} [0]" in text
            and int(m.group(2)) not in (self.killed, -1)
        ):
            self.client_leader = at

    def into(self, timeline: Timeline) -> None:
        if self.client_leader is not None:
            timeline.mark("client-leader", self.client_leader)
        if self.not_leader is not None:
            timeline.mark("not-leader", self.not_leader)
