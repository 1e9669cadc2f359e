from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sinks.broker import Mosquitto


@pytest.fixture
def mosquitto(tmp_path: Path) -> Iterator[Mosquitto]:
    """Debian's Mosquitto on 127.0.0.1 at a free port, anonymous clients allowed."""
    try:
        broker = Mosquitto(tmp_path)
    except RuntimeError as exc:
        pytest.fail(str(exc))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()
