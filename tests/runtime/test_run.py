from __future__ import annotations

import math

import pytest

from edgepipe import Pipeline
from edgepipe.runtime.run import run_graph_async  # the engine alone: ungoverned
from edgepipe.testing import FakeSource, ListSink


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"duration_s": math.nan}, r"duration_s must be a finite number of seconds above 0, got nan"),
        ({"duration_s": 0}, r"duration_s must be a finite number of seconds above 0, got 0"),
        ({"duration_s": -1.0}, r"duration_s must be a finite number of seconds above 0, got -1.0"),
        ({"drain_timeout_s": -5.0}, r"drain_timeout_s must be a finite number of seconds at least 0"),
        ({"stop_timeout_s": math.inf}, r"stop_timeout_s must be a finite number of seconds at least 0"),
    ],
)
async def test_nonsense_durations_are_refused_before_anything_starts(
    kwargs: dict[str, float], message: str
) -> None:
    out: ListSink[int] = ListSink()
    p = Pipeline()
    p.sink("out", out, inputs=p.source("src", FakeSource(range(3))))
    with pytest.raises(ValueError, match=message):
        await run_graph_async(p, **kwargs)  # type: ignore[arg-type]
    assert not out.started
