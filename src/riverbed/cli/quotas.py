"""`riverbed quotas alter|describe`: client quotas with kafka-configs' flags.

An entity is one or two ``--entity-type users|clients|ips`` each followed by
``--entity-name NAME`` or ``--entity-default`` (kafka-configs pairs them in order), or the
shortcuts ``--user NAME`` / ``--user-defaults`` / ``--client NAME`` / ``--client-defaults``
/ ``--ip ADDRESS`` / ``--ip-defaults``.

- ``alter``: ``--add-config producer_byte_rate=1048576,consumer_byte_rate=...,
  request_percentage=...`` and/or ``--delete-config KEY,...`` (AlterClientQuotas); as
  kafka-configs, deleting a quota the entity does not have is refused ("Invalid
  config(s): KEY") before anything is changed;
- ``describe``: the quotas of the named entity; a type without a name lists every entity
  of that type; no entity lists all quotas (DescribeClientQuotas).
"""

from __future__ import annotations

import argparse
from typing import Any

from riverbed.cli.common import (
    CliError,
    add_bootstrap,
    add_json,
    print_json,
    print_table,
    run_guarded,
    verb_parser,
    wire_request,
)

#: kafka-configs' entity type names -> the protocol's
ENTITY_TYPES = {"users": "user", "clients": "client-id", "ips": "ip"}
_UNNAMED = "\0unnamed"  # an --entity-type not followed (yet) by a name or --entity-default


class _EntityType(argparse.Action):
    def __call__(self, parser: Any, ns: argparse.Namespace, value: Any, opt: Any = None) -> None:
        # a new list: the parser's default one is shared between parses
        ns.entities = [*ns.entities, [ENTITY_TYPES[value], _UNNAMED]]


class _EntityName(argparse.Action):
    """--entity-name / --entity-default name the last --entity-type; --user / --client and
    their -defaults forms bring their own type."""

    def __call__(self, parser: Any, ns: argparse.Namespace, value: Any, opt: Any = None) -> None:
        etype = self.const
        name = None if self.nargs == 0 else str(value)
        if etype is not None:
            ns.entities = [*ns.entities, [etype, name]]
            return
        if not ns.entities or ns.entities[-1][1] != _UNNAMED:
            raise argparse.ArgumentError(self, "must follow an --entity-type")
        ns.entities = [*ns.entities[:-1], [ns.entities[-1][0], name]]


def register(subparsers: Any) -> None:
    parser = verb_parser(
        subparsers, "quotas", "alter and describe client quotas (as kafka-configs)"
    )
    sub = parser.add_subparsers(dest="quotas_command", metavar="SUBCOMMAND")
    for name, help_text, func in (
        ("alter", "set or delete quotas of an entity", alter_cmd),
        ("describe", "show quotas", describe_cmd),
    ):
        p = verb_parser(sub, name, help_text)
        add_bootstrap(p)
        add_json(p)
        _add_entity_flags(p)
        if name == "alter":
            p.add_argument(
                "--add-config",
                metavar="K=V,...",
                default="",
                help="quotas to set: producer_byte_rate, consumer_byte_rate, "
                "request_percentage, controller_mutation_rate (ips: connection_creation_rate)",
            )
            p.add_argument("--delete-config", metavar="K,...", default="", help="quotas to remove")
        p.set_defaults(func=run_guarded(func), entities=[])


def _add_entity_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--entity-type",
        choices=sorted(ENTITY_TYPES),
        action=_EntityType,
        help="users, clients or ips; repeat for a user and client-id entity",
    )
    p.add_argument(
        "--entity-name", action=_EntityName, help="the name of the preceding --entity-type"
    )
    p.add_argument(
        "--entity-default",
        action=_EntityName,
        nargs=0,
        help="the default entity of the preceding --entity-type",
    )
    for flag, etype, help_text in (
        ("--user", "user", "a user entity (the principal's name)"),
        ("--client", "client-id", "a client-id entity"),
        ("--ip", "ip", "an ip entity (connection_creation_rate)"),
    ):
        p.add_argument(flag, action=_EntityName, const=etype, metavar="NAME", help=help_text)
        p.add_argument(
            f"{flag}-defaults",
            action=_EntityName,
            const=etype,
            nargs=0,
            help=f"the default {etype} entity",
        )


def _entities(args: argparse.Namespace) -> list[tuple[str, str | None]]:
    out: list[tuple[str, str | None]] = []
    for etype, name in args.entities:
        if any(t == etype for t, _ in out):
            raise CliError(f"entity type {etype} named twice")
        out.append((etype, name))
    return out


def _parse_adds(text: str) -> dict[str, float]:
    adds: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise CliError(f"--add-config takes KEY=VALUE pairs, got {item!r}")
        try:
            adds[key.strip()] = float(value)
        except ValueError:
            raise CliError(f"quota {key.strip()} must be a number, got {value!r}") from None
    return adds


def _entity_text(entity: list[tuple[str, str | None]]) -> str:
    return ", ".join(f"{t}={'<default>' if n is None else n}" for t, n in entity)


def alter_cmd(args: argparse.Namespace) -> int:
    from riverbed.protocol.api_versions import ApiKey
    from riverbed.protocol.errors import ErrorCode
    from riverbed.protocol.messages import AlterClientQuotasRequest, AlterClientQuotasResponse

    entity = _entities(args)
    if not entity or any(n == _UNNAMED for _, n in entity):
        raise CliError("name the entity: --entity-type with --entity-name or --entity-default")
    adds = _parse_adds(args.add_config)
    deletes = [k.strip() for k in args.delete_config.split(",") if k.strip()]
    if not adds and not deletes:
        raise CliError("nothing to change: give --add-config and/or --delete-config")
    if deletes:
        _check_deletes(args, entity, deletes)
    A = AlterClientQuotasRequest
    ops = [A.OpData(key=k, value=v, remove=False) for k, v in adds.items()]
    ops += [A.OpData(key=k, value=0.0, remove=True) for k in deletes]
    req = A(
        entries=[
            A.EntryData(
                entity=[A.EntityData(entity_type=t, entity_name=n) for t, n in entity], ops=ops
            )
        ],
        validate_only=False,
    )
    resp = wire_request(args, ApiKey.ALTER_CLIENT_QUOTAS, req)
    assert isinstance(resp, AlterClientQuotasResponse)
    (result,) = resp.entries
    error = None
    if result.error_code:
        error = f"{ErrorCode.of(result.error_code).name}: {result.error_message}"
    if args.json:
        print_json({"entity": dict(entity), "set": adds, "deleted": deletes, "error": error})
    elif error is None:
        print(f"Completed updating quotas for {_entity_text(entity)}.")
    if error is not None:
        if not args.json:
            raise CliError(f"cannot alter the quotas of {_entity_text(entity)}: {error}")
        return 1
    return 0


def _check_deletes(
    args: argparse.Namespace, entity: list[tuple[str, str | None]], deletes: list[str]
) -> None:
    """kafka-configs' check: a quota to delete must be set on the entity (the protocol
    would take the removal of an absent key, a misspelt one too, as a success)."""
    found = _describe(args, entity)
    current = found[0][1] if found else {}
    absent = [k for k in deletes if k not in current]
    if absent:
        raise CliError(
            f"Invalid config(s): {','.join(absent)} (not set for {_entity_text(entity)})"
        )


Found = list[tuple[list[tuple[str, str | None]], dict[str, float]]]


def _describe(args: argparse.Namespace, entity: list[tuple[str, str | None]]) -> Found:
    """DescribeClientQuotas for these components (strict when there are any)."""
    from riverbed.metadata.client_quota_control import (
        MATCH_DEFAULT,
        MATCH_EXACT,
        MATCH_SPECIFIED,
    )
    from riverbed.protocol.api_versions import ApiKey
    from riverbed.protocol.errors import ErrorCode
    from riverbed.protocol.messages import (
        DescribeClientQuotasRequest,
        DescribeClientQuotasResponse,
    )

    D = DescribeClientQuotasRequest
    components = []
    for etype, name in entity:
        if name == _UNNAMED:
            components.append(D.ComponentData(entity_type=etype, match_type=MATCH_SPECIFIED))
        elif name is None:
            components.append(D.ComponentData(entity_type=etype, match_type=MATCH_DEFAULT))
        else:
            components.append(
                D.ComponentData(entity_type=etype, match_type=MATCH_EXACT, match=name)
            )
    req = D(components=components, strict=bool(components))
    resp = wire_request(args, ApiKey.DESCRIBE_CLIENT_QUOTAS, req)
    assert isinstance(resp, DescribeClientQuotasResponse)
    if resp.error_code:
        raise CliError(
            f"cannot describe quotas: {ErrorCode.of(resp.error_code).name}: {resp.error_message}"
        )
    return [
        (
            [(e.entity_type, e.entity_name) for e in entry.entity],
            {v.key: v.value for v in entry.values},
        )
        for entry in resp.entries or []
    ]


def describe_cmd(args: argparse.Namespace) -> int:
    found = _describe(args, _entities(args))
    if args.json:
        print_json([{"entity": dict(entity), "quotas": values} for entity, values in found])
        return 0
    if not found:
        print("no quotas")
        return 0
    rows = [
        (_entity_text(entity), key, _number(value))
        for entity, values in found
        for key, value in sorted(values.items())
    ]
    print_table(None, ["ENTITY", "QUOTA", "VALUE"], rows)
    return 0


def _number(value: float) -> str:
    return str(int(value)) if value.is_integer() else str(value)
