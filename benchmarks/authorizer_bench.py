"""The authorizer's cost per request with 10,000 ACLs (issue 20), against no authorizer.

Run: ``.venv/bin/python -m benchmarks.authorizer_bench [--acls N] [--requests N]``.

In one run, on the same Produce request (one topic, one 16 KiB batch, as a client sends
it): "no authorizer" is what the broker does anyway before its handler (decode the
request body); "authorizer" adds the broker's check (`BrokerAuthorizer.denied`: the table
rule, then Kafka's decision over 10,000 ACLs: literal, prefixed and wildcard, for 500
principals). Printed: µs per request each way, the check alone, and the ratio. Also the
check with no ACLs and the index build time (paid once per ACL change). Nothing passes or
fails on time.
"""

from __future__ import annotations

import argparse
import random
import time
import uuid
from collections.abc import Callable

from riverbed.metadata.image import MetadataImage, acl_record, replay_all
from riverbed.metadata.records import METADATA_VERSION_FEATURE
from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.headers import RequestHeader
from riverbed.protocol.messages import FeatureLevelRecord, Message, ProduceRequest, decode, encode
from riverbed.protocol.records import SimpleRecord, build_batch
from riverbed.security.acl import (
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
    StandardAcl,
)
from riverbed.security.authorizer import AuthorizerConfig, ConnectionDecisions
from riverbed.security.principal import KafkaPrincipal
from riverbed.server.broker.authorization import BrokerAuthorizer
from riverbed.server.network import RequestContext

PRODUCE_VERSION = 9
TOPIC = "orders-eu-7"
USER = "user-7"


def make_acls(count: int, rng: random.Random) -> list[StandardAcl]:
    ops = [AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE]
    acls = [
        StandardAcl(
            ResourceType.TOPIC,
            f"orders-eu-{i % 2000}",
            PatternType.LITERAL,
            f"User:user-{i % 500}",
            "*",
            rng.choice(ops),
            PermissionType.ALLOW,
        )
        for i in range(count - count // 5)
    ]
    acls += [
        StandardAcl(
            ResourceType.TOPIC,
            f"team-{i}-",
            PatternType.PREFIXED,
            f"User:user-{i % 500}",
            "*",
            AclOperation.WRITE,
            PermissionType.ALLOW,
        )
        for i in range(count // 5 - 2)
    ]
    acls.append(StandardAcl(2, "*", 3, "User:auditor", "*", AclOperation.DESCRIBE, 3))
    acls.append(StandardAcl(2, TOPIC, 3, f"User:{USER}", "*", AclOperation.WRITE, 3))
    return acls


def image_with(acls: list[StandardAcl]) -> MetadataImage:
    records: list[Message] = [FeatureLevelRecord(name=METADATA_VERSION_FEATURE, feature_level=21)]
    records += [acl_record(uuid.UUID(int=i + 1), a) for i, a in enumerate(acls)]
    return replay_all(MetadataImage.EMPTY, records)


def produce_bytes() -> bytes:
    batch = build_batch([SimpleRecord(b"k", b"x" * 1024) for _ in range(16)])
    part = ProduceRequest.PartitionProduceData(index=0, records=batch)
    topic = ProduceRequest.TopicProduceData(name=TOPIC, partition_data=[part])
    return encode(ProduceRequest(acks=1, timeout_ms=30000, topic_data=[topic]), PRODUCE_VERSION)


def per_op_us(fn: Callable[[], object], n: int) -> float:
    fn()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, time.perf_counter() - start)
    return best / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--acls", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=20_000)
    args = parser.parse_args()
    acls = make_acls(args.acls, random.Random(7))
    image, empty = image_with(acls), image_with([])
    header = RequestHeader(ApiKey.PRODUCE, PRODUCE_VERSION, 1, "bench")
    ctx = RequestContext(
        header, "10.0.0.7:5555", "SASL_SSL", 1, 0, KafkaPrincipal.user(USER),
        decisions=ConnectionDecisions(),  # one connection's, as the network layer gives
    )  # fmt: skip
    data = produce_bytes()
    authz = BrokerAuthorizer(AuthorizerConfig(frozenset({"User:admin"})))
    build_start = time.perf_counter()
    authz.authorizer(image)
    build_ms = (time.perf_counter() - build_start) * 1000
    body = decode(ProduceRequest, data, PRODUCE_VERSION)
    assert authz.denied(image, ctx, body) is None, "the bench's principal must be allowed"
    n = args.requests
    plain = per_op_us(lambda: decode(ProduceRequest, data, PRODUCE_VERSION), n)
    checked = per_op_us(
        lambda: authz.denied(image, ctx, decode(ProduceRequest, data, PRODUCE_VERSION)), n
    )
    check_only = per_op_us(lambda: authz.denied(image, ctx, body), n)
    authz_empty = BrokerAuthorizer(AuthorizerConfig(allow_everyone_if_no_acl_found=True))
    check_empty = per_op_us(lambda: authz_empty.denied(empty, ctx, body), n)
    print(f"ACLs: {len(image.acls)} (index built in {build_ms:.1f} ms, once per ACL change)")
    print(f"produce request, no authorizer (decode):     {plain:8.2f} µs")
    print(f"produce request, authorizer (decode + check): {checked:8.2f} µs")
    print(f"  the check alone, {len(image.acls)} ACLs:            {check_only:8.2f} µs")
    print(f"  the check alone, no ACLs:                  {check_empty:8.2f} µs")
    print(f"ratio authorizer / no authorizer:             {checked / plain:8.3f}")


if __name__ == "__main__":
    main()
