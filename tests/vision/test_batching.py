from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from edgepipe.infer import SessionConfig
from edgepipe.vision.batching import BatchRunner
from edgepipe.vision.model import load_model
from tests.support.onnx_builders import constant_detector

NO_CACHE = SessionConfig(cache_optimized=False, threads=1)
# yolo-nms rows: image index, box, score, class. Images 0, 1, 0.
ROWS = np.array([[0, 1, 1, 9, 9, 0.9, 0], [1, 2, 2, 8, 8, 0.8, 1], [0, 3, 3, 7, 7, 0.7, 2]], np.float32)


def test_one_run_per_shape_and_each_image_gets_its_rows_in_order(tmp_path: Path) -> None:
    path = constant_detector(tmp_path / "m.onnx", {"output0": ROWS}, size=64)
    model = load_model(str(path), SessionConfig(cache_optimized=False, threads=1, free_image_dims=True))
    assert (model.adapter, model.batchable) == ("yolo-nms", True)
    gauges: dict[str, Any] = {}
    runner = BatchRunner(model, batch_size=4, gauges=gauges)
    small, large = np.zeros((1, 3, 64, 64), np.float32), np.zeros((1, 3, 64, 96), np.float32)
    first, other_size, second = runner.run_batch([small, large, small])
    assert model.session.stats.runs == 1 + 2  # warm-up, the two small ones together, the large one
    assert gauges["batch"] == 2
    np.testing.assert_array_equal(first[0], ROWS[[0, 2]])
    np.testing.assert_array_equal(second[0], [[0, *ROWS[1, 1:]]])  # renumbered as image 0
    np.testing.assert_array_equal(other_size[0], ROWS)  # a run of its own: the model's rows as they are


def test_a_fixed_batch_model_runs_each_tensor_alone(tmp_path: Path) -> None:
    pred = np.zeros((1, 7, 100), np.float32)
    model = load_model(str(constant_detector(tmp_path / "m.onnx", {"output0": pred}, size=64)), NO_CACHE)
    assert model.batchable is False
    runner = BatchRunner(model, batch_size=4)
    outputs = runner.run_batch([np.zeros((1, 3, 64, 64), np.float32)] * 3)
    assert [o[0].shape for o in outputs] == [(1, 7, 100)] * 3
    assert model.session.stats.runs == 1 + 3
    assert runner.run_batch([]) == []
