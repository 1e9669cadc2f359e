"""Constraints on a pipeline's parameters, declared with ``typing.Annotated``::

    def pipeline(
        input_size: Annotated[int, Range(32, 4096)] = 640,
        threshold: Annotated[float, Range(0, 1)] = 0.35,
        output: Annotated[str, WritableFile()] = "out.mp4",
        clips: Annotated[str, WritableFolder()] = "",
    ) -> Pipeline: ...

The loader (:mod:`edgepipe.pipefile.loader`) checks every value, given or default, before
``pipeline()`` is called: a value that breaks one is refused (exit 2) naming the parameter and
what it allows. The checks themselves live with the other checks at the door, in
:mod:`edgepipe.core.checks` (:class:`~edgepipe.core.checks.Range`,
:func:`~edgepipe.core.checks.check_writable_file`,
:func:`~edgepipe.core.checks.check_writable_folder`), where library code that takes the same
values (a detector's ``input_size``, a recorder's folder) reaches them too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from edgepipe.core.checks import check_writable_file, check_writable_folder


class Constraint(Protocol):
    """What the loader asks of an ``Annotated`` extra: check one converted value."""

    def check(self, value: Any) -> None:
        """Raise ``ValueError`` saying what is allowed when ``value`` is not."""
        ...


@dataclass(frozen=True, slots=True)
class WritableFile:
    """A path where a file can be written: its folder exists and a file there can be opened for
    writing (proven by opening it: ``os.access`` says yes for ``/proc`` as root). ``""`` and
    ``None`` pass unchecked: by convention they mean "write nothing". Nothing is left behind:
    a file the check created is removed at once (the sink creates it again when it starts), and
    an existing one is opened for appending, never truncated."""

    def describe(self) -> str:
        return "a writable file path, '' for none"

    def check(self, value: Any) -> None:
        if value is None or value == "":
            return
        check_writable_file(value)


@dataclass(frozen=True, slots=True)
class WritableFolder:
    """A folder files can be written in: one that exists (proven by creating a file in it), or
    one that can be created in a folder that exists (proven by creating it). Only the folder
    itself may be new: its parents are never created (a typo would make a tree of them).
    ``""`` and ``None`` pass unchecked ("write nothing"). Nothing is left behind: what the
    check created is removed at once (the sink creates the folder again when it starts)."""

    def describe(self) -> str:
        return "a writable folder, '' for none"

    def check(self, value: Any) -> None:
        if value is None or value == "":
            return
        check_writable_folder(value)
