"""``edgepipe run``'s values checked before anything starts (exit 2 naming them) and outputs
that fail at run time (exit 1 naming them; a closed ``--results -`` pipe stops the run, exit 0):
real subprocesses, real files."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.cli.test_main import ENDLESS, edgepipe, write
from tests.support.cli_process import start

pytestmark = pytest.mark.slow

NOISE = ("Traceback", "Exception ignored", "BrokenPipeError", "internal error")


def error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("edgepipe") and "error:" in line]
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--input-size", "-3"], ["--input-size", "[32, 4096]", "'-3'"]),
        (["--threshold", "nan"], ["--threshold", "'nan'"]),
        (["--every", "0"], ["--every", "at least 1"]),
        (["--output", "/proc/edgepipe-x.mp4"], ["--output", "/proc/edgepipe-x.mp4"]),
        (["--output", "{tmp}/missing/x.mp4"], ["--output", "missing does not exist; create it first"]),
        (["--output", "{tmp}"], ["--output", "not a folder"]),
        (
            ["--events-dir", "{tmp}/missing/events"],
            ["--events-dir", "missing does not exist; create it first"],
        ),
        (["--duration", "nan"], ["--duration", "finite number of seconds above 0"]),
        (["--duration", "-1"], ["--duration", "'-1'"]),
        (["--duration", "0"], ["--duration", "'0'"]),
        (["--drain-timeout", "-5"], ["--drain-timeout", "at least 0"]),
        (["--port", "70000"], ["--port", "0-65535"]),
        (["--results", "{tmp}"], ["--results", "not a folder"]),
        (["--results", "/proc/edgepipe-r.jsonl"], ["--results", "/proc/edgepipe-r.jsonl"]),
    ],
)
def test_a_wrong_value_is_exit_2_naming_it_before_anything_starts(
    tmp_path: Path, args: list[str], names: list[str]
) -> None:
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    outputs = ["--output", str(tmp_path / "pixelated.mp4")] if "--output" not in args else []
    result = edgepipe("run", "pipelines/face_privacy.py", *outputs, *args, "--duration", "5")
    assert result.returncode == 2, result.stderr
    line = error_line(result.stderr)
    for name in names:
        assert name in line, line
    assert not any(noise in result.stderr for noise in NOISE), result.stderr
    assert "running 'face_privacy'" not in result.stderr  # refused before it starts
    assert list(tmp_path.iterdir()) == []  # and the writable checks left no file behind


def test_a_closed_results_pipe_stops_the_run_at_once_with_exit_0(tmp_path: Path) -> None:
    path = write(tmp_path, ENDLESS)
    proc = start("run", path, "--out", tmp_path / "s.txt", "--results", "-", "--duration", "120", text=False)
    assert proc.stdout is not None
    first = proc.stdout.readline()  # a `head -1`: one line, then the pipe is closed
    proc.stdout.close()
    try:
        _, stderr = proc.communicate(timeout=60)  # long before --duration
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail("a closed results pipe did not stop the run")
    assert b'"kind":"count"' in first
    text = stderr.decode()
    assert proc.returncode == 0, text
    assert "standard output was closed by its reader; stopping" in text
    assert "(its reader closed it)" in text
    assert not any(noise in text for noise in NOISE), text


VANISHING = """\
    import shutil
    from pathlib import Path
    from edgepipe import Pipeline
    from edgepipe.media import VideoSource
    from edgepipe.media.recording.recorder import Recorder

    def pipeline(out: str = "x.mp4", frames: str = "synthetic://160x120@30") -> Pipeline:
        folder = Path(out).parent

        def unplug(frame):
            shutil.rmtree(folder, ignore_errors=True)  # the disk goes once the recorder has started
            return frame

        p = Pipeline("vanishing")
        camera = p.source("camera", VideoSource(frames))
        p.sink("record", Recorder(out), inputs=p.stage("unplug", unplug, inputs=camera))
        return p
"""


def test_a_recorder_whose_writes_all_fail_is_exit_1_and_the_summary_names_it(tmp_path: Path) -> None:
    path = write(tmp_path, VANISHING)
    out = tmp_path / "disk" / "rec.mp4"
    out.parent.mkdir()
    result = edgepipe("run", str(path), "--out", str(out), "--duration", "2")
    assert result.returncode == 1, result.stderr
    line = error_line(result.stderr)
    assert f"sink 'record': {out}: nothing recorded of" in line
    assert "no such file or directory" in line
    assert "; 1 output(s) failed (below)" in result.stderr  # the summary counts it: not "0 errors" alone
    assert "recorded 0 frames" not in result.stderr
    assert not any(noise in result.stderr for noise in NOISE), result.stderr


def test_sighup_finalizes_the_recording_and_sigkill_loses_about_its_last_second(tmp_path: Path) -> None:
    from edgepipe.deploy.doctor.diagnose import diagnose

    def record(name: str) -> tuple[Path, subprocess.Popen[str]]:
        out = tmp_path / f"{name}.mp4"
        return out, start("run", "pipelines/face_privacy.py", "--source", "synthetic://160x120@15",
                          "--output", out, "--duration", "60", stdout=subprocess.DEVNULL)  # fmt: skip

    runs = {signal.SIGHUP: record("hup"), signal.SIGKILL: record("kill")}  # side by side: one wait
    try:
        first_fragment: dict[signal.Signals, float] = {}  # when each file got its first second of video
        deadline = time.monotonic() + 40
        while len(first_fragment) < 2 and time.monotonic() < deadline:
            for sig, (out, _) in runs.items():
                if sig not in first_fragment and out.exists() and out.stat().st_size:
                    first_fragment[sig] = time.monotonic()
            time.sleep(0.02)
        assert len(first_fragment) == 2, "no recording started"
        time.sleep(2.0)
        for sig, (_, proc) in runs.items():
            proc.send_signal(sig)
        killed_after_s = time.monotonic() - first_fragment[signal.SIGKILL]
        stderr = {sig: proc.communicate(timeout=20)[1] for sig, (_, proc) in runs.items()}
    finally:
        for _, proc in runs.values():
            proc.kill()
    hup_out, hup = runs[signal.SIGHUP]
    assert hup.returncode == 0, stderr[signal.SIGHUP]  # a stop on request: the file is finalized
    assert f"frames to {hup_out}" in stderr[signal.SIGHUP]
    assert not any(noise in stderr[signal.SIGHUP] for noise in NOISE), stderr[signal.SIGHUP]
    assert runs[signal.SIGKILL][1].returncode == -signal.SIGKILL
    for sig, (out, _) in runs.items():
        diag = diagnose(out, frames=10_000)  # every frame decodes, from the start
        assert diag.problems == [], (sig, diag.problems)
        assert diag.details["fragments"]["finished"] is (sig == signal.SIGHUP)
    # At the kill the recording was about 1 + killed_after_s long (its first fragment, a second,
    # was there at first_fragment): it keeps all but its last second, + 0.6 s of slack for two
    # runs sharing the CPU (measured here: 0.15-0.55 s lost).
    kept_s = diagnose(runs[signal.SIGKILL][0]).details["fragments"]["whole_s"]
    assert kept_s >= killed_after_s - 0.6, (kept_s, killed_after_s)
