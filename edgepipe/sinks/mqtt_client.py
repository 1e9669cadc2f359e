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

:meth:`Connection.close` (the sink's ``stop()``) publishes what the outbox holds for up to
``flush_s``, then ``offline`` (retained), and disconnects cleanly (so the broker does not send
the will on top).
"""

from __future__ import annotations

import asyncio
import logging
import random
import ssl
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import aiomqtt

from edgepipe.sinks.mqtt_config import BrokerConfig
from edgepipe.sinks.mqtt_outbox import Outbox
from edgepipe.sinks.mqtt_topics import Publication, Topics

log = logging.getLogger(__name__)

HA_STATUS_TOPIC = "homeassistant/status"
"""Home Assistant's birth message (``online`` when it starts): discovery is sent again then."""


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
        self.on_change = on_change
        self.stats = ConnectionStats()
        self.tls_context: ssl.SSLContext | None = None
        """Set by the sink's start (loading CA certificates reads files: off the loop)."""
        self.listen_ha = False
        """Subscribe to Home Assistant's birth topic and announce again when it says ``online``."""
        self._closing = asyncio.Event()
        self._warned = False
        self._t_connected: float | None = None

    # -- the loop -----------------------------------------------------------------------------

    async def run(self) -> None:
        """Connect, publish, reconnect, until :meth:`close`. Never raises but CancelledError: an
        unexpected error is logged, counted (``stats.errors``) and treated as a lost connection."""
        delay = self.backoff_initial_s
        while not self._closing.is_set():
            self._t_connected = None
            try:
                await self._session()
            except aiomqtt.MqttError as exc:
                self._failed(exc)
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
                return
            if self._t_connected is not None and time.monotonic() - self._t_connected > 5.0:
                delay = self.backoff_initial_s  # it was up a while: a new outage, not a flapping broker
            try:
                async with asyncio.timeout(delay * random.uniform(0.8, 1.2)):
                    await self._closing.wait()
            except TimeoutError:
                pass
            delay = min(delay * 2, self.backoff_max_s)

    def _failed(self, exc: BaseException) -> None:
        was_connected = self.stats.connected
        self.stats.failures += 1
        self.stats.last_error = str(exc) or type(exc).__name__
        if was_connected:
            log.warning("[%s] lost the MQTT broker %s (%s); reconnecting, results wait in the outbox "
                        "(at most %d)", self.node_id, self.broker.shown, self.stats.last_error,
                        self.outbox.size)  # fmt: skip
        elif not self._warned:
            log.warning("[%s] cannot reach the MQTT broker %s (%s); retrying (every %g s at most), results "
                        "wait in the outbox (at most %d)", self.node_id, self.broker.shown,
                        self.stats.last_error, self.backoff_max_s, self.outbox.size)  # fmt: skip
        else:
            log.debug("[%s] MQTT broker %s: %s", self.node_id, self.broker.shown, self.stats.last_error)
        self._warned = True
        self.on_change()

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
            log.info("[%s] connected to the MQTT broker %s as %s%s", self.node_id, self.broker.shown,
                     self.client_id, again)  # fmt: skip
            self.on_change()
            await self._publish(client, self.topics.status_publication(online=True))
            self._announce()
            if self.listen_ha:
                await client.subscribe(HA_STATUS_TOPIC, qos=1, timeout=self.timeout_s)
            try:
                async with asyncio.TaskGroup() as group:
                    watcher = group.create_task(self._watch(client), name=f"{self.node_id}:mqtt-watch")
                    await self._drain(client)
                    watcher.cancel()
            except* aiomqtt.MqttError as errors:
                raise errors.exceptions[0] from None
            # Closing: say so (retained) before the clean disconnect, which sends no will.
            await self._publish(client, self.topics.status_publication(online=False))

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
        """Stop the loop running in ``task``: flush the outbox for up to ``flush_s`` (when
        connected), publish ``offline``, disconnect; then cancel whatever is left."""
        self._closing.set()
        self.outbox.wake()
        if not self.stats.connected:
            task.cancel()
        try:
            async with asyncio.timeout(flush_s):
                await asyncio.shield(task)
        except TimeoutError:
            log.info("[%s] %d result(s) not sent to the MQTT broker before the stop", self.node_id,
                     len(self.outbox))  # fmt: skip
            task.cancel()
        except asyncio.CancelledError:
            if not task.cancelled():
                raise
