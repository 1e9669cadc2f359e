"""The bytes of a KV cache: the one formula the runner allocates by, ``run --plan`` reserves and
``edgepipe plan`` prints.

Each layer keeps a key and a value per position and KV head, ``head_dim`` values each, in the
cache's type; a runner holding ``slots`` requests keeps that many rows.
"""

from __future__ import annotations


def kv_cache_bytes(
    layers: int, kv_heads: int, positions: int, head_dim: int, itemsize: float, slots: int = 1
) -> int:
    """slots x layers x 2 (K and V) x kv_heads x positions x head_dim x bytes per value."""
    return int(slots * layers * 2 * kv_heads * positions * head_dim * itemsize)
