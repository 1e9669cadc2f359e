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
