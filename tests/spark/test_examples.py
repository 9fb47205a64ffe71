"""The example pipelines end to end: generator -> windowed stream -> topic + Parquet; backfill."""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import riverbed_read

pytestmark = pytest.mark.spark

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NOW_MS = 1_700_000_400_000  # a whole minute, so windows align with the generated span
MINUTE_MS = 60_000


@pytest.fixture
def examples() -> Iterator[Any]:
    sys.path.insert(0, str(EXAMPLES))
    try:
        import backfill_batch
        import click_generator
        import page_counts_stream

        yield click_generator, page_counts_stream, backfill_batch
    finally:
        sys.path.remove(str(EXAMPLES))


def _expected(click_generator: Any, events: int, lo: int, hi: int) -> Counter[tuple[int, str]]:
    """(window start ms, page) -> clicks of the generated events with lo <= ts < hi."""
    out: Counter[tuple[int, str]] = Counter()
    for ts, _user, page in click_generator.click_events(events, 6, 50, 20.0, 7, NOW_MS):
        if lo <= ts < hi:
            out[(ts - ts % MINUTE_MS, page)] += 1
    return out


def test_click_pipeline_end_to_end(
    spark: Any, bootstrap: str, tmp_path: Path, new_topic: Callable[..., str], examples: Any
) -> None:
    click_generator, page_counts_stream, backfill_batch = examples
    clicks, out_topic = new_topic(2, "clicks"), new_topic(1, "page-counts")
    events = 3000
    first, last = click_generator.generate(
        bootstrap, clicks, events, minutes=6, users=50, seed=7, now_ms=NOW_MS
    )
    assert first >= NOW_MS - 6 * MINUTE_MS and last <= NOW_MS

    page_counts_stream.run(spark, bootstrap, tmp_path, topic=clicks, out_topic=out_topic)
    # Append mode emits exactly the windows closed by the watermark (max time - 2 min).
    closed_before = last - 2 * MINUTE_MS
    expected = Counter(
        {
            k: n
            for k, n in _expected(click_generator, events, 0, NOW_MS).items()
            if k[0] + MINUTE_MS <= closed_before
        }
    )
    assert len(expected) >= 8
    parquet = spark.read.parquet(str(tmp_path / "parquet")).collect()
    got = Counter({(int(r.window_start.timestamp() * 1000), r.page): r.clicks for r in parquet})
    assert got == expected
    topic_rows = riverbed_read(spark, bootstrap, subscribe=out_topic).collect()
    from_topic = Counter()
    for r in topic_rows:
        doc = json.loads(r.value)
        assert r.key.decode() == doc["page"]
        from_topic[(int(r.timestamp.timestamp() * 1000) - MINUTE_MS, doc["page"])] += doc["clicks"]
    assert from_topic == expected

    # Backfill minutes 2..4 of the span by record time only.
    lo, hi = NOW_MS - 4 * MINUTE_MS, NOW_MS - 2 * MINUTE_MS
    rows = backfill_batch.backfill(spark, bootstrap, clicks, lo, hi).collect()
    backfilled = Counter({(int(r.window_start.timestamp() * 1000), r.page): r.clicks for r in rows})
    assert backfilled == _expected(click_generator, events, lo, hi)
