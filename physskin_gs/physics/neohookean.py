"""Stable Neo-Hookean elasticity: analytic energy, first Piola stress, 9x9 Hessian and its PSD projection.

Energy density (method.md 6.2, 9.2; Smith et al. 2018 without the log term):

    psi(F) = mu/2 (tr(F^T F) - 3) + lam/2 (J - 1)^2 - mu (J - 1),     J = det F
    P      = dpsi/dF = mu F + (lam (J - 1) - mu) cof(F),               cof(F) = J F^-T
    d2psi  = mu I_9 + lam vec(cof F) vec(cof F)^T + (lam (J - 1) - mu) d2J/dF2

``vec`` is row-major throughout (F_ab at index 3a + b), matching :func:`physskin_gs.lbs.deformation_jacobian`.
``d2J/dF_ab dF_cd = eps_ace eps_bdf F_ef`` (Levi-Civita), so the exact Hessian is one small GEMM.

The PSD projection uses the analytic eigensystem (method.md 9.2 [R]): with the rotation-variant SVD
``F = U diag(s) V^T`` (U, V in SO(3), s_2 may be negative), the Hessian in the frame ``dF = U M V^T`` splits
into three 2x2 twist/flip blocks ``[[mu, -c s_k], [-c s_k, mu]]`` (c = lam (J - 1) - mu) with eigenvalues
``mu -/+ c s_k``, and one 3x3 scaling block ``mu I + lam g g^T + c [[0, s2, s1], [s2, 0, s0], [s1, s0, 0]]``,
g = (s1 s2, s0 s2, s0 s1). Each block is clamped in closed form, then rotated back with ``U (x) V``.
Everything is vectorised over points with no per-point LAPACK call: the SVD runs as structure-of-arrays numpy
float64 code and the rotation back is two small batched matmuls (measured on the shared 2-core box, 1 thread,
1024 points: ~5 ms CPU against ~13 ms for ``torch.linalg.eigh`` clamping). :func:`project_psd_eigh` is the plain
reference.
"""

from __future__ import annotations

import math
from typing import Tuple

import numpy as np
import torch

__all__ = [
    "energy_density",
    "first_piola",
    "hessian",
    "project_psd_eigh",
    "projected_hessian",
    "projected_hessian_soa",
    "svd3",
    "sym3_eigh",
]


def _levi_civita_product(dtype, device) -> torch.Tensor:
    """(81, 9) tensor E with ``vec(d2J/dF2)[(ab),(cd)] = sum_ef E[(ab)(cd), (ef)] F_ef``."""
    eps = torch.zeros(3, 3, 3, dtype=dtype, device=device)
    for i, j, k in ((0, 1, 2), (1, 2, 0), (2, 0, 1)):
        eps[i, j, k] = 1.0
        eps[i, k, j] = -1.0
    # E[a,b,c,d,e,f] = eps[a,c,e] * eps[b,d,f]
    E = torch.einsum("ace,bdf->abcdef", eps, eps)
    return E.reshape(81, 9)


_LC_CACHE: dict = {}


def _lc(dtype, device) -> torch.Tensor:
    key = (dtype, str(device))
    if key not in _LC_CACHE:
        _LC_CACHE[key] = _levi_civita_product(dtype, device)
    return _LC_CACHE[key]


def _det3(F: torch.Tensor) -> torch.Tensor:
    """Determinant of (..., 3, 3) by the explicit cofactor formula (no LAPACK, batched, differentiable)."""
    return (
        F[..., 0, 0] * (F[..., 1, 1] * F[..., 2, 2] - F[..., 1, 2] * F[..., 2, 1])
        - F[..., 0, 1] * (F[..., 1, 0] * F[..., 2, 2] - F[..., 1, 2] * F[..., 2, 0])
        + F[..., 0, 2] * (F[..., 1, 0] * F[..., 2, 1] - F[..., 1, 1] * F[..., 2, 0])
    )


def _cofactor(F: torch.Tensor) -> torch.Tensor:
    """cof(F) = dJ/dF = J F^-T for (..., 3, 3), defined also for singular F (rows: cross products of columns)."""
    c0, c1, c2 = F[..., :, 0], F[..., :, 1], F[..., :, 2]
    # column j of cof(F) is (c_{j+1} x c_{j+2})
    return torch.stack([torch.linalg.cross(c1, c2), torch.linalg.cross(c2, c0), torch.linalg.cross(c0, c1)], dim=-1)


def energy_density(F: torch.Tensor, mu, lam) -> torch.Tensor:
    """Stable Neo-Hookean psi(F): F (..., 3, 3) -> (...,) in J/m^3 (method.md 6.2). mu, lam: Pa (scalar or (...,))."""
    J = _det3(F)
    I1 = (F * F).sum((-2, -1))
    return 0.5 * mu * (I1 - 3.0) + 0.5 * lam * (J - 1.0) ** 2 - mu * (J - 1.0)


def first_piola(F: torch.Tensor, mu, lam) -> torch.Tensor:
    """First Piola-Kirchhoff stress P = mu F + (lam (J-1) - mu) cof(F); F (..., 3, 3) -> (..., 3, 3), Pa."""
    J = _det3(F)
    c = lam * (J - 1.0) - mu
    if torch.is_tensor(c) and c.ndim > 0:
        c = c[..., None, None]
    return mu * F + c * _cofactor(F)


def hessian(F: torch.Tensor, mu, lam, c=None) -> torch.Tensor:
    """Exact (possibly indefinite) d2psi/dF2 as (n, 9, 9), row-major vec. F: (n, 3, 3); mu, lam scalars or (n,).

    ``c``: optional (n,) coefficient of d2J/dF2 in Pa, in place of ``lam (J - 1) - mu``. The mean-dilatation split
    of :class:`physskin_gs.physics.simulator.SubspaceSimulator` (``volume_clusters``) passes
    ``c = lam_p (J - 1) + (lam - lam_p) (Jbar - 1) - mu`` with ``lam = lam_p`` for the per-point rank-one term, and
    adds the clusters' rank-one terms itself."""
    n = F.shape[0]
    Fv = F.reshape(n, 9)
    J = _det3(F)
    g = _cofactor(F).reshape(n, 9)
    HJ = (Fv @ _lc(F.dtype, F.device).T).reshape(n, 9, 9)  # d2J/dF2
    mu_t = torch.as_tensor(mu, dtype=F.dtype, device=F.device)
    lam_t = torch.as_tensor(lam, dtype=F.dtype, device=F.device)
    c = lam_t * (J - 1.0) - mu_t if c is None else torch.as_tensor(c, dtype=F.dtype, device=F.device)  # [n]
    eye = torch.eye(9, dtype=F.dtype, device=F.device)
    mu_b = mu_t[..., None, None] if mu_t.ndim else mu_t
    lam_b = lam_t[..., None, None] if lam_t.ndim else lam_t
    return mu_b * eye + lam_b * g[:, :, None] * g[:, None, :] + c[:, None, None] * HJ


def project_psd_eigh(H: torch.Tensor, floor: float = 0.0) -> torch.Tensor:
    """Reference PSD projection by eigen-clamping: (n, k, k) symmetric -> (n, k, k) with eigenvalues >= floor."""
    Hs = 0.5 * (H + H.transpose(-1, -2))
    lam, Q = torch.linalg.eigh(Hs)
    return (Q * lam.clamp_min(floor)[..., None, :]) @ Q.transpose(-1, -2)


# --------------------------------------------------------------------------------------------------------------
# Closed-form symmetric 3x3 eigensolver and rotation-variant 3x3 SVD.
# Structure-of-arrays numpy float64 code: every quantity is a contiguous (n,) array, so the ~350 elementwise
# operations cost ~1-2 us each for n ~ 1e3 (torch's per-op overhead on strided slices is 5-15 us).
# Eigenvalues by the trigonometric formula, eigenvectors by Eberly's robust method ("A Robust Eigensolver for
# 3x3 Symmetric Matrices"): the most isolated eigenvalue's vector from the best row cross product, the middle
# one inside the orthogonal complement, the last by a cross product.
# --------------------------------------------------------------------------------------------------------------


def _cross(a, b):
    return (a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0])


def _dot(a, b):
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]


def _sel(mask, a, b):
    return tuple(np.where(mask, x, y) for x, y in zip(a, b))


def _normalize(v, fallback):
    n = np.sqrt(_dot(v, v))
    ok = n > 1e-300
    inv = 1.0 / np.where(ok, n, 1.0)
    return _sel(ok, (v[0] * inv, v[1] * inv, v[2] * inv), fallback)


def _orthogonal_unit(e):
    """A unit vector orthogonal to unit e: e x x-axis or e x y-axis (whichever is better conditioned)."""
    zero = np.zeros_like(e[0])
    use_x = np.abs(e[0]) < 0.9
    w = _sel(use_x, (zero, e[2], -e[1]), (-e[2], zero, e[0]))
    n = np.sqrt(_dot(w, w))
    inv = 1.0 / np.maximum(n, 1e-300)
    return (w[0] * inv, w[1] * inv, w[2] * inv)


def _sym3_eigh_soa(a00, a01, a02, a11, a12, a22):
    """Eigen-decomposition of symmetric 3x3 matrices given as six (n,) float64 component arrays.

    Returns ((l0, l1, l2) descending, (v0, v1, v2) unit eigenvectors as 3-tuples of (n,) arrays, right-handed).
    """
    one = np.ones_like(a00)
    zero = np.zeros_like(a00)
    scale = np.maximum.reduce([np.abs(a00), np.abs(a01), np.abs(a02), np.abs(a11), np.abs(a12), np.abs(a22)])
    scale = np.where(scale > 0, scale, 1.0)
    inv = 1.0 / scale
    a00, a01, a02, a11, a12, a22 = a00 * inv, a01 * inv, a02 * inv, a11 * inv, a12 * inv, a22 * inv
    q = (a00 + a11 + a22) / 3.0
    b00, b11, b22 = a00 - q, a11 - q, a22 - q
    p2 = (b00 * b00 + b11 * b11 + b22 * b22 + 2.0 * (a01 * a01 + a02 * a02 + a12 * a12)) / 6.0
    p = np.sqrt(p2)
    iso = p <= 1e-150  # a multiple of the identity
    ip = 1.0 / np.where(iso, 1.0, p)
    c00, c11, c22, c01, c02, c12 = b00 * ip, b11 * ip, b22 * ip, a01 * ip, a02 * ip, a12 * ip
    det = c00 * (c11 * c22 - c12 * c12) - c01 * (c01 * c22 - c12 * c02) + c02 * (c01 * c12 - c11 * c02)
    r = np.clip(0.5 * det, -1.0, 1.0)
    phi = np.arccos(r) / 3.0
    l0 = q + 2.0 * p * np.cos(phi)
    l2 = q + 2.0 * p * np.cos(phi + 2.0 * math.pi / 3.0)
    l1 = 3.0 * q - l0 - l2
    iso_max = r >= 0
    li = np.where(iso_max, l0, l2)
    # rows of A - li I and their cross products
    r0 = (a00 - li, a01, a02)
    r1 = (a01, a11 - li, a12)
    r2 = (a02, a12, a22 - li)
    x01, x02, x12 = _cross(r0, r1), _cross(r0, r2), _cross(r1, r2)
    n01, n02, n12 = _dot(x01, x01), _dot(x02, x02), _dot(x12, x12)
    best = _sel(n01 >= n02, x01, x02)
    nb = np.maximum(n01, n02)
    best = _sel(n12 > nb, x12, best)
    ex = (one, zero, zero)
    e_iso = _normalize(best, ex)
    # middle eigenvector inside the plane orthogonal to e_iso
    u = _orthogonal_unit(e_iso)
    v = _cross(e_iso, u)
    Au = (a00 * u[0] + a01 * u[1] + a02 * u[2], a01 * u[0] + a11 * u[1] + a12 * u[2], a02 * u[0] + a12 * u[1] + a22 * u[2])
    Av = (a00 * v[0] + a01 * v[1] + a02 * v[2], a01 * v[0] + a11 * v[1] + a12 * v[2], a02 * v[0] + a12 * v[1] + a22 * v[2])
    m00 = _dot(u, Au) - l1
    m01 = _dot(u, Av)
    m11 = _dot(v, Av) - l1
    row0 = np.abs(m00) >= np.abs(m11)
    x = np.where(row0, -m01, m11)
    y = np.where(row0, m00, -m01)
    nrm = np.sqrt(x * x + y * y)
    okm = nrm > 0
    invn = 1.0 / np.where(okm, nrm, 1.0)
    x = np.where(okm, x * invn, 1.0)
    y = np.where(okm, y * invn, 0.0)
    e_mid = (x * u[0] + y * v[0], x * u[1] + y * v[1], x * u[2] + y * v[2])
    e_oth = _cross(e_iso, e_mid)
    v0 = _sel(iso_max, e_iso, e_oth)
    v2 = _sel(iso_max, e_oth, e_iso)
    v1 = e_mid
    # right-handed: det [v0 v1 v2] = v0 . (v1 x v2)
    d = _dot(v0, _cross(v1, v2))
    sgn = np.where(d < 0, -1.0, 1.0)
    v2 = (v2[0] * sgn, v2[1] * sgn, v2[2] * sgn)
    v0 = _sel(iso, (one, zero, zero), v0)
    v1 = _sel(iso, (zero, one, zero), v1)
    v2 = _sel(iso, (zero, zero, one), v2)
    l0, l1, l2 = (np.where(iso, q, l) * scale for l in (l0, l1, l2))
    return (l0, l1, l2), (v0, v1, v2)


def _np64(t: torch.Tensor) -> np.ndarray:
    return t.detach().to(torch.float64).cpu().numpy()


def sym3_eigh(A: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Eigen-decomposition of symmetric (..., 3, 3) matrices in closed form (see the section comment).

    Returns (eigenvalues (..., 3) in DESCENDING order, eigenvectors (..., 3, 3) as columns, right-handed), float64.
    Accurate to ~1e-12 relative for eigenvalues; eigenvectors reconstruct A to ~1e-9 relative.
    """
    shape = A.shape[:-2]
    a = _np64(A.reshape(-1, 9)).T.copy()  # [9, n]
    lams, vecs = _sym3_eigh_soa(a[0], a[1], a[2], a[4], a[5], a[8])
    lam = torch.from_numpy(np.stack(lams, -1)).reshape(*shape, 3)
    V = torch.from_numpy(np.stack([np.stack(v, -1) for v in vecs], -1)).reshape(*shape, 3, 3)
    return lam, V


def _svd3_soa(f):
    """Rotation-variant SVD from nine (n,) component arrays f[3a+b] = F_ab; returns (U cols, s, V cols)."""
    # S = F^T F
    s00 = f[0] * f[0] + f[3] * f[3] + f[6] * f[6]
    s01 = f[0] * f[1] + f[3] * f[4] + f[6] * f[7]
    s02 = f[0] * f[2] + f[3] * f[5] + f[6] * f[8]
    s11 = f[1] * f[1] + f[4] * f[4] + f[7] * f[7]
    s12 = f[1] * f[2] + f[4] * f[5] + f[7] * f[8]
    s22 = f[2] * f[2] + f[5] * f[5] + f[8] * f[8]
    (l0, l1, _), (v0, v1, v2) = _sym3_eigh_soa(s00, s01, s02, s11, s12, s22)

    def Fv(v):
        return (f[0] * v[0] + f[1] * v[1] + f[2] * v[2], f[3] * v[0] + f[4] * v[1] + f[5] * v[2],
                f[6] * v[0] + f[7] * v[1] + f[8] * v[2])

    w0, w1, w2 = Fv(v0), Fv(v1), Fv(v2)
    one, zero = np.ones_like(f[0]), np.zeros_like(f[0])
    u0 = _normalize(w0, (one, zero, zero))
    t = _dot(w1, u0)
    w1o = (w1[0] - t * u0[0], w1[1] - t * u0[1], w1[2] - t * u0[2])
    n1 = np.sqrt(_dot(w1o, w1o))
    big = n1 > 1e-12 * np.maximum(np.sqrt(np.maximum(l0, 0.0)), 1e-300)
    u1 = _sel(big, tuple(c / np.where(big, n1, 1.0) for c in w1o), _orthogonal_unit(u0))
    u2 = _cross(u0, u1)
    s = (_dot(u0, w0), _dot(u1, w1), _dot(u2, w2))
    return (u0, u1, u2), s, (v0, v1, v2)


def svd3(F: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rotation-variant SVD ``F = U diag(s) V^T`` of (..., 3, 3), U and V proper rotations (det +1), s sorted by
    magnitude descending with only the last entry possibly negative (det F < 0 means inverted).

    Closed form via the eigen-decomposition of F^T F (float64, vectorised). Returns float64 (U, s, V).
    """
    shape = F.shape[:-2]
    f = _np64(F.reshape(-1, 9)).T.copy()
    us, s, vs = _svd3_soa(f)
    U = torch.from_numpy(np.stack([np.stack(u, -1) for u in us], -1)).reshape(*shape, 3, 3)
    V = torch.from_numpy(np.stack([np.stack(v, -1) for v in vs], -1)).reshape(*shape, 3, 3)
    return U, torch.from_numpy(np.stack(s, -1)).reshape(*shape, 3), V


def _project_sym3_soa(a00, a01, a02, a11, a12, a22):
    """Clamp negative eigenvalues of symmetric 3x3 matrices (six (n,) arrays) to zero; PD ones unchanged."""
    m2 = a00 * a11 - a01 * a01
    det = a00 * (a11 * a22 - a12 * a12) - a01 * (a01 * a22 - a12 * a02) + a02 * (a01 * a12 - a11 * a02)
    bad = ~((a00 > 0) & (m2 > 0) & (det > 0))
    out = [a00, a01, a02, a11, a12, a22]
    if not bad.any():
        return out
    idx = np.nonzero(bad)[0]
    (l0, l1, l2), (v0, v1, v2) = _sym3_eigh_soa(*(x[idx] for x in out))
    l0, l1, l2 = np.maximum(l0, 0.0), np.maximum(l1, 0.0), np.maximum(l2, 0.0)
    comps = [(0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2)]
    res = []
    for (i, j), x in zip(comps, out):
        y = x.copy()
        y[idx] = l0 * v0[i] * v0[j] + l1 * v1[i] * v1[j] + l2 * v2[i] * v2[j]
        res.append(y)
    return res


_I = [0, 0, 1]  # the pairs (i, j) = (0,1), (0,2), (1,2) of twist / flip modes
_J = [1, 2, 2]


def projected_hessian(F: torch.Tensor, mu, lam) -> torch.Tensor:
    """PSD-projected stable Neo-Hookean Hessian (n, 9, 9) from the analytic eigensystem (module docstring).

    F: (n, 3, 3) (any float dtype; computed in float64 and returned in F's dtype). mu, lam: Pa, scalars or (n,).
    Equals :func:`project_psd_eigh` applied to :func:`hessian` (tested).
    """
    n = F.shape[0]
    mu_a = _np64(mu) if torch.is_tensor(mu) else mu
    lam_a = _np64(lam) if torch.is_tensor(lam) else lam
    return projected_hessian_soa(_np64(F.reshape(n, 9)).T.copy(), mu_a, lam_a, F.dtype)


def projected_hessian_soa(f: np.ndarray, mu, lam, dtype=torch.float32, c=None) -> torch.Tensor:
    """:func:`projected_hessian` from F given as structure-of-arrays: f (9, n) float64 with f[3a + b] = F_ab
    (contiguous rows). mu, lam: Pa, scalars or (n,) arrays. Returns (n, 9, 9) torch tensor in ``dtype``; the
    eigensystem is computed in float64, the rotation back (a batched 9x9 product) in ``dtype``. ``c``: optional
    (n,) coefficient of d2J/dF2 in Pa, in place of ``lam (J - 1) - mu`` (as in :func:`hessian`)."""
    n = f.shape[1]
    (u0, u1, u2), (s0, s1, s2), (v0, v1, v2) = _svd3_soa(f)
    mu_a = np.broadcast_to(np.asarray(mu, dtype=np.float64), (n,))
    lam_a = np.broadcast_to(np.asarray(lam, dtype=np.float64), (n,))
    J = s0 * s1 * s2
    c = lam_a * (J - 1.0) - mu_a if c is None else np.broadcast_to(np.asarray(c, dtype=np.float64), (n,))
    # scaling block (modes u_i v_i^T), projected in closed form where needed
    g0, g1, g2 = s1 * s2, s0 * s2, s0 * s1
    A = _project_sym3_soa(mu_a + lam_a * g0 * g0, lam_a * g0 * g1 + c * s2, lam_a * g0 * g2 + c * s1,
                          mu_a + lam_a * g1 * g1, lam_a * g1 * g2 + c * s0, mu_a + lam_a * g2 * g2)
    # twist / flip eigenvalues for pairs (i, j) = (0,1), (0,2), (1,2) with third index k = 2, 1, 0
    wd = np.float32 if dtype == torch.float32 else np.float64  # rotation back in the caller's precision
    sk = np.stack([s2, s1, s0], 1)  # [n, 3]
    flip = np.maximum(mu_a[:, None] - c[:, None] * sk, 0.0).astype(wd)  # modes (u_i v_j^T + u_j v_i^T) / sqrt 2
    twist = np.maximum(mu_a[:, None] + c[:, None] * sk, 0.0).astype(wd)  # modes (u_i v_j^T - u_j v_i^T) / sqrt 2
    # projected Hessian = C^T B with C the 9 unit modes (rows) and B the clamped block matrix applied to them:
    # twist and flip modes are eigenvectors; the 3 scaling modes u_i v_i^T carry the clamped 3x3 block A+.
    U = np.stack([np.stack(u, -1) for u in (u0, u1, u2)], 1).astype(wd)  # [n, i, a]
    V = np.stack([np.stack(v, -1) for v in (v0, v1, v2)], 1).astype(wd)  # [n, j, b]
    Pij = U[:, _I, :, None] * V[:, _J, None, :]  # [n, pair, a, b] = u_i v_j^T
    Pji = U[:, _J, :, None] * V[:, _I, None, :]  # u_j v_i^T
    r = wd(1.0 / math.sqrt(2.0))
    C = np.empty((n, 9, 3, 3), dtype=wd)
    np.subtract(Pij, Pji, out=C[:, 0:3])
    np.add(Pij, Pji, out=C[:, 3:6])
    C[:, 0:6] *= r
    np.multiply(U[:, :, :, None], V[:, :, None, :], out=C[:, 6:9])  # scaling modes u_i v_i^T
    C = C.reshape(n, 9, 9)
    B = np.empty((n, 9, 9), dtype=wd)
    np.multiply(C[:, 0:3], twist[:, :, None], out=B[:, 0:3])
    np.multiply(C[:, 3:6], flip[:, :, None], out=B[:, 3:6])
    Ap = np.stack([A[0], A[1], A[2], A[1], A[3], A[4], A[2], A[4], A[5]], 1).astype(wd).reshape(n, 3, 3)
    np.matmul(Ap, C[:, 6:9], out=B[:, 6:9])
    return torch.from_numpy(np.matmul(C.transpose(0, 2, 1), B))
