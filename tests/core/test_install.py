from __future__ import annotations

import ast
import json
import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from edgepipe.core import install
from edgepipe.core.install import Install, how_installed, install_command

REPO = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
EXTRAS: dict[str, list[str]] = PROJECT["project"]["optional-dependencies"]
PINS = dict(
    line.split("==", 1)
    for line in (REPO / "constraints.txt").read_text().splitlines()
    if line and not line.startswith("#")
)


class _Distribution:
    def __init__(self, direct_url: dict[str, object] | None) -> None:
        self.text = None if direct_url is None else json.dumps(direct_url)

    def read_text(self, name: str) -> str | None:
        assert name == "direct_url.json"
        return self.text


def _installed(monkeypatch: pytest.MonkeyPatch, direct_url: dict[str, object] | None) -> None:
    monkeypatch.setattr(metadata, "distribution", lambda name: _Distribution(direct_url))


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "my edgepipe"  # a space: the command quotes the folder
    root.mkdir()
    (root / "pyproject.toml").write_text('[project]\nname = "edgepipe"\n')
    (root / "constraints.txt").write_text("aiomqtt==2.5.1\n")
    return root


def _site_packages(tmp_path: Path) -> Path:
    return tmp_path / "lib" / "python3.11" / "site-packages" / "edgepipe"


def test_a_wheel_from_an_index_is_told_the_distribution_with_its_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _installed(monkeypatch, None)
    found = how_installed(_site_packages(tmp_path))
    assert found == Install(None)
    assert install_command("mqtt", install=found) == "pip install 'edgepipe[mqtt]'"
    assert install_command("lm", upgrade=True, install=found) == "pip install -U 'edgepipe[lm]'"
    assert install_command(package="nvidia-ml-py", install=found) == "pip install nvidia-ml-py"
    # A wheel given by its path (archive_info) is no checkout either
    _installed(monkeypatch, {"url": f"file://{tmp_path}/edgepipe-0.1.0-py3-none-any.whl", "archive_info": {}})
    assert how_installed(_site_packages(tmp_path)) == Install(None)


def test_pip_install_of_the_checkout_is_told_the_checkouts_project_with_its_constraints(
    tmp_path: Path, checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _installed(monkeypatch, {"url": checkout.as_uri(), "dir_info": {}})  # `pip install .`, the README's
    found = how_installed(_site_packages(tmp_path))
    assert found == Install(checkout, editable=False)
    venv = checkout / ".venv"
    in_venv = {"install": found, "prefix": str(venv), "executable": str(venv / "bin" / "python")}
    assert (
        install_command("mqtt", cwd=checkout, **in_venv)
        == ".venv/bin/pip install -c constraints.txt '.[mqtt]'"
    )
    assert install_command("mqtt", cwd=tmp_path, **in_venv) == (
        f"cd '{checkout}' && .venv/bin/pip install -c constraints.txt '.[mqtt]'"
    )
    # Another interpreter (a venv elsewhere, the Docker image's): its own pip, by its path
    other = {"install": found, "prefix": "/opt/venv", "executable": "/opt/venv/bin/python"}
    assert install_command("deploy", cwd=checkout, **other) == (
        "/opt/venv/bin/python -m pip install -c constraints.txt '.[deploy]'"
    )
    assert install_command(package="nvidia-ml-py", cwd=checkout, **other) == (
        "/opt/venv/bin/python -m pip install nvidia-ml-py"
    )
    # A package is found from anywhere: no `cd`, the pip by its absolute path outside the checkout
    assert (
        install_command(package="nvidia-ml-py", cwd=checkout, **in_venv)
        == ".venv/bin/pip install nvidia-ml-py"
    )
    assert install_command(package="nvidia-ml-py", cwd=tmp_path, **in_venv) == (
        f"'{venv}/bin/python' -m pip install nvidia-ml-py"
    )
    (checkout / "constraints.txt").unlink()  # a folder without pins: none named
    assert install_command("mqtt", cwd=checkout, **in_venv) == ".venv/bin/pip install '.[mqtt]'"


def test_an_editable_install_or_the_source_tree_stays_editable(
    tmp_path: Path, checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _installed(monkeypatch, {"url": checkout.as_uri(), "dir_info": {"editable": True}})
    assert how_installed(_site_packages(tmp_path)) == Install(checkout, editable=True)
    _installed(monkeypatch, None)  # not installed at all: the checkout on PYTHONPATH
    found = how_installed(checkout / "edgepipe")
    assert found == Install(checkout, editable=True)
    python = checkout / "venv" / "bin" / "python"  # a venv of another name inside the checkout
    assert (
        install_command(
            "lm",
            upgrade=True,
            install=found,
            cwd=checkout,
            prefix=str(python.parent.parent),
            executable=str(python),
        )
        == "venv/bin/python -m pip install -U -c constraints.txt -e '.[lm]'"
    )


def test_a_folder_that_is_not_edgepipes_project_is_no_checkout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "pyproject.toml").write_text('[project]\nname = "something-else"\n')
    _installed(monkeypatch, {"url": other.as_uri(), "dir_info": {}})
    assert how_installed(other / "edgepipe") == Install(None)
    with pytest.raises(ValueError, match="one of them"):
        install_command("mqtt", package="aiomqtt")


def test_these_tests_run_edgepipe_from_its_checkout() -> None:
    assert how_installed() == Install(REPO, editable=True)
    assert install_command("mqtt", cwd=REPO).endswith(" install -c constraints.txt -e '.[mqtt]'")


def _hints() -> list[tuple[str, str, str]]:
    """(where, module or '', extra) of every hint edgepipe and its scripts can print: the calls
    ``missing(module, extra, what)``, ``require(module, extra, what)`` and ``install_command(extra)``
    (a call that only passes its own parameters on, as ``require`` does to ``missing``, is left out)."""
    found = []
    for path in sorted([*(REPO / "edgepipe").rglob("*.py"), *(REPO / "scripts").rglob("*.py")]):
        text = path.read_text()
        if path.name == "install.py" or not ("edgepipe.core.install import" in text or "require(" in text):
            continue
        for node in ast.walk(ast.parse(text)):
            name = getattr(getattr(node, "func", None), "id", "")
            if not isinstance(node, ast.Call) or name not in ("missing", "require", "install_command"):
                continue
            if node.args and all(isinstance(a, ast.Name) for a in node.args):
                continue  # passed on
            args = [a.value if isinstance(a, ast.Constant) else "" for a in node.args]
            where = f"{path.relative_to(REPO)}:{node.lineno}"
            if name == "install_command":
                if args:  # else a package=, not an extra
                    assert args[0], f"{where}: name the extra as a literal"
                    found.append((where, "", args[0]))
                continue
            assert args[1], f"{where}: name the extra as a literal"
            found.append((where, args[0], args[1]))  # a script's module is the one it found missing
    return found


def test_every_hint_names_an_extra_that_brings_the_module_pinned_for_a_checkout() -> None:
    hints = _hints()
    assert {extra for _, _, extra in hints} >= {"mqtt", "deploy", "lm", "dev"}, hints
    providers = metadata.packages_distributions()  # the suite's venv has every extra installed
    for where, module, extra in hints:
        assert extra in EXTRAS, f"{where}: no extra {extra!r} in pyproject.toml"
        requirements = [Requirement(r) for r in EXTRAS[extra]]
        names = {canonicalize_name(r.name) for r in requirements}
        if module:
            brought = {canonicalize_name(d) for d in providers.get(module.partition(".")[0], [])}
            assert brought & names, f"{where}: the {extra} extra does not bring {module!r} ({brought})"
        # From a checkout the command pins every package of the extra: each pin meets the extra
        for r in requirements:
            pin = next(
                (v for k, v in PINS.items() if canonicalize_name(k) == canonicalize_name(r.name)), None
            )
            assert pin is not None, f"{where}: {r.name} has no pin in constraints.txt"
            assert r.specifier.contains(pin), f"{where}: {r} pinned at {pin} in constraints.txt"


def test_the_message_is_one_line_naming_what_needs_it_and_the_command() -> None:
    line = install.missing("aiomqtt", "mqtt", "the MQTT sink")
    assert re.fullmatch(
        r"the MQTT sink needs the 'aiomqtt' package, which is not installed: \S.*'\.\[mqtt\]'", line
    )
