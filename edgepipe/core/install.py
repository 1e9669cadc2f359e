"""The command that installs an extra (or a package), worded for how edgepipe was installed.

Every "pip install" hint edgepipe prints comes from here, because the right command depends on
the install: ``pip install 'edgepipe[mqtt]'`` works for a wheel from an index, but from a
checkout there is no such distribution to find, and what works is the checkout's own project
with its pinned versions, run from the checkout, with the pip of the environment edgepipe runs
in: ``.venv/bin/pip install -c constraints.txt '.[mqtt]'``.

How edgepipe was installed (:func:`how_installed`):

- running from a source tree (an editable install, or the checkout on ``PYTHONPATH``): the
  package's folder sits next to a ``pyproject.toml`` naming edgepipe; the command keeps the
  install editable (``-e``), since a plain install would replace it with a copy;
- installed from a local folder (``pip install .``, the README's set-up, the Docker image): the
  distribution's ``direct_url.json`` (PEP 610) points at that folder (``dir_info``);
- anything else: a wheel from an index.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import sys
import tomllib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

PACKAGE_DIR = Path(__file__).resolve().parent.parent
"""The folder of the ``edgepipe`` package that is running."""

CONSTRAINTS = "constraints.txt"
"""The checkout's pinned versions, used where the checkout has them."""


@dataclass(frozen=True, slots=True)
class Install:
    """How edgepipe was installed: ``checkout`` is the source folder it was installed from (or
    runs from), None for a wheel from an index; ``editable`` when edits there take effect."""

    checkout: Path | None
    editable: bool = False


def _is_edgepipe_project(folder: Path) -> bool:
    try:
        project = tomllib.loads((folder / "pyproject.toml").read_text()).get("project", {})
    except (OSError, ValueError):
        return False
    return bool(project.get("name") == "edgepipe")


def _direct_url() -> dict[str, object] | None:
    """The installed distribution's ``direct_url.json`` (None: installed from an index, or not at all)."""
    try:
        text = metadata.distribution("edgepipe").read_text("direct_url.json")
        found = json.loads(text) if text else None
    except (metadata.PackageNotFoundError, OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def how_installed(package_dir: Path = PACKAGE_DIR) -> Install:
    """How the edgepipe in ``package_dir`` was installed (see the module's docstring)."""
    if _is_edgepipe_project(package_dir.parent):
        return Install(package_dir.parent, editable=True)
    found = _direct_url() or {}
    url = urlparse(str(found.get("url", "")))
    dir_info = found.get("dir_info")
    if url.scheme == "file" and isinstance(dir_info, dict):
        folder = Path(unquote(url.path))
        if _is_edgepipe_project(folder):
            return Install(folder, editable=bool(dir_info.get("editable", False)))
    return Install(None)


@functools.cache
def _this_install() -> Install:
    return how_installed()


def install_command(
    extra: str = "",
    *,
    package: str = "",
    upgrade: bool = False,
    install: Install | None = None,
    cwd: Path | None = None,
    prefix: str = sys.prefix,
    executable: str = sys.executable,
) -> str:
    """The shell command that installs edgepipe's ``extra`` (or the third-party ``package``)
    into the environment edgepipe runs in, for how it was installed (default: this process's).

    From a checkout: its project with its constraints, from its folder (``cd ROOT && `` when
    ``cwd`` is elsewhere), with the checkout's ``.venv/bin/pip`` when that is the running
    environment, else ``PYTHON -m pip`` of the running interpreter; a package by its name, with
    that pip (by its absolute path outside the checkout). From a wheel: ``pip install
    'edgepipe[extra]'``. ``upgrade`` adds ``-U`` (a release too old)."""
    if bool(extra) == bool(package):
        raise ValueError("name an extra or a package (one of them)")
    install = _this_install() if install is None else install
    flags = ["-U"] if upgrade else []
    if install.checkout is None:
        target = shlex.quote(f"edgepipe[{extra}]" if extra else package)
        return " ".join(["pip", "install", *flags, target])
    root = install.checkout
    here = (Path.cwd() if cwd is None else cwd).resolve() == root.resolve()
    # An extra is the checkout's project: run from there. A package is found anywhere.
    go = "" if here or package else f"cd {shlex.quote(str(root))} && "
    python = Path(executable)
    from_root = here or not package  # where the command runs: paths in the checkout are relative
    if Path(prefix).resolve() == (root / ".venv").resolve() and from_root:
        pip = [".venv/bin/pip"]
    elif python.is_relative_to(root) and from_root:
        pip = [shlex.quote(os.path.relpath(python, root)), "-m", "pip"]
    else:
        pip = [shlex.quote(executable), "-m", "pip"]
    words = [*pip, "install", *flags]
    if package:
        return " ".join([*words, shlex.quote(package)])
    if (root / CONSTRAINTS).is_file():
        words += ["-c", CONSTRAINTS]
    return go + " ".join([*words, *(["-e"] if install.editable else []), shlex.quote(f".[{extra}]")])


def missing(module: str, extra: str, what: str) -> str:
    """One line: ``what`` needs ``module`` (brought by ``extra``), and the command that installs it."""
    return f"{what} needs the {module!r} package, which is not installed: {install_command(extra)}"
