"""The MQTT sink's connection: connect, say ``online``, drain the outbox; reconnect when lost.

One :class:`Connection` per sink runs as a task of the sink's TaskGroup for the whole run:

1. connect (aiomqtt, which drives paho-mqtt on the event loop; only the TCP/TLS connect runs on
   a thread) with the last will ``offline`` (retained, QoS 1) on the status topic, so the broker
   marks the pipeline gone when the process dies without a word (SIGKILL, power, network);
2. publish ``online`` (retained), and put what a new broker may not know at the front of the
   outbox: Home Assistant's discovery configs and the latest retained state of each topic
   (``announce()``);
3. take the outbox's messages in order and publish each (a QoS 1 one waits for its PUBACK, at
   most ``timeout_s``); a publish that fails goes back to the front of the outbox;
4. when the connection drops (seen by aiomqtt's message iterator, which ends with an error on a
   disconnect) or a publish fails, wait and go to 1: ``backoff_initial_s``, doubled per failed
   attempt up to ``backoff_max_s``, with ±20% jitter so that a fleet does not reconnect in step
   when its broker comes back.

A broker drops a client when another connects with the same client id. When the connection is
dropped within :data:`TAKEOVER_SHORT_S` of being made :data:`TAKEOVER_CUTS` times within
:data:`TAKEOVER_WINDOW_S`, another process most likely runs with the same device and pipeline:
one warning says so (naming the id and ``--mqtt-device``), ``stats.takeover`` is set, and each
reconnect waits at least :data:`TAKEOVER_BACKOFF_S`, so the two do not take the id from each
other (and flip the status) several times a second. A connection that then stays up for
:data:`TAKEOVER_WINDOW_S` ends that, as soon as it has (one line says so; the gauge goes back to 0
and connections are logged again), without waiting for it to be lost.

:meth:`Connection.close` (the sink's ``stop()``) publishes what the outbox holds for up to
``flush_s``, then ``offline`` (retained), and disconnects cleanly (so the broker does not send
the will on top). Not connected at the stop, with messages waiting, it makes one more attempt
at once (within the same ``flush_s``) instead of waiting out the backoff.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import aiomqtt

from edgepipe.core.backoff import Backoff
from edgepipe.sinks.mqtt.config import BrokerConfig
from edgepipe.sinks.mqtt.outbox import Outbox
from edgepipe.sinks.mqtt.topics import Publication, Topics

log = logging.getLogger(__name__)

HA_STATUS_TOPIC = "homeassistant/status"
"""Home Assistant's birth message (``online`` when it starts): discovery is sent again then."""
TAKEOVER_SHORT_S = 5.0
"""A connection the broker drops sooner than this after it was made was cut short."""
TAKEOVER_CUTS = 3
TAKEOVER_WINDOW_S = 60.0
TAKEOVER_BACKOFF_S = 30.0
"""The least wait before a reconnect while another client seems to use the same id."""
UP_A_WHILE_S = 5.0
"""A connection up this long that is lost is a new outage: the backoff starts again from its first step."""


@dataclass
class ConnectionStats:
    """What the sink reports in its gauges (``--stats``, ``/metrics``)."""

    connected: bool = False
    connects: int = 0
    """Connections made (the first one and every reconnect)."""
    failures: int = 0
    """Connection attempts that failed and connections that were lost."""
    errors: int = 0
    """Unexpected errors (a bug) that ended a connection: logged, and the loop goes on."""
    published: Counter[str] = field(default_factory=Counter)
    """Publications the client library accepted (QoS 1: the broker acknowledged), by kind."""
    last_error: str = ""
    takeover: bool = False
    """The broker keeps dropping the connection right after it is made: most likely another
    client with the same id (see the module docstring)."""

    @property
    def reconnects(self) -> int:
        return max(0, self.connects - 1)


class Connection:
    """Keeps one broker connection alive and drains ``outbox`` into it (see the module docstring)."""

    def __init__(
        self,
        broker: BrokerConfig,
        client_id: str,
        topics: Topics,
        outbox: Outbox,
        announce: Callable[[], Iterable[Publication]],
        *,
        node_id: str = "mqtt",
        keepalive_s: int = 30,
        timeout_s: float = 5.0,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 30.0,
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        """``announce()``: what to send first at each connection. ``on_change()``: called on the
        loop when the figures change (connected, published, failures)."""
        self.broker = broker
        self.client_id = client_id
        self.topics = topics
        self.outbox = outbox
        self.announce = announce
        self.node_id = node_id
        self.keepalive_s = keepalive_s
        self.timeout_s = timeout_s
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self.backoff = Backoff(backoff_initial_s, backoff_max_s, jitter=0.2)
        """The waits between attempts; ±20% so that a fleet does not reconnect in step."""
        self.on_change = on_change
        self.stats = ConnectionStats()
        self.tls_context: ssl.SSLContext | None = None
        """Set by the sink's start (loading CA certificates reads files: off the loop)."""
        self.listen_ha = False
        """Subscribe to Home Assistant's birth topic and announce again when it says ``online``."""
        self._closing = asyncio.Event()
        self._warned = False
        self._t_connected: float | None = None
        self._cuts: deque[float] = deque(maxlen=TAKEOVER_CUTS)
        """When the last connections cut short were lost (monotonic seconds)."""
        self.takeover_backoff_s = TAKEOVER_BACKOFF_S

    # -- the loop -----------------------------------------------------------------------------

    async def run(self) -> None:
        """Connect, publish, reconnect, until :meth:`close`. Never raises but CancelledError: an
        unexpected error is logged, counted (``stats.errors``) and treated as a lost connection."""
        self.backoff.reset()
        last_try = False
        while True:
            if self._closing.is_set():
                # The stop: what waits gets one more attempt now, not after the backoff (close()
                # bounds it); none while another client holds the id (it would take it back).
                if last_try or not len(self.outbox) or self.stats.takeover:
                    return
                last_try = True
            self._t_connected = None
            try:
                await self._session()
                return  # closed: flushed, offline published, disconnected
            except aiomqtt.MqttError as exc:  # a refused attempt, or the broker closed the connection
                self._failed(exc, dropped=True)
            except (OSError, ValueError) as exc:  # a TLS context that cannot work, a socket error
                self._failed(exc)
            except Exception as exc:  # a bug: one line, counted; the sink degrades, the node goes on
                self.stats.errors += 1
                if self.stats.errors == 1:
                    log.error("[%s] MQTT connection error (%s: %s); reconnecting (further ones are counted "
                              "in the 'errors' gauge)", self.node_id, type(exc).__name__, exc)  # fmt: skip
                log.debug("[%s] MQTT connection error", self.node_id, exc_info=True)
                self._failed(exc)
            finally:
                if self.stats.connected:
                    self.stats.connected = False
                    self.on_change()
            if self._closing.is_set():
                continue
            if self.stats.takeover:
                wait_s = self.backoff.jittered(max(self.backoff_max_s, self.takeover_backoff_s))
            else:
                if self._t_connected is not None and time.monotonic() - self._t_connected > UP_A_WHILE_S:
                    self.backoff.reset()  # a new outage, not a flapping broker
                wait_s = self.backoff.next()
            try:
                async with asyncio.timeout(wait_s):
                    await self._closing.wait()
            except TimeoutError:
                pass

    def _failed(self, exc: BaseException, dropped: bool = False) -> None:
        was_connected = self.stats.connected
        self.stats.failures += 1
        self.stats.last_error = str(exc) or type(exc).__name__
        if was_connected and dropped and self._t_connected is not None:  # not a bug of ours
            self._lost_after(time.monotonic() - self._t_connected)
        if was_connected and not self.stats.takeover:
            log.warning("[%s] lost the MQTT broker %s (%s); reconnecting, results wait in the outbox "
                        "(at most %d)", self.node_id, self.broker.shown, self.stats.last_error,
                        self.outbox.size)  # fmt: skip
        elif not was_connected and not self._warned:
            log.warning("[%s] cannot reach the MQTT broker %s (%s); retrying (every %g s at most), results "
                        "wait in the outbox (at most %d)", self.node_id, self.broker.shown,
                        self.stats.last_error, self.backoff_max_s, self.outbox.size)  # fmt: skip
        else:
            log.debug("[%s] MQTT broker %s: %s", self.node_id, self.broker.shown, self.stats.last_error)
        self._warned = True
        self.on_change()

    def _lost_after(self, up_s: float) -> None:
        """A connection up for ``up_s`` was lost: is another client taking the id each time?"""
        now = time.monotonic()
        if up_s >= TAKEOVER_WINDOW_S:  # it held: whatever cut it, no other client is taking turns
            self._cuts.clear()
            self.stats.takeover = False
            return
        if up_s >= TAKEOVER_SHORT_S:
            return
        self._cuts.append(now)
        if self.stats.takeover or len(self._cuts) < TAKEOVER_CUTS or now - self._cuts[0] > TAKEOVER_WINDOW_S:
            return
        self.stats.takeover = True
        wait_s = max(self.backoff_max_s, self.takeover_backoff_s)
        log.warning("[%s] the MQTT broker %s dropped this client %d times within %g s of connecting: most "
                    "likely another client uses the same client id %s (another process with the same "
                    "device and pipeline). Give each process its own device: --mqtt-device NAME (the "
                    "MqttSink's device argument, or EDGEPIPE_DEVICE). Reconnecting every %g s meanwhile",
                    self.node_id, self.broker.shown, TAKEOVER_CUTS, TAKEOVER_SHORT_S, self.client_id,
                    wait_s)  # fmt: skip

    def _client(self) -> aiomqtt.Client:
        will = aiomqtt.Will(self.topics.status, b"offline", qos=1, retain=True)
        return aiomqtt.Client(
            self.broker.host,
            self.broker.port,
            identifier=self.client_id,
            username=self.broker.username,
            password=self.broker.password,
            will=will,
            keepalive=self.keepalive_s,
            timeout=self.timeout_s,
            tls_context=self.tls_context,
            logger=log,
        )

    async def _session(self) -> None:
        """One connection, from connect to loss (raises MqttError) or close (returns)."""
        async with self._client() as client:
            self.stats.connected = True
            self.stats.connects += 1
            self._t_connected = time.monotonic()
            self._warned = False
            again = f" (reconnect {self.stats.reconnects})" if self.stats.reconnects else ""
            log.log(logging.DEBUG if self.stats.takeover else logging.INFO,  # it was said once: enough
                    "[%s] connected to the MQTT broker %s as %s%s", self.node_id, self.broker.shown,
                    self.client_id, again)  # fmt: skip
            self.on_change()
            await self._publish(client, self.topics.status_publication(online=True))
            self._announce()
            if self.listen_ha:
                await client.subscribe(HA_STATUS_TOPIC, qos=1, timeout=self.timeout_s)
            try:
                async with asyncio.TaskGroup() as group:
                    watcher = group.create_task(self._watch(client), name=f"{self.node_id}:mqtt-watch")
                    calm = None
                    if self.stats.takeover:
                        calm = group.create_task(self._held(), name=f"{self.node_id}:mqtt-held")
                    await self._drain(client)
                    watcher.cancel()
                    if calm is not None:
                        calm.cancel()
            except* aiomqtt.MqttError as errors:
                raise errors.exceptions[0] from None
            # Closing: say so (retained) before the clean disconnect, which sends no will.
            await self._publish(client, self.topics.status_publication(online=False))

    async def _held(self) -> None:
        """While a takeover is seen: a connection that stays up :data:`TAKEOVER_WINDOW_S` ends it."""
        await asyncio.sleep(TAKEOVER_WINDOW_S)
        self._cuts.clear()
        self.stats.takeover = False
        log.info("[%s] the MQTT broker %s kept this client connected for %g s: no other client takes "
                 "the id %s any more", self.node_id, self.broker.shown, TAKEOVER_WINDOW_S,
                 self.client_id)  # fmt: skip
        self.on_change()

    def _announce(self) -> None:
        # First in the outbox, in their order; one whose topic already has a message waiting
        # is left out (that one is as new or newer).
        for pub in reversed(list(self.announce())):
            self.outbox.put_back(pub)

    async def _watch(self, client: aiomqtt.Client) -> None:
        """Ends with MqttError when the connection drops; meanwhile answers Home Assistant's
        birth message with the discovery configs."""
        async for message in client.messages:
            if str(message.topic) == HA_STATUS_TOPIC and message.payload == b"online":
                self._announce()

    async def _drain(self, client: aiomqtt.Client) -> None:
        outbox = self.outbox
        while True:
            pub = outbox.take()
            if pub is None:
                if self._closing.is_set():
                    return
                await outbox.wait()
                continue
            try:
                await self._publish(client, pub)
            except (aiomqtt.MqttError, asyncio.CancelledError):
                # Cancelled too: the watcher saw the connection drop while a QoS 1 publish
                # waited for its PUBACK; that message goes again after the reconnect (or is
                # counted as unsent at the stop), never lost without a count.
                outbox.put_back(pub)
                raise

    async def _publish(self, client: aiomqtt.Client, pub: Publication) -> None:
        await client.publish(pub.topic, pub.payload, qos=pub.qos, retain=pub.retain, timeout=self.timeout_s)
        self.stats.published[pub.kind] += 1
        self.on_change()  # the gauges: published, outbox

    # -- closing ------------------------------------------------------------------------------

    async def close(self, task: asyncio.Task[None], flush_s: float) -> None:
        """Stop the loop running in ``task``: flush the outbox for up to ``flush_s`` (connected,
        or after one more attempt to connect), publish ``offline``, disconnect; then cancel
        whatever is left. What is still in the outbox then was not delivered."""
        self._closing.set()
        self.outbox.wake()
        try:
            async with asyncio.timeout(flush_s):
                await asyncio.shield(task)
        except TimeoutError:
            task.cancel()
        except asyncio.CancelledError:
            if not task.cancelled():
                raise
