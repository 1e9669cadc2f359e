"""What a reader's commands leave in the checkout (the documents' ``trace.json``, ``camera.toml``,
``pixelated.mp4``, ``events/``) is ignored by git and changes no test's verdict: each test works in
a folder of its own."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli_process import CHECKOUT
from tests.test_readme_commands import all_commands

REPO = Path(__file__).resolve().parents[1]
TRACE = "tests/cli/test_trace.py"
LEFT_BY_A_READER = {  # path in the checkout -> what the reader's command wrote (None: a folder)
    "trace.json": '{"traceEvents": []}\n',  # docs/trace.md: edgepipe trace ... (default -o)
    "camera.toml": 'source = "rtsp://192.0.2.10/stream"\n',  # docs/pipelines.md: the reader's own
    "pixelated.mp4": "not a video\n",  # docs/detection.md: --output pixelated.mp4
    "events": None,  # docs/mqtt.md: --events-dir events
}


@pytest.fixture
def left_in_the_checkout() -> Iterator[list[Path]]:
    """The reader's outputs written into the checkout's root, and removed after. A path that is
    there already (the user's own) is left as it is, never written over or removed: the test
    needs it there, whoever put it there."""
    written = []
    try:
        for name, text in LEFT_BY_A_READER.items():
            path = REPO / name
            if path.exists() or path.is_symlink():
                continue
            written.append(path)
            if text is None:
                path.mkdir()
                (path / "face-0001.mp4").write_text("not a video\n")
            else:
                path.write_text(text)
        yield [REPO / name for name in LEFT_BY_A_READER]
    finally:
        for path in written:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)


def reads_camera_toml() -> str:
    """The README harness's test id of the documents' command that reads ``camera.toml``."""
    [command] = [c for c in all_commands() if "--params camera.toml" in c.text]
    return f"tests/test_readme_commands.py::test_readme_command_runs[{command.where}]"


@pytest.mark.slow
@pytest.mark.xdist_group(CHECKOUT)
def test_a_readers_outputs_in_the_checkout_are_ignored_and_break_no_test(
    left_in_the_checkout: list[Path],
) -> None:
    if (REPO / ".git").exists() and shutil.which("git") is not None:
        names = [str(p.relative_to(REPO)) for p in left_in_the_checkout]
        ignored = subprocess.run(["git", "check-ignore", *names], cwd=REPO, capture_output=True, text=True,
                                 timeout=30).stdout.split()  # fmt: skip
        assert sorted(ignored) == sorted(names)
    # The tests that read the working folder (trace's refusals: "no trace.json written") or the
    # checkout (the README harness: "is camera.toml a shipped file?"), run as a user runs them.
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
         f"{TRACE}::test_a_wrong_command_line_is_exit_2_in_one_line",
         f"{TRACE}::test_file_help_lists_the_pipelines_parameters", reads_camera_toml()],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    summary = done.stdout.strip().splitlines()[-1]
    assert " passed in " in summary, summary
    assert not {"skipped", "deselected"} & set(summary.split()), summary  # all of them ran
