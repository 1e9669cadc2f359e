"""Running one node: the per-item loop, its error policy, and its start/stop hooks.

A :class:`NodeRunner` is the running state of one :class:`~edgepipe.core.pipeline.NodeSpec`. Its
:meth:`NodeRunner.run` is one task in the runtime's TaskGroup. The loop is the hot path: it is
specialised once per node (async call, thread call, inline call, stream) so that nothing is
decided per item, and it allocates nothing per item beyond what the user's code returns.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

from edgepipe.core.adapt import ProcessAdapter, SourceAdapter, adapt_process, adapt_source
from edgepipe.core.batched import batch_call, run_batched
from edgepipe.core.calls import call_in_thread, call_with_deadline
from edgepipe.core.channel import Channel, Policy
from edgepipe.core.context import NodeContext, set_current
from edgepipe.core.errors import EndOfStream, NodeError, NodeTimeout, describe
from edgepipe.core.lease import Leased
from edgepipe.core.metrics import NodeMetrics
from edgepipe.core.pipeline import NodeKind, NodeSpec, OnError
from edgepipe.core.prepared import composed, run_prepared

if TYPE_CHECKING:
    from edgepipe.core.runtime import Runtime

log = logging.getLogger(__name__)

_LOG_EVERY_S = 1.0
_clock = time.perf_counter_ns


class _ConsumersGone(BaseException):
    """Internal: every channel this node feeds has been detached by its consumer. A
    BaseException so that no error policy mistakes it for a failure of the node's code."""


class NodeRunner:
    """One node's task: takes from its inbox, calls the user's code, emits to its consumers."""

    def __init__(self, spec: NodeSpec, runtime: Runtime, executor: Any, hooks_executor: Any) -> None:
        self.spec = spec
        self.node_id = spec.node_id
        self.runtime = runtime
        self.metrics = NodeMetrics(spec.node_id, spec.kind.value)
        self.inbox: Channel[Any] | None = None
        if spec.kind is not NodeKind.SOURCE:
            self.inbox = Channel(spec.node_id, spec.queue_size, spec.policy)
        self.outputs: list[Channel[Any]] = []
        self.records_results = False
        """Whether this node feeds a sink, so its output is written to ``--results``."""
        self.task: asyncio.Task[None] | None = None
        self._source: SourceAdapter | None = None
        self._process: ProcessAdapter | None = None
        self._executor = executor
        self._hooks_executor = hooks_executor
        self.call_thread = functools.partial(call_in_thread, executor, spec.node_id)
        """``await call_thread(fn, item, timeout_s)``: ``fn(item)`` on the node's executor."""
        if spec.kind is NodeKind.SOURCE:
            self._source = adapt_source(spec, executor, hooks_executor)
        else:
            self._process = adapt_process(spec, executor, hooks_executor)
        self._consecutive_failures = 0
        self._context: NodeContext | None = None
        self.in_stop_hook = False
        """True while the stop() hook runs: a forced stop lets it finish (it flushes sinks)."""
        self._held: Any = None
        self._held_passed = False
        self._last_log_ns = 0
        self._suppressed = 0

    @property
    def context(self) -> NodeContext:
        """What the node's code sees through :func:`~edgepipe.core.context.current_node`."""
        if self._context is None:

            async def emit_event(kind: str, data: Any) -> None:
                await self.runtime.emit_event(self.node_id, kind, data)

            async def run_blocking(fn: Callable[..., Any], *args: Any) -> Any:
                call = contextvars.copy_context().run
                return await asyncio.get_running_loop().run_in_executor(self._hooks_executor, call, fn, *args)

            self._context = NodeContext(
                self.node_id,
                len(self.outputs),
                tuple(c.size for c in self.outputs),
                emit_event,
                self.metrics.gauges,
                run_blocking,
            )
        return self._context

    def connect(self, consumer: NodeRunner) -> None:
        assert consumer.inbox is not None
        consumer.inbox.add_producer()
        self.outputs.append(consumer.inbox)
        if consumer.spec.kind is NodeKind.SINK:
            self.records_results = True

    # -- lifecycle ----------------------------------------------------------------------------

    async def run(self) -> None:
        """The node's whole life: start hook, loop, stop hook. Raises NodeError to stop the run."""
        m = self.metrics
        set_current(self.context)
        m.started()
        state = "failed"
        try:
            await self._start()
            self.runtime.node_started(self)
            if self._source is not None:
                await self.runtime.all_started.wait()
                await self._run_source(self._source)
            else:
                assert self._process is not None
                await self._run_process(self._process)
            state = "done"
        except _ConsumersGone:
            log.info("[%s] every consumer has stopped; stopping", self.node_id)
            state = "done"
        except asyncio.CancelledError:
            state = "stopped" if self.runtime.stopping else "cancelled"
            raise
        finally:
            for channel in self.outputs:
                channel.close()
            if self.inbox is not None:
                self.inbox.detach()
            try:
                self.in_stop_hook = True
                await self._stop()
            finally:
                # Even if a forced stop cancels the hook, the node counts as finished: the run
                # must end.
                m.finished(state)
                self.runtime.node_finished(self)

    async def _start(self) -> None:
        hooks = self._source or self._process
        assert hooks is not None
        while True:
            try:
                await hooks.start()
                return
            except Exception as exc:
                if self.spec.on_error.action is not OnError.RESTART:
                    raise NodeError(f"start() failed: {describe(exc)}", node_id=self.node_id) from exc
                await self._failed(exc, restart_hooks=False)

    async def _stop(self) -> None:
        hooks = self._source or self._process
        assert hooks is not None
        try:
            async with asyncio.timeout(self.runtime.stop_timeout_s):
                await hooks.stop()
        except TimeoutError:
            log.warning("[%s] stop() did not return within %.1f s; abandoned", self.node_id,
                        self.runtime.stop_timeout_s)  # fmt: skip
        except Exception as exc:
            log.warning("[%s] stop() failed: %s", self.node_id, describe(exc))

    # -- sources ------------------------------------------------------------------------------

    async def _run_source(self, source: SourceAdapter) -> None:
        emit = self._emit
        while True:
            try:
                iterator = source.open()
                if hasattr(iterator, "aclose"):
                    async with aclosing(iterator):  # type: ignore[type-var]
                        await self._pump(iterator, emit)
                else:
                    await self._pump(iterator, emit)
                return
            except Exception as exc:
                if not source.restartable and self.spec.on_error.action is not OnError.STOP:
                    raise NodeError(
                        f"{describe(exc)} (cannot restart a generator object; pass the generator "
                        "function instead)",
                        node_id=self.node_id,
                    ) from exc
                # For a source, "skip" also means "open it again" (an iterator that raised is
                # over), after the same backoff as a restart so that it cannot spin.
                await self._failed(
                    exc, restart_hooks=self.spec.on_error.action is OnError.RESTART, reopen=True
                )

    async def _pump(self, iterator: AsyncIterator[Any], emit: Callable[[Any], Awaitable[None]]) -> None:
        n = 0
        timeout_s = self.spec.timeout_s
        if timeout_s is None:
            async for item in iterator:
                self._consecutive_failures = 0
                await emit(item)
                n += 1
                if n & 15 == 0:
                    # A source that never awaits (an in-memory list into a "latest" channel)
                    # would otherwise starve its consumers and ignore cancellation.
                    await asyncio.sleep(0)
            return
        while True:
            # timeout_s on a source bounds the wait for its next item: a stalled input is an error
            # for its policy (restart, by default) instead of a silent hang.
            try:
                async with asyncio.timeout(timeout_s):
                    item = await anext(iterator)
            except StopAsyncIteration:
                return
            except TimeoutError as exc:
                raise NodeTimeout(f"no item within timeout_s={timeout_s}", node_id=self.node_id) from exc
            self._consecutive_failures = 0
            await emit(item)
            n += 1
            if n & 15 == 0:
                # A source that never awaits (an in-memory list into a "latest" channel) would
                # otherwise starve its consumers and ignore cancellation.
                await asyncio.sleep(0)

    # -- stages and sinks ---------------------------------------------------------------------

    async def _run_process(self, process: ProcessAdapter) -> None:
        if process.mode == "stream":
            await self._run_stream(process)
            return
        inbox = self.inbox
        assert inbox is not None
        get = inbox.get
        call = process.call
        if process.process_batch is not None:
            await run_batched(self, batch_call(process.process_batch, process.prepare), process.batch_size)
            return
        if process.prepare is not None:
            if inbox.policy is Policy.BLOCK and self.spec.on_error.action is not OnError.RESTART:
                await run_prepared(self, process.prepare, call)
                return
            call = composed(process.prepare, call)
        inline = process.mode == "inline"
        thread = process.mode == "thread"
        timeout_s = self.spec.timeout_s
        emit = self._emit if self.spec.kind is NodeKind.STAGE else None
        record = self.metrics.record
        m = self.metrics
        while True:
            try:
                item = await get()
            except EndOfStream:
                return
            m.items_in += 1
            t0 = _clock()
            try:
                if inline:
                    out = call(item)
                elif thread:
                    out = await self.call_thread(call, item, timeout_s)
                elif timeout_s is None:
                    out = await call(item)
                else:
                    out = await call_with_deadline(call, item, timeout_s, self.node_id)
            except Exception as exc:
                if isinstance(item, Leased):
                    item.release()
                await self._failed(exc, restart_hooks=True)
                continue
            record(_clock() - t0)
            self._consecutive_failures = 0
            if out is not item and isinstance(item, Leased):
                item.release()  # returning the item itself hands its reference downstream
            if emit is not None and out is not None:
                await emit(out)
            elif out is item and isinstance(out, Leased):
                out.release()  # a sink (or a stage without consumers) returned its input

    async def _run_stream(self, process: ProcessAdapter) -> None:
        while True:
            try:
                stream = process.call(self._inbox_items())
                async with aclosing(stream):
                    async for out in stream:
                        self._consecutive_failures = 0
                        await self._emit(out)
                return
            except Exception as exc:
                # The generator is dead after raising: skip and restart both start a new one on
                # the rest of the input; restart also cycles the hooks.
                await self._failed(exc, restart_hooks=self.spec.on_error.action is OnError.RESTART)

    async def _inbox_items(self) -> AsyncIterator[Any]:
        inbox = self.inbox
        assert inbox is not None
        m = self.metrics
        # The previous pooled input is released when the next is asked for, unless it was
        # emitted meanwhile (its reference then travelled downstream).
        try:
            while True:
                self._release_held()
                try:
                    item = await inbox.get()
                except EndOfStream:
                    return
                m.items_in += 1
                if isinstance(item, Leased):
                    self._held, self._held_passed = item, False
                yield item
        finally:
            self._release_held()

    def _release_held(self) -> None:
        held, self._held = self._held, None
        if held is not None and not self._held_passed:
            held.release()

    # -- output -------------------------------------------------------------------------------

    async def _emit(self, item: Any) -> None:
        """Hand ``item`` to every consumer (the same object: no copy).

        Raises :class:`_ConsumersGone` once every consumer has detached: nobody is listening,
        so the node ends instead of producing into the void.
        """
        if self.records_results and self.runtime.results is not None:
            # Before the puts: once a consumer has it, a pooled item may be freed at any time.
            await self.runtime.results.write(item, self.node_id)
        if isinstance(item, Leased):
            await self._emit_leased(item)
            return
        for channel in self.outputs:  # the hot path: _put() inlined
            if channel.policy is Policy.BLOCK and len(channel) >= channel.size:
                t0 = _clock()
                accepted = await channel.put(item)
                self.metrics.blocked_ns += _clock() - t0
            else:
                accepted = await channel.put(item)
            if not accepted and channel.detached and all(c.detached for c in self.outputs):
                raise _ConsumersGone
        self.metrics.items_out += 1

    async def _put(self, channel: Channel[Any], item: Any) -> None:
        if channel.policy is Policy.BLOCK and len(channel) >= channel.size:
            t0 = _clock()
            accepted = await channel.put(item)
            self.metrics.blocked_ns += _clock() - t0
        else:
            accepted = await channel.put(item)
        if not accepted and channel.detached and all(c.detached for c in self.outputs):
            raise _ConsumersGone

    async def _emit_leased(self, item: Leased) -> None:
        outputs = self.outputs
        if item is self._held:
            self._held_passed = True
        if not outputs:
            item.release()
        elif len(outputs) > 1:
            item.retain(len(outputs) - 1)  # the emitter's reference becomes the first consumer's
        handed = 0
        try:
            for channel in outputs:
                handed += 1  # put() either takes the reference or drops and releases it
                await self._put(channel, item)
        except asyncio.CancelledError:
            # Cancelled while waiting in a blocking put: that one and the rest never got theirs.
            for _ in range(len(outputs) - handed + 1):
                item.release()
            raise
        self.metrics.items_out += 1

    # -- errors -------------------------------------------------------------------------------

    async def _failed(self, exc: Exception, *, restart_hooks: bool, reopen: bool = False) -> None:
        """Apply the error policy to ``exc``. Returns to carry on; raises NodeError to stop."""
        policy = self.spec.on_error
        m = self.metrics
        m.errors += 1
        self._consecutive_failures += 1
        what = describe(exc)
        await self.runtime.emit_event(
            self.node_id, "error", {"error": type(exc).__name__, "message": str(exc)}
        )
        if policy.action is OnError.STOP or getattr(exc, "retryable", True) is False:
            # The error itself may say that trying again cannot help (a missing file).
            if isinstance(exc, NodeError):
                raise exc
            raise NodeError(what, node_id=self.node_id) from exc
        if self._consecutive_failures >= policy.max_consecutive:
            raise NodeError(
                f"{what} ({self._consecutive_failures} failures in a row; giving up)", node_id=self.node_id
            ) from exc
        self._log_failure(what, exc)
        if policy.action is OnError.RESTART or reopen:
            await self._restart(restart_hooks)

    async def _restart(self, restart_hooks: bool) -> None:
        policy = self.spec.on_error
        delay = min(policy.backoff_max_s, policy.backoff_initial_s * 2 ** (self._consecutive_failures - 1))
        self.metrics.restarts += 1
        self.metrics.state = "restarting"
        log.warning("[%s] restarting in %.2f s", self.node_id, delay)
        await self.runtime.emit_event(
            self.node_id, "restart", {"delay_s": delay, "attempt": self._consecutive_failures}
        )
        if restart_hooks:
            await self._stop()
        await asyncio.sleep(delay)
        if restart_hooks:
            await self._start()
        self.metrics.state = "running"

    def _log_failure(self, what: str, exc: Exception) -> None:
        # One line per second at most: a node failing on every frame must not flood the log.
        now = _clock()
        if now - self._last_log_ns < _LOG_EVERY_S * 1e9:
            self._suppressed += 1
            return
        more = f" (+{self._suppressed} more since last report)" if self._suppressed else ""
        log.error("[%s] %s; %s%s", self.node_id, what, self.spec.on_error.action.value, more,
                  exc_info=exc if self.runtime.debug else None)  # fmt: skip
        self._last_log_ns = now
        self._suppressed = 0
