"""``python -m edgepipe``: the same as the ``edgepipe`` command."""

from __future__ import annotations

from edgepipe.cli.main import entry

entry()
