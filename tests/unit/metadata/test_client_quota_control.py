"""Client quotas as metadata records: AlterClientQuotas gives ClientQuotaRecords, only
replay changes the image, snapshots carry the quotas; DescribeClientQuotas filters
(Kafka's ClientQuotaControlManager and ClientQuotasImage)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riverbed.metadata.client_quota_control import (
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    describe_client_quotas,
)
from riverbed.metadata.control_common import REQUEST_ITEMS_MAX
from riverbed.metadata.controller import Controller, ControllerConfig
from riverbed.metadata.image import MetadataImage, image_to_records, replay_all
from riverbed.metadata.records import decode_record, encode_record
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    AlterClientQuotasRequest,
    ClientQuotaRecord,
    DescribeClientQuotasRequest,
)

A = AlterClientQuotasRequest
D = DescribeClientQuotasRequest


def entry(entity: dict[str, str | None], **ops: float | None) -> A.EntryData:
    return A.EntryData(
        entity=[A.EntityData(entity_type=t, entity_name=n) for t, n in entity.items()],
        ops=[
            A.OpData(key=k, value=0.0 if v is None else v, remove=v is None) for k, v in ops.items()
        ],
    )


def alter(image: MetadataImage, *entries: A.EntryData, validate_only: bool = False):
    req = A(entries=list(entries), validate_only=validate_only)
    return Controller(ControllerConfig(node_id=1)).alter_client_quotas(image, req, 0)


def test_alter_gives_records_and_only_replay_changes_the_image() -> None:
    image = MetadataImage.EMPTY
    res = alter(image, entry({"user": "alice"}, producer_byte_rate=1_048_576.0))
    assert [r.error_code for r in res.response.entries] == [0]
    assert len(res.records) == 1 and isinstance(res.records[0], ClientQuotaRecord)
    assert image.client_quotas == {}
    image = replay_all(image, res.records)
    assert image.client_quotas == {(("user", "alice"),): {"producer_byte_rate": 1_048_576.0}}
    # the same value again writes nothing; removing an absent key writes nothing
    again = alter(image, entry({"user": "alice"}, producer_byte_rate=1_048_576.0))
    assert again.records == []
    assert alter(image, entry({"user": "alice"}, consumer_byte_rate=None)).records == []
    # removing the last key removes the entity
    gone = alter(image, entry({"user": "alice"}, producer_byte_rate=None))
    assert replay_all(image, gone.records).client_quotas == {}


def test_defaults_and_combined_entities_round_trip_through_a_snapshot() -> None:
    image = replay_all(
        MetadataImage.EMPTY,
        alter(
            MetadataImage.EMPTY,
            entry({"user": None}, request_percentage=25.5),
            entry({"user": "bob", "client-id": None}, consumer_byte_rate=2000.0),
            entry({"client-id": "app"}, producer_byte_rate=1000.0, consumer_byte_rate=3000.0),
            entry({"ip": "10.0.0.1"}, connection_creation_rate=5.0),
        ).records,
    )
    assert len(image.client_quotas) == 4
    records = image_to_records(image)
    assert sum(isinstance(r, ClientQuotaRecord) for r in records) == 5
    wire = [decode_record(encode_record(r)) for r in records]
    assert replay_all(MetadataImage.EMPTY, wire) == image


@pytest.mark.parametrize(
    ("item", "message"),
    [
        (entry({}, producer_byte_rate=1.0), "Invalid empty client quota entity"),
        (
            entry({"group": "g"}, producer_byte_rate=1.0),
            "Unhandled client quota entity type: group",
        ),
        (entry({"user": ""}, producer_byte_rate=1.0), "Empty user not supported"),
        (entry({"user": "u"}, foo=1.0), "Invalid configuration key foo"),
        (
            entry({"user": "u"}, producer_byte_rate=0.0),
            "Quota producer_byte_rate must be greater than 0",
        ),
        (  # Kafka takes NaN (no comparison holds), then its throttle is NaN
            entry({"user": "u"}, request_percentage=float("nan")),
            "Quota request_percentage must be greater than 0",
        ),
        (
            entry({"user": "u"}, producer_byte_rate=1.5),
            "producer_byte_rate cannot be a fractional value.",
        ),
        (
            entry({"user": "u"}, connection_creation_rate=1.0),
            "Invalid configuration key connection_creation_rate",
        ),
        (
            entry({"ip": "u", "user": "u"}, connection_creation_rate=1.0),
            "Invalid quota entity combination",
        ),
        (entry({"ip": "not an ip"}, connection_creation_rate=1.0), "not a valid IP"),
    ],
)
def test_invalid_entries_are_refused_with_kafkas_message(item: A.EntryData, message: str) -> None:
    res = alter(MetadataImage.EMPTY, item, entry({"user": "ok"}, request_percentage=0.5))
    bad, good = res.response.entries
    assert bad.error_code == ErrorCode.INVALID_REQUEST and message in bad.error_message
    assert good.error_code == 0  # entities are independent
    assert len(res.records) == 1


def test_duplicate_key_and_duplicate_entity() -> None:
    dup_key = A.EntryData(
        entity=[A.EntityData(entity_type="user", entity_name="u")],
        ops=[
            A.OpData(key="producer_byte_rate", value=1.0),
            A.OpData(key="producer_byte_rate", value=2.0),
        ],
    )
    res = alter(MetadataImage.EMPTY, dup_key)
    assert "Duplicate quota key producer_byte_rate" in res.response.entries[0].error_message
    res = alter(
        MetadataImage.EMPTY,
        entry({"user": "u"}, producer_byte_rate=1.0),
        entry({"user": "u"}, producer_byte_rate=2.0),
    )
    assert [e.error_code for e in res.response.entries] == [0, ErrorCode.INVALID_REQUEST]
    assert "Ignoring duplicate entity" in res.response.entries[1].error_message
    assert len(res.records) == 1


def test_an_oversized_request_is_refused_whole() -> None:
    entries = [
        entry({"user": f"u{i}"}, producer_byte_rate=1.0) for i in range(REQUEST_ITEMS_MAX + 1)
    ]
    res = alter(MetadataImage.EMPTY, *entries)
    assert res.records == []
    assert {e.error_code for e in res.response.entries} == {ErrorCode.POLICY_VIOLATION}


def test_validate_only_writes_nothing() -> None:
    res = alter(
        MetadataImage.EMPTY, entry({"user": "u"}, producer_byte_rate=1.0), validate_only=True
    )
    assert res.records == [] and res.response.entries[0].error_code == 0


def _image() -> MetadataImage:
    return replay_all(
        MetadataImage.EMPTY,
        alter(
            MetadataImage.EMPTY,
            entry({"user": "alice"}, producer_byte_rate=1.0),
            entry({"user": None}, producer_byte_rate=2.0),
            entry({"user": "alice", "client-id": "app"}, producer_byte_rate=3.0),
            entry({"client-id": "app"}, producer_byte_rate=4.0),
        ).records,
    )


def _describe(*components: tuple[str, int, str | None], strict: bool = False) -> list[float]:
    req = D(
        components=[
            D.ComponentData(entity_type=t, match_type=m, match=n) for t, m, n in components
        ],
        strict=strict,
    )
    res = describe_client_quotas(_image(), req)
    assert res.error_code == 0, res.error_message
    return sorted(v.value for e in res.entries for v in e.values)


def test_describe_filters_like_kafka() -> None:
    assert _describe() == [1.0, 2.0, 3.0, 4.0]
    assert _describe(strict=True) == []
    assert _describe(("user", MATCH_EXACT, "alice")) == [1.0, 3.0]
    assert _describe(("user", MATCH_EXACT, "alice"), strict=True) == [1.0]
    assert _describe(("user", MATCH_DEFAULT, None)) == [2.0]
    assert _describe(("user", MATCH_SPECIFIED, None), strict=True) == [1.0, 2.0]
    assert _describe(("client-id", MATCH_SPECIFIED, None)) == [3.0, 4.0]


def test_describe_refuses_bad_filters() -> None:
    def code(*components: tuple[str, int, str | None]) -> int:
        req = D(
            components=[
                D.ComponentData(entity_type=t, match_type=m, match=n) for t, m, n in components
            ]
        )
        return describe_client_quotas(MetadataImage.EMPTY, req).error_code

    assert code(("user", MATCH_EXACT, None)) == ErrorCode.INVALID_REQUEST
    assert code(("user", MATCH_DEFAULT, "x")) == ErrorCode.INVALID_REQUEST
    assert (
        code(("user", MATCH_SPECIFIED, None), ("user", MATCH_DEFAULT, None))
        == ErrorCode.INVALID_REQUEST
    )
    assert (
        code(("ip", MATCH_SPECIFIED, None), ("user", MATCH_DEFAULT, None))
        == ErrorCode.INVALID_REQUEST
    )
    assert code(("group", MATCH_SPECIFIED, None)) == ErrorCode.UNSUPPORTED_VERSION
    assert code(("user", 7, None)) == ErrorCode.INVALID_REQUEST


ENTITIES = [{"user": "u"}, {"user": None}, {"client-id": "c"}, {"user": "u", "client-id": None}]
KEYS = ["producer_byte_rate", "consumer_byte_rate", "request_percentage"]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, len(ENTITIES) - 1),
            st.sampled_from(KEYS),
            st.one_of(st.none(), st.sampled_from([1000.0, 2000.0, 50.0])),
        ),
        max_size=20,
    )
)
def test_replayed_alterations_follow_a_model_and_survive_a_snapshot(
    changes: list[tuple[int, str, float | None]],
) -> None:
    """Each alteration, its records replayed, leaves the quotas a dict model says (set or
    remove, an entity gone with its last key); image -> records -> image is the identity."""
    image = MetadataImage.EMPTY
    model: dict[tuple, dict[str, float]] = {}
    for index, key, value in changes:
        pairs = ENTITIES[index]
        res = alter(image, entry(pairs, **{key: value}))
        assert res.response.entries[0].error_code == 0
        image = replay_all(image, res.records)
        entity = tuple(sorted(pairs.items()))
        if value is None:
            model.get(entity, {}).pop(key, None)
            if not model.get(entity, True):
                del model[entity]
        else:
            model.setdefault(entity, {})[key] = value
        assert {k: dict(v) for k, v in image.client_quotas.items()} == model
    assert replay_all(MetadataImage.EMPTY, image_to_records(image)) == image
