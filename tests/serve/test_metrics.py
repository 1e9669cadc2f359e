from __future__ import annotations

from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from edgepipe.core.channel import ChannelStats
from edgepipe.core.metrics import NodeStats
from edgepipe.core.runtime import Snapshot
from edgepipe.serve.metrics import registry_for

SCHED = {
    "cores": 4, "target": 0.7, "target_now": 0.7, "cpu": 0.42, "temp_c": None, "level": 1, "rungs": 3,
    "ups": 2, "downs": 1, "heavy_busy_s": {"detect": 1.5, "lm": 0.5}, "overlap_s": 0.25,
    "detect_lm_overlap_s": 0.1, "waits": 3, "waited_s": 0.05, "resources": {"cpu": 0.3},
}  # fmt: skip


def _snapshot(sched: dict | None) -> Snapshot:
    node = NodeStats("rtsp://u:secret@cam", "source", 0, 7, 1, 0, 0, 1.0, 2.0, 3.0, 0.5, 0.1, 0.0, "running",
                     {"source": "live", "decoded": 9, "decoder": "h264 (software)"})  # fmt: skip
    lane = ChannelStats("cam", "det", "latest", 1, 0, 1, 7, 6, 1, shed=2, aged=3)
    return Snapshot(t_s=2.0, nodes=(node,), channels=(lane,), sched=sched)


def _families(sched: dict | None) -> dict:
    text = generate_latest(registry_for(lambda: _snapshot(sched))).decode()
    assert "secret" not in text
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_the_schedulers_figures_are_exported_when_there_is_one() -> None:
    families = _families(SCHED)
    assert families["edgepipe_sched_cpu_ratio"].samples[0].value == 0.42
    assert families["edgepipe_sched_governor_ups"].samples[0].value == 2
    assert {s.labels["kind"]: s.value for s in families["edgepipe_sched_heavy_busy_seconds"].samples} == {
        "detect": 1.5,
        "lm": 0.5,
    }
    assert "edgepipe_sched_temperature_celsius" not in families  # none measured here
    assert not any(name.startswith("edgepipe_sched") for name in _families(None))


def test_lanes_gauges_and_latency_are_exported() -> None:
    families = _families(None)
    lost = {s.labels["reason"]: s.value for s in families["edgepipe_lane_lost"].samples}
    assert lost == {"dropped": 1, "shed": 2, "aged": 3}
    gauges = {s.labels["name"]: s.value for s in families["edgepipe_node_gauge"].samples}
    assert gauges == {"decoded": 9}  # text gauges other than the source state are not numbers
    latency = {s.labels["quantile"]: s.value for s in families["edgepipe_node_latency_seconds"].samples}
    assert latency == {"0.5": 0.001, "0.95": 0.002, "0.99": 0.003}
    assert families["edgepipe_node_items_out"].samples[0].labels["node"] == "rtsp://u:***@cam"
