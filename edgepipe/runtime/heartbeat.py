"""A heartbeat file for container health checks.

``edgepipe run --health-file PATH`` rewrites PATH every :data:`INTERVAL_S` (at once when every
node has started, when a stop begins or the items stop moving, and a last time when the nodes
are done) with the time, whether the pipeline is stopping or stopped, and its progress: what
each stage emitted and each sink finished, and how long none of those counts has grown
(``idle_s``); the calls in flight of each node that runs several at once (``calls_in_flight``:
``[running, instances]``); with the scheduler's figures, the cores busy by kind of work over
the last second (``cpu_cores``: the CPU ledger's, ``overhead`` included), and the run's memory
plan (``memory``: what it holds and its budget, in bytes).
``edgepipe health PATH`` exits 0 while the pipeline runs and moves items, 1 with one line saying
why otherwise:

- no heartbeat, or one that cannot be read (it is written whole, by a rename: a partial one is
  a corrupt one);
- the last beat older than ``--max-age`` (a blocked event loop, a hung process), or dated in
  the future (the clock went back: its age says nothing);
- the pipeline stopping or stopped, or its process gone (same host only: a pid means nothing
  elsewhere);
- no item moved for ``--max-idle`` seconds, by default the slowest source's mean frame interval
  plus :data:`IDLE_MARGIN_S` (written in the heartbeat as ``max_idle_s``). Only items that come
  *out* of a stage or a sink count: a stage that times out on every item, or skips them with its
  circuit open, is not moving anything. The count starts once every node has started (a model
  that loads for a minute is not idle).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any

from edgepipe.core.executor import DaemonThreadPool
from edgepipe.runtime.engine import Runtime, Snapshot, Watcher
from edgepipe.wire.redact import redact

log = logging.getLogger(__name__)

INTERVAL_S = 5.0
"""How often the heartbeat is written."""
POLL_S = 0.5
"""How often progress is read (and a stop noticed) between beats."""
IDLE_MARGIN_S = 5.0
"""The default ``max_idle_s`` is the slowest source's frame interval plus this."""
FUTURE_SLACK_S = 1.0
"""A heartbeat dated this far ahead of the reader's clock is not believed."""
WRITE_TIMEOUT_S = 1.0
"""The last beat, written as the run ends, may take this long (a stuck disk must not hold the
exit)."""


def _write_atomically(path: str, text: str) -> None:
    # Readers see the old file or the new one, never a part: the rename is atomic.
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


@dataclass
class Progress:
    """Items out of each stage and sink, and how long since any grew (monotonic seconds)."""

    clock: Any = time.monotonic
    done: dict[str, int] = field(default_factory=dict)
    """Per stage: items emitted; per sink: items finished (taken, less failed and skipped)."""
    t_moved: float | None = None
    """When a count last grew (None before every node has started)."""
    _sources: dict[str, tuple[float, int]] = field(default_factory=dict)
    """Per source: when its first item was seen and how many it had then."""
    _intervals: dict[str, float] = field(default_factory=dict)

    def sample(self, snap: Snapshot, started: bool) -> None:
        now = self.clock()
        if started and self.t_moved is None:
            self.t_moved = now
        for n in snap.nodes:
            if n.kind == "source":
                self._source(n.node_id, n.items_out, now)
                continue
            # A sink emits nothing: what it finished is what it took, less the failed and the
            # skipped. That dips while a call is in flight and comes back, so only a new high
            # counts as movement.
            count = n.items_out if n.kind == "stage" else n.items_in - n.errors - n.skipped
            if count > self.done.get(n.node_id, 0):
                self.done[n.node_id] = count
                if started:
                    self.t_moved = now
            else:
                self.done.setdefault(n.node_id, 0)

    def _source(self, node_id: str, items: int, now: float) -> None:
        first = self._sources.get(node_id)
        if first is None:
            if items:
                self._sources[node_id] = (now, items)
            return
        t0, n0 = first
        if items > n0 + 1:
            self._intervals[node_id] = (now - t0) / (items - n0)

    @property
    def idle_s(self) -> float:
        return 0.0 if self.t_moved is None else self.clock() - self.t_moved

    @property
    def max_idle_s(self) -> float:
        """The slowest source's mean interval between items, plus :data:`IDLE_MARGIN_S`."""
        return max(self._intervals.values(), default=0.0) + IDLE_MARGIN_S


def heartbeat(path: str, interval_s: float = INTERVAL_S) -> Watcher:
    """A runtime watcher that keeps ``path`` fresh while the pipeline runs, and marks it
    stopped when the nodes are done (or the run fails)."""

    async def beat(runtime: Runtime) -> None:
        loop = asyncio.get_running_loop()
        pool = DaemonThreadPool(1, "heartbeat", spare_workers=0)  # a hung disk never holds the exit
        progress = Progress()
        state: tuple[bool, bool, bool] | None = None
        next_beat = 0.0
        failed = ""
        try:
            while True:
                snap = runtime.snapshot()
                started = runtime.all_started.is_set()
                progress.sample(snap, started)
                now = time.monotonic()
                # Written at once when the run starts or begins to stop, and when it goes idle.
                now_state = (started, runtime.stopping, progress.idle_s > progress.max_idle_s)
                if now >= next_beat or now_state != state:
                    state = now_state
                    body = _body(runtime, snap, progress, interval_s, stopped=False)
                    try:
                        await loop.run_in_executor(pool, _write_atomically, path, body)
                    except OSError as exc:  # the check will find the file stale: that is the truth
                        if str(exc) != failed:
                            failed = str(exc)
                            log.warning("heartbeat %s not written: %s", path, exc)
                    else:
                        failed = ""
                    next_beat = now + interval_s
                await asyncio.sleep(min(POLL_S, interval_s))
        except asyncio.CancelledError:
            # The nodes are done, or the run failed: say so, so that the check fails now rather
            # than when the file goes stale.
            body = _body(runtime, runtime.snapshot(), progress, interval_s, stopped=True)
            write = loop.run_in_executor(pool, _write_atomically, path, body)
            with contextlib.suppress(TimeoutError, OSError):
                await asyncio.wait_for(write, WRITE_TIMEOUT_S)
            raise
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    return beat


def _body(runtime: Runtime, snap: Snapshot, progress: Progress, interval_s: float, *, stopped: bool) -> str:
    # redacted: node ids and the scheduler's figures are the user's text (a node named by its URL)
    return json.dumps(
        redact(
            {
                "t": time.time(),
                "pid": os.getpid(),
                "host": os.uname().nodename,
                "interval_s": interval_s,
                "uptime_s": round(snap.t_s, 3),
                "started": runtime.all_started.is_set(),
                "stopping": runtime.stopping or stopped,
                "stopped": stopped,
                "items_out": sum(n.items_out for n in snap.nodes),
                "errors": sum(n.errors for n in snap.nodes),
                "progress": progress.done,
                "idle_s": round(progress.idle_s, 3),
                "max_idle_s": round(progress.max_idle_s, 3),
                "dropped": _dropped_by_node(snap),
                "calls_in_flight": {
                    n.node_id: [n.in_flight, n.instances] for n in snap.nodes if n.instances > 1
                },
                "sched": snap.sched,
                "cpu_cores": _cpu_cores(snap),
                "memory": snap.memory,
            }
        )
    )


def _cpu_cores(snap: Snapshot) -> dict[str, float] | None:
    """The CPU ledger's last window, by kind of work, with the process's (``process``) and
    what nothing accounts for (``overhead``); None without a scheduler."""
    ledger = (snap.sched or {}).get("cpu_ledger")
    if not ledger:
        return None
    return {"process": ledger["process_cores"], **ledger["kinds_cores"]}


def _dropped_by_node(snap: Snapshot) -> dict[str, int]:
    """Items each node's inbox lost: policy drops, governor thinning, frames past their age."""
    dropped: dict[str, int] = {}
    for lane in snap.channels:
        dropped[lane.consumer] = dropped.get(lane.consumer, 0) + lane.dropped + lane.shed + lane.aged
    return dropped


def _number(beat: dict[str, Any], key: str) -> float:
    value = beat[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{key!r} is {value!r}, not a number")
    return float(value)


def _process_gone(beat: dict[str, Any]) -> bool:
    pid, host = beat.get("pid"), beat.get("host")
    if not isinstance(pid, int) or pid <= 0 or host != os.uname().nodename:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # it exists, as another user's
        return False
    return False


def check(path: str, max_age_s: float, max_idle_s: float | None = None) -> tuple[bool, str]:
    """``(healthy, reason)`` for the heartbeat at ``path``; ``max_idle_s`` None: the
    heartbeat's own ``max_idle_s``. The reason is one line."""
    try:
        with open(path, encoding="utf-8") as f:
            beat = json.load(f)
        if not isinstance(beat, dict):
            raise ValueError("not a JSON object")
        age = time.time() - _number(beat, "t")
        idle = _number(beat, "idle_s") if "idle_s" in beat else 0.0
        limit = _number(beat, "max_idle_s") if max_idle_s is None and "max_idle_s" in beat else max_idle_s
    except FileNotFoundError:
        return False, f"{path}: no heartbeat yet (is `edgepipe run --health-file {path}` running?)"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return False, f"{path}: unreadable heartbeat ({exc}); is it written by `edgepipe run --health-file`?"
    if beat.get("stopped"):
        return False, f"{path}: the pipeline has stopped (last heartbeat {age:.1f} s ago)"
    if beat.get("stopping"):
        return False, f"{path}: the pipeline is stopping (heartbeat {age:.1f} s ago)"
    if age < -FUTURE_SLACK_S:
        return False, f"{path}: heartbeat dated {-age:.1f} s in the future; was the clock set back?"
    if age > max_age_s:
        return False, f"{path}: last heartbeat {age:.1f} s ago (limit {max_age_s:g} s)"
    if _process_gone(beat):
        return False, f"{path}: the process that wrote it (pid {beat['pid']}) is gone"
    if limit is not None and idle > limit:
        return False, f"{path}: no item moved for {idle:.1f} s (limit {limit:g} s; see --max-idle)"
    return True, f"ok: heartbeat {max(age, 0.0):.1f} s ago, {beat.get('items_out', 0)} items out"
