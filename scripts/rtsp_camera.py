"""A real RTSP camera for the tests and the soak: GStreamer's RTSP server, run by Debian's Python.

    /usr/bin/python3 scripts/rtsp_camera.py PORT                          # a test pattern
    /usr/bin/python3 scripts/rtsp_camera.py PORT --frames 'dir/frame%04d.jpg' --fps 15
    /usr/bin/python3 scripts/rtsp_camera.py --check                       # what is missing

Serves live H.264 at rtsp://127.0.0.1:PORT/cam and prints "ready": a 320x240@30 moving ball,
or, with ``--frames``, a numbered JPEG sequence (starting at 1, as FFmpeg's image2 muxer writes
it) looped forever at ``--fps``, one keyframe a second. Needs Debian's python3-gi,
gir1.2-gst-rtsp-server-1.0 and GStreamer's base, good and ugly plugins (``scripts/test.sh``
installs them); ``--check`` prints "ok" or what is missing.

From the project's own Python (no PyGObject there), :class:`RtspServer` starts it as a
subprocess, kills it and starts it again on the same port: the tests' fixture and
``scripts/bench/soak.py`` both use it. ``gi`` is imported only by the server itself.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time
from pathlib import Path

SYSTEM_PYTHON = "/usr/bin/python3"
"""Debian's Python, the one python3-gi is installed for."""
ELEMENTS = ("videotestsrc", "multifilesrc", "jpegdec", "videoconvert", "x264enc", "rtph264pay")
"""The GStreamer elements the two pipelines below use."""
INSTALL = (
    "apt-get install python3-gi gir1.2-gst-rtsp-server-1.0 gstreamer1.0-plugins-base "
    "gstreamer1.0-plugins-good gstreamer1.0-plugins-ugly (scripts/test.sh installs them)"
)
ENCODE = (
    "x264enc tune=zerolatency speed-preset=ultrafast key-int-max={gop} bitrate={kbps} "
    "! rtph264pay name=pay0 pt=96 config-interval=1"
)
TEST_PATTERN = "videotestsrc is-live=true pattern=ball ! video/x-raw,width=320,height=240,framerate=30/1"
FRAMES = (
    'multifilesrc location="{location}" start-index=1 loop=true caps=image/jpeg,framerate={fps}/1 '
    "! jpegdec ! videoconvert ! video/x-raw,format=I420"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def missing() -> str | None:
    """What the server lacks, with how to install it; None when it can run."""
    if not Path(SYSTEM_PYTHON).exists():
        return f"no {SYSTEM_PYTHON}: {INSTALL}"
    try:
        done = subprocess.run(
            [SYSTEM_PYTHON, __file__, "--check"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{SYSTEM_PYTHON} {Path(__file__).name} --check failed ({exc}): {INSTALL}"
    lines = done.stdout.strip().splitlines() or done.stderr.strip().splitlines()[-1:] or ["no answer"]
    answer = lines[0]
    return None if done.returncode == 0 and answer == "ok" else f"{answer}: {INSTALL}"


class RtspServer:
    """The server in a subprocess on 127.0.0.1; can be killed and started again on its port."""

    def __init__(self, port: int, *, frames: str | Path | None = None, fps: int = 15) -> None:
        """``frames``: a JPEG sequence's pattern (``dir/frame%04d.jpg``), looped at ``fps``;
        None: the test pattern."""
        self.port = port
        self.url = f"rtsp://127.0.0.1:{port}/cam"
        self.frames = frames
        self.fps = fps
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        """Returns once the server accepts connections; RuntimeError if it does not start."""
        command = [SYSTEM_PYTHON, __file__, str(self.port)]
        if self.frames is not None:
            command += ["--frames", str(self.frames), "--fps", str(self.fps)]
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if line != "ready":
            self.proc.kill()
            _, err = self.proc.communicate(timeout=5)
            self.proc = None
            raise RuntimeError(f"RTSP server did not start: {line!r} {err}")
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


def _check() -> int:
    """Print "ok", or the first thing missing (run by Debian's Python)."""
    try:
        import gi

        gi.require_version("Gst", "1.0")
        gi.require_version("GstRtspServer", "1.0")
        from gi.repository import Gst, GstRtspServer  # noqa: F401
    except (ImportError, ValueError) as exc:
        print(f"PyGObject or GStreamer's RTSP server is missing ({exc})", flush=True)
        return 1
    Gst.init(None)
    absent = [name for name in ELEMENTS if Gst.ElementFactory.find(name) is None]
    if absent:
        print(f"GStreamer elements missing: {', '.join(absent)}", flush=True)
        return 1
    print("ok", flush=True)
    return 0


def _serve(port: int, launch: str) -> int:
    import gi

    gi.require_version("Gst", "1.0")
    gi.require_version("GstRtspServer", "1.0")
    from gi.repository import GLib, Gst, GstRtspServer

    Gst.init(None)
    server = GstRtspServer.RTSPServer()
    server.set_address("127.0.0.1")
    server.set_service(str(port))
    factory = GstRtspServer.RTSPMediaFactory()
    factory.set_launch(f"( {launch} )")
    factory.set_shared(True)
    server.get_mount_points().add_factory("/cam", factory)
    if server.attach(None) == 0:
        print("cannot bind", flush=True)
        return 1
    print("ready", flush=True)
    GLib.MainLoop().run()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("port", type=int, nargs="?")
    parser.add_argument("--frames", help="a numbered JPEG sequence to loop (dir/frame%%04d.jpg)")
    parser.add_argument("--fps", type=int, default=15, help="its frame rate (default 15)")
    parser.add_argument("--check", action="store_true", help='print "ok" or what is missing')
    args = parser.parse_args()
    if args.check:
        return _check()
    if args.port is None:
        parser.error("PORT is required")
    if args.frames is None:
        launch = f"{TEST_PATTERN} ! {ENCODE.format(gop=15, kbps=600)}"
    else:
        source = FRAMES.format(location=args.frames, fps=args.fps)
        launch = f"{source} ! {ENCODE.format(gop=args.fps, kbps=1500)}"
    return _serve(args.port, launch)


if __name__ == "__main__":
    sys.exit(main())
