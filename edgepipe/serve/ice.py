"""ICE settings: no STUN unless configured, and which host addresses to use.

aiortc asks a public STUN server (Google's) when it is given no ICE server list, and aioice
never gathers 127.0.0.1. edgepipe passes an explicit list (:func:`ice_servers`, empty unless
``EDGEPIPE_ICE_SERVERS`` names some) and chooses the host addresses ICE gathers, in this order:

1. ``EDGEPIPE_ICE_HOSTS``, when set (a comma list of IP addresses, e.g. ``127.0.0.1`` in tests):
   the operator's choice wins;
2. for the peers a server bound to loopback answers (:func:`serving_on`, around the answer):
   that loopback address only (``localhost``: ``127.0.0.1`` and ``::1``). Such a server is
   reachable from this machine only, so its media must stay there too: aioice would otherwise
   offer every other interface (a LAN or ``fd00::`` address) and ICE may pick one of them;
3. otherwise (a server on ``0.0.0.0``, ``::`` or any other address, a client peer): aioice's own
   answer, every interface but loopback.

aioice has no option for the host addresses: ``Connection.gather_candidates`` calls the module
function ``aioice.ice.get_host_addresses``. :func:`restrict_host_addresses` replaces that
function by one that follows the rules above, read at each gathering: the environment, and the
scope :func:`serving_on` sets in the task that answers (a context variable, which the tasks
aiortc starts to gather inherit).

The replacement stays per process, not per run: aioice calls a module function, from its own
tasks, with nothing that says which peer (or run) gathers, so no run can own it; what tells one
server's peers from another's is the scope of the answer, not the patch. ``EDGEPIPE_ICE_HOSTS``
affects every aiortc peer of the process, which is what tests want: their client peers must
gather 127.0.0.1 too. The replacement is marked, so
that the patch is made once however often it is asked for (each server, each script), and made
again if someone put aioice's own function back (a test's ``monkeypatch``): it always wraps
aioice's own, never a copy of itself.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import ipaddress
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

import aioice.ice
from aiortc import RTCConfiguration, RTCIceServer

from edgepipe.wire.exposure import is_loopback

ICE_SERVERS_ENV = "EDGEPIPE_ICE_SERVERS"
ICE_HOSTS_ENV = "EDGEPIPE_ICE_HOSTS"
_SCHEMES = ("stun:", "stuns:", "turn:", "turns:")

_RESTRICTED = "_edgepipe_ice_hosts"
"""Set on the replacement of ``aioice.ice.get_host_addresses``: the patch is in place."""
_lock = threading.Lock()
_serving: contextvars.ContextVar[tuple[str, ...] | None] = contextvars.ContextVar(
    "edgepipe_ice_serving", default=None
)
"""The host addresses of the server answering in this task (:func:`serving_on`); None: no rule."""


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def ice_servers() -> list[RTCIceServer]:
    """``EDGEPIPE_ICE_SERVERS`` as aiortc servers: a comma list of ``stun:``/``turn:`` URLs,
    none when unset. Raises ``ValueError`` naming the variable for any other URL."""
    urls = _split(os.environ.get(ICE_SERVERS_ENV, ""))
    for url in urls:
        if not url.startswith(_SCHEMES):
            raise ValueError(f"{ICE_SERVERS_ENV}: {url!r} is not a stun:, stuns:, turn: or turns: URL")
    return [RTCIceServer(urls=url) for url in urls]


def ice_hosts() -> list[str] | None:
    """``EDGEPIPE_ICE_HOSTS`` as a list of IP addresses, None when unset. Raises ``ValueError``
    naming the variable for anything but IP addresses."""
    value = os.environ.get(ICE_HOSTS_ENV)
    if value is None or not value.strip():
        return None
    hosts = _split(value)
    for host in hosts:
        try:
            ipaddress.ip_address(host)
        except ValueError as exc:
            raise ValueError(f"{ICE_HOSTS_ENV}: {host!r} is not an IP address") from exc
    return hosts


def loopback_hosts(host: str) -> tuple[str, ...] | None:
    """The host addresses ICE gathers for a server bound to ``host``: that loopback address
    (``localhost``: ``127.0.0.1`` and ``::1``), or None (every interface) when ``host`` is not
    loopback (``0.0.0.0``, ``::``, a LAN address, a name)."""
    if not is_loopback(host):
        return None
    if host == "localhost":
        return ("127.0.0.1", "::1")
    return (str(ipaddress.ip_address(host)),)


@contextlib.contextmanager
def serving_on(host: str) -> Iterator[None]:
    """Within the block (the answer to one offer), ICE gathers as a server bound to ``host``
    must: :func:`loopback_hosts`, unless ``EDGEPIPE_ICE_HOSTS`` is set (see the module
    docstring). Makes the patch (:func:`restrict_host_addresses`) if it is not in place."""
    restrict_host_addresses()
    token = _serving.set(loopback_hosts(host))
    try:
        yield
    finally:
        _serving.reset(token)


def host_addresses(own: Callable[[bool, bool], list[str]], use_ipv4: bool, use_ipv6: bool) -> list[str]:
    """The host addresses to gather now (see the module docstring); ``own``: aioice's function."""
    hosts = ice_hosts()
    if hosts is None:
        scoped = _serving.get()
        if scoped is None:
            return own(use_ipv4, use_ipv6)
        hosts = list(scoped)
    return [h for h in hosts if (use_ipv4 if ipaddress.ip_address(h).version == 4 else use_ipv6)]


def configuration() -> RTCConfiguration:
    """An ``RTCConfiguration`` with the configured ICE servers (an explicit list, so aiortc adds
    no STUN server of its own)."""
    return RTCConfiguration(iceServers=ice_servers())


def restricted() -> bool:
    """Whether aioice's host addresses go through :func:`restrict_host_addresses`' function now."""
    current: Any = aioice.ice.get_host_addresses
    return bool(getattr(current, _RESTRICTED, False))


def restrict_host_addresses() -> None:
    """Make aioice gather the host addresses of the module docstring's rules, for the whole
    process (idempotent; see the module docstring for why it is not per run)."""
    with _lock:
        if restricted():
            return
        own: Callable[[bool, bool], list[str]] = aioice.ice.get_host_addresses

        @functools.wraps(own)
        def get_host_addresses(use_ipv4: bool, use_ipv6: bool) -> list[str]:
            return host_addresses(own, use_ipv4, use_ipv6)

        setattr(get_host_addresses, _RESTRICTED, True)
        aioice.ice.get_host_addresses = get_host_addresses
