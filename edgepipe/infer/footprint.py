"""What a model will take once loaded, told without loading it (``edgepipe run --plan``).

- :func:`read_io`: its declared inputs and outputs, read from the file (no ONNX Runtime
  session, no ``onnx`` package; a large file is memory-mapped and only its graph's headers read),
  and :func:`read_metadata` the strings it carries (``metadata_props``);
- :func:`read_weights`: its weights as stored (parameters, bytes by dtype: the one estimate,
  :mod:`edgepipe.planning.weights`), read from the file's initializers, inside it or in external
  data files; :func:`weights_bytes` their bytes, what the memory plan reserves: ONNX Runtime
  holds the weights once, in host memory or on the device; optimizations may fuse or pre-pack
  some, which this does not try to predict;
- :func:`session_device`: where a session with a given configuration would keep the buffers it
  is bound to, from the providers this ONNX Runtime build has (a provider that then fails to
  start falls back to the CPU, and the host).
"""

from __future__ import annotations

import contextlib
import mmap
from collections.abc import Iterator
from pathlib import Path

import onnxruntime as ort

from edgepipe.infer import onnxfile, providers
from edgepipe.infer.config import SessionConfig
from edgepipe.infer.errors import ModelLoadError, ModelNotFound
from edgepipe.infer.onnxfile import TensorInfo
from edgepipe.planning.weights import Weights, count


@contextlib.contextmanager
def _mapped(path: Path) -> Iterator[bytes]:
    """The model file memory-mapped (read as bytes are); errors name the model."""
    if not path.is_file():
        raise ModelNotFound(
            "no such file; pass a path to an .onnx file or a registry name (edgepipe models list)",
            model=str(path),
        )
    try:
        with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            yield data  # type: ignore[misc]  # an mmap reads as bytes do
    except (OSError, ValueError) as exc:
        raise ModelLoadError(
            f"not a readable ONNX model ({exc}); the file may be truncated: fetch or export it again",
            model=str(path),
        ) from exc


def read_io(path: Path) -> tuple[list[TensorInfo], list[TensorInfo]]:
    """(inputs, outputs) the model file declares. Raises :class:`ModelNotFound` or
    :class:`ModelLoadError`."""
    with _mapped(path) as data:
        return onnxfile.graph_io(data)


def read_metadata(path: Path) -> dict[str, str]:
    """The model file's ``metadata_props`` (see :mod:`edgepipe.infer.metadata`). Raises
    :class:`ModelNotFound` or :class:`ModelLoadError`."""
    with _mapped(path) as data:
        return onnxfile.metadata_props(data)


def read_weights(path: Path) -> Weights:
    """The weights of the model file at ``path``, counted as stored (see the module docstring);
    the data are never read. Raises :class:`ModelNotFound` or :class:`ModelLoadError`."""
    with _mapped(path) as data:  # a malformed file: ModelLoadError, from _mapped
        return count(onnxfile.initializers(data), onnxfile.graph_nodes(data))


def weights_bytes(path: Path) -> int:
    """The bytes of the model's weights as stored (:func:`read_weights`)."""
    return read_weights(path).nbytes


def session_device(config: SessionConfig) -> tuple[str, int]:
    """``(device_type, device_id)`` a session with ``config`` would bind its buffers to (see
    :func:`providers.memory_device`): its first provider's memory."""
    wanted, _ = providers.candidates(config.providers, ort.get_available_providers())
    first = wanted[0]
    options = {providers.full_name(k): dict(v) for k, v in config.provider_options.items()}
    return providers.memory_device(first, options.get(first))


def device_label(device: tuple[str, int]) -> str:
    """How the memory plan names a device's memory: ``cuda:0``; empty for host memory."""
    kind, index = device
    return "" if kind == "cpu" else f"{kind}:{index}"
