"""Every command the README, ``docs/*.md``, CONTRIBUTING.md and ``pipelines/*.md`` show runs as
written, in a fresh working folder.

tests/support/readme_commands.py says what counts as a command, which lines need a
``<!-- readme-test: skip (REASON) -->`` marker, and how a command is adapted to the suite (a
short ``--duration``, the test's RTSP server for a documentation address, a free port, a
generated clip and a tiny language model for inputs the reader would bring), and what a run
must show besides its exit code (tests/support/readme_checks.py). Each command runs in a temporary
folder holding copies of ``pipelines/`` and ``scripts/``, ``.venv`` (a link to the suite's
environment), a home folder and a model cache (``EDGEPIPE_CACHE_DIR``, always set) of its own
seeded from the suite's offline one, so nothing is written into the repository, the shared
cache or ``~/.cache``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from scripts import tiny_lm
from scripts.rtsp_camera import free_port

from .support import readme_checks as checks
from .support import readme_commands as rc
from .support.cli_process import CHECKOUT

REPO = Path(__file__).resolve().parents[1]
DOCS = [
    "README.md",
    "CONTRIBUTING.md",
    *(
        p.relative_to(REPO).as_posix()
        for folder in ("docs", "pipelines")
        for p in sorted((REPO / folder).glob("*.md"))
    ),
]
RUN_TIMEOUT_S = 90
SHIPPED = ("pipelines", "scripts")  # the checkout's folders a working folder holds copies of


def all_commands() -> list[rc.Command]:
    found = []
    for doc in DOCS:
        found += [
            c
            for c, block in rc.commands(doc, (REPO / doc).read_text())
            if block is None or block.skip is None
        ]
    return found


class SuiteStandIns:
    """The suite's stand-ins for what a reader brings: a camera, a clip, a model, a free port."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self.request = request

    def rtsp_url(self) -> str:
        return str(self.request.getfixturevalue("rtsp_server").url)

    def port(self) -> int:
        return free_port()

    def language_model(self, folder: Path) -> None:
        folder.parent.mkdir(parents=True, exist_ok=True)
        folder.symlink_to(self.request.getfixturevalue("readme_lm"), target_is_directory=True)

    def clip(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.request.getfixturevalue("clip"), path)


@pytest.fixture(scope="session")
def readme_lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random-weight decoder with its tokenizer.json (what an Optimum export holds)."""
    return tiny_lm.write(tmp_path_factory.mktemp("readme_lm") / "lm", tiny_lm.TinyConfig(), "gqa").parent


def shown_files() -> dict[str, str]:
    """The files the documents show that a reader makes (not those in the :data:`SHIPPED`
    folders, which must be shipped): path -> text. Decided by the path alone, never by what is in
    the checkout: a reader's own ``camera.toml`` there is not the document's."""
    files = {}
    for doc in DOCS:
        for path, text in rc.shown_files((REPO / doc).read_text()).items():
            if Path(path).parts[0] not in SHIPPED:
                files[path] = text
    return files


def working_folder(root: Path, home: Path, models: Path) -> dict[str, str]:
    """Fill ``root`` as a checkout seen from its own folder; the environment to run in: a home
    and a model cache of its own (a command may clean or fill its cache), no other EDGEPIPE_
    setting of the suite's."""
    skip = shutil.ignore_patterns("__pycache__")
    for folder in SHIPPED:
        shutil.copytree(REPO / folder, root / folder, ignore=skip)
    (root / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    cache = home / ".cache" / "edgepipe"
    shutil.copytree(models, cache / "models")
    bin_dir = str(Path(sys.executable).parent)  # edgepipe and python resolve to the suite's
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDGEPIPE_")}
    return dict(env, HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"), EDGEPIPE_CACHE_DIR=str(cache),
                PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")  # fmt: skip


def repo_status() -> str | None:
    if not (REPO / ".git").exists() or shutil.which("git") is None:
        return None
    done = subprocess.run(["git", "status", "--porcelain", "--ignored", "--untracked-files=all"],
                          cwd=REPO, capture_output=True, text=True, timeout=30)  # fmt: skip
    return "\n".join(line for line in done.stdout.splitlines() if "__pycache__" not in line)


def run(script: str, cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    """Exit code and output (stdout and stderr in order); past the limit, the whole group is killed."""
    with subprocess.Popen(["bash", "-c", script], cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, start_new_session=True) as proc:  # fmt: skip
        try:
            output, _ = proc.communicate(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
            pytest.fail(f"still running after {RUN_TIMEOUT_S} s (killed): {script}\n{output[-4000:]}")
    return proc.returncode, output


@pytest.mark.slow
@pytest.mark.xdist_group(CHECKOUT)
@pytest.mark.timeout(RUN_TIMEOUT_S + 60)
@pytest.mark.parametrize("command", all_commands(), ids=lambda c: c.where)
def test_readme_command_runs(
    command: rc.Command,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    centerface: Path,
    private_model_cache: Path,
) -> None:
    root = tmp_path / "work"
    root.mkdir()
    env = working_folder(root, tmp_path / "home", private_model_cache / "models")
    try:
        script = rc.script(command, root, SuiteStandIns(request), shown_files())
    except rc.Unrunnable as exc:
        pytest.fail(str(exc))
    before = repo_status()
    returncode, output = run(script, root, env)
    report = f"{command.where}: {command.text}\nran: {script}\n--- output ---\n{output[-4000:]}"
    assert returncode == command.exit_code, (
        f"exit {returncode}, the document implies {command.exit_code}\n{report}"
    )
    assert "Traceback (most recent call last)" not in output, report
    differs = checks.output_differs(command.output, output)
    assert differs is None, f"the output is not the one the document shows: {differs}\n{report}"
    if command.exit_code == 0:  # a run the document shows working saw input
        for heartbeat in checks.heartbeats(script, root):
            why = checks.moved(heartbeat)
            assert why is None, f"{why}\n{report}"
    assert repo_status() == before, f"the command wrote into the repository\n{report}"


def test_every_skip_marker_is_well_formed_and_before_a_block() -> None:
    errors = [e for doc in DOCS for e in rc.marker_errors(doc, (REPO / doc).read_text())]
    assert errors == []


def test_the_readme_has_commands_to_run_and_marked_blocks() -> None:
    runnable = all_commands()
    assert any("edgepipe run pipelines/demo.py" in c.text for c in runnable)
    skipped = [b for b in rc.blocks("README.md", (REPO / "README.md").read_text()) if b.skip]
    assert any("scripts/test.sh" in b.lines for b in skipped)
