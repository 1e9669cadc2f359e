"""Sentinel values shared across the runtime, each with a name that reads well in a repr."""

from __future__ import annotations

from typing import Final


class Marker:
    """A unique value that is not an item: compared by identity (``x is END``)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name}>"


END: Final = Marker("END")
"""The end of a stream handed between threads or tasks (where raising cannot cross)."""

EMPTY: Final = Marker("EMPTY")
"""Nothing is queued right now (``Inbox.get_nowait``)."""
