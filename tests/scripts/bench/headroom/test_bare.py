"""scripts/bench/headroom/bare.py: what the bare loops take from a run (its settings, prompts, outputs,
lines) and the quick loops (tracker, writing), on made-up runs."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from edgepipe.infer.config import SessionConfig
from edgepipe.sched import cpu_budget
from edgepipe.vision.config import DetectorConfig
from edgepipe.vision.detection import Detection
from scripts.bench.headroom.bare import (
    Replayed,
    bare_tracker,
    bare_writing,
    replay_outputs,
    run_settings,
    typical_prompt,
)

LOG = (
    "INFO edgepipe.sched: CPU budget: 2 usable core(s) (affinity 2) x 0.70 = 1.40; 1 heavy call unit(s) at once; "
    "1 ONNX Runtime thread(s) per model; 1 thread(s) per video decoder (4 streams); governed\n"
    "INFO model centerface: loaded in 67 ms on CPUExecutionProvider, 2 threads, spinning (cached optimized graph)\n"
    "INFO model /abs/bench/tiny-lm: loaded in 1455 ms on CPUExecutionProvider, 1 thread\n"
)


def _nodes(lm: str = "bench/tiny-lm") -> tuple[SimpleNamespace, SimpleNamespace]:
    detector = SimpleNamespace(config=DetectorConfig("centerface", session=SessionConfig(timeout_s=2.0)))
    describe = SimpleNamespace(worker=SimpleNamespace(model=Path(lm), session_config=None))
    return detector, describe


def test_the_settings_are_the_runs_own_else_computed_as_it_would() -> None:
    detector, describe = _nodes()
    settings = run_settings(LOG, detector, describe)  # type: ignore[arg-type]
    # The LM was given by another path than the log's: its folder name finds its line.
    assert (settings.detector_threads, settings.detector_spinning) == (2, True)
    assert (settings.lm_threads, settings.lm_spinning, settings.found_in_log) == (1, False, True)
    assert settings.decoder_threads == 1, "the run's decoder threads, from its budget line"
    computed = run_settings(LOG.splitlines()[1], detector, describe)  # type: ignore[arg-type]
    assert computed.decoder_threads == 0, "no budget line: FFmpeg's own choice"
    assert (computed.lm_threads, computed.lm_spinning) == (cpu_budget().threads, SessionConfig().spinning)
    assert not computed.found_in_log


def _write(path: Path, records: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + '{"t": 1, "cut', encoding="utf-8")
    return path


def _detections(t: float, source: str, seq: int, inferred: bool, x: float) -> dict[str, object]:
    box = {"box": [x, 10.0, x + 40, 60.0], "score": 0.9, "class_id": 0, "label": "face"}
    data = {"source": source, "seq": seq, "pts": seq, "time_s": seq / 30, "width": 640, "height": 480,
            "model": "centerface", "inferred": inferred, "latency_ms": 5.0, "infer_ms": 4.0 if inferred else None,
            "detections": [box]}  # fmt: skip
    return {"t": t, "node": "faces", "kind": "detections", "data": data}


def test_prompts_and_outputs_come_from_the_runs_lines(tmp_path: Path) -> None:
    events = [{"t": i, "node": "describe", "kind": "event",
               "data": {"what": "description", "prompt": f"p{n}", "prompt_tokens": n, "new_tokens": 48}}
              for i, n in enumerate([150, 90, 210])]  # fmt: skip
    run = _write(tmp_path / "run.jsonl", [*events, _detections(5, "cam1", 7, True, 100.0),
                                          _detections(6, "cam1", 8, False, 101.0)])  # fmt: skip
    assert typical_prompt(run) == "p150"  # the median prompt length
    assert typical_prompt(_write(tmp_path / "none.jsonl", [])) is None
    first, second = replay_outputs(run)
    assert (first.source, first.seq, first.inferred, first.items[0].box) == (
        "cam1",
        7,
        True,
        (100.0, 10.0, 140.0, 60.0),
    )
    assert (second.seq, second.inferred) == (8, False)


def test_the_tracker_replays_updates_and_carries_each_run_afresh() -> None:
    det = Detection((100.0, 10.0, 140.0, 60.0), 0.9, 0, "face")
    run = [Replayed("cam0", seq, seq % 3 == 0, (det,)) for seq in range(30)]
    update, carry, info = bare_tracker([run, run], seconds=0.0)  # one pass over both runs
    assert (info["updates"], info["carries"], info["carries_added"]) == (20, 40, False)
    assert update > 0
    assert carry > 0
    # No carry in the runs: one is added after each update, so that a carry has a cost.
    _, carry, info = bare_tracker([[o for o in run if o.inferred]], seconds=0.0)
    assert (info["updates"], info["carries"], info["carries_added"]) == (10, 10, True)
    assert carry > 0


def test_writing_takes_the_runs_own_lines_in_turn(tmp_path: Path) -> None:
    run = _write(tmp_path / "run.jsonl", [_detections(5, "cam1", 7, True, 100.0),
                                          {"t": 6, "node": "describe", "kind": "token", "data": {"text": "a"}}])  # fmt: skip
    cpu_s, info = bare_writing(run, tmp_path / "scratch.jsonl", seconds=0.05)
    assert cpu_s > 0
    assert info["lines"] % 2 == 0  # whole passes over the two lines
    assert not (tmp_path / "scratch.jsonl").exists()
    assert bare_writing(_write(tmp_path / "empty.jsonl", []), tmp_path / "s.jsonl", 0.05) == (
        0.0,
        {"lines": 0},
    )
