"""A real RTSP server for the tests: GStreamer's gst-rtsp-server, run by Debian's Python.

    /usr/bin/python3 tests/media/rtsp_server.py PORT

Serves a live 320x240@30 H.264 stream at rtsp://127.0.0.1:PORT/cam and prints "ready".
Needs Debian's python3-gi, gir1.2-gst-rtsp-server-1.0 and GStreamer's good/ugly plugins.
"""

import sys

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import GLib, Gst, GstRtspServer  # noqa: E402

PIPELINE = (
    "( videotestsrc is-live=true pattern=ball ! video/x-raw,width=320,height=240,framerate=30/1 "
    "! x264enc tune=zerolatency speed-preset=ultrafast key-int-max=15 bitrate=600 "
    "! rtph264pay name=pay0 pt=96 config-interval=1 )"
)


def main() -> None:
    Gst.init(None)
    server = GstRtspServer.RTSPServer()
    server.set_address("127.0.0.1")
    server.set_service(sys.argv[1])
    factory = GstRtspServer.RTSPMediaFactory()
    factory.set_launch(PIPELINE)
    factory.set_shared(True)
    server.get_mount_points().add_factory("/cam", factory)
    if server.attach(None) == 0:
        print("cannot bind", flush=True)
        sys.exit(1)
    print("ready", flush=True)
    GLib.MainLoop().run()


if __name__ == "__main__":
    main()
