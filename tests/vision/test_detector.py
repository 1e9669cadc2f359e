from __future__ import annotations

import json
from pathlib import Path

import av
import numpy as np
import pytest
import skimage.data

from edgepipe import Pipeline
from edgepipe.core.context import CallLimit
from edgepipe.core.scope import RunScope, entered
from edgepipe.infer import SessionConfig
from edgepipe.media.frame import from_av, from_rgb
from edgepipe.runner import RunConfig
from edgepipe.sched.budget import BUDGET, Cores, CpuBudget
from edgepipe.testing import FakeSource, ListSink, run_pipeline
from edgepipe.vision import Detections, Detector, Normalize
from edgepipe.vision.nms import iou_matrix
from tests.support.cli_process import edgepipe
from tests.support.onnx_builders import slow_when_bright

REPO = Path(__file__).resolve().parents[2]
# Checked by eye on skimage.data.astronaut() (512x512): cheeks at x 183 and 265, hairline at
# y 68, chin at y 172.
ASTRONAUT_FACE = (183.0, 68.0, 265.0, 172.0)


def iou(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    return float(iou_matrix(np.array([a], np.float32), np.array([b], np.float32))[0, 0])


@pytest.fixture(scope="module")
def face_detector(centerface: Path) -> Detector:
    detector = Detector("centerface")
    detector.open()
    return detector


def test_a_detector_runs_one_thread_a_call_unless_it_prefers_latency(centerface: Path) -> None:
    # The run's budget (the scheduler's): one camera, one model, 2 cores x 0.7: two calls in
    # flight of one thread each; asking for latency, one call of two threads.
    budget = CpuBudget(Cores(2.0, 2, None), video_streams=1, model_nodes=1)
    scope = RunScope("wide")
    scope.put(BUDGET, budget)
    with entered(scope):
        detector = Detector("centerface")
        calls = CallLimit(budget.instances, budget.instances)  # its node's in a governed run
        detector.calls, detector._limit = calls.instances, calls  # what start() reads of its node
        detector.open()
        wide = Detector("centerface", prefer="latency")
        wide.open()
        pinned = Detector(
            "centerface", session=SessionConfig(threads=2), pin_every=True
        )  # the user's word stands
        pinned.open()
    assert detector.instances == "auto"
    assert wide.instances == 1
    assert detector.session is not None
    assert detector.session.threads == 1
    assert wide.session is not None
    assert wide.session.threads == 2
    assert wide.session.ticket.units == 1, "it holds one unit at the gate: the spare stays free"
    assert pinned.session is not None
    assert pinned.session.threads == 2
    # Two calls in flight: the governor sheds the second first, then the interval.
    with entered(scope):  # the run's rungs: those of its budget's 2 cores
        every, instances = detector.governor_knobs("faces", 1)
    assert (every.kind, instances.kind) == ("every", "instances")
    instances.set(1)
    assert detector.session.ticket.spare_duty == pytest.approx(0.9)
    assert instances.describe() == "2 calls in flight, the spare units 90% of the time"
    instances.set(instances.levels - 1)
    assert detector.session.ticket.spare_duty == 0.0
    assert calls.allowed == 1
    assert instances.describe() == "1 call in flight (one shed)"
    instances.set(0)
    assert calls.allowed == 2
    # A detector that must see every frame it is given is paced, in fine steps, not thinned first.
    every, pace = pinned.governor_knobs("faces", 1)
    assert every.pinned
    assert pace.kind == "pace"
    assert not getattr(pace, "pinned", False)
    pace.set(2)
    assert pinned.session.ticket.duty == pytest.approx(0.87)
    wide.stop()
    detector.stop()
    pinned.stop()


@pytest.mark.parametrize(("colorspace", "color_range"), [("ITU709", "JPEG"), ("ITU601", "MPEG")])
def test_centerface_finds_a_face_in_an_hd_frame_in_its_own_colours(
    face_detector: Detector, colorspace: str, color_range: str
) -> None:
    # An odd-sized HD picture (a camera's crop) with the astronaut at (301, 97), read in the
    # matrix and range its tags say; the box maps back per axis onto the frame.
    canvas = np.full((721, 1283, 3), 90, np.uint8)
    canvas[97 : 97 + 512, 301 : 301 + 512] = skimage.data.astronaut()
    decoded = av.VideoFrame.from_ndarray(canvas, format="rgb24").reformat(
        format="yuv420p", dst_colorspace=colorspace, dst_color_range=color_range
    )
    frame = from_av(decoded, source_id="camera", seq=0)
    assert (frame.matrix, frame.full_range) == (colorspace.replace("ITU", "bt"), color_range == "JPEG")
    (face,) = face_detector.process(frame)
    assert face.score > 0.7
    x0, y0, x1, y1 = ASTRONAUT_FACE
    assert iou(face.box, (x0 + 301, y0 + 97, x1 + 301, y1 + 97)) > 0.5, face.box


@pytest.mark.parametrize("path", ["numpy", "swscale"])
def test_centerface_finds_the_astronauts_face(face_detector: Detector, path: str) -> None:
    rgb = skimage.data.astronaut()
    if path == "numpy":
        frame = from_rgb(rgb)
    else:
        frame = from_av(av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="yuv420p"),
                        source_id="image", seq=0)  # fmt: skip
    result = face_detector.process(frame)
    assert len(result) == 1, result.to_dict()
    (face,) = result
    assert face.label == "face"
    assert face.score > 0.7
    assert iou(face.box, ASTRONAUT_FACE) > 0.5, face.box
    assert face.landmarks is not None
    x1, y1, x2, y2 = face.box
    for x, y in face.landmarks:  # eyes, nose, mouth corners: inside the face
        assert x1 < x < x2
        assert y1 < y < y2
    (left_eye, right_eye, nose, *_) = face.landmarks
    assert left_eye[0] < nose[0] < right_eye[0]


def test_no_face_in_a_photo_without_one(face_detector: Detector) -> None:
    assert len(face_detector.process(from_rgb(skimage.data.coffee()))) == 0


def test_the_model_and_session_show_in_the_gauges(face_detector: Detector) -> None:
    assert face_detector.session is not None
    assert face_detector.session.stats.first_result_ms is not None
    assert face_detector.adapter == "centerface"


def frames_with_bright_every(n: int, count: int) -> list:  # type: ignore[type-arg]
    dark, bright = np.zeros((64, 64, 3), np.uint8), np.full((64, 64, 3), 255, np.uint8)
    return [from_rgb(bright if i % n == n - 1 else dark, source_id="cam", seq=i) for i in range(count)]


@pytest.mark.slow
def test_runs_past_their_deadline_are_terminated_counted_and_the_pipeline_flows(tmp_path: Path) -> None:
    # Bright frames make the model loop for seconds; dark ones take a millisecond.
    model = slow_when_bright(tmp_path / "slow.onnx", size=64, work=512, iterations_per_level=20)
    detector = Detector(str(model), adapter="yolov8", labels=["thing"], score_threshold=0.5,
                        normalize=Normalize(scale=1.0),  # pixels 0..255, as the model counts them
                        session=SessionConfig(timeout_s=0.25, cache_optimized=False, threads=1))  # fmt: skip
    sink: ListSink[Detections] = ListSink()
    p = Pipeline("t")
    src = p.source("frames", FakeSource(frames_with_bright_every(4, 12)))
    p.sink("out", sink, inputs=p.stage("detect", detector, inputs=src, timeout_s=5.0))
    report = run_pipeline(p, RunConfig(governed=False))
    assert [r.seq for r in sink.items] == [0, 1, 2, 4, 5, 6, 8, 9, 10]
    assert all(len(r) == 1 and r.items[0].label == "thing" for r in sink.items)
    assert report.stats.node("detect").errors == 3
    assert detector.session is not None
    assert detector.session.stats.timeouts == 3
    assert report.duration_s < 5.0  # three 0.25 s deadlines, not three multi-second runs


@pytest.mark.slow
def test_a_broken_model_fails_at_start_up_naming_it(tmp_path: Path) -> None:
    broken = tmp_path / "faces.onnx"
    broken.write_bytes(b"\x08\x07" + bytes(1000))
    done = edgepipe("run", REPO / "pipelines" / "face_privacy.py", "--model", broken, "--output", tmp_path / "o.mp4",
                    "--duration", "20")  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert f"model {broken}" in done.stderr
    assert "not a readable ONNX model" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_detections_reach_the_results_file(tmp_path: Path, make_clip, centerface: Path) -> None:  # type: ignore[no-untyped-def]
    clip = make_clip("face.mp4", width=640, height=360, fps=15, seconds=2)
    results = tmp_path / "r.jsonl"
    output = tmp_path / "pixelated.mp4"
    done = edgepipe("run", REPO / "pipelines" / "face_privacy.py", "--source", clip, "--output", output,
                    "--results", results)  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    detections = [r["data"] for r in lines if r["kind"] == "detections"]
    assert len(detections) == 30  # every frame of the file, none dropped
    counts = [len(d["detections"]) for d in detections]
    # The walking cut-out of the astronaut enters the picture after a while: once her face is
    # found, it is found in (nearly) every later frame, and never more than one face.
    first = next(i for i, n in enumerate(counts) if n)
    assert first < 20, counts
    assert sum(counts[first:]) >= 0.9 * (30 - first), counts
    assert max(counts) == 1, counts
    with_face = [d for d in detections if d["detections"]]
    face = with_face[0]["detections"][0]
    assert face["label"] == "face"
    assert len(face["landmarks"]) == 5
    with av.open(str(output)) as container:
        decoded = sum(1 for _ in container.decode(video=0))
    assert decoded == 30, done.stderr


@pytest.mark.slow
def test_a_batch_gives_what_one_by_one_gives(centerface: Path) -> None:
    single = Detector("centerface")
    batched = Detector("centerface", batch_size=4)
    frames = [from_rgb(skimage.data.astronaut(), source_id=f"cam{i}") for i in range(3)]
    frames.append(from_rgb(skimage.data.coffee()[:400, :512], source_id="cam3"))  # another size
    expected = [single.process(f) for f in frames]
    got = batched.process_batch(frames)
    assert batched.session is not None
    assert batched.session.stats.runs == 1 + 2  # warm-up, one batch of 3, the other size alone
    for a, b in zip(expected, got, strict=True):
        assert (a.source_id, len(a)) == (b.source_id, len(b))
        for da, db in zip(a, b, strict=True):
            np.testing.assert_allclose(da.box, db.box, atol=0.5)
    assert all(f.refs == 1 for f in frames)  # the batch's own leases were given back


@pytest.mark.slow
def test_batching_across_cameras_in_a_pipeline(centerface: Path) -> None:
    # A generous deadline: this is about batching, and a first run at a new batch size (ONNX
    # Runtime plans its memory then) can pass the default 2 s on a loaded two-core machine.
    detector = Detector("centerface", batch_size=4, session=SessionConfig(timeout_s=30.0))
    sink: ListSink[Detections] = ListSink()
    p = Pipeline("t")
    cams = [
        p.source(
            f"cam{i}",
            FakeSource([from_rgb(skimage.data.astronaut(), source_id=f"cam{i}", seq=s) for s in range(4)]),
        )
        for i in range(3)
    ]
    p.sink("out", sink, inputs=p.stage("faces", detector, inputs=cams, queue_size=8))
    report = run_pipeline(p, RunConfig(governed=False))
    assert len(sink.items) == 12
    assert all(len(r) == 1 for r in sink.items)
    assert detector.session is not None
    assert detector.session.stats.runs < 1 + 12  # some frames shared a run
    assert report.stats.node("faces").errors == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"input_size": -3}, r"input_size must be a number in \[32, 4096\], got -3"),
        ({"input_size": 10_000}, r"input_size must be a number in \[32, 4096\], got 10000"),
        ({"score_threshold": float("nan")}, r"score_threshold must be a number in \[0, 1\], got nan"),
        ({"iou_threshold": 1.5}, r"iou_threshold must be a number in \[0, 1\], got 1.5"),
        ({"max_detections": 0}, r"max_detections must be a number at least 1, got 0"),
    ],
)
def test_nonsense_settings_are_refused_when_the_detector_is_made(
    kwargs: dict[str, float], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        Detector("centerface", **kwargs)  # type: ignore[arg-type]
