"""state-change.log's handler: the lines as written, rotated at its size bound."""

from __future__ import annotations

import logging
from pathlib import Path

from riverbed.server.replication.state_change_file import StateChangeFileHandler


def write(handler: logging.Handler, lines: list[str]) -> None:
    logger = logging.getLogger(f"test.state.change.{id(handler)}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        for line in lines:
            logger.info("%s", line)
    finally:
        logger.removeHandler(handler)


def test_lines_are_written_and_the_file_rotates_at_its_size_bound(tmp_path: Path) -> None:
    path = tmp_path / "state-change.log"
    path.write_text("from before a restart\n")  # appended to, counted in the size
    handler = StateChangeFileHandler(path, max_bytes=100, backups=2)
    lines = [f"line {i:02d} " + "x" * 10 for i in range(20)]  # 19 bytes + newline each
    write(handler, lines)
    handler.close()
    files = [path.with_name(path.name + s) for s in (".2", ".1", "")]
    assert not path.with_name(path.name + ".3").exists()  # two backups kept
    contents = [f.read_text() for f in files]
    assert all(0 < len(c.encode()) < 100 for c in contents)  # never past the bound
    # the newest lines, in order, none lost or repeated across the kept files
    written = "".join(contents).splitlines()
    everything = ["from before a restart", *lines]
    assert len(written) >= 10 and written == everything[-len(written) :]
