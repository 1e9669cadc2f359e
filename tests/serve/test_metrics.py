from __future__ import annotations

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from edgepipe.core.channel import ChannelStats
from edgepipe.runtime.engine import Snapshot
from edgepipe.runtime.metrics import NodeStats
from edgepipe.serve.metrics import MetricsText, SnapshotCache, registry_for

SCHED = {
    "cores": 4, "target": 0.7, "target_now": 0.7, "cpu": 0.42, "temp_c": None, "level": 1, "rungs": 3,
    "ups": 2, "downs": 1, "heavy_busy_s": {"detect": 1.5, "lm": 0.5}, "overlap_s": 0.25,
    "detect_lm_overlap_s": 0.1, "waits": 3, "waited_s": 0.05, "resources": {"cpu": 0.3},
    "cpu_ledger": {
        "elapsed_s": 10.0, "window_s": 1.0, "process_s": 9.5, "process_cores": 0.9,
        "kinds_s": {"decode": 3.0, "pre": 0.5, "model": 5.0, "runtime": 0.6, "overhead": 0.4},
        "kinds_cores": {"decode": 0.3, "pre": 0.05, "model": 0.45, "runtime": 0.06, "overhead": 0.04},
        "nodes": {
            "rtsp://u:secret@cam": {"kinds_s": {"decode": 3.0}, "kinds_cores": {"decode": 0.3},
                                    "cpu_ms_per_item": 4.0, "wall_ms_per_item": None},
            "det": {"kinds_s": {"pre": 0.5, "model": 5.0}, "kinds_cores": {"pre": 0.05, "model": 0.45},
                    "cpu_ms_per_item": 60.0, "wall_ms_per_item": 120.0},
        },
    },
}  # fmt: skip


def _snapshot(sched: dict | None) -> Snapshot:
    node = NodeStats("rtsp://u:secret@cam", "source", 0, 7, 1, 0, 0, 1.0, 2.0, 3.0, 0.5, 0.1, 0.0, "running",
                     {"source": "live", "decoded": 9, "decoder": "h264 (software)"})  # fmt: skip
    det = NodeStats("det", "stage", 6, 6, 0, 0, 0, 1.0, 2.0, 3.0, 0.5, 1.2, 0.0, "running", {},
                    in_flight=2, instances=2)  # fmt: skip
    lane = ChannelStats("cam", "det", "latest", 1, 0, 1, 7, 6, 1, shed=2, aged=3)
    return Snapshot(t_s=2.0, nodes=(node, det), channels=(lane,), sched=sched)


def test_the_calls_in_flight_of_stages_and_sinks_are_exported() -> None:
    families = _families(None)
    assert {s.labels["node"]: s.value for s in families["edgepipe_node_calls_in_flight"].samples} == {
        "det": 2
    }
    assert {s.labels["node"]: s.value for s in families["edgepipe_node_instances"].samples} == {"det": 2}


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
    # The CPU ledger: seconds by node and kind, adding up to the process's; cores by kind; CPU
    # next to wall time per item.
    seconds = {(s.labels["node"], s.labels["kind"]): s.value for s in families["edgepipe_cpu_seconds"].samples
               if s.name.endswith("_total")}  # fmt: skip
    assert seconds == pytest.approx({("rtsp://u:***@cam", "decode"): 3.0, ("det", "pre"): 0.5, ("det", "model"): 5.0,
                                     ("", "runtime"): 0.6, ("", "overhead"): 0.4})  # fmt: skip
    assert sum(seconds.values()) == pytest.approx(families["edgepipe_cpu_process_seconds"].samples[0].value)
    assert {s.labels["kind"]: s.value for s in families["edgepipe_cpu_cores"].samples}["model"] == 0.45
    per_item = {f: {s.labels["node"]: s.value for s in families[f].samples}
                for f in ("edgepipe_node_cpu_seconds_per_item", "edgepipe_node_wall_seconds_per_item")}  # fmt: skip
    assert per_item["edgepipe_node_cpu_seconds_per_item"] == pytest.approx(
        {"rtsp://u:***@cam": 0.004, "det": 0.06}
    )
    assert per_item["edgepipe_node_wall_seconds_per_item"] == pytest.approx({"det": 0.12})
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


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_snapshot_is_taken_at_most_once_per_max_age() -> None:
    clock = Clock()
    taken: list[Snapshot] = []

    def snapshot() -> Snapshot:
        taken.append(_snapshot(None))
        return taken[-1]

    cache = SnapshotCache(snapshot, max_age_s=0.5, clock=clock)
    first = cache()
    clock.now += 0.49
    assert cache() is first
    assert len(taken) == cache.taken == 1
    clock.now += 0.01
    assert cache() is not first
    assert cache.taken == 2
    with pytest.raises(ValueError, match="max_age_s"):
        SnapshotCache(snapshot, max_age_s=-1)


def test_the_exposition_is_rendered_once_per_snapshot() -> None:
    snaps = [_snapshot(None)]
    text = MetricsText(lambda: snaps[-1])
    body = text.body()
    assert text.body() is body
    assert text.rendered == 1
    snaps.append(_snapshot(SCHED))
    assert b"edgepipe_sched_cpu_ratio" in text.body()
    assert text.rendered == 2


async def test_a_scraper_hammering_metrics_and_health_does_not_load_the_pipeline() -> None:
    import time

    import aiohttp
    from aiohttp import web

    from edgepipe.runtime.engine import Runtime
    from edgepipe.serve import build_app
    from edgepipe.serve.app import METRICS, SNAPSHOTS

    from .conftest import Camera, pipeline

    runtime = Runtime(pipeline(Camera()).validate())
    calls = 0
    own = runtime.snapshot

    def counted() -> Snapshot:
        nonlocal calls
        calls += 1
        return own()

    runtime.snapshot = counted  # type: ignore[method-assign]
    app = build_app(runtime)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        async with aiohttp.ClientSession() as session:
            t0 = time.monotonic()
            for i in range(300):
                async with session.get(url + ("/metrics" if i % 2 else "/health")) as r:
                    assert r.status in (200, 503)
                    await r.read()
            elapsed = time.monotonic() - t0
    finally:
        await runner.cleanup()
    assert calls == app[SNAPSHOTS].taken
    assert calls <= elapsed / 0.5 + 1, (calls, elapsed)  # one per 0.5 s, not one per request
    assert app[METRICS].rendered <= calls
