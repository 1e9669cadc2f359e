"""The viewer page's layout and what it shows beside the video, in Debian's headless Chromium: two
cameras (640x360 with a detector's box, 320x240 with the demo's motion messages) at 1280x800
and at 500 px wide, a language model's text with no spaces, a visitor over the viewer limit, and
a browser killed while it watches (its slot is free within seconds)."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from edgepipe import Message, Pipeline
from edgepipe.media.frame import Frame
from edgepipe.media.sources.video import VideoSource
from edgepipe.serve.webrtc_stream import WebRTCStream
from edgepipe.vision.detection import Detection, Detections
from tests.support.viewing import served

from .test_page import send
from .webdriver import Browser, require_chromium

BOX = (40.0, 30.0, 240.0, 200.0)
MOTION = [100, 60, 180, 140]
MOTION_RGB = (0xFF, 0xD2, 0x4D)  # tile.js's MOTION_COLOUR
UNBROKEN = "x" * 600  # a model's text with no space to break at
LONG_EVENT = "y" * 600


def detector(frame: Frame) -> Detections:
    return Detections(source_id=frame.source_id, seq=frame.seq, pts=frame.pts, time_s=frame.time_s,
                      width=frame.width, height=frame.height, model="fake", t_decoded_ns=frame.t_decoded_ns,
                      items=[Detection(box=BOX, score=0.75, class_id=0, label="face")])  # fmt: skip


def motion(frame: Frame) -> Message:
    """What pipelines/demo.py's MotionDetector sends (a fixed box here)."""
    data = {"source": frame.source_id, "frame": frame.seq, "box_xyxy": MOTION, "pixels": 1234}
    return Message("motion", {**data, "latency_ms": 1.0})


def two_cameras(stream: WebRTCStream) -> Pipeline:
    p = Pipeline("two")
    front = p.source("front", VideoSource("synthetic://640x360@15"))
    small = p.source("small", VideoSource("synthetic://320x240@15"))
    p.sink("view_front", stream.video("front"), inputs=front, policy="latest", queue_size=1)
    p.sink("view_small", stream.video("small"), inputs=small, policy="latest", queue_size=1)
    faces = p.stage("faces", detector, inputs=front, policy="latest", queue_size=1)
    moved = p.stage("motion", motion, inputs=small, policy="latest", queue_size=1)
    p.sink("view_results", stream.results, inputs=[faces, moved], queue_size=16)
    return p


PLAYING = """const s = window.edgepipeViewer; const f = s && s.sources.front, m = s && s.sources.small;
return !!f && !!m && f.video === 'playing' && m.video === 'playing' && f.lastBoxCount === 1
  && m.videoWidth === 320 && f.videoWidth === 640;"""
LISTED = """const text = [...document.querySelectorAll('.stats')].map((e) => e.textContent).join(' ');
return text.includes('boxes 1') && text.includes('motion 1234 px');"""
LAYOUT = """const rect = (e) => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; };
const tiles = {};
for (const t of document.querySelectorAll('.tile')) {
  tiles[t.querySelector('.name').textContent] = {tile: rect(t), video: rect(t.querySelector('video')),
    stats: t.querySelector('.stats').textContent};
}
return {width: innerWidth, height: innerHeight, scroll: document.documentElement.scrollWidth, tiles};"""
# How many pixels of the small tile's overlay, along the motion box's left edge, are in its colour.
MOTION_EDGE = """const [x1, y1, x2, y2, rgb] = arguments;
const t = [...document.querySelectorAll('.tile')].find((t) => t.querySelector('.name').textContent === 'small');
const c = t.querySelector('canvas'), v = t.querySelector('video');
const k = c.width / v.videoWidth;
const d = c.getContext('2d').getImageData(Math.round(x1 * k) - 1, Math.round(y1 * k), 3, Math.round((y2 - y1) * k)).data;
let n = 0;
for (let i = 0; i < d.length; i += 4) {
  if (Math.abs(d[i] - rgb[0]) < 8 && Math.abs(d[i + 1] - rgb[1]) < 8 && Math.abs(d[i + 2] - rgb[2]) < 8 && d[i + 3] > 200) n += 1;
}
return n;"""
PANELS = """const size = (e) => e && [e.scrollWidth, e.clientWidth];
return {token: size(document.querySelector('#tokens p')), tokens: size(document.querySelector('#tokens')),
  event: size(document.querySelector('#events li')), events: size(document.querySelector('#events'))};"""
PROBLEM = "const p = document.querySelector('#problem'); return !!p && !p.hidden && p.textContent;"
SENT = [
    {"v": 1, "kind": "token", "node": "describe", "request": 1, "text": UNBROKEN},
    {"v": 1, "kind": "event", "node": "describe", "what": "description", "text": LONG_EVENT},
]


def viewers_now(url: str) -> int:
    with urllib.request.urlopen(f"{url}/streams", timeout=5) as r:
        count: int = json.load(r)["viewers"]
        return count


def look(url: str, stream: WebRTCStream, loop: asyncio.AbstractEventLoop, tmp_path: Path) -> dict[str, Any]:
    """What the page shows at 1280x800, then at 500 px, what a visitor over the limit sees, and
    how long the killed browser's slot stays taken. Everything is recorded, nothing asserted
    here: a page that fails one check still shows the others."""
    seen: dict[str, Any] = {}
    with Browser.start(tmp_path / "profile") as b:
        b.grant_media(f"{url}/health")  # ICE on 127.0.0.1 (see Browser.grant_media)
        b.resize(1280, 800)
        b.get(f"{url}/")
        seen["playing"] = b.wait_for(PLAYING, 45)
        b.wait_for(LISTED, 10)  # the figures under each video are written four times a second
        seen["motion_edge"] = 0
        deadline = time.monotonic() + 10  # the overlay is drawn anew for each frame
        while seen["motion_edge"] < 40 and time.monotonic() < deadline:
            seen["motion_edge"] = max(seen["motion_edge"], b.script(MOTION_EDGE, *MOTION, list(MOTION_RGB)))
        seen["wide"] = b.script(LAYOUT)
        send(stream, loop, SENT)
        b.wait_for("return document.querySelectorAll('#events li').length > 0", 10)
        seen["panels"] = b.script(PANELS)
        seen["status"] = b.script("return window.edgepipeViewer")
        b.resize(500, 800)
        seen["narrow"] = b.script(LAYOUT)
        b.new_tab()  # a second visitor; the stream takes one
        b.get(f"{url}/")
        seen["refused"] = b.wait_for(PROBLEM, 20)
        seen["refused_layout"] = b.script(LAYOUT)
        seen["viewers_before_kill"] = viewers_now(url)
        b.kill()
        killed = time.monotonic()
        while viewers_now(url) and time.monotonic() - killed < 10:
            time.sleep(0.1)
        seen["freed_s"] = time.monotonic() - killed if not viewers_now(url) else None
    return seen


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_two_cameras_at_1280_and_500_px_a_visitor_over_the_limit_and_a_killed_browser(
    tmp_path: Path,
) -> None:
    require_chromium()
    stream = WebRTCStream(limit=1)
    async with served(two_cameras(stream)) as run:  # WebDriver calls block: they run in a thread
        seen = await asyncio.to_thread(look, run.url, stream, asyncio.get_running_loop(), tmp_path)
    assert seen["playing"], "both cameras play, with the front's box and the small one's motion"
    wide, narrow = seen["wide"], seen["narrow"]
    assert (wide["width"], wide["height"], narrow["width"]) == (1280, 800, 500)
    front, small = wide["tiles"]["front"], wide["tiles"]["small"]
    # 1280x800: side by side, both whole above the fold.
    assert small["tile"][0] >= front["tile"][0] + front["tile"][2], wide
    assert small["tile"][1] == front["tile"][1], wide
    assert max(t["tile"][1] + t["tile"][3] for t in (front, small)) <= 800, wide
    # A 320x240 camera at its own size, not scaled up; the 640x360 one scaled down to its tile.
    assert small["video"][2:] == [320, 240], wide
    assert front["video"][2] <= front["tile"][2]
    assert front["video"][2] / front["video"][3] == pytest.approx(640 / 360, rel=0.01)
    # The demo's motion: drawn over the small camera's video, and listed with its figures.
    assert seen["motion_edge"] >= 40, seen["motion_edge"]  # of the edge's 80 pixels, dashed
    assert "motion 1234 px" in small["stats"], small["stats"]
    assert "boxes 1" in front["stats"]
    # 500 px: one under the other, nothing wider than the screen, the small camera still 320x240.
    assert narrow["scroll"] <= narrow["width"], narrow
    n_front, n_small = narrow["tiles"]["front"], narrow["tiles"]["small"]
    assert n_small["tile"][1] >= n_front["tile"][1] + n_front["tile"][3], narrow
    assert n_small["video"][2:] == [320, 240]
    assert n_front["video"][2] <= 500
    # A model's text without spaces wraps inside its panel.
    panels = seen["panels"]
    for name, size in panels.items():
        assert size is not None, (name, panels)
        assert size[0] <= size[1], (name, panels)
    # A visitor over the limit reads why, in the server's words, at 500 px too.
    refused = seen["refused"]
    assert refused, "no reason shown"
    assert "HTTP 503" in refused, refused
    assert "viewer limit reached" in refused, refused
    assert seen["refused_layout"]["scroll"] <= 500
    # The browser killed (no goodbye from its page): its slot is free within 5 s.
    assert seen["viewers_before_kill"] == 1
    assert seen["freed_s"] is not None, "the slot still taken 10 s after"
    assert seen["freed_s"] < 5.0
