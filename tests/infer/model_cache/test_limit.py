"""The model cache's limit, through the real writers: ONNX Runtime saving optimized graphs
(Session with the cache on) and ``edgepipe models pull`` from the local wheelhouse."""

from __future__ import annotations

import gc
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgepipe.infer import Session, SessionConfig
from edgepipe.infer.model_cache import limit as cache_limit
from edgepipe.infer.model_cache.limit import OPTIMIZED, PULLED, entries, parse_size
from tests.support.cli_process import edgepipe

MIB = 1 << 20
CACHED = SessionConfig(threads=1)  # cache_optimized is on by default


@pytest.fixture
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("EDGEPIPE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("EDGEPIPE_CACHE_MAX", "3.5M")
    return tmp_path / "cache"


def weighty_model(path: Path, seed: int) -> Path:
    """y = x + W with W 1 MiB of random floats: its optimized graph keeps W in a weights file."""
    w = np.random.default_rng(seed).random((256, 1024), dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])], "weighty",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [256, 1024])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [256, 1024])], [numpy_helper.from_array(w, "w")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())
    return path


def total(root: Path) -> int:
    return sum(e.size_bytes for e in entries(root))


def graphs_of(root: Path, stem: str) -> list[Path]:
    return sorted((root / "optimized").glob(f"{stem}-*"))


@pytest.mark.parametrize(
    ("text", "size"),
    [("500M", 500 * MIB), ("2G", 2 << 30), ("1.5GB", 3 << 29), ("123456", 123456), ("64kib", 64 << 10)],
)
def test_sizes_read_as_binary_units(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["lots", "-5M", "1.5 PB", "M", ""])
def test_a_size_that_is_not_one_names_the_variable(text: str) -> None:
    with pytest.raises(ValueError, match=r"EDGEPIPE_CACHE_MAX=.* is not a size"):
        parse_size(text)


@pytest.mark.slow
def test_optimizing_past_the_limit_evicts_the_oldest_graphs_and_never_one_in_use(
    own_cache: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "edgepipe.infer.model_cache.limit")
    in_use = Session(weighty_model(tmp_path / "in_use.onnx", 0), CACHED)
    for i in range(6):  # 6 more graphs of 1 MiB each into a 3.5 MiB cache
        Session(weighty_model(tmp_path / f"other{i}.onnx", i + 1), CACHED).close()
        gc.collect()
        assert total(own_cache) <= 3.5 * MIB
    assert len(graphs_of(own_cache, "in_use")) == 2  # the .onnx and its weights, together
    assert len(graphs_of(own_cache, "other5")) == 2  # just written
    assert graphs_of(own_cache, "other0") == []  # the oldest went first
    every = {e.name.rsplit("-", 1)[0] for e in entries(own_cache)}
    assert every == {"in_use", "other4", "other5"}
    x = np.zeros((256, 1024), np.float32)
    assert in_use.run({"x": x})[0].shape == (256, 1024)
    passes = [r.getMessage() for r in caplog.records if "evicted" in r.getMessage()]
    assert len(passes) == 4  # one line per pass that evicted
    assert "optimized graph other0-" in passes[0]
    assert "freed 1.0 MiB" in passes[0]
    # Loading a cached graph marks it used: it is now the newest, and outlives the others.
    for name in ("other4", "in_use"):
        Session(tmp_path / f"{name}.onnx", CACHED).close()
        gc.collect()
        assert len(graphs_of(own_cache, name)) == 2
    Session(weighty_model(tmp_path / "late.onnx", 9), CACHED).close()
    assert {e.name.rsplit("-", 1)[0] for e in entries(own_cache)} == {"in_use", "other4", "late"}


def test_one_graph_bigger_than_the_limit_is_kept_with_one_warning(
    own_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "edgepipe.infer.model_cache.limit")
    big = Session(weighty_model(tmp_path / "big.onnx", 0), CACHED)  # saved under 3.5 MiB
    monkeypatch.setenv("EDGEPIPE_CACHE_MAX", "512K")  # lowered since
    cache_limit.enforce()
    assert len(graphs_of(own_cache, "big")) == 2
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "cache" in r.name]
    assert len(warnings) == 1
    assert "optimized graph big-" in warnings[0]
    assert "more than the limit 512.0 KiB (EDGEPIPE_CACHE_MAX): kept" in warnings[0]
    big.close()


def test_a_bad_limit_during_a_run_is_warned_about_and_the_default_used(
    own_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("EDGEPIPE_CACHE_MAX", "lots")
    monkeypatch.setattr(cache_limit, "_bad_limit_warned", False)
    Session(weighty_model(tmp_path / "a.onnx", 0), CACHED).close()
    assert "EDGEPIPE_CACHE_MAX='lots' is not a size" in caplog.text
    assert "using the default limit 1.0 GiB" in caplog.text
    assert len(graphs_of(own_cache, "a")) == 2  # loaded and cached all the same


@pytest.mark.slow
def test_the_cache_stays_under_its_limit_after_pulling_and_optimizing_more_than_it(
    own_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EDGEPIPE_CACHE_MAX", "10M")
    for i in range(5):
        Session(weighty_model(tmp_path / f"m{i}.onnx", i), CACHED).close()
    gc.collect()
    assert total(own_cache) == pytest.approx(5 * MIB, rel=0.05)
    done = edgepipe("models", "pull", "centerface")
    assert done.returncode == 0, done.stderr
    assert "model cache: evicted optimized graph m0-" in done.stderr
    assert total(own_cache) <= 10 * MIB
    kinds = [e.kind for e in entries(own_cache)]
    assert PULLED in kinds  # just pulled: kept; the oldest graphs made room
    assert 0 < kinds.count(OPTIMIZED) < 5
    # Optimizing CenterFace (7 MiB), more than half the limit: its graph is not saved at all
    # (it would evict every other graph, and itself at the next start of another model).
    before = entries(own_cache)
    done = subprocess.run([sys.executable, "-c", "import logging; logging.basicConfig(level=logging.INFO)\n"
                           "from edgepipe.infer import Session, resolve\nSession(resolve('centerface').path)"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert [e.name for e in entries(own_cache)] == [e.name for e in before]
    assert (
        "optimized graph not cached: the model (7.0 MiB) is more than half the cache limit 10.0 MiB"
        in done.stderr
    )
    assert "EDGEPIPE_CACHE_MAX=21M keeps it" in done.stderr


def test_pulled_models_go_only_after_every_optimized_graph(own_cache: Path) -> None:
    # A unit: files standing for each kind, with their last use set by hand.
    old_model = own_cache / "models" / "old"
    old_model.mkdir(parents=True)
    (old_model / "old.onnx").write_bytes(b"m" * MIB)
    graph = own_cache / "optimized" / f"new-{'a' * 20}.onnx"
    graph.parent.mkdir()
    graph.write_bytes(b"g" * MIB)
    weights = graph.with_name(f"new-{'a' * 20}.{os.getpid()}.weights")
    weights.write_bytes(b"w" * 2 * MIB)
    now = time.time()
    os.utime(old_model / "old.onnx", (now - 3600, now - 3600))  # used an hour ago
    evicted = cache_limit.enforce()
    assert [(e.kind, e.name) for e in evicted] == [(OPTIMIZED, f"new-{'a' * 20}")]
    assert not graph.exists()
    assert not weights.exists()
    assert (old_model / "old.onnx").exists()


def test_a_graph_another_process_is_writing_is_not_evicted(own_cache: Path) -> None:
    writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        folder = own_cache / "optimized"
        folder.mkdir(parents=True)
        partial = folder / f"w-{'b' * 20}.onnx.{writer.pid}.partial"
        partial.write_bytes(b"p" * 4 * MIB)
        assert cache_limit.enforce() == []
        assert partial.exists()
    finally:
        writer.kill()
        writer.wait()
    assert [e.name for e in cache_limit.enforce()] == [f"w-{'b' * 20}"]  # its writer died: garbage


def test_weights_left_by_a_process_that_is_gone_are_tidied(own_cache: Path, tmp_path: Path) -> None:
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    Session(weighty_model(tmp_path / "t.onnx", 0), CACHED).close()
    (onnx,) = (own_cache / "optimized").glob("t-*.onnx")
    stale = onnx.with_name(f"{onnx.stem}.{gone.stdout.strip()}.weights")
    stale.write_bytes(b"x" * 1000)
    onnx.unlink()  # a rebuild writes the graph again
    Session(tmp_path / "t.onnx", CACHED).close()
    assert not stale.exists()
    assert len(graphs_of(own_cache, "t")) == 2


@pytest.mark.parametrize("outside", [False, True], ids=["weights inside", "weights in a data file"])
def test_a_model_bigger_than_half_the_limit_gets_no_optimized_graph(
    own_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
    outside: bool,
) -> None:  # fmt: skip
    caplog.set_level(logging.INFO, "edgepipe.infer.loading")
    monkeypatch.setenv("EDGEPIPE_CACHE_MAX", "1.5M")  # a 1 MiB model: more than half
    weighty_model(tmp_path / "lm.onnx", 0)
    if outside:  # as exported LMs are: model.onnx, its weights in model.onnx_data
        onnx.save_model(onnx.load(tmp_path / "lm.onnx"), tmp_path / "lm.onnx", save_as_external_data=True,
                        location="lm.onnx_data", size_threshold=0)  # fmt: skip
        assert (tmp_path / "lm.onnx").stat().st_size < 1000
    Session(tmp_path / "lm.onnx", CACHED).close()
    assert entries(own_cache) == []  # nothing written: no 2 GB rewritten at every start
    (line,) = [r.getMessage() for r in caplog.records if "not cached" in r.getMessage()]
    assert "the model (1.0 MiB) is more than half the cache limit 1.5 MiB (EDGEPIPE_CACHE_MAX)" in line
    assert line.endswith("EDGEPIPE_CACHE_MAX=4M keeps it")
    monkeypatch.setenv("EDGEPIPE_CACHE_MAX", "4M")
    Session(tmp_path / "lm.onnx", CACHED).close()
    assert [e.kind for e in entries(own_cache)] == [OPTIMIZED]
    monkeypatch.setenv("EDGEPIPE_CACHE_MAX", "0")  # keep nothing not in use
    assert [e.kind for e in cache_limit.enforce()] == [OPTIMIZED]
