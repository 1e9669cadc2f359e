"""How a model's outputs are read, as far as the model itself says: the adapter that decodes
them and the names of its classes, for a model given by path as for one named.

A registry model is known by its checksum (:func:`~edgepipe.infer.registry.copy_of`): its file
cannot change, so a copy of it anywhere is the registry's model. Any other file may say it in
its metadata (ONNX ``ModelProto.metadata_props``), under these keys::

    edgepipe.adapter   centerface              how its outputs are decoded
    edgepipe.labels    ["face"]                its class names by index, as a JSON list
    edgepipe.source    centerface              what it was made from (shown, never used)

``edgepipe quantize`` writes them into the INT8 model (its source's metadata kept, these keys
set from what the source was read as), so that a quantized CenterFace still says "face"; a
model exported elsewhere can be given them (docs/models.md says how). What the user passes
(``adapter=``, ``labels=``) wins over both.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from edgepipe.infer.errors import ModelLoadError
from edgepipe.infer.footprint import read_metadata
from edgepipe.infer.registry import ResolvedModel

ADAPTER_KEY = "edgepipe.adapter"
LABELS_KEY = "edgepipe.labels"
SOURCE_KEY = "edgepipe.source"


@dataclass(frozen=True, slots=True)
class OutputsInfo:
    """What the model says of its outputs; None where it says nothing."""

    adapter: str | None = None
    """The output decoder's name (``centerface``, ``yolov8`` ...)."""
    labels: tuple[str, ...] | None = None
    """Class names by index."""
    said_by: str = ""
    """Where it was read, for a log line: ``the registry's centerface``, ``its metadata``."""


def outputs_info(resolved: ResolvedModel, *, labels: bool = True) -> OutputsInfo:
    """The registry's entry for a registry model (named, or a copy given by path), else what the
    file's metadata says (its labels only if ``labels``: labels given need none). Raises
    :class:`ModelLoadError` for an ``edgepipe.labels`` that is not a JSON list of strings (and
    what :func:`read_metadata` raises)."""
    entry = resolved.entry
    if entry is not None:
        return OutputsInfo(entry.adapter, entry.labels or None, f"the registry's {entry.name}")
    return from_metadata(read_metadata(resolved.path), model=resolved.name, labels=labels)


def from_metadata(props: Mapping[str, str], *, model: str, labels: bool = True) -> OutputsInfo:
    """:class:`OutputsInfo` from a model's ``metadata_props`` (its labels only if ``labels``)."""
    adapter = props.get(ADAPTER_KEY) or None
    names = None
    text = props.get(LABELS_KEY) if labels else None
    if text is not None:
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        if not isinstance(value, list) or not all(isinstance(label, str) for label in value):
            raise ModelLoadError(
                f"its metadata {LABELS_KEY} is {text[:60]!r}, not a JSON list of class names: write "
                f'it as ["face", ...], or pass labels to the Detector',
                model=model,
            )
        names = tuple(value)
    if adapter is None and names is None:
        return OutputsInfo()
    return OutputsInfo(adapter, names, "its metadata")


def metadata_props(adapter: str, labels: Sequence[str], source: str) -> dict[str, str]:
    """The keys edgepipe writes into a model it makes (see the module docstring)."""
    props = {ADAPTER_KEY: adapter, SOURCE_KEY: source}
    if labels:
        props[LABELS_KEY] = json.dumps(list(labels), ensure_ascii=False)
    return props
