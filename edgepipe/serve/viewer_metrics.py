"""``GET /metrics`` for the viewers: how many watch, what the shared encoders did, what was lost.

Families (prefixed ``edgepipe_webrtc_``): ``viewers`` and ``viewer_limit``;
``encodes_total``, ``encode_skipped_total`` (the CPU budget did not admit the frame in time)
and ``viewer_lags_total`` (a viewer fell behind and was flushed to the next keyframe), each by
``source`` and ``codec``; ``messages_sent_total`` and ``messages_dropped_total`` on the data
channels; ``viewer_messages_total`` (``outcome``: keyframe, ignored, dropped) for what viewers
sent (:mod:`~edgepipe.serve.inbound`). Read at scrape time from the streams, like the
snapshot's families.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from edgepipe.serve.webrtc_stream import WebRTCStream
from edgepipe.wire.redact import redact_text

P = "edgepipe_webrtc_"


class StreamCollector(Collector):
    """The figures of a pipeline's :class:`WebRTCStream` outputs (see the module docstring)."""

    def __init__(self, streams: list[WebRTCStream]) -> None:
        self._streams = streams

    def collect(self) -> Iterator[Metric]:
        if not self._streams:
            return
        viewers = [s.viewers for s in self._streams]
        yield GaugeMetricFamily(
            P + "viewers", "Viewers connected now.", value=sum(len(v.viewers) for v in viewers)
        )
        yield GaugeMetricFamily(
            P + "viewer_limit", "Viewers allowed at once.", value=sum(v.limit for v in viewers)
        )
        labels = ["source", "codec"]
        encodes = CounterMetricFamily(P + "encodes", "Frames encoded (once for every viewer).", labels=labels)
        skipped = CounterMetricFamily(
            P + "encode_skipped",
            "Frames not encoded: the CPU budget did not admit them in time.",
            labels=labels,
        )
        lags = CounterMetricFamily(
            P + "viewer_lags",
            "Times a viewer fell behind and was flushed to the next keyframe.",
            labels=labels,
        )
        for v in viewers:
            for codec, encoders in (("h264", v.encoders), ("vp8", v.fallback)):
                for source_id, encoder in encoders.items():
                    values = [redact_text(source_id), codec]
                    encodes.add_metric(values, encoder.encodes)
                    skipped.add_metric(values, encoder.skipped)
                    lags.add_metric(values, encoder.lagged)
        yield from (encodes, skipped, lags)
        yield CounterMetricFamily(
            P + "messages_sent",
            "Data-channel messages sent to viewers.",
            value=sum(v.messages_sent for v in viewers),
        )
        yield CounterMetricFamily(
            P + "messages_dropped",
            "Data-channel messages a viewer did not get: its channel was full or not open yet.",
            value=sum(v.messages_dropped for v in viewers),
        )
        inbound = CounterMetricFamily(
            P + "viewer_messages",
            "Messages viewers sent: keyframe requests passed on or ignored (too soon), or dropped.",
            labels=["outcome"],
        )
        for outcome in ("keyframe", "ignored", "dropped"):
            inbound.add_metric([outcome], sum(v.inbound()[outcome] for v in viewers))
        yield inbound
