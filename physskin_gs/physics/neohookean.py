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
Everything is vectorised over points; no per-point LAPACK call (``torch.linalg.eigh`` on 1024 9x9 matrices
costs ~13 ms on 2 cores, this path well under 1 ms). :func:`project_psd_eigh` is the plain reference.
"""

from __future__ import annotations

import math
from typing import Tuple

import torch

__all__ = [
    "energy_density",
    "first_piola",
    "hessian",
    "project_psd_eigh",
    "projected_hessian",
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


def hessian(F: torch.Tensor, mu, lam) -> torch.Tensor:
    """Exact (possibly indefinite) d2psi/dF2 as (n, 9, 9), row-major vec. F: (n, 3, 3); mu, lam scalars or (n,)."""
    n = F.shape[0]
    Fv = F.reshape(n, 9)
    J = _det3(F)
    g = _cofactor(F).reshape(n, 9)
    HJ = (Fv @ _lc(F.dtype, F.device).T).reshape(n, 9, 9)  # d2J/dF2
    mu_t = torch.as_tensor(mu, dtype=F.dtype, device=F.device)
    lam_t = torch.as_tensor(lam, dtype=F.dtype, device=F.device)
    c = lam_t * (J - 1.0) - mu_t  # [n]
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
# Closed-form symmetric 3x3 eigensolver and rotation-variant 3x3 SVD (vectorised; Eberly's robust method)
# --------------------------------------------------------------------------------------------------------------


def _unit(v: torch.Tensor, eps: float = 1e-30) -> torch.Tensor:
    return v / v.norm(dim=-1, keepdim=True).clamp_min(eps)


def _any_orthogonal(v: torch.Tensor) -> torch.Tensor:
    """A unit vector orthogonal to each unit row of v (..., 3)."""
    ex = torch.zeros_like(v)
    ex[..., 0] = 1.0
    ey = torch.zeros_like(v)
    ey[..., 1] = 1.0
    pick = (v[..., 0].abs() < 0.9)[..., None]
    w = torch.where(pick, ex, ey)
    return _unit(torch.linalg.cross(v, w))


def _isolated_eigenvector(A: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
    """Unit eigenvector of symmetric A (..., 3, 3) for a simple eigenvalue lam (...,): best row cross product."""
    M = A - lam[..., None, None] * torch.eye(3, dtype=A.dtype, device=A.device)
    r0, r1, r2 = M[..., 0, :], M[..., 1, :], M[..., 2, :]
    c01 = torch.linalg.cross(r0, r1)
    c02 = torch.linalg.cross(r0, r2)
    c12 = torch.linalg.cross(r1, r2)
    cands = torch.stack([c01, c02, c12], dim=-2)  # [..., 3, 3]
    n2 = (cands * cands).sum(-1)  # [..., 3]
    idx = n2.argmax(-1)
    best = cands.gather(-2, idx[..., None, None].expand(*idx.shape, 1, 3))[..., 0, :]
    bestn = n2.gather(-1, idx[..., None])[..., 0]
    ex = torch.zeros_like(best)
    ex[..., 0] = 1.0
    return torch.where((bestn > 0)[..., None], best / bestn.clamp_min(1e-300).sqrt()[..., None], ex)


def _second_eigenvector(A: torch.Tensor, e0: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
    """Unit eigenvector for eigenvalue lam restricted to the plane orthogonal to e0 (robust for repeats)."""
    u = _any_orthogonal(e0)
    v = torch.linalg.cross(e0, u)
    Au = (A @ u[..., None])[..., 0]
    Av = (A @ v[..., None])[..., 0]
    m00 = (u * Au).sum(-1) - lam
    m01 = (u * Av).sum(-1)
    m11 = (v * Av).sum(-1) - lam
    a00, a01, a11 = m00.abs(), m01.abs(), m11.abs()
    # null vector of [[m00, m01], [m01, m11]] from its larger row
    use_row0 = a00 >= a11
    x = torch.where(use_row0, -m01, m11)
    y = torch.where(use_row0, m00, -m01)
    nrm = torch.sqrt(x * x + y * y)
    ok = nrm > 0
    x = torch.where(ok, x / nrm.clamp_min(1e-300), torch.ones_like(x))
    y = torch.where(ok, y / nrm.clamp_min(1e-300), torch.zeros_like(y))
    return x[..., None] * u + y[..., None] * v


def sym3_eigh(A: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Eigen-decomposition of symmetric (..., 3, 3) matrices in closed form (trigonometric eigenvalues,
    cross-product eigenvectors; Eberly, "A Robust Eigensolver for 3x3 Symmetric Matrices").

    Returns (eigenvalues (..., 3) in DESCENDING order, eigenvectors (..., 3, 3) as columns, right-handed).
    Accurate to ~1e-12 relative in float64 including repeated eigenvalues; use float64.
    """
    scale = A.abs().amax((-2, -1)).clamp_min(1e-300)
    B = A / scale[..., None, None]
    a00, a11, a22 = B[..., 0, 0], B[..., 1, 1], B[..., 2, 2]
    a01, a02, a12 = B[..., 0, 1], B[..., 0, 2], B[..., 1, 2]
    q = (a00 + a11 + a22) / 3.0
    b00, b11, b22 = a00 - q, a11 - q, a22 - q
    p2 = (b00 * b00 + b11 * b11 + b22 * b22 + 2.0 * (a01 * a01 + a02 * a02 + a12 * a12)) / 6.0
    p = torch.sqrt(p2)
    pz = p <= 1e-150
    ps = torch.where(pz, torch.ones_like(p), p)
    # half determinant of (B - qI)/p
    c00, c11, c22 = b00 / ps, b11 / ps, b22 / ps
    c01, c02, c12 = a01 / ps, a02 / ps, a12 / ps
    det = c00 * (c11 * c22 - c12 * c12) - c01 * (c01 * c22 - c12 * c02) + c02 * (c01 * c12 - c11 * c02)
    r = (0.5 * det).clamp(-1.0, 1.0)
    phi = torch.acos(r) / 3.0
    l0 = q + 2.0 * p * torch.cos(phi)  # largest
    l2 = q + 2.0 * p * torch.cos(phi + 2.0 * math.pi / 3.0)  # smallest
    l1 = 3.0 * q - l0 - l2
    # eigenvector of the most isolated eigenvalue first (largest if r >= 0), then the middle one in its complement
    iso_is_max = r >= 0
    l_iso = torch.where(iso_is_max, l0, l2)
    e_iso = _isolated_eigenvector(B, l_iso)
    e_mid = _second_eigenvector(B, e_iso, l1)
    e_other = torch.linalg.cross(e_iso, e_mid)
    # columns in descending order: if iso is max: (iso, mid, other) else (other, mid, iso)
    v0 = torch.where(iso_is_max[..., None], e_iso, e_other)
    v2 = torch.where(iso_is_max[..., None], e_other, e_iso)
    v1 = e_mid
    V = torch.stack([v0, v1, v2], dim=-1)
    # make right-handed
    d = _det3(V)
    V = torch.cat([V[..., :2], V[..., 2:] * torch.sign(d + (d == 0).to(d.dtype))[..., None, None]], dim=-1)
    lam = torch.stack([l0, l1, l2], dim=-1) * scale[..., None]
    eye = torch.eye(3, dtype=A.dtype, device=A.device).expand_as(V)
    V = torch.where(pz[..., None, None], eye, V)
    lam = torch.where(pz[..., None], (q * scale)[..., None].expand_as(lam), lam)
    return lam, V


def svd3(F: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rotation-variant SVD ``F = U diag(s) V^T`` of (..., 3, 3), U and V proper rotations (det +1), s sorted by
    magnitude descending with only the last entry possibly negative (det F < 0 means inverted).

    Closed form via :func:`sym3_eigh` of F^T F; compute in float64. Returns (U, s, V).
    """
    lam, V = sym3_eigh(F.transpose(-1, -2) @ F)
    s = lam.clamp_min(0.0).sqrt()  # [..., 3]
    FV = F @ V  # columns F v_i = s_i u_i
    smax = s[..., :1].clamp_min(1e-300)
    tiny = 1e-12
    u0 = torch.where((s[..., 0:1] > tiny * smax) & (s[..., 0:1] > 0), _unit(FV[..., :, 0]), torch.zeros_like(FV[..., :, 0]))
    e = torch.zeros_like(u0)
    e[..., 0] = 1.0
    u0 = torch.where(u0.norm(dim=-1, keepdim=True) > 0.5, u0, e)
    u1 = FV[..., :, 1] - (FV[..., :, 1] * u0).sum(-1, keepdim=True) * u0
    n1 = u1.norm(dim=-1, keepdim=True)
    u1 = torch.where(n1 > tiny * smax, u1 / n1.clamp_min(1e-300), _any_orthogonal(u0))
    u2 = torch.linalg.cross(u0, u1)
    U = torch.stack([u0, u1, u2], dim=-1)
    s0 = (u0 * FV[..., :, 0]).sum(-1)
    s1 = (u1 * FV[..., :, 1]).sum(-1)
    s2 = (u2 * FV[..., :, 2]).sum(-1)  # signed
    return U, torch.stack([s0, s1, s2], dim=-1), V


def _project_sym3(A: torch.Tensor) -> torch.Tensor:
    """Clamp negative eigenvalues of symmetric (..., 3, 3) to zero (closed form); PD inputs returned unchanged."""
    # Sylvester's criterion picks the (usually few) matrices that need the eigen-decomposition
    m1 = A[..., 0, 0]
    m2 = A[..., 0, 0] * A[..., 1, 1] - A[..., 0, 1] * A[..., 1, 0]
    pd = (m1 > 0) & (m2 > 0) & (_det3(A) > 0)
    if bool(pd.all()):
        return A
    idx = torch.nonzero(~pd.reshape(-1)).flatten()
    Af = A.reshape(-1, 3, 3)
    lam, Q = sym3_eigh(Af[idx])
    Ap = (Q * lam.clamp_min(0.0)[..., None, :]) @ Q.transpose(-1, -2)
    out = Af.clone()
    out[idx] = Ap
    return out.reshape(A.shape)


def _kron_uv(U: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """(n, 9, 9) Q = U (x) V, so that vec_row(U M V^T) = Q vec_row(M)."""
    n = U.shape[0]
    return (U[:, :, None, :, None] * V[:, None, :, None, :]).reshape(n, 9, 9)


def projected_hessian(F: torch.Tensor, mu, lam, return_unprojected_too: bool = False) -> torch.Tensor:
    """PSD-projected stable Neo-Hookean Hessian (n, 9, 9) from the analytic eigensystem (module docstring).

    F: (n, 3, 3) (any float dtype; computed internally in float64 and returned in F's dtype).
    mu, lam: Pa, scalars or (n,). Equals :func:`project_psd_eigh` applied to :func:`hessian` (tested).
    """
    out_dtype = F.dtype
    Fd = F.to(torch.float64)
    n = Fd.shape[0]
    U, s, V = svd3(Fd)
    mu_t = torch.as_tensor(mu, dtype=torch.float64, device=F.device).expand(n)
    lam_t = torch.as_tensor(lam, dtype=torch.float64, device=F.device).expand(n)
    J = s[:, 0] * s[:, 1] * s[:, 2]
    c = lam_t * (J - 1.0) - mu_t
    K = torch.zeros(n, 9, 9, dtype=torch.float64, device=F.device)
    # scaling block on M indices (00), (11), (22) -> vec positions 0, 4, 8
    g = torch.stack([s[:, 1] * s[:, 2], s[:, 0] * s[:, 2], s[:, 0] * s[:, 1]], dim=-1)  # [n, 3]
    A3 = lam_t[:, None, None] * g[:, :, None] * g[:, None, :]
    A3 = A3 + mu_t[:, None, None] * torch.eye(3, dtype=torch.float64, device=F.device)
    off = torch.zeros(n, 3, 3, dtype=torch.float64, device=F.device)
    off[:, 0, 1] = off[:, 1, 0] = s[:, 2]
    off[:, 0, 2] = off[:, 2, 0] = s[:, 1]
    off[:, 1, 2] = off[:, 2, 1] = s[:, 0]
    A3 = A3 + c[:, None, None] * off
    A3 = _project_sym3(A3)
    diag_idx = torch.tensor([0, 4, 8], device=F.device)
    K[:, diag_idx[:, None], diag_idx[None, :]] = A3
    # twist/flip blocks: pair (i, j) with k the third index; positions (ij) = 3i + j and (ji) = 3j + i
    for i, j, k in ((0, 1, 2), (0, 2, 1), (1, 2, 0)):
        p, q = 3 * i + j, 3 * j + i
        flip = (mu_t - c * s[:, k]).clamp_min(0.0)  # eigvec (1, 1)/sqrt2
        twist = (mu_t + c * s[:, k]).clamp_min(0.0)  # eigvec (1, -1)/sqrt2
        diag = 0.5 * (flip + twist)
        offd = 0.5 * (flip - twist)
        K[:, p, p] = diag
        K[:, q, q] = diag
        K[:, p, q] = offd
        K[:, q, p] = offd
    Q = _kron_uv(U, V)
    H = Q @ K @ Q.transpose(1, 2)
    return H.to(out_dtype)
