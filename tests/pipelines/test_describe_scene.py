from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from edgepipe import Message, load_pipeline
from edgepipe.core.install import install_command
from edgepipe.lm.tokenizer import HFTokenizer, load_tokenizer
from edgepipe.runner import RunConfig
from edgepipe.testing import ListSink, run_pipeline
from scripts import tiny_lm
from tests.lm import bpe
from tests.support.cli_process import edgepipe
from tests.support.viewing import connect, messages_of, served, video_feeds

REPO = Path(__file__).resolve().parents[2]
PIPELINE = REPO / "pipelines" / "describe_scene.py"


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An untrained ~0.4M-parameter decoder (shared-buffer layout, 256 positions)."""
    return tiny_lm.write(tmp_path_factory.mktemp("lm"), tiny_lm.TinyConfig(max_seq_len=256), "gqa").parent


@pytest.mark.slow
def test_descriptions_stream_from_the_synthetic_camera(model: Path, centerface: Path) -> None:
    pipeline = load_pipeline(
        PIPELINE, ["--model", str(model), "--every-s", "0.5", "--window-s", "1", "--max-new-tokens", "8"]
    )
    out: ListSink[Message] = ListSink()
    pipeline.sink("capture", out, inputs="describe")
    report = run_pipeline(pipeline, RunConfig(governed=False, duration_s=2.5))
    assert report.stopped_by == "stop"  # the model was cut short at the stop, not "forced"
    events = [m.data for m in out.items if m.kind == "event"]
    assert len(events) >= 2
    assert all(e["new_tokens"] == 8 or e["stop_reason"] == "stop_token" for e in events)
    assert "face in" in events[-1]["prompt"]  # the synthetic scene's face, counted for the model
    assert report.stats.node("describe").errors == 0
    assert report.stats.node("faces").items_out > 5  # detection kept flowing meanwhile


def _run(*args: str, code: str | None = None) -> subprocess.CompletedProcess[str]:
    """``edgepipe run pipelines/describe_scene.py ARGS``; with ``code``, that code runs in the
    child instead of ``-m edgepipe`` (with the same argv)."""
    if code is None:
        return edgepipe("run", "pipelines/describe_scene.py", *args, timeout_s=60)
    return subprocess.run([sys.executable, "-c", code, "run", "pipelines/describe_scene.py", *args],
                          capture_output=True, text=True, timeout=60, cwd=REPO)  # fmt: skip


@pytest.mark.slow
def test_without_a_model_the_run_stops_at_once_saying_how_to_get_one() -> None:
    done = _run("--duration", "30")
    assert done.returncode == 2
    assert done.stdout == ""
    [line] = done.stderr.splitlines()  # one line: no camera opened, no model loaded, no traceback
    assert re.fullmatch(
        r"edgepipe: error: pipelines/describe_scene\.py:\d+: pipeline\(\) raised ValueError: --model is required: "
        r"a folder with an ONNX language model: model\.onnx and tokenizer\.json \(docs/language-models\.md shows "
        r"how to export one\), or --server URL",
        line,
    )
    # the section it points to: the README links it, its page explains the export
    assert "[Language models](docs/language-models.md)" in (REPO / "README.md").read_text()
    assert "## A real model for `describe_scene.py`" in (REPO / "docs" / "language-models.md").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("missing", ["model.onnx", "tokenizer.json"])
def test_a_model_folder_without_its_files_is_refused_in_one_line(
    model: Path, tmp_path: Path, missing: str
) -> None:
    folder = tmp_path / "m"
    shutil.copytree(model, folder)
    (folder / missing).unlink()
    done = _run("--model", str(folder))
    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    assert re.match(
        r"edgepipe: error: pipelines/describe_scene\.py:\d+: --model: expected a folder with ", line
    )
    assert line.endswith(
        f"(it has no {missing}; docs/language-models.md shows how to export one), got '{folder}'"
    )


RUNTIME_ONLY = textwrap.dedent(
    """
    import importlib, pathlib, pkgutil, sys
    for name in ("onnx", "tokenizers"):  # dev dependencies and the lm extra: as if not installed
        sys.modules[name] = None
    import edgepipe
    from edgepipe.pipefile.loader import load_module
    for info in pkgutil.walk_packages(edgepipe.__path__, "edgepipe."):
        if info.name != "edgepipe.__main__":  # that one runs the command
            importlib.import_module(info.name)
    for path in sorted(pathlib.Path("pipelines").glob("*.py")):
        load_module(path)
    from edgepipe.cli.main import main
    sys.exit(main(sys.argv[1:]))
    """
)


@pytest.mark.slow
def test_without_the_lm_extra_the_package_loads_and_describe_scene_names_the_install(model: Path) -> None:
    # Nothing in the package or the shipped pipelines needs onnx or tokenizers to be imported;
    # a model with a tokenizer.json needs tokenizers, said at the door.
    done = _run("--model", str(model), "--duration", "2", code=RUNTIME_ONLY)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert line.endswith(
        "--model: expected a model whose files can be read (tokenizer.json needs the 'tokenizers' package, "
        f"which is not installed: {install_command('lm')}), got '{model}'"
    )


@pytest.mark.slow
def test_a_real_tokenizer_writes_the_descriptions_end_to_end(
    model: Path, centerface: Path, tmp_path: Path
) -> None:
    folder = bpe.model_with(bpe.trained("chars"), model, tmp_path / "m")
    results = tmp_path / "results.jsonl"
    done = _run("--model", str(folder), "--every-s", "0.5", "--window-s", "1", "--max-new-tokens", "24",
                "--duration", "3", "--results", str(results))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "'describe_scene' ended (stop)" in done.stderr, done.stderr  # drained, not "forced"
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    events = [m["data"] for m in lines if m["kind"] == "event"]
    assert events
    assert isinstance(load_tokenizer(folder, 320), HFTokenizer)  # the tokenizers package read it
    for event in events:
        tokens = [
            m["data"]["text"]
            for m in lines
            if m["kind"] == "token" and m["data"]["request"] == event["request"]
        ]
        assert "".join(tokens) == event["text"]
        assert "\ufffd" not in event["text"]  # every token of this vocabulary is whole characters
    text = max((e["text"] for e in events), key=len)
    assert len(text.split()) > 2, events  # words, spaced as the tokenizer's decoder writes them


@pytest.mark.slow
def test_a_camera_that_cannot_be_reached_is_reported(model: Path, centerface: Path) -> None:
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"rtsp://127.0.0.1:{port}/cam"
    args = ["--source", url, "--model", str(model), "--every-s", "0.6", "--max-new-tokens", "2"]
    pipeline = load_pipeline(PIPELINE, args)
    out: ListSink[Message] = ListSink()
    pipeline.sink("capture", out, inputs="describe")
    report = run_pipeline(pipeline, RunConfig(governed=False, duration_s=2.0))
    assert report.stopped_by == "stop"  # drained, not "forced"
    events = [m.data for m in out.items if m.kind == "event"]
    assert events, "no report while the camera is down"
    state = events[-1]["sources"]["camera"]
    assert state["state"] in ("connecting", "reconnecting")
    assert state["last_frame_s"] is None
    assert re.search(r"\(camera: (re)?connecting( \(.+\))?, no frames yet", events[-1]["prompt"])
    assert "no input" in events[-1]["prompt"]


@pytest.mark.usefixtures("libx264")
@pytest.mark.slow
async def test_a_viewer_gets_the_video_faces_tokens_and_descriptions(model: Path, centerface: Path) -> None:
    args = ["--source", "synthetic://320x240@15", "--model", str(model), "--every-s", "0.5", "--window-s", "1",
            "--max-new-tokens", "4"]  # fmt: skip
    assert video_feeds(load_pipeline(PIPELINE, args)) == {"view": ("camera",)}
    async with served(load_pipeline(PIPELINE, args)) as run:
        peer = await connect(run.url)
        frames = await peer.frames(10)
        events = await messages_of(peer, "event", 2)
        await peer.pc.close()
    assert (frames[0].width, frames[0].height) == (320, 240)
    event = events[1]  # asked for after the first was sent: the viewer had every token of it
    assert event["what"] == "description"
    tokens = [m for m in peer.messages if m["kind"] == "token" and m["request"] == event["request"]]
    assert "".join(t["text"] for t in tokens) == event["text"]  # the streamed text is the description
    assert any(m["kind"] == "detections" for m in peer.messages)  # the faces (none here) go too


@pytest.mark.slow
def test_with_a_server_the_descriptions_come_from_it_and_the_local_model_writes_while_it_is_away(
    model: Path, centerface: Path
) -> None:
    import asyncio

    from tests.lm.remote.fake_engine import DONE, chunk, fake_engine, sse

    async def run() -> list[Message]:
        async with fake_engine() as engine:
            engine.chat = lambda r: sse(r, chunk("One face"), chunk(" in view.", "stop"), DONE)
            pipeline = load_pipeline(PIPELINE, ["--server", engine.url, "--model", str(model), "--every-s", "0.5",
                                                "--window-s", "1", "--max-new-tokens", "8"])  # fmt: skip
            out: ListSink[Message] = ListSink()
            pipeline.sink("capture", out, inputs="describe")

            async def away_then_back() -> None:
                await asyncio.sleep(1.2)
                engine.chat = lambda r: sse(r, b"")  # cut before anything: the local model takes it
                await asyncio.sleep(1.2)
                engine.chat = lambda r: sse(r, chunk("Back."), chunk("", "stop"), DONE)

            flip = asyncio.create_task(away_then_back())
            await asyncio.to_thread(run_pipeline, pipeline, RunConfig(governed=False, duration_s=5.0))
            await flip
            return out.items

    items = asyncio.run(run())
    engines = [m.data["engine"] for m in items if m.kind == "event" and m.data.get("what") == "description"]
    assert engines[0] == "remote"
    assert "local" in engines
    assert engines[-1] == "remote"  # back once the server answered again (after its 1 s backoff)
    assert any(m.kind == "engine_state" and m.data["state"] == "open" for m in items)


@pytest.mark.slow
def test_a_server_not_there_is_a_warning_and_a_timed_run_that_wrote_nothing_exits_1() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = _run("--server", f"http://127.0.0.1:{port}/v1", "--every-s", "0.5", "--duration", "3")
    assert done.returncode == 1, done.stderr
    assert f"engine http://127.0.0.1:{port}/v1: cannot connect" in done.stderr  # the warning, at start
    assert "no description written: all" in done.stderr
    assert "refused" in done.stderr
    assert "Traceback" not in done.stderr
