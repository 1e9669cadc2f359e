"""How the HTTP server is exposed: address, token, what is open without one.

::

    EdgepipeError
    ├── PipelineError
    │   └── ServeConfigError   the server cannot be exposed as asked (no token off loopback)
    └── ServeError             the server could not start (address in use)       (address)
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from edgepipe.core.errors import EdgepipeError, PipelineError
from edgepipe.wire.exposure import DEFAULT_HOST, TOKEN_ENV, is_loopback

__all__ = [
    "DEFAULT_HOST",
    "MAX_REQUEST_BYTES",
    "TOKEN_ENV",
    "ServeConfig",
    "ServeConfigError",
    "ServeError",
    "is_loopback",
]

MAX_REQUEST_BYTES = 256 * 1024
"""The largest request body accepted (an SDP offer is a few KiB); larger ones get 413."""


class ServeConfigError(PipelineError):
    """The server cannot be exposed as asked (exit code 2)."""


class ServeError(EdgepipeError):
    """The server could not start."""

    def __init__(self, message: str, *, address: str) -> None:
        self.address = address
        super().__init__(f"http://{address}: {message}")


@dataclass(frozen=True)
class ServeConfig:
    """Where the HTTP server listens and who may use it. Checked when made."""

    port: int
    """TCP port; 0 picks a free one (tests)."""
    host: str = DEFAULT_HOST
    """Address to bind. Anything but loopback requires ``token``."""
    token: str | None = None
    """Required on every route but ``/health`` (``Authorization: Bearer T`` or ``?token=T``)
    when ``host`` is not loopback; ignored on loopback."""
    metrics_open: bool = False
    """Serve ``/metrics`` without the token (a scraper on the network without credentials)."""
    stall_after_s: float = 4.0
    """``/health`` fails for a source that has produced nothing for this long. 4 s: with the
    progress sampled every 0.5 s and a snapshot up to 0.5 s old, a stall is answered 503 within
    5 s of its start."""

    def __post_init__(self) -> None:
        if not isinstance(self.port, int) or not 0 <= self.port <= 65535:
            raise ServeConfigError(f"--port must be 0..65535, got {self.port!r}")
        if not self.host:
            raise ServeConfigError("--host must not be empty (0.0.0.0 listens on every interface)")
        if not self.stall_after_s > 0:
            raise ServeConfigError(f"stall_after_s must be > 0, got {self.stall_after_s!r}")
        if self.token is not None and len(self.token) < 8:
            raise ServeConfigError("the token must be at least 8 characters")
        if self.needs_token and not self.token:
            raise ServeConfigError(
                f"serving on {self.host} (not loopback) needs a token: set ${TOKEN_ENV} "
                f"(or bind {DEFAULT_HOST} and put a proxy in front; WebRTC media then needs "
                "$EDGEPIPE_ICE_HOSTS=the address viewers reach this box at)"
            )

    @classmethod
    def from_env(cls, port: int, host: str = DEFAULT_HOST, *, metrics_open: bool = False) -> ServeConfig:
        """A config whose token comes from ``$EDGEPIPE_TOKEN``."""
        return cls(port=port, host=host, token=os.environ.get(TOKEN_ENV) or None, metrics_open=metrics_open)

    @property
    def needs_token(self) -> bool:
        return not is_loopback(self.host)
