"""Applying handle motion to Gaussians: means, covariances, view rotations, export and SH rotation (method.md 10).

All geometry here is in the *scene frame* (scene units). Handle transforms Z (H, 3, 4) act by rest-relative LBS
``mu' = mu + sum_i W_i Z_i [mu; 1]`` (PhysSkin Eq. 2) and the exact deformation gradient
``F = I + sum_i [W_i A_i + (Z_i mu~) grad W_i^T]`` (method.md 3, with the grad-W term).

Fast path (:class:`GaussianDeformer`). With Zm (3, 4H), ``Zm[a, (h, c)] = Z[h, a, c]``, the per-Gaussian factor
``P_n = [phi_n^T; (G_n^T L_n)^T]`` (4, 4H) is precomputed once, where ``phi = W (x) mu~``,
``G[b, (h, c)] = W_h delta_bc + dW_h/dX_b mu~_c`` and ``L = R S`` is the rest covariance factor. Then ONE GEMM
``Zm [3, 4H] x P [4H, 4N]`` (P stored K-major) gives both the mean displacement and ``(F - I) L``; ``Sigma' = (F L)(F L)^T`` stays PSD
even for det F <= 0. :func:`deform_reference` is the plain version built from :mod:`physskin_gs.lbs`.

Export: ``F L = U diag(s) V^T`` by one-sided Jacobi (accurate for the column-scaled F L of flat surfels with
log-scales near -23, where an eigen-decomposition of Sigma' would lose the thin axis), det U = +1, quaternion from
U, log-scales log s. SH: each band l is rotated per Gaussian by R_F (method.md 10): rotated coefficients seen from
d equal the original ones seen from R_F^T d.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import torch

from physskin_gs.lbs import deformation_gradient, lbs_points
from physskin_gs.physics.neohookean import _det3, svd3
from physskin_gs.scene import quat_to_rotmat, rotmat_to_quat
from physskin_gs.sh import eval_sh, sh_basis, sh_degree_from_coeffs  # noqa: F401  (eval_sh re-exported)

__all__ = [
    "DeformedGaussians",
    "GaussianDeformer",
    "deform_reference",
    "polar_rotation",
    "covariance_factor_svd",
    "rotate_sh",
    "sh_basis",
    "eval_sh",
    "clamp_singular_values",
]

MIN_LOG_SCALE = -30.0  # numerics only; real files reach about -23


@dataclass
class DeformedGaussians:
    """Deformed Gaussians for rendering (scene frame, scene units).

    means (N, 3) float32; covars (N, 3, 3) float32 ``F Sigma F^T``; view_rotations (N, 3, 3) float32 R_F
    (rotate view directions into the rest frame: ``d_rest = R_F^T d``); opacities (N,) in [0, 1];
    sh (N, K+1, 3) raw SH coefficients (unrotated; use view_rotations).
    """

    means: torch.Tensor
    covars: torch.Tensor
    view_rotations: torch.Tensor
    opacities: torch.Tensor
    sh: torch.Tensor


# ------------------------------------------------------------------------------------------------ small kernels
def polar_rotation(F: torch.Tensor) -> torch.Tensor:
    """Rotation of the polar decomposition F = R S for (..., 3, 3): R = U V^T from the rotation-variant SVD (U, V
    in SO(3)), so det R = +1 even for inverted F (PhysGaussian's sign fix). Computed in float64, returns F's dtype."""
    U, _, V = svd3(F.to(torch.float64))
    return (U @ V.transpose(-1, -2)).to(F.dtype)


def clamp_singular_values(F: torch.Tensor, lo: float = 0.2, hi: float = 5.0) -> torch.Tensor:
    """Clamp F's singular values to [lo, hi] (keeping U, V and the sign of an inversion) for (N, 3, 3).

    Only matrices that may violate the bounds (cheap test ``|F|_F <= hi`` and ``|det F| / |F|_F^2 >= lo``
    fails) go through the SVD. method.md 10 needle guard."""
    Fd = F.to(torch.float64)
    fro2 = (Fd * Fd).sum((-2, -1))
    det = _det3(Fd)
    safe = (fro2 <= hi * hi) & (det.abs() >= lo * fro2) & (det > 0)
    if bool(safe.all()):
        return F
    idx = torch.nonzero(~safe).flatten()
    U, s, V = svd3(Fd[idx])
    sgn = torch.where(s < 0, -torch.ones_like(s), torch.ones_like(s))
    s = sgn * s.abs().clamp(lo, hi)
    out = F.clone()
    out[idx] = (U * s[:, None, :] @ V.transpose(1, 2)).to(F.dtype)
    return out


def covariance_factor_svd(M: torch.Tensor, sweeps: int = 6) -> Tuple[torch.Tensor, torch.Tensor]:
    """Left singular vectors and singular values of (N, 3, 3) M (= F L) by one-sided Jacobi (Hestenes).

    Returns (U (N, 3, 3) with det U = +1, s (N, 3) >= 0) with ``M M^T = U diag(s^2) U^T``. Column-scaling
    invariant (high relative accuracy for thin Gaussians). float64 internally, outputs in M's dtype.
    """
    A = M.to(torch.float64).clone()
    pairs = ((0, 1), (0, 2), (1, 2))
    for _ in range(sweeps):
        for p, q in pairs:
            ap, aq = A[..., :, p], A[..., :, q]
            alpha = (ap * ap).sum(-1)
            beta = (aq * aq).sum(-1)
            gamma = (ap * aq).sum(-1)
            rot = gamma.abs() > 1e-15 * torch.sqrt(alpha * beta)
            gs = torch.where(rot, gamma, torch.ones_like(gamma))
            zeta = (beta - alpha) / (2.0 * gs)
            sign = torch.where(zeta >= 0, torch.ones_like(zeta), -torch.ones_like(zeta))
            t = sign / (zeta.abs() + torch.sqrt(1.0 + zeta * zeta))
            c = 1.0 / torch.sqrt(1.0 + t * t)
            s = c * t
            c = torch.where(rot, c, torch.ones_like(c))[..., None]
            s = torch.where(rot, s, torch.zeros_like(s))[..., None]
            new_p = c * ap - s * aq
            new_q = s * ap + c * aq
            A[..., :, p] = new_p
            A[..., :, q] = new_q
    sv = A.norm(dim=-2)  # [N, 3]
    U = A / sv.clamp_min(1e-300)[..., None, :]
    # zero columns: complete the frame
    ok = sv > 0
    u0 = torch.where(ok[..., 0:1], U[..., :, 0], torch.tensor([1.0, 0.0, 0.0], dtype=U.dtype).expand_as(U[..., :, 0]))
    u1 = U[..., :, 1] - (U[..., :, 1] * u0).sum(-1, keepdim=True) * u0
    alt = torch.linalg.cross(u0, torch.tensor([0.0, 0.0, 1.0], dtype=U.dtype).expand_as(u0))
    alt = torch.where(alt.norm(dim=-1, keepdim=True) > 1e-6, alt,
                      torch.linalg.cross(u0, torch.tensor([0.0, 1.0, 0.0], dtype=U.dtype).expand_as(u0)))
    u1 = torch.where(ok[..., 1:2] & (u1.norm(dim=-1, keepdim=True) > 1e-12), u1, alt)
    u1 = u1 / u1.norm(dim=-1, keepdim=True).clamp_min(1e-300)
    u2 = torch.linalg.cross(u0, u1)  # right-handed completion; equals +-column 2 when it is non-zero
    U = torch.stack([u0, u1, u2], dim=-1)
    return U.to(M.dtype), sv.to(M.dtype)


# ------------------------------------------------------------------------------------------------ SH
def _probe_dirs(l: int, dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(1234 + l)
    d = torch.randn(2 * l + 1, 3, generator=g, dtype=torch.float64)
    return (d / d.norm(dim=1, keepdim=True)).to(dtype)


def rotate_sh(sh: torch.Tensor, R: torch.Tensor, chunk: int = 1 << 16) -> torch.Tensor:
    """Rotate SH coefficients per Gaussian: sh (N, K+1, 3) (degree <= 3), R (N, 3, 3) rotations -> (N, K+1, 3)
    with ``eval_sh(out, d) == eval_sh(sh, R^T d)`` (method.md 10). DC is unchanged. Band l's (2l+1)^2 matrix comes
    from evaluating the basis at 2l+1 generic directions and at their rotated images, then solving.

    Raises OptionError if K+1 is not (d+1)^2, ValueError for degree 4 (not supported)."""
    degree = sh_degree_from_coeffs(sh.shape[1])
    if degree == 0:
        return sh.clone()
    if degree > 3:
        raise ValueError(f"SH degree {degree} > 3 is not supported for rotation")
    out = sh.clone()
    dd = torch.float64
    for l in range(1, degree + 1):
        lo, hi = l * l, (l + 1) * (l + 1)
        D = _probe_dirs(l, dd)  # [k, 3]
        Y0 = sh_basis(D, l)[:, lo:hi]  # [k, 2l+1]
        Y0inv = torch.linalg.inv(Y0)
        for s in range(0, sh.shape[0], chunk):
            Rc = R[s:s + chunk].to(dd)
            # rotated probe directions R^T d_k: [n, k, 3]
            Dr = torch.einsum("nba,kb->nka", Rc, D)
            Yr = sh_basis(Dr, l)[:, :, lo:hi]  # [n, k, 2l+1]
            M = Y0inv @ Yr  # [n, 2l+1, 2l+1]: c' = M c
            out[s:s + chunk, lo:hi] = (M @ sh[s:s + chunk, lo:hi].to(dd)).to(sh.dtype)
    return out


# ------------------------------------------------------------------------------------------------ reference
def deform_reference(means: torch.Tensor, covars: torch.Tensor, W: torch.Tensor, dW: torch.Tensor,
                     Z: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Plain reference: (means' (N, 3), covars' (N, 3, 3) = F Sigma F^T, F (N, 3, 3)) from
    :func:`physskin_gs.lbs.lbs_points` and :func:`physskin_gs.lbs.deformation_gradient` (method.md 10)."""
    x = lbs_points(means, W, Z)
    F = deformation_gradient(means, W, dW, Z)
    return x, F @ covars @ F.transpose(1, 2), F


# ------------------------------------------------------------------------------------------------ fast path
class GaussianDeformer:
    """Per-frame deformation of N Gaussians by handle transforms, precomputed for speed (module docstring).

    Args:
        means: (N, 3) rest centres, scene units. quats: (N, 4) wxyz (any norm; normalised here).
        log_scales: (N, 3) (clamped to >= -30 for numerics). weights: (N, H), weight_grads: (N, H, 3), both in the
            scene frame (grad W in 1/scene-unit).
        chunk_size: Gaussians per chunk for precompute and for the SVD-based kernels (1M+ friendly).
        singular_clamp: (lo, hi) clamp of F's singular values (needle guard) or None.
    Memory: the factor is 16 H float32 per Gaussian (1.1 kB for H = 17).
    """

    def __init__(self, means: torch.Tensor, quats: torch.Tensor, log_scales: torch.Tensor, weights: torch.Tensor,
                 weight_grads: torch.Tensor, chunk_size: int = 1 << 17,
                 singular_clamp: Optional[Tuple[float, float]] = None) -> None:
        N, H = weights.shape
        self.N, self.H, self.K4 = N, H, 4 * H
        self.chunk = int(chunk_size)
        self.singular_clamp = singular_clamp
        f32 = torch.float32
        self.rest_means = torch.nan_to_num(means.to(f32))
        self.R = quat_to_rotmat(torch.nan_to_num(quats.to(f32)))  # normalised inside
        self.scales = torch.exp(torch.nan_to_num(log_scales.to(f32), nan=MIN_LOG_SCALE).clamp(MIN_LOG_SCALE, 20.0))
        L = self.R * self.scales[:, None, :]  # [N, 3, 3] = R S
        self.L = L
        # factor stored K-major, [4H, N, 4]: the per-frame GEMM is Zm [3, 4H] @ factor [4H, 4N], which MKL
        # streams faster than the [4N, 4H] @ [4H, 3] orientation (skinny output)
        self.factor = torch.empty(self.K4, N, 4, dtype=f32)
        eye34 = torch.zeros(3, 4, dtype=f32)
        eye34[:, :3] = torch.eye(3)
        for s in range(0, N, self.chunk):
            e = min(N, s + self.chunk)
            Wc = torch.nan_to_num(weights[s:e].to(f32))
            dWc = torch.nan_to_num(weight_grads[s:e].to(f32))
            mu = torch.cat([self.rest_means[s:e], torch.ones(e - s, 1, dtype=f32)], dim=1)  # [n, 4]
            Lc = L[s:e]
            blk = torch.empty(e - s, 4, self.K4, dtype=f32)
            blk[:, 0] = (Wc[:, :, None] * mu[:, None, :]).reshape(e - s, self.K4)
            gL = torch.bmm(dWc, Lc)  # [n, H, 3(d)] = grad W_h . L[:, d]
            # term[d, h, c] = W_h L[c, d] (c < 3) + mu~_c gL[h, d]
            term = (Wc[:, None, :, None] * torch.cat([Lc.transpose(1, 2), torch.zeros(e - s, 3, 1)], dim=2)[:, :, None, :]
                    + gL.permute(0, 2, 1)[:, :, :, None] * mu[:, None, None, :])  # [n, 3(d), H, 4]
            blk[:, 1:] = term.reshape(e - s, 3, self.K4)
            self.factor[:, s:e, :] = blk.permute(2, 0, 1)
        self._flat = self.factor.view(self.K4, N * 4)
        self._out = torch.empty(3, N * 4, dtype=f32)
        self.means = self.rest_means.clone()
        self.covars = (L @ L.transpose(1, 2)).contiguous()
        self.FL = L.clone()
        self._Zm = torch.zeros(3, self.K4, dtype=f32)

    def _set_Z(self, Z: torch.Tensor) -> None:
        # Zm[a, (h, c)] = Z[h, a, c]
        self._Zm.copy_(Z.to(torch.float32).permute(1, 0, 2).reshape(3, self.K4))

    def deform(self, Z: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Apply handle transforms Z (H, 3, 4) (scene frame). Returns (means (N, 3), covars (N, 3, 3)), float32
        buffers owned by the deformer (overwritten by the next call; clone to keep). One GEMM
        ``Zm [3, 4H] @ P [4H, 4N]`` + one 3x3 gram per Gaussian."""
        self._set_Z(Z)
        torch.mm(self._Zm, self._flat, out=self._out)  # [3, 4N]: out[a, n, r]
        out = self._out.view(3, self.N, 4)
        torch.add(self.rest_means, out[:, :, 0].T, out=self.means)
        torch.add(self.L, out[:, :, 1:].permute(1, 0, 2), out=self.FL)  # F L = L + (F - I) L, [n, a, d]
        if self.singular_clamp is not None:
            self._apply_clamp()
        torch.bmm(self.FL, self.FL.transpose(1, 2), out=self.covars)
        return self.means, self.covars

    def deformation_gradients(self) -> torch.Tensor:
        """(N, 3, 3) F of the last :meth:`deform` call, recovered as (F L) S^-1 R^T (after any clamp)."""
        return self._F(0, self.N)

    def _F(self, s: int, e: int) -> torch.Tensor:
        """F of Gaussians [s, e) from the current F L: (F L) S^-1 R^T, (e - s, 3, 3) float32."""
        return (self.FL[s:e] / self.scales[s:e, None, :]) @ self.R[s:e].transpose(1, 2)

    def _apply_clamp(self) -> None:
        lo, hi = self.singular_clamp
        for s in range(0, self.N, self.chunk):
            e = min(self.N, s + self.chunk)
            F = self._F(s, e)
            Fc = clamp_singular_values(F, lo, hi)
            if Fc is not F:
                self.FL[s:e] = Fc @ self.L[s:e]

    def view_rotations(self) -> torch.Tensor:
        """(N, 3, 3) float32 R_F (polar rotation of F) for the last :meth:`deform` call; chunked."""
        out = torch.empty(self.N, 3, 3, dtype=torch.float32)
        for s in range(0, self.N, self.chunk):
            e = min(self.N, s + self.chunk)
            out[s:e] = polar_rotation(self._F(s, e))  # float64 inside, float32 out
        return out

    def export_quats_scales(self) -> Tuple[torch.Tensor, torch.Tensor]:
        """(quats (N, 4) unit wxyz, log_scales (N, 3)) of the last deformed covariances (SVD of F L, det U = +1)."""
        q = torch.empty(self.N, 4, dtype=torch.float32)
        ls = torch.empty(self.N, 3, dtype=torch.float32)
        for s in range(0, self.N, self.chunk):
            e = min(self.N, s + self.chunk)
            U, sv = covariance_factor_svd(self.FL[s:e].to(torch.float64))
            q[s:e] = rotmat_to_quat(U).float()
            ls[s:e] = torch.log(sv.clamp_min(1e-300)).clamp_min(MIN_LOG_SCALE).float()
        return q, ls
