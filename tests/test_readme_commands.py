"""Every command the README shows runs as written, in a fresh working folder.

tests/readme_commands.py says what counts as a command, which lines need a
``<!-- readme-test: skip (REASON) -->`` marker, and how a command is adapted to the suite (a
short ``--duration``, the test's RTSP server for a documentation address, a free port, a
generated clip and a tiny language model for inputs the reader would bring). Each command runs
in a temporary folder holding copies of ``pipelines/`` and ``scripts/``, ``.venv`` (a link to
the suite's environment) and a model cache of its own seeded from the suite's offline one, so
nothing is written into the repository or into the shared cache.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import tiny_lm
from rtsp_camera import free_port

from . import readme_commands as rc

REPO = Path(__file__).resolve().parents[1]
DOCS = ["README.md", *(p.relative_to(REPO).as_posix() for p in sorted((REPO / "pipelines").glob("*.md")))]
RUN_TIMEOUT_S = 90


def all_commands() -> list[rc.Command]:
    found = []
    for doc in DOCS:
        found += [
            c
            for c, block in rc.commands(doc, (REPO / doc).read_text(), REPO)
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


def working_folder(root: Path, cache: Path, models: Path) -> dict[str, str]:
    """Fill ``root`` as a checkout seen from its own folder; the environment to run in."""
    skip = shutil.ignore_patterns("__pycache__")
    shutil.copytree(REPO / "pipelines", root / "pipelines", ignore=skip)
    shutil.copytree(REPO / "scripts", root / "scripts", ignore=skip)
    (root / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    for doc in DOCS:
        for path, text in rc.shown_files((REPO / doc).read_text()).items():
            if not (REPO / Path(path).parts[0]).exists():  # in the checkout's folders: shipped
                (root / path).parent.mkdir(parents=True, exist_ok=True)
                (root / path).write_text(text)
    shutil.copytree(models, cache / "models")  # its own: a command may clean or fill its cache
    bin_dir = str(Path(sys.executable).parent)  # edgepipe and python resolve to the suite's
    return dict(os.environ, EDGEPIPE_CACHE_DIR=str(cache), PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


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
    env = working_folder(root, tmp_path / "cache", private_model_cache / "models")
    try:
        script = rc.script(command, root, SuiteStandIns(request))
    except rc.Unrunnable as exc:
        pytest.fail(str(exc))
    before = repo_status()
    returncode, output = run(script, root, env)
    report = f"{command.where}: {command.text}\nran: {script}\n--- output ---\n{output[-4000:]}"
    assert returncode == command.exit_code, (
        f"exit {returncode}, the README implies {command.exit_code}\n{report}"
    )
    assert "Traceback (most recent call last)" not in output, report
    missing = rc.missing_output(command.output, output)
    assert missing is None, f"the output lacks a line shaped like the README's {missing!r}\n{report}"
    assert repo_status() == before, f"the command wrote into the repository\n{report}"


def test_every_skip_marker_is_well_formed_and_before_a_block() -> None:
    errors = [e for doc in DOCS for e in rc.marker_errors(doc, (REPO / doc).read_text())]
    assert errors == []


def test_the_readme_has_commands_to_run_and_marked_blocks() -> None:
    runnable = all_commands()
    assert any("edgepipe run pipelines/demo.py" in c.text for c in runnable)
    skipped = [b for b in rc.blocks("README.md", (REPO / "README.md").read_text()) if b.skip]
    assert any("scripts/test.sh" in b.lines for b in skipped)


# The harness itself, on small documents.


class FakeStandIns:
    def __init__(self) -> None:
        self.made: list[Path] = []

    def rtsp_url(self) -> str:
        return "rtsp://127.0.0.1:8554/cam"

    def port(self) -> int:
        return 40001

    def language_model(self, folder: Path) -> None:
        self.made.append(folder)

    def clip(self, path: Path) -> None:
        self.made.append(path)


DOC = """\
Intro `edgepipe run pipelines/NAME.py --source URL` and `edgepipe run pipelines/demo.py --detect none`.

```sh
python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/edgepipe run pipelines/demo.py --duration 10
edgepipe run pipelines/describe_scene.py   # exits 2: no model
edgepipe run pipelines/x.py --source rtsp://192.0.2.10/s \\
    --port 8080 --model ./qwen-onnx --source clip.mp4 --results - | head -1
```

<!-- readme-test: skip (needs a daemon) -->
```sh
docker run --rm edgepipe
```

```
$ edgepipe run pipelines/demo.py --plan
total: 22.7 MB of a 17.69 GB budget
fits: 17.67 GB left
```

```sh
docker build .
```
"""


def parsed() -> list[tuple[rc.Command, rc.Block | None]]:
    return list(rc.commands("DOC.md", DOC, REPO))


def test_commands_are_found_with_their_place_exit_code_and_output() -> None:
    found = {c.where: (c, b) for c, b in parsed()}
    assert list(found) == [
        "DOC.md:4",
        "DOC.md:5",
        "DOC.md:6",
        "DOC.md:12",
        "DOC.md:16",
        "DOC.md:22",
        "DOC.md:1",
    ]
    assert found["DOC.md:5"][0].exit_code == 2
    assert found["DOC.md:4"][0].exit_code == 0
    assert found["DOC.md:6"][0].text.endswith("--results - | head -1")  # the continuation joined
    block = found["DOC.md:12"][1]
    assert block is not None
    assert block.skip == "needs a daemon"
    assert found["DOC.md:16"][0].output == ("total: 22.7 MB of a 17.69 GB budget", "fits: 17.67 GB left")
    assert (
        found["DOC.md:1"][0].text == "edgepipe run pipelines/demo.py --detect none"
    )  # not the placeholder one


def test_set_up_steps_are_dropped_and_the_run_is_shortened(tmp_path: Path) -> None:
    first = parsed()[0][0]
    script = rc.script(first, tmp_path, FakeStandIns())
    assert script.splitlines()[-1] == ".venv/bin/edgepipe run pipelines/demo.py --duration 2"


def test_addresses_ports_and_inputs_are_stood_in_for(tmp_path: Path) -> None:
    stand_ins = FakeStandIns()
    script = rc.script(parsed()[2][0], tmp_path, stand_ins)
    assert script.splitlines()[-1] == (
        "edgepipe run pipelines/x.py --source rtsp://127.0.0.1:8554/cam --port 40001 --model ./qwen-onnx "
        "--source clip.mp4 --results - --duration 2 | head -1"
    )
    assert stand_ins.made == [tmp_path / "qwen-onnx", tmp_path / "clip.mp4"]


def test_only_runs_get_a_short_duration(tmp_path: Path) -> None:
    command = next(c for c, _ in parsed() if c.output)
    assert rc.script(command, tmp_path, FakeStandIns()).endswith("edgepipe run pipelines/demo.py --plan")
    cases = {
        "python -m edgepipe run pipelines/demo.py --duration=30": "python -m edgepipe run pipelines/demo.py --duration=2",
        "edgepipe run pipelines/demo.py --duration 1.5 --stats": "edgepipe run pipelines/demo.py --duration 1.5 --stats",
        "edgepipe run pipelines/demo.py --help": "edgepipe run pipelines/demo.py --help",
        "edgepipe graph pipelines/demo.py": "edgepipe graph pipelines/demo.py",
        ".venv/bin/python scripts/make_sample_clip.py run.mp4": ".venv/bin/python scripts/make_sample_clip.py run.mp4",
    }
    for text, expected in cases.items():
        assert rc.script(rc.Command("D:1", text), tmp_path, FakeStandIns()).splitlines()[-1] == expected


def test_an_unmarked_command_the_suite_cannot_run_fails_saying_what_to_do(tmp_path: Path) -> None:
    command = parsed()[-2][0]
    with pytest.raises(
        rc.Unrunnable, match=r"DOC.md:22: `docker build \.` cannot run .*readme-test: skip \(REASON\)"
    ):
        rc.script(command, tmp_path, FakeStandIns())
    for text in ["python3 -m venv .venv", "head -1", "edgepipe run x.py ; rm -rf out"]:
        with pytest.raises(rc.Unrunnable):
            rc.script(rc.Command("D:1", text), tmp_path, FakeStandIns())


def test_real_addresses_are_refused(tmp_path: Path) -> None:
    for url in ["rtsp://10.1.2.3/cam", "http://192.0.2.1/x.m3u8"]:
        with pytest.raises(rc.Unrunnable):
            rc.script(
                rc.Command("D:1", f"edgepipe run pipelines/demo.py --source {url}"), tmp_path, FakeStandIns()
            )


def test_output_shape_frees_numbers_and_spacing_not_words() -> None:
    shown = ("camera    frame pool (4 x 640x480)   1.8 MB", "total: 22.7 MB of a 17.69 GB budget")
    ok = "log line\n  camera  frame pool (6 x 320x240)  512 kB\nmore\ntotal: 1.2 GB of a 3 GB budget\n"
    assert rc.missing_output(shown, ok) is None
    assert rc.missing_output(shown, ok.replace("frame pool", "frames")) == shown[0]
    assert (
        rc.missing_output(shown, "total: 1 MB of a 3 GB budget\ncamera frame pool (1 x 2x2) 1 MB") == shown[1]
    )  # out of order


def test_files_shown_with_their_path_are_found() -> None:
    doc = "```toml\n# camera.toml\nthreshold = 0.5\n```\n\n```python\n# not a path\nx = 1\n```\n"
    assert rc.shown_files(doc) == {"camera.toml": "# camera.toml\nthreshold = 0.5\n"}


def test_markers_must_be_well_formed_and_precede_a_block() -> None:
    doc = "<!-- readme-test: skip -->\n```sh\nx\n```\n<!-- readme-test: skip (why) -->\ntext `<!-- readme-test: -->`\n"
    assert rc.marker_errors("D.md", doc) == [
        "D.md:1: write the marker as <!-- readme-test: skip (REASON) -->",
        "D.md:5: a skip marker must be the line before a block's opening fence",
    ]
