"""physskin_gs: real-time physics-based animation of 3D Gaussian Splatting scenes (PhysSkin, CVPR 2026).

Layers (each imports only the ones before it): ``io`` -> ``geometry`` -> ``model`` -> ``physics`` -> ``render``;
the CLI (``physskin_gs.cli``) and the browser viewer (``physskin_gs_viewer``) sit on top.

Importing the package has no side effects and does not import torch yet (``GaussianScene`` and ``C0`` load on
first access), so applications (the CLI) can configure the OpenMP runtime before torch loads it.
"""

from physskin_gs.errors import CheckpointError, OptionError, PhysSkinError, SceneFormatError

__version__ = "0.1.0"

__all__ = ["GaussianScene", "C0", "PhysSkinError", "SceneFormatError", "CheckpointError", "OptionError", "__version__"]


def __getattr__(name):  # PEP 562: lazy torch-backed names
    if name in ("GaussianScene", "C0"):
        from physskin_gs import scene

        return getattr(scene, name)
    raise AttributeError(f"module 'physskin_gs' has no attribute {name!r}")
