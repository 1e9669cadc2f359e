"""edgepipe: media + AI pipelines for edge devices.

Declare a pipeline in a Python file, run it with ``edgepipe run pipelines/NAME.py``.
"""

from __future__ import annotations

__version__ = "0.1.0"

from edgepipe.core import (
    Channel,
    EdgepipeError,
    ErrorPolicy,
    GraphError,
    Message,
    NodeError,
    NodeTimeout,
    OnError,
    ParameterError,
    Pipeline,
    PipelineError,
    PipelineFileError,
    Policy,
    RunReport,
    Snapshot,
    load_pipeline,
)
from edgepipe.core.run import run, run_async

__all__ = [
    "Channel",
    "EdgepipeError",
    "ErrorPolicy",
    "GraphError",
    "Message",
    "NodeError",
    "NodeTimeout",
    "OnError",
    "ParameterError",
    "Pipeline",
    "PipelineError",
    "PipelineFileError",
    "Policy",
    "RunReport",
    "Snapshot",
    "__version__",
    "load_pipeline",
    "run",
    "run_async",
]
