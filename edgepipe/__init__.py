"""edgepipe: media + AI pipelines for edge devices.

Declare a pipeline in a Python file, run it with ``edgepipe run pipelines/NAME.py``.
"""

from __future__ import annotations

__version__ = "0.1.0"

from edgepipe.core.channel import Channel, Policy
from edgepipe.core.checks import Range
from edgepipe.core.errors import (
    EdgepipeError,
    GraphError,
    NodeError,
    NodeTimeout,
    ParameterError,
    PipelineError,
    PipelineFileError,
)
from edgepipe.core.lazy import lazy_exports as _lazy_exports
from edgepipe.graph.pipeline import Pipeline
from edgepipe.graph.spec import ErrorPolicy, Input, OnError, on_loop
from edgepipe.pipefile.loader import load_pipeline
from edgepipe.pipefile.params import WritableFile, WritableFolder
from edgepipe.runner import RunConfig, run, run_async
from edgepipe.runtime.engine import RunReport, Snapshot
from edgepipe.wire.results import Message

# The media and vision layers import PyAV and ONNX Runtime (~0.1-0.3 s): loaded on first use, so
# `import edgepipe` and the CLI stay quick for pipelines that do not touch video or models.
_LAZY = {
    "VideoSource": "edgepipe.media",
    "Frame": "edgepipe.media",
    "Recorder": "edgepipe.media.recording.recorder",
    "Detector": "edgepipe.vision",
    "Detections": "edgepipe.vision",
    "WebRTCStream": "edgepipe.serve.webrtc_stream",
    "MqttSink": "edgepipe.sinks.mqtt.sink",
    "EventRecorder": "edgepipe.sinks.events.recorder",
    "JsonLines": "edgepipe.sinks.streams.jsonl",
    "TcpStream": "edgepipe.sinks.streams.tcp",
    "UdpStream": "edgepipe.sinks.streams.udp",
}


__getattr__, __dir__ = _lazy_exports(__name__, _LAZY)


__all__ = [
    "Channel",
    "Detections",
    "Detector",
    "EdgepipeError",
    "ErrorPolicy",
    "EventRecorder",
    "Frame",
    "GraphError",
    "Input",
    "JsonLines",
    "Message",
    "MqttSink",
    "NodeError",
    "NodeTimeout",
    "OnError",
    "ParameterError",
    "Pipeline",
    "PipelineError",
    "PipelineFileError",
    "Policy",
    "Range",
    "Recorder",
    "RunConfig",
    "RunReport",
    "Snapshot",
    "TcpStream",
    "UdpStream",
    "VideoSource",
    "WebRTCStream",
    "WritableFile",
    "WritableFolder",
    "__version__",
    "load_pipeline",
    "on_loop",
    "run",
    "run_async",
]
