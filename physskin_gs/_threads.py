"""Process-wide worker-thread pools for the kernels that split their work into blocks (deformation, grid field).

Each pool is named (its threads are ``physskin-<name>_N``), created on first use and grown when a caller needs
more workers; the tasks run single-threaded torch ops, so the pools never nest.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, Tuple

#: Most Python-level worker threads a block-parallel kernel uses.
MAX_WORKERS = 8

_POOLS: Dict[str, Tuple[ThreadPoolExecutor, int]] = {}
_LOCK = threading.Lock()


def worker_pool(name: str, n: int) -> ThreadPoolExecutor:
    """The pool ``name`` with at least ``n`` (>= 1) worker threads; a smaller existing pool is replaced (its
    running tasks finish)."""
    with _LOCK:
        pool, size = _POOLS.get(name, (None, 0))
        if pool is None or size < n:
            if pool is not None:
                pool.shutdown(wait=False)
            pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix=f"physskin-{name}")
            _POOLS[name] = (pool, n)
        return pool
