#!/usr/bin/env python3
"""The requirements a container image installs: pyproject.toml's dependencies, each pinned to
constraints.txt's version.

The Dockerfile runs it with only these two files copied in, before the code, so that a code
change does not reinstall the dependencies (the layer stays cached until a pin changes):

    python scripts/image_requirements.py > requirements.txt
    python scripts/image_requirements.py --extras lm --flavor nvidia \
        --pin onnxruntime-gpu==1.31.1 > requirements.txt

A dependency without a pin is an error: an image must not float. ``--flavor nvidia`` installs
``onnxruntime-gpu`` in place of ``onnxruntime``, at its own pin: PyPI's onnxruntime-gpu releases
do not follow onnxruntime's one for one (onnxruntime 1.32.0 has no onnxruntime-gpu 1.32.0), and
the version must match the CUDA of the image's base, so the Dockerfile passes it with ``--pin``
(``--pin`` overrides or adds to constraints.txt's pins). Standard library only: it runs on the
bare base image.
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path

FLAVORS = {"cpu": {}, "nvidia": {"onnxruntime": "onnxruntime-gpu"}}
"""For each image flavor, the packages it installs under another name."""

_REQUIREMENT = re.compile(
    r"^\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?P<extras>\[[^\]]*\])?[^;]*(?P<marker>;.*)?$"
)


class RequirementsError(Exception):
    """pyproject.toml and constraints.txt do not make a pinned list."""


def normalize(name: str) -> str:
    """PEP 503: ``Foo_bar.baz`` and ``foo-bar-baz`` are the same project."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(text: str, *, source: str = "constraints.txt") -> dict[str, str]:
    """constraints.txt's ``name==version`` lines by normalized name (comments skipped)."""
    pins: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        if not sep or not name.strip() or not version.strip():
            raise RequirementsError(f"{source}: {line!r} is not name==version")
        pins[normalize(name.strip())] = version.strip()
    return pins


def requirements(pyproject: dict[str, object], pins: dict[str, str], *, extras: list[str],
                 flavor: str = "cpu") -> list[str]:  # fmt: skip
    """``name[extras]==version ; marker`` for each dependency of the project and ``extras``."""
    project = pyproject["project"]
    assert isinstance(project, dict)
    optional: dict[str, list[str]] = project.get("optional-dependencies", {})
    unknown = [extra for extra in extras if extra not in optional]
    if unknown:
        raise RequirementsError(
            f"no extra {', '.join(unknown)} in pyproject.toml (it has: {', '.join(optional)})"
        )
    if flavor not in FLAVORS:
        raise RequirementsError(f"no flavor {flavor!r} (choose from: {', '.join(FLAVORS)})")
    wanted = list(project.get("dependencies", []))
    for extra in extras:
        wanted += optional[extra]
    renames = FLAVORS[flavor]
    lines: list[str] = []
    for requirement in wanted:
        match = _REQUIREMENT.match(requirement)
        if match is None:
            raise RequirementsError(f"pyproject.toml: cannot read the requirement {requirement!r}")
        name = match["name"]
        version = pins.get(normalize(name))
        if version is None:
            raise RequirementsError(
                f"{name} has no pin in constraints.txt: refresh it (CONTRIBUTING.md, 'Pinned versions')"
            )
        installed = renames.get(normalize(name), name)
        if installed != name:
            version = pins.get(normalize(installed))
            if version is None:
                raise RequirementsError(
                    f"{installed} (the {flavor} flavor's {name}) has no pin: pass --pin {installed}==VERSION"
                )
        line = f"{installed}{match['extras'] or ''}=={version}"
        if match["marker"]:
            line += f" {match['marker'].strip()}"
        if line not in lines:
            lines.append(line)
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--pyproject", type=Path, default=Path("pyproject.toml"))
    parser.add_argument("--constraints", type=Path, default=Path("constraints.txt"))
    parser.add_argument(
        "--extras", default="", help="comma-separated extras of the project to include (e.g. lm)"
    )
    parser.add_argument("--flavor", default="cpu", choices=list(FLAVORS), help="the image's flavor")
    parser.add_argument(
        "--pin", action="append", default=[], metavar="NAME==VERSION",
        help="a pin that overrides or adds to constraints.txt's (repeatable), e.g. onnxruntime-gpu==1.31.1",
    )  # fmt: skip
    args = parser.parse_args(argv)
    extras = [extra.strip() for extra in args.extras.split(",") if extra.strip()]
    try:
        pyproject = tomllib.loads(args.pyproject.read_text())
        pins = read_pins(args.constraints.read_text())
        pins.update(read_pins("\n".join(args.pin), source="--pin"))
        lines = requirements(pyproject, pins, extras=extras, flavor=args.flavor)
    except (OSError, tomllib.TOMLDecodeError, RequirementsError) as exc:
        print(f"image_requirements: {exc}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
