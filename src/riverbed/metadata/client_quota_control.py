"""Client quotas in the metadata log: AlterClientQuotas (api 49, a controller write) and
DescribeClientQuotas (api 48, read from any image).

Kafka's ClientQuotaControlManager, per entry of a request:
- a key named twice: INVALID_REQUEST "Duplicate quota key <k> not updating quota for this
  entity <e>"; an entity named twice: "Ignoring duplicate entity <e>";
- the entity: not empty ("Invalid empty client quota entity"), each type once ("Invalid
  client quota entity, duplicate entity entry <t>"), types ``user``, ``client-id``,
  ``ip`` ("Unhandled client quota entity type: <t>"), no empty name ("Empty <t> not
  supported"); ``ip`` alone, a valid address or null;
- each key valid for the entity (user/client-id: producer_byte_rate, consumer_byte_rate,
  request_percentage, controller_mutation_rate; ip: connection_creation_rate), a value
  above 0 ("Quota <k> must be greater than 0"), integral for long/int keys ("<k> cannot
  be a fractional value."); NaN is refused too (Kafka takes it, then throttles by a
  NaN);
- a change becomes a ClientQuotaRecord only if it changes something (a removal of an
  absent key, or the same value again, writes nothing). Entities are independent: one's
  error leaves the others' records in the batch.
``validate_only`` answers the same and writes nothing. A request of more than
``REQUEST_ITEMS_MAX`` entries is refused whole (Kafka bounds a user operation's records).

DescribeClientQuotas (Kafka's ClientQuotasImage.describe): filter components match an
entity type exactly (match type 0), its default (1) or any name (2); ``strict`` excludes
entities with types the filter does not name.
"""

from __future__ import annotations

import ipaddress

from riverbed.metadata.control_common import (
    ControllerBase,
    ControllerError,
    ControllerResult,
    check_request_items,
)
from riverbed.metadata.image import MetadataImage, client_quota_record
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
    Message,
)
from riverbed.security.client_quotas import (
    CLIENT_ID,
    ENTITY_TYPES,
    IP,
    IP_KEYS,
    USER,
    USER_CLIENT_KEYS,
    QuotaEntity,
)

MATCH_EXACT = 0
MATCH_DEFAULT = 1
MATCH_SPECIFIED = 2
_INVALID = ErrorCode.INVALID_REQUEST
#: Kafka checks a long/int key's value against the type's range
_TYPE_MAX = {"long": 2.0**63 - 1, "int": 2.0**31 - 1}


class QuotaError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def entity_text(entity: QuotaEntity) -> str:
    """Kafka's ClientQuotaEntity.toString-like form for messages."""
    return "ClientQuotaEntity(entries={" + ", ".join(f"{t}={n}" for t, n in entity) + "})"


def check_entity(pairs: list[tuple[str, str | None]]) -> dict[str, str]:
    """The keys (and their types) the entity may carry; QuotaError when it is invalid."""
    if not pairs:
        raise QuotaError(_INVALID, "Invalid empty client quota entity")
    seen: set[str] = set()
    for etype, name in pairs:
        if etype in seen:
            raise QuotaError(
                _INVALID, f"Invalid client quota entity, duplicate entity entry {etype}"
            )
        if etype not in ENTITY_TYPES:
            raise QuotaError(_INVALID, f"Unhandled client quota entity type: {etype}")
        if name is not None and not name:
            raise QuotaError(_INVALID, f"Empty {etype} not supported")
        seen.add(etype)
    if IP in seen:
        if seen & {USER, CLIENT_ID}:
            raise QuotaError(
                _INVALID,
                "Invalid quota entity combination, IP entity shouldnot be combined with "
                "User or ClientId",
            )
        name = dict(pairs)[IP]
        if name is not None and not _valid_ip(name):
            raise QuotaError(_INVALID, f"{name} is not a valid IP or resolvable host.")
        return dict(IP_KEYS)
    return dict(USER_CLIENT_KEYS)


def _valid_ip(name: str) -> bool:
    # Kafka resolves host names too; the controller does no I/O, so only literal
    # addresses are accepted here.
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def check_value(keys: dict[str, str], key: str, value: float) -> None:
    kind = keys.get(key)
    if kind is None:
        raise QuotaError(_INVALID, f"Invalid configuration key {key}")
    if not value > 0.0:  # also NaN, which Kafka lets through (no comparison holds)
        raise QuotaError(_INVALID, f"Quota {key} must be greater than 0")
    if kind == "double":
        return
    if value > _TYPE_MAX[kind]:
        article = "an" if kind == "int" else "a"
        raise QuotaError(
            _INVALID, f"Proposed value for {key} is too large for {article} {kind.upper()}."
        )
    if abs(value % 1.0) > 1e-6:
        raise QuotaError(_INVALID, f"{key} cannot be a fractional value.")


Entry = AlterClientQuotasRequest.EntryData
ResultEntry = AlterClientQuotasResponse.EntryData


def _entry_records(image: MetadataImage, entry: Entry) -> list[Message]:
    """The records of one entry (QuotaError when it is refused)."""
    pairs = [(e.entity_type, e.entity_name) for e in entry.entity]
    keys = check_entity(pairs)
    entity: QuotaEntity = tuple(sorted(pairs))
    changes: dict[str, float | None] = {}
    for op in entry.ops:
        if op.key in changes:
            raise QuotaError(
                _INVALID,
                f"Duplicate quota key {op.key} not updating quota for this entity "
                f"{entity_text(entity)}",
            )
        changes[op.key] = None if op.remove else op.value
    current = image.client_quotas.get(entity, {})
    records: list[Message] = []
    for key, value in changes.items():
        if value is None:
            if key in current:
                records.append(client_quota_record(entity, key, None))
            continue
        check_value(keys, key, value)
        if current.get(key) != value:
            records.append(client_quota_record(entity, key, value))
    return records


class ClientQuotaControl(ControllerBase):
    def alter_client_quotas(
        self, image: MetadataImage, request: AlterClientQuotasRequest, now_ms: int
    ) -> ControllerResult:
        del now_ms
        records: list[Message] = []
        results: list[ResultEntry] = []
        seen: set[QuotaEntity] = set()
        try:
            check_request_items(len(request.entries))
            too_many = None
        except ControllerError as exc:
            too_many = exc
        for entry in request.entries:
            entity = tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity))
            code, message = 0, None
            if too_many is not None:
                code, message = int(too_many.code), too_many.message
            elif entity in seen:
                code, message = int(_INVALID), f"Ignoring duplicate entity {entity_text(entity)}"
            else:
                seen.add(entity)
                try:
                    records.extend(_entry_records(image, entry))
                except QuotaError as exc:
                    code, message = int(exc.code), str(exc)
            results.append(
                ResultEntry(
                    error_code=code,
                    error_message=message,
                    entity=[
                        AlterClientQuotasResponse.EntityData(
                            entity_type=e.entity_type, entity_name=e.entity_name
                        )
                        for e in entry.entity
                    ],
                )
            )
        response = AlterClientQuotasResponse(throttle_time_ms=0, entries=results)
        return ControllerResult([] if request.validate_only else records, response)


def _filter(
    request: DescribeClientQuotasRequest,
) -> tuple[dict[str, str | None], set[str]]:
    exact: dict[str, str | None] = {}
    typed: set[str] = set()
    for c in request.components:
        if not c.entity_type:
            raise QuotaError(_INVALID, "Invalid empty entity type.")
        if c.entity_type in exact or c.entity_type in typed:
            raise QuotaError(
                _INVALID, f"Entity type {c.entity_type} cannot appear more than once in the filter."
            )
        if c.entity_type not in ENTITY_TYPES:
            raise QuotaError(
                ErrorCode.UNSUPPORTED_VERSION, f"Unsupported entity type {c.entity_type}"
            )
        if c.match_type == MATCH_EXACT:
            if c.match is None:
                raise QuotaError(
                    _INVALID, "Request specified MATCH_TYPE_EXACT, but set match string to null."
                )
            exact[c.entity_type] = c.match
        elif c.match_type in (MATCH_DEFAULT, MATCH_SPECIFIED):
            if c.match is not None:
                name = (
                    "MATCH_TYPE_DEFAULT"
                    if c.match_type == MATCH_DEFAULT
                    else "MATCH_TYPE_SPECIFIED"
                )
                raise QuotaError(
                    _INVALID, f"Request specified {name}, but also specified a match string."
                )
            if c.match_type == MATCH_DEFAULT:
                exact[c.entity_type] = None
            else:
                typed.add(c.entity_type)
        else:
            raise QuotaError(_INVALID, f"Unknown match type {c.match_type}")
    named = set(exact) | typed
    if IP in named and named & {USER, CLIENT_ID}:
        raise QuotaError(
            _INVALID,
            "Invalid entity filter component combination. IP filter component should not "
            "be used with user or clientId filter component.",
        )
    return exact, typed


def _matches(
    entity: QuotaEntity, exact: dict[str, str | None], typed: set[str], strict: bool
) -> bool:
    names = dict(entity)
    if strict and len(names) != len(exact) + len(typed):
        return False
    for etype, name in exact.items():
        if etype not in names or names[etype] != name:
            return False
    return all(etype in names for etype in typed)


def describe_client_quotas(
    image: MetadataImage, request: DescribeClientQuotasRequest
) -> DescribeClientQuotasResponse:
    R = DescribeClientQuotasResponse
    try:
        exact, typed = _filter(request)
    except QuotaError as exc:
        return R(throttle_time_ms=0, error_code=int(exc.code), error_message=str(exc), entries=None)
    entries = [
        R.EntryData(
            entity=[R.EntityData(entity_type=t, entity_name=n) for t, n in entity],
            values=[R.ValueData(key=k, value=v) for k, v in sorted(values.items())],
        )
        for entity, values in sorted(image.client_quotas.items(), key=lambda kv: repr(kv[0]))
        if _matches(entity, exact, typed, request.strict)
    ]
    return R(throttle_time_ms=0, error_code=0, error_message=None, entries=entries)
