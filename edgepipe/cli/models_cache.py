"""``edgepipe models cache [--clean [--all]]``: what the model cache holds against its limit, and
emptying it (see :mod:`edgepipe.infer.model_cache.limit`)."""

from __future__ import annotations

import argparse
import json
import os
import time

from edgepipe.cli.exits import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from edgepipe.cli.failures import error
from edgepipe.infer.model_cache import limit as cl
from edgepipe.infer.model_cache import use as cache_use
from edgepipe.infer.model_cache.folder import cache_dir


def show_or_clean(args: argparse.Namespace) -> int:
    """Exit 2 for ``--all`` without ``--clean`` or a bad ``$EDGEPIPE_CACHE_MAX`` (here, where the
    cache is what the user asked about, a bad limit is an error, not a warning)."""
    if args.all and not args.clean:
        error("--all goes with --clean (models cache --clean --all)")
        return EXIT_USAGE
    try:
        limit = cl.max_bytes()
    except ValueError as exc:
        error(str(exc))
        return EXIT_USAGE
    if args.clean:
        return _clean(everything=args.all, as_json=args.format == "json")
    return _show(limit, as_json=args.format == "json")


def _show(limit: int, *, as_json: bool) -> int:
    root = cache_dir()
    found = cl.entries(root)
    total = sum(e.size_bytes for e in found)
    if as_json:
        rows = [
            {"kind": e.kind, "name": e.name, "size_bytes": e.size_bytes, "last_used": e.last_used_s,
             "files": [str(f) for f in e.files], "busy": e.busy, "in_use": _state(e) == " (in use)"}
            for e in found
        ]  # fmt: skip
        print(json.dumps({"path": str(root), "limit_bytes": limit, "total_bytes": total, "entries": rows},
                         indent=2))  # fmt: skip
        return EXIT_OK
    print(f"cache: {root}" + ("" if root.is_dir() else " (not created yet)"))
    if found:
        print(f"{'kind':<16} {'size':>10}  {'last used':<18} name")
        for e in reversed(found):  # most recently used first
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(e.last_used_s))
            print(f"{e.kind:<16} {cl.format_size(e.size_bytes):>10}  {when:<18} {e.name}{_state(e)}")
    else:
        print("nothing cached")
    source = cl.ENV if os.environ.get(cl.ENV, "").strip() else f"default; {cl.ENV} sets it"
    print(f"total {cl.format_size(total)} of {cl.format_size(limit)} ({source}); least recently used "
          "evicted first, optimized graphs before pulled models")  # fmt: skip
    return EXIT_OK


def _state(entry: cl.Entry) -> str:
    if entry.busy:
        return " (being written)"
    return " (in use)" if cache_use.in_use_elsewhere(entry.files) else ""


def _clean(*, everything: bool, as_json: bool) -> int:
    kinds = (cl.OPTIMIZED, cl.PULLED) if everything else (cl.OPTIMIZED,)
    gone, kept, failed = [], [], []
    for entry in cl.entries():
        if entry.kind not in kinds:
            continue
        if entry.busy:  # a pull or an optimization under way: removing it would break it
            kept.append((entry, "being written"))
            continue
        with cache_use.claim(entry.files) as free:
            if not free:  # a running pipeline's model: it could not start again offline
                kept.append((entry, "in use"))
                continue
            try:
                cl.remove(entry)
            except OSError as exc:  # another user's files, a read-only mount
                failed.append(f"cannot remove {entry.kind} {entry.name}: {exc}")
                continue
        gone.append(entry)
    freed = sum(e.size_bytes for e in gone)
    if as_json:
        removed = [{"kind": e.kind, "name": e.name, "size_bytes": e.size_bytes} for e in gone]
        left = [{"kind": e.kind, "name": e.name, "why": why} for e, why in kept]
        print(json.dumps({"removed": removed, "freed_bytes": freed, "kept": left}, indent=2))
        return _failed(failed)
    graphs = sum(e.kind == cl.OPTIMIZED for e in gone)
    said = f"removed {graphs} optimized graph{'' if graphs == 1 else 's'}"
    if everything:
        models = len(gone) - graphs
        said += f" and {models} pulled model{'' if models == 1 else 's'}"
    print(f"{said}, {cl.format_size(freed)}, from {cache_dir()}")
    if kept:
        print("kept " + ", ".join(f"{e.kind} {e.name} ({why})" for e, why in kept)
              + ": a running edgepipe uses or writes it; clean again once it is done")  # fmt: skip
    if not everything:
        print("pulled models kept (--clean --all removes them too; they are fetched again on next use)")
    return _failed(failed)


def _failed(messages: list[str]) -> int:
    for message in messages:
        error(message)
    return EXIT_FAILED if messages else EXIT_OK
