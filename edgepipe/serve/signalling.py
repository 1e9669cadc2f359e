"""WebRTC signalling routes: ``POST /offer`` (JSON, the shape of aiortc's examples) and WHEP
(``POST /whep`` with ``application/sdp``, ``201`` and a ``Location`` to ``DELETE``), so a
standard WebRTC player connects too.

Answers carry every ICE candidate (aiortc gathers before it answers: no trickle); a server bound
to loopback offers loopback candidates only (:func:`~edgepipe.serve.ice.serving_on`). A pipeline
without a :class:`~edgepipe.serve.webrtc_stream.WebRTCStream` answers 404; one viewer past the limit,
503; an offer that cannot be answered (no H.264, not SDP), 400 with one log line.
"""

from __future__ import annotations

import logging

from aiohttp import web

from edgepipe.serve import ice
from edgepipe.serve.webrtc import OfferError, ViewerLimitError
from edgepipe.serve.webrtc_stream import WebRTCStream

log = logging.getLogger(__name__)

STREAMS = web.AppKey("streams", list[WebRTCStream])
BOUND_HOST = web.AppKey("bound_host", str)
"""The address the server is bound to (``--host``): it decides the ICE candidates offered."""

MAX_SDP_CHARS = 64 * 1024


def add_signalling(app: web.Application) -> None:
    app.router.add_post("/offer", offer)
    app.router.add_post("/whep", whep)
    app.router.add_delete("/whep/{viewer}", whep_delete)


def _stream(request: web.Request) -> WebRTCStream:
    streams = request.app[STREAMS]
    if not streams:
        raise web.HTTPNotFound(text="this pipeline streams no video (it has no WebRTCStream output)\n")
    return streams[0]


async def offer(request: web.Request) -> web.Response:
    """``{"sdp": ..., "type": "offer"}`` -> ``{"sdp": ..., "type": "answer"}``. Only as
    ``application/json``: a page of another site can send ``text/plain`` without asking the
    browser first (a "simple" request), and would hold viewer slots with forged offers."""
    if request.content_type != "application/json":
        raise web.HTTPUnsupportedMediaType(text="/offer takes Content-Type: application/json\n")
    body = await request.json()  # malformed JSON: ValueError -> 400 (security middleware)
    if not isinstance(body, dict):
        raise ValueError("the body must be a JSON object with sdp and type")
    sdp, kind = body.get("sdp"), body.get("type")
    if not isinstance(sdp, str) or not isinstance(kind, str):
        raise ValueError('the body needs "sdp" and "type" strings')
    viewer_id, answer_sdp = await _answer(request, sdp, kind)
    return web.json_response({"sdp": answer_sdp, "type": "answer", "viewer": viewer_id})


async def whep(request: web.Request) -> web.Response:
    if request.content_type != "application/sdp":
        raise web.HTTPUnsupportedMediaType(text="WHEP takes Content-Type: application/sdp\n")
    sdp = await request.text()
    viewer_id, answer_sdp = await _answer(request, sdp, "offer")
    return web.Response(
        status=201, text=answer_sdp, content_type="application/sdp",
        headers={"Location": f"/whep/{viewer_id}"},
    )  # fmt: skip


async def whep_delete(request: web.Request) -> web.Response:
    stream = _stream(request)
    if not await stream.viewers.close(request.match_info["viewer"], "DELETE"):
        raise web.HTTPNotFound(text="no such viewer\n")
    return web.Response(status=200)


async def _answer(request: web.Request, sdp: str, kind: str) -> tuple[str, str]:
    stream = _stream(request)
    if len(sdp) > MAX_SDP_CHARS or "v=0" not in sdp[:200]:
        raise ValueError("not an SDP offer")
    try:
        with ice.serving_on(request.app[BOUND_HOST]):
            viewer, answer = await stream.viewers.answer(sdp, kind)
    except ViewerLimitError as exc:
        raise web.HTTPServiceUnavailable(text=f"{exc}\n") from None
    except OfferError as exc:
        raise ValueError(str(exc)) from None
    return viewer.viewer_id, answer.sdp


async def close_viewers(app: web.Application) -> None:
    """Every viewer's peer closed (the server is stopping)."""
    for stream in app[STREAMS]:
        await stream.viewers.close_all()
