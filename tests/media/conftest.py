from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SYSTEM_PYTHON = "/usr/bin/python3"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RtspServer:
    """GStreamer's RTSP server in a subprocess, on 127.0.0.1; can be killed and restarted."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.url = f"rtsp://127.0.0.1:{port}/cam"
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        script = Path(__file__).with_name("rtsp_server.py")
        self.proc = subprocess.Popen([SYSTEM_PYTHON, str(script), str(self.port)], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)  # fmt: skip
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if line != "ready":
            self.proc.kill()
            raise RuntimeError(
                f"RTSP server did not start: {line!r} {self.proc.stderr.read() if self.proc.stderr else ''}"
            )
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        raise RuntimeError("RTSP server is not accepting connections")

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.communicate(timeout=5)  # reaps it and closes its pipes
            self.proc = None


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
