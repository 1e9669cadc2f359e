#!/usr/bin/env python3
"""Write a small decoder-only language model in ONNX (see scripts/tiny_lm.py for its structure).

    python scripts/make_tiny_lm.py out/tiny --layout gqa                    # ~0.4M parameters
    python scripts/make_tiny_lm.py out/big --layout concat --hidden 768 --layers 12 \\
        --heads 12 --kv-heads 4 --ffn 2048 --vocab 32000                   # ~100M parameters

Both layouts (``gqa``: shared-buffer GroupQueryAttention; ``concat``: Optimum-style) get the same
weights for the same flags and seed; ``--kv-dtype float16`` declares a half-precision cache.
Needs the ``onnx`` package (the dev extra: ``.venv/bin/pip install -c constraints.txt -e '.[dev]'``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run by path: the checkout, for scripts.tiny_lm

from edgepipe.core.install import missing
from scripts.tiny_lm import KV_DTYPES, TinyConfig, add_size_flags, config_from_flags, write


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--layout", choices=("concat", "gqa"), default="gqa")
    parser.add_argument("--kv-dtype", choices=KV_DTYPES, default="float32", help="the KV cache's type")
    add_size_flags(parser, TinyConfig())
    args = parser.parse_args()
    cfg = config_from_flags(args)
    try:
        path = write(args.folder, cfg, args.layout, args.kv_dtype)
    except ModuleNotFoundError as exc:  # onnx comes with the dev extra
        raise SystemExit(missing(exc.name or str(exc), "dev", "scripts/make_tiny_lm.py")) from None
    size = f"{cfg.parameters() / 1e6:.1f}M parameters"
    print(f"{path}: {args.layout} layout, {size}, {args.kv_dtype} KV cache", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
