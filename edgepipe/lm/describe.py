"""The ``Describe`` node: a window of detections -> a prompt -> text, streamed as results.

::

    p.stage("describe", Describe(model, template="Seen in the last {seconds:.0f} s: {summary}. "
                                                 "In one sentence, the scene:"),
            inputs=faces, policy="latest", queue_size=4)

It takes :class:`~edgepipe.vision.Detections` (and any other items: they are counted by kind).
Every ``every_s`` seconds it renders the template over the last ``window_s`` seconds and
streams the model's answer: one ``Message("token", {...})`` per text piece and a final
``Message("event", {...})`` with the whole text and the request's timings. Declare it with a
``latest`` inbox: while it writes, new detections replace old ones instead of holding back the
detector. The template may use ``{seconds}``, ``{summary}``, ``{frames}``, ``{counts}`` and
``{sources}``.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from edgepipe.core.context import current_node
from edgepipe.core.results import Message
from edgepipe.infer.session import SessionConfig
from edgepipe.lm.sampling import SamplingParams
from edgepipe.lm.worker import LMWorker

DEFAULT_TEMPLATE = "Camera report for the last {seconds:.0f} seconds: {summary}.\nDescription:"


class Describe:
    """A stream stage that writes about what the detectors saw."""

    def __init__(
        self,
        model: str | Path,
        *,
        template: str = DEFAULT_TEMPLATE,
        window_s: float = 10.0,
        every_s: float = 10.0,
        params: SamplingParams | None = None,
        max_seq_len: int | None = None,
        session: SessionConfig | None = None,
    ) -> None:
        self.template = template
        self.window_s = window_s
        self.every_s = every_s
        self.params = params or SamplingParams(max_new_tokens=48)
        self.worker = LMWorker(model, max_seq_len=max_seq_len, session=session)
        self._seen: deque[tuple[float, str, Counter[str], bool]] = deque(maxlen=10_000)
        self._next_t = 0.0
        self.requests = 0
        try:  # fail on a bad template now, not ten seconds into the run
            self.template.format(seconds=1.0, summary="", frames=0, counts={}, sources="")
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(
                f"template: {exc!r}; it may use seconds, summary, frames, counts, sources"
            ) from exc

    async def start(self) -> None:
        await self.worker.start()
        try:
            gauges = current_node().gauges
        except RuntimeError:
            return
        gauges["model"] = self.worker.model.name

    def stop(self) -> None:
        self.worker.close()

    def observe(self, item: Any, now: float | None = None) -> None:
        """Add an item to the window (what ``process`` does with each input): a frame's
        detections count by label; any other item by its kind."""
        t = time.monotonic() if now is None else now
        items = getattr(item, "items", None)
        source = str(getattr(item, "source_id", "") or "")
        if isinstance(items, list):
            labels = Counter(str(getattr(det, "label", "object")) for det in items)
            self._seen.append((t, source, labels, True))
        else:
            self._seen.append(
                (t, source, Counter({str(getattr(item, "kind", type(item).__name__)): 1}), False)
            )

    def prompt(self, now: float | None = None) -> str:
        """The template rendered over the window ending ``now``."""
        t = time.monotonic() if now is None else now
        recent = [entry for entry in self._seen if t - entry[0] <= self.window_s]
        frames = sum(1 for entry in recent if entry[3])
        in_frames: Counter[str] = Counter()
        most: dict[str, int] = {}
        for _, _, labels, _ in recent:
            for label, n in labels.items():
                in_frames[label] += 1
                most[label] = max(most.get(label, 0), n)
        sources = sorted({entry[1] for entry in recent if entry[1]})
        if in_frames:
            summary = ", ".join(
                f"{label} in {seen} of {frames} frames (up to {most[label]} at once)"
                if frames
                else f"{seen} {label}"
                for label, seen in in_frames.most_common()
            )
        else:
            summary = (
                f"nothing detected in {frames} frame{'' if frames == 1 else 's'}" if frames else "no input"
            )
        fields = {"seconds": self.window_s, "summary": summary, "frames": frames, "counts": dict(in_frames)}
        return self.template.format(**fields, sources=", ".join(sources))

    async def process(self, items: AsyncIterator[Any]) -> AsyncIterator[Message]:
        async for item in items:
            now = time.monotonic()
            self.observe(item, now)
            if now < self._next_t:
                continue
            self._next_t = now + self.every_s
            prompt = self.prompt(now)
            self.requests += 1
            request = self.requests
            pieces: list[str] = []
            async for piece in self.worker.generate(prompt, self.params, overflow="stop"):
                pieces.append(piece)
                yield Message("token", {"request": request, "text": piece})
            stats = self.worker.last_stats
            yield Message("event", {"what": "description", "request": request, "text": "".join(pieces),
                                    "prompt": prompt, **stats.to_dict()})  # fmt: skip
