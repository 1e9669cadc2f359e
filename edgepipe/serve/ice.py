"""ICE settings from the environment: no STUN unless configured, and which host addresses to use.

aiortc asks a public STUN server (Google's) when it is given no ICE server list, and aioice
never gathers 127.0.0.1. edgepipe passes an explicit list (:func:`ice_servers`, empty unless
``EDGEPIPE_ICE_SERVERS`` names some) and honours ``EDGEPIPE_ICE_HOSTS`` (a comma list of the
host addresses ICE may gather, e.g. ``127.0.0.1`` in tests) through
:func:`restrict_host_addresses`.

aioice has no option for the host addresses: ``Connection.gather_candidates`` calls the module
function ``aioice.ice.get_host_addresses``. :func:`restrict_host_addresses` replaces that
function by one that returns ``EDGEPIPE_ICE_HOSTS`` when it is set (read at each gathering) and
aioice's own answer otherwise.

This one stays per process, not per run: aioice calls a module function, from its own tasks,
with nothing that says which peer (or run) gathers, so no run can own it; and what it follows,
the environment, is the process's anyway. It affects every aiortc peer of the process, which is
what tests want: their client peers must gather 127.0.0.1 too. The replacement is marked, so
that the patch is made once however often it is asked for (each server, each script), and made
again if someone put aioice's own function back (a test's ``monkeypatch``): it always wraps
aioice's own, never a copy of itself.
"""

from __future__ import annotations

import functools
import ipaddress
import os
import threading
from collections.abc import Callable
from typing import Any

import aioice.ice
from aiortc import RTCConfiguration, RTCIceServer

ICE_SERVERS_ENV = "EDGEPIPE_ICE_SERVERS"
ICE_HOSTS_ENV = "EDGEPIPE_ICE_HOSTS"
_SCHEMES = ("stun:", "stuns:", "turn:", "turns:")

_RESTRICTED = "_edgepipe_ice_hosts"
"""Set on the replacement of ``aioice.ice.get_host_addresses``: the patch is in place."""
_lock = threading.Lock()


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


def configuration() -> RTCConfiguration:
    """An ``RTCConfiguration`` with the configured ICE servers (an explicit list, so aiortc adds
    no STUN server of its own)."""
    return RTCConfiguration(iceServers=ice_servers())


def restricted() -> bool:
    """Whether aioice's host addresses go through :func:`restrict_host_addresses`' function now."""
    current: Any = aioice.ice.get_host_addresses
    return bool(getattr(current, _RESTRICTED, False))


def restrict_host_addresses() -> None:
    """Make aioice gather only ``EDGEPIPE_ICE_HOSTS`` when it is set, for the whole process
    (idempotent; see the module docstring for why it is not per run)."""
    with _lock:
        if restricted():
            return
        own: Callable[[bool, bool], list[str]] = aioice.ice.get_host_addresses

        @functools.wraps(own)
        def get_host_addresses(use_ipv4: bool, use_ipv6: bool) -> list[str]:
            hosts = ice_hosts()
            if hosts is None:
                return own(use_ipv4, use_ipv6)
            return [h for h in hosts if (use_ipv4 if ipaddress.ip_address(h).version == 4 else use_ipv6)]

        setattr(get_host_addresses, _RESTRICTED, True)
        aioice.ice.get_host_addresses = get_host_addresses
