"""A decode thread's way out to the event loop: its frames, its state changes and its end.

Whatever produces a source's frames in its decode thread (the reconnecting decoder of
:mod:`edgepipe.media.sources.reconnect`, the synthetic scene of :mod:`edgepipe.media.sources.synthetic`) runs
inside :meth:`Outlet.run` and talks to the loop only through the outlet: states and frames go
through the :class:`~edgepipe.media.sources.handoff.Handoff`, counters into the
:class:`~edgepipe.media.status.SourceStatus`, and how the thread ended (the input's end, or an
error) becomes the source's end or error on the loop's side.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator

from edgepipe.media.errors import SourceError
from edgepipe.media.frame import Frame, FramePool
from edgepipe.media.sources.handoff import Handoff
from edgepipe.media.status import SourceStatus
from edgepipe.planning.memory import MemoryBudgetError
from edgepipe.wire.redact import redact_url

log = logging.getLogger(__name__)


class Outlet:
    """One run of a source's decode thread. Used from that thread; ``stop`` is set from the loop."""

    def __init__(
        self, url: str, status: SourceStatus, pool: FramePool, handoff: Handoff, stop: threading.Event
    ) -> None:
        self.url = url
        self.status = status
        self.pool = pool
        """The source's frames: a frame's slot is taken before it is posted."""
        self._handoff = handoff
        self._stop = stop
        self.opening = False
        """True while the thread is in an open (bounded by ``timeout_s``, not interruptible):
        a stop does not wait for it (see :meth:`opening_input`)."""

    @contextlib.contextmanager
    def opening_input(self) -> Iterator[None]:
        """Mark an open of the input: ``with outlet.opening_input(): chooser.open()``."""
        self.opening = True
        try:
            yield
        finally:
            self.opening = False

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def wait(self, seconds: float) -> bool:
        """Sleep unless stopped; True if stopped."""
        return self._stop.wait(seconds)

    def set_state(self, state: str, reason: str = "") -> None:
        """Enter ``state`` (see :meth:`SourceStatus.set_state`) and tell the loop, which logs it
        and sends the ``source_state`` message."""
        if self.status.set_state(state, reason):
            self._handoff.post("state", (state, reason))

    def post(self, frame: Frame) -> bool:
        """Hand ``frame`` to the loop; False once the loop is gone (the frame is released then)."""
        if self._handoff.post("frame", frame):
            return True
        frame.release()
        self.status.unsent += 1
        return False

    def run(self, produce: Callable[[], None]) -> None:
        """The decode thread's body: ``produce()``, then the source's end. What it raises ends
        the source with a :class:`SourceError` naming the URL (a refused frame pool is not
        retryable; an unexpected error, logged with its traceback, is). Never raises."""
        try:
            produce()
        except SourceError as exc:
            self._handoff.post("error", exc)
            return
        except MemoryBudgetError as exc:
            self._handoff.post("error", SourceError(str(exc), url=self.url, retryable=False))
            return
        except Exception as exc:  # a bug or an FFmpeg surprise: name the source, keep the cause
            log.exception("%s: decode thread failed", redact_url(self.url))
            self._handoff.post(
                "error", SourceError(f"decode thread failed: {exc!r}", url=self.url, retryable=True)
            )
            return
        self._handoff.post("end", None)
