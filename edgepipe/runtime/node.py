"""Running one node: its life from ``start()`` to ``stop()``, its inbox and outputs.

A :class:`NodeRunner` is the running state of one :class:`~edgepipe.graph.spec.NodeSpec`. Its
:meth:`NodeRunner.run` is one task in the runtime's TaskGroup. The loops that move items live in
:mod:`~edgepipe.runtime.pump` (with :mod:`~edgepipe.runtime.inflight.steps` and
:mod:`~edgepipe.runtime.batched`), the error policy in :mod:`~edgepipe.runtime.circuit`, emission in
:mod:`~edgepipe.runtime.emit`; the runner wires them together.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import logging
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Protocol

from edgepipe.core.channel import Policy
from edgepipe.core.context import CallLimit, NodeContext, SourceState, set_current
from edgepipe.core.cputime import SETUP, run_counted
from edgepipe.core.errors import NodeError, error_text
from edgepipe.core.scope import RunScope
from edgepipe.core.spans import SpanLog
from edgepipe.graph.check import Graph
from edgepipe.graph.spec import NodeKind, NodeSpec, OnError
from edgepipe.runtime.adapt import ProcessAdapter, SourceAdapter, adapt_process, adapt_source
from edgepipe.runtime.calls import call_in_thread
from edgepipe.runtime.circuit import Circuit
from edgepipe.runtime.emit import ConsumersGone, Outputs, ResultsLog
from edgepipe.runtime.inbox import Inbox
from edgepipe.runtime.inflight.flight import Flight
from edgepipe.runtime.inflight.instances import AUTO_INSTANCES, instances_of
from edgepipe.runtime.inflight.steps import in_flight
from edgepipe.runtime.metrics import NodeMetrics, NodeStats
from edgepipe.runtime.pump import run_items, run_source, run_stream

log = logging.getLogger(__name__)


class Host(Protocol):
    """What a node needs of the runtime that runs it."""

    graph: Graph
    debug: bool
    stop_timeout_s: float
    all_started: asyncio.Event
    stop_requested: asyncio.Event
    """Set when the run starts stopping (what :attr:`NodeContext.stopping` is)."""

    @property
    def results(self) -> ResultsLog | None: ...

    @property
    def stopping(self) -> bool: ...

    async def emit_event(self, node_id: str, kind: str, data: Any) -> None: ...

    def node_started(self, runner: NodeRunner) -> None: ...

    def node_finished(self, runner: NodeRunner) -> None: ...

    def hook_timeout_s(self) -> float: ...

    @property
    def scope(self) -> RunScope:
        """What the run owns (:data:`~edgepipe.runtime.inflight.instances.AUTO_INSTANCES` among it)."""
        ...


def source_states(graph: Graph, node_id: str) -> Mapping[str, SourceState]:
    """The states of the sources upstream of ``node_id``, by node id: each source's code's
    ``status`` (a :class:`~edgepipe.media.status.SourceStatus`), where it has one."""
    states: dict[str, SourceState] = {}
    for upstream in graph.upstream(node_id):
        spec = graph.node(upstream)
        status = getattr(spec.target, "status", None) if spec.kind is NodeKind.SOURCE else None
        # Looked up, not read: a state that raises is its readers' to count, not the node's.
        if status is not None and inspect.getattr_static(status, "state_info", None) is not None:
            states[upstream] = status
    return MappingProxyType(states)


class NodeRunner:
    """One node's task: starts it, runs its loop, stops it."""

    def __init__(
        self, spec: NodeSpec, host: Host, executor: Any, hooks_executor: Any, spans: SpanLog | None = None
    ) -> None:
        """``spans``: where its calls are timed, when its run records spans (``edgepipe trace``)."""
        self.spec = spec
        self.node_id = spec.node_id
        self.host = host
        self.metrics = NodeMetrics(spec.node_id, spec.kind.value, spans)
        self.inbox: Inbox | None = None
        if spec.kind is not NodeKind.SOURCE:
            self.inbox = Inbox(spec.node_id)
            for lane in spec.lanes:
                self.inbox.add(lane.name, lane.size, lane.policy, lane.max_age_s)
        self.outputs = Outputs(spec.node_id, self.metrics)
        self.holds: list[int] = []
        """Per consumer: how many of this node's items it can hold at once."""
        self.task: asyncio.Task[None] | None = None
        self._hooks_executor = hooks_executor
        self.call_thread: Callable[..., Any] = functools.partial(call_in_thread, executor, spec.node_id)
        """``await call_thread(fn, item, timeout_s, lane=None)`` on the node's executor."""
        self._source: SourceAdapter | None = None
        self._process: ProcessAdapter | None = None
        if spec.kind is NodeKind.SOURCE:
            self._source = adapt_source(spec, executor, hooks_executor)
        else:
            self._process = adapt_process(spec, executor, hooks_executor)
        self.instances = instances_of(spec, self._process, host.scope.get(AUTO_INSTANCES) or 1)
        """How many calls of its code it runs at once."""
        self.calls = CallLimit(self.instances, self.instances)
        """Those, and how many it may run now (a governor's knob may shed some)."""
        self.circuit = Circuit(
            spec.node_id, spec.kind, spec.on_error, self.metrics, self._emit_event, self._cycle_hooks,
            debug=host.debug,
        )  # fmt: skip
        self._context: NodeContext | None = None
        self.in_stop_hook = False
        """True while the stop() hook runs: a forced stop lets it finish (it flushes sinks)."""

    @property
    def context(self) -> NodeContext:
        """What the node's code sees through :func:`~edgepipe.core.context.current_node`."""
        if self._context is None:

            async def emit_event(kind: str, data: Any) -> None:
                await self.host.emit_event(self.node_id, kind, data)

            async def run_blocking(fn: Callable[..., Any], *args: Any) -> Any:
                call = contextvars.copy_context().run
                return await asyncio.get_running_loop().run_in_executor(
                    self._hooks_executor, call, run_counted, setup, fn, *args
                )

            setup = (self.node_id, SETUP)  # loading a model: the node's set-up CPU

            channels = self.outputs.channels
            self._context = NodeContext(
                self.node_id,
                len(channels),
                emit_event,
                self.metrics.gauges,
                run_blocking,
                consumer_holds=tuple(self.holds),
                priority=int(self.spec.priority),
                stop_timeout_s=self.host.stop_timeout_s,
                live_input=self.inbox is not None
                and all(c.policy is Policy.LATEST for c in self.inbox.channels),
                stopping=self.host.stop_requested,
                pipeline=self.host.graph.name,
                calls=self.calls,
                sources=source_states(self.host.graph, self.node_id),
            )
        return self._context

    def connect(self, consumer: NodeRunner) -> None:
        """Feed ``consumer``: this node's lane in its inbox becomes one of the outputs."""
        assert consumer.inbox is not None
        channel = next(c for c, lane in zip(consumer.inbox.channels, consumer.spec.lanes, strict=True)
                       if lane.source == self.node_id)  # fmt: skip
        self.outputs.connect(channel)
        self.holds.append(channel.size + consumer.in_hand)
        if consumer.spec.kind is NodeKind.SINK:
            self.outputs.results = self.host.results

    @property
    def in_hand(self) -> int:
        """How many items of one producer this node holds beyond its inbox: the one it works
        on; with calls in flight, those and the ones around them (:meth:`Flight.in_hand`); or
        a batch."""
        process = self._process
        if process is None:
            return 1
        if process.process_batch is not None:
            return process.batch_size
        return Flight.in_hand(self.instances) if in_flight(self, process, self.instances) else 1

    def snapshot(self) -> NodeStats:
        inbox = self.inbox
        taken = None if inbox is None else sum(c.stats().got for c in inbox.channels)
        return self.metrics.snapshot(items_in=taken)

    # -- lifecycle ----------------------------------------------------------------------------

    async def run(self) -> None:
        """The node's whole life: start hook, loop, stop hook. Raises NodeError to stop the run."""
        m = self.metrics
        set_current(self.context)
        m.started()
        state = "failed"
        try:
            await self._start()
            self.host.node_started(self)
            if self._source is not None:
                await self.host.all_started.wait()
                await run_source(self, self._source)
            else:
                assert self._process is not None
                if self._process.mode == "stream":
                    await run_stream(self, self._process)
                else:
                    await run_items(self, self._process, self.calls)
            state = "done"
        except ConsumersGone:
            log.info("[%s] every consumer has stopped; stopping", self.node_id)
            state = "done"
        except asyncio.CancelledError:
            state = "stopped" if self.host.stopping else "cancelled"
            raise
        finally:
            self.outputs.close()
            if self.inbox is not None:
                self.inbox.detach()
            try:
                self.in_stop_hook = True
                await self._stop()
            finally:
                # Even if a forced stop cancels the hook, the node counts as finished: the run
                # must end.
                m.finished(state)
                self.host.node_finished(self)

    async def _start(self) -> None:
        hooks = self._source or self._process
        assert hooks is not None
        while True:
            try:
                await hooks.start()
                self.circuit.start_failures = 0
                return
            except Exception as exc:
                if self.spec.on_error.action is not OnError.RESTART:
                    raise NodeError(f"start() failed: {error_text(exc)}", node_id=self.node_id) from exc
                await self.circuit.start_failed(exc)

    async def _stop(self) -> None:
        hooks = self._source or self._process
        assert hooks is not None
        timeout_s = self.host.hook_timeout_s()
        try:
            async with asyncio.timeout(timeout_s):
                await hooks.stop()
        except TimeoutError:
            log.warning("[%s] stop() did not return within %.1f s; abandoned", self.node_id, timeout_s)
        except Exception as exc:
            log.warning("[%s] stop() failed: %s", self.node_id, error_text(exc))

    async def _cycle_hooks(self, delay_s: float) -> None:
        """The restart policy: ``stop()``, wait, ``start()``."""
        await self._stop()
        await asyncio.sleep(delay_s)
        await self._start()

    async def _emit_event(self, kind: str, data: Any) -> None:
        await self.host.emit_event(self.node_id, kind, data)
