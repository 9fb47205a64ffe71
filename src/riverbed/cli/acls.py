"""`riverbed acls add|remove|list`: Kafka's kafka-acls with its flags.

- ``add``: one ACL per resource x principal x host x operation:
  ``--allow-principal`` / ``--deny-principal`` (repeatable, ``User:name``), ``--allow-host``
  / ``--deny-host`` (default ``*``), ``--operation`` (repeatable, default All), resources
  ``--topic`` / ``--group`` / ``--transactional-id`` (repeatable) and ``--cluster``,
  ``--resource-pattern-type`` literal (default) or prefixed;
- ``remove``: as kafka-acls ``--remove`` (AclCommand.getAcl): each principal flag names
  the ACLs to remove exactly as ``add`` would write them, ``--operation`` defaulting to
  All and the hosts to ``*`` (so ``--allow-principal User:a`` alone removes User:a's
  ``All`` ACL from every host, ``*``, not its Read or Write); no principal removes every
  ACL of the resources (riverbed: of the ``--operation`` given, if any); pattern type
  literal unless given (also any / match); lists what went;
- as kafka-acls, an operation must apply to every resource named (``--group`` takes no
  Write): ``ResourceType GROUP only supports operations ...``, exit code 1;
- ``list``: the ACLs on the named resources, of pattern type literal unless
  ``--resource-pattern-type`` says otherwise (kafka-acls' default); without a resource
  every ACL, of every pattern type; ``--principal`` to narrow.
Client security (SASL, TLS) from ``--command-config`` (Kafka client properties).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any, cast

from riverbed.cli.common import (
    CliError,
    add_bootstrap,
    add_json,
    admin_client,
    print_json,
    print_table,
    run_guarded,
    verb_parser,
)

CLUSTER_NAME = "kafka-cluster"
#: a filter field that matches every value (librdkafka takes None)
ANY_HOST: Any = None
_OPERATIONS = [
    "All",
    "Read",
    "Write",
    "Create",
    "Delete",
    "Alter",
    "Describe",
    "ClusterAction",
    "DescribeConfigs",
    "AlterConfigs",
    "IdempotentWrite",
    "CreateTokens",
    "DescribeTokens",
]


def register(subparsers: Any) -> None:
    parser = verb_parser(subparsers, "acls", "add, remove and list ACLs (as kafka-acls)")
    sub = parser.add_subparsers(dest="acls_command", metavar="SUBCOMMAND")
    for name, help_text, func in (
        ("add", "add ACLs", add_cmd),
        ("remove", "remove the ACLs the flags name (as kafka-acls --remove)", remove_cmd),
        ("list", "list ACLs (as kafka-acls --list)", list_cmd),
    ):
        p = verb_parser(sub, name, help_text)
        add_bootstrap(p)
        add_json(p)
        _add_flags(p, listing=name == "list")
        p.set_defaults(func=run_guarded(func))


def _add_flags(p: argparse.ArgumentParser, *, listing: bool) -> None:
    p.add_argument(
        "--topic", metavar="NAME", help="a topic resource, repeatable", action="append", default=[]
    )
    p.add_argument(
        "--group",
        metavar="NAME",
        help="a consumer group resource, repeatable",
        action="append",
        default=[],
    )
    p.add_argument(
        "--transactional-id",
        metavar="ID",
        help="a transactional id resource, repeatable",
        action="append",
        default=[],
    )
    p.add_argument("--cluster", action="store_true", help="the cluster resource")
    p.add_argument(
        "--resource-pattern-type",
        type=str.upper,
        default=None,
        choices=["LITERAL", "PREFIXED", "ANY", "MATCH"],
        help="literal (the default; list without a resource: every pattern type) or prefixed;"
        " remove and list also take any (every pattern type, this exact name) and match"
        " (every ACL that applies to the name)",
    )
    if listing:
        p.add_argument("--principal", help="only the ACLs of this principal (User:name)")
        return
    p.add_argument(
        "--allow-principal",
        metavar="P",
        help="User:name to allow, repeatable",
        action="append",
        default=[],
    )
    p.add_argument(
        "--deny-principal",
        metavar="P",
        help="User:name to deny, repeatable",
        action="append",
        default=[],
    )
    p.add_argument(
        "--allow-host",
        metavar="HOST",
        help="hosts for allow ACLs (default *, for remove too)",
        action="append",
        default=[],
    )
    p.add_argument(
        "--deny-host",
        metavar="HOST",
        help="hosts for deny ACLs (default *, for remove too)",
        action="append",
        default=[],
    )
    p.add_argument(
        "--operation",
        type=_operation,
        metavar="OP",
        help=f"repeatable; one of {', '.join(_OPERATIONS)} (default All: remove too removes"
        " only the All ACLs of the principals named)",
        action="append",
        default=[],
    )


def _operation(text: str) -> str:
    for op in _OPERATIONS:
        if op.lower() == text.replace("_", "").replace("-", "").lower():
            return op
    raise argparse.ArgumentTypeError(f"unknown operation {text!r}")


def _resources(args: argparse.Namespace, required: bool) -> list[tuple[str, str]]:
    out = [("TOPIC", t) for t in args.topic] + [("GROUP", g) for g in args.group]
    out += [("TRANSACTIONAL_ID", x) for x in args.transactional_id]
    if args.cluster:
        out.append(("CLUSTER", CLUSTER_NAME))
    if required and not out:
        raise CliError("name a resource: --topic, --group, --transactional-id or --cluster")
    return out


def _entries(args: argparse.Namespace) -> Iterator[tuple[str, Any, str]]:
    """(principal, host, permission) of each principal flag, the host ``*`` without
    --allow-host / --deny-host (kafka-acls' getHosts, for add and remove alike)."""
    for flag, hosts, perm in (
        (args.allow_principal, args.allow_host, "ALLOW"),
        (args.deny_principal, args.deny_host, "DENY"),
    ):
        for principal in flag:
            if ":" not in principal:
                raise CliError(f"principal {principal!r} must look like User:name")
            for host in hosts or ["*"]:
                yield principal, host, perm


def _check_operations(resources: list[tuple[str, str]], operations: list[str]) -> None:
    """As kafka-acls (AclCommand.validateOperation): each operation must apply to each
    resource type named, else no ACL is written (a GROUP has no Write)."""
    from riverbed.security.acl import SUPPORTED_OPERATIONS, AclOperation, ResourceType

    for rtype in dict.fromkeys(r for r, _ in resources):
        valid = {AclOperation.ALL, *SUPPORTED_OPERATIONS[ResourceType[rtype]]}
        wrong = [op for op in operations if AclOperation[_snake(op)] not in valid]
        if wrong:
            names = [op for op in _OPERATIONS if AclOperation[_snake(op)] in valid]
            raise CliError(
                f"--operation {', '.join(wrong)}: ResourceType {rtype} only supports "
                f"operations {', '.join(names)}"
            )


def _snake(name: str) -> str:
    """``IdempotentWrite`` -> ``IDEMPOTENT_WRITE`` (the AclOperation member's name)."""
    return "".join("_" + c if c.isupper() else c for c in name).lstrip("_").upper()


def _restype_const(rtype: str) -> Any:
    """confluent-kafka's ResourceType for Kafka's name: librdkafka calls Kafka's CLUSTER
    (wire id 4) BROKER."""
    from confluent_kafka.admin import ResourceType  # type: ignore[attr-defined]

    return getattr(ResourceType, "BROKER" if rtype == "CLUSTER" else rtype)


def _op_const(name: str) -> Any:
    from confluent_kafka.admin import AclOperation  # type: ignore[attr-defined]

    return getattr(AclOperation, _snake(name))


def add_cmd(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import AclBinding, AclPermissionType, ResourcePatternType  # type: ignore[attr-defined]

    pattern = args.resource_pattern_type or "LITERAL"
    if pattern not in ("LITERAL", "PREFIXED"):
        raise CliError("add takes --resource-pattern-type literal or prefixed")
    entries = list(_entries(args))
    if not entries:
        raise CliError("name a principal: --allow-principal or --deny-principal")
    resources = _resources(args, required=True)
    _check_operations(resources, args.operation or ["All"])
    bindings = [
        AclBinding(
            _restype_const(rtype),
            name,
            getattr(ResourcePatternType, pattern),
            principal,
            host,
            _op_const(op),
            getattr(AclPermissionType, perm),
        )
        for rtype, name in resources
        for principal, host, perm in entries
        for op in args.operation or ["All"]
    ]
    admin = admin_client(args)
    for future in admin.create_acls(bindings).values():
        future.result(timeout=30)
    _show(args, [_row(b) for b in bindings], "added")
    return 0


def _filters(
    args: argparse.Namespace,
    entries: list[tuple[str | None, Any, str]],
    operations: list[str],
    pattern_default: str,
) -> list[Any]:
    """Filters for the resources x (principal, host, permission) x ``operations`` (none:
    any operation)."""
    from confluent_kafka.admin import AclBindingFilter, AclOperation, AclPermissionType  # type: ignore[attr-defined]
    from confluent_kafka.admin import ResourcePatternType as PT  # type: ignore[attr-defined]

    pattern = getattr(PT, args.resource_pattern_type or pattern_default)
    resources: list[tuple[str, str | None]] = list(_resources(args, required=False))
    ops = [_op_const(o) for o in operations] or [AclOperation.ANY]
    return [
        AclBindingFilter(
            _restype_const(rtype),
            cast(Any, name),
            pattern,
            cast(Any, principal),
            host,
            op,
            getattr(AclPermissionType, permission),
        )
        for rtype, name in resources or [("ANY", None)]
        for principal, host, permission in entries
        for op in ops
    ]


def remove_cmd(args: argparse.Namespace) -> int:
    # as kafka-acls: remove names what it removes from, with operations that apply to it
    resources = _resources(args, required=True)
    _check_operations(resources, args.operation)
    entries: list[tuple[str | None, Any, str]] = [*_entries(args)]
    if entries:  # the ACLs `add` would write with these flags, matched exactly
        filters = _filters(args, entries, args.operation or ["All"], "LITERAL")
    else:  # kafka-acls: every ACL of the resources (riverbed: of --operation, if given)
        filters = _filters(args, [(None, ANY_HOST, "ANY")], args.operation, "LITERAL")
    admin = admin_client(args)
    removed = []
    for future in admin.delete_acls(filters).values():
        removed += [_row(b) for b in future.result(timeout=30)]
    _show(args, removed, "removed")
    return 0


def list_cmd(args: argparse.Namespace) -> int:
    admin = admin_client(args)
    rows = []
    # kafka-acls: literal patterns of the resources named; every ACL without a resource
    pattern = "LITERAL" if _resources(args, required=False) else "ANY"
    for flt in _filters(args, [(args.principal, ANY_HOST, "ANY")], [], pattern):
        rows += [_row(b) for b in admin.describe_acls(flt).result(timeout=30)]
    if not rows:
        refusal = security_disabled(args.bootstrap_server)
        if refusal is not None:  # as `add` and `remove` say it (Kafka's kafka-acls too)
            raise CliError(refusal)
    _show(args, rows, "ACLs")
    return 0


def security_disabled(bootstrap: str) -> str | None:
    """The refusal (``SECURITY_DISABLED: <the broker's message>``) when the cluster has no
    authorizer, else None. confluent-kafka answers a DescribeAcls refused with SECURITY_DISABLED with an
    empty list (its CreateAcls and DeleteAcls raise it), so riverbed's own client asks once,
    as the command's --command-config says."""
    from riverbed.cli.wire import WireClient, WireError
    from riverbed.protocol.api_versions import ApiKey
    from riverbed.protocol.errors import ErrorCode
    from riverbed.protocol.messages import DescribeAclsRequest, DescribeAclsResponse

    everything = DescribeAclsRequest(
        resource_type_filter=1, pattern_type_filter=1, operation=1, permission_type=1
    )  # 1: ANY (Kafka's ResourceType, PatternType, AclOperation, AclPermissionType)
    try:
        with WireClient(bootstrap) as client:
            reply = client.request(ApiKey.DESCRIBE_ACLS, everything)
    except WireError:
        return None  # the list was answered: it stands, empty
    assert isinstance(reply, DescribeAclsResponse)
    if reply.error_code != ErrorCode.SECURITY_DISABLED:
        return None
    return f"SECURITY_DISABLED: {reply.error_message or 'No Authorizer is configured.'}"


def _row(b: Any) -> dict[str, str]:
    return {
        "resource_type": "CLUSTER" if b.restype.name == "BROKER" else b.restype.name,
        "name": b.name,
        "pattern_type": b.resource_pattern_type.name,
        "principal": b.principal,
        "host": b.host,
        "operation": b.operation.name,
        "permission": b.permission_type.name,
    }


def _show(args: argparse.Namespace, rows: list[dict[str, str]], title: str) -> None:
    if args.json:
        print_json(rows)
        return
    cols = ["resource_type", "name", "pattern_type", "principal", "host", "operation", "permission"]
    print_table(title, cols, [[r[c] for c in cols] for r in rows])
