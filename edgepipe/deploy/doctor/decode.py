"""Decode the first frames of one file with PyAV, in a process of its own.

``python -m edgepipe.deploy.doctor.decode PATH FRAMES BUDGET_BYTES`` prints one JSON object:
the container, the first video stream's codec, pixel format and size, how many of the first
``FRAMES`` frames decoded (``ended``: the stream had fewer), the errors met and FFmpeg's
warnings. A corrupt file can make a
decoder loop or crash; run here, it costs this process only (:mod:`.doctor_media` kills it at
its deadline). A picture whose decoded size (RGB, 3 bytes a pixel) passes ``BUDGET_BYTES`` (0:
no limit) is not decoded.
"""

from __future__ import annotations

import json
import sys
from typing import Any

MAX_LOG_LINES = 6
MAX_PACKETS = 2000
"""Packets demuxed at most, whatever decodes: a stream of undecodable packets ends here."""


def decode(path: str, frames: int, budget_bytes: int) -> dict[str, Any]:
    import av
    import av.logging

    av.logging.set_level(av.logging.WARNING)
    result: dict[str, Any] = {"frames": 0, "errors": 0}
    with av.logging.Capture() as logs:
        try:
            _decode(av, path, frames, budget_bytes, result)
        except av.error.FFmpegError as exc:
            result["open_error"] = str(exc.strerror or exc)
        except (OSError, ValueError, MemoryError) as exc:
            result["open_error"] = f"{type(exc).__name__}: {exc}"
    result["log"] = [f"[{name}] {text.strip()}" for _, name, text in logs[-MAX_LOG_LINES:] if text.strip()]
    return result


def _decode(av: Any, path: str, frames: int, budget_bytes: int, result: dict[str, Any]) -> None:
    with av.open(path) as container:
        result["format"] = container.format.name
        if not container.streams.video:
            kinds = sorted({s.type for s in container.streams})
            result["open_error"] = f"no video stream (streams: {', '.join(kinds) or 'none'})"
            return
        stream = container.streams.video[0]
        ctx = stream.codec_context
        result.update(codec=ctx.name, pix_fmt=ctx.pix_fmt, width=ctx.width, height=ctx.height,
                      declared_frames=stream.frames)  # fmt: skip
        if budget_bytes and ctx.width * ctx.height * 3 > budget_bytes:
            result["skipped"] = "too large for the memory budget"
            return
        for i, packet in enumerate(container.demux(stream)):
            if i >= MAX_PACKETS or result["frames"] >= frames:
                break
            try:
                for frame in packet.decode():
                    result["frames"] += 1
                    result["pix_fmt"] = frame.format.name
                    result["width"], result["height"] = frame.width, frame.height
            except av.error.FFmpegError as exc:
                result["errors"] += 1
                result.setdefault("first_error", str(exc.strerror or exc))
        else:  # the stream ended before FRAMES: a short video (whose container may not say so)
            result["ended"] = True


def main(argv: list[str]) -> int:
    path, frames, budget = argv[0], int(argv[1]), int(argv[2])
    print(json.dumps(decode(path, frames, budget)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
