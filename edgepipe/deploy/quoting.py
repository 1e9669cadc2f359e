"""File names written into the commands ``edgepipe doctor`` suggests, so that they run as shown.

A name on Linux is bytes; Python hands one that is not UTF-8 (GBK bytes from an old Windows
share) over as a ``str`` with surrogate escapes (PEP 383), which printed as is becomes ``����``
or an encoding error. Each function here gives back text that stands for the same bytes:

- :func:`shell_arg`: one shell word. A printable UTF-8 name is quoted as POSIX shells read it
  (``'it'"'"'s a $file.txt'``, by :func:`shlex.quote`); any other in bash's ``$'...'`` form, the
  bytes that are not printable ASCII written ``\\xHH`` (bash, zsh and ksh read it; GNU ``ls`` on
  a terminal shows such names in the same form, with octal escapes).
- :func:`python_literal`: a Python string literal (``"notes.txt"``), or for a name that is not
  UTF-8 a bytes literal (``b'\\xd6\\xd0.txt'``, which ``open`` takes on POSIX).
- :func:`shown`: the name for a line of text: itself when printable UTF-8, else :func:`shell_arg`.
"""

from __future__ import annotations

import os
import shlex

_PRINTABLE_ASCII = range(0x20, 0x7F)


def _utf8(name: str) -> str | None:
    """The name as printable UTF-8 text, or None (bytes that are not UTF-8, a control character)."""
    try:
        text = os.fsencode(name).decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text if text.isprintable() else None


def shell_arg(name: str) -> str:
    """``name`` as one shell word that reads back as its exact bytes (see the module docstring)."""
    text = _utf8(name)
    if text is not None:
        return shlex.quote(text)
    out = []
    for byte in os.fsencode(name):
        if byte in (0x27, 0x5C):  # ' and \ are escaped inside $'...'
            out.append("\\" + chr(byte))
        elif byte in _PRINTABLE_ASCII:
            out.append(chr(byte))
        else:
            out.append(f"\\x{byte:02x}")  # always two digits: a hex letter after it is not read into it
    return "$'" + "".join(out) + "'"


def python_literal(name: str) -> str:
    """``name`` as a Python literal for ``open(...)``: ``"notes.txt"``, or ``b'\\xd6\\xd0.txt'``
    when its bytes are not UTF-8."""
    raw = os.fsencode(name)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return repr(raw)
    if text.isprintable() and '"' not in text and "\\" not in text:
        return f'"{text}"'  # as the rest of the advice writes strings
    return repr(text)


def shown(name: str) -> str:
    """``name`` for a line of text: as it is when printable UTF-8, else as :func:`shell_arg` writes it."""
    text = _utf8(name)
    return text if text is not None else shell_arg(name)
