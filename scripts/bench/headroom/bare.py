"""The bare loops of :mod:`.bench`: each unit of the pipeline's counted work done
the plainest way, alone, with the settings the governed run used, timed in CPU seconds.

- decode (:mod:`.decode`): plain PyAV loops over the clip (``av.open``, ``decode``),
  with the thread type edgepipe's own decoder (:class:`~edgepipe.media.decode.StreamDecoder`) opens the
  pipeline's source with and the run's decoder threads, one per camera, each at the clip's
  frame rate as a camera delivers (and one back to back, printed beside);
- model: edgepipe's NV12 -> tensor step (:class:`~edgepipe.vision.preprocess.TensorCache`, as
  the detector makes it) then a plain ``ort.InferenceSession.run`` of the same model file,
  loaded as edgepipe loads it (the cached optimized graph, the run's intra-op threads and
  spinning), then the outputs to boxes (:class:`~edgepipe.vision.decoding.DetectionDecoder`);
- tracker: :class:`~edgepipe.vision.tracker.SourceTrackers` updates and carries replaying the
  governed runs' own outputs (their boxes, sources and frame numbers), in order;
- writing: ``json.dumps`` and a write of the governed run's own result lines, each kind as often
  as the run wrote it;
- LM: the same model folder (:class:`~edgepipe.lm.generate.LanguageModel`, the run's threads and
  spinning) prefilling one of the run's own prompts, then generating with the run's sampling.

CPU is ``time.process_time()`` (every thread of this process: FFmpeg's and ONNX Runtime's too),
except for the tracker, whose calls are microseconds apart (``time.thread_time()`` around each).
Everything blocks; nothing here runs while a pipeline does.
"""

from __future__ import annotations

import itertools
import json
import re
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import av

from edgepipe.infer.config import SessionConfig
from edgepipe.infer.loading import load_session
from edgepipe.infer.registry import resolve
from edgepipe.lm.describe import Describe
from edgepipe.lm.generate import LanguageModel
from edgepipe.media import VideoSource
from edgepipe.media.frame import Frame, from_av
from edgepipe.sched import cpu_budget
from edgepipe.vision import Detector
from edgepipe.vision.decoding import DetectionDecoder
from edgepipe.vision.detection import Detection, Detections
from edgepipe.vision.model import load_model
from edgepipe.vision.preprocess import TensorCache
from edgepipe.vision.tracker import SourceTrackers
from scripts.bench.headroom.decode import bare_decode
from scripts.bench.headroom.figures import parse_models
from scripts.bench.headroom.summary import BareCosts

MODEL_FRAMES = 24
"""Frames of the clip the model loop goes through in turn (every 10th: different pictures)."""


@dataclass(frozen=True, slots=True)
class RunSettings:
    """What the governed run's models were loaded with (from its log, else computed)."""

    detector_threads: int
    detector_spinning: bool
    lm_threads: int
    lm_spinning: bool
    decoder_threads: int
    """Threads per video decoder the run logged in its CPU budget line (0: FFmpeg's choice)."""
    found_in_log: bool
    """False: a model's line was missing and its settings were computed as the run would."""


@dataclass(frozen=True, slots=True)
class Replayed:
    """One detector output of a run, as the tracker saw it."""

    source: str
    seq: int
    inferred: bool
    items: tuple[Detection, ...]


class _Clock:
    """Process CPU and wall time since it was made."""

    def __init__(self) -> None:
        self.cpu0, self.wall0 = time.process_time(), time.perf_counter()

    @property
    def cpu_s(self) -> float:
        return time.process_time() - self.cpu0

    @property
    def wall_s(self) -> float:
        return time.perf_counter() - self.wall0


def clip_frames(path: str, count: int, every: int = 10) -> list[Frame]:
    """``count`` frames of the clip, every ``every``-th from the start (looping), as the source
    hands them to the detector."""
    frames: list[Frame] = []
    while len(frames) < count:
        with av.open(path) as container:
            for index, av_frame in enumerate(container.decode(video=0)):
                if index % every == 0:
                    frames.append(from_av(av_frame, source_id="bare", seq=index))
                if len(frames) == count:
                    break
    return frames


def bare_model(
    detector: Detector, clip: str, threads: int, spinning: bool, seconds: float
) -> tuple[float, float, dict[str, Any]]:
    """``(CPU s per model run, mean wall ms of one session.run, info)``: frames of the clip to
    tensors (edgepipe's step, as the detector makes it), a plain ``session.run`` on the same
    model loaded the same way, outputs to boxes."""
    wanted = detector.config
    config = replace(wanted.session_config, threads=threads, spinning=spinning)
    resolved = resolve(wanted.model)
    if resolved.entry is not None and resolved.entry.free_image_dims:
        config = replace(config, free_image_dims=True)  # as load_model makes it
    # edgepipe's model (for its layout, input type and output names) and the plain session.
    model = load_model(wanted.model, config, adapter=detector.adapter, labels=detector.labels,
                       input_size=wanted.input_size, owner="bare")  # fmt: skip
    plain, optimized = load_session(resolved.path, config, name=resolved.name, threads=threads)
    try:
        tensors = TensorCache(model, input_size=wanted.input_size, normalize=wanted.normalize,
                              method=wanted.preprocess, owner="bare")  # fmt: skip
        boxes = DetectionDecoder(
            model, score_threshold=wanted.score_threshold, iou_threshold=wanted.iou_threshold,
            classes=frozenset(wanted.classes) if wanted.classes else None,
            max_detections=wanted.max_detections, box_format=wanted.box_format,
        )  # fmt: skip
        frames = clip_frames(clip, MODEL_FRAMES)
        name = plain.get_inputs()[0].name
        for frame in frames[:3]:  # warm-up: first runs at a size allocate
            plain.run(None, {name: tensors(frame)[0]})
        walls: list[float] = []
        clock = _Clock()
        for frame in itertools.cycle(frames):
            tensor, letterbox = tensors(frame)
            t0 = time.perf_counter()
            outputs = plain.run(None, {name: tensor})
            walls.append(time.perf_counter() - t0)
            boxes.decode(outputs, tensor.shape, letterbox)
            if clock.wall_s >= seconds:
                break
        cpu = clock.cpu_s / len(walls)
        fmt = tensors.input_format
    finally:
        model.session.close()
    info = {"runs": len(walls), "cpu_ms_per_run": round(cpu * 1000, 3),
            "run_wall_ms_mean": round(statistics.fmean(walls) * 1000, 3),
            "run_wall_ms_median": round(statistics.median(walls) * 1000, 3),
            "input": f"{fmt.width}x{fmt.height}" if fmt else None, "preprocess": tensors.method,
            "threads": threads, "spinning": spinning,
            "graph": str(optimized or resolved.path)}  # fmt: skip
    return cpu, statistics.fmean(walls) * 1000, info


def replay_outputs(results: Path) -> list[Replayed]:
    """A run's detector outputs in the order it wrote them, with their boxes."""
    out: list[Replayed] = []
    for line in _records(results):
        if line.get("kind") == "detections":
            data = line["data"]
            items = tuple(Detection.from_dict(d) for d in data.get("detections", []))
            out.append(Replayed(str(data["source"]), int(data["seq"]), bool(data["inferred"]), items))
    return out


def bare_tracker(runs: Sequence[Sequence[Replayed]], seconds: float) -> tuple[float, float, dict[str, Any]]:
    """``(CPU s per update, CPU s per carry, info)``: each run's outputs replayed through fresh
    trackers, passes until ``seconds`` have gone; a replay without carries adds one after each
    update, so that a carry has a cost."""
    carries = any(not o.inferred for run in runs for o in run)
    spent = {True: 0.0, False: 0.0}
    counts = {True: 0, False: 0}
    start = time.perf_counter()
    while any(runs) and (time.perf_counter() - start < seconds or not counts[True]):
        for run in runs:
            trackers = SourceTrackers()
            # Fresh boxes each pass, made before the clock runs: updates write track ids into them.
            fresh = [(o, [replace(d) for d in o.items]) for o in run]
            for output, items in fresh:
                steps = [(output.inferred, output.seq)] + ([] if carries else [(False, output.seq + 1)])
                for inferred, seq in steps:
                    c0 = time.thread_time()
                    if inferred:
                        trackers.update(output.source, items, seq)
                    else:
                        trackers.predict(output.source, seq)
                    spent[inferred] += time.thread_time() - c0
                    counts[inferred] += 1
    update = spent[True] / counts[True] if counts[True] else 0.0
    predict = spent[False] / counts[False] if counts[False] else 0.0
    info = {"updates": counts[True], "carries": counts[False], "update_us": round(update * 1e6, 2),
            "carry_us": round(predict * 1e6, 2), "carries_added": not carries}  # fmt: skip
    return update, predict, info


def typical_prompt(results: Path) -> str | None:
    """The prompt of the run's description of median prompt length (None without any)."""
    prompts = sorted(
        (int(r["data"].get("prompt_tokens") or 0), str(r["data"]["prompt"]))
        for r in _records(results)
        if r.get("kind") == "event" and isinstance(r["data"].get("prompt"), str)
    )
    return prompts[len(prompts) // 2][1] if prompts else None


def run_settings(log_text: str, detector: Detector, describe: Describe) -> RunSettings:
    """The intra-op threads and spinning each model of the run was loaded with, from its log's
    ``loaded in`` lines; where a line is missing, computed as the run would (this process's
    CPU budget, the node's session config)."""
    models = parse_models(log_text)
    budget = cpu_budget().threads
    assert describe.worker is not None  # the headroom workload writes locally
    lm_config = describe.worker.session_config or SessionConfig()

    def line_of(model: str | Path) -> dict[str, Any] | None:  # a name, or a path given another way
        return models.get(str(model)) or next(
            (v for k, v in models.items() if Path(k).stem == Path(model).stem), None
        )

    found_det, found_lm = line_of(detector.config.model), line_of(describe.worker.model)
    det_config = detector.config.session_config
    decoders = re.search(r"(\d+) thread\(s\) per video decoder", log_text)
    return RunSettings(
        detector_threads=found_det["threads"] if found_det else det_config.threads or budget,
        detector_spinning=found_det["spinning"] if found_det else det_config.spinning,
        lm_threads=found_lm["threads"] if found_lm else lm_config.threads or budget,
        lm_spinning=found_lm["spinning"] if found_lm else lm_config.spinning,
        decoder_threads=int(decoders.group(1)) if decoders else 0,
        found_in_log=found_det is not None and found_lm is not None,
    )


def _records(results: Path) -> Iterator[dict[str, Any]]:
    with results.open(encoding="utf-8") as f:
        for line in f:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and isinstance(record.get("data"), dict):
                yield record


def bare_writing(results: Path, scratch: Path, seconds: float) -> tuple[float, dict[str, Any]]:
    """CPU seconds per result line: the run's own lines (detections as the detector's
    :class:`Detections`, the rest as their dicts) through ``json.dumps`` and a buffered write,
    in turn, until ``seconds`` have gone."""
    items: list[tuple[dict[str, Any], Any]] = []
    for record in _records(results):
        data = record["data"]
        items.append((record, Detections.from_dict(data) if record["kind"] == "detections" else data))
    if not items:
        return 0.0, {"lines": 0}
    lines = 0
    with scratch.open("w", encoding="utf-8") as f:
        clock = _Clock()
        while clock.wall_s < seconds or not lines:
            for record, data in items:
                body = data.to_dict() if isinstance(data, Detections) else data
                line = {"t": record["t"], "node": record["node"], "kind": record["kind"], "data": body}
                f.write(json.dumps(line, separators=(",", ":")) + "\n")
            lines += len(items)
        cpu = clock.cpu_s
    scratch.unlink()
    return cpu / lines, {"lines": lines, "cpu_us_per_line": round(cpu / lines * 1e6, 2)}


def bare_lm(
    describe: Describe, prompt: str, threads: int, spinning: bool, seconds: float
) -> tuple[float, float, dict[str, Any]]:
    """``(CPU s per generated token, CPU s per prompt token, info)``: the run's LM with its
    threads and spinning; a quarter of ``seconds`` prefilling ``prompt``, the rest whole
    requests with the pipeline's sampling (their prefill taken out at the cost just measured)."""
    worker = describe.worker
    assert worker is not None  # the headroom workload writes locally
    base = worker.session_config or SessionConfig(timeout_s=30.0)  # DecoderRunner's default
    lm = LanguageModel(worker.model, max_seq_len=worker.max_seq_len, prefill_chunk=worker.prefill_chunk,
                       session=replace(base, threads=threads, spinning=spinning), owner="bare")  # fmt: skip
    try:
        ids = lm.prompt_ids(prompt, chat=describe.chat, system=describe.system)
        for _ in lm.tokens(ids, describe.params):  # warm-up
            pass
        fills = 0
        clock = _Clock()
        while clock.wall_s < seconds / 4 or not fills:
            lm.runner.reset()
            lm.runner.feed(ids)
            fills += 1
        prefill = clock.cpu_s / fills
        requests = tokens = 0
        clock = _Clock()
        while clock.wall_s < seconds * 3 / 4 or not tokens:
            for _ in lm.tokens(ids, describe.params):
                tokens += 1
            requests += 1
        per_token = max(0.0, clock.cpu_s - requests * prefill) / tokens
    finally:
        lm.close()
    info = {"prompt_tokens": len(ids), "prefill_ms": round(prefill * 1000, 3), "requests": requests,
            "tokens": tokens, "token_ms": round(per_token * 1000, 3), "threads": threads,
            "spinning": spinning}  # fmt: skip
    return per_token, prefill / len(ids), info


def measure(
    *, source: VideoSource, detector: Detector, describe: Describe, settings: RunSettings, prompt: str,
    results: Sequence[Path], scratch: Path, seconds: float, cameras: int = 1,
) -> tuple[BareCosts, dict[str, Any]]:  # fmt: skip
    """Every bare loop, one after the other: the costs, and what each loop did (printed)."""
    info: dict[str, Any] = {}
    decode, info["decode"] = bare_decode(source, seconds, settings.decoder_threads, cameras)
    model, wall_ms, info["model"] = bare_model(detector, source.src.target, settings.detector_threads,
                                               settings.detector_spinning, seconds)  # fmt: skip
    update, carry, info["tracker"] = bare_tracker([replay_outputs(path) for path in results], seconds / 4)
    write, info["writing"] = bare_writing(results[0], scratch, seconds / 4)
    token, prompt_token, info["lm"] = bare_lm(
        describe, prompt, settings.lm_threads, settings.lm_spinning, seconds
    )
    costs = BareCosts(decode_cpu_s=decode, model_cpu_s=model, model_wall_ms=wall_ms,
                      tracker_update_cpu_s=update,
                      tracker_predict_cpu_s=carry, write_cpu_s=write, token_cpu_s=token,
                      prompt_token_cpu_s=prompt_token)  # fmt: skip
    return costs, info


def bare_costs(
    clip: Path, lm: Path, cameras: int, runs: Sequence[Path], scratch: Path, seconds: float
) -> tuple[BareCosts, dict[str, Any], dict[str, Any]]:
    """The bare loops for :mod:`.pipeline` on ``clip`` and ``lm``, with the settings of
    the first of the governed ``runs`` (each the path of its files less the suffix): (costs,
    what each loop did, the settings and whether the run's log gave them)."""
    from scripts.bench.headroom.pipeline import pipeline

    targets = [node.target for node in pipeline(clip, lm, cameras=cameras).nodes]
    source = next(t for t in targets if isinstance(t, VideoSource))
    detector = next(t for t in targets if isinstance(t, Detector))
    describe = next(t for t in targets if isinstance(t, Describe))
    settings = run_settings(runs[0].with_suffix(".stderr").read_text(encoding="utf-8"), detector, describe)
    if not settings.found_in_log:
        print("WARNING: a model's 'loaded in' line is missing from the run's log: its threads and spinning "
              "were computed as the run would", file=sys.stderr)  # fmt: skip
    prompt = typical_prompt(runs[0].with_suffix(".jsonl")) or describe.prompt()
    print(f"bare loops, {seconds:g} s each: {settings}", file=sys.stderr, flush=True)
    costs, info = measure(
        source=source, detector=detector, describe=describe, settings=settings, prompt=prompt,
        results=[r.with_suffix(".jsonl") for r in runs], scratch=scratch, seconds=seconds, cameras=cameras,
    )  # fmt: skip
    return costs, info, asdict(settings)
