"""The pipeline of :mod:`.soak`: face_privacy's own graph plus a Describe node writing
continuously about the faces it finds.

    edgepipe run scripts/bench/soak_pipeline.py --source rtsp://127.0.0.1:8554/cam --lm tiny-lm/ \\
        --output soak.mp4 --duration 600 --results soak.jsonl

The graph is built by ``pipelines/face_privacy.py`` itself (camera -> faces -> pixelate -> MP4 and
viewers, a face-count log), so the soak runs exactly what users run; ``Describe`` (a small LM,
``scripts/make_tiny_lm.py``) takes the ``faces`` detections and the camera's state and starts a
new description ``every_s`` after the last one began (at once when writing takes longer).

Leak hunting: with ``SOAK_TRACE=PATH`` in the environment the process also starts
:mod:`tracemalloc` and a daemon thread that, every ``SOAK_TRACE_EVERY_S`` seconds (default 60),
appends to PATH the allocations that grew most since its first snapshot (by line), the
object types that grew most in number (a :mod:`gc` census) and glibc's own account of the heap
(``mallinfo2``: bytes in use and bytes free but kept, over every arena; native memory that
tracemalloc does not see). It slows the process down: use it to find what grows, not to
measure how much.
"""

from __future__ import annotations

import collections
import ctypes
import gc
import os
import threading
import time
import tracemalloc
from pathlib import Path

from edgepipe import Pipeline
from edgepipe.lm.describe import Describe
from edgepipe.lm.sampling import SamplingParams
from edgepipe.pipefile.loader import load_module

FACE_PRIVACY = Path(__file__).resolve().parents[2] / "pipelines" / "face_privacy.py"
TEMPLATE = "Camera: {state}. Last {seconds:.0f} s: {summary}.\nReport:"
TOP = 15
"""Lines of each kind in a trace report."""


def discard(item: object) -> None:
    """A sink: what reaches it is recorded by ``--results``, nothing more is done with it."""


def pipeline(
    source: str,
    lm: Path,
    model: str = "centerface",
    output: str = "",
    every_s: float = 0.5,
    window_s: float = 5.0,
    max_new_tokens: int = 32,
) -> Pipeline:
    """face_privacy (``source`` -> faces with ``model`` -> pixelate -> ``output``) + faces -> describe
    (``lm``, continuously) -> a sink."""
    if not (lm / "model.onnx").is_file():
        raise ValueError(f"--lm {lm}: no model.onnx in it (scripts/make_tiny_lm.py DIR makes one)")
    p: Pipeline = load_module(FACE_PRIVACY).pipeline(source=source, model=model, output=output)
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.8, top_p=0.95)
    describe = Describe(lm, template=TEMPLATE, window_s=window_s, every_s=every_s, params=params)
    words = p.stage("describe", describe, inputs="faces", policy="latest", queue_size=8)
    p.sink("words_out", discard, inputs=words, queue_size=64, on_loop=True)
    trace = os.environ.get("SOAK_TRACE")
    if trace:
        every = float(os.environ.get("SOAK_TRACE_EVERY_S", "60"))
        threading.Thread(target=_trace, args=(Path(trace), every), name="soak-trace", daemon=True).start()
    return p


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                                     "usmblks", "fsmblks", "uordblks", "fordblks",
                                                     "keepcost")]  # fmt: skip


def _heap() -> str:
    """glibc's heap: in use, free but kept (both over every arena), and mmapped blocks."""
    try:
        mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return "heap: no mallinfo2 here (glibc >= 2.33)"
    mallinfo2.restype = _MallInfo2
    info = mallinfo2()
    mib = 2**20
    return (f"heap: in use {info.uordblks / mib:.1f} MiB, free but kept {info.fordblks / mib:.1f} MiB, "
            f"mmapped {info.hblkhd / mib:.1f} MiB in {info.hblks} blocks")  # fmt: skip


def _census() -> collections.Counter[str]:
    return collections.Counter(type(o).__qualname__ for o in gc.get_objects())


def _trace(path: Path, every_s: float) -> None:
    """Every ``every_s``: what grew since the first snapshot, appended to ``path`` (a daemon
    thread: it dies with the process, never holds its exit)."""
    tracemalloc.start(8)
    time.sleep(every_s)  # the first snapshot after the warm-up: models loaded, pools filled
    gc.collect()
    base, base_count, t0 = tracemalloc.take_snapshot(), _census(), time.monotonic()
    with path.open("a", encoding="utf-8") as f:
        f.write(f"== the first snapshot\n  {_heap()}\n")
    while True:
        time.sleep(every_s)
        gc.collect()
        snap, count = tracemalloc.take_snapshot(), _census()
        current, _ = tracemalloc.get_traced_memory()
        elapsed = time.monotonic() - t0
        lines = [
            f"== {elapsed:.0f} s after the first snapshot; traced {current / 2**20:.1f} MiB",
            f"  {_heap()}",
        ]
        for stat in snap.compare_to(base, "lineno")[:TOP]:
            lines.append(
                f"  {stat.size_diff / 1024:+9.1f} KiB {stat.count_diff:+7d} blocks  {stat.traceback}"
            )
        grown = sorted(((n - base_count.get(name, 0), name) for name, n in count.items()), reverse=True)
        lines += [f"  {diff:+7d} {name}" for diff, name in grown[:TOP] if diff > 0]
        with path.open("a", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
