"""List the functions longer than a limit (the charter's "short functions (< ~70 lines)").

    python scripts/long_functions.py [--limit 70] [paths ...]   (default: src/riverbed)

A function's length runs from its ``def`` line to its last line (decorators excluded);
nested functions count on their own and inside the function that holds them. Prints the
longest first and a count; exits 0 either way (a report, not a gate).
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path


def long_functions(paths: list[Path], limit: int) -> list[tuple[int, str]]:
    """(length, "file:line name") of every function longer than ``limit`` lines."""
    rows = []
    for root in paths:
        files = sorted(root.rglob("*.py")) if root.is_dir() else [root]
        for path in files:
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    length = (node.end_lineno or node.lineno) - node.lineno + 1
                    if length > limit:
                        rows.append((length, f"{path}:{node.lineno} {node.name}"))
    return sorted(rows, reverse=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=70)
    parser.add_argument("paths", nargs="*", type=Path, default=[Path("src/riverbed")])
    args = parser.parse_args()
    rows = long_functions(args.paths, args.limit)
    for length, where in rows:
        print(length, where)
    print(f"{len(rows)} functions longer than {args.limit} lines")


if __name__ == "__main__":
    main()
