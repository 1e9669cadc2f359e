"""``edgepipe run FILE --plan``: the shipped pipelines, a KV cache that cannot fit, a smaller budget."""

from __future__ import annotations

import re
import subprocess
import textwrap
from pathlib import Path

import pytest

from edgepipe.cli.main import main
from edgepipe.planning.memory import format_bytes
from edgepipe.sched.budget import CpuBudget, usable_cores
from edgepipe.vision.preprocess import tensor_buffers
from scripts import tiny_lm
from tests.support.cli_process import edgepipe


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return edgepipe("run", *args, env=env)


def table(out: str) -> list[tuple[str, ...]]:
    """The plan's rows (node, what, size), cells split where the columns are."""
    lines = out.splitlines()
    rows = [tuple(re.split(r"\s{2,}", line.strip())) for line in lines[2:] if line.startswith("  ")]
    return [row for row in rows if len(row) == 3]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("lm")
    config = tiny_lm.TinyConfig(max_seq_len=256)
    return {layout: tiny_lm.write(root / layout, config, layout).parent for layout in ("gqa", "concat")}


FAKE = """\
    from edgepipe import Pipeline

    class Camera:
        def __iter__(self):
            return iter(())

        def plan_memory(self, plan, node):
            plan.reserve(node.node_id, f"frame pool ({sum(node.consumer_holds) + 1} frames)", 3_000_000)
            return (640, 480)

    class Model:
        def process(self, item):
            return item

        def plan_memory(self, plan, node):
            plan.reserve(node.node_id, "model weights (m.onnx)", 50_000_000, device="cuda:0")
            plan.reserve(node.node_id, "input tensors", 1_200_000)
            node.unknown("scratch", "sized by the first frame")

    def pipeline() -> Pipeline:
        p = Pipeline("fake")
        cam = p.source("camera", Camera())
        det = p.stage("detector", Model(), inputs=cam, policy="latest", queue_size=1)
        p.sink("log", print, inputs=det, queue_size=1)
        return p
"""


def test_the_plan_is_a_table_of_each_nodes_buffers_against_the_budget(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "fake.py"
    path.write_text(textwrap.dedent(FAKE))
    monkeypatch.setenv("EDGEPIPE_MEMORY_FRAC", "0.5")
    assert main(["run", str(path), "--plan", "-q"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:6] == [
        "memory plan of 'fake' (nothing started, nothing allocated):",
        "  node      what                    size",
        "  camera    frame pool (3 frames)   3.0 MB",  # one in the lane, one in hand, one made
        "  detector  model weights (m.onnx)  50.0 MB on cuda:0",
        "  detector  input tensors           1.2 MB",
        "  detector  scratch                 unknown (sized by the first frame)",
    ]
    assert lines[6].startswith("total: 4.2 MB of a ")
    assert "(50% of the " in lines[6]
    assert lines[7:9] == [
        "on cuda:0: 50.0 MB (the device's own memory, outside the budget)",
        "1 buffer(s) of unknown size are not in the total",
    ]
    assert lines[9].startswith("fits: ")
    assert lines[9].endswith(" of the budget left")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["demo", "face_privacy", "describe_scene"])
def test_every_shipped_pipeline_has_a_plan_that_fits(
    name: str, centerface: Path, models: dict[str, Path]
) -> None:
    args = ["--model", str(models["gqa"])] if name == "describe_scene" else []
    done = run(f"pipelines/{name}.py", "--plan", *args)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert out.startswith(f"memory plan of '{name}' (nothing started, nothing allocated):\n")
    rows = table(out)
    whats = [(node, re.sub(r"\(.*", "", what).strip()) for node, what, _ in rows]
    expected = [("camera", "frame pool"), ("faces", "model weights"), ("faces", "input tensors")]
    if name == "describe_scene":
        expected += [("describe", "model weights"), ("describe", "KV cache")]
    assert whats == expected
    assert ("faces", "model weights (centerface.onnx)", "7.3 MB") in rows
    # A tensor set for each call in flight the CPU budget gives the detector here, and two more.
    buffers = tensor_buffers(1, CpuBudget(usable_cores()).instances)
    tensors = format_bytes(buffers * 640 * 480 * 3 * 4)
    assert ("faces", f"input tensors ({buffers} x 640x480 float32)", tensors) in rows
    if name == "describe_scene":
        assert ("describe", "KV cache (shared, 256 positions)", "0.3 MB") in rows
    assert out.splitlines()[-1].startswith("fits: ")
    assert "running" not in done.stderr  # nothing ran


BIG_KV = """\
    from pathlib import Path

    from edgepipe import Pipeline
    from edgepipe.lm import Describe
    from edgepipe.media import VideoSource

    def pipeline(model: Path, max_seq_len: int = 1_000_000_000) -> Pipeline:
        p = Pipeline("big_kv")
        camera = p.source("camera", VideoSource("synthetic://320x240@5"))
        words = p.stage("narrate", Describe(model, max_seq_len=max_seq_len), inputs=camera, policy="latest",
                        queue_size=1)
        p.sink("log", print, inputs=words)
        return p
"""


@pytest.mark.slow
def test_a_kv_cache_that_cannot_fit_exits_1_naming_it_and_its_node(
    tmp_path: Path, models: dict[str, Path]
) -> None:
    path = tmp_path / "big_kv.py"
    path.write_text(textwrap.dedent(BIG_KV))
    done = run(str(path), "--plan", "--model", str(models["concat"]))
    assert done.returncode == 1  # problems found, as `edgepipe plan FILE` says it, done.stdout + done.stderr
    assert ("narrate", "KV cache (concat, 1000000000 positions)", "2048.00 GB") in table(done.stdout)
    assert "does not fit: narrate: KV cache (concat, 1000000000 positions) needs 2048.00 GB, " in done.stdout
    [error] = [line for line in done.stderr.splitlines() if line.startswith("edgepipe: error:")]
    assert error.startswith(
        "edgepipe: error: narrate: KV cache (concat, 1000000000 positions) needs 2048.00 GB"
    )
    assert error.endswith("pass a smaller max_seq_len, or raise EDGEPIPE_MEMORY_FRAC")
    fits = run(str(path), "--plan", "--model", str(models["concat"]), "--max-seq-len", "512")
    assert fits.returncode == 0, fits.stdout + fits.stderr
    assert ("narrate", "KV cache (concat, 512 positions)", "1.0 MB") in table(fits.stdout)


@pytest.mark.slow
def test_a_smaller_budget_from_the_environment_names_the_first_buffer_past_it(centerface: Path) -> None:
    # 1080p frames, 3.1 MB each: a pool of the lanes of motion, faces and the view sink, a frame
    # each in hand, the faces detector's calls in flight (instances + 2 frames), one decoding.
    pool = 8 + CpuBudget(usable_cores()).instances
    need = format_bytes(pool * 1920 * 1080 * 3 // 2)
    done = run("pipelines/demo.py", "--plan", "--source", "synthetic://1920x1080@5",
                    env={"EDGEPIPE_MEMORY_FRAC": "0.00001"})  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"does not fit: camera: frame pool ({pool} x 1920x1080) needs {need}, " in done.stdout
    assert f"edgepipe: error: camera: frame pool ({pool} x 1920x1080) needs {need}" in done.stderr


@pytest.mark.slow
def test_an_input_that_cannot_be_opened_is_unknown_and_a_missing_model_exits_1(
    tmp_path: Path, centerface: Path
) -> None:
    missing = tmp_path / "missing.mp4"
    done = run("pipelines/face_privacy.py", "--plan", "--source", str(missing))
    assert done.returncode == 0, done.stdout + done.stderr
    # The camera's consumers' lanes and what they hold (the detector: its calls in flight + 2).
    pool = 7 + CpuBudget(usable_cores()).instances
    assert (
        "camera",
        f"frame pool ({pool} frames)",
        f"unknown (cannot open {missing}: no such file)",
    ) in table(done.stdout)
    done = run("pipelines/demo.py", "--plan", "--detect", str(tmp_path / "gone.onnx"))
    assert done.returncode == 1, done.stdout + done.stderr
    [(_, _, why)] = [row for row in table(done.stdout) if row[:2] == ("faces", "cannot plan")]
    assert why.startswith(f"model {tmp_path / 'gone.onnx'}: no such file")
    assert "edgepipe: error: the plan is incomplete: 'faces' could not be planned" in done.stderr
