"""``MqttSink``: a pipeline's results, events and camera states published to an MQTT broker.

::

    from edgepipe import MqttSink

    p.sink("mqtt", MqttSink("mqtt://127.0.0.1:1883"), inputs=faces, queue_size=16)

The topics name the pipeline (``Pipeline(name)``), learnt at start from the node's context.

Topics, payloads and each kind's QoS and retain flag: :mod:`~edgepipe.sinks.mqtt.topics`.
Connection, last will and reconnects: :mod:`~edgepipe.sinks.mqtt.client`. The bounded outbox:
:mod:`~edgepipe.sinks.mqtt.outbox`. Home Assistant discovery:
:mod:`~edgepipe.sinks.mqtt.discovery`.

``process()`` never waits for the broker: it encodes the result and puts it in the outbox,
whatever the connection is doing. A broker that is down when the pipeline starts is not an
error: the pipeline runs, the sink keeps trying, and the outbox keeps the newest results that
fit (what it drops is counted by kind). The sink's gauges (``--stats``, ``/metrics``):
``connected`` (0/1), ``published``, ``dropped`` (and ``dropped_<kind>``), ``reconnects``,
``failures`` (failed attempts and lost connections), ``outbox`` (messages waiting), ``errors``
(unexpected errors of the sink's own tasks: logged once, counted, never the node's error),
``takeover`` (1 while another client seems to use the same client id: see
:mod:`~edgepipe.sinks.mqtt.client`).

At the stop the sink first queues the end state of each retained topic it wrote (each camera's
``source_state`` -> ``stopped``, its ``count`` -> 0, an ``engine_state`` -> ``stopped``:
:func:`~edgepipe.sinks.mqtt.topics.end_message`), then flushes the outbox for up to ``flush_s``
(after one more attempt to connect when the broker is away), then says ``offline``. What was not
delivered then (left in the outbox, or dropped from it when full) is said
(:mod:`~edgepipe.sinks.mqtt.undelivered`): messages of a QoS 1 or 2
kind (events, states, counts: delivery was asked for) fail the run
(:attr:`MqttSink.failed_output`, exit 1: "N messages not delivered to mqtt://HOST:PORT", how
many were still queued, how many dropped during the run and when); QoS 0 ones (each frame's
detections) are one log line, not a failure.

Camera states come from the sources upstream of the sink (``current_node().sources``, read
twice a second: a :class:`~edgepipe.media.VideoSource`'s state), from ``source_state``
results fed to the sink, and from :meth:`MqttSink.hear` (a runtime listener:
``runtime.add_listener(sink.hear)``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib.util
import logging
import ssl
from collections import Counter
from collections.abc import Coroutine, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Self

from edgepipe.core.configured import configured, keywords
from edgepipe.core.context import SourceState, current_node
from edgepipe.core.install import missing
from edgepipe.sinks.mqtt.config import (
    BrokerConfig,
    MqttConfig,
    checked_level,
    client_id,
    default_device,
)
from edgepipe.sinks.mqtt.discovery import discovery_publications
from edgepipe.sinks.mqtt.outbox import Outbox
from edgepipe.sinks.mqtt.topics import ENDING_KINDS, NO_SOURCE, STOPPED, STOPPED_WHY, Publication, Topics
from edgepipe.sinks.mqtt.undelivered import best_effort_line, failed_line, undelivered
from edgepipe.vision.detection import Detections
from edgepipe.wire.messages import message, message_of

if TYPE_CHECKING:
    from edgepipe.sinks.mqtt.client import Connection

log = logging.getLogger(__name__)

MAX_SOURCES = 256
"""Cameras the sink announces and keeps a state for; more are published, never announced."""
STATE_POLL_S = 0.5


class MqttSink:
    """Publishes every result it is given to an MQTT broker (see the module docstring)."""

    @configured(MqttConfig)
    def __init__(self, config: MqttConfig) -> None:
        """The keywords of :class:`~edgepipe.sinks.mqtt.config.MqttConfig`: ``url``, the broker;
        ``device``, this camera or box in the topics; the pipeline's name in them comes from the
        run (:meth:`start`). :meth:`from_config` takes one built.

        Raises ``ImportError`` without aiomqtt, and
        :class:`~edgepipe.sinks.mqtt.config.MqttConfigError` (a ``ValueError``)
        for a broker URL, name or setting that cannot work: at declaration, before anything runs.
        """
        if importlib.util.find_spec("aiomqtt") is None:
            raise ImportError(missing("aiomqtt", "mqtt", "the MQTT sink"))
        self.config = config
        self.device = default_device() if config.device is None else config.device
        """This camera or box in the topics: the config's, else the environment's or the host's."""
        self.pipeline = "pipeline"
        """The pipeline's name in the topics: the running pipeline's from :meth:`start` on."""
        self.topics = Topics(self.device, self.pipeline, prefix=config.prefix, payload=config.payload,
                             qos=config.qos, retain=config.retain)  # fmt: skip
        self.outbox = Outbox(config.outbox_size)
        self.client_id = client_id(self.device, self.pipeline)
        self.sources: Mapping[str, SourceState] = {}
        """The states of the sources upstream, by node id: the node's context's, from
        :meth:`start` on (published as they change)."""
        self.flush_s = 2.0
        """At the stop, how long the outbox may take to empty into a connected broker."""
        self.errors = 0
        """Unexpected errors in the sink's own tasks (a bug, a source whose state cannot be read):
        logged once, counted in the ``errors`` gauge; never an error of the node."""
        self.unencodable = 0
        """Results that could not be encoded (logged once; never an error of the pipeline)."""
        self.connection: Connection | None = None
        self._known: dict[str, None] = {}
        """Cameras seen, in order (announced to Home Assistant)."""
        self._counts: dict[str, dict[str, int]] = {}
        self._states: dict[str, tuple[str, str]] = {}
        self._retained: dict[str, Publication] = {}
        """The latest retained publication per topic: sent again at every connection."""
        self._last: dict[str, dict[str, Any]] = {}
        """The latest message per retained topic of a kind with an end state (``ENDING_KINDS``)."""
        self._ended = False
        """The end states are queued (the stop): no state or count goes out after them."""
        self._gauges: dict[str, Any] = {}
        self._group: asyncio.TaskGroup | None = None
        self._task: asyncio.Task[None] | None = None
        self._tasks: list[asyncio.Task[None]] = []

    @classmethod
    def from_config(cls, config: MqttConfig) -> Self:
        """A sink of ``config`` (its settings checked again: they pass)."""
        return cls(**keywords(config))

    @property
    def broker(self) -> BrokerConfig:
        """The broker it publishes to (the config's URL, read)."""
        return self.config.broker

    def __repr__(self) -> str:
        return f"MqttSink({self.broker.shown!r}, device={self.device!r}, pipeline={self.pipeline!r})"

    # -- node hooks ---------------------------------------------------------------------------

    async def start(self) -> None:
        from edgepipe.sinks.mqtt.client import Connection

        node_id = "mqtt"
        run_blocking: Any = None
        with contextlib.suppress(RuntimeError):  # outside a pipeline (a unit test) it keeps its own
            ctx = current_node()
            self._gauges, node_id, run_blocking = ctx.gauges, ctx.node_id, ctx.run_blocking
            self.name_pipeline(ctx.pipeline)
            self.sources = ctx.sources
        connection = Connection(
            self.broker, self.client_id, self.topics, self.outbox, self._announcements, node_id=node_id,
            keepalive_s=self.config.keepalive_s, backoff_initial_s=self.config.first_backoff_s,
            backoff_max_s=self.config.backoff_max_s, on_change=self._report,
        )  # fmt: skip
        connection.listen_ha = self.config.discovers
        if self.broker.tls:
            # Loading CA certificates reads files: on the node's hook threads, off the loop.
            make = functools.partial(ssl.create_default_context, cafile=self.broker.ca_file)
            connection.tls_context = await run_blocking(make) if run_blocking is not None else make()
        self.connection = connection
        self._ended = False
        for source_id in self.sources:
            self._see(source_id)
        self._report()
        # The sink's own tasks live in a TaskGroup entered here and left in stop(): both hooks
        # run in the node's task, which owns the group for the node's whole life.
        group = asyncio.TaskGroup()
        await group.__aenter__()
        self._group = group
        # A task of the group that raised would cancel the node's own task: each catches and
        # counts what it did not expect (see _guarded), so a bug degrades the sink, not the node.
        self._task = group.create_task(self._guarded("connection", connection.run()), name=f"{node_id}:mqtt")
        self._tasks = [self._task]
        if self.sources:
            self._tasks.append(group.create_task(self._guarded("camera-state watcher", self._watch_sources()),
                                                 name=f"{node_id}:mqtt-states"))  # fmt: skip

    def check_pipeline_name(self, name: str) -> None:
        """Refuse, before the run starts (the graph's validation calls it), a pipeline name that
        cannot be a topic level: :class:`MqttConfigError` naming it."""
        checked_level("pipeline name", name)

    def name_pipeline(self, name: str) -> None:
        """Name the pipeline in the topics and the client id: :meth:`start` does, with the
        running pipeline's name (call it only to use the sink outside a pipeline). Raises
        :class:`MqttConfigError` for a name that cannot be a topic level."""
        self.pipeline = checked_level("pipeline name", name)
        self.topics.name_pipeline(self.pipeline)
        self.client_id = client_id(self.device, self.pipeline)

    async def process(self, item: Any) -> None:
        """Queue ``item`` for the broker; never waits."""
        self.put(item)

    async def stop(self) -> None:
        group, self._group = self._group, None
        if group is None:
            return
        self._poll_states_safely()  # a source that ended just now: its last state goes out too
        self._end()
        error: BaseException | None = None
        try:
            if self.connection is not None and self._task is not None:
                await self.connection.close(self._task, self.flush_s)
        except BaseException as exc:  # the node's hook timeout (CancelledError) during the flush
            error = exc
            raise
        finally:
            # Whatever ended the flush, the sink's tasks end here (the state watcher never ends
            # by itself): leaving the group waits for them, so none may be left running.
            for task in self._tasks:
                task.cancel()
            try:
                await group.__aexit__(
                    type(error) if error else None, error, error.__traceback__ if error else None
                )
            finally:
                self._report()
                line = best_effort_line(self.outbox, self.topics, self.broker.shown)
                if line is not None:
                    log.warning("%s", line)

    # -- results ------------------------------------------------------------------------------

    def put(self, item: Any) -> None:
        """Encode ``item`` and queue it (and its camera's ``count`` and discovery when new)."""
        try:
            message = message_of(item)
            source, pub = self.topics.of_message(message)
        except Exception as exc:  # a payload that cannot be encoded never fails the pipeline
            self.unencodable += 1
            if self.unencodable == 1:
                log.warning("an MQTT result could not be encoded (%s: %s); such results are counted and "
                            "dropped", type(exc).__name__, exc)  # fmt: skip
            return
        if self._ended and (pub.kind in ENDING_KINDS or isinstance(item, Detections)):
            return  # the end states are queued: a state said now would contradict them
        if source != NO_SOURCE:
            self._see(source)
        if isinstance(item, Detections):
            self._count(source, Counter(d.label for d in item.items))
            if self.config.detections:
                self._queue(pub)
        elif pub.kind == "source_state":
            state = (str(message.get("state")), str(message.get("reason") or ""))
            if self._states.get(source) != state:
                if source in self._states or len(self._states) < MAX_SOURCES:
                    self._states[source] = state
                self._queue(pub, message)
        else:
            self._queue(pub, message)
        self._report()

    def hear(self, message: Any) -> None:
        """A runtime event (``runtime.add_listener(sink.hear)``): a source's state, a node's error."""
        self.put(message)

    def _queue(self, pub: Publication, message: dict[str, Any] | None = None) -> None:
        if pub.retain and (pub.topic in self._retained or len(self._retained) < 4 * MAX_SOURCES):
            self._retained[pub.topic] = pub
            if message is not None and pub.kind in ENDING_KINDS:
                self._last[pub.topic] = message
        self.outbox.put(pub)

    def _end(self) -> None:
        """Queue the end state of each retained topic whose latest message is not one (the
        stop: before ``offline``); states and counts said after it are not published."""
        self._ended = True
        for topic, last in list(self._last.items()):
            ending = self.topics.end_publication(topic, last)
            if ending is None:
                continue
            end, pub = ending
            source = str(end.get("source"))
            if pub.kind == "source_state" and source in self._states:
                self._states[source] = (STOPPED, STOPPED_WHY)  # a restart's poll says "live" again
            elif pub.kind == "count" and source in self._counts:
                self._counts[source] = {}
            self._queue(pub, end)
        self._report()

    def _count(self, source: str, labels: Counter[str]) -> None:
        now = dict(sorted(labels.items()))
        if self._counts.get(source) == now:
            return
        if source in self._counts or len(self._counts) < MAX_SOURCES:
            self._counts[source] = now
        counted = self.topics.count_message(source, now)
        _, pub = self.topics.of_message(counted)
        self._queue(pub, counted)

    def _see(self, source: str) -> None:
        if not source or source in self._known or len(self._known) >= MAX_SOURCES:
            return
        self._known[source] = None
        if self.config.discovers:
            for pub in discovery_publications(self.topics, source, prefix=self.config.discovery_prefix,
                                              object_name=self.config.object_name):  # fmt: skip
                self._queue(pub)

    def _announcements(self) -> Iterator[Publication]:
        """What a broker that has just been (re)connected to may not know: discovery configs
        and the latest retained state of each topic."""
        yield from list(self._retained.values())

    # -- camera states --------------------------------------------------------------------------

    async def _watch_sources(self) -> None:
        while True:
            self._poll_states_safely()
            await asyncio.sleep(STATE_POLL_S)

    def _poll_states_safely(self) -> None:
        try:
            self._poll_states()
        except Exception as exc:  # a source's state_info that raises: counted, the watch goes on
            self._error("camera-state watcher", exc)

    async def _guarded(self, what: str, work: Coroutine[Any, Any, None]) -> None:
        """Runs ``work`` (a task of the sink's group); an error other than CancelledError ends
        it with one log line and a count, never the node's task."""
        try:
            await work
        except Exception as exc:
            self._error(what, exc)

    def _error(self, what: str, exc: Exception) -> None:
        self.errors += 1
        if self.errors == 1:
            log.error("the MQTT sink's %s failed (%s: %s); the pipeline goes on (further errors are "
                      "counted in the 'errors' gauge)", what, type(exc).__name__, exc)  # fmt: skip
        log.debug("the MQTT sink's %s failed", what, exc_info=True)
        self._report()

    def _poll_states(self) -> None:
        if self._ended:
            return
        for source_id, source in self.sources.items():
            info = source.state_info
            if not isinstance(info, tuple):
                continue
            state, reason = str(info[0]), str(info[1] or "")
            if self._states.get(source_id) == (state, reason) or state == "idle":
                continue
            self.put(message("source_state", node=source_id, source=source_id, state=state, reason=reason))

    # -- gauges ---------------------------------------------------------------------------------

    def _report(self) -> None:
        gauges = self._gauges
        connection = self.connection
        if connection is not None:
            stats = connection.stats
            gauges["connected"] = int(stats.connected)
            gauges["published"] = sum(stats.published.values())
            gauges["reconnects"] = stats.reconnects
            gauges["failures"] = stats.failures
            gauges["takeover"] = int(stats.takeover)
        gauges["errors"] = self.errors + (connection.stats.errors if connection is not None else 0)
        gauges["outbox"] = len(self.outbox)
        gauges["dropped"] = self.outbox.dropped_total
        for kind, n in self.outbox.dropped.items():
            gauges[f"dropped_{kind}"] = n

    def undelivered(self) -> tuple[Counter[str], Counter[str]]:
        """``(asked, best_effort)``: the messages not delivered, by kind
        (:func:`~edgepipe.sinks.mqtt.undelivered.undelivered`)."""
        return undelivered(self.outbox, self.topics)

    @property
    def failed_output(self) -> str | None:
        """After the run: the messages of QoS 1 or 2 not delivered, in one line (the run's
        report names the sink with it, and the run exits 1); None when every one was."""
        stats = self.connection.stats if self.connection is not None else None
        return failed_line(self.outbox, self.topics, self.broker.shown, self.client_id, stats)

    @property
    def gauges(self) -> dict[str, Any]:
        """The sink's figures, as its gauges show them."""
        self._report()
        return dict(self._gauges)
