"""The headroom: the share of each resource a run leaves to the rest of the machine.

One number for every resource, so that the cores and the memory are planned alike: the CPU
budget's target (:mod:`edgepipe.sched.budget`), a pipeline's default (``Pipeline(headroom=...)``),
the memory plan's budget (:mod:`edgepipe.planning.memory`) and a device's capacity plan
(``edgepipe plan``) all read :data:`HEADROOM`.
"""

from __future__ import annotations

HEADROOM = 0.3
"""The share kept free: the kernel, other services, a burst of decode work. A governed run keeps
its CPU use under ``1 - HEADROOM`` of the usable cores (a pipeline's own ``headroom``, or
``--headroom``, replaces it), and the memory plan refuses a buffer past ``1 - HEADROOM`` of the
memory this process may use (``EDGEPIPE_MEMORY_FRAC`` replaces that)."""
