"""Which frames a detector's model sees (pure logic: frames are stand-ins, no model)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from edgepipe.core.context import CallLimit
from edgepipe.sched.stagger import phases
from edgepipe.vision.selection import ModelFrames


@pytest.fixture(autouse=True)
def _alone() -> Iterator[None]:
    """Each test's streams are the only ones taking turns (the process's phases, as a run's)."""
    phases().clear()
    yield
    phases().clear()


class _Frame:
    def __init__(self, source: str, seq: int, fps: float = 30.0) -> None:
        self.source_id, self.seq = source, seq
        self.t_decoded_ns = int(seq / fps * 1e9)


def chosen(choice: ModelFrames, source: str, seqs: range | list[int]) -> list[int]:
    return [seq for seq in seqs if choice.wants(_Frame(source, seq))]  # type: ignore[arg-type]


def test_one_frame_in_every_of_those_received_and_keeping_up_by_frame_number() -> None:
    choice = ModelFrames(every=4, keep_up=False)
    assert chosen(choice, "cam0", range(12)) == [0, 4, 8], "the first frame, then one in four"
    phases().clear()
    dropped = ModelFrames(every=2, keep_up=False)  # a latest lane passes one frame in three on
    assert chosen(dropped, "cam0", [0, 3, 6, 9, 12, 15]) == [0, 6, 12], "the tracker still has every other"
    phases().clear()
    keeping = ModelFrames(every=4, keep_up=True)
    keeping.keeps_up = True
    assert chosen(keeping, "cam0", [0, 1, 2, 3, 5, 6, 7, 9]) == [0, 5, 9], "4 and 8 never came: the next"


def test_cameras_take_turns_in_time() -> None:
    choice = ModelFrames(every=4, keep_up=True)
    choice.keeps_up = True
    runs = {}
    for seq in range(16):  # four cameras started together: their frames numbered alike
        for cam in range(4):
            if choice.wants(_Frame(f"cam{cam}", seq)):  # type: ignore[arg-type]
                runs.setdefault(seq, []).append(cam)
    later = {seq: cams for seq, cams in runs.items() if seq > 0}
    assert all(len(cams) == 1 for cams in later.values()), f"one camera a frame time: {later}"
    assert sorted(cam for cams in later.values() for cam in cams) == sorted([0, 1, 2, 3] * 3 + [1, 2, 3])


def test_keeping_up_a_frame_no_call_is_free_for_is_carried_and_its_cameras_next_takes_the_run() -> None:
    choice = ModelFrames(every=2, keep_up=True)
    choice.keeps_up = True  # live input, a tracker allowed: what the detector decides at start
    choice.calls = CallLimit(1, 1)
    assert chosen(choice, "cam0", [0, 1]) == [0]
    choice.calls.free = 0  # the model's call is under way
    assert chosen(choice, "cam0", [2, 3]) == [], "frame 2 would have had the model: carried"
    assert choice.gauges["deferred"] == 2, "and frame 3, owed it, too"
    choice.calls.free = 1
    assert chosen(choice, "cam0", [4]) == [4], "owed, the next frame has the model"
    assert chosen(choice, "cam0", [5, 6, 7]) == [6]
    pinned = ModelFrames(every=1, keep_up=False)  # not keeping up (a privacy filter): never deferred
    pinned.calls = CallLimit(1, 1)
    pinned.calls.free = 0
    assert chosen(pinned, "cam0", [0, 1, 2]) == [0, 1, 2]
