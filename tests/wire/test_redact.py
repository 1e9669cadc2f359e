from __future__ import annotations

import io
import logging
import sys
import threading
from collections.abc import Iterator

import pytest

from edgepipe.wire.redact import mask_process_output, mask_record, redact, redact_text, redact_url


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("rtsp://user:secret@cam/stream", "rtsp://user:***@cam/stream"),
        ("rtsp://user:p@ss@cam:554/s?a=1", "rtsp://user:***@cam:554/s?a=1"),
        ("cam rtsp://u:s1@h/x and http://a:s2@c/d", "cam rtsp://u:***@h/x and http://a:***@c/d"),
        ("rtsp://cam/x?token=abc&x=1", "rtsp://cam/x?token=***&x=1"),
        ("rtsp://user@cam/", "rtsp://user@cam/"),
        ("camera", "camera"),
        ("synthetic://640x480@15", "synthetic://640x480@15"),
    ],
)
def test_passwords_in_urls_are_masked(text: str, shown: str) -> None:
    assert redact_text(text) == shown
    assert redact_url(text) == shown


def test_plain_data_is_redacted_everywhere() -> None:
    data = {"nodes": [{"url": "rtsp://u:secret@h/", "n": 3}], "rtsp://u:secret@k": ("x", None)}
    assert "secret" not in repr(redact(data))
    assert redact(data)["nodes"][0]["n"] == 3


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("rtsp://admin:pa/ss@10.0.0.5/live", "rtsp://admin:***@10.0.0.5/live"),
        ("rtsp://admin:p#1@cam/x", "rtsp://admin:***@cam/x"),
        ("rtsp://admin:p?x@cam/x", "rtsp://admin:***@cam/x"),
        ("rtsp://user:p@ss@cam/a", "rtsp://user:***@cam/a"),
        ("http://cam/x?access_token=SECRET", "http://cam/x?access_token=***"),
        ("http://h/?api_key=SECRET&a=1", "http://h/?api_key=***&a=1"),
        ("could not open admin:secret@10.0.0.5:554", "could not open admin:***@10.0.0.5:554"),
        ("rtsp://u:***@cam/x", "rtsp://u:***@cam/x"),
        ("at 12:30 the camera at 10.0.0.5:554 said hello", "at 12:30 the camera at 10.0.0.5:554 said hello"),
    ],
)
def test_passwords_with_url_characters_and_bare_user_info_are_masked(text: str, shown: str) -> None:
    assert redact_text(text) == shown


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        # the cases: SRT's passphrase, an MJPEG camera's pass=, a user info password
        (
            "srt://127.0.0.1:9000?mode=caller&passphrase=SECRET",
            "srt://127.0.0.1:9000?mode=caller&passphrase=***",
        ),
        ("http://cam/mjpeg?user=admin&pass=SECRET", "http://cam/mjpeg?user=admin&pass=***"),
        ("rtsp://u:SECRET@cam/", "rtsp://u:***@cam/"),
        # by rule: pass, secret, token, auth, sig, cred anywhere in the name, any case
        ("http://h/?Password=SECRET", "http://h/?Password=***"),
        ("http://h/?PassWD=SECRET&pwd=SECRET", "http://h/?PassWD=***&pwd=***"),
        ("http://h/?client_secret=SECRET&x=1", "http://h/?client_secret=***&x=1"),
        ("http://h/?access_token=SECRET", "http://h/?access_token=***"),
        ("http://h/?authorization=SECRET&auth=SECRET", "http://h/?authorization=***&auth=***"),
        ("https://b/o?X-Amz-Date=1&X-Amz-Signature=SECRET", "https://b/o?X-Amz-Date=1&X-Amz-Signature=***"),
        ("https://b/o?X-Amz-Credential=SECRET%2F2024&sig=SECRET", "https://b/o?X-Amz-Credential=***&sig=***"),
        # is or ends in key: key, apikey, api_key, x-api-key; SRT's pbkeylen is no secret
        ("http://h/?key=SECRET&apikey=SECRET", "http://h/?key=***&apikey=***"),
        ("http://h/?api_key=SECRET#f", "http://h/?api_key=***#f"),
        ("http://h/?X-API-KEY=SECRET", "http://h/?X-API-KEY=***"),
        ("srt://h:9000?pbkeylen=16&passphrase=SECRET", "srt://h:9000?pbkeylen=16&passphrase=***"),
        (
            "srt://h:9000?passphrase=SECRET&pbkeylen=16&latency=200",
            "srt://h:9000?passphrase=***&pbkeylen=16&latency=200",
        ),
        ("http://h/?keyframes=3&monkey=SECRET", "http://h/?keyframes=3&monkey=***"),
        # host, port, path and other values are kept; an empty value has nothing to hide
        (
            "rtsp://cam.local:8554/live/ch1?transport=tcp&user=admin",
            "rtsp://cam.local:8554/live/ch1?transport=tcp&user=admin",
        ),
        ("http://h/?token=&a=1", "http://h/?token=&a=1"),
        ("level=3 policy=latest", "level=3 policy=latest"),
        # in free text: FFmpeg's and exceptions' messages quote the URL; the quote is kept
        ("srt://h?passphrase=SECRET: Connection refused", "srt://h?passphrase=***: Connection refused"),
        (
            "[Errno 111] 'srt://h?passphrase=SECRET'. Retrying",
            "[Errno 111] 'srt://h?passphrase=***'. Retrying",
        ),
        ('opening "http://h/?pass=SECRET" (tcp)', 'opening "http://h/?pass=***" (tcp)'),
        ("srt://h?passphrase=SEC'RET", "srt://h?passphrase=***"),  # a quote inside: masked whole
        ("<a href='http://h/?a=1&amp;token=SECRET'>", "<a href='http://h/?a=1&amp;token=***'>"),
        (
            "two: srt://a?passphrase=SECRET and rtsp://u:SECRET@b/",
            "two: srt://a?passphrase=*** and rtsp://u:***@b/",
        ),
    ],
)
def test_secret_query_values_are_masked_by_their_name(text: str, shown: str) -> None:
    assert redact_text(text) == shown
    assert "SECRET" not in redact_text(text)


def test_a_text_with_nothing_to_mask_is_returned_as_it_is() -> None:
    text = "[camera] live: 1280x720 h264 (decoder h264_v4l2m2m)"
    assert redact_text(text) is text


def _record(msg: str, *args: object, exc: BaseException | None = None) -> logging.LogRecord:
    exc_info = (type(exc), exc, exc.__traceback__) if exc is not None else None
    return logging.LogRecord("t", logging.WARNING, __file__, 1, msg, args, exc_info)


def test_a_log_record_is_masked_in_its_message_and_its_traceback() -> None:
    try:
        raise OSError("cannot open srt://h:9000?passphrase=SECRET")
    except OSError as exc:
        record = _record("[%s] %s: reconnecting", "camera", "rtsp://u:SECRET@cam/", exc=exc)
    mask_record(record)
    text = logging.Formatter().format(record)
    assert "SECRET" not in text
    assert "[camera] rtsp://u:***@cam/: reconnecting" in text
    assert "OSError: cannot open srt://h:9000?passphrase=***" in text
    plain = _record("[%s] %d frames", "camera", 3)
    mask_record(plain)
    assert (plain.msg, plain.args) == ("[%s] %d frames", ("camera", 3))  # untouched
    bad = _record("%d at rtsp://u:SECRET@cam/", "not a number")
    mask_record(bad)  # a wrong format: logging reports msg and args; they are masked
    assert "SECRET" not in str(bad.msg)


@pytest.fixture
def process_masked() -> Iterator[None]:
    saved = logging.getLogRecordFactory(), sys.excepthook, threading.excepthook
    mask_process_output()
    mask_process_output()  # idempotent: one wrapper
    try:
        yield
    finally:
        logging.setLogRecordFactory(saved[0])
        sys.excepthook, threading.excepthook = saved[1], saved[2]


def test_every_handler_and_every_uncaught_traceback_is_masked(
    process_masked: None, capsys: pytest.CaptureFixture[str]
) -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)  # added after: as a pipeline file's own would be
    logger = logging.getLogger("edgepipe.test_redact")
    logger.addHandler(handler)
    try:
        try:
            raise ValueError("rtsp://u:SECRET@cam/")
        except ValueError:
            logger.exception("camera %s", "http://cam/mjpeg?user=admin&pass=SECRET")
    finally:
        logger.removeHandler(handler)
    assert "pass=***" in stream.getvalue()
    assert "ValueError: rtsp://u:***@cam/" in stream.getvalue()
    assert "SECRET" not in stream.getvalue()
    factory = logging.getLogRecordFactory()
    assert factory("t", logging.INFO, "f", 1, "?token=SECRET", None, None).getMessage() == "?token=***"
    try:
        raise OSError("http://h/?api_key=SECRET")
    except OSError as exc:
        sys.excepthook(OSError, exc, exc.__traceback__)
        thread = threading.Thread(name="decode")
        threading.excepthook(threading.ExceptHookArgs((OSError, exc, exc.__traceback__, thread)))
    err = capsys.readouterr().err
    assert "OSError: http://h/?api_key=***" in err
    assert "Exception in thread decode:" in err
    assert "SECRET" not in err


def test_a_registered_secret_is_masked_wherever_it_appears() -> None:
    from edgepipe.wire.redact import add_secret

    add_secret("sk-test-4b1d9e")
    add_secret("abc")  # too short to mask safely: ignored
    assert redact_text("401 for key sk-test-4b1d9e at http://h/v1") == "401 for key *** at http://h/v1"
    assert redact({"k": ["Bearer sk-test-4b1d9e"]}) == {"k": ["Bearer ***"]}
    assert redact_text("abc") == "abc"
