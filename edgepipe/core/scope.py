"""The run scope: what one run owns that code deep in its nodes reaches without being handed it.

A model loaded by a node's ``start()`` takes its thread count from the CPU budget and reserves
its weights in the memory plan; each of its runs enters the gate of heavy calls, on the heavy
cores of the split. None of these is passed down through the user's code: each is a
:class:`Slot`, declared by the module that defines the thing (``gate()`` in
:mod:`edgepipe.sched.gate` reads its slot), and read from the :class:`RunScope` of the run the
caller works for. Outside any run (a script, a unit test) a slot gives its process default, so
``gate()`` and ``memory_plan()`` work everywhere. A slot may also say how a run's own value is
made (``per_run``): every run then gets one at its first read, without anyone putting it there
(the stream phases of :mod:`edgepipe.sched.stagger`).

How work finds its run: a context variable. The runtime enters the run's scope in the task that
runs it (:func:`entered`), so its nodes' tasks, created from there, inherit it; a thread pool runs a
thread in the context of the run that starts it, else the one it was made in
(:class:`~edgepipe.core.executor.DaemonThreadPool`), and the runtime makes its pools in one
holding the scope (:func:`context_of`): a node's calls on
a worker thread reach the same scope, and two runs in one process (two threads, or two
``run_async`` in one loop) never see each other's. ``asyncio``'s ``run_in_executor`` and a
``threading.Thread`` do not carry the context by themselves: a thread started elsewhere is
started in ``contextvars.copy_context().run``.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class RunScope:
    """The services one run owns, by slot. Filled before any node starts; a slot may be set again
    during the run (a scheduler that fails puts an ungoverned gate in place of its own), and
    every thread of the run sees the change at its next read."""

    def __init__(self, name: str = "") -> None:
        self.name = name
        """The pipeline's name (logs)."""
        self._values: dict[Slot[Any], Any] = {}
        self._making = threading.Lock()

    def put(self, slot: Slot[T], value: T) -> T:
        """Give this run its own ``value`` of ``slot``; returns it."""
        self._values[slot] = value
        return value

    def get(self, slot: Slot[T]) -> T | None:
        """This run's value of ``slot``; None if it has none (the process's applies: a value of
        None counts as none)."""
        value: T | None = self._values.get(slot)
        return value

    def setdefault(self, slot: Slot[T], make: Callable[[], T]) -> T:
        """This run's value of ``slot``, made by ``make()`` and put if it has none (several
        threads of the run asking at once get the one made)."""
        with self._making:
            value: T | None = self._values.get(slot)
            if value is None:
                value = self._values[slot] = make()
            return value

    def __contains__(self, slot: Slot[T]) -> bool:
        return slot in self._values


_scope: contextvars.ContextVar[RunScope | None] = contextvars.ContextVar("edgepipe_run", default=None)


class Slot(Generic[T]):
    """One service a run may own, with the process's value outside any run (or when the run has
    none of its own). Reading it costs a context variable's lookup and a dict's."""

    def __init__(
        self, name: str, process: Callable[[], T], *, per_run: Callable[[], T] | None = None
    ) -> None:
        """``process`` gives the process's value (the module that declares the slot keeps it);
        ``per_run``, when given, makes a run's own value at its first read (in the run)."""
        self.name = name
        self._process = process
        self._per_run = per_run

    def get(self) -> T:
        """The current run's value (made now if the slot makes one per run), else the process's."""
        scope = _scope.get()
        if scope is not None:
            value: T | None = scope._values.get(self)
            if value is not None:
                return value
            if self._per_run is not None:
                return scope.setdefault(self, self._per_run)
        return self._process()

    def __repr__(self) -> str:
        return f"Slot({self.name!r})"


def current_scope() -> RunScope | None:
    """The scope of the run the caller works for; None outside any run."""
    return _scope.get()


@contextlib.contextmanager
def entered(scope: RunScope) -> Iterator[RunScope]:
    """``scope`` is the current run's for the ``with`` block (in this task or thread; tasks
    created inside inherit it)."""
    token = _scope.set(scope)
    try:
        yield scope
    finally:
        _scope.reset(token)


def context_of(scope: RunScope) -> contextvars.Context:
    """A copy of the caller's context with ``scope`` entered: for the run's thread pools."""
    context = contextvars.copy_context()
    context.run(_scope.set, scope)
    return context
