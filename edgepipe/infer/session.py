"""ONNX Runtime sessions: providers with fallback, sized threads, a cached optimized model,
quiet logs, and a deadline on every run.

``Session(path, config)`` loads (blocking: call it from a worker thread or a node's ``start()``,
never on the event loop) and ``session.run(feeds)`` runs (blocking, thread-safe: ONNX Runtime
allows concurrent runs of one session). Every run is counted in :attr:`Session.stats`.

Loading lives in :mod:`edgepipe.infer.loading`, runs under their deadline in
:mod:`edgepipe.infer.running`, the input and output specs in :mod:`edgepipe.infer.spec`.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgepipe.core.threadname import named
from edgepipe.infer import providers
from edgepipe.infer.config import SessionConfig
from edgepipe.infer.errors import ModelNotFound
from edgepipe.infer.footprint import device_label, weights_bytes
from edgepipe.infer.loading import load_session
from edgepipe.infer.running import GuardedRuns, SessionStats
from edgepipe.infer.spec import TensorSpec, spec_of
from edgepipe.planning.memory import memory_plan
from edgepipe.sched.budget import cpu_budget
from edgepipe.sched.gate import Ticket
from edgepipe.sched.ledger import ticket_tag

__all__ = ["Session", "SessionConfig", "SessionStats", "TensorSpec"]

log = logging.getLogger(__name__)


class Session:
    """One loaded model. Blocking; thread-safe runs."""

    def __init__(self, model: str | os.PathLike[str], config: SessionConfig | None = None, *,
                 name: str | None = None, owner: str = "") -> None:  # fmt: skip
        """``owner`` names who holds the weights in the memory plan (a node id; the model's
        name by default)."""
        self.config = config or SessionConfig()
        self.path = Path(model)
        self.name = name or self.path.name
        self.stats = SessionStats()
        t_start = time.perf_counter()
        if not self.path.is_file():
            raise ModelNotFound(
                "no such file; pass a path to an .onnx file or a registry name (edgepipe models list)",
                model=str(self.path),
            )
        budget = cpu_budget()
        self.threads = self.config.threads or budget.threads
        # Its runs are its owner's from the first (the warm-up's CPU is the node's).
        self.ticket = Ticket(owner or self.name, "model", 1, units=max(1, min(self.threads, budget.units)))
        """How this model's runs are admitted to the CPU budget; the node that runs it names
        itself with ``ticket.set_owner(node_id, kind, priority)``."""
        # ONNX Runtime's intra-op threads start as the session is built: named after this tag,
        # the CPU ledger counts them as the owner's model runs (or token steps).
        self._threads_tag = ticket_tag(self.ticket)
        with named(self._threads_tag):
            # Held by the guarded runs alone, so that close() lets it go.
            session, self.optimized_path = load_session(
                self.path, self.config, name=self.name, threads=self.threads
            )
        self.providers: list[str] = list(session.get_providers())
        self._provider_options: dict[str, Any] = session.get_provider_options()
        self.inputs = [spec_of(i) for i in session.get_inputs()]
        self.outputs = [spec_of(o) for o in session.get_outputs()]
        self.output_names = [o.name for o in self.outputs]
        self._runs = GuardedRuns(
            session, self.stats, name=self.name, inputs=self.inputs, t_start=t_start,
            ticket=self.ticket,
        )  # fmt: skip
        # The weights, as the plan (``--plan``) estimates them: the file and its external data.
        self._reservation = memory_plan().reserve(
            owner or self.name, f"model weights ({self.path.name})", weights_bytes(self.path),
            holder=self, device=device_label(self.device), hint="use a smaller model",
        )  # fmt: skip
        self.stats.load_ms = (time.perf_counter() - t_start) * 1000
        log.info(
            "model %s: loaded in %.0f ms on %s, %d thread%s%s%s", self.name, self.stats.load_ms,
            self.providers[0], self.threads, "" if self.threads == 1 else "s",
            ", spinning" if self.config.spinning else "",
            " (cached optimized graph)" if self.optimized_path else "",
        )  # fmt: skip

    def close(self) -> None:
        """Let the model go: ONNX Runtime's session is dropped (freed once a run still under way
        on another thread returns) and the weights leave the memory plan. Later runs raise
        :class:`InferError`. Again is harmless."""
        self._runs.session = None
        self._reservation.release()

    @property
    def closed(self) -> bool:
        return self._runs.session is None

    @property
    def thread_run_ms(self) -> float:
        """How long the calling thread's last successful run took, in milliseconds (0 before
        any): runs on several threads at once each read their own (``stats.last_run_ms`` is
        whichever ended last)."""
        return self._runs.thread_run_ms

    def input(self, index: int = 0) -> TensorSpec:
        return self.inputs[index]

    def run(self, feeds: Mapping[str, np.ndarray], output_names: Sequence[str] | None = None,
            timeout_s: float | None = None) -> list[np.ndarray]:  # fmt: skip
        """Run the model on ``feeds``. Blocks the calling thread for the run.

        ``timeout_s`` (default: the config's) is enforced by terminating the run at the next
        operator boundary. Raises :class:`InferTimeout`, :class:`ModelInputError` (a feed that
        does not fit the model; never retried), or :class:`InferError` for a failure of the run.
        """
        deadline = self.config.timeout_s if timeout_s is None else timeout_s
        names = list(output_names) if output_names is not None else self.output_names
        return self._runs.run(feeds, names, deadline, self.config.retries)

    @property
    def device(self) -> tuple[str, int]:
        """``(device_type, device_id)`` of the first provider's memory, as IO binding names it:
        where a buffer bound run after run should live (see :func:`providers.memory_device`)."""
        first = self.providers[0]
        return providers.memory_device(first, self._provider_options.get(first))

    def io_binding(self) -> Any:
        """An ONNX Runtime ``IOBinding`` for :meth:`run_bound` (inputs and outputs bound to
        buffers the caller owns and reuses)."""
        return self._runs.live().io_binding()

    def run_bound(self, binding: Any, timeout_s: float | None = None) -> None:
        """Run with inputs and outputs bound (``io_binding()``): nothing is copied in or
        allocated for outputs bound to buffers. Same deadline, counting and errors as
        :meth:`run`, never retried (a terminated run may have written part of its outputs)."""
        deadline = self.config.timeout_s if timeout_s is None else timeout_s
        self._runs.run_bound(binding, deadline)
