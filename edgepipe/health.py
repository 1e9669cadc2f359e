"""A heartbeat file for container health checks.

``edgepipe run --health-file PATH`` rewrites PATH every :data:`INTERVAL_S` with the time and the
items processed so far; ``edgepipe health PATH`` exits 0 while the file is fresh. A blocked event
loop or a hung process stops the heartbeat, so the check fails exactly when the pipeline is stuck.
"""

from __future__ import annotations

import asyncio
import json
import os
import time

from edgepipe.core.runtime import Runtime, Snapshot, Watcher

INTERVAL_S = 5.0


def _write_atomically(path: str, text: str) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def heartbeat(path: str, interval_s: float = INTERVAL_S) -> Watcher:
    """A runtime watcher that keeps ``path`` fresh while the pipeline runs."""

    async def beat(runtime: Runtime) -> None:
        loop = asyncio.get_running_loop()
        while True:
            snap = runtime.snapshot()
            body = json.dumps(
                {
                    "t": time.time(),
                    "uptime_s": round(snap.t_s, 3),
                    "items_out": sum(n.items_out for n in snap.nodes),
                    "errors": sum(n.errors for n in snap.nodes),
                    "stopping": runtime.stopping,
                    "dropped": _dropped_by_node(snap),
                    "sched": snap.sched,
                }
            )
            await loop.run_in_executor(None, _write_atomically, path, body)
            await asyncio.sleep(interval_s)

    return beat


def _dropped_by_node(snap: Snapshot) -> dict[str, int]:
    """Items each node's inbox lost: policy drops, governor thinning, frames past their age."""
    dropped: dict[str, int] = {}
    for lane in snap.channels:
        dropped[lane.consumer] = dropped.get(lane.consumer, 0) + lane.dropped + lane.shed + lane.aged
    return dropped


def check(path: str, max_age_s: float) -> tuple[bool, str]:
    """``(healthy, reason)`` for the heartbeat at ``path``."""
    try:
        with open(path, encoding="utf-8") as f:
            beat = json.load(f)
        age = time.time() - float(beat["t"])
    except FileNotFoundError:
        return False, f"{path}: no heartbeat yet (is `edgepipe run --health-file {path}` running?)"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return False, f"{path}: unreadable heartbeat: {exc}"
    if age > max_age_s:
        return False, f"{path}: last heartbeat {age:.1f} s ago (limit {max_age_s:.0f} s)"
    return True, f"ok: heartbeat {age:.1f} s ago, {beat.get('items_out', 0)} items out"
