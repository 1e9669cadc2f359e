"""The overload of :mod:`.bench`: cameras -> one face detector -> a writing LM.

    edgepipe run scripts/bench/headroom/pipeline.py --clip clip.mp4 --model tiny-lm/ --duration 40 \\
        --results out.jsonl --stats

Each camera is the same clip played at its own speed, looped, as a live input
(``realtime=True, loop=True, live=True``): like a camera, it drops the newest frame when its
consumers hold every one, instead of waiting. Every camera wants CenterFace on every frame
(``every=1``): more than the model can run, so the detector keeps up by its interval (the
tracker carries boxes between model runs). One Detector takes all cameras, a ``latest`` lane
of eight frames each: the form for several cameras (one model in memory, one session sized by
the CPU budget, the per-stream phases the governor staggers); full ``latest`` lanes are served
in turn, so no camera starves another. A lane holds eight frames: what arrives during a model
run (~45 ms: 1.5 frames a camera) and a burst after it. With one, each model run dropped about a
frame per camera, and each camera's rate of results wavered by 20% from second to second; with
four, 0.064-0.075 (``rate_cv``); with eight, 0.051-0.071.
``Describe`` writes continuously: a new description starts ``every_s`` after the last
one began, which is at once whenever writing takes longer. The detections and the tokens reach
sinks, so ``--results`` records each with its time (``t``): the benchmark cuts its windows on
those.
"""

from __future__ import annotations

from pathlib import Path

from edgepipe import Pipeline
from edgepipe.lm.describe import Describe
from edgepipe.lm.remote.engine import RemoteEngine
from edgepipe.lm.sampling import SamplingParams
from edgepipe.media import VideoSource
from edgepipe.vision import Detector

TEMPLATE = "Cameras: {state}. Last {seconds:.0f} s: {summary}.\nReport:"


def discard(item: object) -> None:
    """A sink: what reaches it is recorded by ``--results``, nothing more is done with it."""


def pipeline(
    clip: Path,
    model: Path,
    cameras: int = 4,
    every_s: float = 0.2,
    window_s: float = 5.0,
    max_new_tokens: int = 48,
    input_size: int = 640,
    server: str = "",
    fallback: bool = False,
    first_token_s: float = 2.0,
) -> Pipeline:
    """``cameras`` x clip -> faces (every frame) -> describe (continuously); faces and tokens to sinks.

    ``server``: the descriptions are written by that OpenAI-compatible engine (:mod:`scripts.bench.offload`),
    ``model`` writing while it cannot when ``fallback``."""
    if not clip.is_file():
        raise ValueError(f"--clip {clip}: no such file (scripts/make_sample_clip.py makes one)")
    if not (model / "model.onnx").is_file():
        raise ValueError(f"--model {model}: no model.onnx in it (scripts/make_tiny_lm.py DIR makes one)")
    if cameras < 1:
        raise ValueError(f"--cameras must be at least 1, got {cameras}")
    p = Pipeline("headroom")
    feeds = [p.source(f"cam{i}", VideoSource(str(clip), realtime=True, loop=True, live=True))
             for i in range(cameras)]  # fmt: skip
    faces = p.stage("faces", Detector("centerface", every=1, input_size=input_size), inputs=feeds,
                    policy="latest", queue_size=8, timeout_s=5.0)  # fmt: skip
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.8, top_p=0.95)
    # One description of all the cameras, as the headroom figures have always been measured
    # (Describe writes one per camera by default when it has several: another workload).
    engine = RemoteEngine(server, first_token_s=first_token_s) if server else None
    describe = Describe(engine or model, fallback=model if engine and fallback else None, template=TEMPLATE,
                        window_s=window_s, every_s=every_s, params=params, per_source=False)  # fmt: skip
    words = p.stage("describe", describe, inputs=faces, policy="latest", queue_size=8)
    p.sink("faces_out", discard, inputs=faces, queue_size=16, on_loop=True)
    p.sink("words_out", discard, inputs=words, queue_size=64, on_loop=True)
    return p
