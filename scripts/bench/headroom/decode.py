"""The decode loop of :mod:`.bench`'s bare costs: plain PyAV, as the cameras
deliver (see :func:`bare_decode`)."""

from __future__ import annotations

import threading
import time
from typing import Any

import av

from edgepipe.media import VideoSource
from edgepipe.media.decode import StreamDecoder


def bare_decode(
    source: VideoSource, seconds: float, threads: int, cameras: int
) -> tuple[float, dict[str, Any]]:
    """CPU seconds per frame of plain PyAV decode loops over the source's file, with the thread
    type edgepipe's decoder opens it with and the run's ``threads`` per decoder (0: FFmpeg's
    choice): ``cameras`` loops at once, each on a thread of its own taking a frame every frame
    time (the clip's rate) as a camera delivers them (the cost judged), and one loop decoding
    back to back (printed beside it). A decoder that sleeps between frames starts each on cold caches: a
    1080p frame paced at 30 fps took 2.6 CPU-ms against 1.9 back to back, here, in plain PyAV;
    the cameras deliver in real time, so the paced loops are the same work as the run's."""
    decoder = StreamDecoder(source.src, timeout_s=source.timeout_s, rtsp_transport=source.rtsp_transport,
                            options=source.options)  # fmt: skip
    decoder.open()
    try:
        thread_type = decoder.stream.thread_type  # av's enum: set as it is, shown by name
        fps = float(decoder.stream.average_rate or 30)
    finally:
        decoder.close()

    def loop(paced: bool, out: list[tuple[int, float, int]]) -> None:
        frames, used, t_next = 0, threads, time.monotonic()
        cpu0, end = time.thread_time(), time.monotonic() + seconds
        while time.monotonic() < end or frames == 0:
            with av.open(source.src.target) as container:
                stream = container.streams.video[0]
                stream.thread_type = thread_type
                stream.codec_context.thread_count = threads
                for _ in container.decode(stream):
                    frames += 1
                    if paced:
                        t_next += 1 / fps
                        time.sleep(max(0.0, t_next - time.monotonic()))
                    if time.monotonic() >= end:
                        break
                used = int(stream.codec_context.thread_count)
        out.append((frames, time.thread_time() - cpu0, used))

    # FFmpeg's own threads (thread_count > 1) are not on the loop's clock: count them by process.
    per_thread = threads == 1
    cpu0 = time.process_time()
    solo: list[tuple[int, float, int]] = []
    loop(False, solo)
    solo_cpu = (solo[0][1] if per_thread else time.process_time() - cpu0) / solo[0][0]
    cpu0 = time.process_time()
    paced: list[tuple[int, float, int]] = []
    workers = [threading.Thread(target=loop, args=(True, paced)) for _ in range(cameras)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    frames = sum(f for f, _, _ in paced)
    paced_cpu = (sum(c for _, c, _ in paced) if per_thread else time.process_time() - cpu0) / frames
    info = {"frames": frames, "cpu_ms_per_frame": round(paced_cpu * 1000, 3), "paced_streams": cameras,
            "fps": fps, "back_to_back_cpu_ms_per_frame": round(solo_cpu * 1000, 3),
            "thread_type": getattr(thread_type, "name", str(thread_type)),
            "thread_count": threads, "threads_used": solo[0][2]}  # fmt: skip
    return paced_cpu, info
