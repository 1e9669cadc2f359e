"""The library runner: :func:`run` and :func:`run_async` (``edgepipe.run``) do what ``edgepipe run``
does, from Python (:mod:`edgepipe.runner.library`)."""

from __future__ import annotations

from edgepipe.runner.library import run, run_async, serving

__all__ = ["run", "run_async", "serving"]
