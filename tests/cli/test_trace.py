"""``edgepipe trace``: a real pipeline with the real CenterFace, its Chrome trace and summary,
and the exit codes of a wrong command line."""

from __future__ import annotations

import functools
import json
import subprocess
from pathlib import Path

import pytest

from tests.support.cli_process import Command, edgepipe, in_process

REPO = Path(__file__).resolve().parents[2]


def trace(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return edgepipe("trace", *args, cwd=cwd)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A working folder of the test's own, as a checkout looks (``pipelines/``) and nothing else:
    what a user's commands left in the checkout (a ``trace.json``) is not seen, and what the
    command writes is."""
    (tmp_path / "pipelines").symlink_to(REPO / "pipelines", target_is_directory=True)
    return tmp_path


@pytest.fixture
def refused(capsys: pytest.CaptureFixture[str], workdir: Path) -> Command:
    """``edgepipe trace ARGS`` in this process, in ``workdir``: for command lines it refuses or
    only helps with (nothing is run, no child needed)."""
    return functools.partial(in_process, capsys, "trace", cwd=workdir)


@pytest.mark.slow
def test_face_privacy_trace_opens_and_names_the_slowest_step(centerface: Path, workdir: Path) -> None:
    out = workdir / "run.json"
    done = trace("pipelines/face_privacy.py", "--duration", "3", "-o", out, "--format", "json", cwd=workdir)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    events = json.loads(out.read_text())["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in complete)
    assert all(
        isinstance(e[k], int | float | str | dict) for e in complete for k in ("name", "pid", "tid", "args")
    )
    nodes = {e["args"]["node"] for e in complete if e.get("cat") == "node"}
    assert nodes == {"camera", "faces", "pixelate", "log", "view_results", "view"}
    ort_ops = {e["args"]["op_name"] for e in complete if "op_name" in e["args"]}
    assert "FusedConv" in ort_ops  # CenterFace's Conv+Relu, fused on the CPU
    assert {e["args"]["provider"] for e in complete if "provider" in e["args"]} == {"CPUExecutionProvider"}
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {"edgepipe: face_privacy", "onnxruntime: centerface"}
    # The slowest step is the one with the most time in it, whichever that was here.
    work = [s for s in summary["steps"] if s["step"] != "next item"]
    slowest = max(work, key=lambda s: s["total_ms"])
    assert summary["slowest_step"] == f"{slowest['node']} {slowest['step']}"
    [model] = summary["models"]
    assert model["node"] == "faces"
    assert model["operator_runs"] > 0
    assert any(f["fusion"].endswith("FusedConv") and f["ok"] for f in model["fusions"])
    assert {(b["owner"], b["buffer"]): b["rebuilt"] for b in summary["buffers"]} == {
        ("camera", "frame pool"): 0, ("faces", "input tensors"): 0,
    }  # fmt: skip
    assert summary["frames"] > 0
    energy = summary["energy"]
    assert energy["measurable"] or energy["reason"].startswith("not measurable here (")
    assert summary["problems"] == []


@pytest.mark.slow
def test_describe_scene_on_the_projects_tiny_model_has_no_problem(centerface: Path, workdir: Path) -> None:
    from scripts import tiny_lm

    model = tiny_lm.write(workdir / "tiny-lm", tiny_lm.TinyConfig(), "gqa").parent  # as the docs make it
    done = trace("pipelines/describe_scene.py", "--duration", "3", "--model", model, "-o", workdir / "d.json",
                 "--format", "json", cwd=workdir)  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    summary = json.loads(done.stdout)
    assert summary["problems"] == []
    lm = next(m for m in summary["models"] if m["node"] == "describe")
    [norm] = [f for f in lm["fusions"] if f["fusion"].startswith("layer norm")]
    assert (norm["expected"], norm["ok"]) == (False, True)  # Mul(x, x): ONNX Runtime fuses no such norm
    assert "Mul(x, x)" in norm["note"]
    for model in summary["models"]:  # a share of a node's time: never more than all of it
        assert model["share_of_node"] is None or 0 <= model["share_of_node"] <= 1, model


def test_file_help_lists_the_pipelines_parameters(refused: Command) -> None:
    done = refused("pipelines/face_privacy.py", "--help")
    assert done.returncode == 0, done.stderr
    assert "--duration SECONDS" in done.stdout
    assert "--threshold" in done.stdout  # one of face_privacy's own


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["pipelines/face_privacy.py"], "give --duration SECONDS"),
        (["pipelines/face_privacy.py", "--duration", "0"], "expected a finite number of seconds above 0"),
        (
            ["pipelines/face_privacy.py", "--duration", "1", "-o", "no/such/dir/t.json"],
            "-o no/such/dir/t.json",
        ),
        (["pipelines/face_privacy.py", "--duration", "1", "--no-such-param", "3"], "no-such-param"),
        (["pipelines/nope.py", "--duration", "1"], "nope.py"),
        (["--duration", "1"], "give a pipeline file"),
    ],
)
def test_a_wrong_command_line_is_exit_2_in_one_line(
    refused: Command, workdir: Path, args: list[str], message: str
) -> None:
    done = refused(*args)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert sorted(p.name for p in workdir.iterdir()) == ["pipelines"]  # no trace.json, nothing written
