"""Each public module's __all__ lists exactly what it exports on purpose (as httpx checks)."""

from __future__ import annotations

import types

import pytest

import edgepipe
import edgepipe.infer
import edgepipe.lm
import edgepipe.media
import edgepipe.serve
import edgepipe.sinks
import edgepipe.testing
import edgepipe.vision


def public_names(module: types.ModuleType) -> set[str]:
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and getattr(value, "__module__", module.__name__).startswith("edgepipe")
        and name not in {"annotations", "TYPE_CHECKING"}
    }


def test_all_matches_what_is_exported() -> None:
    for module in (
        edgepipe,
        edgepipe.media,
        edgepipe.infer,
        edgepipe.vision,
        edgepipe.serve,
        edgepipe.sinks,
        edgepipe.testing,
    ):
        exported = set(module.__all__)
        assert exported == {n for n in exported if hasattr(module, n)}, module.__name__
        if module is not edgepipe.testing:
            assert public_names(module) <= exported | {"T"}, module.__name__
    assert set(edgepipe.testing.__all__) == {"FakeSource", "ListSink", "run_pipeline"}
    assert "__version__" in edgepipe.__all__


@pytest.mark.slow
def test_core_never_imports_pyav_onnxruntime_or_aiortc() -> None:
    import subprocess
    import sys

    code = "import sys, edgepipe, edgepipe.core, edgepipe.cli.main; print(sorted(m for m in ('av', 'onnxruntime', 'aiortc') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"
    assert edgepipe.VideoSource is edgepipe.media.VideoSource  # loaded on first use


def test_the_sinks_and_the_webrtc_stream_are_exported_from_edgepipe() -> None:
    for name in ("MqttSink", "EventRecorder", "JsonLines", "TcpStream", "UdpStream"):
        assert name in edgepipe.__all__
        assert getattr(edgepipe, name) is getattr(edgepipe.sinks, name)  # old code: AttributeError
    from edgepipe.graph.spec import on_loop
    from edgepipe.serve.webrtc_stream import WebRTCStream

    assert edgepipe.WebRTCStream is WebRTCStream
    assert edgepipe.on_loop is on_loop
