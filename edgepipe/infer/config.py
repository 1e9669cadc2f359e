"""How a model is loaded and run: :class:`SessionConfig`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class SessionConfig:
    """How a model is loaded and run."""

    providers: tuple[str, ...] | None = None
    """Execution providers to try, in order (``cuda``, ``openvino`` ... or full names). None:
    every one this ONNX Runtime build has, in :data:`providers.PROVIDER_ORDER`. CPU is always
    the last resort."""
    threads: int | None = None
    """Intra-op threads. None: from the process's CPU budget (:func:`edgepipe.sched.cpu_budget`:
    usable cores x 0.7, at least one), the same for every model; the gate bounds how many run
    at once."""
    spinning: bool = False
    """Let idle operator threads spin. Off: spinning shaves microseconds off a run but keeps
    cores busy between runs, which starves the decoder on a small device."""
    denormal_as_zero: bool = True
    """Flush denormal floats to zero in operator threads. Real images drive some activations
    into the denormal range, where x86 float math is many times slower; zeroing them changes
    results by less than float32 rounding."""
    optimization: str = "all"
    """Graph optimization: ``disable``, ``basic``, ``extended`` or ``all``."""
    cache_optimized: bool = True
    """Save the optimized graph (weights in a separate, memory-mapped file) in the cache and
    load that next time: start-up skips optimization."""
    timeout_s: float | None = 5.0
    """Deadline of one run; past it the run is terminated and :class:`InferTimeout` raised."""
    retries: int = 0
    """Immediate retries of a run that failed or timed out. 0 suits live video, where the next
    frame is the retry; a one-off job may want 1 or 2."""
    free_image_dims: bool = False
    """Make batch/height/width of rank-4 inputs and outputs symbolic before loading: for models
    exported at one fixed size whose layers work at any (see :mod:`onnxfile`)."""
    provider_options: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Per-provider options, by full or short name, merged over edgepipe's defaults."""
