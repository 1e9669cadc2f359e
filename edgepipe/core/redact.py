"""Credentials out of anything shown: ``rtsp://user:secret@cam/…`` becomes ``rtsp://user:***@cam/…``.

A source URL names the camera in logs, ``/graph``, metric labels and health reasons, and it is
often the only place its password lives. Every text that leaves the process through the serving
layer goes through :func:`redact_text` (or :func:`redact` for plain data), so a password given
in a URL is never shown back, whatever field it ended up in.
"""

from __future__ import annotations

import re
from typing import Any

MASK = "***"

# scheme://user:password@host: the password runs to the last "@" of the URL, so one that
# contains "@", "/", "?" or "#" (cameras' passwords often do, unencoded) is masked whole; a path
# with an "@" in it is masked too, which errs on the safe side.
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^\s/?#@:]*):(?P<password>\S*)@")
# user:password@host without a scheme (as FFmpeg's and RTSP servers' messages may print it)
_BARE_USERINFO = re.compile(
    r"(?<![\w/:*])(?P<user>[A-Za-z0-9._~-]+):(?P<password>[^\s@*/][^\s@]*)@(?=[A-Za-z0-9\[])"
)
# ?password=…, &access_token=…, ;api_key=… in a URL's query string
_SECRET_PARAM = re.compile(
    r"(?P<key>[?&;][\w.-]*(?:password|passwd|pwd|token|secret|key|auth)[\w.-]*=)[^&;#\s]*", re.IGNORECASE
)


def redact_url(url: str) -> str:
    """``url`` with the password of its user info, and secret query parameters, masked."""
    return redact_text(url)


def redact_text(text: str) -> str:
    """Every URL's password (and ``token=``/``password=`` parameters) in ``text`` masked."""
    if "@" not in text and "=" not in text:
        return text  # the common case: a node id, a state
    text = _USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", text)
    text = _BARE_USERINFO.sub(lambda m: f"{m['user']}:{MASK}@", text)
    return _SECRET_PARAM.sub(lambda m: f"{m['key']}{MASK}", text)


def redact(data: Any) -> Any:
    """A copy of plain data (dicts, lists, tuples, strings …) with every string redacted."""
    if isinstance(data, str):
        return redact_text(data)
    if isinstance(data, dict):
        return {redact(k): redact(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [redact(v) for v in data]
    return data


class RedactingFilter:
    """A :mod:`logging` filter masking passwords in every record's message (install it on the
    handlers: ``edgepipe run`` does), so a source URL logged as given shows no password."""

    def filter(self, record: Any) -> bool:
        message = record.getMessage()
        shown = redact_text(message)
        if shown != message:
            record.msg, record.args = shown, None
        return True
