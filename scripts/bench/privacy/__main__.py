"""``python -m scripts.bench.privacy``: see :mod:`scripts.bench.privacy.bench`."""

from __future__ import annotations

from scripts.bench.privacy.bench import main

raise SystemExit(main())
