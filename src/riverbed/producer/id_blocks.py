"""A broker's producer ids: the block the controller allocated, and the next one.

Sans-I/O (Kafka's ``RPCProducerIdManager`` logic without its channel): ids are handed out
in order from the current block ``[start, start + length)``; once ``PREFETCH_THRESHOLD``
(90 %) of it is used ``needs_prefetch`` asks the shell to fetch the next block
(AllocateProducerIds) so that InitProducerId rarely waits; when the current block is
exhausted the prefetched one takes over, and ``next_id`` returns None when there is none
yet (the shell then waits for the controller).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["PREFETCH_THRESHOLD", "IdBlock", "ProducerIdBlocks"]

#: Fraction of the current block used before the next one is requested (Kafka's 0.90).
PREFETCH_THRESHOLD: Final = 0.90


@dataclass(frozen=True, slots=True)
class IdBlock:
    start: int
    length: int

    @property
    def end(self) -> int:
        return self.start + self.length


class ProducerIdBlocks:
    def __init__(self) -> None:
        self.current: IdBlock | None = None
        self.next_block: IdBlock | None = None
        self._next_id = 0
        self.fetching = False

    def add_block(self, block: IdBlock) -> None:
        """A block from the controller: it becomes current when the current one is used."""
        if block.length <= 0:
            raise ValueError(f"empty producer id block {block}")
        if self.current is None or self._next_id >= self.current.end:
            self.current, self._next_id = block, block.start
        else:
            self.next_block = block

    def next_id(self) -> int | None:
        if self.current is None or self._next_id >= self.current.end:
            if self.next_block is None:
                return None
            self.current, self.next_block = self.next_block, None
            self._next_id = self.current.start
        pid = self._next_id
        self._next_id += 1
        return pid

    def has_id(self) -> bool:
        """Whether `next_id` would return an id."""
        cur = self.current
        return (cur is not None and self._next_id < cur.end) or self.next_block is not None

    def needs_prefetch(self) -> bool:
        if self.fetching or self.next_block is not None:
            return False
        cur = self.current
        if cur is None or self._next_id >= cur.end:
            return True
        return self._next_id - cur.start >= cur.length * PREFETCH_THRESHOLD
