"""Running a script as if one of its packages were not installed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def run_without(module: str, script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``script args`` in a child Python where importing ``module`` fails (``sys.modules[module]
    = None``), with ``scripts/`` on its path as when it is run from the checkout."""
    argv = [str(script), *args]
    code = (
        f"import runpy, sys; sys.modules[{module!r}] = None; sys.argv = {argv!r}; "
        f"sys.path.insert(0, {str(script.parent)!r}); runpy.run_path(sys.argv[0], run_name='__main__')"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
