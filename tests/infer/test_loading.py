from __future__ import annotations

from pathlib import Path

from edgepipe.core.scope import RunScope, entered
from edgepipe.core.spans import SPANS, SpanRecorder
from edgepipe.infer import Session, SessionConfig
from tests.support.onnx_builders import add_model


def test_a_profiled_model_named_by_its_path_writes_its_profile_in_the_folder(tmp_path: Path) -> None:
    folder = tmp_path / "profiles"
    folder.mkdir()
    recorder = SpanRecorder(profile_prefix=str(folder / "ort_"))
    traced = RunScope("traced")
    traced.put(SPANS, recorder)
    config = SessionConfig(cache_optimized=False, threads=1)
    with entered(traced):
        # as the LM runner names its session: the path it was given
        Session(add_model(tmp_path / "add.onnx"), config, name="./lmdir/qwen-tiny")
    with entered(RunScope("beside")):  # a run beside it, untraced, profiles nothing
        Session(add_model(tmp_path / "other.onnx"), config, name="other")
    Session(add_model(tmp_path / "outside.onnx"), config, name="outside")  # nor does code outside a run
    [(name, _, session)] = recorder.profiled
    written = Path(session.end_profiling())
    assert name == "./lmdir/qwen-tiny"
    assert written.parent == folder
    assert written.is_file()
    assert written.name.startswith("ort__lmdir_qwen-tiny")
    assert [p.name for p in folder.iterdir()] == [written.name]
