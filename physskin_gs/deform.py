"""Applying handle motion to Gaussians: means, covariances, view rotations, export and SH rotation (method.md 10).

All geometry here is in the *scene frame* (scene units). Handle transforms Z (H, 3, 4) act by rest-relative LBS
``mu' = mu + sum_i W_i Z_i [mu; 1]`` (PhysSkin Eq. 2) and the exact deformation gradient
``F = I + sum_i [W_i A_i + (Z_i mu~) grad W_i^T]`` (method.md 3, with the grad-W term).

Fast path (:class:`GaussianDeformer`). Only compact per-Gaussian data is kept (W and grad W of the non-constant
handles, rest mean, rest covariance factor ``L = R S``: 4K + 12 floats); per frame ``P = [I | 0] + sum_h W_h Z_h``
(the constant handle folded in), ``x' = P X~`` and ``F = P[:, :3] + sum_h (Z_h X~) grad W_h^T`` are formed per
Gaussian, then ``Sigma' = (F L)(F L)^T``, which stays PSD even for det F <= 0. A fused C kernel (compiled once
through :mod:`physskin_gs._native`) does this in one streaming pass; without a C compiler a blocked torch kernel
(one GEMM per cache-sized block plus broadcast multiply-adds) does the same. :func:`deform_reference` is the plain
version built from :mod:`physskin_gs.lbs`; tests hold both kernels to it.

Export: ``F L = U diag(s) V^T`` by one-sided Jacobi (accurate for the column-scaled F L of flat surfels with
log-scales near -23, where an eigen-decomposition of Sigma' would lose the thin axis), det U = +1, quaternion from
U, log-scales log s. SH: each band l is rotated per Gaussian by R_F (method.md 10): rotated coefficients seen from
d equal the original ones seen from R_F^T d.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Optional, Tuple

import torch

from physskin_gs import _native
from physskin_gs.lbs import deformation_gradient, lbs_points
from physskin_gs.physics.neohookean import _det3, svd3
from physskin_gs.scene import float32_local_origin, quat_to_rotmat, rotmat_to_quat
from physskin_gs.sh import eval_sh, rotate_sh, sh_basis, sh_degree_from_coeffs  # noqa: F401  (re-exported)
from physskin_gs._threads import MAX_WORKERS, run_on_workers

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
    "native_available",
    "rest_covariances",
    "factor_quats_scales",
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
    invariant (high relative accuracy for thin Gaussians). float64 internally, outputs in M's dtype. Zero columns
    (a zero scale, a singular F) are completed from the first non-zero column in cyclic order, so the non-zero
    ones are kept wherever the zero one is (an all-zero M gives the identity).
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
    # zero columns (a zero scale, a singular F): complete the frame from the first non-zero column k, taking the
    # others in cyclic order (k, k+1, k+2), so a zero column anywhere keeps the non-zero ones and det U = +1
    ok = sv > 0  # [..., 3]
    k = torch.where(ok[..., 0], 0, torch.where(ok[..., 1], 1, torch.where(ok[..., 2], 2, 0)))  # [...]
    perm = (k[..., None] + torch.arange(3)) % 3  # [..., 3] columns i, j, l
    Ur = U.gather(-1, perm[..., None, :].expand(U.shape))  # [..., 3, 3] columns in rolled order
    okr = ok.gather(-1, perm)
    ex = torch.tensor([1.0, 0.0, 0.0], dtype=U.dtype).expand_as(Ur[..., :, 0])
    none = ~okr[..., 0]
    a = torch.where(none[..., None], ex, Ur[..., :, 0])  # nothing at all: the identity frame

    def unit_perp(v, ref):  # v orthogonalised against the unit ref, normalised (with its norm)
        w = v - (v * ref).sum(-1, keepdim=True) * ref
        n = w.norm(dim=-1, keepdim=True)
        return w / n.clamp_min(1e-300), n

    b_j, nb = unit_perp(Ur[..., :, 1], a)
    c_l, nc = unit_perp(Ur[..., :, 2], a)
    use_j = okr[..., 1:2] & (nb > 1e-12)
    use_l = ~use_j & okr[..., 2:3] & (nc > 1e-12)
    alt = torch.linalg.cross(a, torch.tensor([0.0, 0.0, 1.0], dtype=U.dtype).expand_as(a))
    alt = torch.where(alt.norm(dim=-1, keepdim=True) > 1e-6, alt,
                      torch.linalg.cross(a, torch.tensor([0.0, 1.0, 0.0], dtype=U.dtype).expand_as(a)))
    alt = alt / alt.norm(dim=-1, keepdim=True).clamp_min(1e-300)
    b = torch.where(use_j, b_j, torch.where(use_l, torch.linalg.cross(c_l, a), alt))
    none_b = none[..., None]
    b = torch.where(none_b, torch.tensor([0.0, 1.0, 0.0], dtype=U.dtype).expand_as(b), b)
    c = torch.linalg.cross(a, b)  # right-handed; equals +-the rolled column l when that is non-zero
    Ur = torch.stack([a, b, c], dim=-1)
    U = torch.empty_like(Ur).scatter_(-1, perm[..., None, :].expand(Ur.shape), Ur)  # back to columns 0, 1, 2
    return U.to(M.dtype), sv.to(M.dtype)


# ------------------------------------------------------------------------------------------------ reference
def deform_reference(means: torch.Tensor, covars: torch.Tensor, W: torch.Tensor, dW: torch.Tensor,
                     Z: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Plain reference: (means' (N, 3), covars' (N, 3, 3) = F Sigma F^T, F (N, 3, 3)) from
    :func:`physskin_gs.lbs.lbs_points` and :func:`physskin_gs.lbs.deformation_gradient` (method.md 10)."""
    x = lbs_points(means, W, Z)
    F = deformation_gradient(means, W, dW, Z)
    return x, F @ covars @ F.transpose(1, 2), F


# ------------------------------------------------------------------------------------------------ fast path
class _Workspace:
    """Cache-sized temporaries of one block of C Gaussians (one per worker thread) and their views."""

    def __init__(self, C: int) -> None:
        f32 = torch.float32
        self.P = torch.empty(12, 4 * C, dtype=f32)  # [(a, c), (r, n)]
        self.Q = torch.empty(3, 4, C, dtype=f32)  # [a, r, n]
        self.Fe = torch.empty(3, 5, C, dtype=f32)  # [a, b, n] with columns 0, 1 repeated as 3, 4 (for det F)
        self.F = self.Fe[:, :3]  # [a, b, n]
        self.FL = torch.empty(3, 3, C, dtype=f32)  # [a, d, n]
        self.S = torch.empty(3, 3, C, dtype=f32)  # [a, e, n]
        Pv = self.P.view(3, 4, 4, C)  # [a, c, r, n]
        self.P0 = self.P[:, :C]  # r = 0
        self.Pc = [Pv[:, c] for c in range(4)]  # [a, r, n] for each c
        self.PF = Pv[:, :3, 0]  # [a, b, n]: P[a, b, 0]
        self.Q0, self.Q1 = self.Q[:, 0], self.Q[:, 1:]
        self.Fb = [self.F[:, b:b + 1] for b in range(3)]  # [3, 1, n]
        self.FLa = [self.FL[:, None, d] for d in range(3)]  # [3, 1, n]
        self.FLb = [self.FL[None, :, d] for d in range(3)]  # [1, 3, n]
        self.cross = torch.empty(3, C, dtype=f32)
        self.fro2 = torch.empty(C, dtype=f32)
        self.det = torch.empty(C, dtype=f32)
        self.aos = {"S": self.S.permute(2, 0, 1), "F": self.F.permute(2, 0, 1), "FL": self.FL.permute(2, 0, 1)}


_NATIVE_TILE = 8  # Gaussians per tile of the native storage (one AVX2 vector)
#: Pack the native storage with the C kernel (True) or with torch ops (False: the reference the tests compare).
_PACK_NATIVE = True
_NATIVE_MAX_HANDLES = 256
_NATIVE_SRC = r"""
/* physskin_gs GaussianDeformer kernel (see physskin_gs/deform.py). Storage: tiles of 8 Gaussians, each tile R = 4K + 12
   rows of 8 floats: rows 4h + r (h < K, r = 0: W_h, r = 1..3: dW_h/dX_{r-1}), then the rest mean (3 rows), then
   L = R S row-major (9 rows, L[a][d] at row 3a + d). Zk (K, 3, 4) row-major, B (3, 4) = [I | 0] + constant handles.
   Outputs (row-major per Gaussian; NULL pointers are skipped): means (n, 3) = x', covars (n, 3, 3) = (F L)(F L)^T,
   F (n, 3, 3), FL (n, 3, 3). With clamp != 0 the Gaussians whose F may have singular values outside [lo, hi]
   (|F|_F^2 > hi^2 or det F < lo |F|_F^2, 1e-5 margins, or NaN) are listed in bad[] with their F in Fbad (k, 9);
   returns their count (outputs are written unclamped; the caller fixes those rows), or -1 if K > 256. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
typedef float v8 __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
static inline v8 ld(const float* p) { v8 v; memcpy(&v, p, sizeof v); return v; }
static inline v8 splat(float x) { v8 v = {x, x, x, x, x, x, x, x}; return v; }

int physskin_deform(int K, int n, const float* restrict D, const float* restrict Zk, const float* restrict B,
                    float* restrict means, float* restrict covars, float* restrict Fo, float* restrict FLo,
                    int clamp, float lo, float hi, int32_t* restrict bad, float* restrict Fbad)
{
    if (K < 0 || K > 256) return -1;  /* Zv below lives on the stack (at most 96 KiB) */
    v8 Zv[K > 0 ? K : 1][12];
    for (int h = 0; h < K; ++h)
        for (int k = 0; k < 12; ++k) Zv[h][k] = splat(Zk[12 * h + k]);
    const v8 hi2 = splat(hi * hi * (1.0f - 1e-5f)), lo1 = splat(lo * (1.0f + 1e-5f));
    const int R = 4 * K + 12;
    int nbad = 0;
    for (int i = 0; i < n; i += 8) {
        const float* tile = D + (size_t)(i / 8) * R * 8;
        const float* X = tile + 32 * K;
        const float* L = X + 24;
        const v8 x0 = ld(X), x1 = ld(X + 8), x2 = ld(X + 16);
        v8 P[12];  /* sum_h W_h Z_h + B */
        for (int k = 0; k < 12; ++k) P[k] = splat(B[k]);
        for (int h = 0; h < K; ++h) {
            const v8 w = ld(tile + 32 * h);
            for (int k = 0; k < 12; ++k) P[k] += Zv[h][k] * w;
        }
        v8 G[9];  /* sum_h (Z_h X~) grad W_h^T */
        for (int k = 0; k < 9; ++k) G[k] = splat(0.0f);
        for (int h = 0; h < K; ++h) {
            const v8 g0 = ld(tile + 32 * h + 8), g1 = ld(tile + 32 * h + 16), g2 = ld(tile + 32 * h + 24);
            for (int a = 0; a < 3; ++a) {
                const v8 u = Zv[h][4 * a] * x0 + Zv[h][4 * a + 1] * x1 + Zv[h][4 * a + 2] * x2 + Zv[h][4 * a + 3];
                G[3 * a] += u * g0;
                G[3 * a + 1] += u * g1;
                G[3 * a + 2] += u * g2;
            }
        }
        v8 M[3], F[9];
        for (int a = 0; a < 3; ++a) {
            M[a] = P[4 * a] * x0 + P[4 * a + 1] * x1 + P[4 * a + 2] * x2 + P[4 * a + 3];
            for (int b = 0; b < 3; ++b) F[3 * a + b] = P[4 * a + b] + G[3 * a + b];
        }
        const int m = n - i < 8 ? n - i : 8;
        if (clamp) {
            v8 fro2 = F[0] * F[0];
            for (int k = 1; k < 9; ++k) fro2 += F[k] * F[k];
            const v8 det = F[0] * (F[4] * F[8] - F[5] * F[7]) - F[1] * (F[3] * F[8] - F[5] * F[6])
                         + F[2] * (F[3] * F[7] - F[4] * F[6]);
            const v8i flag = (fro2 > hi2) | (det < lo1 * fro2) | (fro2 != fro2);
            for (int t = 0; t < m; ++t)
                if (flag[t]) {
                    bad[nbad] = i + t;
                    for (int k = 0; k < 9; ++k) Fbad[9 * nbad + k] = F[k][t];
                    ++nbad;
                }
        }
        v8 FL[9];
        for (int d = 0; d < 3; ++d) {
            const v8 l0 = ld(L + 8 * d), l1 = ld(L + 8 * (3 + d)), l2 = ld(L + 8 * (6 + d));
            for (int a = 0; a < 3; ++a) FL[3 * a + d] = F[3 * a] * l0 + F[3 * a + 1] * l1 + F[3 * a + 2] * l2;
        }
        if (means) {
            float* o = means + 3 * (size_t)i;
            for (int t = 0; t < m; ++t) { o[3 * t] = M[0][t]; o[3 * t + 1] = M[1][t]; o[3 * t + 2] = M[2][t]; }
        }
        if (covars) {
            v8 S[6];
            S[0] = FL[0] * FL[0] + FL[1] * FL[1] + FL[2] * FL[2];
            S[1] = FL[0] * FL[3] + FL[1] * FL[4] + FL[2] * FL[5];
            S[2] = FL[0] * FL[6] + FL[1] * FL[7] + FL[2] * FL[8];
            S[3] = FL[3] * FL[3] + FL[4] * FL[4] + FL[5] * FL[5];
            S[4] = FL[3] * FL[6] + FL[4] * FL[7] + FL[5] * FL[8];
            S[5] = FL[6] * FL[6] + FL[7] * FL[7] + FL[8] * FL[8];
            float* o = covars + 9 * (size_t)i;
            for (int t = 0; t < m; ++t) {
                float* c = o + 9 * t;
                c[0] = S[0][t]; c[1] = S[1][t]; c[2] = S[2][t];
                c[3] = S[1][t]; c[4] = S[3][t]; c[5] = S[4][t];
                c[6] = S[2][t]; c[7] = S[4][t]; c[8] = S[5][t];
            }
        }
        if (Fo) {
            float* o = Fo + 9 * (size_t)i;
            for (int t = 0; t < m; ++t)
                for (int k = 0; k < 9; ++k) o[9 * t + k] = F[k][t];
        }
        if (FLo) {
            float* o = FLo + 9 * (size_t)i;
            for (int t = 0; t < m; ++t)
                for (int k = 0; k < 9; ++k) o[9 * t + k] = FL[k][t];
        }
    }
    return nbad;
}

/* Packing of Gaussians [s, e) (s a multiple of 8) into the tile storage D (see above), from row-major float32
   inputs: means (N, 3), quats (N, 4) wxyz, log_scales (N, 3), W (N, H), dW (N, H, 3), keep (K) the stored
   handles. NaN becomes 0 and +-inf +-FLT_MAX (torch.nan_to_num); log-scales: NaN -> min_ls, then clamped to
   [min_ls, 20]; a quaternion of non-finite or <= 1e-12 norm is the identity. Also writes the rest means
   (N, 3) and covariances L L^T (N, 3, 3) rows [s, e) of out_means / out_covars. */
static inline float fin(float v) {
    if (v != v) return 0.0f;
    if (v > 3.4028234663852886e38f) return 3.4028234663852886e38f;
    if (v < -3.4028234663852886e38f) return -3.4028234663852886e38f;
    return v;
}

void physskin_deform_pack(int s, int e, int K, int H, const float* restrict means, const float* restrict quats,
                          const float* restrict log_scales, const float* restrict W, const float* restrict dW,
                          const int32_t* restrict keep, float min_ls, float* restrict D,
                          float* restrict out_means, float* restrict out_covars)
{
    const size_t R = 4 * (size_t)K + 12;
    for (int i = s; i < e; ++i) {
        float* Dt = D + ((size_t)(i / 8) * R) * 8 + (i % 8);
        const float* Wi = W + (size_t)i * H;
        const float* dWi = dW + (size_t)i * H * 3;
        for (int k = 0; k < K; ++k) {
            int h = keep[k];
            Dt[(4 * k) * 8] = fin(Wi[h]);
            Dt[(4 * k + 1) * 8] = fin(dWi[3 * h]);
            Dt[(4 * k + 2) * 8] = fin(dWi[3 * h + 1]);
            Dt[(4 * k + 3) * 8] = fin(dWi[3 * h + 2]);
        }
        float mu[3];
        for (int a = 0; a < 3; ++a) {
            mu[a] = fin(means[3 * (size_t)i + a]);
            Dt[(4 * K + a) * 8] = mu[a];
            out_means[3 * (size_t)i + a] = mu[a];
        }
        float w = fin(quats[4 * (size_t)i]), x = fin(quats[4 * (size_t)i + 1]);
        float y = fin(quats[4 * (size_t)i + 2]), z = fin(quats[4 * (size_t)i + 3]);
        float nrm = sqrtf(w * w + x * x + y * y + z * z);  /* float: a huge quaternion overflows to the identity */
        if (nrm > 1e-12f && nrm <= 3.4028234663852886e38f) { w /= nrm; x /= nrm; y /= nrm; z /= nrm; }
        else { w = 1.0f; x = y = z = 0.0f; }
        float Rm[9] = {1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
                       2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
                       2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)};
        float sc[3];
        for (int d = 0; d < 3; ++d) {
            float l = log_scales[3 * (size_t)i + d];
            if (l != l) l = min_ls;
            if (l < min_ls) l = min_ls;
            if (l > 20.0f) l = 20.0f;
            sc[d] = expf(l);
        }
        float L[9];
        for (int a = 0; a < 3; ++a)
            for (int d = 0; d < 3; ++d) {
                L[3 * a + d] = Rm[3 * a + d] * sc[d];
                Dt[(4 * K + 3 + 3 * a + d) * 8] = L[3 * a + d];
            }
        float* C = out_covars + 9 * (size_t)i;
        for (int a = 0; a < 3; ++a)
            for (int b = 0; b < 3; ++b)
                C[3 * a + b] = L[3 * a] * L[3 * b] + L[3 * a + 1] * L[3 * b + 1] + L[3 * a + 2] * L[3 * b + 2];
    }
}

/* Export values of Gaussians [s, e) from their deformed covariance factors FL (N, 9) row-major float32, exactly
   as covariance_factor_svd (one-sided Jacobi, 6 sweeps over the column pairs, float64; zero columns completed
   from the first non-zero one in cyclic order; det U = +1) + rotmat_to_quat (Shepperd, w >= 0) + log of the
   singular values clamped to min_ls: quats (N, 4) wxyz and log_scales (N, 3), float32. */
static void cross3d(const double* a, const double* b, double* o) {
    o[0] = a[1] * b[2] - a[2] * b[1]; o[1] = a[2] * b[0] - a[0] * b[2]; o[2] = a[0] * b[1] - a[1] * b[0];
}

void physskin_export_qs(int s, int e, const float* restrict FL, float min_ls, float* restrict quats,
                        float* restrict log_scales)
{
    static const int P[3] = {0, 0, 1}, Q[3] = {1, 2, 2};
    for (int i = s; i < e; ++i) {
        double A[3][3];  /* A[row][col] */
        for (int r = 0; r < 3; ++r) for (int c = 0; c < 3; ++c) A[r][c] = (double)FL[9 * (size_t)i + 3 * r + c];
        for (int sweep = 0; sweep < 6; ++sweep)
            for (int k = 0; k < 3; ++k) {
                int p = P[k], q = Q[k];
                double alpha = 0.0, beta = 0.0, gamma = 0.0;
                for (int r = 0; r < 3; ++r) {
                    alpha += A[r][p] * A[r][p]; beta += A[r][q] * A[r][q]; gamma += A[r][p] * A[r][q];
                }
                if (!(fabs(gamma) > 1e-15 * sqrt(alpha * beta))) continue;
                double zeta = (beta - alpha) / (2.0 * gamma);
                double t = (zeta >= 0 ? 1.0 : -1.0) / (fabs(zeta) + sqrt(1.0 + zeta * zeta));
                double c = 1.0 / sqrt(1.0 + t * t), sn = c * t;
                for (int r = 0; r < 3; ++r) {
                    double ap = A[r][p], aq = A[r][q];
                    A[r][p] = c * ap - sn * aq;
                    A[r][q] = sn * ap + c * aq;
                }
            }
        double sv[3], U[3][3];  /* U[col][row] */
        for (int c = 0; c < 3; ++c) {
            sv[c] = sqrt(A[0][c] * A[0][c] + A[1][c] * A[1][c] + A[2][c] * A[2][c]);
            double d = sv[c] > 1e-300 ? sv[c] : 1e-300;
            for (int r = 0; r < 3; ++r) U[c][r] = A[r][c] / d;
        }
        /* frame completion from the first non-zero column kk, the others in cyclic order (as the reference) */
        int kk = sv[0] > 0 ? 0 : (sv[1] > 0 ? 1 : (sv[2] > 0 ? 2 : 0));
        int cj = (kk + 1) % 3, cl = (kk + 2) % 3;
        double a[3], bb[3], cc[3], alt[3], bj[3], cL[3];
        if (sv[kk] > 0) { a[0] = U[kk][0]; a[1] = U[kk][1]; a[2] = U[kk][2]; }
        else { a[0] = 1.0; a[1] = 0.0; a[2] = 0.0; }
        double dj = U[cj][0] * a[0] + U[cj][1] * a[1] + U[cj][2] * a[2];
        double dl = U[cl][0] * a[0] + U[cl][1] * a[1] + U[cl][2] * a[2];
        for (int r = 0; r < 3; ++r) { bj[r] = U[cj][r] - dj * a[r]; cL[r] = U[cl][r] - dl * a[r]; }
        double nb = sqrt(bj[0] * bj[0] + bj[1] * bj[1] + bj[2] * bj[2]);
        double nc = sqrt(cL[0] * cL[0] + cL[1] * cL[1] + cL[2] * cL[2]);
        const double ez[3] = {0.0, 0.0, 1.0}, ey[3] = {0.0, 1.0, 0.0};
        if (!(sv[kk] > 0)) { bb[0] = 0.0; bb[1] = 1.0; bb[2] = 0.0; }
        else if (sv[cj] > 0 && nb > 1e-12) { for (int r = 0; r < 3; ++r) bb[r] = bj[r] / nb; }
        else if (sv[cl] > 0 && nc > 1e-12) { for (int r = 0; r < 3; ++r) cL[r] /= nc; cross3d(cL, a, bb); }
        else {
            cross3d(a, ez, alt);
            if (!(sqrt(alt[0] * alt[0] + alt[1] * alt[1] + alt[2] * alt[2]) > 1e-6)) cross3d(a, ey, alt);
            double na = sqrt(alt[0] * alt[0] + alt[1] * alt[1] + alt[2] * alt[2]);
            if (na < 1e-300) na = 1e-300;
            for (int r = 0; r < 3; ++r) bb[r] = alt[r] / na;
        }
        cross3d(a, bb, cc);
        double* cols[3];
        double u0[3], u1[3], u2[3];
        cols[0] = u0; cols[1] = u1; cols[2] = u2;
        for (int r = 0; r < 3; ++r) { cols[kk][r] = a[r]; cols[cj][r] = bb[r]; cols[cl][r] = cc[r]; }
        /* R = [u0 u1 u2] (columns); Shepperd on the largest of 4 (w^2, x^2, y^2, z^2) */
        double m00 = u0[0], m11 = u1[1], m22 = u2[2];
        double m01 = u1[0], m02 = u2[0], m10 = u0[1], m12 = u2[1], m20 = u0[2], m21 = u1[2];
        double tt[4] = {1 + m00 + m11 + m22, 1 + m00 - m11 - m22, 1 - m00 + m11 - m22, 1 - m00 - m11 + m22};
        int b = 0;
        for (int k = 1; k < 4; ++k) if (tt[k] > tt[b]) b = k;
        double sq = sqrt(tt[b] > 1e-12 ? tt[b] : 1e-12) * 2.0, qv[4];
        if (b == 0) { qv[0] = sq / 4; qv[1] = (m21 - m12) / sq; qv[2] = (m02 - m20) / sq; qv[3] = (m10 - m01) / sq; }
        else if (b == 1) { qv[0] = (m21 - m12) / sq; qv[1] = sq / 4; qv[2] = (m01 + m10) / sq; qv[3] = (m02 + m20) / sq; }
        else if (b == 2) { qv[0] = (m02 - m20) / sq; qv[1] = (m01 + m10) / sq; qv[2] = sq / 4; qv[3] = (m12 + m21) / sq; }
        else { qv[0] = (m10 - m01) / sq; qv[1] = (m02 + m20) / sq; qv[2] = (m12 + m21) / sq; qv[3] = sq / 4; }
        if (qv[0] < 0) for (int k = 0; k < 4; ++k) qv[k] = -qv[k];
        double qn = sqrt(qv[0] * qv[0] + qv[1] * qv[1] + qv[2] * qv[2] + qv[3] * qv[3]);
        if (qn < 1e-12) qn = 1e-12;
        for (int k = 0; k < 4; ++k) quats[4 * (size_t)i + k] = (float)(qv[k] / qn);
        for (int c = 0; c < 3; ++c) {
            double l = log(sv[c] > 1e-300 ? sv[c] : 1e-300);
            log_scales[3 * (size_t)i + c] = (float)(l > min_ls ? l : min_ls);
        }
    }
}

/* Rest covariances R S^2 R^T of Gaussians [s, e) as GaussianScene.covariances() computes them: quaternions of
   non-finite or <= 1e-12 norm are the identity, scales exp(log_scales) unclamped (NaN stays NaN). */
void physskin_rest_covariances(int s, int e, const float* restrict quats, const float* restrict log_scales,
                               float* restrict out)
{
    for (int i = s; i < e; ++i) {
        float w = quats[4 * (size_t)i], x = quats[4 * (size_t)i + 1];
        float y = quats[4 * (size_t)i + 2], z = quats[4 * (size_t)i + 3];
        float nrm = sqrtf(w * w + x * x + y * y + z * z);
        if (nrm > 1e-12f && nrm <= 3.4028234663852886e38f) { w /= nrm; x /= nrm; y /= nrm; z /= nrm; }
        else { w = 1.0f; x = y = z = 0.0f; }
        float Rm[9] = {1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
                       2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
                       2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)};
        float sc[3] = {expf(log_scales[3 * (size_t)i]), expf(log_scales[3 * (size_t)i + 1]),
                       expf(log_scales[3 * (size_t)i + 2])};
        float L[9];
        for (int a = 0; a < 3; ++a)
            for (int d = 0; d < 3; ++d) L[3 * a + d] = Rm[3 * a + d] * sc[d];
        float* C = out + 9 * (size_t)i;
        for (int a = 0; a < 3; ++a)
            for (int b = 0; b < 3; ++b)
                C[3 * a + b] = L[3 * a] * L[3 * b] + L[3 * a + 1] * L[3 * b + 1] + L[3 * a + 2] * L[3 * b + 2];
    }
}
"""
def _native_kernels():
    """({"deform", "pack", "covariances", "export_qs"}: the compiled functions (ctypes), or None, and the reason
    when None."""
    return _native.functions("physskin_deform", _NATIVE_SRC, {
        "deform": ("physskin_deform", "iippppppp" "iff" "pp", "i"),
        "pack": ("physskin_deform_pack", "iiii" "pppppp" "f" "ppp"),
        "covariances": ("physskin_rest_covariances", "iippp"),
        "export_qs": ("physskin_export_qs", "iipfpp"),
    })


def _native_kernel():
    """The compiled ``physskin_deform`` function (ctypes) or None, and the reason when None."""
    fns, why = _native_kernels()
    return (None, why) if fns is None else (fns["deform"], "")


def factor_quats_scales(FL: torch.Tensor, native: Optional[bool] = None,
                        chunk: int = 1 << 17) -> Tuple[torch.Tensor, torch.Tensor]:
    """Export values of Gaussians from their covariance factors FL (N, 3, 3) (Sigma = FL FL^T, scene units):
    (quats (N, 4) unit wxyz with w >= 0, log_scales (N, 3)) float32, from the SVD FL = U diag(s) V^T with
    det U = +1 (:func:`covariance_factor_svd`, one-sided Jacobi in float64) and
    :func:`physskin_gs.scene.rotmat_to_quat`, log-scales clamped to ``MIN_LOG_SCALE``.

    ``native``: None (default) uses the compiled kernel when available (the same sweeps, frame completion and
    Shepperd quaternion in float64; bit-identical on the tests' inputs and about 8x faster, on the worker
    threads), False the torch reference (in chunks of ``chunk`` rows), True requires the kernel.
    Raises ValueError for FL not (N, 3, 3), RuntimeError for ``native=True`` without a usable kernel."""
    if FL.ndim != 3 or FL.shape[1:] != (3, 3):
        raise ValueError(f"factor_quats_scales: FL must be (N, 3, 3), got {tuple(FL.shape)}")
    N = int(FL.shape[0])
    q = torch.empty(N, 4, dtype=torch.float32)
    ls = torch.empty(N, 3, dtype=torch.float32)
    fn = (_native_kernels()[0] or {}).get("export_qs") if native is not False else None
    if native and fn is None:
        raise RuntimeError(_native_kernel()[1] or "native export kernel unavailable")
    if fn is not None and N:
        FLc = FL.detach().cpu().float().contiguous()
        T = max(1, min(MAX_WORKERS, torch.get_num_threads(), N // 8192))
        cuts = [N * i // T for i in range(T + 1)]
        run_on_workers("deform-pack", lambda _slot, i: fn(cuts[i], cuts[i + 1], FLc.data_ptr(), MIN_LOG_SCALE,
                                                          q.data_ptr(), ls.data_ptr()),
                       list(range(T)), T, torch_ops=False)
        return q, ls
    for s in range(0, N, chunk):
        e = min(N, s + chunk)
        U, sv = covariance_factor_svd(FL[s:e].to(torch.float64))
        q[s:e] = rotmat_to_quat(U).float()
        ls[s:e] = torch.log(sv.clamp_min(1e-300)).clamp_min(MIN_LOG_SCALE).float()
    return q, ls


def rest_covariances(quats: torch.Tensor, log_scales: torch.Tensor) -> torch.Tensor:
    """(N, 3, 3) float32 rest covariances ``R S^2 R^T`` (scene units squared) from quats (N, 4) wxyz (any norm)
    and log_scales (N, 3): the values of :meth:`physskin_gs.scene.GaussianScene.covariances` (the reference;
    quaternions of zero or non-finite norm are the identity, NaN scales give NaN rows) in float32 on the inputs'
    device, computed by the compiled kernel on the worker threads for CPU inputs when available (one pass, about
    10x faster at 1M), else by torch. Raises ValueError for mismatched shapes."""
    N = int(quats.shape[0])
    if quats.shape != (N, 4) or log_scales.shape != (N, 3):
        raise ValueError(f"rest_covariances: quats {tuple(quats.shape)} and log_scales {tuple(log_scales.shape)}")
    fn = (_native_kernels()[0] or {}).get("covariances")
    if fn is None or N == 0 or quats.device.type != "cpu":
        L = quat_to_rotmat(quats.float()) * torch.exp(log_scales.float())[:, None, :]  # [N, 3, 3]
        return L @ L.transpose(1, 2)
    q = quats.detach().cpu().float().contiguous()
    ls = log_scales.detach().cpu().float().contiguous()
    out = torch.empty(N, 3, 3)
    T = max(1, min(MAX_WORKERS, torch.get_num_threads(), N // 65536))
    cuts = [N * i // T for i in range(T + 1)]
    run_on_workers("deform-pack", lambda _slot, i: fn(cuts[i], cuts[i + 1], q.data_ptr(), ls.data_ptr(),
                                                      out.data_ptr()), list(range(T)), T, torch_ops=False)
    return out.to(quats.device)


def native_available() -> bool:
    """Whether the compiled deformation kernel can be used on this machine (see :mod:`physskin_gs._native`)."""
    return _native_kernel()[0] is not None


class GaussianDeformer:
    """Per-frame deformation of N Gaussians by handle transforms (module docstring; method.md 10).

    Only compact per-Gaussian data is kept, float32: W and grad W of the K non-constant handles, the rest mean and
    the rest covariance factor ``L = R S``, i.e. 4K + 12 floats (304 bytes for K = 16) per Gaussian. Handles whose
    weight is exactly 1 with zero gradient for every Gaussian (the field's constant handle) are folded into a
    per-frame bias ``B = [I | 0] + sum_const Z_h``. Per frame, per Gaussian:
    ``P = B + sum_h W_h Z_h`` (3, 4), ``x' = P X~``, ``F = P[:, :3] + sum_h (Z_h X~) grad W_h^T`` (exactly
    ``I + sum_h (W_h A_h + (Z_h X~) grad W_h^T)``), ``Sigma' = (F L)(F L)^T`` (PSD even for det F <= 0).

    Two interchangeable kernels (tests hold both to :func:`deform_reference`):

    * native (default when a C compiler is available, :func:`native_available`): a fused C kernel over tiles of 8
      Gaussians stored tile-major (each tile's 4K + 12 rows of 8 floats contiguous, so one frame streams the data
      once); the clamp test runs inside it and only the flagged F go through the SVD.
    * torch: blocks of ``block_size`` Gaussians stored structure-of-arrays; per block one GEMM
      ``Zt [12, K] @ WG_b [K, 4C]`` gives ``P[a, c, r, n] = sum_h Z_h[a, c] WG[h, r, n]`` (r = 0: W, r = 1..3:
      grad W) and broadcast multiply-adds do the rest in cache.

    With ``torch.get_num_threads() > 1`` the blocks are shared by that many worker threads (at most 8); the torch
    kernel's ops then run single-threaded (torch's thread count is set to 1 during the call and restored).

    Args:
        means: (N, 3) rest centres, scene units. quats: (N, 4) wxyz (any norm; normalised here).
        log_scales: (N, 3) (clamped to >= -30 for numerics). weights: (N, H), weight_grads: (N, H, 3), both in the
            scene frame (grad W in 1/scene-unit).
        chunk_size: Gaussians per chunk for precompute and for the SVD-based kernels (1M+ friendly).
        singular_clamp: (lo, hi) clamp of F's singular values (needle guard) or None.
        block_size: Gaussians per block / per kernel call (results do not depend on it).
        native: True to require the C kernel, False for the torch kernel, None (default) for C when available.
    Gaussians far from the scene's origin (a georeferenced capture) are deformed about ``origin``
    (:func:`physskin_gs.scene.float32_local_origin`; zero near the origin), so the result keeps the means' own
    float32 precision.
    Buffers: ``means`` (N, 3) and ``covars`` (N, 3, 3) are overwritten by each :meth:`deform`; ``FL`` (N, 3, 3)
    is computed on first access after a deform (rendering does not need it).
    Raises ValueError for inconsistent shapes, RuntimeError for ``native=True`` without a usable C kernel.
    """

    def __init__(self, means: torch.Tensor, quats: torch.Tensor, log_scales: torch.Tensor, weights: torch.Tensor,
                 weight_grads: torch.Tensor, chunk_size: int = 1 << 17,
                 singular_clamp: Optional[Tuple[float, float]] = None, block_size: int = 8192,
                 native: Optional[bool] = None) -> None:
        N, H = weights.shape
        if means.shape != (N, 3) or quats.shape != (N, 4) or log_scales.shape != (N, 3) \
                or weight_grads.shape != (N, H, 3):
            raise ValueError(f"GaussianDeformer: inconsistent shapes means {tuple(means.shape)}, quats "
                             f"{tuple(quats.shape)}, log_scales {tuple(log_scales.shape)}, weights "
                             f"{tuple(weights.shape)}, weight_grads {tuple(weight_grads.shape)}")
        self.N, self.H = N, H
        self.chunk = max(1, int(chunk_size))
        self.singular_clamp = singular_clamp
        # constant handles (W == 1 and dW == 0 for every Gaussian) become a per-frame bias
        is_const = torch.zeros(H, dtype=torch.bool)
        if N > 0:  # candidates from the first row, then only their columns are checked (usually one, or none)
            for h in torch.nonzero((weights[0] == 1) & (weight_grads[0] == 0).all(1)).flatten().tolist():
                is_const[h] = bool((weights[:, h] == 1).all()) and bool((weight_grads[:, h] == 0).all())
        self._const = torch.nonzero(is_const).flatten()
        self._keep = torch.nonzero(~is_const).flatten()
        self.K = K = int(self._keep.numel())
        kfn, why = _native_kernel() if native is not False else (None, "")
        if kfn is not None and K > _NATIVE_MAX_HANDLES:
            kfn, why = None, f"native deformation kernel: {K} handles > {_NATIVE_MAX_HANDLES}"
        if native and kfn is None:
            raise RuntimeError(why)
        self.native = kfn is not None
        self._kfn = kfn
        T8 = _NATIVE_TILE
        C = max(1, int(block_size))
        self.block = C = -(-C // T8) * T8 if self.native else C  # native: whole tiles per call
        self.nblocks = nb = (N + C - 1) // C
        f32 = torch.float32
        self._R = R = 4 * K + 12  # floats per Gaussian
        if self.native:  # [tile, row, lane]; both packings write every used lane; the last tile's others are zero
            self._D = torch.empty(-(-N // T8), R, T8, dtype=f32)
            if N % T8:
                self._D[-1, :, N % T8:] = 0.0
        else:
            self.WG = torch.zeros(nb, K, 4, C, dtype=f32)  # [block, handle, (W, dW/dX_b), Gaussian]
            self.Xb = torch.zeros(nb, 3, C, dtype=f32)  # rest means [block, a, Gaussian]
            self.Lb = torch.zeros(nb, 3, 3, C, dtype=f32)  # L = R S [block, a, d, Gaussian]
        self.means = torch.empty(N, 3, dtype=f32)
        self.covars = torch.empty(N, 3, 3, dtype=f32)
        # a capture far from its origin is deformed about a local origin (exact float32 shift), the result shifted
        # back: in absolute coordinates the handle transforms' translations cancel most of the means' digits
        self.origin = float32_local_origin(means) if N > 0 else torch.zeros(3, dtype=torch.float64)  # [3] float64
        self._far = bool((self.origin != 0).any())
        self._origin32 = self.origin.float()
        if self._far:
            means = means.to(f32) - self._origin32  # [N, 3] exact on the shifted axes
        packed = self.native and _PACK_NATIVE
        if packed and N > 0:
            self._pack_native(means, quats, log_scales, weights, weight_grads)
        for s in range(0, 0 if packed else N, self.chunk):  # the torch packing (and the torch kernel's storage)
            e = min(N, s + self.chunk)
            mu = torch.nan_to_num(means[s:e].to(f32))
            Rq = quat_to_rotmat(torch.nan_to_num(quats[s:e].to(f32)))  # normalised inside
            sc = torch.exp(torch.nan_to_num(log_scales[s:e].to(f32), nan=MIN_LOG_SCALE).clamp(MIN_LOG_SCALE, 20.0))
            L = Rq * sc[:, None, :]  # [n, 3, 3]
            self.means[s:e] = mu
            self.covars[s:e] = L @ L.transpose(1, 2)
            Wc = torch.nan_to_num(weights[s:e].to(f32))[:, self._keep]  # [n, K]
            dWc = torch.nan_to_num(weight_grads[s:e].to(f32))[:, self._keep]  # [n, K, 3]
            if self.native:
                rows = torch.cat([torch.cat([Wc[:, :, None], dWc], 2).reshape(e - s, 4 * K), mu,
                                  L.reshape(e - s, 9)], 1)  # [n, R]
                self._native_rows(s, e, rows)
            else:
                self._scatter(s, e, mu, L, Wc, dWc)
        if self._far:
            self.means += self._origin32  # the rest positions as given (exact)
        self._Zt = torch.zeros(12, K, dtype=f32)  # Zt[(a, c), h] = Z[h, a, c]
        self._bias = torch.zeros(12, 1, dtype=f32)
        self._Zk = torch.zeros(max(K, 1), 12, dtype=f32)  # native: Z of the stored handles, row-major 3x4 each
        self._FL_cache: Optional[torch.Tensor] = None
        self._FL_key = None
        self._ws: list = []  # torch kernel: per worker slot temporaries
        self._scratch: list = []  # native kernel: per worker slot clamp scratch
        self._blkv: list = []
        if not self.native:
            self._ws.append(_Workspace(C))
            for b in range(nb):  # per-block views (creating views costs microseconds each, so they are made once)
                s, e = b * C, min(N, (b + 1) * C)
                self._blkv.append(dict(
                    s=s, e=e, n=e - s, WG=self.WG[b].view(K, 4 * C), x=[self.Xb[b, a] for a in range(3)],
                    L=[self.Lb[b, None, j] for j in range(3)], means_T=self.means[s:e].T, covars=self.covars[s:e]))

    # ---------------------------------------------------------------- storage
    def fork(self) -> "GaussianDeformer":
        """A deformer that shares this one's read-only precomputed per-Gaussian data (no copy) but has its own
        output buffers, transforms and temporaries, so two threads can deform concurrently (e.g. the viewer's
        display thread beside the simulation/recording thread). ``singular_clamp`` is copied, not shared."""
        other = copy.copy(self)
        other.means = self.means.clone()
        other.covars = self.covars.clone()
        other._Zt, other._bias, other._Zk = self._Zt.clone(), self._bias.clone(), self._Zk.clone()
        other._FL_cache, other._FL_key = None, None
        other._scratch = []
        other._ws = [] if self.native else [_Workspace(self.block)]
        other._blkv = []
        for v in self._blkv:  # per-block views into the new output buffers
            s, e = v["s"], v["e"]
            other._blkv.append(dict(v, means_T=other.means[s:e].T, covars=other.covars[s:e]))
        return other

    def _pack_native(self, means, quats, log_scales, weights, weight_grads) -> None:
        """Fill the tile storage, ``means`` and ``covars`` with the C packing kernel (one pass, no temporaries;
        the same values as the torch packing of :meth:`_native_rows`, which tests hold it to), on the worker
        threads over tile-aligned ranges."""
        f32 = torch.float32
        ins = [t.detach().cpu().to(f32).contiguous() for t in (means, quats, log_scales, weights, weight_grads)]
        keep = self._keep.to(torch.int32).contiguous()
        pack = _native_kernels()[0]["pack"]
        N, T8 = self.N, _NATIVE_TILE
        T = max(1, min(MAX_WORKERS, torch.get_num_threads(), N // 16384))
        cuts = [min(N, -(-(N * i // T) // T8) * T8) for i in range(T + 1)]
        args = [p.data_ptr() for p in ins]

        def part(_slot: int, i: int) -> None:
            if cuts[i + 1] > cuts[i]:
                pack(cuts[i], cuts[i + 1], self.K, self.H, *args, keep.data_ptr(), MIN_LOG_SCALE,
                     self._D.data_ptr(), self.means.data_ptr(), self.covars.data_ptr())

        run_on_workers("deform-pack", part, list(range(T)), T, torch_ops=False)

    def _native_rows(self, s: int, e: int, rows: torch.Tensor) -> None:
        """Write per-Gaussian rows (e - s, R) of Gaussians [s, e) into the tile-major storage."""
        T8, R = _NATIVE_TILE, self._R
        t0, t1 = s // T8, -(-e // T8)
        pad = torch.zeros((t1 - t0) * T8, R, dtype=rows.dtype)
        pad[s - t0 * T8: s - t0 * T8 + (e - s)] = rows
        if s % T8:  # keep the Gaussians of a shared first tile that an earlier chunk wrote
            keep = self._D[t0].T[: s - t0 * T8]
            pad[: s - t0 * T8] = keep
        self._D[t0:t1] = pad.view(t1 - t0, T8, R).transpose(1, 2)

    def _scatter(self, s: int, e: int, mu, L, Wc, dWc) -> None:
        """Write Gaussians [s, e) (row-per-Gaussian chunk data) into the blocked structure-of-arrays storage."""
        C = self.block
        i = s
        while i < e:
            b, o = divmod(i, C)
            j = min(e, (b + 1) * C)
            r0, r1, o1 = i - s, j - s, o + (j - i)
            self.WG[b, :, 0, o:o1] = Wc[r0:r1].T
            self.WG[b, :, 1:, o:o1] = dWc[r0:r1].permute(1, 2, 0)
            self.Xb[b, :, o:o1] = mu[r0:r1].T
            self.Lb[b, :, :, o:o1] = L[r0:r1].permute(1, 2, 0)
            i = j

    def _native_field(self, lo: int, hi: int) -> torch.Tensor:
        """Rows [lo, hi) of the native storage for every Gaussian: (N, hi - lo) (a copy)."""
        return self._D[:, lo:hi, :].permute(0, 2, 1).reshape(-1, hi - lo)[: self.N].clone()

    @property
    def rest_means(self) -> torch.Tensor:
        """(N, 3) float32 rest centres (a copy)."""
        if self.native:
            local = self._native_field(4 * self.K, 4 * self.K + 3)
        else:
            local = self.Xb.permute(0, 2, 1).reshape(-1, 3)[: self.N].clone()
        return local + self._origin32 if self._far else local

    @property
    def L(self) -> torch.Tensor:
        """(N, 3, 3) float32 rest covariance factor L = R S (a copy)."""
        if self.native:
            return self._native_field(4 * self.K + 3, self._R).view(-1, 3, 3)
        return self.Lb.permute(0, 3, 1, 2).reshape(-1, 3, 3)[: self.N].clone()

    def nbytes_per_frame(self) -> Tuple[int, int]:
        """(bytes read, bytes written) by one :meth:`deform`: the compact per-Gaussian data (tile/block padding
        included) and the means + covariances."""
        if self.native:
            read = self._D.numel() * 4
        else:
            read = (self.WG.numel() + self.Xb.numel() + self.Lb.numel()) * 4
        return read, (self.means.numel() + self.covars.numel()) * 4

    # ---------------------------------------------------------------- per frame
    def _set_Z(self, Z: torch.Tensor) -> None:
        if Z.shape != (self.H, 3, 4):
            raise ValueError(f"handle transforms must be ({self.H}, 3, 4), got {tuple(Z.shape)}")
        if self._far:  # to the local frame, in float64: X = o + X_l gives Z X~ = [A | A o + b] X~_l
            Z = Z.detach().double().clone()
            Z[..., 3] += Z[..., :3] @ self.origin
        Z = torch.nan_to_num(Z.detach().to(torch.float32))
        Zk = Z[self._keep]  # [K, 3, 4]
        self._Zt.copy_(Zk.permute(1, 2, 0).reshape(12, self.K))
        self._Zk[: self.K] = Zk.reshape(self.K, 12)
        bias = Z[self._const].sum(0)  # [3, 4]
        bias[:, :3] += torch.eye(3)
        self._bias.copy_(bias.reshape(12, 1))
        self._FL_cache = None

    def _run(self, fn, nslots_extra=None, torch_ops: bool = True) -> None:
        """Call fn(slot, b) for every block b: serially (slot 0), or shared by worker threads (slots 0..T-1) when
        torch has more than one thread; blocks are handed out one at a time, so a busy core holds no one back
        (:func:`physskin_gs._threads.run_on_workers`)."""
        T = min(torch.get_num_threads(), MAX_WORKERS, self.nblocks)
        if T > 1 and nslots_extra is not None:
            nslots_extra(T)
        run_on_workers("deform", fn, range(self.nblocks), T, torch_ops=torch_ops)

    # native kernel ----------------------------------------------------
    def _native_pass(self, means: Optional[torch.Tensor], covars: Optional[torch.Tensor],
                     Fo: Optional[torch.Tensor], FLo: Optional[torch.Tensor]) -> None:
        """One kernel pass over all Gaussians for the current Z, writing the given (N, .) outputs; F clamped as
        set by ``singular_clamp`` (flagged Gaussians fixed afterwards in torch)."""
        clamp = self.singular_clamp is not None
        lo, hi = self.singular_clamp if clamp else (0.0, 0.0)
        C, R, K, N = self.block, self._R, self.K, self.N
        nb = self.nblocks
        flagged = [None] * nb
        scratch = self._scratch  # per worker slot: flagged indices and their F

        def ensure(T: int) -> None:
            while len(scratch) < T:
                scratch.append((torch.empty(C, dtype=torch.int32), torch.empty(C, 9, dtype=torch.float32)))

        ensure(1)
        base = self._D.data_ptr()
        ptrs = [t.data_ptr() if t is not None else None for t in (means, covars, Fo, FLo)]
        widths = (3, 9, 9, 9)
        zk, bias = self._Zk.data_ptr(), self._bias.data_ptr()

        def one(slot: int, b: int) -> None:
            s = b * C
            n = min(N, s + C) - s
            bad, Fbad = scratch[slot]
            outs = [p + 4 * w * s if p is not None else None for p, w in zip(ptrs, widths)]
            k = self._kfn(K, n, base + 4 * R * s, zk, bias, *outs, int(clamp), lo, hi, bad.data_ptr(), Fbad.data_ptr())
            if k < 0:
                raise RuntimeError("native deformation kernel: too many handles (> 256)")
            if k:
                flagged[b] = (s + bad[:k].long(), Fbad[:k].clone())

        self._run(one, ensure, torch_ops=False)
        fixes = [f for f in flagged if f is not None]
        if fixes:
            idx = torch.cat([f[0] for f in fixes])
            Fc = clamp_singular_values(torch.cat([f[1] for f in fixes]).view(-1, 3, 3), lo, hi)
            t, lane = idx // _NATIVE_TILE, idx % _NATIVE_TILE
            L = self._D[t, 4 * K + 3:, lane].view(-1, 3, 3)  # [k, 3, 3]
            FL = Fc @ L
            if covars is not None:
                covars[idx] = FL @ FL.transpose(1, 2)
            if Fo is not None:
                Fo[idx] = Fc.view(-1, 9)
            if FLo is not None:
                FLo[idx] = FL.reshape(-1, 9)

    # torch kernel ----------------------------------------------------
    def _block_F(self, ws: _Workspace, b: int, write_means: bool = False) -> torch.Tensor:
        """F (3, 3, C) of block b for the current Z (``ws.F``); the block's deformed means go to ``self.means``
        when ``write_means``."""
        v = self._blkv[b]
        torch.mm(self._Zt, v["WG"], out=ws.P)  # P[(a, c), (r, n)] = sum_h Z[h, a, c] WG[h, r, n]
        ws.P0.add_(self._bias)  # r = 0: + [I | 0] + constant handles
        Pc, x, Q = ws.Pc, v["x"], ws.Q
        torch.addcmul(Pc[3], Pc[0], x[0], out=Q)  # Q[a, r, n] = sum_c P[a, c, r, n] X~_c
        Q.addcmul_(Pc[1], x[1])
        Q.addcmul_(Pc[2], x[2])
        if write_means:
            n = v["n"]
            v["means_T"].copy_(ws.Q0 if n == self.block else ws.Q0[:, :n])
        return torch.add(ws.PF, ws.Q1, out=ws.F)  # F[a, b] = P[a, b, 0] + Q[a, 1 + b]

    def _block_clamp(self, ws: _Workspace, n: int) -> None:
        """Clamp the singular values of the first n columns of ``ws.F`` (3, 3, C) in place. Only columns that may
        violate the bounds go through :func:`clamp_singular_values`: ``|F|_F^2 <= hi^2`` and
        ``det F >= lo |F|_F^2`` (checked with a 1e-5 margin) imply ``lo <= s_i <= hi``, since
        ``s_max <= |F|_F`` and ``det F = s_1 s_2 s_3 <= s_min |F|_F^2``."""
        lo, hi = self.singular_clamp
        F, Fe = ws.F, ws.Fe
        Fe[:, 3:].copy_(Fe[:, :2])
        # det F = F[0] . (F[1] x F[2]), the cross product from the repeated columns
        torch.mul(Fe[1, 1:4], Fe[2, 2:5], out=ws.cross)
        ws.cross.addcmul_(Fe[1, 2:5], Fe[2, 1:4], value=-1.0)
        torch.sum(F[0] * ws.cross, 0, out=ws.det)
        torch.sum(F.square().view(9, -1), 0, out=ws.fro2)
        margin = torch.maximum(ws.fro2 - hi * hi * (1 - 1e-5), ws.fro2 * (lo * (1 + 1e-5)) - ws.det)  # > 0: check
        margin = torch.where(torch.isnan(margin), torch.ones_like(margin), margin)
        if n < F.shape[2]:
            margin = margin[:n]
        if not bool((margin > 0).any()):
            return
        idx = torch.nonzero(margin > 0).flatten()
        F[:, :, idx] = clamp_singular_values(F[:, :, idx].permute(2, 0, 1), lo, hi).permute(1, 2, 0)

    def _block_FL(self, ws: _Workspace, b: int) -> torch.Tensor:
        """F L (3, 3, C) of block b from ``ws.F`` (into ``ws.FL``): FL[a, d] = sum_b F[a, b] L[b, d]."""
        Fb, L = ws.Fb, self._blkv[b]["L"]
        FL = torch.mul(Fb[0], L[0], out=ws.FL)
        FL.addcmul_(Fb[1], L[1])
        FL.addcmul_(Fb[2], L[2])
        return FL

    def _frame_block(self, slot: int, b: int) -> None:
        """Deformed means and covariances of block b into ``self.means`` / ``self.covars`` (torch kernel)."""
        ws, v = self._ws[slot], self._blkv[b]
        self._block_F(ws, b, write_means=True)
        if self.singular_clamp is not None:
            self._block_clamp(ws, v["n"])
        self._block_FL(ws, b)
        S, FLa, FLb = ws.S, ws.FLa, ws.FLb
        torch.mul(FLa[0], FLb[0], out=S)  # S[a, e] = sum_d FL[a, d] FL[e, d]
        S.addcmul_(FLa[1], FLb[1])
        S.addcmul_(FLa[2], FLb[2])
        n = v["n"]
        v["covars"].copy_(ws.aos["S"] if n == self.block else ws.aos["S"][:n])

    def _workspaces(self, T: int) -> None:
        while len(self._ws) < T:
            self._ws.append(_Workspace(self.block))

    # ---------------------------------------------------------------- public
    def deform(self, Z: torch.Tensor, gradients: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        """Apply handle transforms Z (H, 3, 4) (scene frame). Returns (means (N, 3), covars (N, 3, 3)), float32
        buffers owned by the deformer (overwritten by the next call; clone to keep). ``x' = X + sum_h W_h Z_h X~``
        (PhysSkin Eq. 2), ``Sigma' = (F L)(F L)^T`` with F as in method.md 3 (grad-W term included), F's singular
        values clamped first when ``singular_clamp`` is set (method.md 10).

        ``gradients``: an optional (N, 3, 3) float32 contiguous CPU tensor that also receives F (as
        :meth:`deformation_gradients`), in the same pass with the native kernel (the viewer's view-dependent colour
        needs it every frame). Raises ValueError if Z is not (H, 3, 4) or ``gradients`` is not (N, 3, 3) float32
        contiguous."""
        if gradients is not None and (tuple(gradients.shape) != (self.N, 3, 3) or gradients.dtype != torch.float32
                                      or not gradients.is_contiguous() or gradients.device.type != "cpu"):
            raise ValueError(f"gradients must be a ({self.N}, 3, 3) float32 contiguous CPU tensor")
        self._set_Z(Z)
        if self.native:
            self._native_pass(self.means, self.covars, None if gradients is None else gradients.view(self.N, 9), None)
        else:
            self._run(self._frame_block, self._workspaces)
            if gradients is not None:
                gradients.copy_(self._gather("F"))
        if self._far:
            self.means += self._origin32  # one rounding: the positions' own float32 precision
        return self.means, self.covars

    def _gather(self, key: str) -> torch.Tensor:
        """(N, 3, 3) float32 F (key "F") or F L (key "FL") for the last Z (F clamped when a clamp is set)."""
        out = torch.empty(self.N, 3, 3, dtype=torch.float32)
        if self.native:
            o = out.view(self.N, 9)
            self._native_pass(None, None, o if key == "F" else None, o if key == "FL" else None)
            return out

        def fn(slot: int, b: int) -> None:
            ws, v = self._ws[slot], self._blkv[b]
            self._block_F(ws, b)
            if self.singular_clamp is not None:
                self._block_clamp(ws, v["n"])
            if key == "FL":
                self._block_FL(ws, b)
            out[v["s"]:v["e"]] = ws.aos[key][: v["n"]]

        self._run(fn, self._workspaces)
        return out

    @property
    def FL(self) -> torch.Tensor:
        """(N, 3, 3) float32 F L of the last :meth:`deform` (after any clamp); computed on first access."""
        key = self.singular_clamp
        if self._FL_cache is None or self._FL_key != key:
            self._FL_cache, self._FL_key = self._gather("FL"), key
        return self._FL_cache

    def deformation_gradients(self) -> torch.Tensor:
        """(N, 3, 3) float32 F of the last :meth:`deform` call (after any clamp)."""
        return self._gather("F")

    def view_rotations(self) -> torch.Tensor:
        """(N, 3, 3) float32 R_F (polar rotation of F) for the last :meth:`deform` call; chunked."""
        F = self.deformation_gradients()
        out = torch.empty(self.N, 3, 3, dtype=torch.float32)
        for s in range(0, self.N, self.chunk):
            e = min(self.N, s + self.chunk)
            out[s:e] = polar_rotation(F[s:e])  # float64 inside, float32 out
        return out

    def export_quats_scales(self, native: Optional[bool] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        """(quats (N, 4) unit wxyz, log_scales (N, 3)) float32 of the last deformed covariances
        (:func:`factor_quats_scales` of F L; ``native`` as there)."""
        return factor_quats_scales(self.FL, native=native, chunk=self.chunk)
