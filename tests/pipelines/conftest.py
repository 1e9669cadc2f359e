"""Served pipelines reach 127.0.0.1 only: ICE gathers loopback addresses, no STUN server."""

from __future__ import annotations

import av
import pytest


@pytest.fixture(autouse=True)
def loopback_ice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGEPIPE_ICE_HOSTS", "127.0.0.1")
    monkeypatch.delenv("EDGEPIPE_ICE_SERVERS", raising=False)


@pytest.fixture
def libx264() -> None:
    if "libx264" not in av.codecs_available:
        pytest.skip("libx264 is not available in this PyAV build")
