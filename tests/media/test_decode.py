from __future__ import annotations

from pathlib import Path

import av

from edgepipe.media.decode import StreamDecoder
from edgepipe.media.frame import from_av
from edgepipe.media.hw import DecoderChoice
from edgepipe.media.url import parse
from tests.colour_clips import make_colour_clip


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
