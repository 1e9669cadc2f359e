"""A validated graph as plain data: ``edgepipe graph --format json`` and ``GET /graph``.

Every string is passed through :func:`~edgepipe.wire.redact.redact`, so a password in a source
URL (or anywhere else a user put one) is not shown.
"""

from __future__ import annotations

from typing import Any

from edgepipe.graph.check import Graph
from edgepipe.graph.types import type_name
from edgepipe.wire.redact import redact


def graph_dict(graph: Graph, workers: dict[str, int]) -> dict[str, Any]:
    """The graph as plain data, credentials redacted."""
    data: dict[str, Any] = redact(
        {
            "name": graph.name,
            "headroom": graph.headroom,
            "nodes": [
                {
                    "id": n.node_id,
                    "kind": n.kind.value,
                    "code": n.label,
                    "url": _url_of(n.target),
                    "inputs": list(n.inputs),
                    "resource": n.resource,
                    "priority": n.priority.name.lower(),
                    "on_error": n.on_error.action.value,
                    "timeout_s": n.timeout_s,
                    "in_type": type_name(n.in_type) if n.in_type is not None else None,
                    "out_type": type_name(n.out_type) if n.out_type is not None else None,
                    "declared_at": n.where,
                }
                for n in graph.nodes
            ],
            "channels": [
                {
                    "from": lane.source,
                    "to": n.node_id,
                    "lane": lane.name,
                    "size": lane.size,
                    "policy": lane.policy.value,
                    "max_age_s": lane.max_age_s,
                    "live_frames": lane.live_frames,
                }
                for n in graph.nodes
                for lane in n.lanes
            ],
            "resources": [
                {
                    "name": r,
                    "threads": workers[r],
                    "nodes": [n.node_id for n in graph.nodes if n.resource == r],
                }
                for r in graph.resources
            ],
            "warnings": list(graph.warnings),
        }
    )
    return data


def _url_of(target: Any) -> str | None:
    """The URL a node reads from, when its code has one (a ``VideoSource``)."""
    url = getattr(target, "url", None)
    return url if isinstance(url, str) else None
