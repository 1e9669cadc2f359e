from __future__ import annotations

import json

import numpy as np
import pytest

from edgepipe.deploy.compare.drift import ATOL, RTOL, Comparison, Divergence, compare


def test_identical_outputs_agree() -> None:
    a = np.linspace(-1, 1, 50, dtype=np.float32).reshape(5, 10)
    d = Divergence("y")
    d.add(a, a.copy(), ATOL, RTOL)
    assert d.ok
    assert (d.max_abs, d.mean_abs, d.rel_error) == (0.0, 0.0, 0.0)
    assert d.cosine == pytest.approx(1.0)


def test_one_element_off_is_caught_and_measured() -> None:
    a = np.ones((4, 4), np.float32)
    b = a.copy()
    b[2, 3] += 0.01
    d = Divergence("y")
    d.add(a, b, ATOL, RTOL)
    assert not d.ok
    assert d.outside == 1
    assert d.max_abs == pytest.approx(0.01, rel=1e-4)
    assert d.mean_abs == pytest.approx(0.01 / 16, rel=1e-4)
    assert d.rel_error == pytest.approx(0.01 / 4, rel=1e-3)
    # Within a looser tolerance it is fine.
    loose = Divergence("y")
    loose.add(a, b, 0.02, 0.0)
    assert loose.ok


def test_a_nan_on_one_side_diverges_and_shapes_must_match() -> None:
    a = np.zeros(3, np.float32)
    b = a.copy()
    b[1] = np.nan
    d = Divergence("y")
    d.add(a, b, ATOL, RTOL)
    assert not d.ok
    assert d.max_abs == np.inf
    both = Divergence("y")
    both.add(b, b.copy(), ATOL, RTOL)
    assert both.ok
    shaped = Divergence("y")
    shaped.add(np.zeros((2, 3)), np.zeros((3, 2)), ATOL, RTOL)
    assert not shaped.ok
    assert "shapes differ" in shaped.mismatch


def test_compare_accumulates_every_feed_and_output() -> None:
    feeds = [{"x": np.full(3, float(i), np.float32)} for i in range(3)]
    c = compare(lambda f: [f["x"], f["x"] * 2], lambda f: [f["x"], f["x"] * 2 + (f["x"] > 1)], feeds,
                ["same", "off"], Comparison(("a", "b"), "3 inputs"))  # fmt: skip
    assert c.samples == 3
    assert [d.ok for d in c.outputs] == [True, False]
    assert not c.ok
    assert c.outputs[1].outside == 3  # the last feed's three elements
    report = c.to_dict()
    assert report["ok"] is False
    assert [o["name"] for o in report["outputs"]] == ["same", "off"]


def test_the_report_is_strict_json_for_a_zero_reference_and_shapes_that_differ() -> None:
    zero = Divergence("y")
    zero.add(np.zeros(3, np.float32), np.ones(3, np.float32), ATOL, RTOL)
    report = json.loads(json.dumps(zero.to_dict(), allow_nan=False))
    assert (report["rel_error"], report["cosine"], report["max_abs"]) == (None, 0.0, 1.0)
    shaped = Divergence("y")
    shaped.add(np.zeros((2, 3)), np.zeros((3, 2)), ATOL, RTOL)
    report = shaped.to_dict()
    # Nothing was compared: no figures that read as a perfect match.
    assert [report[k] for k in ("max_abs", "mean_abs", "rel_error", "cosine")] == [None] * 4
