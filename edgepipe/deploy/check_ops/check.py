"""A model's operators against a target's support table (``edgepipe check-ops``).

Read from the file alone (:func:`edgepipe.infer.onnxfile.graph_nodes`, no ``onnx`` package):
each operator with its domain, the opset it is read at and its count, subgraphs (If, Loop,
Scan bodies) included. An operator the table lacks gets advice (a rewrite, a fusion, moving it
out of the model) and its cost where it falls back: for a provider with its own memory, each
tensor that crosses between a supported node and a fallback node is a copy between device and
host memory on every run, counted here from the graph's edges.
"""

from __future__ import annotations

import mmap
import os
import tomllib
from collections import Counter
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path

from edgepipe.deploy.check_ops.tables import ONNX_DOMAIN, Table, tables
from edgepipe.infer import onnxfile


@dataclass(frozen=True, slots=True)
class OpUse:
    """One operator of the model and what the table says of it."""

    domain: str
    op_type: str
    opset: int | None
    count: int
    in_subgraphs: int
    """How many of ``count`` are inside If/Loop/Scan bodies."""
    supported: bool
    note: str
    """The source's restriction when supported, why not otherwise."""
    advice: str = ""
    fallback: str = ""
    """Where it runs instead (``CPUExecutionProvider``), or that nothing can run it."""


@dataclass(frozen=True)
class Boundaries:
    """Where supported and fallback nodes meet, in the main graph."""

    to_host: int
    """Tensors a supported node makes that a fallback node reads: device → host copies per run."""
    to_device: int
    """Tensors a fallback node makes that a supported node reads: host → device copies per run."""
    partitions: int
    """Connected groups of supported nodes: the pieces the target runs."""


@dataclass(frozen=True)
class Check:
    model: str
    target: Table
    opsets: dict[str, int]
    ops: list[OpUse]
    nodes: int
    boundaries: Boundaries
    unsupported_nodes: int = field(default=0)

    @property
    def unsupported(self) -> list[OpUse]:
        return [u for u in self.ops if not u.supported]


@cache
def advice_table() -> dict[str, dict[str, str]]:
    text = (resources.files("edgepipe.deploy") / "data" / "ops" / "advice.toml").read_text(encoding="utf-8")
    return {d: dict(v) for d, v in tomllib.loads(text).get("ops", {}).items()}


def read_nodes(file: Path) -> tuple[dict[str, int], list[onnxfile.NodeInfo]]:
    """(opset per domain, every node) of the model at ``file``; weights are never read.
    Raises OSError or :class:`~edgepipe.infer.onnxfile.OnnxFormatError`."""
    with file.open("rb") as f:
        if os.fstat(f.fileno()).st_size == 0:  # mmap refuses an empty file with a bare ValueError
            raise onnxfile.OnnxFormatError("empty file (0 bytes)")
        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    with data:
        opsets = onnxfile.opset_imports(data)  # type: ignore[arg-type]  # an mmap reads as bytes do
        nodes = onnxfile.graph_nodes(data)  # type: ignore[arg-type]
    return {(d or ONNX_DOMAIN): v for d, v in opsets.items()}, nodes


def check(model: str, opsets: dict[str, int], nodes: list[onnxfile.NodeInfo], table: Table) -> Check:
    """The model's operators against ``table``."""
    counts: Counter[tuple[str, str]] = Counter()
    nested: Counter[tuple[str, str]] = Counter()
    for node in nodes:
        key = (node.domain or ONNX_DOMAIN, node.op_type)
        counts[key] += 1
        if node.parent is not None:
            nested[key] += 1
    cpu = tables().get("cpu")
    advice = advice_table()
    ops: list[OpUse] = []
    verdict: dict[tuple[str, str], bool] = {}
    for (domain, op_type), count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        opset = opsets.get(domain)
        supported, note = table.lookup(domain, op_type, opset)
        verdict[(domain, op_type)] = supported
        tip = fallback = ""
        if not supported:
            tip = advice.get(domain, {}).get(op_type, "")
            fallback = _fallback(table, cpu, domain, op_type, opset)
        ops.append(
            OpUse(domain, op_type, opset, count, nested[(domain, op_type)], supported, note, tip, fallback)
        )
    on_target = _placed(nodes, verdict)
    unsupported_nodes = sum(1 for node in nodes if not verdict[(node.domain or ONNX_DOMAIN, node.op_type)])
    return Check(model, table, opsets, ops, len(nodes), _boundaries(nodes, on_target), unsupported_nodes)


def _fallback(table: Table, cpu: Table | None, domain: str, op_type: str, opset: int | None) -> str:
    if table.kind == "converter":
        return "the board's CPU, after cutting the model there (or as a custom CPU operator)"
    if table.host_memory or cpu is None:
        return "nothing: no kernel for it in this ONNX Runtime; the session fails to load"
    if cpu.lookup(domain, op_type, opset)[0]:
        return cpu.provider
    return "nothing: ONNX Runtime's CPU provider lacks it too; the session fails to load"


def _placed(nodes: list[onnxfile.NodeInfo], verdict: dict[tuple[str, str], bool]) -> list[bool]:
    """Per main-graph node: on the target (it and every node in its subgraphs supported)."""
    ok = [verdict[(n.domain or ONNX_DOMAIN, n.op_type)] for n in nodes]
    for index in range(len(nodes) - 1, -1, -1):  # children come after their parent
        parent = nodes[index].parent
        if parent is not None and not ok[index]:
            ok[parent] = False
    return ok


def _boundaries(nodes: list[onnxfile.NodeInfo], on_target: list[bool]) -> Boundaries:
    main = [i for i, n in enumerate(nodes) if n.parent is None]
    producer = {out: i for i in main for out in nodes[i].outputs if out}
    to_host: set[str] = set()
    to_device: set[str] = set()
    parent = {i: i for i in main if on_target[i]}

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in main:
        for name in nodes[i].inputs:
            j = producer.get(name)
            if j is None:  # a graph input or a weight: uploaded anyway
                continue
            if on_target[j] and not on_target[i]:
                to_host.add(name)
            elif on_target[i] and not on_target[j]:
                to_device.add(name)
            elif on_target[i] and on_target[j]:
                parent[root(i)] = root(j)
    partitions = len({root(i) for i in parent})
    return Boundaries(len(to_host), len(to_device), partitions)
