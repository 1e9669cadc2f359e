from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from scripts.refresh_constraints import RefreshError, header, render

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "refresh_constraints.py"

OLD = "# Exact versions.\n# Refresh: scripts/refresh_constraints.py\nav==14.0.0\nnumpy==1.26.0\n"
# What `pip freeze` prints after `pip install '.[dev]'` (not editable) and after `pip install -e .`
FREEZE = "av==18.1.0\nedgepipe @ file:///home/me/edgepipe\nnumpy==2.4.6\nPyYAML==6.0.4\n"
FREEZE_EDITABLE = (
    "av==18.1.0\n# Editable install with no version control (edgepipe==0.1.0)\n-e /home/me/edgepipe\n"
)


def test_the_header_is_kept_and_edgepipe_left_out() -> None:
    assert render(OLD, FREEZE) == (
        "# Exact versions.\n# Refresh: scripts/refresh_constraints.py\nav==18.1.0\nnumpy==2.4.6\nPyYAML==6.0.4\n"
    )
    assert render(OLD, FREEZE_EDITABLE).splitlines()[2:] == ["av==18.1.0"]


def test_the_project_header_is_what_the_refresh_keeps() -> None:
    kept = header((REPO / "constraints.txt").read_text())
    assert kept, "constraints.txt has no comment header to keep"
    assert any("refresh_constraints.py" in line for line in kept), "the header names another recipe"


def test_a_package_from_a_url_is_refused() -> None:
    with pytest.raises(
        RefreshError, match=r"'mylib @ https://example\.invalid/mylib\.whl': not installed from"
    ):
        render(OLD, "av==18.1.0\nmylib @ https://example.invalid/mylib.whl\n")
    with pytest.raises(RefreshError, match="lists no package"):
        render(OLD, "edgepipe @ file:///x\n")


@pytest.mark.slow
def test_the_script_rewrites_a_constraints_file_from_a_freeze(tmp_path: Path) -> None:
    constraints = tmp_path / "constraints.txt"
    constraints.write_text(OLD)
    freeze = tmp_path / "freeze.txt"
    freeze.write_text(FREEZE)
    done = subprocess.run([sys.executable, str(SCRIPT), "--freeze", str(freeze), "--output", str(constraints)],
                          capture_output=True, text=True, timeout=30)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "3 pins written" in done.stderr
    assert constraints.read_text().startswith(
        "# Exact versions.\n# Refresh: scripts/refresh_constraints.py\nav==18.1.0\n"
    )
    assert "edgepipe" not in constraints.read_text().split("\n", 2)[2]
    freeze.write_text("mylib @ https://example.invalid/mylib.whl\n")
    refused = subprocess.run([sys.executable, str(SCRIPT), "--freeze", str(freeze), "--output", str(constraints)],
                             capture_output=True, text=True, timeout=30)  # fmt: skip
    assert refused.returncode == 2
    assert constraints.read_text().endswith("av==18.1.0\nnumpy==2.4.6\nPyYAML==6.0.4\n")  # left as it was
