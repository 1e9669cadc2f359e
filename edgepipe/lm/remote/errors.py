"""What can go wrong with a remote engine, sorted by what to do about it.

::

    LMError
    └── EngineError                 a request to the engine failed          (url, cause)
        ├── EngineUnavailable       down, loading, overloaded, too slow: the circuit opens,
        │                           and it is tried again after a backoff (retry_after_s)
        ├── EngineConfigError       401/403/404, not an OpenAI-compatible API: said once,
        │                           never retried (a wrong key does not fix itself)
        └── EngineRequestError      this request only (400: past the context): no circuit

``cause`` is a short stable word for counting and for logging once per cause: ``refused``,
``timeout``, ``first_token``, ``loading``, ``http_429``, ``http_503``, ``cut_off``,
``stream_error``, ``unauthorized``, ``not_found``, ``not_an_api``, ``context``, ``bad_request``.
"""

from __future__ import annotations

from edgepipe.lm.errors import LMError
from edgepipe.wire.redact import redact_url


class EngineError(LMError):
    """A request to a remote engine failed; ``url`` (redacted) names the engine."""

    cause = "error"

    def __init__(self, message: str, *, url: str, cause: str | None = None) -> None:
        self.url = redact_url(url)
        self.model = self.url
        if cause is not None:
            self.cause = cause
        Exception.__init__(self, message)  # the message names the engine already


class EngineUnavailable(EngineError):
    """The engine cannot serve now: the circuit opens for a backoff (at least
    ``retry_after_s`` when the server said so)."""

    def __init__(self, message: str, *, url: str, cause: str, retry_after_s: float | None = None) -> None:
        self.retry_after_s = retry_after_s
        super().__init__(message, url=url, cause=cause)


class RequestCancelled(EngineError):
    """The request was ended on purpose (:meth:`~edgepipe.lm.remote.client.OpenAIClient.abort`):
    no word on the engine."""

    cause = "cancelled"


class EngineConfigError(EngineError):
    """The engine refuses this configuration (key, model name, URL): retrying cannot help."""

    retryable = False


class EngineRequestError(EngineError):
    """The engine refused this one request (its prompt): the next may pass."""

    retryable = False


__all__ = ["EngineConfigError", "EngineError", "EngineRequestError", "EngineUnavailable", "RequestCancelled"]
