from __future__ import annotations

import json
import time
from pathlib import Path

from edgepipe.health import check


def test_fresh_stale_missing_and_broken_heartbeats(tmp_path: Path) -> None:
    path = tmp_path / "health.json"
    ok, reason = check(str(path), 30)
    assert not ok
    assert "no heartbeat yet" in reason
    path.write_text(json.dumps({"t": time.time(), "items_out": 12}))
    ok, reason = check(str(path), 30)
    assert ok
    assert "12 items out" in reason
    path.write_text(json.dumps({"t": time.time() - 120}))
    ok, reason = check(str(path), 30)
    assert not ok
    assert "limit 30 s" in reason
    path.write_text("{not json")
    ok, reason = check(str(path), 30)
    assert not ok
    assert "unreadable heartbeat" in reason
