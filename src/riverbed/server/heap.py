"""The start-up heap, frozen out of the cyclic garbage collector's way.

A started node holds a few hundred thousand long-lived objects (modules, the message
schemas and their compiled codecs, the metadata image, open logs, producer state) that
never become garbage. CPython's collector still walks all of them in every full (oldest
generation) collection, and the one-off walk at start-up is the collector's longest pause:
tens to hundreds of milliseconds of a stopped event loop, which every request in flight
(an acks=all produce, a follower's fetch) waits out. ``gc.freeze()`` moves every object
alive now into the permanent generation, which collections skip, so a later full
collection only walks what the node allocated since (what the gc module's documentation
recommends for long-running servers: freeze after start-up).

Frozen objects are still freed by reference counting when their last reference goes (a
replaced metadata image, a deleted partition's log); only cyclic garbage among them would
stay, and a collection right before the freeze leaves none.
"""

from __future__ import annotations

import gc


def freeze_startup_heap() -> int:
    """Collect what start-up left behind, then freeze every object alive now; returns how
    many objects the collector no longer walks."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
