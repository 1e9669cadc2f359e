"""Server-sent events, read incrementally: what an OpenAI-compatible engine streams.

The WHATWG rules, as far as a chat-completions stream needs them: an event is the ``data:``
lines up to a blank line (several joined by ``\\n``); a line starting with ``:`` is a comment
(llama-server writes ``:`` as a ping while a long prompt is processed); ``event:`` names the
event (Anthropic-style streams; OpenAI's have none); one space after the colon is dropped;
lines end in ``\\n``, ``\\r\\n`` or ``\\r``. Bytes are decoded as UTF-8 per complete line, so a
multi-byte character split across two network reads is whole.

The parser keeps at most ``max_line`` bytes of a line it has not seen the end of: a server
that sends a megabyte without a newline is an error, not a growing buffer.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_LINE = 1 << 20
"""Bytes one line may hold: a chunk with a long text piece and its timings is well under."""


class SseError(ValueError):
    """The stream is not server-sent events (a line past ``max_line``, not UTF-8)."""


@dataclass(frozen=True, slots=True)
class SseEvent:
    data: str
    event: str = "message"


class SseParser:
    """Bytes in (:meth:`feed`), complete events out; comments counted in :attr:`pings`."""

    __slots__ = ("_buffer", "_data", "_event", "_skip_lf", "max_line", "pings")

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self.max_line = max_line
        self._buffer = bytearray()
        self._data: list[str] = []
        self._event = ""
        self._skip_lf = False
        """The previous chunk ended in ``\\r``: a ``\\n`` first in the next one ends nothing."""
        self.pings = 0
        """Comment lines seen (``:`` pings)."""

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """The events completed by ``chunk``. Raises :class:`SseError`."""
        if self._skip_lf and chunk[:1] == b"\n":
            chunk = chunk[1:]
        self._skip_lf = chunk[-1:] == b"\r"
        self._buffer += chunk
        events: list[SseEvent] = []
        buffer = self._buffer
        start = 0
        end = len(buffer)
        while start < end:
            cr = buffer.find(b"\r", start)
            lf = buffer.find(b"\n", start)
            if cr < 0 and lf < 0:
                break
            stop = lf if cr < 0 else cr if lf < 0 else min(cr, lf)
            line = bytes(buffer[start:stop])
            start = stop + 1
            if buffer[stop] == 13 and start < end and buffer[start] == 10:  # \r\n
                start += 1
            event = self._line(line)
            if event is not None:
                events.append(event)
        del buffer[:start]
        if len(buffer) > self.max_line:
            raise SseError(f"a line of more than {self.max_line} bytes without an end: not an event stream")
        return events

    def _line(self, raw: bytes) -> SseEvent | None:
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SseError(f"a line that is not UTF-8 ({exc.reason} at byte {exc.start})") from None
        if not line:  # the blank line that ends an event
            if not self._data:
                self._event = ""
                return None
            event = SseEvent("\n".join(self._data), self._event or "message")
            self._data.clear()
            self._event = ""
            return event
        if line[0] == ":":
            self.pings += 1
            return None
        name, colon, value = line.partition(":")
        if colon and value[:1] == " ":
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        return None  # id, retry and unknown fields: nothing a completion stream needs

    def close(self) -> bool:
        """The stream ended. An event whose blank line never came is discarded, as the
        standard says; returns whether there was one (a cut-off stream)."""
        partial = bool(self._buffer or self._data)
        self._buffer.clear()
        self._data.clear()
        self._event = ""
        return partial


__all__ = ["MAX_LINE", "SseError", "SseEvent", "SseParser"]
