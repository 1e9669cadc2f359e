"""What a pipeline function's docstring says about it: the summary and, from a Google-style
``Args:`` section, one help text per parameter::

    def pipeline(source: str = SYNTHETIC_DEFAULT, every: int = 3) -> Pipeline:
        \"\"\"camera -> faces -> viewers.

        Args:
            source: the camera: a URL, a file, /dev/video0 or synthetic://WxH@FPS.
            every: run the model on one frame in this many; a tracker carries the
                boxes between.
        \"\"\"

``edgepipe run FILE --help`` shows them next to each parameter's flag, type and default.
"""

from __future__ import annotations

import inspect
import re

SECTION_NAMES = ("Args:", "Arguments:")
"""Headers of the section read (Google style); other sections (``Returns:``) end it."""

_ENTRY = re.compile(r"\*{0,2}(?P<name>\w+)(?:\s*\([^)]*\))?\s*:(?P<text>.*)")
"""``name: text``, also ``name (int): text`` (the type in brackets is dropped)."""


def summary(doc: str | None) -> str:
    """The first paragraph, on one line (``""`` when there is no docstring)."""
    lines = inspect.cleandoc(doc or "").splitlines()
    first: list[str] = []
    for line in lines:
        if not line.strip() or line.strip() in SECTION_NAMES:
            break
        first.append(line.strip())
    return " ".join(first)


def args_section(doc: str | None) -> dict[str, str]:
    """``{name: help text}`` from the ``Args:`` section, continuation lines joined with spaces.

    An entry is a line ``name: text`` indented under the header; a line indented deeper
    continues the entry above it; the section ends at the first line not indented under the
    header. Lines that fit none of this are ignored, never an error: a docstring is prose.
    """
    lines = inspect.cleandoc(doc or "").splitlines()
    found: dict[str, str] = {}
    header_indent: int | None = None
    entry_indent: int | None = None
    name: str | None = None
    for line in lines:
        text = line.strip()
        indent = len(line) - len(line.lstrip())
        if header_indent is None:
            if text in SECTION_NAMES:
                header_indent = indent
            continue
        if not text:
            continue
        if indent <= header_indent:
            break
        if entry_indent is None:
            entry_indent = indent
        match = _ENTRY.fullmatch(text)
        if indent <= entry_indent and match:
            name = match["name"]
            found[name] = match["text"].strip()
        elif indent > entry_indent and name is not None:
            found[name] = f"{found[name]} {text}".strip()
    return found
