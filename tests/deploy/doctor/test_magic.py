from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import av
import numpy as np
import pytest

from edgepipe.deploy.doctor.magic import claimed_kind, read_vint, same_family, sniff
from scripts.make_doctor_samples import encode_image, photo


def encoded(codec: str, fmt: str) -> bytes:
    """A real picture written by FFmpeg's muxer for ``fmt`` (gif, bmp, tiff, webp)."""
    rgb = photo()[:64, :64]
    buf = io.BytesIO()
    with av.open(buf, "w", format=fmt) as container:
        stream = container.add_stream(codec, rate=1)
        stream.width, stream.height = 64, 64
        stream.pix_fmt = {"gif": "rgb8", "bmp": "bgr24", "tiff": "rgb24", "libwebp": "yuv420p"}[codec]
        frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
        for packet in [*stream.encode(frame.reformat(format=stream.pix_fmt)), *stream.encode(None)]:
            container.mux(packet)
    return buf.getvalue()


def test_pictures_encoded_by_ffmpeg_are_told_by_their_first_bytes() -> None:
    rgb = photo()
    assert sniff(encode_image(rgb, "mjpeg")).kind == "jpeg"
    assert sniff(encode_image(rgb, "png")).kind == "png"
    assert sniff(encoded("gif", "gif")).kind == "gif"
    assert sniff(encoded("bmp", "image2pipe")).kind == "bmp"
    assert sniff(encoded("tiff", "image2pipe")).kind == "tiff"
    if "libwebp" in av.codecs_available:
        assert sniff(encoded("libwebp", "webp")).kind == "webp"


@pytest.mark.parametrize(
    ("head", "kind"),
    [
        (b"MM\x00*\x00\x00\x00\x08", "tiff"),
        (b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic", "heif"),
        (b"\x00\x00\x00\x1cftypavif\x00\x00\x00\x00avifmif1miaf", "avif"),
        (b"\x00\x00\x00\x14ftypqt  \x00\x00\x02\x00qt  ", "mov"),
        (b"\x00\x00\x00\x18ftypmp42\x00\x00\x00\x00mp42isom", "mp4"),
        (b"RIFF\x00\x10\x00\x00AVI LIST", "avi"),
        (b"GIF87a\x01\x00\x01\x00", "gif"),
        (b"hello, world\n", "unknown"),
        (b"\x00\x00\x01\xff\xff", "unknown"),  # a start code, but no NAL unit of either codec
    ],
)
def test_hand_made_heads(head: bytes, kind: str) -> None:
    assert sniff(head).kind == kind


@pytest.mark.parametrize(("name", "kind"), [("cam.h264", "h264"), ("cam.h265", "h265"), ("cam.ts", "mpegts"),
                                            ("cam.mkv", "mkv")])  # fmt: skip
def test_streams_and_containers_from_real_clips(make_clip: Callable[..., Path], name: str, kind: str) -> None:
    path = make_clip("magic-" + name, width=160, height=120, fps=10, seconds=0.5)
    found = sniff(path.read_bytes()[: 64 * 1024])
    assert found.kind == kind, found
    if kind == "mkv":
        assert found.details["doctype"] == "matroska"
    if kind in ("h264", "h265"):
        assert "SPS" in found.evidence
        assert "PPS" in found.evidence


def test_webm_is_told_by_its_doctype(tmp_path: Path) -> None:
    if "libvpx-vp9" not in av.codecs_available:
        pytest.skip("no VP9 encoder in this FFmpeg")
    path = tmp_path / "a.webm"
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libvpx-vp9", rate=5)
        stream.width, stream.height, stream.pix_fmt = 64, 64, "yuv420p"
        frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(photo()[:64, :64]), format="rgb24")
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            container.mux(packet)
    assert sniff(path.read_bytes()).kind == "webm"


def test_extensions_and_families() -> None:
    assert claimed_kind(Path("a.JPG")) == "jpeg"
    assert claimed_kind(Path("a.onnx")) is None
    assert same_family("mp4", "mov")
    assert same_family("mkv", "webm")
    assert not same_family("jpeg", "png")


def test_ebml_variable_length_integers() -> None:
    assert read_vint(b"\x81", 0) == (1, 1)
    assert read_vint(b"\x40\x02", 0) == (2, 2)
    assert read_vint(b"\x1a\x45\xdf\xa3", 0, keep_marker=True) == (0x1A45DFA3, 4)
    assert read_vint(b"\x40", 0) is None  # cut short
