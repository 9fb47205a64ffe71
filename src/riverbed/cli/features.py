"""`riverbed features describe | upgrade | downgrade | disable`, like ``kafka-features.sh``:
the feature levels (``transaction.version``, ``metadata.version``) the cluster has
finalized, and changing them with UpdateFeatures (api key 57), which the broker passes
on to the active controller.

- ``describe``: every feature the broker supports, its range and the finalized level
  (ApiVersions v3+);
- ``upgrade --feature NAME=LEVEL ...``: raise levels; ``downgrade --feature NAME=LEVEL
  ...``: lower them (a safe downgrade, ``--unsafe`` for an unsafe one); ``disable
  --feature NAME ...``: level 0. ``--dry-run`` only validates (ValidateOnly).

The controller refuses what Kafka refuses (an unknown feature, a level outside the
supported range, a downgrade asked as an upgrade, any metadata.version downgrade):
``error: INVALID_UPDATE_VERSION: ...``, exit code 1.
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
)

#: UpdateFeatures' upgrade types (FeatureUpdate.UpgradeType)
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3


def register(subparsers: Any) -> None:
    parser = verb_parser(subparsers, "features", "describe and change finalized feature levels")
    sub = parser.add_subparsers(dest="features_command", metavar="SUBCOMMAND")
    desc = verb_parser(sub, "describe", "supported ranges and finalized levels")
    add_bootstrap(desc)
    add_json(desc)
    desc.set_defaults(func=run_guarded(describe_cmd))
    for name, help_text, with_level in (
        ("upgrade", "raise feature levels", True),
        ("downgrade", "lower feature levels", True),
        ("disable", "set features to level 0", False),
    ):
        p = verb_parser(sub, name, help_text)
        add_bootstrap(p)
        p.add_argument(
            "--feature",
            action="append",
            required=True,
            metavar="NAME=LEVEL" if with_level else "NAME",
            help="the feature (repeat for several)",
        )
        if name == "downgrade":
            p.add_argument("--unsafe", action="store_true", help="an unsafe downgrade")
        p.add_argument("--dry-run", action="store_true", help="validate only")
        add_json(p)
        p.set_defaults(func=run_guarded(update_cmd), features_verb=name)


def _updates(args: argparse.Namespace) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in args.feature:
        if args.features_verb == "disable":
            name, level = item, "0"
        else:
            name, eq, level = item.partition("=")
            if not eq or not name or not level.lstrip("-").isdigit():
                raise CliError(f"--feature: {item!r} is not NAME=LEVEL")
        out[name.strip()] = int(level)
    return out


def update_cmd(args: argparse.Namespace) -> int:
    from riverbed.cli.wire import WireClient, WireError
    from riverbed.protocol.api_versions import ApiKey
    from riverbed.protocol.errors import ErrorCode
    from riverbed.protocol.messages import UpdateFeaturesRequest, UpdateFeaturesResponse

    kind = UPGRADE
    if args.features_verb != "upgrade":
        kind = UNSAFE_DOWNGRADE if getattr(args, "unsafe", False) else SAFE_DOWNGRADE
    U = UpdateFeaturesRequest
    updates = _updates(args)
    req = U(
        feature_updates=[
            U.FeatureUpdateKey(feature=name, max_version_level=level, upgrade_type=kind)
            for name, level in updates.items()
        ],
        validate_only=args.dry_run,
    )
    try:
        with WireClient(args.bootstrap_server) as client:
            if client.version(ApiKey.UPDATE_FEATURES) == 0:  # v0 says AllowDowngrade
                for u in req.feature_updates:
                    u.allow_downgrade, u.upgrade_type = kind != UPGRADE, UPGRADE
            resp = client.request(ApiKey.UPDATE_FEATURES, req)
    except WireError as exc:
        raise CliError(str(exc)) from None
    assert isinstance(resp, UpdateFeaturesResponse)
    if resp.error_code:
        raise CliError(f"{ErrorCode.of(resp.error_code).name}: {resp.error_message}")
    verb = "would be" if args.dry_run else "was"
    if args.json:
        print_json({"dry_run": args.dry_run, "features": updates})
    else:
        for name, level in updates.items():
            print(f"{name} {verb} {args.features_verb}d to {level}.")
    return 0


def describe_cmd(args: argparse.Namespace) -> int:
    from riverbed.cli.wire import WireClient, WireError
    from riverbed.protocol.api_versions import ApiKey
    from riverbed.protocol.messages import ApiVersionsRequest, ApiVersionsResponse

    try:
        with WireClient(args.bootstrap_server) as client:
            resp = client.request(ApiKey.API_VERSIONS, ApiVersionsRequest())
    except WireError as exc:
        raise CliError(str(exc)) from None
    assert isinstance(resp, ApiVersionsResponse)
    finalized = {f.name: f.max_version_level for f in resp.finalized_features}
    rows = [
        {
            "feature": f.name,
            "supported_min": f.min_version,
            "supported_max": f.max_version,
            "finalized": finalized.get(f.name, 0),
        }
        for f in sorted(resp.supported_features, key=lambda f: f.name)
    ]
    if args.json:
        print_json({"epoch": resp.finalized_features_epoch, "features": rows})
    else:
        print_table(
            None,
            ["Feature", "SupportedMinVersion", "SupportedMaxVersion", "FinalizedVersionLevel"],
            [[r["feature"], r["supported_min"], r["supported_max"], r["finalized"]] for r in rows],
        )
    return 0
