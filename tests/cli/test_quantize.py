from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import skimage.data

from edgepipe.core.install import install_command
from edgepipe.infer import SessionConfig
from edgepipe.infer.footprint import read_metadata
from edgepipe.media.frame import from_rgb
from edgepipe.vision import Detector
from tests.support.cli_process import edgepipe

REPO = Path(__file__).resolve().parents[2]


def quantize(
    *args: str | Path, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return edgepipe("quantize", *args, cwd=cwd, env=env, timeout_s=180)


def errors(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.strip()]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_centerface_quantized_on_a_real_clip_is_smaller_and_finds_the_same_faces(
    tmp_path: Path, centerface: Path, make_clip: Callable[..., Path]
) -> None:
    # The clip's scene: scikit-image's photos (the astronaut among them) and the astronaut's
    # face walking through; 320x192 keeps it quick.
    clip = make_clip("faces.mp4", width=320, height=192, fps=15, seconds=2)
    out = tmp_path / "cf.int8.onnx"
    done = quantize("centerface", "--calib", clip, "-o", out, "--frames", "8", "--held-out", "8",
                    "--format", "json", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["size_bytes"] == {"fp32": centerface.stat().st_size, "int8": out.stat().st_size}
    assert out.stat().st_size < centerface.stat().st_size / 2
    assert report["calibration"]["frames"] == 8
    assert report["calibration"]["input_shape"] == [1, 3, 192, 320]
    assert report["held_out_frames"] == 8
    faces = report["detections"]
    assert faces["fp32"] >= 3, "the clip's frames show faces"
    assert faces["matched"] / faces["fp32"] >= 0.9
    assert faces["agreement"] == faces["matched"] / faces["fp32"]
    assert report["latency_ms"]["fp32"] > 0
    assert report["latency_ms"]["int8"] > 0
    assert len(report["outputs"]) == 4
    for output in report["outputs"]:
        assert 0 < output["mean_abs_error"] <= output["max_abs_error"]  # INT8 is close, not equal
    assert report["ok"] is True
    assert not list(tmp_path.glob(".*.part"))

    # Given by path, the INT8 model decodes and names its detections as its source does: "face",
    # not "class0" (its metadata says so; the registry knows only the source's checksum).
    assert report["settings"]["labels"] == ["face"]
    assert read_metadata(out)["edgepipe.source"] == "centerface"
    detector = Detector(str(out), session=SessionConfig(cache_optimized=False))
    found = detector.process(from_rgb(skimage.data.astronaut()))
    assert (detector.adapter, detector.labels) == ("centerface", ("face",))
    assert [d.label for d in found] == ["face"]

    # Never overwritten without --force.
    before = out.read_bytes()
    again = quantize("centerface", "--calib", clip, "-o", out, cwd=tmp_path)
    assert again.returncode == 2
    assert errors(again) == [f"edgepipe: error: {out} exists; pass --force to replace it, or -o another path"]
    assert out.read_bytes() == before


@pytest.mark.slow
def test_text_output_names_size_latency_and_agreement(
    tmp_path: Path, centerface: Path, make_clip: Callable[..., Path]
) -> None:
    clip = make_clip("faces_text.mp4", width=320, height=192, fps=15, seconds=2)
    done = quantize("centerface", "--calib", clip, "--frames", "4", "--held-out", "4",
                    "--exclude", "Sigmoid", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "centerface.int8.onnx").is_file()  # a registry model's INT8 lands here
    out = done.stdout
    assert "kept in FP32: Sigmoid_" in out
    for words in (
        "size",
        "latency (median)",
        "error on 4 held-out frames",
        "FP32 detections have an INT8 match",
    ):
        assert words in out


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["centerface"], "quantize needs calibration frames: --calib VIDEO"),
        (["centerface", "--calib", "missing.mp4"], "--calib missing.mp4: no such file or folder"),
        (["missing.onnx", "--calib", "x.mp4"], "missing.onnx: no such file"),
        (["centerface", "--calib", ".", "-o", "."], "is a folder"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, centerface: Path, args: list[str], message: str
) -> None:
    done = quantize(*args, cwd=tmp_path)
    assert done.returncode == 2
    (line,) = errors(done)
    assert line.startswith("edgepipe: error: ")
    assert message in line


@pytest.mark.slow
def test_without_the_onnx_package_it_names_the_extra(tmp_path: Path) -> None:
    blocker = tmp_path / "blocked" / "onnx"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('onnx is not installed here')\n")
    # the blocker first, then this checkout's edgepipe (not whichever one the venv has installed)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(blocker.parent), str(REPO)]))
    done = quantize("centerface", "--calib", "clip.mp4", cwd=tmp_path, env=env)
    assert done.returncode == 2
    assert errors(done) == [
        "edgepipe: error: edgepipe quantize needs the 'onnx' package, which is not installed: "
        + install_command("deploy", cwd=tmp_path)
    ]


@pytest.mark.slow
def test_a_model_that_is_no_detector_is_exit_2_naming_the_adapter_flag(tmp_path: Path, clip: Path) -> None:
    from tests.support.onnx_builders import add_model

    model = add_model(tmp_path / "add.onnx", shape=(1, 3, "H", "W"))
    done = quantize(model, "--calib", clip, "--frames", "2", "--held-out", "1", cwd=tmp_path)
    assert done.returncode == 2
    (line,) = errors(done)
    assert line.startswith("edgepipe: error: add.onnx: quantize takes a detector")
    assert "--adapter" in line
    assert not (tmp_path / "add.int8.onnx").exists()  # refused before anything was written


def test_an_output_that_cannot_be_written_is_exit_2_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from edgepipe.cli.main import main
    from tests.support.onnx_builders import add_model

    model = add_model(tmp_path / "add.onnx", shape=(1, 3, "H", "W"))
    out = tmp_path / ("m" * 300 + ".onnx")  # a name no Linux file system takes; root gets it too
    assert main(["quantize", str(model), "--calib", str(model), "-o", str(out)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"edgepipe: error: -o {out}: cannot write there (file name too long); give the path of a file to write"
    ]
    assert list(tmp_path.iterdir()) == [model]  # nothing left behind


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_held_out_frames_without_a_face_are_not_an_agreement(tmp_path: Path, centerface: Path) -> None:
    import av
    import numpy as np

    clip = tmp_path / "grey.mp4"
    with av.open(str(clip), "w") as container:
        stream = container.add_stream("libx264", rate=10)
        stream.width, stream.height, stream.pix_fmt = 320, 192, "yuv420p"
        grey = np.full((192, 320, 3), 128, np.uint8)
        for _ in range(10):
            container.mux(stream.encode(av.VideoFrame.from_ndarray(grey, format="rgb24")))
        container.mux(stream.encode())
    out = tmp_path / "cf.int8.onnx"
    done = quantize("centerface", "--calib", clip, "-o", out, "--frames", "4", "--held-out", "4",
                    cwd=tmp_path)  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert errors(done)[-1].startswith(
        f"edgepipe: error: FP32 found nothing in the held-out frames of {clip}"
    )
    assert out.exists()  # written all the same, as the message says


# -- a language model's folder ----------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_lm_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.deploy.quantize.lm_models import tiny_decoder

    return tiny_decoder(tmp_path_factory.mktemp("quantize_lm") / "tiny")


def test_a_language_model_folder_is_quantized_and_checked_on_prompts(
    tmp_path: Path, tiny_lm_folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from edgepipe.cli.main import main

    prompts = tmp_path / "prompts.txt"
    prompts.write_text("hello there\n\nthe cat sat\n")
    out = tmp_path / "tiny-int8"
    code = main(["quantize", str(tiny_lm_folder), "--bits", "8", "-o", str(out), "--prompts", str(prompts),
                 "--positions", "8", "--format", "json"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    report = json.loads(capsys.readouterr().out)
    assert (report["bits"], report["block"], report["accuracy_level"]) == (8, 32, 4)
    assert report["kept"] == ["embed"]
    assert report["agreement"]["prompts"] == 2  # the blank line is no prompt
    assert report["agreement"]["positions"] == 16
    assert report["agreement"]["cosine_mean"] > 0.99
    assert report["weight_bytes"]["output"] < report["weight_bytes"]["source"] * 0.4
    assert (report["min_agreement"], report["min_cosine"], report["ok"]) == (0.3, 0.9, True)
    assert (out / "model.onnx").is_file()

    # The default: int4 beside the source, in a table; then the same again is refused.
    assert main(["quantize", str(tiny_lm_folder), "--positions", "4"]) == 0
    text = capsys.readouterr().out
    assert f"{tiny_lm_folder} -> {tiny_lm_folder}-int4 (int4 weights, MatMulNBits block 32" in text
    assert "agreement on 16 positions of 4 prompts: logit cosine mean" in text
    assert main(["quantize", str(tiny_lm_folder)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"edgepipe: error: {tiny_lm_folder}-int4 exists; pass --force to replace it, or -o another folder"
    ]
    assert main(["quantize", f"{tiny_lm_folder}-int4", "-o", str(tmp_path / "again")]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"edgepipe: error: {tiny_lm_folder}-int4: already quantized (it has MatMulNBits); "
        "quantize the float model it was made from"
    ]


def test_weights_perturbed_on_purpose_fail_the_check_exit_1(
    tmp_path: Path, tiny_lm_folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from edgepipe.cli.main import main
    from tests.deploy.quantize.lm_models import with_outliers

    # An outlier in every 32-weight block: int4 keeps it and rounds the rest of its block away.
    source = with_outliers(tiny_lm_folder, tmp_path / "outliers")
    out = tmp_path / "q"
    assert main(["quantize", str(source), "-o", str(out), "--positions", "16", "--format", "json"]) == 1
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["ok"] is False
    assert report["agreement"]["cosine_mean"] < 0.9
    (line,) = captured.err.splitlines()
    assert line.startswith("edgepipe: error: the int4 model strays from the source: ")
    assert "the mean logit cosine is 0." in line
    assert (out / "model.onnx").is_file()  # written all the same, as the detector path does
    # The same folder at 8 bits holds the outliers well enough.
    assert main(["quantize", str(source), "-o", str(tmp_path / "q8"), "--bits", "8", "--positions", "8"]) == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{add}"], "{add}: model.onnx is not a decoder with a KV cache: no input_ids"),
        (["{add}", "--bits", "4"], "{add}: model.onnx is not a decoder with a KV cache"),
        (
            ["{add_file}", "--bits", "4", "--block", "64"],
            "{add_file}: not a folder; --bits --block are for a",
        ),
        (["{lm}", "--keep", "head"], "--keep head: name lm_head, embed or both"),
        (["{lm}", "--block", "48"], "--block 48: a power of two, 16 or more"),
        (["{lm}", "--calib", "clip.mp4"], "--calib clip.mp4: {lm} is a language model's folder"),
        (
            ["{lm}", "--prompts", "{missing}"],
            "--prompts {missing}: cannot read it (No such file or directory)",
        ),
        (["{lm}", "-o", "{lm}"], "-o {lm}: is the source folder"),
    ],
)
def test_a_language_model_folder_that_cannot_be_quantized_is_one_line_and_exit_2(
    tmp_path: Path, tiny_lm_folder: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    from edgepipe.cli.main import main
    from tests.support.onnx_builders import add_model

    (tmp_path / "add").mkdir()
    add_model(tmp_path / "add" / "model.onnx")
    names = {"add": tmp_path / "add", "add_file": tmp_path / "add" / "model.onnx", "lm": tiny_lm_folder,
             "missing": tmp_path / "missing.txt"}  # fmt: skip
    out = [] if "-o" in args else ["-o", str(tmp_path / "q")]  # never the default: an earlier test's
    assert main(["quantize", *(a.format(**names) for a in args), *out]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("edgepipe: error: ")
    assert message.format(**names) in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["add"]  # nothing written
