"""Loading an ONNX model into an ONNX Runtime session: session options (threads, spinning,
denormals, optimization level), providers with fallback and their defaults, quiet logs, the
optimized-model cache, and, for a traced run (``edgepipe trace``: the run's span recorder has a
profile prefix, :data:`edgepipe.core.spans.SPANS`), ONNX Runtime's profile of the session's runs.

:func:`load_session` blocks (optimization can take seconds; a cached optimized graph skips it).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import platform
import re
from collections.abc import Sequence
from pathlib import Path

import onnxruntime as ort

from edgepipe.core import native
from edgepipe.core.spans import SPANS
from edgepipe.infer import onnxfile, providers
from edgepipe.infer.config import SessionConfig
from edgepipe.infer.diagnose import load_error
from edgepipe.infer.errors import InferError, ModelLoadError
from edgepipe.infer.model_cache import limit as cache_limit
from edgepipe.infer.model_cache.folder import cache_dir
from edgepipe.sched import affinity

log = logging.getLogger(__name__)

# ONNX Runtime logs to stderr from C++: warnings (unused initializers, shapes it recovers from)
# and, for every failed run, an error line repeating what the exception says. On a camera's
# console that is noise; every error reaches us as an exception and is reported once, with the
# model's name. --debug (edgepipe.infer at DEBUG) lets its warnings through again.
ORT_QUIET = 4
ORT_ERRORS = 3
"""ONNX Runtime's log severity that keeps it silent (fatal errors only)."""
ort.set_default_logger_severity(ORT_QUIET)

_OPT_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}

_Wanted = Sequence[tuple[str, dict[str, str]]]


def load_session(
    path: Path, config: SessionConfig, *, name: str, threads: int
) -> tuple[ort.InferenceSession, Path | None]:
    """The model at ``path`` loaded with ``threads`` intra-op threads, and the cached optimized
    graph it was loaded from (None when it was optimized here, or not cached).

    Raises :class:`ValueError` for an unknown optimization level, :class:`ModelLoadError` or
    :class:`UnsupportedOperator` (see :mod:`edgepipe.infer.diagnose`) when it cannot load.
    """
    return _Loader(path, config, name, threads).load()


class _Loader:
    def __init__(self, path: Path, config: SessionConfig, name: str, threads: int) -> None:
        self.path = path
        self.config = config
        self.name = name
        self.threads = threads
        self.tracing = SPANS.get()
        """The run's span recorder: with a profile prefix (``edgepipe trace``), the session
        profiles its runs for it; None outside a traced run."""

    @property
    def profile_prefix(self) -> str | None:
        return self.tracing.profile_prefix if self.tracing is not None else None

    def options(self, level: str) -> ort.SessionOptions:
        options = ort.SessionOptions()
        # Errors only, even with --debug: ONNX Runtime's warnings are about the graph's own
        # leftovers (unused initializers, …), hundreds of lines that say nothing about the run.
        options.log_severity_level = ORT_ERRORS if log.isEnabledFor(logging.DEBUG) else ORT_QUIET
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = _OPT_LEVELS[level]
        options.add_session_config_entry(
            "session.intra_op.allow_spinning", "1" if self.config.spinning else "0"
        )
        if self.config.denormal_as_zero:
            options.add_session_config_entry("session.set_denormal_as_zero", "1")
        prefix = self.profile_prefix
        if prefix is not None:
            options.enable_profiling = True
            # a model's name may be its path ("./models/qwen"): one file name, not folders
            safe = re.sub(r"[^\w.-]", "_", self.name).lstrip(".")
            options.profile_file_prefix = f"{prefix}{safe}"
        return options

    def provider_list(self) -> list[tuple[str, dict[str, str]]]:
        available = ort.get_available_providers()
        wanted, missing = providers.candidates(self.config.providers, available)
        if missing:
            log.warning(
                "model %s: this ONNX Runtime build has no %s (it has %s); using %s",
                self.name, ", ".join(missing), ", ".join(available), ", ".join(wanted),
            )  # fmt: skip
        user = {providers.full_name(k): dict(v) for k, v in self.config.provider_options.items()}
        return [(p, {**_default_provider_options(p), **user.get(p, {})}) for p in wanted]

    def load(self) -> tuple[ort.InferenceSession, Path | None]:
        if self.config.optimization not in _OPT_LEVELS:
            names = ", ".join(_OPT_LEVELS)
            raise ValueError(f"optimization must be one of {names}, not {self.config.optimization!r}")
        wanted = self.provider_list()
        cached = self.cache_paths(wanted) if self.config.cache_optimized else None
        if cached is not None and cached[0].is_file():
            # Held from before it is read: another process's eviction must wait for the next.
            held = cache_limit.hold([cached[0], self.path])
            try:
                # Already optimized for these providers on this machine: no second pass.
                session = self.create(str(cached[0]), wanted, self.options("disable"))
                cache_limit.touch(cached[0])  # its place in the least-recently-used order
                cache_limit.tie(held, session)
                return session, cached[0]
            except InferError as exc:
                cache_limit.release(held)
                log.warning("model %s: cached optimized graph unusable (%s); rebuilding it", self.name, exc)
                _remove(cached[0])
        source: str | bytes = str(self.path)
        if self.config.free_image_dims:
            source = self.freed_bytes()
        options = self.options(self.config.optimization)
        if cached is not None and not self.worth_caching():
            cached = None
        if cached is None:
            return self.create(source, wanted, options), None
        model_path, data_name = cached
        model_path.parent.mkdir(parents=True, exist_ok=True)
        partial = model_path.with_name(model_path.name + f".{os.getpid()}.partial")
        # Ours while ONNX Runtime writes them: another thread's eviction must leave them be.
        writing = cache_limit.hold([partial, model_path.with_name(data_name)])
        options.optimized_model_filepath = str(partial)
        # Weights go to a separate file, aligned so that ONNX Runtime can memory-map them on the
        # next load instead of copying them into the process.
        options.add_session_config_entry("session.optimized_model_external_initializers_file_name", data_name)
        options.add_session_config_entry(
            "session.optimized_model_external_initializers_min_size_in_bytes", "1024"
        )
        try:
            session = self.create(source, wanted, options)
            if partial.is_file():
                os.replace(partial, model_path)
                cache_limit.hold([model_path, self.path], owner=session)
        except InferError:
            _remove(partial)
            raise
        finally:
            cache_limit.release(writing)
        if model_path.is_file():
            cache_limit.tidy_graph(model_path, data_name)
            cache_limit.enforce()
        return session, None

    def worth_caching(self) -> bool:
        """Whether the model, weights included, is small enough for its optimized graph to be
        kept (:func:`cache_limit.graph_fits`); logs one line when it is not."""
        size = self.path.stat().st_size
        if size < 64 << 20:  # a graph with its weights outside: count them
            with contextlib.suppress(OSError, KeyError, onnxfile.OnnxFormatError):  # ORT will say
                for name in onnxfile.external_data(self.path.read_bytes()):
                    size += (self.path.parent / name).stat().st_size
        if cache_limit.graph_fits(size):
            return True
        log.info(
            "model %s: optimized graph not cached: the model (%s) is more than half the cache "
            "limit %s (%s); it is optimized again at each start; %s=%s keeps it",
            self.name, cache_limit.format_size(size), cache_limit.format_size(cache_limit.limit_bytes()),
            cache_limit.ENV, cache_limit.ENV, _size_text(3 * size),
        )  # fmt: skip
        return False

    def freed_bytes(self) -> bytes:
        try:
            return onnxfile.free_image_dims(self.path.read_bytes())
        except (onnxfile.OnnxFormatError, KeyError) as exc:
            raise ModelLoadError(
                f"not a readable ONNX model ({exc}); the file may be truncated: fetch or export it again",
                model=str(self.path),
            ) from exc

    def cache_paths(self, wanted: _Wanted) -> tuple[Path, str] | None:
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

    def create(
        self, source: str | bytes, wanted: _Wanted, options: ort.SessionOptions
    ) -> ort.InferenceSession:
        try:
            # Its intra-op threads start now, on the cores of this thread: the heavy ones.
            with (
                native.Native(f"loading model {self.name}"),
                affinity.heavy_scope(),
            ):  # exiting meanwhile would abort (134)
                session = ort.InferenceSession(
                    source, options, providers=[p for p, _ in wanted], provider_options=[o for _, o in wanted]
                )
        except Exception as exc:  # ONNX Runtime raises its own pybind types, all plain Exceptions
            raise load_error(exc, self.path, [p for p, _ in wanted]) from exc
        if self.tracing is not None and self.profile_prefix is not None:
            self.tracing.profiled.append((self.name, self.path, session))
        got = session.get_providers()
        skipped = [p for p, _ in wanted if p not in got]
        if skipped and wanted[0][0] != providers.CPU and wanted[0][0] not in got:
            log.warning(
                "model %s: %s could not start here; running on %s", self.name, ", ".join(skipped), got[0]
            )
        return session


def _size_text(size_bytes: int) -> str:
    """A value for ``$EDGEPIPE_CACHE_MAX`` of at least ``size_bytes``, rounded up: ``5G``."""
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20)):
        if size_bytes >= scale:
            return f"{-(-size_bytes // scale)}{unit}"
    return f"{-(-size_bytes // 1024)}K"


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
