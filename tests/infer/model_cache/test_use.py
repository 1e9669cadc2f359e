"""What the cache's eviction must leave alone: graphs a thread of this process is writing, and
models another process uses (a real second process holding the real CenterFace)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from edgepipe.infer.model_cache import limit as cache_limit
from edgepipe.infer.model_cache import use as cache_use
from edgepipe.infer.model_cache.limit import OPTIMIZED, PULLED, entries

STEM = f"lm-{'c' * 20}"


@pytest.fixture
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("EDGEPIPE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("EDGEPIPE_CACHE_MAX", "1K")
    (tmp_path / "cache" / "optimized").mkdir(parents=True)
    return tmp_path / "cache"


def test_a_graph_another_thread_of_this_process_is_writing_is_not_evicted(own_cache: Path) -> None:
    # Detectors load on a thread pool: one's eviction runs while another's graph is written.
    partial = own_cache / "optimized" / f"{STEM}.onnx.{os.getpid()}.partial"
    weights = own_cache / "optimized" / f"{STEM}.{os.getpid()}.weights"
    partial.write_bytes(b"p" * 4096)
    weights.write_bytes(b"w" * 4096)
    (entry,) = entries(own_cache)
    assert entry.busy
    assert cache_limit.enforce() == []
    assert partial.exists()
    assert weights.exists()
    partial.unlink()  # ONNX Runtime wrote its weights first: the graph is still to come
    assert cache_limit.enforce() == []
    assert weights.exists()
    weights.with_name(f"{STEM}.onnx").write_bytes(b"g")  # done: a graph like any other
    assert [e.name for e in cache_limit.enforce()] == [STEM]


def test_what_this_process_holds_before_it_exists_is_kept(own_cache: Path) -> None:
    graph = own_cache / "optimized" / f"{STEM}.onnx"
    token = cache_limit.hold([graph])  # held, then written
    graph.write_bytes(b"g" * 4096)
    assert cache_limit.enforce() == []
    cache_limit.release(token)
    assert [e.name for e in cache_limit.enforce()] == [STEM]


def test_a_held_file_is_locked_against_every_other_open_file(tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    model.write_bytes(b"m")
    assert not cache_use.in_use_elsewhere([model])
    token = cache_use.hold([model])
    assert cache_use.in_use_elsewhere([model])  # another open file, even in this process
    assert cache_use.in_use_elsewhere([tmp_path])  # a folder: any file in it
    cache_use.release(token)
    assert not cache_use.in_use_elsewhere([tmp_path])
    cache_use.hold([model])  # for the life of the process: once, however often it is asked
    before = len(os.listdir("/proc/self/fd"))
    cache_use.release(cache_use.hold([model]))  # held meanwhile: nothing to release
    for _ in range(20):
        cache_use.hold([model])
    assert len(os.listdir("/proc/self/fd")) == before
    assert cache_use.in_use_elsewhere([model])


@pytest.mark.slow
def test_a_model_another_process_uses_is_not_evicted(
    own_cache: Path, centerface: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copytree(centerface.parent, own_cache / "models" / "centerface")
    camera = subprocess.Popen(
        [sys.executable, "-c", "import sys\nfrom edgepipe.infer import Session, resolve\n"
         "s = Session(resolve('centerface').path)\nprint('ready', flush=True)\nsys.stdin.read()"],
        env={**os.environ, "EDGEPIPE_CACHE_DIR": str(own_cache), "EDGEPIPE_CACHE_MAX": "1G"},
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert camera.stdout is not None
        assert camera.stdout.readline() == "ready\n"
        assert sorted(e.kind for e in entries(own_cache)) == [OPTIMIZED, PULLED]
        # Another process pulls or optimizes into a full cache: the camera's model stays, or it
        # could not start again offline.
        assert cache_limit.enforce() == []
        assert (own_cache / "models" / "centerface" / "centerface.onnx").is_file()
    finally:
        camera.communicate("", timeout=60)
    assert camera.returncode == 0
    assert sorted(e.kind for e in cache_limit.enforce()) == [OPTIMIZED, PULLED]  # stopped: fair game
    assert entries(own_cache) == []
