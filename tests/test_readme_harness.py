"""The README-commands harness (tests/support/readme_commands.py, tests/support/readme_checks.py) on small
documents: what it finds, how it adapts a command, what it refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .support import readme_checks as checks
from .support import readme_commands as rc


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
Then `edgepipe models list`, `edgepipe graph`, `.venv/bin/edgepipe probe`, `edgepipe models pull NAME`.
"""


def parsed() -> list[tuple[rc.Command, rc.Block | None]]:
    return list(rc.commands("DOC.md", DOC))


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
        "DOC.md:24",
    ]
    assert found["DOC.md:5"][0].exit_code == 2
    assert found["DOC.md:4"][0].exit_code == 0
    assert found["DOC.md:6"][0].text.endswith("--results - | head -1")  # the continuation joined
    block = found["DOC.md:12"][1]
    assert block is not None
    assert block.skip == "needs a daemon"
    assert found["DOC.md:16"][0].output == ("total: 22.7 MB of a 17.69 GB budget", "fits: 17.67 GB left")
    inline = [c.text for c, b in parsed() if b is None]  # not placeholders, not a subcommand's name
    assert inline == [
        "edgepipe run pipelines/demo.py --detect none",
        "edgepipe models list",
        ".venv/bin/edgepipe probe",
    ]


def test_set_up_steps_are_dropped_and_the_run_is_shortened(tmp_path: Path) -> None:
    first = parsed()[0][0]
    script = rc.script(first, tmp_path, FakeStandIns())
    assert script.splitlines()[-1] == (
        ".venv/bin/edgepipe run pipelines/demo.py --duration 2 --health-file .readme-run-0.heartbeat.json"
    )


def test_addresses_ports_and_inputs_are_stood_in_for(tmp_path: Path) -> None:
    stand_ins = FakeStandIns()
    script = rc.script(parsed()[2][0], tmp_path, stand_ins)
    assert script.splitlines()[-1] == (
        "edgepipe run pipelines/x.py --source rtsp://127.0.0.1:8554/cam --port 40001 --model ./qwen-onnx "
        "--source clip.mp4 --results - --duration 4 --health-file .readme-run-0.heartbeat.json | head -1"
    )
    assert stand_ins.made == [tmp_path / "qwen-onnx", tmp_path / "clip.mp4"]


def test_only_runs_get_a_short_duration(tmp_path: Path) -> None:
    command = next(c for c, _ in parsed() if c.output)
    assert rc.script(command, tmp_path, FakeStandIns()).endswith("edgepipe run pipelines/demo.py --plan")
    beat = "--health-file .readme-run-0.heartbeat.json"
    cases = {
        "python -m edgepipe run pipelines/demo.py --duration=30": f"python -m edgepipe run pipelines/demo.py --duration=2 {beat}",
        "edgepipe run pipelines/demo.py --duration 1.5 --stats": f"edgepipe run pipelines/demo.py --duration 1.5 --stats {beat}",
        "edgepipe run pipelines/demo.py --health-file h.json": "edgepipe run pipelines/demo.py --health-file h.json --duration 2",
        "edgepipe run pipelines/demo.py --help": "edgepipe run pipelines/demo.py --help",
        "edgepipe graph pipelines/demo.py": "edgepipe graph pipelines/demo.py",
        ".venv/bin/python scripts/make_sample_clip.py run.mp4": ".venv/bin/python scripts/make_sample_clip.py run.mp4",
    }
    for text, expected in cases.items():
        assert rc.script(rc.Command("D:1", text), tmp_path, FakeStandIns()).splitlines()[-1] == expected


def test_an_unmarked_command_the_suite_cannot_run_fails_saying_what_to_do(tmp_path: Path) -> None:
    command = parsed()[-4][0]
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


def test_output_shape_frees_numbers_spacing_and_rules_not_words() -> None:
    shown = ("camera    frame pool (4 x 640x480)   1.8 MB", " ────", "total: 22.7 MB of a 17.69 GB budget")
    ok = "  camera  frame pool (6 x 320x240)  512 kB\n ──────────\n\ntotal: 1.2 GB of a 3 GB budget\n"
    assert checks.output_differs(shown, ok) is None
    assert "the document shows 'camera" in str(
        checks.output_differs(shown, ok.replace("frame pool", "frames"))
    )
    swapped = "total: 1 MB of a 3 GB budget\n ──\ncamera frame pool (1 x 2x2) 1 MB"
    assert checks.output_differs(shown, swapped) is not None  # out of order


def test_a_shown_output_is_the_whole_output_unless_a_line_says_dots() -> None:
    shown = ("model: centerface (.../centerface.onnx): 122 nodes", "plan: fits")
    printed = "model: centerface (/home/a/.cache/centerface.onnx): 122 nodes\nplan: fits\n"
    assert checks.output_differs(shown, printed) is None
    drifted = "model: centerface (/x/centerface.onnx): 122 nodes\nsource: a data sheet\nplan: fits\n"
    assert "printed line 2 is 'source: a data sheet'" in str(checks.output_differs(shown, drifted))
    assert "goes on past" in str(checks.output_differs(shown, printed + "one more\n"))
    assert "goes on past" not in str(checks.output_differs(shown, "log line\n" + printed))
    assert checks.output_differs(("...", *shown, "..."), "log\n" + printed + "after\n") is None
    assert checks.output_differs((shown[0], "...", "source: ...", "..."), drifted) is None
    assert checks.output_differs((shown[0], "...", "gone"), drifted) is not None
    assert checks.output_differs((), "anything") is None  # a command shown without its output


def test_files_shown_with_their_path_are_found() -> None:
    doc = "```toml\n# camera.toml\nthreshold = 0.5\n```\n\n```python\n# not a path\nx = 1\n```\n"
    assert rc.shown_files(doc) == {"camera.toml": "# camera.toml\nthreshold = 0.5\n"}


def test_markers_must_be_well_formed_and_precede_a_block() -> None:
    doc = "<!-- readme-test: skip -->\n```sh\nx\n```\n<!-- readme-test: skip (why) -->\ntext `<!-- readme-test: -->`\n"
    assert rc.marker_errors("D.md", doc) == [
        "D.md:1: write the marker as <!-- readme-test: skip (REASON) -->",
        "D.md:5: a skip marker must be the line before a block's opening fence",
    ]


def test_files_a_command_names_are_written_with_their_addresses_stood_in_for(tmp_path: Path) -> None:
    files = {"cams/camera.toml": '# cams/camera.toml\nsource = "rtsp://192.0.2.10/stream"\nthreshold = 0.5\n'}
    text = "edgepipe run pipelines/face_privacy.py --params=cams/camera.toml"
    script = rc.script(rc.Command("D:1", text), tmp_path, FakeStandIns(), files)
    assert (tmp_path / "cams/camera.toml").read_text() == (
        '# cams/camera.toml\nsource = "rtsp://127.0.0.1:8554/cam"\nthreshold = 0.5\n'
    )
    assert "--duration 4" in script  # it reads the camera stand-in
    assert not (tmp_path / "other.toml").exists()
    rc.script(
        rc.Command("D:2", "edgepipe graph pipelines/demo.py"), tmp_path, FakeStandIns(), {"other.toml": "x"}
    )
    assert not (tmp_path / "other.toml").exists()  # written only where a command names it


@pytest.mark.parametrize(
    "text",
    ['source = "rtsp://10.1.2.3/cam"\n', 'source = "http://192.0.2.1/x.m3u8"\n', 'host = "192.168.1.20"\n'],
)
def test_a_real_address_in_a_file_a_command_reads_is_refused(tmp_path: Path, text: str) -> None:
    with pytest.raises(rc.Unrunnable):
        rc.script(
            rc.Command("D:1", "edgepipe run p.py --params c.toml"), tmp_path, FakeStandIns(), {"c.toml": text}
        )


def test_any_address_left_in_what_runs_that_is_not_loopback_is_refused(tmp_path: Path) -> None:
    for text in [
        "edgepipe run pipelines/demo.py --host 0.0.0.0",
        "edgepipe run p.py --source=rtsp://10.0.0.2/x",
    ]:
        with pytest.raises(rc.Unrunnable, match=r"tests reach only 127\.0\.0\.1"):
            rc.script(rc.Command("D:1", text), tmp_path, FakeStandIns())
    ok = "edgepipe run pipelines/demo.py --host 127.0.0.1 --source synthetic://640x480@15"
    assert "127.0.0.1" in rc.script(rc.Command("D:1", ok), tmp_path, FakeStandIns())


def test_a_run_passes_only_when_input_moved(tmp_path: Path) -> None:
    script = rc.script(
        rc.Command("D:1", "edgepipe run a.py && edgepipe run b.py --plan"), tmp_path, FakeStandIns()
    )
    [beat] = checks.heartbeats(script, tmp_path)
    assert "no heartbeat" in str(checks.moved(beat))
    idle = {"stopped": True, "items_out": 0, "progress": {"faces": 0, "log": 0}}
    beat.write_text(json.dumps(idle))
    assert "no item moved" in str(checks.moved(beat))
    beat.write_text(json.dumps(idle | {"items_out": 30, "progress": {"faces": 12, "log": 0}}))
    assert checks.moved(beat) is None
