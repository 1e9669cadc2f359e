from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from scripts.image_requirements import RequirementsError, read_pins, requirements

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "image_requirements.py"

PYPROJECT = {
    "project": {
        "dependencies": ["av>=14", "onnxruntime>=1.18", "uvloop>=0.19; sys_platform != 'win32'",
                         "Prometheus_Client>=0.20"],
        "optional-dependencies": {"lm": ["tokenizers[extra]>=0.21"]},
    }
}  # fmt: skip
PINS = read_pins("# header\nav==18.1.0\nonnxruntime==1.32.0\nuvloop==0.23.0\nprometheus-client==0.26.0\n"
                 "tokenizers==0.23.3  # the LM layer\n")  # fmt: skip


def test_each_dependency_comes_out_pinned_with_its_marker() -> None:
    assert requirements(PYPROJECT, PINS, extras=[]) == [
        "av==18.1.0",
        "onnxruntime==1.32.0",
        "uvloop==0.23.0 ; sys_platform != 'win32'",
        "Prometheus_Client==0.26.0",
    ]


def test_extras_and_the_nvidia_flavor_at_its_own_pin() -> None:
    # onnxruntime-gpu is pinned apart: PyPI may have no onnxruntime-gpu at onnxruntime's version.
    lines = requirements(PYPROJECT, {**PINS, "onnxruntime-gpu": "1.31.1"}, extras=["lm"], flavor="nvidia")
    assert "onnxruntime-gpu==1.31.1" in lines
    assert not any(line.startswith("onnxruntime==") for line in lines)
    assert lines[-1] == "tokenizers[extra]==0.23.3"
    with pytest.raises(
        RequirementsError,
        match=r"onnxruntime-gpu \(the nvidia flavor's onnxruntime\) has no pin: pass --pin onnxruntime-gpu==VERSION",
    ):
        requirements(PYPROJECT, PINS, extras=[], flavor="nvidia")


def test_an_unpinned_dependency_or_an_unknown_extra_is_refused() -> None:
    with pytest.raises(RequirementsError, match=r"av has no pin in constraints\.txt"):
        requirements(PYPROJECT, {k: v for k, v in PINS.items() if k != "av"}, extras=[])
    with pytest.raises(RequirementsError, match=r"no extra gpu in pyproject\.toml \(it has: lm\)"):
        requirements(PYPROJECT, PINS, extras=["gpu"])


def test_the_project_pins_every_dependency_of_every_extra() -> None:
    # What the image installs and what CI installs must not float: one pin per requirement.
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    extras = list(pyproject["project"].get("optional-dependencies", {}))
    pins = {**read_pins((REPO / "constraints.txt").read_text()), "onnxruntime-gpu": "1.31.1"}
    for flavor in ("cpu", "nvidia"):
        lines = requirements(pyproject, pins, extras=extras, flavor=flavor)
        assert all("==" in line for line in lines)


@pytest.mark.slow
def test_the_script_as_the_dockerfile_runs_it(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--flavor", "cpu", "--extras", ""], cwd=REPO,
                          capture_output=True, text=True, timeout=30)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert any(line.startswith("onnxruntime==") for line in done.stdout.splitlines())
    wrong = subprocess.run([sys.executable, str(SCRIPT), "--extras", "nope"], cwd=REPO,
                           capture_output=True, text=True, timeout=30)  # fmt: skip
    assert wrong.returncode == 2
    assert wrong.stderr.startswith("image_requirements: no extra nope in pyproject.toml")


@pytest.mark.slow
def test_a_pin_on_the_command_line_overrides_constraints() -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=REPO, capture_output=True, text=True,
                              timeout=30)  # fmt: skip

    done = run("--flavor", "nvidia", "--pin", "onnxruntime-gpu==1.31.1", "--pin", "numpy==2.0.0")
    assert done.returncode == 0, done.stderr
    assert {"onnxruntime-gpu==1.31.1", "numpy==2.0.0"} <= set(done.stdout.splitlines())
    unpinned = run("--flavor", "nvidia")
    assert unpinned.returncode == 2
    assert "onnxruntime-gpu (the nvidia flavor's onnxruntime) has no pin" in unpinned.stderr
    bad = run("--pin", "onnxruntime-gpu")
    assert bad.returncode == 2
    assert bad.stderr == "image_requirements: --pin: 'onnxruntime-gpu' is not name==version\n"
