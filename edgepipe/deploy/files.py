"""The files the deployment commands read and write, checked for what they are.

Inputs (a model, a pipeline file, a video or folder of images, a TOML of parameters) are
checked before any work: a FIFO, a socket or a device is named as what it is (reading one could
block or never end), not called missing. :func:`check_input` is that one check.

Outputs (``quantize -o``, ``trace -o``) are written to a temporary file in the target's folder,
flushed to the disk, then renamed over the target (:func:`replacing`, :func:`write_output`): a
reader sees the old file or the whole new one, never half of one, and a failure (a full disk)
leaves the old file as it was and no temporary file behind. Only a regular file is replaced
(through a symlink, the file it points to); a FIFO, a device, a socket or a folder is refused
before any work by :func:`check_output`, whatever ``--force`` says.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

from edgepipe.core.checks import kind_of
from edgepipe.core.errors import os_reason

TEMP_SUFFIX = ".part"
"""The temporary file is ``.NAME.RANDOM.part`` beside the target (hidden, and named after it)."""
_NAME_KEPT = 200
"""Bytes of the target's name kept in the temporary one (names are at most 255 bytes)."""


EMPTY_MODEL = "empty file (0 bytes) (not an ONNX model?)"


class PathError(ValueError):
    """A path a command was given cannot be used as it is; the message is the one line to print."""


def check_input(path: str | os.PathLike[str], label: str, *, give: str, folder: bool = False) -> Path:
    """``path`` (``~`` expanded) when it is a regular file, or a folder where ``folder`` allows
    one; else :class:`PathError`: ``LABEL: is a FIFO (named pipe), not a file; GIVE``, ``LABEL:
    no such file; GIVE`` or ``LABEL: cannot read it (REASON); GIVE``. Nothing is opened.
    ``label`` names the input as the command line did (``--calib clip.mp4``, ``model x.onnx``);
    ``give`` says what to pass instead."""
    target = Path(path).expanduser()
    wanted = "file or folder" if folder else "file"
    try:
        mode = target.stat().st_mode
    except FileNotFoundError:
        raise PathError(f"{label}: no such {wanted}; {give}") from None
    except OSError as exc:  # a folder on the way without permission, a name too long ...
        raise PathError(f"{label}: cannot read it ({os_reason(exc)}); {give}") from None
    if stat.S_ISREG(mode) or (folder and stat.S_ISDIR(mode)):
        return target
    raise PathError(f"{label}: is {kind_of(mode)}, not a {wanted}; {give}")


def check_model(path: str | os.PathLike[str], label: str, *, give: str, folder: bool = False) -> Path:
    """:func:`check_input` for a model file, which must not be empty either: ``LABEL: empty
    file (0 bytes) (not an ONNX model?)``, the words ``check-ops`` has always used."""
    target = check_input(path, label, give=give, folder=folder)
    if target.is_file() and target.stat().st_size == 0:
        raise PathError(f"{label}: {EMPTY_MODEL}")
    return target


def check_output(path: str | os.PathLike[str], flag: str, *, force: bool) -> Path:
    """The file to write for ``path``: itself, or the file a symlink at ``path`` points to.

    Raises :class:`PathError` (the one line to print, exit 2) when it is not a regular file (a
    FIFO, a device, a socket, a folder: never replaced, and ``--force`` is not suggested), when
    it exists and ``force`` is false, or when its folder is missing or takes no new file (tried
    by creating and removing the temporary file the output will be written to)."""
    given = Path(path).expanduser()
    shown = f"{flag} {os.fspath(path)}"
    if not os.fspath(path).strip():
        raise PathError(f"{flag}: an empty path; give the path of the file to write")
    target = given
    try:
        if given.is_symlink():
            target = Path(os.path.realpath(given))
        mode: int | None = target.stat().st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:  # a name too long, a folder on the way without permission ...
        raise PathError(
            f"{shown}: cannot write there ({os_reason(exc)}); give the path of a file to write"
        ) from None
    if mode is not None and not stat.S_ISREG(mode):
        via = f" (a symlink to {target})" if target != given else ""
        raise PathError(
            f"{shown}{via}: is {kind_of(mode)}, not a regular file: it is never replaced; "
            "give the path of a file to write"
        )
    if mode is not None and not force:
        raise PathError(f"{os.fspath(path)} exists; pass --force to replace it, or {flag} another path")
    if not target.parent.is_dir():
        what = "is not a folder" if target.parent.exists() else "does not exist"
        raise PathError(f"{shown}: its folder {target.parent} {what}; create it first")
    try:
        _new_temp(target).unlink()
    except OSError as exc:
        raise PathError(
            f"{shown}: cannot write there ({os_reason(exc)}); give a path in a folder you can write"
        ) from None
    return target


@contextlib.contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A new temporary file beside ``path`` for the block to write (by name: a library that
    opens the path itself can); when the block ends without error it is flushed to the disk
    and renamed over ``path`` (which keeps its permissions); on any error it is removed.

    ``path`` should come from :func:`check_output`. An OSError (a full disk) is raised again
    naming ``path``, not the temporary file; a target that became something other than a
    regular file meanwhile is not replaced (an OSError says so)."""
    temp = _new_temp(path)
    try:
        yield temp
        _settle(temp, path)
    except OSError as exc:
        _remove(temp)
        raise OSError(exc.errno, exc.strerror or str(exc), os.fspath(path)) from exc
    except BaseException:
        _remove(temp)
        raise


def write_output(path: Path, data: str | bytes) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` whole or not at all (see :func:`replacing`)."""
    raw = data.encode() if isinstance(data, str) else data
    with replacing(path) as temp, open(temp, "wb") as f:
        f.write(raw)


def _new_temp(target: Path) -> Path:
    """Create an empty temporary file beside ``target`` (mode 0666 less the umask, as any new
    file) and return its path."""
    for _ in range(100):
        kept = os.fsdecode(os.fsencode(target.name)[:_NAME_KEPT])  # bytes: a name is at most 255 of them
        temp = target.with_name(f".{kept}.{secrets.token_hex(4)}{TEMP_SUFFIX}")
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        except FileExistsError:
            continue
        os.close(fd)
        return temp
    raise FileExistsError(errno.EEXIST, "no free temporary name", os.fspath(target))


def _settle(temp: Path, target: Path) -> None:
    fd = os.open(temp, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)  # the data is on the disk before the name points to it
    finally:
        os.close(fd)
    try:
        mode: int | None = target.stat().st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None:
        if not stat.S_ISREG(mode):  # swapped for a FIFO or a device while the work ran
            raise OSError(
                errno.EEXIST, f"it is now {kind_of(mode)}, which is never replaced", os.fspath(target)
            )
        os.chmod(temp, stat.S_IMODE(mode))
    os.replace(temp, target)


def _remove(temp: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        temp.unlink()
