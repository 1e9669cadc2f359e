"""The one runner: :func:`run` and :func:`run_async` (``edgepipe.run``) do what ``edgepipe run``
does, from Python, as their :class:`RunConfig` say (:mod:`edgepipe.runner.library`)."""

from __future__ import annotations

from edgepipe.runner.config import RunConfig
from edgepipe.runner.library import run, run_async, serving

__all__ = ["RunConfig", "run", "run_async", "serving"]
