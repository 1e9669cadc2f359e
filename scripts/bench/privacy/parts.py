"""The bare loops of :mod:`.bench`: each part of face_privacy alone, by the plainest
means, with the settings the pipeline uses (see that script's docstring).

Each returns :class:`~.figures.Part` figures (CPU over units) measured in this process:
run them with nothing else running in it. The inputs of the model, pixelate and encode loops
come from a one-thread decoder whose time (``time.thread_time`` on this thread) is taken out of
the loop's process CPU, so native threads (ONNX Runtime's, the encoder's) count where they
belong.
"""

from __future__ import annotations

import time
from fractions import Fraction
from pathlib import Path
from typing import Any

from scripts.bench.privacy.figures import Part


class _Clock:
    """Process CPU of a loop less this thread's CPU in the steps that feed it (a one-thread
    decoder, the copy): what the measured step took, its native threads included."""

    def __init__(self) -> None:
        self.excluded_s = 0.0
        self._cpu0 = time.process_time()

    def exclude(self, fn: Any, *args: Any) -> Any:
        t0 = time.thread_time()
        try:
            return fn(*args)
        finally:
            self.excluded_s += time.thread_time() - t0

    def cpu_s(self) -> float:
        return time.process_time() - self._cpu0 - self.excluded_s


def _one_thread_frames(clip: Path) -> Any:
    """The clip's frames from a decoder with no threads of its own (its time is this thread's)."""
    import av

    container = av.open(str(clip))
    stream = container.streams.video[0]
    stream.thread_count = 1
    return container, container.decode(stream)


def bare_decode(clip: Path) -> Part:
    """A plain PyAV decode loop, threaded as edgepipe's decoder is (``thread_type = "AUTO"``)."""
    import av

    cpu0, frames = time.process_time(), 0
    with av.open(str(clip)) as container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        for _ in container.decode(stream):
            frames += 1
    return Part("decode", time.process_time() - cpu0, frames)


def bare_model(
    clip: Path, input_size: int, threshold: float, every: int
) -> tuple[Part, dict[int, list[Any]]]:
    """Preprocess + ``session.run`` + adapter + NMS on one frame in ``every``; the boxes found,
    per frame index (carried over the frames between runs)."""
    from edgepipe.infer import SessionConfig, resolve
    from edgepipe.infer.loading import load_session
    from edgepipe.media.frame import from_av
    from edgepipe.media.tensor import Preprocessor
    from edgepipe.vision import adapters
    from edgepipe.vision.model import read_input
    from edgepipe.vision.nms import nms
    from edgepipe.vision.preprocess import Normalize, input_format, tensor_buffers

    resolved = resolve("centerface")
    # As the Detector loads it: its SessionConfig (deadline aside), the registry's free image
    # dims, one intra-op thread (each of its calls in flight has one); the same cached
    # optimized graph.
    free_dims = bool(resolved.entry and resolved.entry.free_image_dims)
    config = SessionConfig(timeout_s=2.0, free_image_dims=free_dims)
    session, _ = load_session(resolved.path, config, name=resolved.name, threads=1)
    name = session.get_inputs()[0].name
    layout, fixed, dtype = read_input(resolved.path, config.free_image_dims)
    names = [o.name for o in session.get_outputs()]
    container, frames = _one_thread_frames(clip)
    boxes: dict[int, list[Any]] = {}
    pre = None
    found: list[Any] = []
    runs = 0
    with container:
        first = next(frames)
        fmt = input_format(layout, fixed, dtype, Normalize(scale=1.0), input_size=input_size,
                           width=first.width, height=first.height)  # fmt: skip
        pre = Preprocessor(fmt, "auto", buffers=tensor_buffers(1))
        # One run at this size before timing: the pipeline's first run is outside its window too.
        session.run(None, {name: pre(from_av(first, source_id="bench", seq=0))[0]})
        clock = _Clock()
        index, av_frame = 0, first
        while av_frame is not None:
            if index % every == 0:
                frame = from_av(av_frame, source_id="bench", seq=index)
                tensor, box = pre(frame)
                outputs = session.run(None, {name: tensor})
                cand = adapters.decode("centerface", outputs, names, threshold, fmt.width, fmt.height)
                if len(cand.scores):
                    cand = cand.take(nms(cand.boxes, cand.scores, adapters.DEFAULT_IOU["centerface"],
                                         cand.class_ids, 100))  # fmt: skip
                box.to_source(cand.boxes)
                found = [tuple(float(v) for v in b) for b in cand.boxes]
                runs += 1
            boxes[index] = found
            index += 1
            av_frame = clock.exclude(next, frames, None)
    return Part("model", clock.cpu_s(), runs), boxes


def bare_pixelate_encode(clip: Path, boxes: dict[int, list[Any]], folder: Path) -> tuple[Part, Part]:
    """Copy each frame once into an encoder frame, pixelate its boxes, encode it as the
    Recorder would, and mux it: (pixelate, encode)."""
    import av
    import numpy as np

    from edgepipe.media.colour import AVCOL_RANGE_JPEG, AVCOL_RANGE_MPEG, AVCOL_SPC_OF
    from edgepipe.media.draw import blur_region
    from edgepipe.media.frame import I420, Frame, from_av
    from edgepipe.media.recording.file import LAYOUTS
    from edgepipe.media.recording.recorder import ENCODER_OPTIONS, Colour, Recorder, pick_encoder
    from edgepipe.vision.overlay import Redact

    output = folder / "bare.mp4"
    recorder = Recorder(output)  # its defaults: fps, crf
    margin = Redact().margin
    container, frames = _one_thread_frames(clip)
    out = av.open(str(output), "w", options=LAYOUTS.get("mp4", {}))  # fragmented, as recorded
    src = next(frames)
    w, h = src.width // 2 * 2, src.height // 2 * 2
    view = from_av(src, source_id="bench", seq=0)
    matrix, full = view.matrix, view.full_range
    # As Recorder._open_stream sets up libx264 (yuv420p), before timing starts.
    name = pick_encoder(w, h)
    stream = out.add_stream(name, rate=Fraction(recorder.fps).limit_denominator(1000))
    stream.width, stream.height = w, h
    stream.pix_fmt = "yuv420p" if name == "libx264" else "nv12"
    Colour.of(view).tag(stream.codec_context)
    stream.time_base = stream.codec_context.time_base = Fraction(1, 1000)
    stream.codec_context.gop_size = max(1, round(recorder.fps))
    stream.options = ENCODER_OPTIONS.get(name, {}) | ({"crf": str(recorder.crf)} if name == "libx264" else {})
    del view
    cpu_pixelate_s = 0.0
    count = 0
    clock = _Clock()
    with container, out:
        for index in range(len(boxes)):
            if index:
                src = clock.exclude(next, frames, None)
            if src is None:
                break
            t0 = time.thread_time()
            dst = av.VideoFrame(w, h, "yuv420p")
            planes = []
            for i, (p_src, p_dst) in enumerate(zip(src.planes, dst.planes, strict=True)):
                rows, cols = (h, w) if i == 0 else (h // 2, w // 2)
                a = np.frombuffer(p_src, np.uint8).reshape(-1, p_src.line_size)[:rows, :cols]
                b = np.frombuffer(p_dst, np.uint8).reshape(-1, p_dst.line_size)[:rows, :cols]
                np.copyto(b, a)
                planes.append(b)
            frame = Frame(format=I420, y=planes[0], u=planes[1], v=planes[2], matrix=matrix, full_range=full)
            for x1, y1, x2, y2 in boxes[index]:
                dx, dy = (x2 - x1) * margin, (y2 - y1) * margin
                blur_region(frame, (x1 - dx, y1 - dy, x2 + dx, y2 + dy))
            dst.colorspace = AVCOL_SPC_OF[matrix]
            dst.color_range = AVCOL_RANGE_JPEG if full else AVCOL_RANGE_MPEG
            dst.pts = round(float(src.pts * src.time_base) * 1000)
            dst.time_base = Fraction(1, 1000)
            cpu_pixelate_s += time.thread_time() - t0
            clock.excluded_s += time.thread_time() - t0
            for packet in stream.encode(dst):
                out.mux(packet)
            count += 1
        for packet in stream.encode(None):
            out.mux(packet)
    return Part("pixelate", cpu_pixelate_s, count), Part("encode", clock.cpu_s(), count)
