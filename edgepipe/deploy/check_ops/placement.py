"""Which provider ONNX Runtime really gives each node (``edgepipe check-ops``' confirmation).

A session is created with the target's provider first and the CPU provider after it, with
``session.record_ep_graph_assignment_info`` on; ``get_provider_graph_assignment_info()`` then
lists the nodes each provider took. Graph optimizations are off, so the nodes are the model's
own (not ONNX Runtime's fused ones) and compare one to one with the table. Nothing is run.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

RECORD_KEY = "session.record_ep_graph_assignment_info"
CPU = "CPUExecutionProvider"


@dataclass(frozen=True)
class Placement:
    """The nodes per provider, and per provider the count of each operator."""

    confirmed: bool
    reason: str = ""
    """Why placement could not be read (provider not installed, session failed)."""
    providers: dict[str, Counter[str]] = field(default_factory=dict)
    """provider → Counter of ``domain:op_type`` (``op_type`` alone for the ONNX domain)."""

    def nodes_on(self, provider: str) -> int:
        return sum(self.providers.get(provider, Counter()).values())

    def off_target(self, provider: str) -> dict[str, Counter[str]]:
        """The nodes some other provider took."""
        return {p: c for p, c in self.providers.items() if p != provider}


def placement(file: Path, provider: str) -> Placement:
    """Create a session on ``provider`` (+ CPU) and read where its nodes went. Blocks (loads
    the model); never raises for a model or provider problem: the reason says what failed."""
    import onnxruntime as ort

    if not provider:
        return Placement(False, "not an ONNX Runtime provider: a converter's own tools place the nodes")
    available = ort.get_available_providers()
    if provider not in available:
        return Placement(
            False, f"{provider} is not in this onnxruntime ({ort.__version__}: {', '.join(available)})"
        )
    if not hasattr(ort.InferenceSession, "get_provider_graph_assignment_info"):
        return Placement(
            False, f"this onnxruntime ({ort.__version__}) cannot report which provider got which node"
        )
    options = ort.SessionOptions()
    options.log_severity_level = 3  # its warnings (initializers listed as inputs ...) are not ours
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.add_session_config_entry(RECORD_KEY, "1")
    providers = [provider] if provider == CPU else [provider, CPU]
    try:
        session = ort.InferenceSession(str(file), options, providers=providers)
        assigned = session.get_provider_graph_assignment_info()
    except Exception as exc:  # ORT raises its own types (Fail, InvalidGraph, NotImplemented ...)
        return Placement(
            False, f"the session failed: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        )
    found: dict[str, Counter[str]] = {}
    for subgraph in assigned:
        counts = found.setdefault(subgraph.ep_name, Counter())
        for node in subgraph.get_nodes():
            domain = node.domain if node.domain not in ("", "ai.onnx") else ""
            counts[f"{domain}:{node.op_type}" if domain else node.op_type] += 1
    return Placement(True, providers=found)
