"""The graph runtime: pipelines, nodes, bounded channels, metrics. Standard library only."""

from __future__ import annotations

from edgepipe.core.channel import Channel, ChannelStats, Policy
from edgepipe.core.errors import (
    ChannelClosed,
    EdgepipeError,
    EndOfStream,
    GraphError,
    NodeError,
    NodeStuck,
    NodeTimeout,
    OutputError,
    ParameterError,
    PipelineError,
    PipelineFileError,
)
from edgepipe.core.graph import Graph
from edgepipe.core.inbox import Inbox
from edgepipe.core.loader import load_pipeline
from edgepipe.core.memory import MemoryBudgetError, MemoryPlan, Reservation, memory_plan
from edgepipe.core.metrics import NodeStats
from edgepipe.core.params import Range, WritableFile, WritableFolder
from edgepipe.core.pipeline import Pipeline
from edgepipe.core.planning import Plannable, PlanNode, PlanReport, UnknownSize, plan_graph
from edgepipe.core.results import Message, ResultsWriter
from edgepipe.core.runtime import RunReport, Runtime, Snapshot
from edgepipe.core.spec import ErrorPolicy, Input, LaneSpec, NodeKind, NodeRef, NodeSpec, OnError, Priority

__all__ = [
    "Channel",
    "ChannelClosed",
    "ChannelStats",
    "EdgepipeError",
    "EndOfStream",
    "ErrorPolicy",
    "Graph",
    "GraphError",
    "Inbox",
    "Input",
    "LaneSpec",
    "MemoryBudgetError",
    "MemoryPlan",
    "Message",
    "NodeError",
    "NodeKind",
    "NodeRef",
    "NodeSpec",
    "NodeStats",
    "NodeStuck",
    "NodeTimeout",
    "OnError",
    "OutputError",
    "ParameterError",
    "Pipeline",
    "PipelineError",
    "PipelineFileError",
    "PlanNode",
    "PlanReport",
    "Plannable",
    "Policy",
    "Priority",
    "Range",
    "Reservation",
    "ResultsWriter",
    "RunReport",
    "Runtime",
    "Snapshot",
    "UnknownSize",
    "WritableFile",
    "WritableFolder",
    "load_pipeline",
    "memory_plan",
    "plan_graph",
]
