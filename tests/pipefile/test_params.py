"""The ``Annotated`` constraints of a pipeline's parameters; the checks they run are
:mod:`edgepipe.core.checks`' (tests/core/test_checks.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgepipe.pipefile.params import WritableFile, WritableFolder


def test_a_writable_file_or_folder_may_be_empty_for_write_nothing() -> None:
    WritableFile().check("")  # "" and None mean "write nothing"
    WritableFile().check(None)
    WritableFolder().check("")
    WritableFolder().check(None)


def test_a_writable_file_or_folder_runs_the_check_at_the_door(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    WritableFile().check(str(tmp_path / "new.mp4"))
    WritableFolder().check(str(tmp_path / "events"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]
    with pytest.raises(ValueError, match=r"a file path, not a folder"):
        WritableFile().check(str(tmp_path))
    with pytest.raises(ValueError, match=r"a folder path, not a file"):
        WritableFolder().check(str(tmp_path / "file"))
