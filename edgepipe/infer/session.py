"""ONNX Runtime sessions: providers with fallback, sized threads, a cached optimized model,
quiet logs, and a deadline on every run.

``Session(path, config)`` loads (blocking: call it from a worker thread or a node's ``start()``,
never on the event loop) and ``session.run(feeds)`` runs (blocking, thread-safe: ONNX Runtime
allows concurrent runs of one session). Every run is counted in :attr:`Session.stats`.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import platform
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from edgepipe.core.errors import error_text
from edgepipe.infer import onnxfile, providers
from edgepipe.infer.cache import cache_dir
from edgepipe.infer.diagnose import load_error, run_error
from edgepipe.infer.errors import (
    InferError,
    InferTimeout,
    ModelInputError,
    ModelLoadError,
    ModelNotFound,
)
from edgepipe.infer.watchdog import WATCHDOG

log = logging.getLogger(__name__)

# ONNX Runtime logs to stderr from C++: warnings (unused initializers, shapes it recovers from)
# and, for every failed run, an error line repeating what the exception says. On a camera's
# console that is noise; every error reaches us as an exception and is reported once, with the
# model's name. --debug (edgepipe.infer at DEBUG) lets its warnings through again.
_ORT_QUIET = 4
ort.set_default_logger_severity(_ORT_QUIET)

_OPT_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
_NUMPY_TYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(uint8)": np.uint8,
    "tensor(int8)": np.int8,
    "tensor(int32)": np.int32,
    "tensor(int64)": np.int64,
    "tensor(bool)": np.bool_,
}


@dataclass(frozen=True, slots=True)
class SessionConfig:
    """How a model is loaded and run."""

    providers: tuple[str, ...] | None = None
    """Execution providers to try, in order (``cuda``, ``openvino`` ... or full names). None:
    every one this ONNX Runtime build has, in :data:`providers.PROVIDER_ORDER`. CPU is always
    the last resort."""
    threads: int | None = None
    """Intra-op threads. None: sized from ``budget_frac`` of this machine's cores."""
    budget_frac: float = 0.7
    """Share of the cores this model may keep busy when ``threads`` is None (30% headroom)."""
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


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """A model input or output as the session sees it (after any dim freeing)."""

    name: str
    shape: tuple[int | str | None, ...]
    dtype: Any
    """numpy dtype, or None for a type edgepipe does not map."""


@dataclass(slots=True)
class SessionStats:
    """Counters of one session's runs (read from any thread; written by the running ones)."""

    runs: int = 0
    failures: int = 0
    timeouts: int = 0
    retries: int = 0
    busy_s: float = 0.0
    last_run_ms: float = 0.0
    load_ms: float = 0.0
    first_result_ms: float | None = None
    """From the start of loading to the end of the first successful run."""


class Session:
    """One loaded model. Blocking; thread-safe runs."""

    def __init__(self, model: str | os.PathLike[str], config: SessionConfig | None = None, *,
                 name: str | None = None) -> None:  # fmt: skip
        self.config = config or SessionConfig()
        self.path = Path(model)
        self.name = name or self.path.name
        self.stats = SessionStats()
        self._t_start = time.perf_counter()
        self._free_options: list[ort.RunOptions] = []
        self._first_lock = threading.Lock()
        if not self.path.is_file():
            raise ModelNotFound(
                "no such file; pass a path to an .onnx file or a registry name (edgepipe models list)",
                model=str(self.path),
            )
        self.threads = self.config.threads or providers.intra_op_threads(self.config.budget_frac)
        self._session, self.optimized_path = self._load()
        self.providers: list[str] = list(self._session.get_providers())
        self.inputs = [_spec(i) for i in self._session.get_inputs()]
        self.outputs = [_spec(o) for o in self._session.get_outputs()]
        self.output_names = [o.name for o in self.outputs]
        self.stats.load_ms = (time.perf_counter() - self._t_start) * 1000
        log.info(
            "model %s: loaded in %.0f ms on %s, %d thread%s%s", self.name, self.stats.load_ms,
            self.providers[0], self.threads, "" if self.threads == 1 else "s",
            " (cached optimized graph)" if self.optimized_path else "",
        )  # fmt: skip

    # -- loading ------------------------------------------------------------------------------

    def _options(self, level: str) -> ort.SessionOptions:
        options = ort.SessionOptions()
        options.log_severity_level = 2 if log.isEnabledFor(logging.DEBUG) else _ORT_QUIET
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = _OPT_LEVELS[level]
        options.add_session_config_entry(
            "session.intra_op.allow_spinning", "1" if self.config.spinning else "0"
        )
        if self.config.denormal_as_zero:
            options.add_session_config_entry("session.set_denormal_as_zero", "1")
        return options

    def _provider_list(self) -> list[tuple[str, dict[str, str]]]:
        available = ort.get_available_providers()
        wanted, missing = providers.candidates(self.config.providers, available)
        if missing:
            log.warning(
                "model %s: this ONNX Runtime build has no %s (it has %s); using %s",
                self.name, ", ".join(missing), ", ".join(available), ", ".join(wanted),
            )  # fmt: skip
        user = {providers.full_name(k): dict(v) for k, v in self.config.provider_options.items()}
        return [(p, {**_default_provider_options(p), **user.get(p, {})}) for p in wanted]

    def _load(self) -> tuple[ort.InferenceSession, Path | None]:
        if self.config.optimization not in _OPT_LEVELS:
            names = ", ".join(_OPT_LEVELS)
            raise ValueError(f"optimization must be one of {names}, not {self.config.optimization!r}")
        wanted = self._provider_list()
        cached = self._cache_paths(wanted) if self.config.cache_optimized else None
        if cached is not None and cached[0].is_file():
            try:
                # Already optimized for these providers on this machine: no second pass.
                return self._create(str(cached[0]), wanted, self._options("disable")), cached[0]
            except InferError as exc:
                log.warning("model %s: cached optimized graph unusable (%s); rebuilding it", self.name, exc)
                _remove(cached[0])
        source: str | bytes = str(self.path)
        if self.config.free_image_dims:
            source = self._freed_bytes()
        options = self._options(self.config.optimization)
        if cached is None:
            return self._create(source, wanted, options), None
        model_path, data_name = cached
        model_path.parent.mkdir(parents=True, exist_ok=True)
        partial = model_path.with_name(model_path.name + f".{os.getpid()}.partial")
        options.optimized_model_filepath = str(partial)
        # Weights go to a separate file, aligned so that ONNX Runtime can memory-map them on the
        # next load instead of copying them into the process.
        options.add_session_config_entry("session.optimized_model_external_initializers_file_name", data_name)
        options.add_session_config_entry(
            "session.optimized_model_external_initializers_min_size_in_bytes", "1024"
        )
        try:
            session = self._create(source, wanted, options)
        except InferError:
            _remove(partial)
            raise
        if partial.is_file():
            os.replace(partial, model_path)
        return session, None

    def _freed_bytes(self) -> bytes:
        try:
            return onnxfile.free_image_dims(self.path.read_bytes())
        except (onnxfile.OnnxFormatError, KeyError) as exc:
            raise ModelLoadError(
                f"not a readable ONNX model ({exc}); the file may be truncated: fetch or export it again",
                model=str(self.path),
            ) from exc

    def _cache_paths(self, wanted: Sequence[tuple[str, dict[str, str]]]) -> tuple[Path, str] | None:
        names = [p for p, _ in wanted]
        if any(p in ("TensorrtExecutionProvider", "OpenVINOExecutionProvider") for p in names):
            return None  # these keep their own compiled-engine caches (see the provider defaults)
        stat = self.path.stat()
        key_text = "|".join([
            str(self.path.resolve()), str(stat.st_size), str(stat.st_mtime_ns), ort.__version__,
            ",".join(names), self.config.optimization, str(self.config.free_image_dims),
            platform.machine(), platform.processor(),
        ])  # fmt: skip
        key = hashlib.sha256(key_text.encode()).hexdigest()[:20]
        stem = f"{self.path.stem}-{key}"
        return cache_dir() / "optimized" / f"{stem}.onnx", f"{stem}.{os.getpid()}.weights"

    def _create(self, source: str | bytes, wanted: Sequence[tuple[str, dict[str, str]]],
                options: ort.SessionOptions) -> ort.InferenceSession:  # fmt: skip
        try:
            session = ort.InferenceSession(
                source, options, providers=[p for p, _ in wanted], provider_options=[o for _, o in wanted]
            )
        except Exception as exc:  # ONNX Runtime raises its own pybind types, all plain Exceptions
            raise load_error(exc, self.path, [p for p, _ in wanted]) from exc
        got = session.get_providers()
        skipped = [p for p, _ in wanted if p not in got]
        if skipped and wanted[0][0] != providers.CPU and wanted[0][0] not in got:
            log.warning(
                "model %s: %s could not start here; running on %s", self.name, ", ".join(skipped), got[0]
            )
        return session

    # -- running ------------------------------------------------------------------------------

    def input(self, index: int = 0) -> TensorSpec:
        return self.inputs[index]

    def run(self, feeds: Mapping[str, np.ndarray], output_names: Sequence[str] | None = None,
            timeout_s: float | None = None) -> list[np.ndarray]:  # fmt: skip
        """Run the model on ``feeds``. Blocks the calling thread for the run.

        ``timeout_s`` (default: the config's) is enforced by terminating the run at the next
        operator boundary. Raises :class:`InferTimeout`, :class:`ModelInputError` (a feed that
        does not fit the model; never retried), or :class:`InferError` for a failure of the run.
        """
        deadline = self.config.timeout_s if timeout_s is None else timeout_s
        names = list(output_names) if output_names is not None else self.output_names
        attempts = 1 + max(0, self.config.retries)
        for attempt in range(attempts):
            try:
                return self._run_once(feeds, names, deadline)
            except ModelInputError:
                raise
            except InferError:
                if attempt + 1 == attempts:
                    raise
                self.stats.retries += 1
        raise AssertionError("unreachable")

    def _run_once(
        self, feeds: Mapping[str, np.ndarray], names: list[str], timeout_s: float | None
    ) -> list[np.ndarray]:
        outputs: list[np.ndarray] = self._guarded(self._session.run, (names, feeds), timeout_s, feeds)
        return outputs

    @property
    def device(self) -> tuple[str, int]:
        """``(device_type, device_id)`` of the first provider's memory, as IO binding names it:
        where a buffer bound run after run should live (see :func:`providers.memory_device`)."""
        first = self.providers[0]
        return providers.memory_device(first, self._session.get_provider_options().get(first))

    def io_binding(self) -> Any:
        """An ONNX Runtime ``IOBinding`` for :meth:`run_bound` (inputs and outputs bound to
        buffers the caller owns and reuses)."""
        return self._session.io_binding()

    def run_bound(self, binding: Any, timeout_s: float | None = None) -> None:
        """Run with inputs and outputs bound (``io_binding()``): nothing is copied in or
        allocated for outputs bound to buffers. Same deadline, counting and errors as
        :meth:`run`, never retried (a terminated run may have written part of its outputs)."""
        deadline = self.config.timeout_s if timeout_s is None else timeout_s
        self._guarded(self._session.run_with_iobinding, (binding,), deadline, None)

    def _guarded(self, fn: Any, args: tuple[Any, ...], timeout_s: float | None,
                 feeds: Mapping[str, np.ndarray] | None) -> Any:  # fmt: skip
        """``fn(*args, run_options)`` under the deadline watchdog, counted; errors mapped."""
        try:
            options = self._free_options.pop()
        except IndexError:  # none free: concurrent runs (one abandoned at a node's deadline)
            options = _run_options()
        token = WATCHDOG.arm(options, timeout_s) if timeout_s is not None else None
        t0 = time.perf_counter()
        try:
            result = fn(*args, options)
        except Exception as exc:
            terminated = token is not None and not WATCHDOG.disarm(token)
            elapsed = time.perf_counter() - t0
            self.stats.runs += 1
            self.stats.busy_s += elapsed
            self.stats.failures += 1
            options.terminate = False
            self._free_options.append(options)
            if terminated:
                self.stats.timeouts += 1
                raise InferTimeout(
                    f"run terminated after {elapsed * 1000:.0f} ms (deadline {timeout_s * 1000:.0f} ms)",  # type: ignore[operator]
                    model=self.name,
                ) from exc
            if feeds is None:
                raise InferError(f"run failed: {error_text(exc)}", model=self.name) from exc
            raise run_error(exc, feeds, self.inputs, self.name) from exc
        if token is not None and not WATCHDOG.disarm(token):
            options.terminate = False  # fired just as the run returned: the result is whole
        elapsed = time.perf_counter() - t0
        self._free_options.append(options)
        stats = self.stats
        stats.runs += 1
        stats.busy_s += elapsed
        stats.last_run_ms = elapsed * 1000
        if stats.first_result_ms is None:
            self._first_result()
        return result

    def _first_result(self) -> None:
        with self._first_lock:
            if self.stats.first_result_ms is not None:
                return
            self.stats.first_result_ms = (time.perf_counter() - self._t_start) * 1000
        log.info(
            "model %s: first result %.0f ms after loading began (load %.0f ms, first run %.0f ms)",
            self.name, self.stats.first_result_ms, self.stats.load_ms, self.stats.last_run_ms,
        )  # fmt: skip

    def describe(self) -> dict[str, Any]:
        """What ``--stats`` and ``edgepipe models`` show about the session."""
        return {
            "model": self.name,
            "path": str(self.path),
            "providers": self.providers,
            "threads": self.threads,
            "inputs": {s.name: [*s.shape] for s in self.inputs},
            "outputs": {s.name: [*s.shape] for s in self.outputs},
        }


def _run_options() -> ort.RunOptions:
    options = ort.RunOptions()
    options.log_severity_level = _ORT_QUIET
    return options


def _spec(node: Any) -> TensorSpec:
    shape = tuple(d if isinstance(d, int | str) else None for d in (node.shape or ()))
    return TensorSpec(node.name, shape, _NUMPY_TYPES.get(node.type))


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def _default_provider_options(provider: str) -> dict[str, str]:
    # Engines that compile the graph cache the result themselves; point them at our cache so a
    # restart on the device does not spend minutes rebuilding the same engine.
    if provider == "TensorrtExecutionProvider":
        path = cache_dir() / "tensorrt"
        return {"trt_engine_cache_enable": "True", "trt_engine_cache_path": str(path),
                "trt_timing_cache_enable": "True", "trt_timing_cache_path": str(path)}  # fmt: skip
    if provider == "OpenVINOExecutionProvider":
        return {"cache_dir": str(cache_dir() / "openvino")}
    return {}
