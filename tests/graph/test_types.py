from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

from edgepipe.graph.types import compatible, declared_types, type_name


class Frame: ...


class NV12Frame(Frame): ...


async def camera() -> AsyncIterator[NV12Frame]:
    yield NV12Frame()


def frames() -> Iterator[Frame]:
    yield Frame()


def detect(frame: Frame) -> list[int] | None:
    return None


async def stream(items: AsyncIterator[Frame]) -> AsyncIterator[str]:
    yield ""


class Sink:
    def process(self, item: int | str) -> None: ...


def test_declared_types_read_the_annotations() -> None:
    assert declared_types(camera, "source") == (None, NV12Frame)
    assert declared_types(frames, "source") == (None, Frame)
    assert declared_types(detect, "stage") == (Frame, list[int])
    assert declared_types(stream, "stage") == (Frame, str)
    assert declared_types(Sink(), "sink") == (int | str, None)
    assert declared_types(lambda x: x, "stage") == (None, None)


def test_compatibility() -> None:
    assert compatible(NV12Frame, Frame)
    assert not compatible(Frame, NV12Frame)
    assert compatible(int, int | str)
    assert not compatible(float, int | str)
    assert compatible(None, int)
    assert compatible(int, None)
    assert compatible(list[int], list[str])  # generics compare by origin only
    assert type_name(int | None) == "int | None"
    assert type_name(Frame) == "Frame"


def test_a_video_source_declares_frames_which_are_perishable() -> None:
    from edgepipe.graph.types import perishable
    from edgepipe.media import Frame as VideoFrame
    from edgepipe.media import VideoSource
    from edgepipe.testing import FakeSource

    assert declared_types(VideoSource("synthetic://64x48@5"), "source") == (None, VideoFrame)  # old: None
    assert perishable(VideoFrame)
    assert not perishable(Frame)
    assert declared_types(FakeSource([1]), "source") == (None, None)  # a generic's T: unknown
