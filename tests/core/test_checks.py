from __future__ import annotations

import contextlib
import math
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgepipe.core.checks import Range, check_writable_file, check_writable_folder, not_a_file
from tests.support.disks import small_tmpfs


@pytest.mark.parametrize(
    ("allowed", "good", "bad", "text"),
    [
        (Range(32, 4096), [32, 640, 4096], [31, 4097, -3, math.nan, math.inf], "a number in [32, 4096]"),
        (Range(0, 1), [0, 0.35, 1.0], [-0.1, 1.01, math.nan], "a number in [0, 1]"),
        (Range(0, low_open=True), [1e-9, 10, math.inf], [0, -1, math.nan, -math.inf], "a number more than 0"),
        (Range(1), [1, 3], [0, -5], "a number at least 1"),
        (Range(None, 5, high_open=True), [4.9, -math.inf], [5, 6], "a number less than 5"),
    ],
)
def test_range_allows_its_interval_only(
    allowed: Range, good: list[float], bad: list[float], text: str
) -> None:
    for value in good:
        allowed.check(value)
    allowed.check(None)  # an `X | None` parameter left at None
    for value in bad:
        with pytest.raises(ValueError, match="^" + re.escape(text) + "$"):
            allowed.check(value)
    for not_a_number in ("7", True):
        with pytest.raises(ValueError, match="^" + re.escape(text) + "$"):
            allowed.check(not_a_number)


def test_a_range_upside_down_is_refused() -> None:
    with pytest.raises(ValueError, match="low is above high"):
        Range(5, 1)


def test_a_writable_file_is_proven_by_opening_it_and_nothing_is_left(tmp_path: Path) -> None:
    new = tmp_path / "new.mp4"
    check_writable_file(new)
    assert not new.exists()  # created to prove it, removed at once
    kept = tmp_path / "kept.txt"
    kept.write_text("old contents")
    check_writable_file(kept)
    assert kept.read_text() == "old contents"  # opened for appending, never truncated
    check_writable_file(os.devnull)  # a device: by permission, not opened


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("folder", r"a file path, not a folder"),
        ("missing/x.mp4", r"a file path in an existing folder \(.*missing does not exist; create it first\)"),
        ("file/x.mp4", r"a file path in an existing folder \(.*file is not a folder"),
        ("", r"a file path \(got an empty one\)"),
    ],
)
def test_a_path_that_cannot_be_a_file_says_why(tmp_path: Path, where: str, message: str) -> None:
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match=message):
        check_writable_file(str(tmp_path / where) if where else "")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "folder"]


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc")
def test_proc_takes_no_file_even_where_os_access_says_yes() -> None:
    with pytest.raises(ValueError, match=r"a file that can be written \(/proc/edgepipe-x\.mp4: "):
        check_writable_file("/proc/edgepipe-x.mp4")


def test_not_a_file_names_what_is_there_without_opening_it(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")  # opening it would block: the call returning proves it was not
    (tmp_path / "file").write_text("x")
    assert not_a_file(tmp_path / "fifo") == "a FIFO (named pipe)"
    assert not_a_file(tmp_path) == "a folder"
    assert not_a_file(tmp_path / "file") is None
    assert not_a_file(tmp_path / "absent") is None


def test_a_writable_folder_is_proven_by_making_it_or_a_file_in_it_and_nothing_is_left(tmp_path: Path) -> None:
    check_writable_folder(tmp_path / "new")  # made to prove it, removed at once; its parent exists
    check_writable_folder(tmp_path)  # exists: a file made in it, removed at once
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("file", r"a folder path, not a file \(.*file is a file\)"),
        (
            "missing/events",
            r"a folder path in an existing folder \(.*missing does not exist; create it first\)",
        ),
        ("file/events", r"a folder path in an existing folder \(.*file is not a folder\)"),
        ("", r"a folder path \(got an empty one\)"),
        (os.devnull, r"a folder path \(/dev/null is not a folder\)"),
        (
            "/proc/self",
            r"a folder files can be written in \(/proc/self: nothing can be created in /proc/self\)",
        ),
        ("/proc/events", r"a folder that can be created \(/proc/events: nothing can be created in /proc\)"),
    ],
)
def test_a_path_that_cannot_be_a_writable_folder_says_why(tmp_path: Path, where: str, message: str) -> None:
    if where.startswith("/proc") and not os.path.isdir("/proc/self"):
        pytest.skip("needs Linux /proc")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match=message):
        check_writable_folder(str(tmp_path / where) if where else "")
    assert [p.name for p in tmp_path.iterdir()] == ["file"]  # missing parents are never made


@contextlib.contextmanager
def _read_only(tmp_path: Path) -> Iterator[Path]:
    """A folder no file can be made in: a read-only tmpfs as root (who ignores modes), else mode 555."""
    if os.geteuid() != 0:
        folder = tmp_path / "ro"
        folder.mkdir(mode=0o555)
        yield folder
        return
    with small_tmpfs(tmp_path, "64k") as disk:
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True, capture_output=True)
        yield disk


def test_a_read_only_folder_or_one_that_cannot_be_made_in_it_is_refused(tmp_path: Path) -> None:
    with _read_only(tmp_path) as folder:
        with pytest.raises(ValueError, match=rf"a folder files can be written in \({folder}: "):
            check_writable_folder(folder)
        with pytest.raises(ValueError, match=rf"a folder that can be created \({folder}/events: "):
            check_writable_folder(folder / "events")
