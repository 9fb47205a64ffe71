"""Message-engine benchmarks: decode a 1 MiB Produce request, encode Fetch response headers.

Run: ``.venv/bin/python -m benchmarks.codec_messages_bench`` (``--quick`` for fewer
repeats); ``make bench`` runs these sections too, as part of ``benchmarks.codec_bench``.

Baselines are measured in the same run on the same bytes: kafka-python 3's schema-driven
codec (an independent implementation of the same specs) and, for the Produce decode, a
plain copy of the frame (the engine must copy the record bytes out of the frame once).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from kafka.protocol.consumer.fetch import FetchResponse as KafkaPythonFetchResponse
from kafka.protocol.producer import ProduceRequest as KafkaPythonProduceRequest

from benchmarks.codec_bench import PARTITIONS, Row, Timer, _partition_buffers, run_sections
from riverbed.protocol.compression import CompressionType
from riverbed.protocol.headers import RequestHeader, decode_request, encode_request
from riverbed.protocol.messages import FetchResponse, ProduceRequest, encode, encode_into

FETCH_PARTITIONS = 100
BATCH_BYTES = 128 * 1024  # one batch per partition per request, as producers send


def _pair(
    timer: Timer, fn: Callable[[], object], base: Callable[[], object]
) -> tuple[float, float]:
    """(µs of fn, µs of base), interleaved when the Timer can (fairer on a shared box)."""
    pair = getattr(timer, "pair", None)
    if pair is not None:
        result: tuple[float, float] = pair(fn, base)
        return result
    return timer.us(fn), timer.us(base)


def _produce_request() -> ProduceRequest:
    buffers = _partition_buffers(BATCH_BYTES, CompressionType.NONE)
    return ProduceRequest(
        acks=-1,
        timeout_ms=30000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="events",
                partition_data=[
                    ProduceRequest.PartitionProduceData(index=i, records=buf)
                    for i, buf in enumerate(buffers)
                ],
            )
        ],
    )


def section_produce_request_decode(timer: Timer) -> list[Row]:
    """Decode a Produce request carrying 1 MiB of batches across 8 partitions."""
    req = _produce_request()
    rows = []
    for version in (3, 9):
        frame = encode_request(RequestHeader(0, version, 1, "bench"), req)[4:]
        body = encode(req, version)
        decode_request(frame)  # compile outside the timing
        us, copy_us = _pair(
            timer, lambda frame=frame: decode_request(frame), lambda frame=frame: bytearray(frame)
        )
        us2, kp_us = _pair(
            timer,
            lambda frame=frame: decode_request(frame),
            lambda body=body, v=version: KafkaPythonProduceRequest.decode(body, version=v),
        )
        label = (
            f"decode_request Produce v{version}, {len(frame) >> 10} KiB, {PARTITIONS} partitions"
        )
        rows.append(Row(label, us, "copy of the frame", copy_us))
        rows.append(
            Row(
                "  same, vs kafka-python ProduceRequest.decode (body only)",
                us2,
                "kafka-python",
                kp_us,
            )
        )
    return rows


def _fetch_response(version: int, topics: int, per_topic: int) -> FetchResponse:
    return FetchResponse(
        session_id=7 if version >= 7 else 0,
        responses=[
            FetchResponse.FetchableTopicResponse(
                topic=f"topic-{t}",
                partitions=[
                    FetchResponse.PartitionData(
                        partition_index=p,
                        high_watermark=1_000_000 + p,
                        last_stable_offset=1_000_000 + p,
                        log_start_offset=0,
                        records=b"",
                    )
                    for p in range(per_topic)
                ],
            )
            for t in range(topics)
        ],
    )


def _kafka_python_fetch(version: int, topics: int, per_topic: int) -> KafkaPythonFetchResponse:
    T = KafkaPythonFetchResponse.FetchableTopicResponse
    P = T.PartitionData
    return KafkaPythonFetchResponse(
        version=version,
        throttle_time_ms=0,
        error_code=0,
        session_id=7 if version >= 7 else 0,
        responses=[
            T(
                version=version,
                topic=f"topic-{t}",
                partitions=[
                    P(
                        version=version,
                        partition_index=p,
                        error_code=0,
                        high_watermark=1_000_000 + p,
                        last_stable_offset=1_000_000 + p,
                        log_start_offset=0,
                        aborted_transactions=[],
                        preferred_read_replica=-1,
                        records=b"",
                    )
                    for p in range(per_topic)
                ],
            )
            for t in range(topics)
        ],
    )


def section_fetch_response_header(timer: Timer) -> list[Row]:
    """Encode a Fetch response header (partition metadata, no record bytes) for 100 partitions."""
    rows = []
    for version in (4, 12):
        for topics, per_topic in ((1, FETCH_PARTITIONS), (10, FETCH_PARTITIONS // 10)):
            resp = _fetch_response(version, topics, per_topic)
            kp = _kafka_python_fetch(version, topics, per_topic)
            out = bytearray()
            encode_into(resp, version, out)  # compile outside the timing
            assert bytes(kp.encode(version=version)) == bytes(out), "baseline encodes other bytes"

            def ours(resp: FetchResponse = resp, version: int = version) -> None:
                encode_into(resp, version, bytearray())

            us, kp_us = _pair(timer, ours, lambda kp=kp, v=version: kp.encode(version=v))
            label = f"encode FetchResponse v{version}, {topics} topic(s) x {per_topic} partitions"
            rows.append(Row(label, us, "kafka-python encode", kp_us))
    return rows


SECTIONS = [section_produce_request_decode, section_fetch_response_header]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats")
    args = ap.parse_args(argv)
    timer = Timer(repeats=3, min_seconds=0.02) if args.quick else Timer()
    run_sections(SECTIONS, timer)


if __name__ == "__main__":
    main()
