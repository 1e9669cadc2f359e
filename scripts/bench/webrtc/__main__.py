"""``python -m scripts.bench.webrtc``: see :mod:`scripts.bench.webrtc.bench`."""

from __future__ import annotations

from scripts.bench.webrtc.bench import main

raise SystemExit(main())
