"""Real spherical harmonics (degrees 0-4) in the 3DGS convention, and view-dependent colour.

The basis is the real, orthonormal SH basis with the sign convention used by INRIA 3DGS and gsplat
(formats.md section 1: ``rgb = max(sum_k Y_k(d) f_k + 0.5, 0)``). Coefficient k = l^2 + l + m holds
band l, order m. Under deformation the view direction is taken into each Gaussian's rest frame,
``d_rest = R_F^T d`` (method.md section 10), and the coefficients are never rotated.
"""

from __future__ import annotations

from typing import Optional

import torch

from physskin_gs.errors import OptionError
from physskin_gs.sh import MAX_SH_DEGREE, eval_sh, sh_basis, sh_degree_from_coeffs  # noqa: F401  (re-exported)


def sh_to_rgb(
    sh: torch.Tensor,
    means: torch.Tensor,
    cam_center: torch.Tensor,
    view_rotations: Optional[torch.Tensor] = None,
    degree: Optional[int] = None,
) -> torch.Tensor:
    """View-dependent colour of each Gaussian: ``max(SH(d_rest) + 0.5, 0)`` (formats.md 1, method.md 10).

    Args:
        sh: (N, K+1, 3) SH coefficients, DC first.
        means: (N, 3) world-space (deformed) centres.
        cam_center: (3,) camera centre in world space.
        view_rotations: optional (N, 3, 3) rotation R_F of each Gaussian's local deformation; the
            direction ``d = mu - c`` is mapped to ``d_rest = R_F^T d`` before evaluating the SH.
        degree: SH degree to use (default: all).
    Returns:
        (N, 3) colours >= 0 (not clamped above), dtype of ``sh``.
    """
    dirs = means - cam_center.to(means)[None, :]  # [N, 3]
    if view_rotations is not None:
        if view_rotations.shape != (means.shape[0], 3, 3):
            raise OptionError(
                f"view_rotations has shape {tuple(view_rotations.shape)}, expected ({means.shape[0]}, 3, 3)"
            )
        dirs = torch.einsum("nji,nj->ni", view_rotations.to(dirs), dirs)  # R^T d
    return (eval_sh(sh, dirs, degree) + 0.5).clamp_min(0.0)
