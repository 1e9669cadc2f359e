from __future__ import annotations

from pathlib import Path

from scripts.rtsp_camera import SYSTEM_PYTHON, RtspServer, free_port  # the server's own module, in scripts/

REPO = Path(__file__).resolve().parents[2]
__all__ = [
    "SYSTEM_PYTHON",
    "RtspServer",
    "free_port",
]  # imported by the RTSP tests (the fixture: tests/conftest.py)
