"""One request's tokens -> text pieces: whole characters only, stop strings cut out.

:class:`PieceStream` keeps the tokenizer's per-request decoder and the text that could still be
the start of a stop string; :meth:`PieceStream.push` takes one token and returns the text that
is safe to show (``""`` when none yet), :meth:`PieceStream.finish` the rest. Once a stop string
appears, ``stopped`` is set and the text before it is the last piece.
"""

from __future__ import annotations

from collections.abc import Sequence

from edgepipe.lm.tokenizer import TextStream


class PieceStream:
    """Text pieces of one request's output."""

    def __init__(self, stream: TextStream, stop_strings: Sequence[str], ends: frozenset[int]) -> None:
        self._stream = stream
        self._stops = tuple(stop_strings)
        self._ends = ends
        self._longest = max((len(s) for s in self._stops), default=0)
        self._pending = ""
        self.stopped = False
        """A stop string appeared: nothing after it is text of the request."""

    def _cut(self) -> int:
        return min((self._pending.find(s) for s in self._stops if s in self._pending), default=-1)

    def push(self, token: int) -> str:
        """The text now safe to show after ``token`` (``""`` for none, and after a stop)."""
        if self.stopped or token in self._ends:
            return ""  # an end token has no text; the request ends with its reason
        self._pending += self._stream.push(token)
        if not self._longest:
            piece, self._pending = self._pending, ""
            return piece
        hit = self._cut()
        if hit >= 0:
            self.stopped = True
            piece, self._pending = self._pending[:hit], ""
            return piece
        # Hold back what could still be the start of a stop string.
        safe = len(self._pending) - (self._longest - 1)
        if safe <= 0:
            return ""
        piece, self._pending = self._pending[:safe], self._pending[safe:]
        return piece

    def finish(self) -> str:
        """What the stream held to the end (cut at a stop string found in it)."""
        if self.stopped:
            return ""
        self._pending += self._stream.flush()
        hit = self._cut()
        if hit >= 0:
            self.stopped = True
            self._pending = self._pending[:hit]
        piece, self._pending = self._pending, ""
        return piece
