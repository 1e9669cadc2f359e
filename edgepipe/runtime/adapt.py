"""Turning whatever the user declared into one of a few shapes the runtime knows how to drive.

Sources become an ``open()`` that returns a fresh async iterator (called again on restart).
Stages and sinks become a per-item call in one of three modes, chosen once per node rather than
tested per item (code with a second parameter named ``lane`` is also given the name of the
inbox lane each item came from):

- ``async``: ``await fn(item)`` on the event loop (async functions and methods);
- ``thread``: the call runs on the node's resource executor (sync code, the default for it);
- ``inline``: a plain call on the loop (sync code that runs on the loop, ``on_loop``: cheap and
  never blocking, declared by the node or by its code, :func:`~edgepipe.graph.spec.on_loop`);

or, for a stage written as an async generator function over its input stream, ``stream``.

Objects may also have ``start()`` and ``stop()`` hooks, sync (run on the executor) or async,
a sync ``prepare(item)`` whose result their sync ``process()`` takes and a sync
``finish(result)`` that takes what it returns (steps that the runtime overlaps, with up to
``instances`` calls of ``process()`` at once: :mod:`edgepipe.runtime.inflight.steps`), and
``process_batch(items)`` with a ``batch_size`` for micro-batching
(:mod:`edgepipe.runtime.batched`).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from edgepipe.core.cputime import CODE, SETUP, run_counted
from edgepipe.core.errors import GraphError
from edgepipe.core.markers import END
from edgepipe.graph.spec import NodeKind, NodeSpec
from edgepipe.graph.types import takes_lane, unwrap


def _invalid(spec: NodeSpec, message: str) -> GraphError:
    return GraphError(message, node_id=spec.node_id, where=spec.where)


Hook = Callable[[], Awaitable[None]]


async def _no_hook() -> None:
    return None


def _is_async_fn(fn: Any) -> bool:
    fn = unwrap(fn)
    return inspect.iscoroutinefunction(fn) or (
        callable(fn) and inspect.iscoroutinefunction(type(fn).__call__)
    )


def _is_async_gen_fn(fn: Any) -> bool:
    return inspect.isasyncgenfunction(unwrap(fn))


def _to_thread(executor: Any, fn: Callable[..., Any], key: tuple[str, str]) -> Callable[..., Awaitable[Any]]:
    def call(*args: Any) -> Awaitable[Any]:
        # In the node's context: a sync start() may ask current_node() who it works for (a
        # Recorder names itself as its encodes' owner).
        run = contextvars.copy_context().run
        return asyncio.get_running_loop().run_in_executor(executor, run, run_counted, key, fn, *args)

    return call


def _hook(obj: Any, name: str, executor: Any, node_id: str) -> Hook:
    """``obj.name()`` as an awaitable hook; sync hooks run on ``executor`` (the hooks pool),
    their CPU counted as the node's ``setup``."""
    method = getattr(obj, name, None)
    if method is None or inspect.isfunction(obj) or inspect.ismethod(obj):
        return _no_hook
    if not callable(method):
        return _no_hook
    if _is_async_fn(method):
        return method  # type: ignore[no-any-return]
    run = _to_thread(executor, method, (node_id, SETUP))

    async def sync_hook() -> None:
        await run()

    return sync_hook


@dataclass(slots=True)
class SourceAdapter:
    open: Callable[[], AsyncIterator[Any]]
    start: Hook
    stop: Hook
    restartable: bool


@dataclass(slots=True)
class ProcessAdapter:
    mode: str
    """``async``, ``thread``, ``inline`` or ``stream``."""
    call: Callable[..., Any]
    """Per item: returns an awaitable (async), a value (inline; thread, where the runner calls it
    on the node's executor) or, for stream, an async iterator when called with the input stream."""
    start: Hook
    stop: Hook
    prepare: Callable[[Any], Any] | None = None
    """``thread`` mode only: the object's sync ``prepare(item)``, whose result ``call`` takes
    (see :mod:`edgepipe.runtime.inflight.steps`)."""
    process_batch: Callable[[list[Any]], Any] | None = None
    """``thread`` mode only: the object's ``process_batch(items)``, used when its ``batch_size``
    is above 1 (see :mod:`edgepipe.runtime.batched`)."""
    batch_size: int = 1
    finish: Callable[[Any], Any] | None = None
    """``thread`` mode only: the object's sync ``finish(result)``, called on each result in its
    lane's order (see :mod:`edgepipe.runtime.inflight.steps`)."""
    instances: int | str | None = None
    """The calls in flight the object declares (its ``instances`` attribute: a count or
    ``"auto"``); None when it declares none."""
    takes_lane: bool = False
    """Per-item modes: the code is called as ``call(item, lane)`` (it has a second parameter
    named ``lane``) with the name of the inbox lane the item came from."""


async def _aiter_inline(items: Iterable[Any]) -> AsyncIterator[Any]:
    for item in items:
        yield item


async def _aiter_thread(iterator: Iterator[Any], executor: Any, node_id: str) -> AsyncIterator[Any]:
    loop = asyncio.get_running_loop()
    key = (node_id, CODE)
    while True:
        # next() with a default: a StopIteration must not cross the executor's future.
        item = await loop.run_in_executor(executor, run_counted, key, next, iterator, END)
        if item is END:
            return
        yield item


def _as_async_iterator(value: Any, spec: NodeSpec, executor: Any) -> AsyncIterator[Any]:
    if hasattr(value, "__aiter__"):
        return value.__aiter__()  # type: ignore[no-any-return]
    if isinstance(value, Sequence | range | set | frozenset | dict) and spec.on_loop is not False:
        return _aiter_inline(value)
    if hasattr(value, "__iter__"):
        if spec.on_loop:
            return _aiter_inline(value)
        return _aiter_thread(iter(value), executor, spec.node_id)
    raise _invalid(
        spec,
        f"a source must be an async iterable, an iterable, or a function returning one; got "
        f"{type(value).__name__}",
    )


def adapt_source(spec: NodeSpec, executor: Any, hooks_executor: Any) -> SourceAdapter:
    target = spec.target
    start, stop = (
        _hook(target, "start", hooks_executor, spec.node_id),
        _hook(target, "stop", hooks_executor, spec.node_id),
    )
    if _is_async_gen_fn(target):
        return SourceAdapter(lambda: target().__aiter__(), start, stop, restartable=True)
    if inspect.isasyncgen(target) or inspect.isgenerator(target):
        # A generator object can be iterated once: it cannot be restarted.
        used = False

        def open_once() -> AsyncIterator[Any]:
            nonlocal used
            if used:
                raise RuntimeError("a generator object cannot restart; pass the generator function instead")
            used = True
            return _as_async_iterator(target, spec, executor)

        return SourceAdapter(open_once, start, stop, restartable=False)
    if hasattr(target, "__aiter__") or hasattr(target, "__iter__"):
        return SourceAdapter(lambda: _as_async_iterator(target, spec, executor), start, stop, True)
    if callable(target):
        if _is_async_fn(target):

            async def from_coroutine() -> AsyncIterator[Any]:
                async for item in _as_async_iterator(await target(), spec, executor):
                    yield item

            return SourceAdapter(from_coroutine, start, stop, restartable=True)
        if spec.on_loop:
            return SourceAdapter(lambda: _as_async_iterator(target(), spec, executor), start, stop, True)

        async def from_function() -> AsyncIterator[Any]:
            # A plain function may open a camera or read a file: call it off the loop.
            value = await asyncio.get_running_loop().run_in_executor(
                executor, run_counted, (spec.node_id, CODE), target
            )
            async for item in _as_async_iterator(value, spec, executor):
                yield item

        return SourceAdapter(from_function, start, stop, restartable=True)
    raise _invalid(
        spec,
        f"cannot use a {type(target).__name__} as a source; give an async generator function, "
        "an iterable, or a function returning one",
    )


def adapt_process(spec: NodeSpec, executor: Any, hooks_executor: Any) -> ProcessAdapter:
    target = spec.target
    if isinstance(target, type):
        raise _invalid(
            spec,
            f"got the class {target.__name__}; pass an instance, e.g. {target.__name__}()",
        )
    fn = getattr(target, "process", None)
    if fn is None or inspect.isfunction(target) or isinstance(target, functools.partial):
        fn = target
    if not callable(fn):
        raise _invalid(
            spec,
            f"cannot use a {type(target).__name__} as a {spec.kind.value}; give a function or an "
            "object with a process(item) method",
        )
    start, stop = (
        _hook(target, "start", hooks_executor, spec.node_id),
        _hook(target, "stop", hooks_executor, spec.node_id),
    )
    if _is_async_gen_fn(fn):
        if spec.kind is not NodeKind.STAGE:
            raise _invalid(
                spec,
                "an async generator function can only be a stage (it maps the input stream)",
            )
        if spec.timeout_s is not None:
            raise _invalid(
                spec,
                "timeout_s applies to per-item calls, not to a stream stage",
            )
        return ProcessAdapter("stream", fn, start, stop)
    lane = takes_lane(fn)
    if _is_async_fn(fn):
        return ProcessAdapter("async", fn, start, stop, takes_lane=lane)
    if spec.on_loop:
        if spec.timeout_s is not None:
            raise _invalid(
                spec,
                "timeout_s cannot interrupt code that runs on the event loop; declare on_loop=False",
            )
        return ProcessAdapter("inline", fn, start, stop, takes_lane=lane)
    prepare = getattr(target, "prepare", None)
    if fn is target or not callable(prepare) or _is_async_fn(prepare):
        prepare = None
    process_batch = getattr(target, "process_batch", None)
    batch_size = getattr(target, "batch_size", 1)
    if fn is target or not callable(process_batch) or not isinstance(batch_size, int) or batch_size < 2:
        process_batch, batch_size = None, 1
    finish = getattr(target, "finish", None)
    if fn is target or not callable(finish) or _is_async_fn(finish):
        finish = None
    declared = None if fn is target else getattr(target, "instances", None)
    if not isinstance(declared, int | str):  # an attribute of another meaning: not a declaration
        declared = None
    instances = check_instances(spec, declared, "its code's instances")
    return ProcessAdapter("thread", fn, start, stop, prepare, process_batch, batch_size, takes_lane=lane,
                          finish=finish, instances=instances)  # fmt: skip


def check_instances(spec: NodeSpec, value: Any, what: str) -> int | str | None:
    """``value`` (a count of calls in flight, ``"auto"`` or None) when it is one; a
    :class:`GraphError` naming the node and ``what`` declared it otherwise."""
    if value is None or value == "auto":
        return value  # type: ignore[no-any-return]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _invalid(spec, f"{what} must be a count of at least 1 or 'auto', got {value!r}")
    return value
