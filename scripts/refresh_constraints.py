#!/usr/bin/env python3
"""Write constraints.txt afresh: the newest release of every dependency of edgepipe and of all
its extras, exactly pinned, under the file's own comment header; edgepipe itself left out.

    python3 scripts/refresh_constraints.py                   # a fresh venv, pip install '.[all extras]'
    python3 scripts/refresh_constraints.py --freeze FILE     # from a `pip freeze` made elsewhere
    python3 scripts/refresh_constraints.py --output -        # print it instead

Without ``--freeze`` it installs into a throwaway virtual environment (with the Python that
runs it, so run it with the oldest Python edgepipe supports) from the package index pip is
configured for, and freezes that. Then run the tests and the benchmarks, and commit the file
with what changed. Standard library only.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROJECT = "edgepipe"


class RefreshError(Exception):
    """A freeze that cannot become a constraints file."""


def normalize(name: str) -> str:
    """PEP 503: ``Foo_bar.baz`` and ``foo-bar-baz`` are the same project."""
    return re.sub(r"[-_.]+", "-", name).lower()


def header(text: str) -> list[str]:
    """The comment lines the file opens with (kept as they are)."""
    lines: list[str] = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line)
    return lines


def pins(freeze: str, *, exclude: str = PROJECT) -> list[str]:
    """``name==version`` lines of a ``pip freeze``, in its order, without ``exclude`` (installed
    from the checkout: ``edgepipe @ file://...``, or editable: ``-e ...``)."""
    out: list[str] = []
    for raw in freeze.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or line.startswith("-e "):
            continue
        name = re.split(r"\s*(==|@)", line, maxsplit=1)[0]
        if normalize(name) == normalize(exclude):
            continue
        if "==" not in line or " @ " in line:
            raise RefreshError(f"{line!r}: not installed from the index (a constraint needs name==version)")
        out.append(line)
    if not out:
        raise RefreshError("the freeze lists no package")
    return out


def render(old: str, freeze: str) -> str:
    """The new file: ``old``'s header, then the freeze's pins."""
    return "\n".join([*header(old), *pins(freeze)]) + "\n"


def fresh_freeze(python: str) -> str:
    """Install the project with every extra into a throwaway venv; its ``pip freeze``."""
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"].get("optional-dependencies", {})
    target = f".[{','.join(extras)}]" if extras else "."
    with tempfile.TemporaryDirectory(prefix="edgepipe-refresh-") as tmp:
        subprocess.run([python, "-m", "venv", tmp], check=True)
        pip = [str(Path(tmp) / "bin" / "python"), "-m", "pip"]
        subprocess.run([*pip, "install", "--quiet", "--upgrade", "pip"], check=True)
        subprocess.run([*pip, "install", "--quiet", target], cwd=REPO, check=True)
        done = subprocess.run(
            [*pip, "freeze", "--exclude", PROJECT], check=True, capture_output=True, text=True
        )
    return done.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write constraints.txt afresh, its header kept.")
    parser.add_argument("--freeze", type=Path, help="a `pip freeze` output to use instead of a fresh venv")
    parser.add_argument("--output", default=str(REPO / "constraints.txt"),
                        help="the constraints file (its header is kept); - prints to stdout")  # fmt: skip
    parser.add_argument("--python", default=sys.executable, help="the Python of the fresh venv")
    args = parser.parse_args(argv)
    # The header comes from the file being replaced, else from the project's.
    old_path = (
        Path(args.output) if args.output != "-" and Path(args.output).exists() else REPO / "constraints.txt"
    )
    try:
        old = old_path.read_text()
        freeze = args.freeze.read_text() if args.freeze else fresh_freeze(args.python)
        new = render(old, freeze)
    except (OSError, RefreshError, subprocess.CalledProcessError) as exc:
        print(f"refresh_constraints: {exc}", file=sys.stderr)
        return 1 if isinstance(exc, subprocess.CalledProcessError) else 2
    if args.output == "-":
        sys.stdout.write(new)
    else:
        Path(args.output).write_text(new)
        print(f"refresh_constraints: {len(pins(freeze))} pins written to {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
