"""Secrets out of anything shown: ``rtsp://user:secret@cam/…`` becomes ``rtsp://user:***@cam/…``
and ``srt://cam:9000?mode=caller&passphrase=secret`` becomes ``…&passphrase=***``.

A source URL names the camera in logs, ``/graph``, metric labels, health reasons and error
lines, and it is often the only place its password lives. Everything edgepipe shows (the
serving layer, results, MQTT payloads, log records with their tracebacks, ``edgepipe: error:``
lines) goes through :func:`redact_text` (or :func:`redact` for plain data), so a secret given in
a URL is never shown back, whatever text it ended up in (FFmpeg's messages echo the URL).

The rule, for every URL found anywhere in a text:

- the password of its user info (``user:PASSWORD@host``; also without a scheme, as FFmpeg and
  RTSP servers print it);
- the value of every query parameter whose name (case-insensitive) contains ``pass`` (SRT's
  ``passphrase`` too), ``pwd``, ``secret``, ``token``, ``auth``, ``sig`` or ``cred``, or is or
  ends in ``key`` (``key``, ``apikey``, ``api_key``, ``x-api-key``; not SRT's ``pbkeylen``).

The value becomes :data:`MASK`; the name stays, so the user sees which parameter it was. The
host, port, path and other parameters are kept: they are what a user needs to find the camera.
A secret given outside any URL (a language-model engine's API key) is registered with
:func:`add_secret` and masked wherever it appears.
"""

from __future__ import annotations

import logging
import re
import sys
import threading
import traceback
import types
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
# ?passphrase=…, &X-Amz-Signature=…, ;api_key=…: a secret parameter's name, by rule. The value
# runs to the next "&" or "#", or to whitespace; closing quotes, brackets and punctuation just
# before the whitespace (a URL quoted in an error message: 'srt://…?passphrase=x': refused) are
# not part of it. A value with an unencoded quote inside is masked whole.
_SECRET_PARAM = re.compile(
    r"(?P<key>[?&;](?:[\w.~%+-]*(?:pass|pwd|secret|token|auth|sig|cred)[\w.~%+-]*|[\w.~%+-]*key)=)"
    r"(?P<value>[^&#\s]*?)(?=[&#]|['\")\]>}.,:;]*(?:\s|$))",
    re.IGNORECASE,
)


_SECRETS: set[str] = set()
MIN_SECRET = 6
"""Shorter values are not registered: masking every "abc" in every log line would garble it."""


def add_secret(value: str) -> None:
    """Mask ``value`` wherever it appears from now on (an API key given outside any URL: an
    environment variable, a params file). Values under :data:`MIN_SECRET` characters are
    ignored."""
    if len(value) >= MIN_SECRET:
        _SECRETS.add(value)


def redact_url(url: str) -> str:
    """``url`` with the password of its user info, and secret query parameters, masked."""
    return redact_text(url)


def redact_text(text: str) -> str:
    """``text`` with every URL's secrets (see the module's rule) masked; anything else kept."""
    if _SECRETS:
        for secret in _SECRETS:
            if secret in text:
                text = text.replace(secret, MASK)
    if "@" not in text and "=" not in text:
        return text  # the common case (a node id, a state, most log lines): no regex at all
    if "@" in text:
        text = _USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", text)
        text = _BARE_USERINFO.sub(lambda m: f"{m['user']}:{MASK}@", text)
    if "=" in text:
        text = _SECRET_PARAM.sub(lambda m: f"{m['key']}{MASK}" if m["value"] else m[0], text)
    return text


def redact(data: Any) -> Any:
    """A copy of plain data (dicts, lists, tuples, strings …) with every string redacted."""
    if isinstance(data, str):
        return redact_text(data)
    if isinstance(data, dict):
        return {redact(k): redact(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [redact(v) for v in data]
    return data


def mask_record(record: logging.LogRecord) -> None:
    """Mask secrets in ``record``, in place: its message (formatted now, when it has any), and
    the traceback and stack it carries (formatted now, as a handler's formatter would; the
    formatter then uses the masked text as it is)."""
    try:
        message = record.getMessage()
    except Exception:  # a bad format: logging reports it, with msg and args: mask those
        record.msg = redact_text(str(record.msg))
        if isinstance(record.args, tuple):
            record.args = tuple(redact_text(a) if isinstance(a, str) else a for a in record.args)
    else:
        shown = redact_text(message)
        if shown != message:
            record.msg, record.args = shown, None
    if record.exc_info and not record.exc_text:
        record.exc_text = logging.Formatter().formatException(record.exc_info)
    if record.exc_text:
        record.exc_text = redact_text(record.exc_text)
    if record.stack_info:
        record.stack_info = redact_text(record.stack_info)


def mask_process_output() -> None:
    """Mask secrets in everything the process logs or prints as a traceback: every log record
    as it is made (so every handler shows it masked, one added later by a pipeline file too),
    and the traceback of an exception no code caught (main thread or any other). For a command
    (``edgepipe run``); idempotent."""
    factory = logging.getLogRecordFactory()
    if not getattr(factory, "masks_secrets", False):

        def make_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = factory(*args, **kwargs)
            mask_record(record)
            return record

        make_record.masks_secrets = True  # type: ignore[attr-defined]
        logging.setLogRecordFactory(make_record)
    sys.excepthook = _excepthook
    threading.excepthook = _thread_excepthook


def _excepthook(exc_type: type[BaseException], exc: BaseException, tb: types.TracebackType | None) -> None:
    sys.stderr.write(redact_text("".join(traceback.format_exception(exc_type, exc, tb))))


def _thread_excepthook(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit:  # as Python's own: a thread's sys.exit() is silent
        return
    name = args.thread.name if args.thread is not None else threading.get_ident()
    text = "".join(traceback.format_exception(args.exc_type, args.exc_value, args.exc_traceback))
    if sys.stderr is not None:
        sys.stderr.write(redact_text(f"Exception in thread {name}:\n{text}"))
