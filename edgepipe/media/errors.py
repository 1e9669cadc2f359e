"""Errors of the media layer, under :class:`~edgepipe.core.errors.EdgepipeError`.

::

    EdgepipeError
    └── SourceError             a video input cannot be used                          (url)
        └── DecoderError        no decoder here can decode the stream  (url, codec, decoder)

``retryable`` says whether trying again can help: a camera that is not up yet can come up; a
missing file, a file that is not video or a codec with no decoder will not change, so a source's
``restart`` policy stops at once for those.
"""

from __future__ import annotations

from edgepipe.core.errors import EdgepipeError
from edgepipe.wire.redact import redact_text


class SourceError(EdgepipeError):
    """A video source failed. The message starts with the URL or path."""

    def __init__(self, message: str, *, url: str, retryable: bool = False) -> None:
        self.url = url
        self.retryable = retryable
        # The message is shown (logs, results, the exit line): a password in the URL is not.
        super().__init__(redact_text(f"{url}: {message}"))


class DecoderError(SourceError):
    """The stream's codec cannot be decoded with what this machine has."""

    def __init__(self, message: str, *, url: str, codec: str, decoder: str | None = None) -> None:
        self.codec = codec
        self.decoder = decoder
        super().__init__(message, url=url, retryable=False)
