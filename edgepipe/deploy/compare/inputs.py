"""What ``edgepipe compare`` feeds both sides: random tensors of each input's declared shape and
type, or frames of a video through the Detector's own preprocessing.

Random values: floats uniform in [0, 1), uint8 in [0, 255], int8 in [-128, 127], other
integers in [0, 10), booleans either; a seeded generator, so a run can be repeated. A dimension
the model leaves free is 1 for the first (the batch) and :data:`FREE_DIM` for the others, unless
``--shape`` says otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np

from edgepipe.infer.spec import TensorSpec

FREE_DIM = 64
"""Size given to a free dimension other than the first."""


class InputError(ValueError):
    """The inputs cannot be made as asked (the message names the input and what to do)."""


def parse_shapes(texts: Sequence[str], specs: Sequence[TensorSpec]) -> dict[str, tuple[int, ...]]:
    """``NAME=1x3x192x320`` (or ``1x3x192x320`` for the first input) -> {name: shape}."""
    shapes: dict[str, tuple[int, ...]] = {}
    names = [s.name for s in specs]
    for text in texts:
        name, _, dims = text.rpartition("=")
        name = name or (names[0] if names else "")
        if name not in names:
            raise InputError(
                f"--shape {text}: the model has no input {name!r} (its inputs: {', '.join(names)})"
            )
        try:
            shape = tuple(int(d) for d in dims.lower().split("x"))
        except ValueError:
            shape = ()
        if not shape or any(d < 1 for d in shape):
            raise InputError(f"--shape {text}: expected sizes such as 1x3x192x320")
        shapes[name] = shape
    return shapes


def input_shape(spec: TensorSpec, given: Mapping[str, tuple[int, ...]]) -> tuple[int, ...]:
    """The shape fed to ``spec``: the one given, else the declared dims with free ones filled."""
    if spec.name in given:
        shape = given[spec.name]
        declared = spec.shape
        fixed_conflict = len(shape) != len(declared) or any(
            isinstance(d, int) and d > 0 and d != s for d, s in zip(declared, shape, strict=False)
        )
        if fixed_conflict:
            raise InputError(
                f"--shape for {spec.name!r}: {list(shape)} does not fit its declared shape {list(declared)}"
            )
        return shape
    return tuple(
        d if isinstance(d, int) and d > 0 else (1 if i == 0 else FREE_DIM) for i, d in enumerate(spec.shape)
    )


def random_feeds(
    specs: Sequence[TensorSpec], given: Mapping[str, tuple[int, ...]], count: int, seed: int = 0
) -> Iterator[dict[str, np.ndarray]]:
    """``count`` feeds of random tensors (see the module docstring). Raises :class:`InputError`,
    at the call, before any is made, for an input of a type edgepipe cannot make, a shape that
    does not fit the input, a negative seed, or feeds that would pass the memory plan's budget
    (all ``count`` of them: ``compare`` holds them together)."""
    if seed < 0:
        raise InputError(f"--seed {seed}: a seed is a whole number of at least 0")
    shapes = {s.name: input_shape(s, given) for s in specs}
    for spec in specs:
        if spec.dtype is None:
            raise InputError(f"input {spec.name!r} has a type compare cannot make random values of")
    _check_memory(specs, shapes, count)
    return _feeds(specs, shapes, count, seed)


def _feeds(specs: Sequence[TensorSpec], shapes: Mapping[str, tuple[int, ...]], count: int,
           seed: int) -> Iterator[dict[str, np.ndarray]]:  # fmt: skip
    rng = np.random.default_rng(seed)
    for _ in range(count):
        try:
            yield {s.name: _random(rng, shapes[s.name], np.dtype(s.dtype)) for s in specs}
        except MemoryError:  # the budget is unknown here (no limit read), or others hold memory
            raise InputError(f"random inputs ({_shapes_text(specs, shapes)}): not enough memory; "
                             "give --shape smaller sizes") from None  # fmt: skip


def _check_memory(specs: Sequence[TensorSpec], shapes: Mapping[str, tuple[int, ...]], count: int) -> None:
    """Refuse feeds past what the memory plan has left, naming the shapes and the bytes."""
    from edgepipe.planning.memory import MemoryBudgetError, memory_plan

    each = sum(math.prod(shapes[s.name]) * np.dtype(s.dtype).itemsize for s in specs)
    nbytes = count * each
    what = f"{count} random input{'s' if count > 1 else ''} ({_shapes_text(specs, shapes)}: {nbytes} bytes)"
    try:
        memory_plan().reserve(
            "compare", what, nbytes, hint="give --shape smaller sizes, or fewer --samples"
        ).release()
    except MemoryBudgetError as exc:
        raise InputError(str(exc)) from None


def _shapes_text(specs: Sequence[TensorSpec], shapes: Mapping[str, tuple[int, ...]]) -> str:
    return ", ".join(f"{s.name} {'x'.join(map(str, shapes[s.name]))} {np.dtype(s.dtype).name}" for s in specs)


def _random(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    if dtype.kind == "f":
        return rng.random(shape, dtype=np.float32).astype(dtype)
    if dtype == np.uint8:
        return rng.integers(0, 256, shape, dtype=np.uint8)
    if dtype == np.int8:
        return rng.integers(-128, 128, shape, dtype=np.int8)
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(np.bool_)
    return rng.integers(0, 10, shape).astype(dtype)


def frame_feeds(
    video: Path, model: str, free_image_dims: bool, count: int, input_size: int
) -> list[dict[str, np.ndarray]]:
    """``count`` evenly spaced frames of ``video`` made into the first input of ``model`` (a
    detector: loaded here on the CPU for its input and preprocessing). Raises :class:`InputError`."""
    from dataclasses import replace

    from edgepipe.deploy.quantize.calib import CalibError, read_frames
    from edgepipe.infer import SessionConfig
    from edgepipe.vision.adapters import AdapterError
    from edgepipe.vision.model import load_model
    from edgepipe.vision.preprocess import TensorCache

    try:
        frames = read_frames(video, count, 0).calibration
    except CalibError as exc:
        raise InputError(str(exc)) from exc
    config = replace(
        SessionConfig(providers=("cpu",), cache_optimized=False), free_image_dims=free_image_dims
    )
    try:
        loaded = load_model(model, config, input_size=input_size)
    except (AdapterError, ValueError) as exc:
        raise InputError(
            f"--input {video}: frames are made for a detector's image input, and {model} is not one "
            f"edgepipe can read ({exc}); compare it on random inputs (leave out --input)"
        ) from exc
    try:
        if len(loaded.session.inputs) != 1:
            raise InputError(
                f"--input {video}: {model} takes {len(loaded.session.inputs)} inputs; frames feed one"
            )
        tensors = TensorCache(loaded, input_size=input_size, owner="compare")
        name = loaded.session.input(0).name
        return [{name: tensors(frame)[0].copy()} for frame in frames]
    finally:
        loaded.session.close()
