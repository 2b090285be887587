"""Full-space Neo-Hookean FEM dynamics: the ground truth of the reduced simulator (method.md 9, 13), and kaolin's
cantilever regression protocol comparing the two.

**FEM.** P1 tetrahedra (constant F = Ds Dm^-1 per tet) with the stable Neo-Hookean density of
:func:`physskin_gs.elastic.neohookean_energy_density`,
``psi = mu/2 (tr(F^T F) - 3) + lam/2 (J - 1)^2 - mu (J - 1)``, a lumped mass (rho vol / 4 per node and tet) and
gravity ``-g up``. One backward-Euler step minimises the incremental potential

    Pi(x) = 1/(2 h^2) ||x - x_t - h v_t||_M^2 + sum_t vol_t psi(F_t(x)) - f_ext . x  [+ pin springs]

by Newton's method: sparse Hessian ``M / h^2 + K(x)`` with ``K`` assembled from the analytic per-tet 9x9 Hessian in
F (:func:`physskin_gs.physics.neohookean.projected_hessian_soa`, PSD-projected by default) mapped to the 12x12 node
Hessian by the constant dF/dx, a direct sparse solve (``scipy.sparse.linalg.splu``; preconditioned conjugate
gradients as a fallback) and Armijo backtracking, to a tight tolerance. Then ``v_{t+1} = (x_{t+1} - x_t) / h``.
Pinned nodes are Dirichlet constraints (their DOFs are dropped) or, optionally, stiff springs. Everything is
vectorised over tets (numpy float64); the sparsity pattern is built once and every assembly is one ``bincount``.

Small-strain limit: this density linearises to linear elasticity with Lame parameters (mu, lam - mu), not
(mu, lam) (Smith et al. 2018 shift lam by mu to compensate; kaolin's material does not by default and neither do
the reduced simulator or this module). The effective modulus is E' = mu (3 lam - mu) / lam and Poisson ratio
nu' = (lam - mu) / (2 lam): E' = 0.996 E, nu' = 0.444 at nu = 0.45; E' = 0.897 E, nu' = 0.167 at nu = 0.3.

**Protocol** (:func:`cantilever_protocol`). After kaolin's ``test_simplicits_vs_fem``
(tests/python/kaolin/physics/simplicits/test_simplicits_vs_fem.py in NVIDIAGameWorks/kaolin): a cantilever beam,
E = 1e5 Pa, nu = 0.45, rho = 500 kg/m^3, one end pinned, gravity 9.8 m/s^2, h = 0.05 s, 100 backward-Euler steps;
trajectories compared by kaolin's ``chamfer_distance(p1, p2, w1=1, w2=1, squared=True)``, i.e.
``mean_p1 min_p2 |p1 - p2|^2 + mean_p2 min_p1 |p2 - p1|^2`` on the raw simulated positions in **metres** (so the
value is in m^2; kaolin's beam runs in metres, 1 x 0.25 x 0.25 m). Kaolin's thresholds: frame 1 below tol^2
(+1e-5), frame 100 below tol, tol = 0.005 for its RKPM basis and 0.02 for a trained MLP (32 handles, 1024
cubature points). Here the reduced side is :class:`physskin_gs.physics.simulator.SubspaceSimulator`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Sequence, Tuple

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
import torch

from physskin_gs.elastic import lame_parameters
from physskin_gs.geometry.tetmesh import TetMesh, box_tetmesh, tet_volumes
from physskin_gs.physics import neohookean as nh

__all__ = [
    "FullSpaceNeoHookean",
    "FEMStepStats",
    "symmetric_box_tetmesh",
    "chamfer_distance",
    "interpolate_p1",
    "tip_metrics",
    "cantilever_protocol",
    "legendre_beam_weights",
]

WeightsFn = Callable[[torch.Tensor], Tuple[torch.Tensor, torch.Tensor]]


# ---------------------------------------------------------------------------------------------- mesh helpers
def symmetric_box_tetmesh(size: Sequence[float], divisions: Sequence[int],
                          origin: Sequence[float] = (0.0, 0.0, 0.0), axes: Sequence[int] = (1, 2)) -> TetMesh:
    """Box tet mesh that is exactly mirror-symmetric about the mid-planes of ``axes``.

    The Kuhn split of :func:`box_tetmesh` runs every cell along its main diagonal, so it is not symmetric under a
    reflection (a symmetric beam on it responds with a small spurious sideways component). Here the box is built
    for the lower half of each axis in ``axes`` and reflected; the faces on a mirror plane map to themselves, so
    the result is conforming. Reflected tets get two nodes swapped to stay positively oriented.

    Args: size (3,) metres; divisions (3,) cells per axis (those in ``axes`` must be even); origin (3,) metres;
    axes: mirror axes (0, 1, 2). Returns a :class:`TetMesh` (nodes (n, 3) m, tets (t, 4); method
    ``'box-symmetric'``). Raises ValueError for odd divisions on a mirror axis or a bad size / division count
    (:func:`box_tetmesh`).
    """
    size = np.asarray(size, np.float64)
    div = np.asarray(divisions, np.int64)
    origin = np.asarray(origin, np.float64)
    half_size, half_div = size.copy(), div.copy()
    for a in axes:
        if div[a] % 2:
            raise ValueError(f"symmetric_box_tetmesh needs even divisions on mirror axis {a}, got {div[a]}")
        half_size[a] /= 2.0
        half_div[a] //= 2
    tm = box_tetmesh(half_size, half_div, origin)
    nodes, tets = tm.nodes, tm.tets
    for a in axes:
        mid = origin[a] + 0.5 * size[a]
        mirrored = nodes.copy()
        mirrored[:, a] = 2.0 * mid - mirrored[:, a]
        all_nodes = np.concatenate([nodes, mirrored], 0)
        all_tets = np.concatenate([tets, tets[:, [0, 2, 1, 3]] + nodes.shape[0]], 0)
        # merge the duplicated nodes on the mirror plane (exact coordinates: quantise to a tiny grid)
        key = np.round(all_nodes / (1e-9 * max(float(size.max()), 1e-30))).astype(np.int64)
        _, first, inverse = np.unique(key, axis=0, return_index=True, return_inverse=True)
        order = np.argsort(first)  # keep nodes in first-appearance order
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        nodes = all_nodes[first[order]]
        tets = rank[inverse.reshape(-1)][all_tets]
    vol = tet_volumes(nodes, tets)
    if not np.all(vol > 0):
        raise AssertionError("symmetric_box_tetmesh produced a non-positive tet")  # cannot happen; guards the build
    return TetMesh(nodes, tets.astype(np.int64), "box-symmetric",
                   {"divisions": div.tolist(), "size": size.tolist(), "mirror_axes": list(axes)})


# ---------------------------------------------------------------------------------------------- the FEM
@dataclass
class FEMStepStats:
    """One :meth:`FullSpaceNeoHookean.step`: Newton iterations, final residual (N, free DOFs, 2-norm), final
    update (m, max-norm), line-search backtracks, whether it met the tolerance, wall-clock seconds."""

    newton_iters: int = 0
    residual: float = float("nan")
    last_update: float = float("nan")
    backtracks: int = 0
    converged: bool = False
    seconds: float = 0.0
    solver: str = "splu"


class FullSpaceNeoHookean:
    """Backward-Euler stable Neo-Hookean FEM on a tet mesh (module docstring).

    Args:
        tm: :class:`TetMesh` (nodes (n, 3) metres, positively oriented tets (t, 4)).
        E, nu, density: Young's modulus (Pa), Poisson ratio in (-1, 0.5), density (kg/m^3).
        dt: time step h (s).
        gravity: |g| (m/s^2), applied along ``-up``; up: (3,) vector (normalised here).
        pinned: (n,) bool mask of pinned nodes (held at their rest positions), or None.
        pin_mode: ``"dirichlet"`` (drop the pinned DOFs) or ``"spring"`` (energy ``1/2 k m_i |x_i - X_i|^2``
            per pinned node with ``k = pin_stiffness`` in 1/s^2, like the reduced simulator's mass-proportional
            pins).
        pin_stiffness: k for ``pin_mode="spring"`` (1/s^2).
        external_force: optional (n, 3) constant nodal forces (N) added to gravity.
        project_psd: PSD-project the per-tet Hessians (robust Newton); False uses the exact Hessian.
        rtol: Newton stops when the free residual's 2-norm is below ``rtol`` times the norm of the external
            force vector (gravity; or the total weight at 1 g when there is none), or when the update's max-norm
            is below ``xtol`` times the mesh's bounding-box diagonal.
        max_newton: iteration cap per step.
        linear_solver: ``"splu"`` (direct, default) or ``"cg"`` (Jacobi-preconditioned conjugate gradients). A
            failed factorisation falls back to CG automatically.
        floor_height: optional frictionless floor at this height along ``up`` (m), the reduced simulator's penalty
            ``m k d^2`` per node (d = min(0, up . x - height), k = ``floor_k`` in 1/s^2); up must be a coordinate
            axis then (its Hessian is diagonal).
    Raises ValueError for bad material, shapes or options.

    State: :attr:`x` (n, 3) positions and :attr:`v` (n, 3) velocities, float64; :attr:`time` (s).
    """

    def __init__(self, tm: TetMesh, E: float, nu: float, density: float, *, dt: float = 0.05,
                 gravity: float = 9.8, up: Sequence[float] = (0.0, 0.0, 1.0), pinned: Optional[np.ndarray] = None,
                 pin_mode: str = "dirichlet", pin_stiffness: float = 1e6,
                 external_force: Optional[np.ndarray] = None, project_psd: bool = True, rtol: float = 1e-9,
                 xtol: float = 1e-11, max_newton: int = 50, linear_solver: str = "splu",
                 floor_height: Optional[float] = None, floor_k: float = 1e6) -> None:
        nodes = np.asarray(tm.nodes, np.float64)
        tets = np.asarray(tm.tets, np.int64)
        if nodes.ndim != 2 or nodes.shape[1] != 3 or tets.ndim != 2 or tets.shape[1] != 4 or tets.shape[0] == 0:
            raise ValueError(f"need nodes (n, 3) and tets (t, 4), got {nodes.shape}, {tets.shape}")
        if not (dt > 0 and math.isfinite(dt)):
            raise ValueError(f"time step must be positive, got {dt}")
        if not (density > 0 and math.isfinite(density)):
            raise ValueError(f"density must be positive, got {density}")
        if pin_mode not in ("dirichlet", "spring"):
            raise ValueError(f"pin_mode must be 'dirichlet' or 'spring', got {pin_mode!r}")
        if linear_solver not in ("splu", "cg"):
            raise ValueError(f"linear_solver must be 'splu' or 'cg', got {linear_solver!r}")
        self.mu, self.lam = lame_parameters(float(E), float(nu))
        self.E, self.nu, self.density, self.dt = float(E), float(nu), float(density), float(dt)
        self.nodes, self.tets = nodes, tets
        n = nodes.shape[0]
        self.n = n
        Dm = (nodes[tets[:, 1:]] - nodes[tets[:, :1]]).transpose(0, 2, 1)  # [t, 3, 3], columns x_j - x_0
        self.vol = np.linalg.det(Dm) / 6.0
        if not np.all(self.vol > 0):
            raise ValueError(f"{int((self.vol <= 0).sum())} tets have non-positive volume")
        Dinv = np.linalg.inv(Dm)  # [t, 3, 3]
        # B[t, k, b] = d(shape function k)/dX_b: F_ab = sum_k x_{k,a} B[k, b]
        self.B = np.concatenate([-Dinv.sum(1, keepdims=True), Dinv], 1)  # [t, 4, 3]
        self.mass = np.bincount(tets.reshape(-1), np.repeat(self.density * self.vol / 4.0, 4), minlength=n)
        if np.any(self.mass <= 0):
            raise ValueError("every node must belong to a tet (isolated nodes have no mass)")
        u = np.asarray(up, np.float64).reshape(3)
        if not np.all(np.isfinite(u)) or np.linalg.norm(u) == 0:
            raise ValueError(f"up must be a non-zero finite vector, got {up}")
        self.up = u / np.linalg.norm(u)
        self.gravity = float(gravity)
        fext = self.mass[:, None] * (-self.gravity * self.up)[None, :]
        if external_force is not None:
            fext = fext + np.asarray(external_force, np.float64).reshape(n, 3)
        self.f_ext = fext
        self.project_psd = bool(project_psd)
        self.rtol, self.xtol, self.max_newton = float(rtol), float(xtol), int(max_newton)
        self.linear_solver = linear_solver
        self.pin_mode = pin_mode
        self.pin_stiffness = float(pin_stiffness)
        pinned = np.zeros(n, bool) if pinned is None else np.asarray(pinned, bool).reshape(n)
        self.pinned = pinned
        self.pin_targets = nodes[pinned].copy()
        dof_fixed = np.repeat(pinned, 3) if pin_mode == "dirichlet" else np.zeros(3 * n, bool)
        self.free = ~dof_fixed  # [3n]
        self.floor_height = None if floor_height is None else float(floor_height)
        self.floor_k = float(floor_k)
        if self.floor_height is not None:
            axis = np.flatnonzero(np.abs(self.up) > 1 - 1e-12)
            if axis.size != 1 or not (math.isfinite(self.floor_height) and self.floor_k > 0):
                raise ValueError("a floor needs up along a coordinate axis, a finite height and floor_k > 0")
            self._floor_axis = int(axis[0])
        self._build_pattern()
        self.scale_len = float(np.linalg.norm(nodes.max(0) - nodes.min(0)))
        self.reset()

    # ------------------------------------------------------------------------------------------ setup
    def _build_pattern(self) -> None:
        """CSR pattern of the free-DOF Hessian: every (tet, k, a, l, c) entry's position in the data array."""
        tets, n = self.tets, self.n
        dof = (3 * tets[:, :, None] + np.arange(3)[None, None, :]).reshape(-1, 12)  # [t, 12] (k, a)
        free_index = np.full(3 * n, -1, np.int64)
        free_index[self.free] = np.arange(int(self.free.sum()))
        self.free_index = free_index
        self.nfree = int(self.free.sum())
        fr = free_index[dof]  # [t, 12]
        rows = np.broadcast_to(fr[:, :, None], (tets.shape[0], 12, 12)).reshape(-1)
        cols = np.broadcast_to(fr[:, None, :], (tets.shape[0], 12, 12)).reshape(-1)
        keep = (rows >= 0) & (cols >= 0)
        self._entry_keep = keep
        keys = rows[keep] * self.nfree + cols[keep]
        diag_keys = np.arange(self.nfree, dtype=np.int64) * (self.nfree + 1)
        ukeys, inv = np.unique(np.concatenate([keys, diag_keys]), return_inverse=True)
        self._entry_slot = inv[: keys.size]
        self._diag_slot = inv[keys.size:]
        self._nnz = ukeys.size
        r = ukeys // self.nfree
        self._indices = (ukeys % self.nfree).astype(np.int32)
        self._indptr = np.concatenate([[0], np.cumsum(np.bincount(r, minlength=self.nfree))]).astype(np.int32)
        self._dof_tet = dof

    def reset(self) -> None:
        """Back to rest with zero velocity."""
        self.x = self.nodes.copy()
        self.v = np.zeros_like(self.x)
        self.time = 0.0
        self.last_stats: Optional[FEMStepStats] = None

    @property
    def positions(self) -> np.ndarray:
        """(n, 3) current node positions (m), float64 (a copy)."""
        return self.x.copy()

    @property
    def total_mass(self) -> float:
        """Sum of the lumped node masses (kg)."""
        return float(self.mass.sum())

    # ------------------------------------------------------------------------------------------ kernels
    def deformation_gradients(self, x: Optional[np.ndarray] = None) -> np.ndarray:
        """(t, 3, 3) F = Ds Dm^-1 per tet at positions x (default: the current state)."""
        x = self.x if x is None else x
        return np.einsum("tka,tkb->tab", x[self.tets], self.B)

    def _psi_P(self, F: np.ndarray, need_P: bool = True):
        """Stable Neo-Hookean psi (t,) (J/m^3) and, with ``need_P``, first Piola P (t, 3, 3) (Pa) of F (t, 3, 3),
        by :mod:`physskin_gs.physics.neohookean`."""
        Ft = torch.from_numpy(F)
        psi = nh.energy_density(Ft, self.mu, self.lam).numpy()
        if not need_P:
            return psi, None
        return psi, nh.first_piola(Ft, self.mu, self.lam).numpy()

    def elastic_energy(self, x: Optional[np.ndarray] = None) -> float:
        """sum_t vol_t psi(F_t) in J at positions x (n, 3) (default: current)."""
        psi, _ = self._psi_P(self.deformation_gradients(x), need_P=False)
        return float(self.vol @ psi)

    def elastic_forces(self, x: Optional[np.ndarray] = None) -> np.ndarray:
        """(n, 3) internal force -dE/dx (N) at positions x (default: current)."""
        _, P = self._psi_P(self.deformation_gradients(x))
        return -self._gradient_from_P(P)

    def _gradient_from_P(self, P: np.ndarray) -> np.ndarray:
        """(n, 3) dE/dx (N) from the per-tet first Piola stresses P (t, 3, 3)."""
        g = np.einsum("tab,tkb->tka", P * self.vol[:, None, None], self.B)  # [t, 4, 3]
        return np.bincount(self._dof_tet.reshape(-1), g.reshape(-1), minlength=3 * self.n).reshape(self.n, 3)

    def _tet_hessians(self, F: np.ndarray) -> np.ndarray:
        """(t, 12, 12) node Hessians vol B^T (d2psi/dF2) B, rows/cols (k, a)."""
        t = F.shape[0]
        if self.project_psd:
            H = nh.projected_hessian_soa(np.ascontiguousarray(F.reshape(t, 9).T), self.mu, self.lam,
                                         torch.float64).numpy()
        else:
            H = nh.hessian(torch.from_numpy(F), self.mu, self.lam).numpy()
        H = H.reshape(t, 3, 3, 3, 3) * self.vol[:, None, None, None, None]  # [t, a, b, c, d]
        tmp = np.einsum("tabcd,tld->tabcl", H, self.B, optimize=True)
        Ke = np.einsum("tabcl,tkb->tkacl", tmp, self.B, optimize=True)  # [t, k, a, c, l]
        return Ke.transpose(0, 1, 2, 4, 3).reshape(t, 12, 12)

    def stiffness(self, x: Optional[np.ndarray] = None, free_only: bool = False) -> sp.csr_matrix:
        """Tangent stiffness d2E/dx2 (N/m) at x (n, 3) (default: current) as CSR: (3n, 3n) node-major, or
        (nfree, nfree) over the free DOFs with ``free_only`` (PSD-projected if ``project_psd``)."""
        x = self.x if x is None else x
        Ke = self._tet_hessians(self.deformation_gradients(x))
        if free_only:
            data = np.bincount(self._entry_slot, Ke.reshape(-1)[self._entry_keep], minlength=self._nnz)
            return sp.csr_matrix((data, self._indices, self._indptr), shape=(self.nfree, self.nfree))
        rows = np.repeat(self._dof_tet, 12, axis=1).reshape(-1)
        cols = np.tile(self._dof_tet, (1, 12)).reshape(-1)
        return sp.csr_matrix((Ke.reshape(-1), (rows, cols)), shape=(3 * self.n, 3 * self.n))

    # ------------------------------------------------------------------------------------------ objective
    def _objective(self, x: np.ndarray, y: Optional[np.ndarray], h: Optional[float], derivs: int):
        """Incremental potential (y = predictor, h = step) or, with y None, the static potential. derivs:
        0 = value, 1 = value + gradient (3n,), 2 = + free-DOF Hessian (CSR)."""
        F = self.deformation_gradients(x)
        psi, P = self._psi_P(F, need_P=derivs > 0)
        val = float(self.vol @ psi) - float((self.f_ext * x).sum())
        if y is not None:
            d = x - y
            val += 0.5 / (h * h) * float((self.mass[:, None] * d * d).sum())
        spring = self.pin_mode == "spring" and self.pinned.any()
        if spring:
            r = x[self.pinned] - self.pin_targets
            km = self.pin_stiffness * self.mass[self.pinned]
            val += 0.5 * float((km[:, None] * r * r).sum())
        floor = self.floor_height is not None
        if floor:  # the simulator's floor: m k d^2 per node, d = min(0, up . x - height) (frictionless)
            dfl = np.minimum(x @ self.up - self.floor_height, 0.0)  # [n]
            val += float((self.floor_k * self.mass) @ (dfl * dfl))
        if derivs == 0:
            return val
        grad = self._gradient_from_P(P) - self.f_ext
        if y is not None:
            grad = grad + self.mass[:, None] * (x - y) / (h * h)
        if spring:
            grad[self.pinned] += km[:, None] * r
        if floor:
            grad += (2.0 * self.floor_k * self.mass * dfl)[:, None] * self.up[None, :]
        if derivs == 1:
            return val, grad.reshape(-1)
        Ke = self._tet_hessians(F)
        data = np.bincount(self._entry_slot, Ke.reshape(-1)[self._entry_keep], minlength=self._nnz)
        diag = np.zeros(3 * self.n)
        if y is not None:
            diag += np.repeat(self.mass, 3) / (h * h)
        if spring:
            diag[np.repeat(self.pinned, 3)] += np.repeat(km, 3)
        if floor:  # up is a coordinate axis: the floor's Hessian 2 m k up up^T is diagonal
            diag[3 * np.arange(self.n) + self._floor_axis] += 2.0 * self.floor_k * self.mass * (dfl < 0)
        data[self._diag_slot] += diag[self.free]
        Hm = sp.csr_matrix((data, self._indices, self._indptr), shape=(self.nfree, self.nfree))
        return val, grad.reshape(-1), Hm

    def _solve(self, Hm: sp.csr_matrix, rhs: np.ndarray, stats: FEMStepStats) -> np.ndarray:
        if self.linear_solver == "splu":
            try:
                lu = spla.splu(Hm.tocsc(), permc_spec="MMD_AT_PLUS_A", options={"SymmetricMode": True})
                out = lu.solve(rhs)
                if np.all(np.isfinite(out)):
                    return out
            except RuntimeError:
                pass
        stats.solver = "cg"
        dinv = 1.0 / np.maximum(Hm.diagonal(), 1e-300)
        M = spla.LinearOperator(Hm.shape, matvec=lambda r: dinv * r)
        out, _ = spla.cg(Hm, rhs, rtol=1e-12, atol=0.0, maxiter=20 * Hm.shape[0], M=M)
        return out

    def _minimise(self, x0: np.ndarray, y: Optional[np.ndarray], h: Optional[float]) -> Tuple[np.ndarray, FEMStepStats]:
        stats = FEMStepStats(solver=self.linear_solver)
        t0 = time.perf_counter()
        x = x0.copy()
        if self.pin_mode == "dirichlet":
            x[self.pinned] = self.pin_targets
        fnorm = float(np.linalg.norm(self.f_ext))
        if fnorm == 0.0:
            fnorm = self.total_mass * 9.8
        gtol = self.rtol * fnorm
        xtol = self.xtol * self.scale_len
        free = self.free
        E0, g, Hm = self._objective(x, y, h, 2)
        for it in range(self.max_newton):
            gf = g[free]
            stats.residual = float(np.linalg.norm(gf))
            if stats.residual <= gtol:
                stats.converged = True
                break
            d = -self._solve(Hm, gf, stats)
            slope = float(gf @ d)
            if not slope < 0:  # not a descent direction (should not happen with a PSD Hessian): gradient step
                d = -gf * (float(gf @ gf) / max(float(gf @ (Hm @ gf)), 1e-300))
                slope = float(gf @ d)
            step = np.zeros(3 * self.n)
            step[free] = d
            step = step.reshape(self.n, 3)
            stats.newton_iters = it + 1
            tls, accepted = 1.0, False
            for _ in range(40):
                xn = x + tls * step
                En = self._objective(xn, y, h, 0)
                # near convergence the energy decrease drowns in round-off: accept the full step there
                if math.isfinite(En) and (En <= E0 + 1e-4 * tls * slope or
                                          (tls == 1.0 and abs(slope) < 1e-13 * (abs(E0) + 1.0))):
                    accepted = True
                    break
                tls *= 0.5
                stats.backtracks += 1
            if not accepted:
                break
            x = xn
            stats.last_update = float(np.abs(tls * step).max())
            E0, g, Hm = self._objective(x, y, h, 2)
            if tls == 1.0 and stats.last_update <= xtol:  # a full Newton step this small: converged
                stats.residual = float(np.linalg.norm(g[free]))
                stats.converged = True
                break
        else:
            stats.residual = float(np.linalg.norm(g[free]))
            stats.converged = stats.residual <= gtol
        stats.seconds = time.perf_counter() - t0
        return x, stats

    # ------------------------------------------------------------------------------------------ stepping
    def step(self, n: int = 1) -> FEMStepStats:
        """Advance n backward-Euler steps of size dt (s), updating :attr:`x` (n, 3) m and :attr:`v` (n, 3) m/s.
        Returns the last step's :class:`FEMStepStats` (not converged is reported there, never raised)."""
        stats = FEMStepStats()
        h = self.dt
        for _ in range(int(n)):
            y = self.x + h * self.v
            x, stats = self._minimise(y, y, h)
            self.v = (x - self.x) / h
            self.x = x
            self.time += h
            self.last_stats = stats
        return stats

    def run(self, steps: int, record: bool = True) -> Optional[np.ndarray]:
        """Advance ``steps`` steps. With ``record``, returns the trajectory (steps + 1, n, 3) float64 (row 0 is
        the state before the first step), else None. Non-convergence is reported in :attr:`last_stats`."""
        traj = [self.x.copy()] if record else None
        for _ in range(int(steps)):
            self.step()
            if record:
                traj.append(self.x.copy())
        return np.stack(traj, 0) if record else None

    def static_solve(self) -> Tuple[np.ndarray, FEMStepStats]:
        """Static equilibrium under the external forces and pins (minimises E(x) - f_ext x from the current
        state); returns (positions (n, 3) m, stats) and leaves the state unchanged. Needs pins: without them the
        system is singular and ``stats.converged`` is False (nothing is raised)."""
        return self._minimise(self.x, None, None)

    def energies(self) -> Dict[str, float]:
        """Kinetic, elastic and gravity (relative to rest) energies and their total, in J (pin springs
        included when ``pin_mode='spring'``)."""
        out = {"kinetic": 0.5 * float((self.mass[:, None] * self.v * self.v).sum()),
               "elastic": self.elastic_energy(),
               "external": -float((self.f_ext * (self.x - self.nodes)).sum())}
        if self.pin_mode == "spring" and self.pinned.any():
            r = self.x[self.pinned] - self.pin_targets
            out["pin"] = 0.5 * self.pin_stiffness * float((self.mass[self.pinned][:, None] * r * r).sum())
        out["total"] = sum(out.values())
        return out


# ---------------------------------------------------------------------------------------------- metrics
def chamfer_distance(p1: np.ndarray, p2: np.ndarray) -> float:
    """Kaolin's symmetric squared Chamfer distance ``mean_i min_j |p1_i - p2_j|^2 + mean_j min_i |p2_j - p1_i|^2``
    (``kaolin.metrics.pointcloud.chamfer_distance`` with w1 = w2 = 1, squared=True). p1 (n, 3), p2 (m, 3) in
    the same units; the result is in those units squared (m^2 for positions in metres)."""
    from scipy.spatial import cKDTree

    p1 = np.asarray(p1, np.float64)
    p2 = np.asarray(p2, np.float64)
    d12, _ = cKDTree(p2).query(p1)
    d21, _ = cKDTree(p1).query(p2)
    return float((d12 * d12).mean() + (d21 * d21).mean())


def interpolate_p1(tm: TetMesh, values: np.ndarray, points: np.ndarray, k: int = 24) -> np.ndarray:
    """P1 (barycentric) interpolation of nodal ``values`` (n, d) at rest-frame ``points`` (p, 3).

    Each point is located among the k tets with the nearest centroids (the one with the largest minimum
    barycentric coordinate wins, so points on faces or slightly outside still get a value). ``points`` are in the
    units of ``tm.nodes``. Returns (p, d) in the units of ``values``. Raises numpy.linalg.LinAlgError for a
    degenerate candidate tet."""
    from scipy.spatial import cKDTree

    nodes, tets = np.asarray(tm.nodes, np.float64), np.asarray(tm.tets, np.int64)
    values = np.asarray(values, np.float64)
    pts = np.asarray(points, np.float64)
    cent = nodes[tets].mean(1)
    k = min(k, tets.shape[0])
    _, cand = cKDTree(cent).query(pts, k=k)  # [p, k]
    cand = cand.reshape(pts.shape[0], k)
    x0 = nodes[tets[cand, 0]]  # [p, k, 3]
    D = nodes[tets[cand, 1:]] - x0[:, :, None, :]  # [p, k, 3 (j), 3]
    lam123 = np.linalg.solve(D.transpose(0, 1, 3, 2), (pts[:, None, :] - x0)[..., None])[..., 0]  # [p, k, 3]
    bary = np.concatenate([1.0 - lam123.sum(-1, keepdims=True), lam123], -1)  # [p, k, 4]
    best = bary.min(-1).argmax(1)
    b = bary[np.arange(pts.shape[0]), best]  # [p, 4]
    tt = tets[cand[np.arange(pts.shape[0]), best]]  # [p, 4]
    return np.einsum("pk,pkd->pd", b, values[tt])


def _crossings(sig: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Times of sign changes of sig (linear interpolation), ignoring exact zeros at the start."""
    s = np.sign(sig)
    out = []
    for i in range(len(sig) - 1):
        if s[i] != 0 and s[i + 1] != 0 and s[i] != s[i + 1]:
            a = sig[i] / (sig[i] - sig[i + 1])
            out.append(times[i] + a * (times[i + 1] - times[i]))
    return np.asarray(out)


def tip_metrics(tip_disp: np.ndarray, dt: float, down: np.ndarray, side: np.ndarray) -> Dict[str, float]:
    """Sag, oscillation period and sideways drift of a tip trajectory.

    tip_disp: (T + 1, 3) mean tip displacement (m) per frame (row 0 at rest); down: (3,) unit gravity direction;
    side: (3,) unit direction perpendicular to gravity and the long axis.
    Returns ``first_sag_m`` (sag at the first turning point: where the tip velocity along gravity first changes
    sign; the deepest sag if it never does), ``max_sag_m``, ``final_sag_m``, ``period_s`` (twice the mean interval
    between zero crossings of the tip velocity along gravity; NaN with fewer than 2 crossings), ``crossings``,
    ``side_max_m`` (max |sideways component|), ``side_final_m`` (signed, last frame)."""
    sag = tip_disp @ down
    vel = np.diff(sag) / dt  # [T], velocity over step i -> i + 1
    tv = (np.arange(len(vel)) + 0.5) * dt
    cr = _crossings(vel, tv)
    if len(cr):
        i_turn = int(np.argmax(np.sign(vel[1:]) != np.sign(vel[:-1]))) + 1  # first frame after the turn
        first = float(sag[: i_turn + 1].max())
    else:
        first = float(sag.max())
    period = float(2.0 * np.mean(np.diff(cr))) if len(cr) >= 2 else float("nan")
    side_c = tip_disp @ side
    return {"first_sag_m": first, "max_sag_m": float(sag.max()), "final_sag_m": float(sag[-1]),
            "period_s": period, "crossings": int(len(cr)), "side_max_m": float(np.abs(side_c).max()),
            "side_final_m": float(side_c[-1])}


# ---------------------------------------------------------------------------------------------- weights
def legendre_beam_weights(degree: int = 6, axis: int = 0, cross_degree: int = 0) -> WeightsFn:
    """A rich, exactly mirror-symmetric weights function for beams: Legendre polynomials P_1..P_degree of the
    normalised long-axis coordinate (optionally times 1, y, z for ``cross_degree=1``), then the constant handle.

    degree >= 0 (0: the constant only); axis in 0..2; x is dimensionless (the long axis normalised to [-1, 1]).
    Returns ``weights_fn(x (N, 3) normalised) -> (W (N, H), dW/dX (N, H, 3))`` float32, H = degree (x 3) + 1;
    dW/dX is per normalised unit. Raises nothing itself (a bad ``axis`` fails with IndexError when called)."""
    def fn(x: torch.Tensor):
        x = x.to(torch.float64)
        s = x[:, axis]
        P = [torch.ones_like(s), s]
        dP = [torch.zeros_like(s), torch.ones_like(s)]
        for k in range(1, degree):
            P.append(((2 * k + 1) * s * P[k] - k * P[k - 1]) / (k + 1))
            dP.append(dP[k - 1] + (2 * k + 1) * P[k])
        cols, grads = [], []
        others = [a for a in range(3) if a != axis]
        for k in range(1, degree + 1):
            factors = [(None, None)] + ([(a, x[:, a]) for a in others] if cross_degree >= 1 else [])
            for a, fa in factors:
                g = torch.zeros(x.shape[0], 3, dtype=torch.float64)
                if a is None:
                    cols.append(P[k])
                    g[:, axis] = dP[k]
                else:
                    cols.append(P[k] * fa)
                    g[:, axis] = dP[k] * fa
                    g[:, a] = P[k]
                grads.append(g)
        cols.append(torch.ones_like(s))
        grads.append(torch.zeros(x.shape[0], 3, dtype=torch.float64))
        return torch.stack(cols, 1).float(), torch.stack(grads, 1).float()

    return fn


# ---------------------------------------------------------------------------------------------- protocol
def _mirror_yz(pts: np.ndarray, mid: np.ndarray) -> np.ndarray:
    """(4 k, 3): ``pts`` (k, 3) and its mirror images across the planes y = mid[1] and z = mid[2]."""
    for a in (1, 2):
        m = pts.copy()
        m[:, a] = 2.0 * mid[a] - m[:, a]
        pts = np.concatenate([pts, m], 0)
    return pts


def _box_cubature(size: np.ndarray, origin: np.ndarray, n: int, method: str, seed: int) -> np.ndarray:
    """(about n, 3) cubature points in the box: 'fps' (farthest points of 20 n uniform samples), 'fps_sym' (the same for
    n / 4 points in one quarter y, z < mid, mirrored across both mid-planes: exactly mirror-symmetric), 'cells'
    (the product's rule, :func:`physskin_gs.geometry.interior.sample_cubature`, on 20 n uniform samples made
    mirror-symmetric: about n points), 'random' (uniform), or 'grid' (cell centres of a near-cubic lattice,
    mirror-symmetric; about n points)."""
    rng = np.random.default_rng(seed)
    if method == "grid":
        cell = (float(np.prod(size)) / n) ** (1.0 / 3.0)
        div = np.maximum(1, np.round(size / cell)).astype(int)
        ax = [origin[a] + (np.arange(div[a]) + 0.5) * size[a] / div[a] for a in range(3)]
        g = np.meshgrid(*ax, indexing="ij")
        return np.stack([c.ravel() for c in g], 1)
    if method == "random":
        return origin + rng.random((n, 3)) * size
    if method == "cells":  # the product's rule (sample_cubature) on a mirror-symmetric pool of 20 n points
        from physskin_gs.geometry.interior import sample_cubature

        pool = _mirror_yz(origin + rng.random((5 * n, 3)) * size, origin + size / 2)
        return sample_cubature(pool, n).double().numpy()
    if method in ("fps", "fps_sym"):
        from physskin_gs.geometry.sampling import farthest_point_sampling

        k = n if method == "fps" else max(1, n // 4)
        qsize = size.copy() if method == "fps" else size * np.array([1.0, 0.5, 0.5])
        pool = origin + rng.random((20 * k, 3)) * qsize
        pts = pool[farthest_point_sampling(pool, k, seed=seed, dtype=np.float64)]
        if method == "fps_sym":  # mirror the quarter (y, z below the mid-planes) to all four quadrants
            pts = _mirror_yz(pts, origin + size / 2)
        return pts
    raise ValueError(f"unknown cubature method {method!r}; expected 'cells', 'fps', 'fps_sym', 'random' or 'grid'")


def cantilever_protocol(weights_fn: Optional[WeightsFn], *, size: Sequence[float] = (1.0, 0.2, 0.2),
                        divisions: Sequence[int] = (20, 4, 4), steps: int = 100, dt: float = 0.05,
                        E: float = 1e5, nu: float = 0.45, density: float = 500.0, gravity: float = 9.8,
                        pin_width: float = 0.02, n_cubature: int = 1024, cubature: str = "fps", seed: int = 0,
                        symmetric_mesh: bool = True, sim_kwargs: Optional[dict] = None,
                        fem: Optional[dict] = None, fem_kwargs: Optional[dict] = None,
                        eval_points: Optional[np.ndarray] = None) -> dict:
    """Kaolin's cantilever regression (module docstring) for one weights source.

    Frame: the beam is the box [0, L] x [-b/2, b/2] x [-h/2, h/2] (``size`` = (L, b, h) in metres, L the longest
    side), up = +z, gravity -z, the x <= ``pin_width`` end pinned, the tip is the x = L face. The normalised frame
    of ``weights_fn`` is ``x_norm = (x - center) / (L / 2)``, so dW/dX_sim = dW/dX_norm / (L / 2).

    Args:
        weights_fn: ``points (N, 3) float32 normalised -> (W (N, H), dW/dX (N, H, 3))`` in normalised units,
            constant handle last; None runs the FEM only.
        divisions: FEM cells per axis (y and z even with ``symmetric_mesh``).
        steps, dt, E, nu, density, gravity: the common setup (kaolin: 100, 0.05 s, 1e5 Pa, 0.45, 500 kg/m^3,
            9.8 m/s^2).
        pin_width: the pinned slab (m): FEM nodes (Dirichlet) and cubature points (springs through
            ``SubspaceSimulator.set_pins``) with x <= pin_width (kaolin: x >= 0.98 on its 1 m beam).
        n_cubature, cubature, seed: reduced cubature points ('fps', 'random', or the mirror-symmetric 'cells'
            (the product's rule), 'fps_sym' and 'grid').
        symmetric_mesh: use :func:`symmetric_box_tetmesh` (mirror-symmetric in y and z) instead of the plain
            Kuhn split.
        sim_kwargs: overrides of the :class:`SubspaceSimulator` arguments (defaults here: damping 0, no floor,
            20 full Newton iterations, tight tolerances).
        fem: a previous result's ``"fem_cache"`` entry for the same setup (reuses the FEM trajectory).
        fem_kwargs: overrides of the :class:`FullSpaceNeoHookean` arguments.
        eval_points: optional (p, 3) extra rest points (metres, this frame) at which the reduced LBS trajectory is
            also evaluated (``traj_eval``), e.g. another simulator's vertices.

    Returns a dict: ``chamfer_m2`` {1: .., steps: ..} and ``chamfer_curve_m2`` (steps + 1,) (kaolin's symmetric
    squared Chamfer in m^2 between the FEM nodes and the reduced LBS evaluated at the same rest nodes),
    ``rms_m`` (steps + 1,) point-wise RMS distance, ``fem`` / ``reduced`` tip metrics (:func:`tip_metrics`),
    ``sag_ratio`` and ``period_ratio`` (reduced / FEM), ``sideways_drift_mm`` (reduced and FEM), ``seconds``,
    ``fem_newton`` (max iterations, all converged), ``tip_fem_m`` / ``tip_reduced_m`` (steps + 1, 3) mean tip
    displacements, ``traj_reduced`` (steps + 1, n, 3) the reduced LBS positions of the FEM nodes (and
    ``traj_eval`` (steps + 1, p, 3) at ``eval_points``), ``setup`` (the
    parameters) and ``fem_cache`` (mesh ``tm``, FEM trajectory ``traj`` (steps + 1, n, 3), timings).

    Raises ValueError if ``size`` is not (3,) positive with the longest side first, no cubature point lies in the
    pinned slab, the cubature method is unknown, y / z divisions are odd with ``symmetric_mesh``, or for a bad
    material / time step (:class:`FullSpaceNeoHookean`).
    """
    from physskin_gs.physics.simulator import SubspaceSimulator

    size = np.asarray(size, np.float64)
    if size.shape != (3,) or np.any(size <= 0) or int(np.argmax(size)) != 0:
        raise ValueError(f"size must be (L, b, h) with L the longest side, got {size.tolist()}")
    L = float(size[0])
    origin = np.array([0.0, -size[1] / 2, -size[2] / 2])
    center = origin + size / 2
    scale = L / 2.0
    up = np.array([0.0, 0.0, 1.0])
    down, side = -up, np.array([0.0, 1.0, 0.0])
    setup = {"size_m": size.tolist(), "divisions": list(divisions), "steps": steps, "dt_s": dt, "E_Pa": E, "nu": nu,
             "density": density, "gravity": gravity, "pin_width_m": pin_width, "n_cubature": n_cubature,
             "cubature": cubature, "seed": seed, "symmetric_mesh": symmetric_mesh,
             "chamfer_units": "m^2 (kaolin chamfer_distance, squared=True, w1=w2=1, raw positions in metres)"}
    out: dict = {"setup": setup, "seconds": {}}
    # ---------------------------------------------------------------- FEM
    if fem is None:
        tm = (symmetric_box_tetmesh if symmetric_mesh else box_tetmesh)(size, divisions, origin)
        pinned = tm.nodes[:, 0] <= pin_width + 1e-9 * L
        t0 = time.perf_counter()
        sim_f = FullSpaceNeoHookean(tm, E, nu, density, dt=dt, gravity=gravity, up=up, pinned=pinned,
                                    **(fem_kwargs or {}))
        traj = [sim_f.x.copy()]
        iters, conv = [], True
        for _ in range(steps):
            st = sim_f.step()
            iters.append(st.newton_iters)
            conv = conv and st.converged
            traj.append(sim_f.x.copy())
        fem = {"tm": tm, "traj": np.stack(traj, 0), "seconds": time.perf_counter() - t0,
               "newton_max": int(max(iters) if iters else 0), "newton_mean": float(np.mean(iters) if iters else 0),
               "converged": bool(conv)}
    tm, traj_f = fem["tm"], fem["traj"]
    out["fem_cache"] = fem
    out["seconds"]["fem"] = fem["seconds"]
    out["fem_newton"] = {"max_iters": fem["newton_max"], "mean_iters": fem["newton_mean"],
                         "all_converged": fem["converged"], "nodes": tm.num_nodes, "tets": tm.num_tets}
    nodes = tm.nodes
    tip = nodes[:, 0] >= L - 1e-9 * L
    tip_f = (traj_f[:, tip] - nodes[tip]).mean(1)
    out["fem"] = tip_metrics(tip_f, dt, down, side)
    if weights_fn is None:
        return out
    # ---------------------------------------------------------------- reduced
    t0 = time.perf_counter()
    Xc = _box_cubature(size, origin, n_cubature, cubature, seed)
    Wc, dWc = weights_fn(torch.from_numpy((Xc - center) / scale).float())
    dWc = dWc.to(torch.float64) / scale  # chain rule: d/dX_sim = d/dX_norm / scale
    kw = dict(E=E, nu=nu, density=density, dt=dt, gravity=gravity, up=tuple(up), floor_height=None, damping=0.0,
              newton_iters=20, solver="newton", tol=1e-10, grad_tol=1e-9)
    kw.update(sim_kwargs or {})
    sim_r = SubspaceSimulator(torch.from_numpy(Xc), Wc.to(torch.float64), dWc, float(np.prod(size)), **kw)
    pin_idx = np.nonzero(Xc[:, 0] <= pin_width)[0]
    if pin_idx.size == 0:
        raise ValueError(f"no cubature point lies in the pinned slab x <= {pin_width} m")
    sim_r.set_pins(torch.from_numpy(pin_idx))
    Wn, _ = weights_fn(torch.from_numpy((nodes - center) / scale).float())
    Wn = Wn.to(torch.float64).numpy()
    Xh = np.concatenate([nodes, np.ones((nodes.shape[0], 1))], 1)

    if eval_points is not None:
        Pe = np.asarray(eval_points, np.float64).reshape(-1, 3)
        We = weights_fn(torch.from_numpy((Pe - center) / scale).float())[0].to(torch.float64).numpy()
        Peh = np.concatenate([Pe, np.ones((Pe.shape[0], 1))], 1)

    def lbs(X, Wx, Xhx) -> np.ndarray:
        Z = sim_r.handle_transforms().numpy()  # [H, 3, 4], simulation frame
        return X + np.einsum("nh,hac,nc->na", Wx, Z, Xhx)

    traj_r = [lbs(nodes, Wn, Xh)]
    traj_e = [lbs(Pe, We, Peh)] if eval_points is not None else None
    iters_r = []
    for _ in range(steps):
        st = sim_r.step()
        iters_r.append(st.newton_iters)
        traj_r.append(lbs(nodes, Wn, Xh))
        if traj_e is not None:
            traj_e.append(lbs(Pe, We, Peh))
    traj_r = np.stack(traj_r, 0)
    if traj_e is not None:
        out["traj_eval"] = np.stack(traj_e, 0)
    out["seconds"]["reduced"] = time.perf_counter() - t0
    out["reduced_newton"] = {"max_iters": int(max(iters_r) if iters_r else 0), "handles": int(Wc.shape[1]),
                             "pinned_cubature": int(pin_idx.size), "n_cubature": int(Xc.shape[0])}
    # ---------------------------------------------------------------- comparison
    curve = np.array([chamfer_distance(a, b) for a, b in zip(traj_f, traj_r)])
    out["chamfer_curve_m2"] = curve
    out["chamfer_m2"] = {1: float(curve[min(1, steps)]), steps: float(curve[steps])}
    out["rms_m"] = np.sqrt(((traj_f - traj_r) ** 2).sum(-1).mean(-1))
    tip_r = (traj_r[:, tip] - nodes[tip]).mean(1)
    out["reduced"] = tip_metrics(tip_r, dt, down, side)
    out["tip_fem_m"], out["tip_reduced_m"] = tip_f, tip_r
    out["traj_reduced"] = traj_r
    f, r = out["fem"], out["reduced"]
    out["sag_ratio"] = r["first_sag_m"] / f["first_sag_m"] if f["first_sag_m"] else float("nan")
    out["period_ratio"] = r["period_s"] / f["period_s"] if f["period_s"] == f["period_s"] else float("nan")
    out["sideways_drift_mm"] = {"reduced": 1e3 * r["side_max_m"], "fem": 1e3 * f["side_max_m"]}
    return out
