"""What the scheduler asks of a node's code, each an optional feature it may have: protocols the
scheduler checks with ``isinstance`` (structural: a node need not inherit from them).

- :class:`LoadsModel`: the node loads a model (the run's budget counts them:
  :attr:`~edgepipe.sched.budget.CpuBudget.model_nodes`; the limits say what holds each one);
- :class:`Governable`: the node offers the governor rates to lower (its knobs);
- :class:`KeepsUp`: an :class:`~edgepipe.sched.knobs.EveryKnob`'s target that raises its interval
  to keep up with live cameras (the knob says so in its description).

What the memory plan asks of a node (``plan_memory``) is the runtime's:
:class:`edgepipe.runtime.memory_plan.Plannable`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from edgepipe.sched.governor import Knob


@runtime_checkable
class LoadsModel(Protocol):
    """A node that may load a model (a detector, a language model)."""

    loads_model: bool
    """True when it does (a ``Describe`` with only a remote engine loads none)."""


def loads_model(target: object) -> bool:
    """Whether ``target`` (a node's code) says it loads a model."""
    return isinstance(target, LoadsModel) and bool(target.loads_model)


@runtime_checkable
class Governable(Protocol):
    """A node that offers the governor rates to lower."""

    def governor_knobs(self, node_id: str, priority: int) -> Sequence[Knob]:
        """Its knobs, once it has started (a knob with ``pinned = True`` is listed, never moved)."""
        ...


@runtime_checkable
class KeepsUp(Protocol):
    """An interval that rises above the governor's to keep up with live cameras (a detector's
    :class:`~edgepipe.vision.selection.ModelFrames`)."""

    @property
    def keep_up_interval(self) -> float:
        """Frames per model run that keeping up with the cameras needs now (1: none)."""
        ...


__all__ = ["Governable", "KeepsUp", "LoadsModel", "loads_model"]
