"""Which shard owns which node: a stable hash of the node name, so every service agrees."""
from __future__ import annotations

import zlib


def shard_of(node_name: str, shard_count: int) -> int:
    return zlib.crc32(node_name.encode()) % shard_count if shard_count > 1 else 0
