"""Inputs named for what they are; outputs written whole, over regular files only."""

from __future__ import annotations

import errno
import os
import socket
import stat
from pathlib import Path

import pytest

from edgepipe.core.errors import os_reason
from edgepipe.deploy.files import PathError, check_input, check_model, check_output, replacing, write_output
from tests.support.disks import full_device, small_tmpfs


def specials(tmp_path: Path) -> dict[str, Path]:
    """A FIFO, a socket and a folder in ``tmp_path`` (a device comes from tests/support/disks.py)."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    sock = tmp_path / "sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(sock))
    server.close()  # the name stays: a socket file nothing listens on
    folder = tmp_path / "folder"
    folder.mkdir()
    return {"a FIFO (named pipe)": fifo, "a socket": sock, "a folder": folder}


def test_an_input_that_is_not_a_file_is_named_for_what_it_is(tmp_path: Path) -> None:
    for kind, path in specials(tmp_path).items():
        if kind == "a folder":
            continue
        with pytest.raises(PathError) as caught:
            check_input(path, f"--calib {path.name}", give="give a video")
        assert str(caught.value) == f"--calib {path.name}: is {kind}, not a file; give a video"
    link = tmp_path / "link.mp4"
    link.symlink_to(tmp_path / "pipe")
    with pytest.raises(PathError, match=r"link\.mp4: is a FIFO \(named pipe\), not a file or folder"):
        check_input(link, "--calib link.mp4", give="give a video", folder=True)
    with pytest.raises(PathError, match=r"^--calib nope: no such file or folder; give a video$"):
        check_input(tmp_path / "nope", "--calib nope", give="give a video", folder=True)
    with pytest.raises(PathError, match="is a folder, not a file"):
        check_input(tmp_path / "folder", "x", give="give a file")
    assert check_input(tmp_path / "folder", "x", give="-", folder=True) == tmp_path / "folder"


def test_a_device_as_an_input_is_named(tmp_path: Path) -> None:
    device = full_device(tmp_path)
    with pytest.raises(PathError, match=r"model full: is a character device, not a file"):
        check_model(device, "model full", give="give an .onnx file")


def test_an_empty_model_says_what_check_ops_says(tmp_path: Path) -> None:
    (tmp_path / "m.onnx").write_bytes(b"")
    with pytest.raises(PathError) as caught:
        check_model(tmp_path / "m.onnx", "model m.onnx", give="-")
    assert str(caught.value) == "model m.onnx: empty file (0 bytes) (not an ONNX model?)"


@pytest.mark.parametrize("force", [False, True])
def test_an_output_that_is_not_a_regular_file_is_refused_whatever_force_says(
    tmp_path: Path, force: bool
) -> None:
    targets = specials(tmp_path)
    targets["a character device"] = full_device(tmp_path)
    link = tmp_path / "to-device"
    link.symlink_to(targets["a character device"])
    targets["a character device, through a symlink"] = link
    for kind, path in targets.items():
        with pytest.raises(PathError) as caught:
            check_output(path, "-o", force=force)
        message = str(caught.value)
        assert message.startswith(f"-o {path}")
        assert f"is {kind.split(',')[0]}, not a regular file" in message
        assert "--force" not in message  # never steered toward replacing a device
        assert "\n" not in message
    assert stat.S_ISFIFO(os.lstat(targets["a FIFO (named pipe)"]).st_mode)
    assert stat.S_ISCHR(os.lstat(targets["a character device"]).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder", "full", "pipe", "sock", "to-device"]


def test_a_regular_file_is_replaced_only_with_force(tmp_path: Path) -> None:
    out = tmp_path / "m.onnx"
    out.write_text("old")
    with pytest.raises(PathError) as caught:
        check_output(out, "-o", force=False)
    assert str(caught.value) == f"{out} exists; pass --force to replace it, or -o another path"
    assert check_output(out, "-o", force=True) == out
    link = tmp_path / "latest.onnx"
    link.symlink_to(out)
    assert check_output(link, "-o", force=True) == out  # the file it points to, the link kept
    assert list(tmp_path.glob(".*")) == []  # the probe's temporary file is gone


def test_a_folder_that_takes_no_file_is_refused_before_any_work(tmp_path: Path) -> None:
    with pytest.raises(PathError, match=r"its folder .* does not exist"):
        check_output(tmp_path / "no" / "x.json", "-o", force=True)
    with pytest.raises(PathError, match=r"cannot write there \(file name too long\)"):
        check_output(tmp_path / ("m" * 300), "-o", force=True)


def test_output_is_whole_and_keeps_the_old_files_permissions(tmp_path: Path) -> None:
    out = tmp_path / "trace.json"
    out.write_text("old")
    out.chmod(0o640)
    write_output(out, "new " * 1000)
    assert out.read_text() == "new " * 1000
    assert stat.S_IMODE(out.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["trace.json"]
    link = tmp_path / "link.json"
    link.symlink_to(out)
    write_output(check_output(link, "-o", force=True), "through the link")
    assert link.is_symlink()
    assert out.read_text() == "through the link"


def test_a_failure_while_writing_leaves_the_old_file_and_no_temporary_file(tmp_path: Path) -> None:
    out = tmp_path / "m.int8.onnx"
    out.write_bytes(b"old model")

    def quantizer_fails() -> None:
        with replacing(out) as part:
            part.write_bytes(b"half a mod")
            raise RuntimeError("the quantizer failed")

    with pytest.raises(RuntimeError):
        quantizer_fails()
    assert out.read_bytes() == b"old model"
    assert [p.name for p in tmp_path.iterdir()] == ["m.int8.onnx"]


def test_a_target_swapped_for_a_fifo_while_working_is_not_replaced(tmp_path: Path) -> None:
    out = tmp_path / "trace.json"

    def swapped() -> None:
        with replacing(out) as part:
            part.write_text("{}")
            os.mkfifo(out)

    with pytest.raises(OSError, match="is now a FIFO") as caught:
        swapped()
    assert caught.value.filename == str(out)
    assert stat.S_ISFIFO(out.stat().st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["trace.json"]


def test_a_full_disk_names_the_output_and_leaves_nothing_half_written(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path, "64k") as disk:
        out = disk / "trace.json"
        out.write_text('{"old": true}')
        with pytest.raises(OSError, match="No space left on device") as caught:
            write_output(out, "x" * 1_000_000)
        assert caught.value.errno == errno.ENOSPC
        assert caught.value.filename == str(out)  # the target, not the temporary file
        assert os_reason(caught.value) == "no space left on device"
        assert out.read_text() == '{"old": true}'
        assert [p.name for p in disk.iterdir()] == ["trace.json"]


def test_a_long_name_in_a_script_of_several_bytes_a_letter_is_written(tmp_path: Path) -> None:
    out = tmp_path / ("模" * 80 + ".onnx")  # 245 bytes: a valid name; 200 characters of it are not
    write_output(check_output(out, "-o", force=False), "model")
    assert out.read_text() == "model"
    assert [p.name for p in tmp_path.iterdir()] == [out.name]
