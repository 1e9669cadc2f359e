"""The event recorder when things go wrong: a folder it cannot write in, clips that cannot be
opened, a stop racing a trigger, a clip larger than the folder's limit."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgepipe.core.context import NodeContext, set_current
from edgepipe.core.results import Message
from edgepipe.media.frame import from_rgb
from edgepipe.sinks import events_engine
from edgepipe.sinks.events import EventRecorder


async def _frames(
    recorder: EventRecorder, first: int, count: int, cue_at: int | None = None
) -> list[Message]:
    out: list[Message] = []
    for seq in range(first, first + count):
        frame = from_rgb(np.full((48, 64, 3), 10 * seq % 250, np.uint8), seq=seq)
        frame.t_decoded_ns = time.monotonic_ns()
        out += await recorder._take(frame)
        if seq == cue_at:
            out += await recorder._take(Message("event", {"what": "cue", "source": frame.source_id}))
    return out


def test_a_folder_clips_cannot_be_written_in_is_refused_at_declaration() -> None:
    # /proc/self: a folder that exists and that no one, root included, may create a file in.
    with pytest.raises(
        ValueError, match=r"events_dir: expected a folder files can be written in \(/proc/self: "
    ):
        EventRecorder("/proc/self")


async def test_clips_that_cannot_be_opened_are_logged_once_not_per_trigger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = EventRecorder(tmp_path / "events", pre_s=0.5, post_s=0.1)
    await recorder.start()

    def no_room(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(events_engine, "ClipWriter", no_room)
    with caplog.at_level(logging.INFO, logger="edgepipe.sinks"):
        await _frames(recorder, 0, 5)
        for seq in range(5, 30):  # a face in every frame: a trigger each
            await _frames(recorder, seq, 1, cue_at=seq)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, [r.getMessage() for r in errors]
    await recorder.stop()


async def test_a_trigger_still_on_the_worker_at_the_stop_leaves_no_part(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stream is cancelled while a trigger is on the worker (its await cancelled, the call
    not): stop() must finish (or remove) the clip that trigger opens after it looked, and send
    both its messages (the start the cancelled call made, and the end)."""
    sent: list[dict[str, Any]] = []

    async def emit_event(kind: str, data: dict[str, Any]) -> None:
        sent.append(data)

    set_current(NodeContext("events", 1, emit_event))
    folder = tmp_path / "events"
    recorder = EventRecorder(str(folder), pre_s=1.0, post_s=60.0)
    await recorder.start()
    await _frames(recorder, 0, 20)
    trigger = recorder.engine.trigger

    def slow_trigger(hit: events_engine.Hit) -> list[Message]:
        time.sleep(0.5)
        return trigger(hit)

    monkeypatch.setattr(recorder.engine, "trigger", slow_trigger)
    taking = asyncio.create_task(recorder._take(Message("event", {"what": "cue", "source": "image"})))
    await asyncio.sleep(0.1)
    taking.cancel()  # the stream closes: the await goes, the worker goes on
    await recorder.stop()
    await asyncio.sleep(1.0)  # whatever the worker had left
    names = [p.name for p in folder.iterdir()]
    assert not [n for n in names if n.startswith(".")], names  # old code: the .part stayed
    assert len(names) == 1  # the trigger's clip, finished by the stop
    assert [(m["state"], m["ended_by"]) for m in sent] == [
        ("start", None),
        ("end", "stopped"),
    ]  # old: no start


async def test_a_clip_over_max_bytes_by_itself_is_kept_and_its_event_names_a_file(tmp_path: Path) -> None:
    folder = tmp_path / "events"
    recorder = EventRecorder(str(folder), pre_s=0.5, post_s=0.2, max_bytes=100)
    await recorder.start()
    messages = await _frames(recorder, 0, 40, cue_at=10)
    messages += await recorder._run(recorder.engine.close, "ended")
    await recorder.stop()
    ends = [m.data for m in messages if m.data["state"] != "start"]
    assert [m["state"] for m in ends] == ["end"]
    # old code: the clip was deleted by retention right after it was saved
    assert await asyncio.to_thread(Path(ends[0]["path"]).exists)
