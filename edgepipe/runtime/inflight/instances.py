"""How many calls of a node's code run at once: its ``instances`` (a declaration's, else its
code's, else 1), with ``"auto"`` resolved by the run's CPU budget (see
:mod:`edgepipe.runtime.inflight.steps` for what several calls in flight do)."""

from __future__ import annotations

from edgepipe.core.errors import GraphError
from edgepipe.core.scope import Slot
from edgepipe.graph.spec import NodeSpec, OnError
from edgepipe.runtime.adapt import ProcessAdapter, check_instances


def _one() -> int:
    return 1


AUTO_INSTANCES = Slot("calls in flight of instances='auto'", _one)
"""How many calls a node declared with ``instances="auto"`` runs at once in a run: what the
run's CPU budget admits at once when it is governed (the scheduler puts it here), else 1."""


def instances_of(spec: NodeSpec, process: ProcessAdapter | None, auto: int) -> int:
    """How many calls of a node's code run at once: its declaration's ``instances``, else its
    code's, else 1; ``"auto"`` is ``auto`` (the budget's) where several calls can run (sync
    code on threads, not batched, not under ``restart``), else 1. Raises :class:`GraphError`
    for a count above 1 where they cannot."""
    declared = check_instances(spec, spec.instances, "instances")
    if declared is None and process is not None:
        declared = process.instances
    if declared is None or process is None:
        return 1
    able = (
        process.mode == "thread"
        and process.process_batch is None
        and (spec.on_error.action is not OnError.RESTART)
    )
    if declared == "auto":
        return max(1, auto) if able else 1
    assert isinstance(declared, int)
    if declared > 1 and not able:
        why = (
            "it batches (process_batch): one batch at a time" if process.process_batch is not None
            else "on_error='restart' cycles its hooks under the other calls" if process.mode == "thread"
            else f"its code runs {'on the event loop' if process.mode != 'stream' else 'as a stream'}; "
            "give a plain (sync) function or process() method, which runs on threads"
        )  # fmt: skip
        raise GraphError(f"instances={declared} needs calls on threads, but {why}", node_id=spec.node_id,
                         where=spec.where)  # fmt: skip
    return declared
