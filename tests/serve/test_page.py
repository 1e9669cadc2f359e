"""The viewer page: its routes over HTTP, its msgpack decoder run in Chromium against Python's
msgpack, and the page itself in Debian's headless Chromium playing a running pipeline's video
with the detector's boxes over it."""

from __future__ import annotations

import asyncio
import base64
import importlib.resources
import ipaddress
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import msgpack
import pytest

from edgepipe.media.frame import Frame
from edgepipe.serve import ServeConfig
from edgepipe.serve.webrtc_stream import WebRTCStream
from edgepipe.vision.detection import Detection, Detections
from edgepipe.wire import messages
from tests.support.viewing import camera_pipeline
from tests.support.viewing import served as serve

from .webdriver import Browser, require_chromium

TOKEN = "page-token-0123"
BOX = [40.0, 30.0, 240.0, 200.0]
STATIC = importlib.resources.files("edgepipe.serve") / "static"


def detector(frame: Frame) -> Detections:
    latency_ms = (time.monotonic_ns() - frame.t_decoded_ns) / 1e6
    return Detections(source_id=frame.source_id, seq=frame.seq, pts=frame.pts, time_s=frame.time_s,
                      width=frame.width, height=frame.height, model="fake", t_decoded_ns=frame.t_decoded_ns,
                      latency_ms=latency_ms,
                      items=[Detection(box=tuple(BOX), score=0.75, class_id=0, label="face", track_id=7)])  # fmt: skip


@asynccontextmanager
async def served(stream: WebRTCStream | None, token: str | None = TOKEN) -> AsyncIterator[str]:
    """A pipeline (synthetic 640x360 camera, a detector with one known box) served with ``token``
    (bound off loopback so that the token is required, reached over 127.0.0.1)."""
    config = ServeConfig(port=0, host="0.0.0.0", token=token) if token else ServeConfig(port=0)
    async with serve(camera_pipeline(stream, detector, "page"), config=config) as run:
        yield run.url


async def test_the_page_and_its_files_are_served_with_the_token_and_safe_headers() -> None:
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    async with served(WebRTCStream(limit=3)) as url, aiohttp.ClientSession() as http:
        for path in ("/", "/static/viewer.js", "/static/msgpack.js", "/streams"):
            async with http.get(f"{url}{path}") as r:
                assert r.status == 401, path
        async with http.get(f"{url}/?token={TOKEN}") as r:
            assert r.status == 200
            assert r.headers["Content-Type"] == "text/html; charset=utf-8"
            assert r.headers["Cache-Control"] == "no-store"
            assert r.headers["Referrer-Policy"] == "no-referrer"
            csp = r.headers["Content-Security-Policy"]
            assert "script-src 'self';" in csp
            assert "unsafe-inline" not in csp
            page = await r.text()
        # The page's scripts load with the token (a <script> sends no header), and none is inline.
        assert f'src="static/viewer.js?token={TOKEN}"' in page
        assert "{{query}}" not in page
        assert "<script>" not in page
        for name, kind in [("viewer.js", "text/javascript"), ("tile.js", "text/javascript"),
                           ("msgpack.js", "text/javascript"), ("viewer.css", "text/css")]:  # fmt: skip
            async with http.get(f"{url}/static/{name}?token={TOKEN}") as r:
                assert r.status == 200
                assert r.content_type == kind
                assert r.headers["Cache-Control"] == "no-store"
                assert await r.read() == (STATIC / name).read_bytes()
        for path in ("/static/index.html", "/static/..%2Fpage.py", "/static/nothing.js"):
            async with http.get(f"{url}{path}", headers=bearer) as r:
                assert r.status == 404, path
        async with http.get(f"{url}/streams", headers=bearer) as r:
            assert r.status == 200
            assert await r.json() == {"sources": ["camera"], "viewers": 0, "limit": 3}


async def test_on_loopback_without_a_token_the_page_links_its_files_plainly() -> None:
    async with served(None, token=None) as url, aiohttp.ClientSession() as http:
        async with http.get(f"{url}/") as r:
            assert r.status == 200
            assert 'src="static/viewer.js"' in await r.text()
        async with http.get(f"{url}/streams") as r:
            assert await r.json() == {"sources": [], "viewers": 0, "limit": 0}


def test_the_package_ships_the_page() -> None:
    names = {f.name for f in STATIC.iterdir()}
    assert {"index.html", "viewer.js", "tile.js", "msgpack.js", "viewer.css"} <= names


# -- the msgpack decoder, in Chromium ---------------------------------------------------------

DECODE = """
const [b64] = arguments;
const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
const plain = (x) => x instanceof Uint8Array ? {bin: Array.from(x)}
  : Array.isArray(x) ? x.map(plain)
  : x !== null && typeof x === "object" ? Object.fromEntries(Object.entries(x).map(([k, v]) => [k, plain(v)]))
  : x;
// JSON text: WebDriver's own serialization would lose a key "__proto__"
try { return JSON.stringify({ok: plain(edgepipeMsgpack.decode(bytes))}); } catch (err) { return JSON.stringify({error: String(err.message)}); }
"""

VALUES: list[Any] = [
    None, True, False, 0, 1, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**53, 2**64 - 1,
    -1, -32, -33, -128, -129, -32768, -32769, -(2**31), -(2**31) - 1, -(2**53), -(2**63),
    3.141592653589793, -0.5, 1e300, "", "a", "é漢字🙂", "x" * 31, "x" * 32, "y" * 300, "z" * 70000,
    b"", b"\x00\xff", bytes(range(256)) * 2, b"\x07" * 70000,
    [], list(range(15)), list(range(16)), [0] * 70000, {}, {f"k{i}": i for i in range(15)},
    {f"k{i}": i for i in range(16)}, {f"k{i}": i for i in range(70000)}, {1: "one", -2: "minus two"},
    {"__proto__": {"polluted": True}, "constructor": 1},
    {"v": 1, "kind": "detections", "source": "camera", "seq": 42, "pts_90k": 123456,
     "t_ms": 1764683001250.5, "latency_ms": None, "inferred": True, "w": 1280, "h": 720,
     "boxes": [[1.5, 2.0, 30.25, 40.0, 0.875, "face", None], [0, 0, 1, 1, 0.5, "car", 7]]},
]  # fmt: skip

INVALID = {
    "empty": b"",
    "reserved 0xc1": b"\xc1",
    "fixext": b"\xd4\x01\x00",
    "ext8": b"\xc7\x01\x01\x00",
    "invalid UTF-8": b"\xa2\xff\xfe",
    "trailing bytes": b"\x01\x02",
    "array key": b"\x81\x90\x01",
    "map key": b"\x81\x80\x01",
    "nil key": b"\x81\xc0\x01",
    "forged array32 length": b"\xdd\xff\xff\xff\xff\x01",
    "forged map16 length": b"\xde\xff\xff\x01\x01",
    "forged str32 length": b"\xdb\xff\xff\xff\xff",
    "forged bin32 length": b"\xc6\x00\x10\x00\x00abc",
    "deep nesting": b"\x91" * 200 + b"\xc0",
}


def expected(value: Any) -> Any:
    """``value`` as the page's decoder returns it, through JSON: keys as strings, bin as bytes
    listed, ints past 2**53 as the nearest double."""
    if isinstance(value, bytes):
        return {"bin": list(value)}
    if isinstance(value, list):
        return [expected(v) for v in value]
    if isinstance(value, dict):
        return {str(k): expected(v) for k, v in value.items()}
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**53:
        return float(value)
    return value


def decode(browser: Browser, data: bytes) -> Any:
    text = browser.script(DECODE, base64.b64encode(data).decode())
    return json.loads(text, parse_int=lambda s: float(s) if abs(int(s)) > 2**53 else int(s))


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Any:
    require_chromium()
    with Browser.start(tmp_path_factory.mktemp("chromium")) as b:
        b.get("about:blank")
        b.script((STATIC / "msgpack.js").read_text())
        yield b


@pytest.mark.slow
def test_the_decoder_reads_what_python_msgpack_writes(browser: Browser) -> None:
    for value in VALUES:
        got = decode(browser, msgpack.packb(value, use_bin_type=True))
        assert got == {"ok": expected(value)}, repr(value)[:80]
    assert browser.script("return ({}).polluted") is None, "a key __proto__ is data, not a prototype"
    single = msgpack.packb([1.5, -0.25, 3.4028234663852886e38], use_single_float=True)
    assert single[1] == 0xCA
    assert decode(browser, single) == {"ok": [1.5, -0.25, 3.4028234663852886e38]}


@pytest.mark.slow
def test_the_decoder_refuses_what_is_not_one_whole_msgpack_value(browser: Browser) -> None:
    for name, data in INVALID.items():
        got = decode(browser, data)
        assert "error" in got, name
        assert got["error"].startswith("msgpack: "), (name, got)
    whole = msgpack.packb(VALUES[-1], use_bin_type=True)
    for n in range(len(whole)):  # every truncation of a detections message
        assert "error" in decode(browser, whole[:n]), n


# -- the page, end to end ---------------------------------------------------------------------

STATUS = "return window.edgepipeViewer"
VIDEO = "const v = document.querySelector('video'); return v && [v.currentTime, v.videoWidth];"
PLAYING = (
    "const s = window.edgepipeViewer; const c = s && s.sources.camera;"
    "return c && c.video === 'playing' && c.framesPresented >= arguments[0] && c.matchedByPts >= 10"
    " && c.lastBoxCount === 1 && s;"
)
PICTURE = """const v = document.querySelector('video'); const c = document.createElement('canvas');
[c.width, c.height] = [v.videoWidth, v.videoHeight];
const ctx = c.getContext('2d'); ctx.drawImage(v, 0, 0);
const d = ctx.getImageData(0, 0, c.width, c.height).data; let lo = 255, hi = 0;
for (let i = 0; i < d.length; i += 4) { lo = Math.min(lo, d[i]); hi = Math.max(hi, d[i]); }
return hi - lo;"""
LOGS = """return {tokens: [...document.querySelectorAll('#tokens p')].map((p) => p.textContent),
events: [...document.querySelectorAll('#events li')].map((li) => li.textContent),
state: document.querySelector('.stats .state').textContent};"""
SENT: list[Any] = [  # sent by the server on every viewer's results channel, as a pipeline's nodes do
    {"v": 1, "kind": "token", "node": "describe", "request": 1, "text": "a cat"},
    {"v": 1, "kind": "token", "node": "describe", "request": 1, "text": " on a mat"},
    {"v": 1, "kind": "token", "node": "describe", "request": 2, "text": "a dog"},
    {"v": 1, "kind": "event", "node": "describe", "what": "description", "text": "first"},
    {"v": 1, "kind": "event", "node": "describe", "what": "description", "text": "second"},
    {"v": 1, "kind": "something_new", "node": "x", "data": [1, 2]},  # counted, not shown
    {"v": 1, "kind": "__proto__", "source": "__proto__", "state": "x"},  # a name, nothing more
    {"v": 2, "kind": "detections", "source": "camera"},  # a schema this page does not know: ignored
    b"\xc1 not msgpack",  # malformed: counted, nothing else
]


def send(stream: WebRTCStream, loop: asyncio.AbstractEventLoop, sent: list[Any]) -> None:
    async def on_loop() -> None:
        for viewer in stream.viewers.viewers.values():
            assert viewer.channel is not None
            for m in sent:
                viewer.channel.send(m if isinstance(m, bytes) else messages.pack(m))

    asyncio.run_coroutine_threadsafe(on_loop(), loop).result(10)


def watch(url: str, stream: WebRTCStream, loop: asyncio.AbstractEventLoop, tmp_path: Path) -> dict[str, Any]:
    """Open the page in Chromium and record what it shows: video with results, the messages the
    server sends, and a reconnection after the server ends the viewer."""
    seen: dict[str, Any] = {}
    with Browser.start(tmp_path / "profile") as b:
        b.grant_media(f"{url}/health")  # ICE on 127.0.0.1 (see Browser.grant_media)
        b.get(f"{url}/?token={TOKEN}")
        assert b.wait_for(PLAYING, 45, 30), b.script(STATUS)
        t0, width = b.script(VIDEO)
        b.wait_for(f"return document.querySelector('video').currentTime > {t0} + 0.5", 10)
        seen.update(times=(t0, b.script(VIDEO)[0]), width=width, contrast=b.script(PICTURE))
        # the pts the page computes for the frame on screen (sync + RTP timestamps), a few times
        frame_pts = "return window.edgepipeViewer.sources.camera.framePts"
        seen["frame_pts"] = []
        for _ in range(10):
            seen["frame_pts"].append(b.script(frame_pts))
            time.sleep(0.1)
        send(stream, loop, SENT)
        b.wait_for("return window.edgepipeViewer.malformed > 0", 10)
        seen.update(
            logs=b.script(LOGS), status=b.script(STATUS), text=b.script("return document.body.innerText")
        )
        b.screenshot(tmp_path / "viewer.png")
        asyncio.run_coroutine_threadsafe(stream.viewers.close_all(), loop).result(10)
        shown = "const n = document.querySelector('.notice'); return !n.hidden && n.textContent;"
        seen["notice"] = b.wait_for(shown, 10)
        frames = seen["status"]["sources"]["camera"]["framesPresented"]
        seen["again"] = b.wait_for(PLAYING, 30, frames + 30)
    return seen


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_chromium_plays_the_video_with_the_detectors_boxes_over_it(tmp_path: Path) -> None:
    require_chromium()
    stream = WebRTCStream()
    sent: set[int] = set()  # the pts of every frame encoded for viewers
    async with served(stream) as url:  # WebDriver calls block: they run in a thread
        encoder = stream.encoders["camera"]
        encode = encoder.encode

        def encode_and_note(frame: Frame) -> int:
            sent.add(messages.pts_90k(frame.t_decoded_ns))
            return encode(frame)

        encoder.encode = encode_and_note  # type: ignore[method-assign]
        seen = await asyncio.to_thread(watch, url, stream, asyncio.get_running_loop(), tmp_path)
    status = seen["status"]
    camera = status["sources"]["camera"]
    t0, t1 = seen["times"]
    assert t1 > t0, "the video plays"
    assert seen["width"] == camera["videoWidth"] == 640
    assert camera["videoHeight"] == 360
    assert seen["contrast"] > 64, "the video shows the scene, not a flat picture"
    assert status["connection"] == "connected"
    assert (status["viewers"], status["limit"]) == (1, 4)
    # The browser reaches the server on 127.0.0.1 (all the server gathers); its own end is one of
    # this machine's addresses, an IP, not an mDNS name (which would need multicast to resolve).
    assert status["route"]["remote"] == "127.0.0.1"
    assert ipaddress.ip_address(status["route"]["local"])
    assert status["messages"]["sync"] == 1
    assert status["messages"]["detections"] >= 10
    # The box drawn is the detector's, for a frame matched through sync + RTP timestamps.
    assert camera["lastBoxes"] == [[*BOX, 0.75, "face", 7]]
    assert camera["drawnPts"] <= camera["framePts"]
    # exactly the pts of frames sent: a mapping off by any amount would miss (a fixed box does not)
    assert seen["frame_pts"]
    assert set(seen["frame_pts"]) <= sent
    assert camera["fps"] > 0
    assert camera["pipelineLatencyMs"] >= 0
    assert camera["captureToDisplayMs"] > 0  # one machine, one clock: shown after it was captured
    assert "camera" in seen["text"]
    # Tokens per request and events newest first (sent above); the state is the source's own.
    assert seen["logs"]["tokens"] == ["a cat on a mat", "a dog"]
    assert [e.split("description", 1)[1] for e in seen["logs"]["events"]] == ["second", "first"]
    assert seen["logs"]["state"] == "live"
    assert status["sourceStates"] == {"camera": {"state": "live", "reason": ""}}
    assert status["messages"]["something_new"] == 1
    assert (status["ignored"], status["malformed"]) == (1, 1)
    png = (tmp_path / "viewer.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(png) > 1000
    # The server ended the viewer: the page said so, came back by itself and plays again.
    assert seen["notice"] == "disconnected"
    again = seen["again"]
    assert again, "the page reconnected and plays again"
    assert again["connects"] == 2
    assert again["disconnects"] == 1
    assert again["messages"]["sync"] == 2
