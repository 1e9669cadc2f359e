from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from rtsp_camera import SYSTEM_PYTHON, RtspServer, free_port  # the server's own module, in scripts/

REPO = Path(__file__).resolve().parents[2]
__all__ = ["SYSTEM_PYTHON", "RtspServer", "free_port"]  # imported by the RTSP tests


@pytest.fixture
def rtsp_server() -> Iterator[RtspServer]:
    if not Path(SYSTEM_PYTHON).exists() or shutil.which("gst-inspect-1.0") is None:
        pytest.fail("GStreamer's RTSP server is not installed: run .ci/run (it installs python3-gi and "
                    "gir1.2-gst-rtsp-server-1.0), or apt-get install them")  # fmt: skip
    server = RtspServer(free_port())
    server.start()
    try:
        yield server
    finally:
        server.kill()
