"""Pictures for an engine that takes them, checked at the wire: the request's body and size."""

from __future__ import annotations

import asyncio
import base64
import io
from typing import Any

import av
import numpy as np
import pytest

from edgepipe import Pipeline
from edgepipe.lm.describe import Describe
from edgepipe.lm.remote.engine import RemoteEngine
from edgepipe.media.frame import Frame
from edgepipe.runner import RunConfig
from edgepipe.testing import FakeSource, ListSink, run_pipeline
from edgepipe.vision.detection import Detection, Detections
from edgepipe.wire.results import Message

from .remote.fake_engine import fake_engine


def camera_frame(seq: int) -> Frame:
    rng = np.random.default_rng(seq)
    y = rng.integers(16, 235, (720, 1280), dtype=np.uint8)
    uv = np.full((360, 640, 2), 128, np.uint8)
    return Frame(format="nv12", y=y, uv=uv, source_id="cam", seq=seq)


def detections(seq: int) -> Detections:
    face = [Detection((10.0, 10.0, 90.0, 90.0), 0.9, 0, "face")]
    return Detections("cam", seq, None, None, 1280, 720, "m", face, frame=camera_frame(seq))


def describe_with(props: dict[str, Any] | None, **engine: Any) -> list[dict[str, Any]]:
    async def run() -> list[dict[str, Any]]:
        async with fake_engine() as server:
            server.props = props
            node = Describe(RemoteEngine(server.url, **engine), template="{summary}:", every_s=3600)
            sink: ListSink[Message] = ListSink()
            p = Pipeline("t")
            src = p.source("faces", FakeSource([detections(i) for i in range(3)]))
            p.sink("out", sink, inputs=p.stage("describe", node, inputs=src, policy="latest", queue_size=4))
            await asyncio.to_thread(run_pipeline, p, RunConfig(governed=False))
            assert sink.items[-1].data["engine"] == "remote"
            return server.requests

    return asyncio.run(run())


def test_a_server_that_declares_vision_gets_the_sources_picture_small_and_within_budget() -> None:
    [request] = describe_with({"total_slots": 1, "modalities": {"vision": True}}, image_side=256,
                              image_bytes=48 * 1024)  # fmt: skip
    content = request["messages"][-1]["content"]
    assert [part["type"] for part in content] == ["text", "image_url"]
    uri = content[1]["image_url"]["url"]
    assert uri.startswith("data:image/jpeg;base64,")
    assert len(uri) <= 48 * 1024
    picture = next(av.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1]))).decode(video=0))
    assert max(picture.width, picture.height) <= 256
    assert picture.width / picture.height == pytest.approx(1280 / 720, rel=0.02)


@pytest.mark.parametrize("props", [None, {"total_slots": 1, "modalities": {"vision": False}}])
def test_without_the_declaration_no_picture_is_sent(props: dict[str, Any] | None) -> None:
    [request] = describe_with(props)
    assert isinstance(request["messages"][-1]["content"], str)


def test_an_option_says_the_server_takes_images_where_it_cannot_say_itself() -> None:
    [request] = describe_with(None, images=True)
    assert request["messages"][-1]["content"][1]["type"] == "image_url"


def test_a_picture_over_the_requests_budget_even_at_the_coarsest_is_left_out() -> None:
    [request] = describe_with({"modalities": {"vision": True}}, image_bytes=1024)  # noise: no JPEG that small
    assert isinstance(request["messages"][-1]["content"], str)
