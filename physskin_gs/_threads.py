"""Process-wide worker-thread pools for the kernels that split their work into blocks (deformation, grid field,
SH rotation), and the one dispatch they share.

Each pool is named (its threads are ``physskin-<name>_N``), created on first use and grown when a caller needs
more workers; the tasks run single-threaded torch ops, so the pools never nest.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager
from typing import Callable, Dict, Iterator, Optional, Sequence, Tuple, TypeVar

import torch

from physskin_gs import interrupts

#: Most Python-level worker threads a block-parallel kernel uses.
MAX_WORKERS = 8

_POOLS: Dict[str, Tuple[ThreadPoolExecutor, int]] = {}
_LOCK = threading.Lock()

_Item = TypeVar("_Item")
_END = object()  # end of run_on_workers' queue (an item may be None)


def worker_pool(name: str, n: int) -> ThreadPoolExecutor:
    """The pool ``name`` with at least ``n`` (>= 1) worker threads; a smaller existing pool is replaced (its
    running tasks finish).

    Raises ValueError for n < 1."""
    if n < 1:
        raise ValueError(f"a worker pool needs at least 1 thread, got {n}")
    with _LOCK:
        pool, size = _POOLS.get(name, (None, 0))
        if pool is None or size < n:
            if pool is not None:
                pool.shutdown(wait=False)
            pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix=f"physskin-{name}")
            _POOLS[name] = (pool, n)
        return pool


@contextmanager
def single_thread(n: Optional[int] = 1) -> Iterator[None]:
    """Run the calling thread's torch ops on ``n`` intra-op threads inside the block (default 1; OpenMP keeps the
    count per thread). None leaves the setting alone. The previous count is restored after, also on errors."""
    old = torch.get_num_threads()
    change = n is not None and old != n
    if change:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if change:
            torch.set_num_threads(old)


def run_on_workers(name: str, fn: Callable[[int, _Item], None], items: Sequence[_Item], workers: int,
                   torch_ops: bool = True) -> None:
    """Call ``fn(slot, item)`` once for every item, shared by ``min(workers, len(items))`` threads: the caller
    (slot 0) and the workers of pool ``name`` (slots 1 .. T-1; :func:`worker_pool`). Items are handed out one at a
    time in order, so a busy core holds no one back; ``fn`` must write disjoint outputs (a slot is never used by
    two threads at once, so per-slot scratch is safe).

    With one thread (or none needed) every item runs on the caller, slot 0, with torch's thread setting untouched.
    Otherwise, with ``torch_ops``, every thread's torch ops are single-threaded (torch releases the GIL inside
    ops) and the caller's thread count is restored after. All threads are waited for before returning or raising;
    the first failing worker's exception (in slot order) propagates, else the caller's. Ctrl-C / SIGTERM during the
    run stop the hand-out of items and are raised once every thread has returned (:func:`interrupts.deferred`): no
    worker is left running on the caller's arrays."""
    T = min(int(workers), len(items))
    if T <= 1:
        for it in items:
            fn(0, it)
        return
    queue = iter(items)
    lock = threading.Lock()

    def work(slot: int) -> None:
        if torch_ops:
            torch.set_num_threads(1)  # this thread's OpenMP setting: its ops stay single-threaded
        while True:
            with lock:
                it = next(queue, _END) if interrupts.requested() is None else _END
            if it is _END:
                return
            fn(slot, it)

    with interrupts.deferred(), single_thread(1 if torch_ops else None):
        pool = worker_pool(name, T - 1)
        futs = [pool.submit(work, i) for i in range(1, T)]
        try:
            work(0)
        finally:
            wait(futs)
            for f in futs:
                f.result()

