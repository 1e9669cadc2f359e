"""Where models and optimized models are kept: ``$EDGEPIPE_CACHE_DIR``, else the XDG cache."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``$EDGEPIPE_CACHE_DIR``, or ``$XDG_CACHE_HOME/edgepipe``, or ``~/.cache/edgepipe``.

    Not created here: callers create the subfolder they write to.
    """
    explicit = os.environ.get("EDGEPIPE_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "edgepipe"
