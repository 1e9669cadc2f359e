from __future__ import annotations

import numpy as np
import pytest

from edgepipe.deploy.compare.inputs import FREE_DIM, InputError, parse_shapes, random_feeds
from edgepipe.infer.spec import TensorSpec

SPECS = [TensorSpec("image", ("N", 3, "H", "W"), np.float32), TensorSpec("ids", (1, 4), np.int64),
         TensorSpec("raw", (2, 2), np.uint8)]  # fmt: skip


def test_free_dims_are_filled_and_values_fit_the_type() -> None:
    first, second = random_feeds(SPECS, {}, 2, seed=3)
    assert first["image"].shape == (1, 3, FREE_DIM, FREE_DIM)
    assert first["image"].dtype == np.float32
    assert first["image"].min() >= 0.0
    assert first["image"].max() < 1.0
    assert first["ids"].dtype == np.int64
    assert first["raw"].dtype == np.uint8
    assert not np.array_equal(first["image"], second["image"])
    again = next(random_feeds(SPECS, {}, 1, seed=3))
    assert np.array_equal(again["image"], first["image"])  # seeded


def test_shapes_given_on_the_command_line() -> None:
    shapes = parse_shapes(["1x3x32x48", "ids=1x4"], SPECS)
    assert shapes == {"image": (1, 3, 32, 48), "ids": (1, 4)}
    assert next(random_feeds(SPECS, shapes, 1))["image"].shape == (1, 3, 32, 48)
    with pytest.raises(InputError, match="no input 'nope'"):
        parse_shapes(["nope=1x2"], SPECS)
    with pytest.raises(InputError, match="expected sizes"):
        parse_shapes(["image=1xAx2"], SPECS)
    with pytest.raises(InputError, match="does not fit its declared shape"):
        next(random_feeds(SPECS, parse_shapes(["1x4x32x32"], SPECS), 1))


def test_inputs_past_the_memory_plan_are_refused_before_any_is_made(monkeypatch: pytest.MonkeyPatch) -> None:
    from edgepipe.planning import memory

    monkeypatch.setattr(memory, "_PLAN", memory.MemoryPlan(0.5, limit_bytes=10**9))
    shapes = parse_shapes(["1x3x100000x100000"], SPECS)
    with pytest.raises(InputError) as caught:
        random_feeds(SPECS, shapes, 3)  # refused at the call, not at the first feed
    message = str(caught.value)
    assert "image 1x3x100000x100000 float32" in message
    assert f"{3 * (3 * 10**10 * 4 + 4 * 8 + 4)} bytes" in message
    assert "give --shape smaller sizes" in message
    assert memory.memory_plan().total_bytes == 0  # nothing kept in the plan
    with pytest.raises(InputError, match="--seed -5: a seed is a whole number of at least 0"):
        random_feeds(SPECS, {}, 1, seed=-5)
