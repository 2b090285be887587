"""Thread settings of an application (the CLI, the benchmarks), not of the library: they must be in the
environment before torch and numpy load their runtimes, and a value the user set wins.

- ``OMP_WAIT_POLICY=PASSIVE``: OpenMP worker threads that spin while they wait stall a 2-thread torch kernel 3-10x
  whenever another process holds one of the cores (measured on 2-core machines: a 100k render 0.86-2.3 s -> 0.62 s,
  a 2-thread GEMM 16 ms -> 4 ms); passive waiting is within noise on idle cores.
- ``OPENBLAS_NUM_THREADS=1``: numpy's and scipy's OpenBLAS split even a 2048-element dot product over 2 threads,
  whose workers then spin between calls. In a simulation step (float64 rows of ~1e3 points, evaluated by numpy)
  that doubled the CPU time for no gain and took the core the step's own 2-thread GEMM (torch, MKL) and the
  viewer's render thread need (2026-12-06, a 33-handle step, 2048 cubature points, best of 3: CPU 48.5-49.5 ->
  25.7-26.6 ms, wall 25.1-25.5 -> 21.7-22.2 ms; a capture's whole ``animate --headless`` run 6.3 -> 5.4 s wall,
  8.6 -> 6.2 s CPU; a mesh's modes basis and a 1M-row scene analysis within noise).
"""

from __future__ import annotations

import os
import sys

#: the settings, applied only where the runtime is not loaded yet and the variable is unset
SETTINGS = (("OMP_WAIT_POLICY", "PASSIVE", "torch"), ("OPENBLAS_NUM_THREADS", "1", "numpy"))


def application_threads() -> None:
    """Set :data:`SETTINGS` in ``os.environ`` (each only if unset and its runtime's module not yet imported).
    Call it first thing in an application's entry point."""
    for name, value, module in SETTINGS:
        if module not in sys.modules:
            os.environ.setdefault(name, value)
