"""physskin_gs: real-time physics-based animation of 3D Gaussian Splatting scenes (PhysSkin, CVPR 2026).

Layers (each imports only the ones before it): ``io`` -> ``geometry`` -> ``model`` -> ``physics`` -> ``render``;
the CLI (``physskin_gs.cli``) and the browser viewer (``physskin_gs_viewer``) sit on top.
"""

__version__ = "0.1.0"

import os as _os
import sys as _sys

if "torch" not in _sys.modules:
    # OpenMP worker threads that spin while they wait stall a 2-thread torch kernel 3-10x whenever another process
    # holds one of the cores (measured on 2-core machines: a 100k render 1.6-2.3 s -> 0.6-0.7 s under load;
    # a 2-thread GEMM 16 ms -> 4 ms). Passive waiting costs little on idle cores. Must be set before torch loads
    # its OpenMP runtime; an explicit OMP_WAIT_POLICY in the environment wins.
    _os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from physskin_gs.errors import CheckpointError, OptionError, PhysSkinError, SceneFormatError  # noqa: E402
from physskin_gs.scene import C0, GaussianScene  # noqa: E402

__all__ = ["GaussianScene", "C0", "PhysSkinError", "SceneFormatError", "CheckpointError", "OptionError", "__version__"]
