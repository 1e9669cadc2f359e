"""The event recorder when things go wrong: a folder it cannot write in, clips that cannot be
opened, a stop racing a trigger, a clip larger than the folder's limit."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgepipe.core.context import NodeContext, set_current
from edgepipe.media.frame import from_rgb
from edgepipe.sinks.events import engine as events_engine
from edgepipe.sinks.events.recorder import EventRecorder
from edgepipe.wire.results import Message


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


@pytest.mark.slow
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


# -- a stop cut short by its deadline (the node's hook timeout) -----------------------------------

CUT = "the stop's deadline passed before the clip was finished"


class Held:
    """Holds the recorder's worker inside a call until released (the stop's deadline passes
    meanwhile), and says when that call returned."""

    def __init__(self) -> None:
        self.reached, self.release, self.done = threading.Event(), threading.Event(), threading.Event()

    def hold(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def held(*args: Any, **kwargs: Any) -> Any:
            self.reached.set()
            assert self.release.wait(10)
            return fn(*args, **kwargs)

        return held

    def mark_done(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def marked(*args: Any) -> Any:
            try:
                return fn(*args)
            finally:
                self.done.set()

        return marked


def _then(fn: Callable[..., Any], after: Callable[[], None]) -> Callable[..., Any]:
    def both(*args: Any) -> Any:
        out = fn(*args)
        after()
        return out

    return both


async def _recording(tmp_path: Path, sent: list[dict[str, Any]]) -> EventRecorder:
    """A recorder writing a clip, in a node whose events go to ``sent``."""

    async def emit_event(kind: str, data: dict[str, Any]) -> None:
        sent.append(data)

    set_current(NodeContext("events", 1, emit_event))
    recorder = EventRecorder(tmp_path / "events", pre_s=1.0, post_s=60.0)
    await recorder.start()
    await _frames(recorder, 0, 20, cue_at=10)  # its start: yielded by the stream, as in a run
    assert recorder.engine.part is not None
    return recorder


async def _stop_cut_short(recorder: EventRecorder, held: Held) -> None:
    """stop(), cancelled (as its hook timeout does) while the worker is held."""
    stopping = asyncio.create_task(recorder.stop())
    assert await asyncio.to_thread(held.reached.wait, 10)
    stopping.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await stopping


async def test_a_stop_cut_short_before_the_clip_is_finished_sends_its_removed_once(tmp_path: Path) -> None:
    sent: list[dict[str, Any]] = []
    recorder = await _recording(tmp_path, sent)
    clip, part = recorder.engine.clip_path, recorder.engine.part
    held = Held()
    recorder.engine.close = held.mark_done(held.hold(recorder.engine.close))  # type: ignore[method-assign]
    await _stop_cut_short(recorder, held)
    # old code: nothing sent, and the worker's "removed" stayed in the outbox for ever
    assert [(m["state"], m["ended_by"], m["error"], m["path"]) for m in sent] == [
        ("removed", "stopped", CUT, str(clip))
    ]
    assert part is not None
    assert not part.exists()
    held.release.set()
    assert await asyncio.to_thread(held.done.wait, 10)  # the worker finishes: it cannot name the clip
    assert len(sent) == 1
    assert not recorder._outbox  # its own "removed" is not a second closing waiting to go
    assert list((tmp_path / "events").iterdir()) == []
    assert recorder.failed_output == f"event clip {clip} lost: {CUT}"
    await recorder.start()  # started again (the node's error policy): it records as before
    messages = await _frames(recorder, 20, 20, cue_at=30)
    assert [m.data["state"] for m in messages] == ["start"]
    await recorder.stop()
    assert [m["state"] for m in sent] == ["removed", "end"]


@pytest.mark.parametrize("where", ["named, not yet said", "closed, not yet handed on"])
async def test_a_clip_named_just_before_the_stops_deadline_ends_saved_not_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    sent: list[dict[str, Any]] = []
    recorder = await _recording(tmp_path, sent)
    held = Held()
    close = recorder.engine.close
    if where == "named, not yet said":  # retention runs after the rename, before the message
        monkeypatch.setattr(events_engine, "prune", held.hold(events_engine.prune))
    else:
        close = _then(close, held.hold(lambda: None))
    recorder.engine.close = held.mark_done(close)  # type: ignore[method-assign]
    await _stop_cut_short(recorder, held)
    names = [p.name for p in (tmp_path / "events").iterdir()]
    assert len(names) == 1, names
    assert [(m["state"], m["ended_by"], m["error"]) for m in sent] == [("end", "stopped", None)]  # old: none
    assert sent[0]["path"] == str(tmp_path / "events" / names[0])
    assert sent[0]["frames"] > 10
    assert recorder.failed_output is None  # old code: "event clip … lost: the stop came before …"
    held.release.set()
    assert await asyncio.to_thread(held.done.wait, 10)
    assert len(sent) == 1
    assert not recorder._outbox
    assert recorder.failed_output is None


async def test_a_stop_cut_short_while_sending_still_sends_what_was_made(tmp_path: Path) -> None:
    sent: list[dict[str, Any]] = []
    emitting, never = asyncio.Event(), asyncio.Event()

    async def emit_event(kind: str, data: dict[str, Any]) -> None:
        sent.append(data)
        if len(sent) == 1:  # the first one: the results' disk is slow, and the deadline passes
            emitting.set()
            await never.wait()

    set_current(NodeContext("events", 1, emit_event))
    recorder = EventRecorder(tmp_path / "events", pre_s=1.0, post_s=60.0)
    await recorder.start()
    await _frames(recorder, 0, 20)
    await recorder._feed(Message("event", {"what": "cue", "source": "image"}))  # its start waits
    stopping = asyncio.create_task(recorder.stop())
    await emitting.wait()
    stopping.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await stopping
    assert [m["state"] for m in sent] == ["start", "end"]  # old code: ["start"], the end dropped
    assert not recorder._outbox
