from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import av
import pytest

from edgepipe.core import native, threadname
from edgepipe.media.decode import StreamDecoder
from edgepipe.media.errors import DecoderError, SourceError
from edgepipe.media.frame import from_av
from edgepipe.media.hw import DecoderChoice
from edgepipe.media.url import parse
from tests.support.colour_clips import make_colour_clip


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A TCP server on 127.0.0.1 that accepts connections and never says a word; its port."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


@pytest.mark.parametrize("scheme", ["rtsp", "http"])
@pytest.mark.slow
def test_an_open_that_timed_out_says_so_and_what_to_check(silent_server: int, scheme: str) -> None:
    url = f"{scheme}://viewer:secret@127.0.0.1:{silent_server}/cam"
    with pytest.raises(SourceError) as caught:
        StreamDecoder(parse(url), timeout_s=0.5).open()
    assert str(caught.value) == (
        f"{scheme}://viewer:***@127.0.0.1:{silent_server}/cam: no answer within 0.5 s (the open timed "
        f"out); check that the server at 127.0.0.1:{silent_server} is up and serves this URL, or give "
        "it longer with timeout_s"
    )
    assert caught.value.retryable


@pytest.mark.slow
def test_an_open_in_progress_is_native_work_that_the_exit_does_not_wait_for(silent_server: int) -> None:
    # edgepipe's exit leaves with os._exit while it lasts: the interpreter finalizing under a
    # thread inside FFmpeg crashed (-11) in about one stop in 20 of a source stuck opening.
    decoder = StreamDecoder(parse(f"http://viewer:secret@127.0.0.1:{silent_server}/cam"), timeout_s=1.0)

    def open_until_its_deadline() -> None:
        with contextlib.suppress(SourceError):
            decoder.open()

    thread = threading.Thread(target=open_until_its_deadline, daemon=True)
    thread.start()
    deadline = time.monotonic() + 0.8
    while not native.in_progress() and time.monotonic() < deadline:
        time.sleep(0.005)
    t0 = time.monotonic()
    assert native.settle(1.0) == [f"opening http://viewer:***@127.0.0.1:{silent_server}/cam"]
    assert time.monotonic() - t0 < 0.5
    thread.join(5)
    assert native.in_progress() == []


def test_a_refused_connection_is_not_called_a_timeout() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, not listening: refused
        with pytest.raises(SourceError, match="cannot open: Connection refused"):
            StreamDecoder(parse(f"rtsp://127.0.0.1:{port}/cam"), timeout_s=2.0).open()


def test_switch_gives_the_open_input_another_decoder(clip: Path) -> None:
    decoder = StreamDecoder(parse(str(clip)), choice=DecoderChoice("h264", decoder="h264"))
    decoder.open()
    try:
        packets = list(decoder.packets())
        second_gop = [i for i, p in enumerate(packets) if p.is_keyframe][1]
        assert sum(len(decoder.decode(p)) for p in packets[:second_gop]) > 0  # the named decoder
        decoder.switch(DecoderChoice("h264"))  # at a keyframe, as a failover does
        assert decoder.choice == DecoderChoice("h264")
        frames = [f for p in packets[second_gop:] for f in decoder.decode(p)] + decoder.decode(None)
        assert len(frames) == len(packets) - second_gop  # the rest of the clip, by the new decoder
        with pytest.raises(DecoderError, match="no_such_decoder cannot decode here"):
            decoder.switch(DecoderChoice("h264", decoder="no_such_decoder"))
    finally:
        decoder.close()


def _tagged_in_the_container_only(tmp_path: Path) -> Path:
    """A clip whose H.264 says nothing about colour, remuxed into an MP4 whose track says
    BT.709 full range (as a camera's recorder may write it)."""
    plain = make_colour_clip(tmp_path / "plain.mp4", "bt709", True, 320, 240, tagged=False)
    out = tmp_path / "tagged.mp4"
    with av.open(str(plain)) as src, av.open(str(out), "w") as dst:
        stream = src.streams.video[0]
        copy = dst.add_stream_from_template(stream)
        ctx = copy.codec_context
        ctx.colorspace, ctx.color_range, ctx.color_primaries, ctx.color_trc = 1, 2, 1, 1
        for packet in src.demux(stream):
            if packet.dts is not None:
                packet.stream = copy
                dst.mux(packet)
    return out


def test_a_named_decoder_reads_the_containers_colour_tags(tmp_path: Path) -> None:
    clip = _tagged_in_the_container_only(tmp_path)
    # A named decoder (as a hardware one is: h264_v4l2m2m, h264_cuvid) gets its own context.
    decoder = StreamDecoder(parse(str(clip)), choice=DecoderChoice("h264", decoder="h264"))
    decoder.open()
    try:
        frames = [f for packet in decoder.packets() for f in decoder.decode(packet)]
        frames += decoder.decode(None)
    finally:
        decoder.close()
    frame = from_av(frames[0], source_id="clip", seq=0)
    assert (frame.matrix, frame.full_range) == ("bt709", True)


def test_the_codecs_threads_are_claimed_for_the_decode_threads_tag(clip: Path) -> None:
    # FFmpeg names its frame threads itself (av:h264:df0): the CPU ledger knows them by id.
    tag = threadname.Tag("cam0", "decode")
    seen: dict[str, object] = {}

    def decode_thread() -> None:
        threadname.name_thread(tag)  # as a source's decode thread does
        decoder = StreamDecoder(parse(str(clip)))
        decoder.open()
        try:
            before = set(threadname.claimed())
            frames = [f for p in decoder.packets() for f in decoder.decode(p)]
            claimed = {tid: t for tid, t in threadname.claimed().items() if tid not in before}
            seen["names"] = sorted(threadname.task_name(tid) for tid in claimed)
            seen["tags"] = set(claimed.values())
            seen["frames"] = len(frames)
        finally:
            decoder.close()

    thread = threading.Thread(target=decode_thread)
    thread.start()
    thread.join()
    assert seen["frames"]
    assert seen["tags"] == {tag}
    assert seen["names"]
    assert all(name.startswith("av:") or name == tag.name for name in seen["names"])
