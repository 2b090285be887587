"""physskin_gs: real-time physics-based animation of 3D Gaussian Splatting scenes (PhysSkin, CVPR 2026).

Layers (each imports only the ones before it): ``io`` -> ``geometry`` -> ``model`` -> ``physics`` -> ``render``;
the CLI (``physskin_gs.cli``) and the browser viewer (``physskin_gs_viewer``) sit on top.
"""

__version__ = "0.1.0"

from physskin_gs.errors import CheckpointError, OptionError, PhysSkinError, SceneFormatError  # noqa: E402
from physskin_gs.scene import C0, GaussianScene  # noqa: E402

__all__ = ["GaussianScene", "C0", "PhysSkinError", "SceneFormatError", "CheckpointError", "OptionError", "__version__"]
