"""RunConfig: every value checked when the options are made, before anything runs."""

from __future__ import annotations

import math

import pytest

from edgepipe import Pipeline
from edgepipe.runner import RunConfig
from edgepipe.testing import FakeSource, ListSink, run_pipeline


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"duration_s": math.nan}, r"duration_s must be a finite number of seconds above 0, got nan"),
        ({"duration_s": 0}, r"duration_s must be a finite number of seconds above 0, got 0"),
        ({"duration_s": -1.0}, r"duration_s must be a finite number of seconds above 0, got -1.0"),
        ({"drain_timeout_s": -5.0}, r"drain_timeout_s must be a finite number of seconds at least 0"),
        ({"stop_timeout_s": math.inf}, r"stop_timeout_s must be a finite number of seconds at least 0"),
        ({"headroom": 1.0}, r"headroom must be in \[0, 1\), got 1.0"),
        ({"headroom": -0.1}, r"headroom must be in \[0, 1\), got -0.1"),
        ({"port": 70000}, r"port must be in \[0, 65535\], got 70000"),
        ({"loop": "trio"}, r"loop must be one of auto, uvloop, asyncio, got 'trio'"),
        ({"workers": {"cpu": 0}}, r"workers\['cpu'\] must be a whole number of threads ≥ 1, got 0"),
    ],
)
def test_nonsense_values_are_refused_before_anything_starts(kwargs: dict[str, object], message: str) -> None:
    out: ListSink[int] = ListSink()
    p = Pipeline()
    p.sink("out", out, inputs=p.source("src", FakeSource(range(3))))
    with pytest.raises(ValueError, match=message):
        run_pipeline(p, RunConfig(**kwargs))  # type: ignore[arg-type]
    assert not out.started
