from __future__ import annotations

import logging
import threading
import time
import weakref
from pathlib import Path

import numpy as np
import pytest

from edgepipe.infer import (
    InferError,
    InferTimeout,
    ModelInputError,
    ModelLoadError,
    ModelNotFound,
    Session,
    SessionConfig,
    UnsupportedOperator,
)
from edgepipe.planning import memory
from edgepipe.planning.memory import MemoryPlan
from tests.support.onnx_builders import add_model, slow_when_bright, unsupported_op

NO_CACHE = SessionConfig(cache_optimized=False, threads=1)


def test_runs_and_counts(tmp_path: Path) -> None:
    session = Session(add_model(tmp_path / "add.onnx"), NO_CACHE)
    x = np.ones((2, 3), np.float32)
    (y,) = session.run({"x": x})
    np.testing.assert_array_equal(y, x + 1)
    session.run({"x": x})
    assert session.stats.runs == 2
    assert session.stats.failures == 0
    assert session.stats.first_result_ms is not None
    assert session.device == ("cpu", 0)  # where bound buffers kept between runs belong
    assert session.providers[-1] == "CPUExecutionProvider"
    assert [(s.name, s.shape) for s in session.inputs] == [("x", (2, 3))]


def test_missing_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFound, match=r"nothere\.onnx: no such file"):
        Session(tmp_path / "nothere.onnx")


@pytest.mark.parametrize("content", [b"", b"this is not a model", bytes(range(256)) * 10])
def test_a_file_that_is_not_a_model_is_a_load_error_naming_the_file(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "broken.onnx"
    path.write_bytes(content)
    with pytest.raises(ModelLoadError, match=r"broken\.onnx") as info:
        Session(path, NO_CACHE)
    assert info.value.retryable is False


def test_a_truncated_download_is_a_load_error(tmp_path: Path, centerface: Path) -> None:
    path = tmp_path / "cut.onnx"
    path.write_bytes(centerface.read_bytes()[:100_000])
    with pytest.raises(ModelLoadError, match="truncated or corrupt"):
        Session(path, NO_CACHE)


def test_an_operator_without_a_kernel_is_named_with_the_provider(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedOperator) as info:
        Session(unsupported_op(tmp_path / "bf16.onnx"), NO_CACHE)
    assert info.value.op == "Abs"
    assert info.value.provider == "cpu"
    assert "abs_bf16" in str(info.value)


def test_an_unknown_operator_is_named(tmp_path: Path) -> None:
    from onnx import TensorProto, helper

    from tests.support.onnx_builders import save

    graph = helper.make_graph(
        [helper.make_node("Frobnicate", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )  # fmt: skip
    path = save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "f.onnx")
    with pytest.raises(UnsupportedOperator, match="Frobnicate is unknown"):
        Session(path, NO_CACHE)


@pytest.mark.parametrize(
    ("feeds", "match"),
    [
        (
            {"x": np.ones((2, 4), np.float32)},
            r"input 'x' expects \[2, 3\] float32, got \(2, 4\) float32: "
            r"its fixed dims were set when it was exported: feed that shape, "
            r"or export it again with the dims that vary left free",
        ),
        ({"x": np.ones((2, 3), np.float64)}, r"got \(2, 3\) float64: feed float32$"),
        ({"x": np.ones((2, 3, 1), np.float32)}, r"got \(2, 3, 1\) float32: feed a tensor of 2 dimensions$"),
        ({"z": np.ones((2, 3), np.float32)}, r"no feed for input 'x'.*given: z"),
    ],
)
def test_feeds_that_do_not_fit_say_what_the_model_expects(tmp_path: Path, feeds: dict, match: str) -> None:
    session = Session(add_model(tmp_path / "add.onnx"), NO_CACHE)
    with pytest.raises(ModelInputError, match=match):
        session.run(feeds)
    assert session.stats.failures == 1


def test_a_run_past_its_deadline_is_terminated_counted_and_the_next_run_works(tmp_path: Path) -> None:
    session = Session(slow_when_bright(tmp_path / "slow.onnx", work=512, iterations_per_level=20),
                      SessionConfig(cache_optimized=False, threads=1, timeout_s=0.2))  # fmt: skip
    dark = np.zeros((1, 3, 64, 64), np.float32)
    bright = np.full((1, 3, 64, 64), 255, np.float32)
    session.run({"images": dark})
    t0 = time.perf_counter()
    with pytest.raises(InferTimeout, match="deadline 200 ms"):
        session.run({"images": bright})
    assert time.perf_counter() - t0 < 2.0  # the full run takes several seconds
    (out,) = session.run({"images": dark})  # the terminate flag was reset
    assert out.shape == (1, 5, 1)
    assert session.stats.timeouts == 1
    assert session.stats.runs == 3


def test_retries_are_counted(tmp_path: Path) -> None:
    session = Session(slow_when_bright(tmp_path / "slow.onnx", work=512, iterations_per_level=20),
                      SessionConfig(cache_optimized=False, threads=1, timeout_s=0.1, retries=1))  # fmt: skip
    with pytest.raises(InferTimeout):
        session.run({"images": np.full((1, 3, 64, 64), 255, np.float32)})
    assert session.stats.retries == 1
    assert session.stats.timeouts == 2


def test_the_optimized_graph_is_cached_with_its_weights_mapped(tmp_path: Path, centerface: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("EDGEPIPE_CACHE_DIR", str(tmp_path / "cache"))
    config = SessionConfig(threads=1, free_image_dims=True)
    first = Session(centerface, config)
    assert first.optimized_path is None
    x = np.random.default_rng(1).uniform(0, 255, (1, 3, 96, 128)).astype(np.float32)
    expected = first.run({"input.1": x})
    second = Session(centerface, config)
    assert second.optimized_path is not None
    assert second.optimized_path.parent == tmp_path / "cache" / "optimized"
    for a, b in zip(expected, second.run({"input.1": x}), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    weights = [p for p in second.optimized_path.parent.iterdir() if p.suffix == ".weights"]
    assert weights, "weights were not written beside the optimized graph"
    maps = Path("/proc/self/maps").read_text()
    assert any(str(w) in maps for w in weights), "the cached weights are not memory-mapped"


def test_a_corrupt_cache_entry_is_rebuilt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    monkeypatch.setenv("EDGEPIPE_CACHE_DIR", str(tmp_path / "cache"))
    model = add_model(tmp_path / "add.onnx")
    Session(model, SessionConfig(threads=1))
    cached = next((tmp_path / "cache" / "optimized").glob("*.onnx"))
    cached.write_bytes(b"garbage")
    with caplog.at_level(logging.WARNING):
        session = Session(model, SessionConfig(threads=1))
    assert "cached optimized graph unusable" in caplog.text
    np.testing.assert_array_equal(session.run({"x": np.zeros((2, 3), np.float32)})[0], np.ones((2, 3)))


def test_a_provider_this_build_lacks_falls_back_to_cpu_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        session = Session(add_model(tmp_path / "add.onnx"),
                          SessionConfig(providers=("tensorrt",), cache_optimized=False))  # fmt: skip
    assert session.providers == ["CPUExecutionProvider"]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "TensorrtExecutionProvider" in warnings[0].getMessage()


def test_threads_default_to_the_budget(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from edgepipe.sched import cpu_budget

    with caplog.at_level(logging.INFO, logger="edgepipe.infer.session"):
        session = Session(add_model(tmp_path / "add.onnx"), SessionConfig(cache_optimized=False))
        Session(
            add_model(tmp_path / "add.onnx"), SessionConfig(cache_optimized=False, threads=3, spinning=True)
        )
    assert session.threads == cpu_budget().threads
    assert session.ticket.units == session.threads
    # The log says what each run used (scripts/bench/headroom/bench.py reads it for its bare loops).
    threads = cpu_budget().threads
    loaded = [r.getMessage() for r in caplog.records if ": loaded in " in r.getMessage()]
    assert loaded[0].endswith(f"on CPUExecutionProvider, {threads} thread{'' if threads == 1 else 's'}")
    assert loaded[1].endswith("on CPUExecutionProvider, 3 threads, spinning")


def test_close_lets_the_model_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = MemoryPlan(limit_bytes=1 << 34)
    monkeypatch.setattr(memory, "_PLAN", plan)
    session = Session(add_model(tmp_path / "add.onnx"), NO_CACHE, owner="adder")
    x = np.ones((2, 3), np.float32)
    session.run({"x": x})
    assert [r.owner for r in plan.entries()] == ["adder"]
    loaded = weakref.ref(session._runs.session)  # type: ignore[arg-type]
    session.close()
    session.close()  # again: harmless
    assert plan.entries() == []
    assert loaded() is None  # ONNX Runtime's session is freed, not just unlisted
    assert session.closed
    with pytest.raises(InferError, match="closed"):
        session.run({"x": x})
    assert session.stats.runs == 1  # the figures stay readable


def test_debug_logging_does_not_pour_onnx_runtimes_graph_warnings_out(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # An unused initializer: ONNX Runtime warns about it (a line per leftover) at load time.
    from onnx import load as onnx_load
    from onnx import numpy_helper

    model = onnx_load(add_model(tmp_path / "add.onnx"))
    for i in range(5):
        model.graph.initializer.append(numpy_helper.from_array(np.zeros(3, np.float32), f"unused{i}"))
    path = tmp_path / "leftovers.onnx"
    path.write_bytes(model.SerializeToString())
    logging.getLogger("edgepipe").setLevel(logging.DEBUG)
    try:
        Session(path, NO_CACHE)
    finally:
        logging.getLogger("edgepipe").setLevel(logging.NOTSET)
    assert "unused" not in capfd.readouterr().err


def test_onnx_runtimes_threads_carry_the_owners_tag_and_its_runs_count_as_its_model(tmp_path: Path) -> None:
    # The CPU ledger's view: intra-op threads are native, named after the thread that built the
    # session; they and the calling thread's share of each run are the owner's model work.
    from edgepipe.core import cputime, threadname
    from edgepipe.sched.ledger import read_tasks

    before = {t.tid for t in read_tasks()}
    name_before = threadname.thread_name()
    session = Session(add_model(tmp_path / "add.onnx"), SessionConfig(cache_optimized=False, threads=2),
                      owner="faces")  # fmt: skip
    new = [t for t in read_tasks() if t.tid not in before]
    tags = {threadname.tag_named(t.name) for t in new} - {None}
    assert len(tags) == 1, [t.name for t in new]  # one intra-op thread (the caller is the other)
    (tag,) = tags
    assert tag is not None
    assert tag.key() == ("faces", cputime.MODEL)
    assert threadname.thread_name() == name_before  # the building thread's own name is back
    session.ticket.set_owner("describe", "lm", 0)  # a language model's steps: token decode
    assert tag.key() == ("describe", cputime.TOKENS)
    for _ in range(20):
        session.run({"x": np.ones((2, 3), np.float32)})
    mine = next(a for a in cputime.collect()[1] if a.tid == threading.get_native_id())
    assert mine.done[("describe", cputime.TOKENS)] > 0  # the calling thread's part of the runs
