from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from edgepipe.infer.spec import TensorSpec, spec_of


def test_dims_and_types_as_edgepipe_reads_them() -> None:
    image = SimpleNamespace(name="images", shape=[1, 3, "height", None], type="tensor(float)")
    assert spec_of(image) == TensorSpec("images", (1, 3, "height", None), np.float32, "tensor(float)")
    scalar = SimpleNamespace(name="s", shape=None, type="tensor(string)")
    assert spec_of(scalar) == TensorSpec("s", (), None, "tensor(string)")  # no numpy type: named
