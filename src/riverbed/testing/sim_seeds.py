"""The seed options of every seeded simulation's command line, one spelling for all.

``--seed S`` replays one seed (what a failure prints); ``--seeds N`` runs N seeds starting
at ``--first-seed K`` (default 0). A soak that always started at 0 would only ever re-run
the seeds the last soak already passed: ``make soak SEEDS=N FIRST_SEED=K`` explores new
ones.
"""

from __future__ import annotations

import argparse


def add_seed_options(ap: argparse.ArgumentParser, seeds_default: int = 100) -> None:
    """``--seed``, ``--seeds`` and ``--first-seed`` (``--start``: its older name)."""
    ap.add_argument("--seed", type=int, help="run this one seed (a failure's replay)")
    ap.add_argument(
        "--seeds",
        type=int,
        default=seeds_default,
        help=f"run N seeds from --first-seed on (default {seeds_default})",
    )
    ap.add_argument(
        "--first-seed",
        "--start",
        dest="first_seed",
        type=int,
        default=0,
        help="the first of the --seeds seeds (default 0): new seeds for a soak",
    )


def chosen_seeds(args: argparse.Namespace) -> list[int]:
    """The seeds the options name, in order."""
    if args.seed is not None:
        return [args.seed]
    if args.seeds < 0 or args.first_seed < 0:
        raise SystemExit(
            f"--seeds and --first-seed must be >= 0 (got --seeds {args.seeds},"
            f" --first-seed {args.first_seed})"
        )
    return list(range(args.first_seed, args.first_seed + args.seeds))
