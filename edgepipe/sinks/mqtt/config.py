"""Where an MQTT sink connects, and as whom: the broker URL, credentials, and the names in topics.

A broker is named by a URL::

    mqtt://127.0.0.1                      port 1883, no TLS
    mqtt://user:secret@broker.lan:1884    user and password in the URL (percent-encoded)
    mqtts://broker.example.com            TLS, port 8883, the system's CA certificates
    mqtts://broker.lan?ca=/etc/ssl/site-ca.pem   TLS with the site's own CA

Without user info in the URL, ``EDGEPIPE_MQTT_USERNAME`` and ``EDGEPIPE_MQTT_PASSWORD`` are
used (a password kept out of the command line and the process list). Anything else is refused
at declaration with a :class:`MqttConfigError` (a ``ValueError``) naming the URL with its
password masked, so ``edgepipe run`` exits 2 before a camera is opened.

Names that become topic levels (the device, the pipeline, a source) are checked or made safe
here: :func:`topic_level` for levels, :func:`ha_id` for Home Assistant's stricter ids.

:class:`MqttConfig` is a sink's settings, each checked when it is made: ``MqttSink(url, ...)``
builds one from its keywords (:func:`~edgepipe.core.configured.configured`), so a broker, a name
or a setting that cannot work is refused at declaration, before anything runs.
"""

from __future__ import annotations

import os
import re
import socket
import types
from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Literal
from urllib.parse import parse_qsl, unquote, urlsplit

from edgepipe.wire.redact import redact_url

DEFAULT_PORTS = {"mqtt": 1883, "mqtts": 8883}
DEVICE_ENV = "EDGEPIPE_DEVICE"
USERNAME_ENV = "EDGEPIPE_MQTT_USERNAME"
PASSWORD_ENV = "EDGEPIPE_MQTT_PASSWORD"
_QUERY_KEYS = ("ca",)
_LEVEL_SAFE = re.compile(r"[^A-Za-z0-9_.-]")
_HA_SAFE = re.compile(r"[^A-Za-z0-9_-]")

PayloadFormat = Literal["json", "msgpack"]


class MqttConfigError(ValueError):
    """A broker URL or a topic name that cannot work; the message names it (password masked)."""


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """One broker to connect to, from :func:`parse_broker_url`."""

    host: str
    """Host name or IP address."""
    port: int
    """TCP port: 1883 for ``mqtt://``, 8883 for ``mqtts://`` unless the URL says."""
    tls: bool
    """``mqtts://``: TLS, the broker's certificate checked against ``ca_file`` or the system's CAs."""
    username: str | None = None
    password: str | None = None
    ca_file: str | None = None
    """``?ca=PATH``: a PEM file of the CA that signed the broker's certificate."""

    @property
    def shown(self) -> str:
        """The URL as logs and errors show it: no password, ever."""
        scheme = "mqtts" if self.tls else "mqtt"
        user = f"{self.username}:***@" if self.username and self.password else (
            f"{self.username}@" if self.username else "")  # fmt: skip
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{scheme}://{user}{host}:{self.port}"

    def __repr__(self) -> str:  # a config printed in a traceback shows no password
        return f"BrokerConfig({self.shown!r})"


def parse_broker_url(url: str, env: Mapping[str, str] | None = None) -> BrokerConfig:
    """The broker ``url`` names (see the module docstring). Raises :class:`MqttConfigError`."""
    env = os.environ if env is None else env
    shown = redact_url(url)
    if not isinstance(url, str) or not url.strip():
        raise MqttConfigError(
            "the MQTT broker URL is empty; expected mqtt://HOST[:PORT] or mqtts://HOST[:PORT]"
        )
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise MqttConfigError(f"MQTT broker URL {shown}: {exc}; expected mqtt://HOST[:PORT]") from None
    scheme = parts.scheme.lower()
    if "://" not in url:  # HOST:PORT parses as a scheme and a path, or as a path alone
        raise MqttConfigError(
            f"MQTT broker URL {shown} has no scheme, and it must be mqtt:// or mqtts://: "
            f"write mqtt://{shown.strip()} (or mqtts://{shown.strip()} for TLS)"
        )
    if scheme not in DEFAULT_PORTS:
        hint = " (write mqtts:// for TLS)" if scheme in ("ssl", "tls", "mqtt+ssl") else ""
        raise MqttConfigError(
            f"MQTT broker URL {shown}: the scheme must be mqtt:// or mqtts://, "
            f"not {parts.scheme or 'none'!r}{hint}"
        )
    if not parts.hostname:
        raise MqttConfigError(f"MQTT broker URL {shown} names no host; expected {scheme}://HOST[:PORT]")
    if port == 0:
        raise MqttConfigError(f"MQTT broker URL {shown}: port 0 is no port; give 1-65535 or leave it out")
    if parts.path not in ("", "/") or parts.fragment:
        raise MqttConfigError(
            f"MQTT broker URL {shown}: a broker URL has no path; expected {scheme}://HOST[:PORT]"
        )
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    unknown = sorted(set(query) - set(_QUERY_KEYS))
    if unknown:
        raise MqttConfigError(
            f"MQTT broker URL {shown}: unknown option {unknown[0]!r}; the only option is ?ca=PATH"
        )
    ca_file = query.get("ca") or None
    if ca_file is not None:
        if scheme != "mqtts":
            raise MqttConfigError(f"MQTT broker URL {shown}: ?ca= is for TLS; write mqtts://")
        if not os.path.isfile(ca_file):
            raise MqttConfigError(f"MQTT broker URL {shown}: the CA file {ca_file} does not exist")
    # The URL's user info wins; the environment fills in what it leaves out.
    username = unquote(parts.username) if parts.username else (env.get(USERNAME_ENV) or None)
    password = unquote(parts.password) if parts.password is not None else None
    if password is None and username is not None:
        password = env.get(PASSWORD_ENV) or None
    return BrokerConfig(
        host=parts.hostname,
        port=port or DEFAULT_PORTS[scheme],
        tls=scheme == "mqtts",
        username=username,
        password=password,
        ca_file=ca_file,
    )


def topic_level(text: str) -> str:
    """``text`` made safe as one topic level: characters other than letters, digits, ``_``,
    ``.`` and ``-`` (``/``, the wildcards ``+`` and ``#``, spaces, ``$`` …) become ``_``."""
    return _LEVEL_SAFE.sub("_", text) or "_"


def checked_level(what: str, text: str) -> str:
    """``text`` if it is a safe topic level (see :func:`topic_level`); raises
    :class:`MqttConfigError` naming ``what`` otherwise: a name given on purpose is never
    silently changed."""
    if not isinstance(text, str) or not text or topic_level(text) != text:
        raise MqttConfigError(
            f"MQTT {what} {text!r} cannot be a topic level: use letters, digits, '_', '.' and '-' only"
        )
    return text


def checked_timing(keepalive_s: int, backoff_initial_s: float | None, backoff_max_s: float) -> float:
    """``backoff_initial_s``, or its default when ``None`` (0.5 s, at most ``backoff_max_s``);
    raises :class:`MqttConfigError` for a keepalive or a backoff that cannot work."""
    if backoff_initial_s is None:
        backoff_initial_s = min(0.5, backoff_max_s) if isinstance(backoff_max_s, int | float) else 0.5
    for what, seconds in (("backoff_initial_s", backoff_initial_s), ("backoff_max_s", backoff_max_s)):
        if not (isinstance(seconds, int | float) and 0 < seconds < float("inf")):
            raise MqttConfigError(f"MQTT {what} must be a number of seconds above 0, not {seconds!r}")
    if backoff_max_s < backoff_initial_s:
        raise MqttConfigError(f"MQTT backoff_max_s ({backoff_max_s}) is below backoff_initial_s")
    if not (isinstance(keepalive_s, int) and 5 <= keepalive_s <= 65535):
        raise MqttConfigError(f"MQTT keepalive_s must be an integer of 5-65535 seconds, not {keepalive_s!r}")
    return float(backoff_initial_s)


def default_device(env: Mapping[str, str] | None = None) -> str:
    """The device id of a sink given none: ``EDGEPIPE_DEVICE`` when set (checked, as a device
    given on purpose is), else this machine's host name as a topic level (its first label:
    ``cam1.lan`` -> ``cam1``). Two processes on one box need their own (one camera each)."""
    env = os.environ if env is None else env
    chosen = env.get(DEVICE_ENV, "")
    if chosen:
        return checked_level(f"device ({DEVICE_ENV})", chosen)
    name = socket.gethostname().split(".")[0]
    return topic_level(name) if name else "edgepipe"


def ha_id(*parts: str) -> str:
    """An id Home Assistant accepts in a discovery topic and as a ``unique_id``: the parts
    joined by ``_``, each character outside ``[A-Za-z0-9_-]`` replaced by ``_``."""
    return _HA_SAFE.sub("_", "_".join(parts))


def client_id(device: str, pipeline: str) -> str:
    """The MQTT client id of the pipeline ``pipeline`` on ``device``: one per process, so that
    processes with their own device (or pipeline) never take each other's session (a broker
    disconnects the older of two clients with one id). MQTT 3.1.1 brokers must accept 23
    characters; Mosquitto and EMQX accept far more, so the id is kept whole."""
    return f"edgepipe-{device}-{pipeline}"


def checked_payload(payload: str) -> None:
    """Raises :class:`MqttConfigError` for a payload format other than json and msgpack."""
    if payload not in ("json", "msgpack"):
        raise MqttConfigError(f"MQTT payload format must be 'json' or 'msgpack', not {payload!r}")


def checked_qos(qos: Mapping[str, int] | None) -> None:
    """Raises :class:`MqttConfigError` for a QoS, by kind, outside 0-2."""
    for kind, level in (qos or {}).items():
        if level not in (0, 1, 2):
            raise MqttConfigError(f"MQTT QoS of {kind!r} must be 0, 1 or 2, not {level!r}")


def checked_outbox_size(size: int) -> int:
    """``size`` if it is a whole number of at least 1; raises :class:`MqttConfigError` otherwise."""
    if not isinstance(size, int) or size < 1:
        raise MqttConfigError(f"the MQTT outbox size must be an integer of at least 1, not {size!r}")
    return size


@dataclass(frozen=True, slots=True)
class MqttConfig:
    """An MQTT sink's settings (see :mod:`edgepipe.sinks.mqtt.sink`). Raises
    :class:`MqttConfigError` (a ``ValueError``) naming what cannot work; the broker URL as errors
    and ``repr`` show it, password masked."""

    url: str = field(repr=False)
    """The broker (see the module docstring); :attr:`broker` is what it names."""
    device: str | None = None
    """This camera or box in the topics (None: :func:`default_device`, ``EDGEPIPE_DEVICE`` or the
    host name); the pipeline's name in them comes from the run."""
    _: KW_ONLY
    payload: PayloadFormat = "json"
    """``json`` or ``msgpack``."""
    qos: Mapping[str, int] | None = None
    """QoS by kind of message, over the defaults (:data:`~edgepipe.sinks.mqtt.topics.DEFAULT_POLICIES`)."""
    retain: Mapping[str, bool] | None = None
    """Retain flags by kind of message, over the defaults."""
    outbox_size: int = 1000
    """Messages held while the broker is away."""
    detections: bool = True
    """Publish every frame's detections (the ``count`` topic is published on changes either way)."""
    discovery: bool | None = None
    """Home Assistant discovery (None: with JSON payloads, which it reads; True with msgpack is
    refused)."""
    discovery_prefix: str = "homeassistant"
    """The first level of Home Assistant's discovery topics."""
    object_name: str = "object"
    """What the detector finds (``face``, ``person``), for entity names."""
    prefix: str = "edgepipe"
    """The first level of every topic of the sink."""
    keepalive_s: int = 30
    """MQTT keepalive: whole seconds, 5-65535."""
    backoff_initial_s: float | None = None
    """The wait after a failed connection attempt (None: 0.5 s, at most ``backoff_max_s``),
    doubled per failed attempt up to ``backoff_max_s``."""
    backoff_max_s: float = 30.0
    """The longest wait between connection attempts."""
    broker: BrokerConfig = field(init=False)
    """What :attr:`url` names, credentials from the environment where it has none."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "broker", parse_broker_url(self.url))
        if self.device is not None:
            checked_level("device", self.device)
        checked_level("topic prefix", self.prefix)
        if self.discovery and self.payload != "json":
            raise MqttConfigError("Home Assistant discovery needs JSON payloads (it cannot read msgpack)")
        checked_timing(self.keepalive_s, self.backoff_initial_s, self.backoff_max_s)
        checked_payload(self.payload)
        checked_qos(self.qos)
        checked_outbox_size(self.outbox_size)
        # Frozen all the way down: a table the caller keeps cannot change the sink's.
        for name in ("qos", "retain"):
            table = getattr(self, name)
            if table is not None:
                object.__setattr__(self, name, types.MappingProxyType(dict(table)))

    @property
    def discovers(self) -> bool:
        """Home Assistant discovery is on: :attr:`discovery`, or JSON payloads when it is not said."""
        return self.payload == "json" if self.discovery is None else self.discovery

    @property
    def first_backoff_s(self) -> float:
        """The wait after a first failed attempt: :attr:`backoff_initial_s` or its default."""
        return checked_timing(self.keepalive_s, self.backoff_initial_s, self.backoff_max_s)
