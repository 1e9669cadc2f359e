"""``python -m scripts.bench.headroom``: see :mod:`scripts.bench.headroom.bench`."""

from __future__ import annotations

from scripts.bench.headroom.bench import main

raise SystemExit(main())
