from __future__ import annotations

import pytest

from edgepipe.core.redact import redact, redact_text, redact_url


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
