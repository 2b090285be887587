"""Rest-relative linear blend skinning (pure math, no I/O).

``phi(X, z) = X + sum_i W_i(X) Z_i [X; 1]`` (PhysSkin Eq. 2) and its deformation gradient
``F = I + sum_i [W_i A_i + (Z_i X~) grad W_i^T]`` (method.md sections 2-3). Handle transforms
``Z`` are (..., H, 3, 4) with H = m + 1 handles (the constant handle last); ``z = vec(Z)`` flattens
each handle's 3x4 block row-major, so z has 12 H entries.

All functions take float tensors of one dtype/device (positions in scene units, weights and Z unitless)
and return that dtype; none raises on purpose (mismatched shapes fail inside torch.einsum).
"""

from __future__ import annotations

import torch


def homogeneous(X: torch.Tensor) -> torch.Tensor:
    """(..., 3) -> (..., 4) homogeneous coordinates ``X~ = [X; 1]``, same dtype."""
    return torch.cat([X, torch.ones_like(X[..., :1])], dim=-1)


def lbs_displacement(X: torch.Tensor, W: torch.Tensor, Z: torch.Tensor) -> torch.Tensor:
    """Displacement ``sum_i W_i Z_i X~``.

    Args:
        X: (N, 3) rest positions.
        W: (N, H) skinning weights.
        Z: (H, 3, 4) or (B, H, 3, 4) handle transforms.
    Returns:
        (N, 3) or (B, N, 3) displacements.
    """
    Xh = homogeneous(X)  # [N, 4]
    if Z.ndim == 3:
        return torch.einsum("nh,hab,nb->na", W, Z, Xh)
    return torch.einsum("nh,khab,nb->kna", W, Z, Xh)


def lbs_points(X: torch.Tensor, W: torch.Tensor, Z: torch.Tensor) -> torch.Tensor:
    """Deformed positions ``phi(X, z) = X + sum_i W_i Z_i X~`` (PhysSkin Eq. 2); shapes as lbs_displacement."""
    return X + lbs_displacement(X, W, Z)


def deformation_gradient(X: torch.Tensor, W: torch.Tensor, gradW: torch.Tensor, Z: torch.Tensor) -> torch.Tensor:
    """Exact deformation gradient of rest-relative LBS, including the grad-W term (method.md section 3).

    Args:
        X: (N, 3) rest positions; W: (N, H) weights; gradW: (N, H, 3) spatial gradients dW/dX;
        Z: (H, 3, 4) or (B, H, 3, 4).
    Returns:
        F: (N, 3, 3) or (B, N, 3, 3).
    """
    Xh = homogeneous(X)
    eye = torch.eye(3, dtype=X.dtype, device=X.device)
    A = Z[..., :3]  # [.., H, 3, 3]
    if Z.ndim == 3:
        lin = torch.einsum("nh,hab->nab", W, A)
        u = torch.einsum("hab,nb->nha", Z, Xh)  # [N, H, 3] = Z_i X~
        return eye + lin + torch.einsum("nha,nhc->nac", u, gradW)
    lin = torch.einsum("nh,khab->knab", W, A)
    u = torch.einsum("khab,nb->knha", Z, Xh)
    return eye + lin + torch.einsum("knha,nhc->knac", u, gradW)


def lbs_matrix(X: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """LBS matrix B (N, 3, 12 H) with ``x = X + B z`` (method.md section 2, matrix form)."""
    N, H = W.shape
    Xh = homogeneous(X)  # [N, 4]
    eye = torch.eye(3, dtype=X.dtype, device=X.device)
    # B[n, a, h*12 + r*4 + c] = W[n,h] * delta(a,r) * Xh[n,c]
    B = torch.einsum("nh,ar,nc->nahrc", W, eye, Xh)
    return B.reshape(N, 3, 12 * H)


def deformation_jacobian(X: torch.Tensor, W: torch.Tensor, gradW: torch.Tensor) -> torch.Tensor:
    """dvec(F)/dz, shape (N, 9, 12 H), with ``vec(F) = vec(I) + J z`` and vec row-major (F_ab at 3a+b).

    ``dF_ab / dZ_i[r, c] = delta(a, r) (W_i delta(b, c) + X~_c dW_i/dX_b)`` for c < 3, and
    ``delta(a, r) dW_i/dX_b`` for c = 3 (method.md section 3).
    """
    N, H = W.shape
    Xh = homogeneous(X)
    eye3 = torch.eye(3, dtype=X.dtype, device=X.device)
    eye34 = torch.zeros(3, 4, dtype=X.dtype, device=X.device)
    eye34[:, :3] = eye3
    # G[n, h, b, c] = W[n,h] delta(b,c) + gradW[n,h,b] * Xh[n,c]
    G = W[:, :, None, None] * eye34 + gradW[:, :, :, None] * Xh[:, None, None, :]
    Jt = torch.einsum("ar,nhbc->nabhrc", eye3, G)
    return Jt.reshape(N, 9, 12 * H)
