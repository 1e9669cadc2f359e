"""The server's ICE consent checks of its viewers, against a real aiortc viewer in a process of
its own (``slow_client.py``), stopped with SIGSTOP: stopped briefly, it answers again and stays;
stopped for good, it answers nothing and is ended within seconds."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from pathlib import Path

import pytest

from edgepipe.serve import consent
from edgepipe.serve.encoder import SharedEncoder
from edgepipe.serve.webrtc import Viewers
from edgepipe.serve.webrtc_stream import WebRTCStream
from tests.support.viewing import camera_pipeline, served

from .test_webrtc import Client

pytestmark = pytest.mark.usefixtures("libx264")
CLIENT = Path(__file__).with_name("slow_client.py")


@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_a_viewer_stopped_briefly_stays_and_one_stopped_for_good_is_ended() -> None:
    stream = WebRTCStream()
    viewers = stream.viewers
    async with served(camera_pipeline(stream, lambda frame: None)) as run:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(CLIENT), run.url, stdout=asyncio.subprocess.PIPE
        )
        try:
            assert proc.stdout is not None
            seen: dict[str, int] = {}
            while seen.get("frames", 0) < 10:  # connected, and watching
                seen = json.loads(await asyncio.wait_for(proc.stdout.readline(), 30))
            viewer_id = str(seen["viewer"])
            # Stopped for 1 s: the checks it missed are answered once it runs again.
            proc.send_signal(signal.SIGSTOP)
            await asyncio.sleep(1.0)
            proc.send_signal(signal.SIGCONT)
            await asyncio.sleep(consent.SILENCE_S + 1.0)
            stayed = viewer_id in viewers.viewers
            # Stopped for good (as a browser killed): ended once silent for SILENCE_S.
            proc.send_signal(signal.SIGSTOP)
            stopped = time.monotonic()
            for _ in range(200):  # 10 s
                if viewer_id not in viewers.viewers:
                    break
                await asyncio.sleep(0.05)
            ended_s = time.monotonic() - stopped
        finally:
            proc.kill()
            await proc.wait()
    assert stayed, "a viewer stopped for 1 s was ended"
    assert consent.SILENCE_S - consent.CHECK_INTERVAL_S <= ended_s < 5.0


async def test_without_aioices_internals_the_checks_stop_and_end_nobody(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def changed(pc: object) -> list[object]:
        raise AttributeError("'RTCIceTransport' object has no attribute '_connection'")

    monkeypatch.setattr(consent, "_pairs", changed)
    monkeypatch.setattr(consent, "CHECK_INTERVAL_S", 0.05)
    monkeypatch.setattr(consent, "SILENCE_S", 0.2)
    viewers = Viewers([SharedEncoder("cam")])
    client = Client()
    try:
        await client.connect(viewers)
        async with asyncio.TaskGroup() as tg:
            upkeep = tg.create_task(viewers.run())
            await asyncio.sleep(0.8)  # four times the silence that would end it
            upkeep.cancel()
        assert len(viewers.viewers) == 1
    finally:
        await viewers.close_all()
        await client.pc.close()
    warnings = [r.getMessage() for r in caplog.records if r.name == "edgepipe.serve.consent"]
    assert len(warnings) == 1
    assert "until aiortc's own expiry" in warnings[0]
