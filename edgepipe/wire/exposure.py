"""Who may reach a listening socket: the loopback test and the token's environment variable,
shared by the HTTP server (:mod:`edgepipe.serve.config`) and the TCP stream
(:mod:`edgepipe.sinks.streams.tcp`). Anything bound off loopback needs a token."""

from __future__ import annotations

import ipaddress

DEFAULT_HOST = "127.0.0.1"
TOKEN_ENV = "EDGEPIPE_TOKEN"


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only (``127.0.0.1``, ``::1``, ``localhost``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name that may resolve anywhere: treat it as exposed
