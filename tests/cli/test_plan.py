from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from scripts import tiny_lm
from tests.deploy.conftest import CONFIG
from tests.support.cli_process import Command, in_process

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny_lm_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("plan_cli_lm")
    return {layout: tiny_lm.write(root / layout, CONFIG, layout).parent for layout in ("concat", "gqa")}


@pytest.fixture
def plan(capsys: pytest.CaptureFixture[str]) -> Command:
    """``edgepipe plan ARGS``, run in this process (it starts nothing: no child needed)."""
    return functools.partial(in_process, capsys, "plan")


def test_json_has_the_bandwidth_needed(plan: Command) -> None:
    done = plan("--param-count", "3e9", "--dtype", "fp16", "--tokens-per-s", "20", "--format", "json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["bandwidth_needed_gb_s"] == pytest.approx(120.0)
    assert data["models"][0]["bytes_per_token"] == 6_000_000_000


def test_text_prints_every_term_and_what_to_change(plan: Command) -> None:
    done = plan("--param-count", "3e9", "--dtype", "fp16", "--tokens-per-s", "20", "--layers", "32",
                "--kv-heads", "8", "--head-dim", "128", "--heads", "32", "--max-seq-len", "2048",
                "--device", "jetson-orin-nano-8gb")  # fmt: skip
    assert done.returncode == 1, done.stderr  # 120 GB/s > 68, 6 GB of weights > 70% of 8 GB
    out = done.stdout
    assert "6.0 GB x 20 tokens/s = 120.0 GB/s of 68 GB/s" in out
    assert ("32 layers x 2 (K and V) x 2048 positions x 8 KV heads x head dim 128 x 2 bytes = "
            "268,435,456 bytes (268.4 MB)") in out  # fmt: skip
    assert "8x too small" in out
    assert "4x too big" in out
    assert "binds first: bandwidth" in out
    assert "quantize the weights to int8" in out
    assert (
        "or offload it to an engine on another machine: 120.0 GB/s needed at 20 tokens/s, 68 GB/s here" in out
    )
    assert "plan: does NOT fit" in out


def test_a_long_context_is_shortened_in_the_advice(plan: Command) -> None:
    done = plan("--param-count", "1e9", "--dtype", "int4", "--layers", "32", "--kv-heads", "8",
                "--head-dim", "128", "--max-seq-len", "32768", "--sequences", "4", "--ram-gb", "8")  # fmt: skip
    assert done.returncode == 1
    assert "shorten the context to" in done.stdout
    assert "serve at most" in done.stdout


def test_a_model_read_from_its_onnx_file(plan: Command, tiny_lm_dirs: dict[str, Path]) -> None:
    done = plan(tiny_lm_dirs["gqa"] / "model.onnx", "--tokens-per-s", "50", "--bandwidth-gb-s", "10",
                "--ram-gb", "1", "--format", "json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    model = json.loads(done.stdout)["models"][0]
    kv = model["kv_cache"]
    assert (kv["layers"], kv["kv_heads"], kv["head_dim"], kv["positions"]) == (
        CONFIG.layers,
        CONFIG.kv_heads,
        CONFIG.head_dim,
        CONFIG.max_seq_len,
    )
    assert (
        kv["per_sequence_bytes"]
        == CONFIG.layers * 2 * CONFIG.max_seq_len * CONFIG.kv_heads * CONFIG.head_dim * 4
    )
    assert model["bandwidth_needed_gb_s"] == pytest.approx(model["bytes_per_token"] * 50 / 1e9)


def test_a_pipeline_file_is_planned_through_the_memory_plan(
    plan: Command, tiny_lm_dirs: dict[str, Path]
) -> None:
    done = plan("pipelines/describe_scene.py", "--model", tiny_lm_dirs["concat"], "--device", "rk3588",
                "--tokens-per-s", "5")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "memory plan of 'describe_scene'" in out
    assert "describe  KV cache (concat, 64 positions)" in out  # the runner's own reservation
    assert "model describe (" in out
    assert "2 layers x 2 (K and V) x 64 positions x 2 KV heads" in out
    assert "camera (synthetic, as h264): 1 x 640x480@15 h264" in out


def test_a_pipeline_parameter_that_is_wrong_is_exit_2(plan: Command, tiny_lm_dirs: dict[str, Path]) -> None:
    done = plan("pipelines/describe_scene.py", "--model", tiny_lm_dirs["concat"], "--every-s", "-1")
    assert done.returncode == 2
    assert "every" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_device_typo_is_exit_2_with_did_you_mean(plan: Command) -> None:
    done = plan("--param-count", "3e9", "--device", "jetson-orin-nx-16")
    assert done.returncode == 2
    assert done.stderr.startswith("edgepipe: error: --device: no device 'jetson-orin-nx-16'")
    assert "did you mean 'jetson-orin-nx-16gb'" in done.stderr
    assert "Traceback" not in done.stderr


def test_nothing_to_plan_is_exit_2(plan: Command) -> None:
    done = plan("--device", "rk3588")
    assert done.returncode == 2
    assert "nothing to plan" in done.stderr


def test_too_many_streams_for_the_decoder_say_how_many_fit(plan: Command) -> None:
    done = plan("--streams", "20", "--resolution", "1920x1080", "--fps", "30", "--codec", "hevc",
                "--device", "jetson-orin-nano-8gb", "--format", "json")  # fmt: skip
    assert done.returncode == 1
    (load,) = json.loads(done.stdout)["decode"]
    assert load["max_streams"] == 11
    assert "at most 11 stream(s) of 1920x1080@30" in json.loads(done.stdout)["advice"][0]


def test_a_missing_model_is_exit_2_and_a_pipelines_help_lists_its_parameters(
    plan: Command, tmp_path: Path
) -> None:
    done = plan(tmp_path / "missing.onnx")
    assert done.returncode == 2
    assert done.stderr.startswith("edgepipe: error: model ")
    helped = plan("pipelines/describe_scene.py", "--help")
    assert helped.returncode == 0
    assert "--tokens-per-s" in helped.stdout
    assert "--every-s" in helped.stdout


def test_a_pipeline_parameter_with_a_flag_of_plan_is_the_pipeline_s(plan: Command, tmp_path: Path) -> None:
    file = tmp_path / "p.py"
    file.write_text(
        "from edgepipe import Pipeline\n"
        "def pipeline(fps: float = 30.0) -> Pipeline:\n"
        "    if fps != 5.0:\n"
        "        raise ValueError(f'fps {fps} did not reach the pipeline')\n"
        "    p = Pipeline()\n"
        "    p.sink('out', print, inputs=p.source('n', iter(range(3))))\n"
        "    return p\n"
    )
    result = plan(file, "--fps", "5", "--device", "rk3588")
    assert result.returncode == 0, result.stderr
    assert "plan: fits" in result.stdout
    shown = plan(file, "--help")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.count("--fps") == 2  # in the usage and once in the list: the pipeline's
    assert f"parameters of {file}" in shown.stdout


def test_streams_stand_for_a_pipelines_camera_not_beside_it(
    plan: Command, tiny_lm_dirs: dict[str, Path]
) -> None:
    done = plan("pipelines/describe_scene.py", "--model", tiny_lm_dirs["concat"], "--device", "rk3588",
                "--streams", "2", "--format", "json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    [load] = data["decode"]
    assert load["streams"] == ["2 x 640x480@15 h264"]  # two of the pipeline's camera, not three streams
    pools = {e["owner"]: e["what"] for e in data["memory"]["entries"] if "frame pool" in e["what"]}
    capacity = pools["camera"].split("(")[1].split(" x ")[0]
    assert pools["--streams"] == f"1 more x frame pool ({capacity} x 640x480)"  # the second camera's
    text = plan("pipelines/describe_scene.py", "--model", tiny_lm_dirs["concat"], "--streams", "3",
                "--resolution", "1920x1080", "--codec", "h265", "--device", "rk3588")  # fmt: skip
    assert "--streams 3 in place of camera: 3 x 1920x1080@15 h265" in text.stdout


def test_a_device_says_which_check_ops_table_its_models_need(plan: Command) -> None:
    hailo = plan("--param-count", "5e8", "--device", "raspberry-pi-5-hailo-8").stdout
    assert "  operators: edgepipe has no operator table for a Hailo-8 or Hailo-8L: " in hailo
    assert "the host CPU's table is --target cpu" in hailo
    assert (
        "  operators: edgepipe check-ops MODEL --target rknn (then cpu)"
        in plan("--param-count", "5e8", "--device", "rk3588").stdout
    )
