"""The WebDriver client of ``scripts/webdriver.py`` (shared with ``scripts/bench/webrtc/bench.py``),
and a skip for the tests when Chromium is not installed."""

from __future__ import annotations

import pytest

from scripts.webdriver import Browser, WebDriverError, missing

__all__ = ["Browser", "WebDriverError", "require_chromium"]


def require_chromium() -> None:
    """Skip the calling test when Debian's Chromium or its driver is not installed."""
    reason = missing()
    if reason:
        pytest.skip(reason)
