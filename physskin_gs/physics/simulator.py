"""Subspace backward-Euler simulator over skinning handles (PhysSkin Eq. 3; Simplicits; method.md section 9).

State: the handle transforms z (12 H entries, H = m + 1 handles) and their velocity. Everything lives in the
*simulation frame* (metres, seconds, kg): cubature positions X (n_c, 3), weights W (n_c, H) and weight gradients
dW/dX (n_c, H, 3) already carry the frame-scale chain rule (``grad_sim W = grad_norm W / s``, method.md 3).

Layout. Internally the coordinates are ordered q[a, h, c] (output axis a, handle h, homogeneous input c), i.e.
a (3, 4H) matrix Q with ``x_p = X_p + Q phi_p`` where ``phi_p = W_p (x) [X_p; 1]`` (4H,), and
``F_p = I + Q G_p^T`` with ``G_p[b, (h, c)] = W_ph delta_bc + dW_ph/dX_b X~_pc`` (3, 4H). Then
B = I_3 (x) phi^T and dvec(F)/dq = I_3 (x) G, so the mass matrix is block diagonal and the elastic Hessian
``sum_c v_c J_c^T H_c J_c`` is ONE GEMM ``G_all^T [4H, 3 n_c] @ Y [3 n_c, 6 * 4H]`` over the 6 blocks
a <= a' (method.md 9.2).
The public handle transforms are Z (H, 3, 4) with ``Z[h, a, c] = q[a, h, c]`` mapped back to the caller's basis.

Handle basis conditioning (documented choice). Learned weight columns can be far from orthogonal, which makes
the 12H x 12H Newton systems ill-conditioned. By default the simulator replaces W by W T, where T (H, H') whitens
the columns under the lumped-mass inner product over the cubature points (eigen-decomposition of the Gram
matrix, directions with eigenvalue < 1e-9 of the largest dropped; the constant handle is kept exactly). The span
is unchanged, so the dynamics are the same in exact arithmetic (rigid and affine motion remain exact); transforms are
mapped back with ``Z_h = sum_j T_hj Z'_j`` so deformers use the original field.

One step (method.md 9.2): minimise
``E(q) = 1/2 (q - q_t - h qdot_t)^T M (q - q_t - h qdot_t) + h^2 [elastic + gravity + floor + pins + drags]
+ (h beta / 2) (q - q_t)^T K0 (q - q_t)`` (Rayleigh stiffness damping with beta = damping * h, K0 the elastic
Hessian at rest; rigid motions are not damped) by Newton with the analytic PSD-projected Neo-Hookean Hessian,
a Cholesky solve (more regularisation on failure) and Armijo backtracking (alpha = 1e-3, t <- 0.3 t, <= 10 tries).
The Hessian policy (``solver``: "newton", "chord", "adaptive") decides when the factor is recomputed (class
docstring). Evaluation is structure-of-arrays: one GEMM ``q @ [Phi; G]^T`` gives the positions and F - I of all
cubature points as contiguous rows, the energy and first Piola stress are elementwise numpy, and the gradient is
one GEMM back. The per-point projected Hessians and their rows Y come from a small C kernel when one compiles
(:mod:`physskin_gs.physics._hessian_native`), else from :func:`neohookean.projected_hessian_soa` (the reference).
Stability guard: a step still far from balance after ``newton_iters`` iterations (a residual force above
``FAR_RESIDUAL`` weights) iterates on with the exact Hessian, up to ``NEWTON_EXTRA`` x the budget; a step
whose result is non-finite, whose deformation gradients leave a sane range, or that still ends far from balance is
rejected and redone as two half steps (up to 3 levels); if it still fails, the state is kept and the velocity
zeroed. The state never becomes NaN.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

import numpy as np
import torch

from physskin_gs._threads import single_thread  # small per-point kernels: torch's pool is far slower at n ~ 1e3
from physskin_gs.elastic import lame_parameters
from physskin_gs.errors import OptionError
from physskin_gs.physics import _hessian_native, _lbs_native
from physskin_gs.physics import neohookean as nh

__all__ = ["SubspaceSimulator", "StepStats", "orthonormal_handle_basis", "single_thread", "usable_cores"]


# 6 blocks (a <= a') of the 3x3 block structure over output axes; the other 3 are transposes
_PAIRS = ((0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2))
# flat index into a row-major (9, 9) per-point Hessian giving the layout [b', (b, pair)]:
# H[(3a + b), (3a' + b')] for pair = (a, a')
_PAIR_INDEX = torch.tensor([(3 * a + b) * 9 + 3 * c + bp for bp in range(3) for b in range(3) for (a, c) in _PAIRS])


def usable_cores() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one, else the CPU count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _add_kron(M: torch.Tensor, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """``M += kron(A, B)`` in place, block by block, for A (3, 3), B (K, K), M (3K, 3K); the zero entries of A (all
    but one for a floor whose up is an axis) cost nothing. Returns M. ``torch.kron`` is the reference (a test)."""
    K = B.shape[0]
    Mv = M.view(3, K, 3, K)
    for a in range(3):
        for b in range(3):
            c = float(A[a, b])
            if c != 0.0:
                Mv[a, :, b, :].add_(B, alpha=c)
    return M


def _chol_solve(L: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """(n,) solution of (L L^T) d = g for a lower Cholesky factor L (n, n): two triangular solves (about half the
    time of ``torch.cholesky_solve`` for one right-hand side at the simulator's sizes), in L's precision (a float32
    factor gives a float32-accurate correction), returned in g's dtype."""
    y = torch.linalg.solve_triangular(L, g[:, None].to(L.dtype), upper=False)
    return torch.linalg.solve_triangular(L.T, y, upper=True)[:, 0].to(g.dtype)


def _same_mask(a, b) -> bool:
    """Equality of two optional boolean masks (None = no floor)."""
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and bool((a == b).all())


def orthonormal_handle_basis(W: torch.Tensor, mass: torch.Tensor, rel_tol: float = 1e-9) -> torch.Tensor:
    """Whitening transform T (H, H') with ``(W T)^T diag(mass) (W T) / sum(mass) = I`` (H' <= H).

    W: (n, H) weights at the cubature points; mass: (n,) lumped masses (kg). Directions of the Gram matrix with
    eigenvalue below ``rel_tol * max`` (linearly dependent columns) are dropped. When the last column is constant
    (the constant handle), it is kept EXACTLY as the last whitened column and the others are orthogonalised
    against it before whitening, so dropping a direction can never remove the constant function from the span
    (affine motion through the constant handle stays exact). float64.
    """
    Wd = W.to(torch.float64)
    m = mass.to(torch.float64)
    msum = m.sum()
    H = Wd.shape[1]
    last = Wd[:, -1]
    c = last.mean()
    if H > 1 and float(c.abs()) > 0 and float((last - c).abs().max()) <= 1e-9 * float(c.abs()):
        coef = (m @ Wd[:, :-1]) / (msum * c)  # [H-1]: mass-weighted projection of each column on the constant
        P = torch.cat([torch.eye(H - 1, dtype=torch.float64), -coef[None, :]], 0)  # [H, H-1]
        T_rest = P @ orthonormal_handle_basis(Wd @ P, m, rel_tol)
        T_const = torch.zeros(H, 1, dtype=torch.float64)
        T_const[-1, 0] = 1.0 / c
        return torch.cat([T_rest, T_const], 1)
    gram = (Wd * m[:, None]).T @ Wd / msum
    gram = 0.5 * (gram + gram.T)
    lam, U = torch.linalg.eigh(gram)
    keep = lam > rel_tol * lam.max().clamp_min(1e-300)
    return U[:, keep] / lam[keep].sqrt()[None, :]


@dataclass
class StepStats:
    """Statistics of one :meth:`SubspaceSimulator.step` call (wall-clock ms, Newton iterations summed over
    substeps, final objective gradient norm, number of rejected (sub)steps, ``failed``: steps that could not be
    taken even as eighth steps, where the state was kept and the velocity zeroed, energies in J)."""

    ms: float = 0.0
    newton_iters: int = 0
    grad_norm: float = 0.0
    substeps: int = 1
    rejected: int = 0
    hessians: int = 0
    failed: int = 0
    energy: Dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"ms": self.ms, "newton_iters": self.newton_iters, "grad_norm": self.grad_norm,
                "substeps": self.substeps, "rejected": self.rejected, "hessians": self.hessians,
                "failed": self.failed, "energy": dict(self.energy)}


@dataclass
class _StepContext:
    h: float  # step size (s)
    q_pred: torch.Tensor  # (3, 4H') q_t + h qdot_t
    q_prev: torch.Tensor  # (3, 4H') q_t
    D: Optional[torch.Tensor]  # (12H', 12H') dissipation matrix of this step, or None


@dataclass
class _Eval:
    """The step objective's intermediate values at one iterate (structure-of-arrays over cubature points)."""

    q: torch.Tensor  # (3, 4H')
    x: np.ndarray  # (3, n) positions, metres
    F: np.ndarray  # (3, 3, n) deformation gradients [a, b, c]
    Jm1: np.ndarray  # (n,) det F - 1
    Jv: np.ndarray  # (n,) J - 1 of the volumetric term at each point: Jm1, or its cluster mean (mean dilatation)
    cof0: tuple  # first row of cof(F), 3 x (n,)
    cof: Optional[tuple] = None  # all of cof(F), 3 x 3 x (n,) (rows 1-2 on first use: :meth:`SubspaceSimulator._cof`)
    pe: Dict[str, float] = field(default_factory=dict)  # potential energy terms (J)
    d: Optional[np.ndarray] = None  # (n,) floor penetration (<= 0) or None without a floor
    Mdq: Optional[torch.Tensor] = None  # (3, 4H') M (q - q_pred)
    Dv: Optional[torch.Tensor] = None  # (12H',) D (q - q_prev)
    Sq: Optional[np.ndarray] = None  # (3, 4H') q S of the stabilization term, or None without it
    E: float = float("nan")  # objective value: inertia + h^2 potential + dissipation (kg m^2)


@dataclass
class _Spring:
    idx: torch.Tensor  # (k,) cubature indices
    target: torch.Tensor  # (k, 3) float64 target positions
    k: float  # stiffness per unit mass (1/s^2)
    hess: torch.Tensor  # (4H', 4H') Phi_P^T diag(m k) Phi_P (times 2 applied in use)
    #: m: beyond this distance from its target a point's pull stops growing (the energy goes on linearly: a
    #: drag's force is capped, :attr:`SubspaceSimulator.DRAG_MAX_G`); None: a plain spring (pins). ``hess`` is the
    #: plain spring's Hessian; :meth:`capped_hessian_np` gives what the capped points take away from it
    reach: Optional[float] = None

    def energy_np(self, r: np.ndarray) -> float:
        """sum over points of ``k |r|^2`` (per unit mass), capped beyond ``reach``: ``k (2 reach |r| - reach^2)``.
        r: (3, k) offsets from the targets (m)."""
        if self.reach is None:
            return self.k * float(np.vdot(r, r))
        n = np.sqrt(np.einsum("ak,ak->k", r, r))  # [k]
        c = self.reach
        return self.k * float(np.where(n <= c, n * n, 2.0 * c * n - c * c).sum())

    def force_scale_np(self, r: np.ndarray) -> Optional[np.ndarray]:
        """(k,) factor of each point's plain spring gradient ``2 k r``: ``min(1, reach / |r|)``; None: all 1."""
        if self.reach is None:
            return None
        n = np.sqrt(np.einsum("ak,ak->k", r, r))
        return np.minimum(1.0, self.reach / np.maximum(n, 1e-300))

    def capped_hessian_np(self, r: np.ndarray):
        """The capped points' change to the plain spring's Hessian, or None when no point is past ``reach``:
        (mask (k,) bool of the capped points, (3, 3, c) per-unit-mass weights ``2 k ((reach/|r| - 1) I - reach/|r|
        r^ r^T)``). The energy ``k (2 reach |r| - reach^2)`` of a capped point has the Hessian ``2 k reach / |r|
        (I - r^ r^T)``: no stiffness along the pull, whose force no longer grows, and the plain spring's scaled by
        reach / |r| across it (the pull turns with the target). It is positive semidefinite, so Newton steps stay
        descents; the plain spring's Hessian, an upper bound of it, made a far drag's steps 2-4x too short (a
        crate dragged hard converged linearly). r: (3, k) offsets from the targets (m)."""
        if self.reach is None:
            return None
        n = np.sqrt(np.einsum("ak,ak->k", r, r))  # [k]
        cap = n > self.reach
        if not cap.any():
            return None
        c = self.reach / n[cap]  # [c]
        rh = r[:, cap] / n[cap]  # [3, c]
        w = -c * rh[:, None, :] * rh[None, :, :]  # [3, 3, c]
        for a in range(3):
            w[a, a] += c - 1.0
        return cap, (2.0 * self.k) * w

    @property
    def idx_np(self) -> np.ndarray:
        return self.idx.numpy()

    @property
    def target_np(self) -> np.ndarray:
        """(3, k) view of the targets."""
        return self.target.numpy().T


class SubspaceSimulator:
    """Reduced-coordinate elastodynamics on skinning handles (see the module docstring).

    Args:
        points: (n_c, 3) cubature points, simulation frame, metres.
        weights: (n_c, H) skinning weights (constant handle last, any signs).
        weight_grads: (n_c, H, 3) dW/dX in the simulation frame (1/m).
        volume: object volume V in m^3 (mass = density * V, split evenly over the cubature points).
        E, nu, density: Young's modulus (Pa), Poisson ratio in (-1, 0.5), density (kg/m^3).
        dt: time step h (s). gravity: |g| in m/s^2, applied along ``-up``. up: (3,) up vector (normalised here).
        floor_height: floor position along ``up`` (metres, simulation frame) or None for no floor.
        damping: Rayleigh coefficient c >= 0, beta = c * dt (fraction of velocity removed per step for a mode
            with omega h = 1; rigid motion is not damped).
        newton_iters: maximum Newton iterations per step (3-5 recommended).
        orthonormalize: whiten the handle basis (module docstring).
        project_psd: project per-point Hessians to PSD (analytic eigensystem); False gives the exact Hessian
            (used to test against autograd).
        tol: Newton stops when the step's largest entry is below tol (handle coordinates are dimensionless or
            metres, so 1e-6 is a micrometre-scale change), or when the residual |G| / h^2 (a force, N) falls below
            grad_tol times the object's weight (method.md 9.2 uses an absolute |G| < 1e-3).
        friction: viscous floor friction eta (1/s) on cubature points touching the floor (0 = frictionless).
        solver: Hessian policy of the Newton iterations. "newton": a fresh Hessian at every iteration (quadratic
            convergence, the reference). "chord": one Hessian per step, its Cholesky factor reused by the step's
            later iterations. "adaptive" (default): like "chord", but a step that converged (to ``grad_tol`` /
            ``tol``) hands its factor on to the next step, so a calm scene factors the Hessian rarely; it is
            refreshed after a step that did not converge, when the step size, material, springs, floor or
            damping change, and at least every ``hessian_max_age`` steps. With "chord" and "adaptive", a factor
            from an earlier iterate is also refreshed when the line search had to backtrack with it (new stiff
            contacts) or failed with it. All minimise the same objective
            with the exact gradient and Armijo line search, so they converge to the same solution; they differ in
            cost per iteration and in how many iterations a given accuracy takes.
        num_threads: torch intra-op threads used during :meth:`step` (None: leave torch's setting).
        hessian_threads: threads of the Hessian assembly GEMM (default: up to 2; 3.8 -> 2.0 ms on 2 idle cores).
        volume_clusters: 0 (default) evaluates the whole energy per cubature point. k > 0 is a mean-dilatation
            split (Nagtegaal, Parks & Rice 1974; Simo, Taylor & Pister 1985, "mean dilatation"): the cubature
            points are grouped into k clusters (farthest-point centres, nearest centre), each point keeps
            ``lam_p = min(lam, mu)`` of the volumetric term ``lam/2 (J - 1)^2`` and the rest,
            ``(lam - lam_p)/2 (Jbar_k - 1)^2``, sees only the mean J of its cluster, so a reduced basis is not
            forced to keep every point's volume (volumetric locking at nu -> 0.5). Affine motion has the same
            energy either way. Opt-in and experimental: on kaolin's cantilever (eigen basis, 1024 points) k = 64
            brings Chamfer@100 from 2.6e-3 to 8.7e-4 m^2 and the period ratio from 0.95 to 0.98, but does not
            remove the sideways drift (``scripts/eval_cantilever.py --volume-clusters``).
        hessian_points: None (default): the elastic Hessian sums every cubature point. k < n: it sums k of them
            (farthest-point subset, each standing for n / k points' volume), while the energy and the gradient
            keep all n: an inexact Newton model, k / n of the assembly's cost (the cost that grows as n H^2). The
            solution is the same (the line search and the convergence test use the exact objective and gradient);
            iterations may be more. Once a step's line search backtracks with it, or past the step's iteration
            budget, the rest of the step uses the exact sum. See :meth:`set_hessian_points`.
        stabilization: None, or the sub-points of one-point-per-cell cubature (a voxel mesh's cells, each point
            standing for its cell): ``(points (m, 3) m, weights (m, H), weight_grads (m, H, 3) 1/m, owner (m,)
            int cubature index, fraction (m,) of the owner's volume)``, e.g. the 6 tets of each cube. The elastic
            energy then gains ``mu/2 sum_t v_t |F_t - Fbar_c|^2`` (F_t at each sub-point, Fbar_c their
            volume-weighted mean in its cell): with it the ``mu/2 |F|^2`` part of the Neo-Hookean energy, which is
            quadratic in F, is integrated over every sub-point exactly, while the volumetric part keeps one point
            per cell (selective reduced integration, Hughes 1980: full integration of the deviatoric-like term,
            reduced of the volumetric one, which would lock at nu -> 0.5). One point per cell alone leaves the
            within-cell variation of F free: a soft column sagged 41 % more under its own weight than with a point
            per tet. The term is a constant quadratic form in q (:meth:`stabilization_matrix`), rotation-invariant,
            zero for any motion whose F is uniform within each cell.
    Raises OptionError for invalid material, shapes, ``volume_clusters``, ``hessian_points`` or ``stabilization``.
    """

    FLOOR_K = 1e6  # penalty stiffness per unit mass, 1/s^2 (penetration ~ (n / n_contact) g / (2 k))
    #: m: an object smaller than this gets the floor stiffer by ``SIZE_REF / L`` and the contact gap smaller by
    #: ``L / SIZE_REF`` (L the cubature points' largest extent; the instance's ``FLOOR_K`` and ``CONTACT_GAP``), so
    #: it sinks into the floor by the same fraction of its size as an object of SIZE_REF: with a fixed stiffness a
    #: 1 cm object sank 3 % of its height, a 1 mm one 10 %. (Objects from 10 cm up, the default scale's 1 m
    #: included, are not changed.)
    SIZE_REF = 0.1
    PIN_K = 1e6
    #: pins are at least this many times stiffer (per unit mass) than the material's own E / (rho L^2) (L the
    #: object's size): 1e3 gives PIN_K for the defaults (E 1e5 Pa, 100 kg/m^3, 1 m), and a wood or plastic object
    #: a pin as firm relative to its stiffness as a soft one gets (a fixed 1e6 lets a 2 GPa beam swing on its pin)
    PIN_RATIO = 1e3
    DRAG_K = 2e3
    #: a drag pulls each grabbed point with at most this many times its weight (at 1 g): past DRAG_MAX_G g / (2
    #: DRAG_K) from its target (0.12 m) its pull stops growing. A drag has no other bound: fifteen handles of a crate
    #: dragged a metre into a frozen body pulled with 340 g, and let go, the squeezed crate flew back at 12 m/s
    DRAG_MAX_G = 50.0
    CONTACT_GAP = 1e-3  # m: a cubature point this close to the floor counts as touching it (friction)
    HESS_EPS = 1e-4  # method.md 9.2 regulariser epsilon, scaled by the total mass (kg) so it is unit-consistent

    def __init__(self, points: torch.Tensor, weights: torch.Tensor, weight_grads: torch.Tensor, volume: float,
                 E: float = 2e4, nu: float = 0.45, density: float = 100.0, dt: float = 0.03, gravity: float = 9.8,
                 up=(0.0, 0.0, 1.0), floor_height: Optional[float] = None, damping: float = 0.02,
                 newton_iters: int = 5, orthonormalize: bool = True, project_psd: bool = True,
                 tol: float = 1e-6, num_threads: Optional[int] = 1, grad_tol: float = 1e-3,
                 solver: str = "adaptive", friction: float = 10.0,
                 hessian_max_age: int = 20, hessian_threads: Optional[int] = None,
                 volume_clusters: int = 0, hessian_points: Optional[int] = None,
                 stabilization: Optional[tuple] = None) -> None:
        if points.ndim != 2 or points.shape[1] != 3:
            raise OptionError(f"cubature points must be (n, 3), got {tuple(points.shape)}")
        n = points.shape[0]
        if weights.shape[0] != n or weight_grads.shape[:2] != weights.shape or weight_grads.shape[2] != 3:
            raise OptionError(f"weights {tuple(weights.shape)} / grads {tuple(weight_grads.shape)} do not match "
                              f"{n} cubature points")
        if not (volume > 0 and math.isfinite(volume)):
            raise OptionError(f"object volume must be positive and finite, got {volume}")
        dd = torch.float64
        self.n = n
        self.X = points.to(dd)
        #: m: the cubature points' largest extent
        self.size = float((self.X.max(0).values - self.X.min(0).values).max()) if n else 0.0
        if 0.0 < self.size < self.SIZE_REF:  # this object's floor (class constants: the 1 m values)
            self.FLOOR_K = type(self).FLOOR_K * (self.SIZE_REF / self.size)
            self.CONTACT_GAP = type(self).CONTACT_GAP * (self.size / self.SIZE_REF)
        W = torch.nan_to_num(weights.to(dd))
        dW = torch.nan_to_num(weight_grads.to(dd))
        self.H_orig = W.shape[1]
        self.volume = float(volume)
        self.dt = float(dt)
        self.newton_iters = int(newton_iters)
        self.project_psd = project_psd
        self.tol = tol
        self.num_threads = num_threads
        self.grad_tol = float(grad_tol)
        self.solver = solver
        self.hessian_max_age = int(hessian_max_age)
        self.hessian_threads = min(2, usable_cores()) if hessian_threads is None else int(hessian_threads)
        self._hsub: Optional[dict] = None  # the Hessian's cubature subset (set_hessian_points)
        self._hess_version = 0  # bumped by every change that changes the Hessian beyond the state
        self.frozen = False  # set_frozen: the body holds its pose (a kinematic obstacle for other bodies)
        self._chol: Optional[torch.Tensor] = None  # cached Cholesky factor of the step Hessian
        self._chol_key = None
        self._chol_age = 0
        self._chol_converged = False  # the last step converged (the adaptive policy may reuse its factor)
        self._chol_contacts = None  # floor-contact mask (n,) bool of the iterate the factor was computed at
        self._chol_elastic = None  # (12H', 12H') elastic part of the factor's Hessian (:meth:`_elastic_hessian`)
        self._chol_partial = False  # the factor kept an earlier factor's elastic part (KEEP_ELASTIC)
        self._density = float(density)
        self._stiff_scale: Optional[np.ndarray] = None  # (n,) per-point factor on E (None: uniform)
        self._stiff_scale_t: Optional[torch.Tensor] = None  # the same as a tensor
        self._mass_scale: Optional[np.ndarray] = None  # (n,) per-point factor on the density (None: uniform)
        self._set_volume_clusters(points.to(dd), int(volume_clusters))
        self.set_material(E=E, nu=nu, density=density)
        if orthonormalize:
            T = orthonormal_handle_basis(W, torch.ones(n, dtype=dd))
        else:
            T = torch.eye(self.H_orig, dtype=dd)
        self.T = T  # (H, H')
        self._set_kernel_weights(W, dW, T)
        W = W @ T
        dW = torch.einsum("nhb,hj->njb", dW, T)
        self.H = W.shape[1]
        self.K4 = 4 * self.H
        Xh = torch.cat([self.X, torch.ones(n, 1, dtype=dd)], dim=1)  # [n, 4]
        self.Phi = (W[:, :, None] * Xh[:, None, :]).reshape(n, self.K4)  # [n, 4H]
        self.G = self._deformation_rows(self.X, W, dW)  # [n, 3, 4H] float64
        self.G_all = self.G.reshape(n * 3, self.K4)  # [3n, 4H], rows (c, b)
        self.G_all32T = self.G_all.float().T.contiguous()  # [4H, 3n]
        self.G32 = self.G.float().contiguous()  # [n, 3, 4H] float32 for the row kernels
        self._Ybuf: Optional[torch.Tensor] = None  # [n, 18, 4H] Hessian rows buffer of the C kernel
        self.set_hessian_points(hessian_points)
        self._stab_D: Optional[torch.Tensor] = None  # (m, 3, 4H') sub-point G minus its cell's mean (whitened q)
        self._stab_w: Optional[torch.Tensor] = None  # (m,) sub-point volume fractions
        self._stab_owner: Optional[torch.Tensor] = None  # (m,) cubature index of each sub-point
        self._S: Optional[torch.Tensor] = None  # cached stabilization_matrix()
        self._S_np: Optional[np.ndarray] = None
        if stabilization is not None:
            self._set_stabilization(*stabilization)
        self._rayleigh: Optional[torch.Tensor] = None  # cached beta h K0 of _step_dissipation
        self._rayleigh_key = None
        self._friction_D: Optional[torch.Tensor] = None  # cached D with the floor friction of one touching set
        self._friction_D_key = None
        self._x_cache = None  # (q, x (3, n) numpy) of the last accepted step: the next step's start positions
        self._floor_lift: Optional[np.ndarray] = None  # (n,) per-point contact lift (set_floor_lift)
        self._floor_lift_t: Optional[torch.Tensor] = None
        self._blk: Optional[torch.Tensor] = None  # cached mass + spring block of _hessian
        self._blk_key = None
        self._phig_np: Optional[np.ndarray] = None  # [Phi; G]^T, built on first use (_PhiG_T_np)
        self._Xt_np = self.X.T.contiguous().numpy()  # [3, n]
        self._eye3n_np = np.eye(3)[:, :, None]  # [3, 3, 1]
        self.pin: Optional[_Spring] = None
        self.drags: Dict[int, _Spring] = {}
        self._rebuild_mass()
        self.gravity = float(gravity)
        self.set_up(up)
        self.floor_height = floor_height
        self.floor_region = None  # a finite support (set_floor), None: an unbounded plane
        self.damping = float(damping)
        self.friction = float(friction)
        self._next_drag = 0
        self.reset()

    # ------------------------------------------------------------------------------------------ parameters
    def set_material(self, E: Optional[float] = None, nu: Optional[float] = None,
                     density: Optional[float] = None) -> None:
        """Change Young's modulus E (Pa), Poisson ratio nu, density (kg/m^3) at any time. Raises OptionError."""
        E = self.E if E is None else float(E)
        nu = self.nu if nu is None else float(nu)
        density = self._density if density is None else float(density)
        try:
            mu, lam = lame_parameters(E, nu)
        except ValueError as exc:
            raise OptionError(str(exc)) from None
        if not (density > 0 and math.isfinite(density)):
            raise OptionError(f"density must be positive, got {density}")
        self.E, self.nu, self.mu, self.lam = E, nu, mu, lam
        # mean dilatation (volume clusters): the points keep lam_p = min(lam, mu) of lam (a stable per-point
        # material, nu_p <= 1/4), the clusters' mean J carries the rest
        self._lam_point = lam if self._vcl is None else min(lam, self.MEAN_DILATATION_POINT_LAMBDA * mu)
        self._density = density
        self.m_p = density * self.volume / self.n  # kg per cubature point of the base density
        # per-point masses (kg) where regions have their own density, else None
        self._m_pt = None if self._mass_scale is None else self.m_p * self._mass_scale
        self.total_mass = self.m_p * (self.n if self._mass_scale is None else float(self._mass_scale.sum()))
        self.v_p = self.volume / self.n  # m^3 per cubature point
        if self._vcl is not None:  # row scale sqrt((lam - lam_p) v / n_k) of the clusters' rank-one term
            self._vrow = torch.from_numpy(np.sqrt((lam - self._lam_point) * self.v_p / self._vcount))  # [K]
        self._K0 = None
        self._S = self._S_np = None  # its point stiffness factors may have changed
        self.invalidate_hessian()
        if getattr(self, "pin", None) is not None:  # a pin stays as firm relative to the new material
            self.pin.k = self.pin_stiffness()
        if hasattr(self, "Phi"):
            self._rebuild_mass()

    def set_point_materials(self, stiffness: Optional[np.ndarray] = None,
                            density: Optional[np.ndarray] = None) -> None:
        """Per-region materials: factors on Young's modulus and on the density of each cubature point.

        Point p then has ``E_p = stiffness[p] * E`` and ``rho_p = density[p] * rho`` (Poisson ratio common, so its
        Lame parameters are ``stiffness[p] * (mu, lam)``): the elastic energy is ``sum_p v_p E_p/E psi(F_p; mu,
        lam)`` and the mass matrix and gravity use ``m_p rho_p / rho`` (kaolin's Simplicits takes per-point
        materials the same way). Penalty terms (floor, pins, drags, friction) keep the mean point mass as their
        unit. :meth:`set_material` afterwards changes the base E / nu / density and keeps these factors.

        Args:
            stiffness, density: (n,) positive finite factors (array-like) or None for 1 everywhere.
        Raises:
            OptionError for a wrong shape, a non-positive or non-finite factor, or with ``volume_clusters`` (the
            mean-dilatation split assumes one material).
        """
        def check(a, what):
            if a is None:
                return None
            a = np.asarray(a, dtype=np.float64).reshape(-1)
            if a.shape[0] != self.n:
                raise OptionError(f"{what} factors: {a.shape[0]} values for {self.n} cubature points")
            if not (np.all(np.isfinite(a)) and np.all(a > 0)):
                raise OptionError(f"{what} factors must be positive and finite")
            return None if np.all(a == 1.0) else a.copy()

        st, de = check(stiffness, "stiffness"), check(density, "density")
        if st is not None and self._vcl is not None:
            raise OptionError("per-region stiffness does not combine with volume_clusters (one material only)")
        self._stiff_scale, self._mass_scale = st, de
        self._stiff_scale_t = None if st is None else torch.from_numpy(st)
        self.set_material()  # masses, rest stiffness and cached factors follow

    @property
    def point_materials(self) -> Tuple[Optional[np.ndarray], Optional[np.ndarray]]:
        """(stiffness, density) per-point factors of :meth:`set_point_materials` (None where uniform)."""
        return self._stiff_scale, self._mass_scale

    @staticmethod
    def _deformation_rows(X: torch.Tensor, W: torch.Tensor, dW: torch.Tensor) -> torch.Tensor:
        """(m, 3, 4H) float64 G with ``(F - I)[a, b] = sum_k q[a, k] G[p, b, k]`` at points X (m, 3) m, from the
        (whitened) weights W (m, H) and their gradients dW (m, H, 3) 1/m: G[p, b, h, c] = W[p, h] delta(b, c) +
        dW[p, h, b] Xh[p, c], Xh = [X, 1] (the LBS map's derivative, method.md 9)."""
        m, H = W.shape
        Xh = torch.cat([X, torch.ones(m, 1, dtype=X.dtype)], dim=1)  # [m, 4]
        eye34 = torch.zeros(3, 4, dtype=X.dtype)
        eye34[:, :3] = torch.eye(3, dtype=X.dtype)
        G = W[:, None, :, None] * eye34[None, :, None, :] + dW.permute(0, 2, 1)[:, :, :, None] * Xh[:, None, None, :]
        return G.reshape(m, 3, 4 * H).contiguous()

    def _set_stabilization(self, points, weights, weight_grads, owner, fraction) -> None:
        """Store the sub-points' deviation from their cell's mean deformation map (constructor's ``stabilization``).
        Raises OptionError for mismatched shapes, an owner outside the cubature points or a bad fraction."""
        dd = torch.float64
        X = torch.as_tensor(points).to(dd)
        W = torch.nan_to_num(torch.as_tensor(weights).to(dd))
        dW = torch.nan_to_num(torch.as_tensor(weight_grads).to(dd))
        own = torch.as_tensor(owner).long().reshape(-1)
        frac = torch.as_tensor(fraction).to(dd).reshape(-1)
        m = X.shape[0]
        if X.shape != (m, 3) or W.shape != (m, self.H_orig) or dW.shape != (m, self.H_orig, 3) \
                or own.shape[0] != m or frac.shape[0] != m:
            raise OptionError(f"stabilization: points {tuple(X.shape)}, weights {tuple(W.shape)}, grads "
                              f"{tuple(dW.shape)}, owner {tuple(own.shape)}, fraction {tuple(frac.shape)} do not "
                              f"match (m, 3), (m, {self.H_orig}), (m, {self.H_orig}, 3), (m,), (m,)")
        if m and (int(own.min()) < 0 or int(own.max()) >= self.n):
            raise OptionError(f"stabilization: owner indices must lie in [0, {self.n - 1}]")
        if not bool(torch.isfinite(frac).all()) or bool((frac <= 0).any()):
            raise OptionError("stabilization: volume fractions must be positive and finite")
        G = self._deformation_rows(X, W @ self.T, torch.einsum("nhb,hj->njb", dW, self.T))  # [m, 3, 4H]
        tot = torch.zeros(self.n, dtype=dd).index_add_(0, own, frac)  # [n]
        mean = torch.zeros(self.n, 3, self.K4, dtype=dd).index_add_(0, own, G * frac[:, None, None])
        mean = mean / tot.clamp_min(1e-300)[:, None, None]
        self._stab_D = G - mean[own]  # [m, 3, 4H]: F_t - Fbar_c = q D_t^T (per row a of F)
        self._stab_w, self._stab_owner = frac, own
        self._S = self._S_np = None
        self.invalidate_hessian()

    def stabilization_matrix(self) -> Optional[torch.Tensor]:
        """(4H', 4H') float64 S with ``sum_t v_t E_t / E |F_t - Fbar_c|^2 = sum_a q[a] S q[a]^T`` over the
        sub-points of ``stabilization`` (v_t their volume, E_t / E their point's stiffness factor), or None
        without: the stabilisation energy is ``mu / 2`` times that (the constructor's ``stabilization``)."""
        if self._stab_D is None:
            return None
        if self._S is None:
            v = self._stab_w * self.v_p  # [m] m^3
            if self._stiff_scale_t is not None:
                v = v * self._stiff_scale_t.to(v.dtype)[self._stab_owner]
            D = self._stab_D  # [m, 3, 4H]
            self._S = torch.einsum("m,mbk,mbl->kl", v, D, D)
            self._S = 0.5 * (self._S + self._S.T)
            self._S_np = self._S.numpy()
        return self._S

    SOLVERS = ("newton", "chord", "adaptive")
    #: A Newton step whose residual force (the objective's gradient / h^2) is above FAR_RESIDUAL x the body's weight
    #: after ``newton_iters`` iterations goes on iterating with the exact Hessian, up to NEWTON_EXTRA x
    #: ``newton_iters``; still above it, the step is rejected and halved. Ordinary steps end far below it (the
    #: default's worst unconverged step on four captures: 2.5 weights; the default ``grad_tol`` is 1e-3 weights).
    FAR_RESIDUAL = 10.0
    NEWTON_EXTRA = 4
    #: a factor refreshed only because the floor contacts changed keeps its elastic part (the GEMM over the
    #: cubature points, most of a Hessian's cost) and takes the new contacts' penalty; False: every refresh
    #: recomputes it (the reference). As ``BodyContactSystem.KEEP_ELASTIC`` for contacts between bodies.
    KEEP_ELASTIC = True
    MEAN_DILATATION_POINT_LAMBDA = 1.0  # lam_p / mu of the per-point volumetric share with volume clusters
    use_native = True  # use the C Hessian-rows kernel when it is available (physics/_hessian_native.py)

    @property
    def _g_np(self) -> np.ndarray:
        return self.g_vec.numpy()

    @property
    def _up_np(self) -> np.ndarray:
        return self.up.numpy()

    @property
    def solver(self) -> str:
        """Hessian policy: "newton", "chord" or "adaptive" (class docstring). Settable at any time."""
        return self._solver

    @solver.setter
    def solver(self, value: str) -> None:
        if value not in self.SOLVERS:
            raise OptionError(f"solver must be one of {', '.join(self.SOLVERS)}, got {value!r}")
        self._solver = value
        self._chol = None

    def invalidate_hessian(self) -> None:
        """Drop the cached Hessian factor (called by every setter that changes the objective's Hessian)."""
        self._hess_version += 1
        self._chol = None
        self._pe_cache = None

    @property
    def density(self) -> float:
        """Mass density in kg/m^3 (set with :meth:`set_material`)."""
        return self._density

    def _rebuild_mass(self) -> None:
        if self._m_pt is None:
            self.Mblk = self.m_p * (self.Phi.T @ self.Phi)  # [4H, 4H]; full M = I_3 (x) Mblk
        else:  # per-point masses: Phi^T diag(m) Phi
            self.Mblk = self.Phi.T @ (torch.from_numpy(self._m_pt)[:, None] * self.Phi)
        for s in ([self.pin] if self.pin else []) + list(self.drags.values()):
            P = self.Phi[s.idx]
            s.hess = self.m_p * s.k * (P.T @ P)

    def set_gravity(self, g: float, direction=None) -> None:
        """Gravity magnitude g (m/s^2) along ``direction`` (3,) if given, else along -up."""
        self.gravity = float(g)
        if direction is not None:
            d = torch.as_tensor(direction, dtype=torch.float64).reshape(3)
            d = d / d.norm().clamp_min(1e-30)
            self.g_vec = self.gravity * d
        else:
            self.g_vec = -self.gravity * self.up
        self._pe_cache = None

    def set_up(self, up) -> None:
        """Up direction (3,) in the simulation frame (normalised here); gravity becomes -g up.

        Raises OptionError if ``up`` is zero or not finite."""
        u = torch.as_tensor(up, dtype=torch.float64).reshape(3)
        if not torch.isfinite(u).all() or u.norm() == 0:
            raise OptionError(f"up vector must be non-zero and finite, got {up}")
        self.up = u / u.norm()
        self.g_vec = -self.gravity * self.up
        self.invalidate_hessian()  # the floor normal enters the contact and friction terms

    def set_floor(self, height: Optional[float], region=None) -> None:
        """Floor plane at ``height`` along up (metres, simulation frame), or None to remove it. ``region``: a
        :class:`~physskin_gs.physics.floor_region.FloorRegion` where the plane exists (a finite support, with an
        optional ground below), or None for an unbounded plane."""
        self.floor_height = None if height is None else float(height)
        self.floor_region = region if height is not None else None
        self.invalidate_hessian()

    def set_floor_lift(self, lift: Optional[np.ndarray]) -> None:
        """Per cubature point lift (n,) metres, or None: point p meets the floor when it comes within lift[p] of it
        (the body's surface lies that far below the point in its column:
        :func:`~physskin_gs.geometry.bottom.lifts_above_bottom`; negative: the point lies below the body's surface
        and meets the floor that far under it), so a base whose cubature points lie at different heights above it
        rests on all of them. Raises ValueError for a wrong shape or a non-finite value."""
        if lift is None:
            self._floor_lift, self._floor_lift_t = None, None
        else:
            a = np.ascontiguousarray(lift, dtype=np.float64).reshape(-1)
            if a.shape != (self.n,) or not np.all(np.isfinite(a)):
                raise ValueError(f"floor lift must be ({self.n},) and finite, got shape {a.shape}")
            self._floor_lift, self._floor_lift_t = a, torch.from_numpy(a)
        self.invalidate_hessian()

    def _floor_heights(self, x: np.ndarray):
        """The floor height along up for points ``x`` (3, n), metres: ``floor_height`` (a float) for an unbounded
        plane, else (n,) per point from :attr:`floor_region` (-inf where nothing holds a point); plus each point's
        lift (:meth:`set_floor_lift`) when there is one."""
        region = getattr(self, "floor_region", None)
        h = self.floor_height if region is None else region.heights(x, self._up_np, self.floor_height)
        return h if self._floor_lift is None else h + self._floor_lift

    def _floor_heights_t(self, x: torch.Tensor):
        """:meth:`_floor_heights` of points ``x`` (n, 3): a float, or a float64 tensor without gradient (the
        region's membership is piecewise constant)."""
        region = getattr(self, "floor_region", None)
        h = self.floor_height if region is None else region.heights_torch(x, self.up, self.floor_height)
        return h if self._floor_lift_t is None else h + self._floor_lift_t

    def set_friction(self, eta: float) -> None:
        """Viscous floor friction eta >= 0 (1/s) on cubature points touching the floor. Raises OptionError."""
        if not (eta >= 0 and math.isfinite(eta)):
            raise OptionError(f"friction must be >= 0, got {eta}")
        self.friction = float(eta)
        self.invalidate_hessian()

    def set_damping(self, c: float) -> None:
        """Rayleigh stiffness-damping coefficient c >= 0 (beta = c * dt; see the class docstring).

        Raises OptionError if c < 0 or not finite."""
        if not (c >= 0 and math.isfinite(c)):
            raise OptionError(f"damping must be >= 0, got {c}")
        self.damping = float(c)
        self.invalidate_hessian()

    def _make_spring(self, idx: torch.Tensor, target: Optional[torch.Tensor], k: float) -> _Spring:
        idx = torch.as_tensor(idx, dtype=torch.long).reshape(-1)
        if idx.numel() == 0:
            raise OptionError("a pin or drag must select at least one cubature point")
        tgt = self.positions()[idx].clone() if target is None else torch.as_tensor(target, dtype=torch.float64).reshape(-1, 3).clone()
        P = self.Phi[idx]
        return _Spring(idx=idx, target=tgt, k=float(k), hess=self.m_p * float(k) * (P.T @ P))

    def pin_stiffness(self) -> float:
        """Stiffness per unit mass (1/s^2) of a pin: ``max(PIN_K, PIN_RATIO E / (rho L^2))`` with L the largest
        extent of the cubature points (m), so that a pin holds a stiff material as firmly as a soft one."""
        L = self.size if hasattr(self, "size") else 1.0
        return max(self.PIN_K, self.PIN_RATIO * self.E / (self._density * max(L, 1e-9) ** 2))

    def set_pins(self, idx: Optional[torch.Tensor], targets: Optional[torch.Tensor] = None) -> None:
        """Pin cubature points ``idx`` to ``targets`` (k, 3) (default: their rest positions); None removes pins."""
        if idx is None:
            self.pin = None
            self.invalidate_hessian()
            return
        if targets is None:
            targets = self.X[torch.as_tensor(idx, dtype=torch.long)]
        self.pin = self._make_spring(idx, targets, self.pin_stiffness())
        self.invalidate_hessian()

    def set_frozen(self, on: bool) -> None:
        """Freeze the body where it is now (``on``) or let it move again. A frozen body keeps its q and has zero
        velocity: its steps change nothing (gravity, pins, drags and the floor act on it in no way), and a
        :class:`~physskin_gs.physics.contact.BodyContactSystem` treats it as an immovable obstacle (its unknowns
        are held at their values in the joint solve, so other bodies rest on it and push off it). Unfreezing
        starts it from rest."""
        on = bool(on)
        if on != self.frozen:
            self.frozen = on
            self.qdot = torch.zeros_like(self.qdot)
            self.invalidate_hessian()

    def add_drag(self, idx: torch.Tensor, targets: Optional[torch.Tensor] = None, k: Optional[float] = None) -> int:
        """Start a drag spring on cubature points ``idx`` (targets default to their current positions). Returns id."""
        s = self._make_spring(idx, targets, self.DRAG_K if k is None else k)
        s.reach = self.DRAG_MAX_G * 9.80665 / (2.0 * s.k)  # its pull at most DRAG_MAX_G x each point's weight
        did = self._next_drag
        self._next_drag += 1
        self.drags[did] = s
        self.invalidate_hessian()
        return did

    def update_drag(self, drag_id: int, targets: torch.Tensor) -> None:
        """Move the targets (k, 3) of drag ``drag_id`` (simulation frame). Raises OptionError for an unknown id."""
        if drag_id not in self.drags:
            raise OptionError(f"unknown drag id {drag_id}")
        t = torch.as_tensor(targets, dtype=torch.float64).reshape(-1, 3)
        if t.shape[0] not in (1, self.drags[drag_id].idx.numel()):
            raise OptionError("drag targets must have one row per selected point")
        if torch.isfinite(t).all():
            self.drags[drag_id].target = t.expand(self.drags[drag_id].idx.numel(), 3).clone()
            self._pe_cache = None

    def remove_drag(self, drag_id: int) -> None:
        """Remove the drag spring ``drag_id`` (from :meth:`add_drag`); an unknown id is ignored."""
        if self.drags.pop(drag_id, None) is not None:
            self.invalidate_hessian()

    # ------------------------------------------------------------------------------------------ state
    def reset(self) -> None:
        """Back to rest (q = 0) with zero velocity."""
        self.q = torch.zeros(3, self.K4, dtype=torch.float64)
        self.qdot = torch.zeros_like(self.q)
        self.time = 0.0
        self._chol = None

    def positions(self, q: Optional[torch.Tensor] = None) -> torch.Tensor:
        """(n_c, 3) current cubature positions x = X + B z (metres)."""
        q = self.q if q is None else q
        return self.X + self.Phi @ q.T

    def deformation_gradients(self, q: Optional[torch.Tensor] = None) -> torch.Tensor:
        """(n_c, 3, 3) F at the cubature points (F = I + J z, method.md 3)."""
        q = self.q if q is None else q
        Ft = (self.G_all @ q.T).reshape(self.n, 3, 3)  # [n, b, a] = (F - I)^T
        return Ft.transpose(1, 2) + torch.eye(3, dtype=q.dtype)

    def handle_transforms(self, q: Optional[torch.Tensor] = None) -> torch.Tensor:
        """(H, 3, 4) float64 handle transforms Z in the caller's (un-whitened) basis, simulation frame."""
        q = self.q if q is None else q
        Zp = q.reshape(3, self.H, 4).permute(1, 0, 2)  # [H', 3, 4]
        return torch.einsum("hj,jac->hac", self.T, Zp)

    # ------------------------------------------------------------------------------------------ energies
    def _potential(self, q: torch.Tensor) -> Dict[str, torch.Tensor]:
        return self._eval(q, None).pe

    def kinetic_energy(self) -> float:
        """1/2 qdot^T M qdot (J)."""
        return float(0.5 * (self.qdot * (self.qdot @ self.Mblk)).sum())

    def energies(self) -> Dict[str, float]:
        """Kinetic, elastic, gravity (relative to rest), penalty energies and their total, in J."""
        cached = getattr(self, "_pe_cache", None)
        pe = dict(cached[1]) if cached is not None and cached[0] is self.q else self._potential(self.q)
        pe["kinetic"] = self.kinetic_energy()
        pe["total"] = sum(pe.values())
        return pe

    def _rest_stiffness(self) -> torch.Tensor:
        if self._K0 is None:
            F0 = torch.eye(3, dtype=torch.float64).expand(self.n, 3, 3).contiguous()
            if self._vcl is None:
                Hc = nh.hessian(F0, self.mu, self.lam) * self.v_p
                if self._stiff_scale is not None:
                    Hc = Hc * self._stiff_scale_t[:, None, None]
                self._K0 = self._assemble(Hc)
            else:  # at rest cof F = I, so dJ_p/dq = G_p
                self._K0 = self._assemble(nh.hessian(F0, self.mu, self._lam_point) * self.v_p)
                self._K0 += self._cluster_volumetric_hessian(self.G)
            # K0 is PSD in exact arithmetic (rigid motion costs nothing), but the float32 assembly leaves its null
            # space slightly negative (about 1e-9 of its largest eigenvalue); the Rayleigh term beta h^2 K0 would
            # then make the step objective unbounded along directions the mass barely sees (a near-dependent basis),
            # which a stiff region (per-region materials) turns into a blow-up. Clip once per material change.
            w, Vk = torch.linalg.eigh(0.5 * (self._K0 + self._K0.T))
            self._K0 = (Vk * w.clamp_min(0.0)) @ Vk.T
            S = self.stabilization_matrix()
            if S is not None:  # PSD by construction
                for a in range(3):
                    self._K0[a * self.K4:(a + 1) * self.K4, a * self.K4:(a + 1) * self.K4] += self.mu * S
        return self._K0

    # ------------------------------------------------------------------------------------------ mean dilatation
    def _set_volume_clusters(self, X: torch.Tensor, k: int) -> None:
        """Partition the cubature points into ``k`` clusters for the mean-dilatation volumetric term (0: per point).

        Clusters: farthest-point centres of the cubature points, each point to its nearest centre (deterministic).
        Raises OptionError for a negative k or k > n."""
        from physskin_gs.geometry.sampling import farthest_point_sampling

        if k < 0 or k > X.shape[0]:
            raise OptionError(f"volume_clusters must be in [0, {X.shape[0]}] (0: per point), got {k}")
        self.volume_clusters = k
        if k == 0 or k == X.shape[0]:
            self._vcl, self._vcount = None, None
            return
        centres = X[torch.as_tensor(farthest_point_sampling(X, k, seed=0), dtype=torch.long)]  # [k, 3]
        lab = torch.cdist(X, centres).argmin(1).numpy()  # [n] int64
        _, lab = np.unique(lab, return_inverse=True)  # renumbered so every cluster is non-empty
        self._vcl = lab.reshape(-1)  # [n]
        self._vcl_t = torch.from_numpy(self._vcl)
        self._vcount = np.bincount(self._vcl).astype(np.float64)  # [K]

    def set_hessian_points(self, k: Optional[int]) -> None:
        """Assemble the elastic Hessian from ``k`` of the n cubature points (a farthest-point subset of the rest
        positions, each weighted n / k) instead of all: None, or k >= n, restores the exact sum. The energy and
        gradient always use every point. Raises OptionError for k < 16."""
        if k is None or int(k) >= self.n:
            self._hsub = None
            return
        from physskin_gs.geometry.sampling import farthest_point_sampling

        k = int(k)
        if k < 16:
            raise OptionError(f"hessian_points must be >= 16 (or None for all {self.n}), got {k}")
        idx = np.sort(farthest_point_sampling(self.X, k, seed=0)).astype(np.int64)  # [k]
        g = self.G32[torch.from_numpy(idx)].contiguous()  # [k, 3, 4H]
        self._hsub = {"idx": idx, "idx_t": torch.from_numpy(idx), "G32": g,
                      "GT": g.reshape(k * 3, self.K4).T.contiguous(), "scale": self.n / k, "Y": None}

    @property
    def hessian_points(self) -> Optional[int]:
        """How many cubature points the elastic Hessian sums (None: all; :meth:`set_hessian_points`)."""
        return None if self._hsub is None else int(self._hsub["idx"].size)

    def _c_coeff(self, ev: "_Eval") -> np.ndarray:
        """(n,) coefficient of cof F in P (and of d2J/dF2 in the Hessian): lam (J - 1) - mu per point, or with
        clusters lam_p (J - 1) + (lam - lam_p) (Jbar - 1) - mu."""
        if self._vcl is None:
            return self.lam * ev.Jm1 - self.mu
        return self._lam_point * ev.Jm1 + (self.lam - self._lam_point) * ev.Jv - self.mu

    def _cof(self, ev: "_Eval") -> tuple:
        """cof(F) at ``ev`` as rows of (n,) arrays, ``cof[a][b]``; rows 1-2 are computed once per iterate."""
        if ev.cof is None:
            f = ev.F.reshape(9, self.n)
            ev.cof = (ev.cof0,
                      (f[2] * f[7] - f[1] * f[8], f[0] * f[8] - f[2] * f[6], f[1] * f[6] - f[0] * f[7]),
                      (f[1] * f[5] - f[2] * f[4], f[2] * f[3] - f[0] * f[5], f[0] * f[4] - f[1] * f[3]))
        return ev.cof

    def _cluster_volumetric_hessian(self, dJ: torch.Tensor) -> torch.Tensor:
        """sum_k (lam - lam_p) V_k grad Jbar_k grad Jbar_k^T, (12H', 12H') float64 in q order, from the per-point
        dJ_p/dq (n, 3, 4H'): the rank-one part of the clusters' volumetric term (lam - lam_p)/2 V_k (Jbar_k - 1)^2
        (PSD; its d2J part is in the per-point Hessians)."""
        K = self._vcount.shape[0]
        gc = torch.zeros(K, 3, self.K4, dtype=torch.float64).index_add_(0, self._vcl_t, dJ)  # [K, 3, 4H] n_k gbar
        R = gc.reshape(K, -1) * self._vrow[:, None]  # V_k gbar gbar^T = (v / n_k) gc gc^T
        return R.T @ R

    _PAIRS = _PAIRS
    _PAIR_INDEX = _PAIR_INDEX

    def _assemble(self, Hc: torch.Tensor) -> torch.Tensor:
        """sum_c J_c^T Hc_c J_c for per-point (n, 9, 9) Hessians (volume weights included) -> (12H', 12H') in
        q order, float64 (method.md 9.2). Only the 6 blocks (a <= a') are formed: Y[c, (b, pair), k'] =
        sum_b' Hc[c, (a, b), (a', b')] G[c, b', k'] by three broadcast multiply-adds, then ONE float32 GEMM
        (:meth:`_assemble_rows`). :meth:`_assemble_reference` is the plain per-point version it is tested against."""
        n = self.n
        Hs = Hc.to(torch.float32).reshape(n, 81).index_select(1, self._PAIR_INDEX).reshape(n, 3, 18)  # [n, b', (b, pair)]
        G3 = self.G32.transpose(0, 1)  # [3 (b'), n, 4H] view
        Y = torch.mul(Hs[:, 0, :, None], G3[0][:, None, :])  # [n, 18, 4H]
        Y.addcmul_(Hs[:, 1, :, None], G3[1][:, None, :])
        Y.addcmul_(Hs[:, 2, :, None], G3[2][:, None, :])
        return self._assemble_rows(Y)

    def _assemble_rows(self, Y: torch.Tensor, GT: Optional[torch.Tensor] = None) -> torch.Tensor:
        """(12H', 12H') float64 from the rows Y (n, 18, 4H) float32 of :meth:`_assemble`: ONE GEMM
        ``G_all^T [4H, 3n] @ Y [3n, 6 * 4H]`` gives the 6 blocks (a <= a'); the other 3 are transposes. ``GT``:
        the [4H, 3k] rows of a cubature subset whose rows Y (k, 18, 4H) are (default: all points)."""
        GT = self.G_all32T if GT is None else GT
        n, K4 = Y.shape[0], self.K4
        with single_thread(self.hessian_threads):  # the one kernel of a step that gains from a second core
            R = torch.mm(GT, Y.view(n * 3, 6 * K4))
        R = R.view(K4, 6, K4)  # [4H, (pair, k')] float32, like the GEMM
        out = torch.empty(3, K4, 3, K4, dtype=torch.float64)  # the copies below convert
        for p, (a, c) in enumerate(self._PAIRS):
            blk = R[:, p, :]
            if a == c:
                out[a, :, a, :] = blk
                out[a, :, a, :] += blk.T
                out[a, :, a, :] *= 0.5
            else:
                out[a, :, c, :] = blk
                out[c, :, a, :] = blk.T
        return out.reshape(3 * K4, 3 * K4)

    def _assemble_reference(self, Hc: torch.Tensor) -> torch.Tensor:
        """Plain reference of :meth:`_assemble`: ``sum_c J_c^T Hc_c J_c`` with the dense J_c = I_3 (x) G_c (9, 12H'),
        float64. Slow; for tests."""
        J = torch.einsum("ad,nbk->nabdk", torch.eye(3, dtype=torch.float64), self.G).reshape(self.n, 9, 3 * self.K4)
        return torch.einsum("nik,nij,njl->kl", J, Hc.to(torch.float64), J)

    # ------------------------------------------------------------------------------------------ evaluation
    def _set_kernel_weights(self, W: torch.Tensor, dW: torch.Tensor, T: torch.Tensor) -> None:
        """Keep the weights (n, H) and gradients (n, H, 3) before the whitening T (H, H') for the evaluation kernels
        (:meth:`_deform_rows`), transposed to (H, n) / (H, 3, n): float32 when every value is a float32 value (the
        pipeline's fields are; half the bytes, nothing rounded), else float64."""
        w32, d32 = W.float(), dW.float()
        exact = bool(torch.equal(w32.double(), W) and torch.equal(d32.double(), dW))
        Wk, dWk = (w32, d32) if exact else (W, dW)
        self._Wt_np = Wk.T.contiguous().numpy()  # [H, n]
        self._dWt_np = dWk.permute(1, 2, 0).contiguous().numpy()  # [H, 3, n]
        self._T_np = T.numpy()  # [H, H']
        self._T_eye = bool(T.shape[0] == T.shape[1] and torch.equal(T, torch.eye(T.shape[0], dtype=T.dtype)))

    @property
    def _PhiG_T_np(self) -> np.ndarray:
        """(4H', 4n) float64 [Phi; G]^T, G's rows ordered (b, c), so that ``q @ [Phi; G]^T`` gives the displacements
        and F - I as contiguous rows: the GEMM reference of the evaluation kernels (:meth:`_deform_rows`), used when
        they are unavailable. Built on first use (2.2 MB at 1000 points and 17 handles, 8.6 MB at 2048 and 33), as
        numpy: numpy's BLAS is 2-3x faster than torch's for these thin products on 1 thread (bench_sim)."""
        if self._phig_np is None:
            n = self.n
            self._phig_np = torch.cat([self.Phi, self.G.permute(1, 0, 2).reshape(3 * n, self.K4)], 0).T \
                .contiguous().numpy()
        return self._phig_np

    def _deform_rows(self, q: np.ndarray) -> np.ndarray:
        """``q [3, 4H'] @ [Phi; G]^T [4H', 4n]`` (3, 4n) float64: the displacements and F - I at the cubature points
        (:meth:`_eval`), by the C kernel from W and grad W when :attr:`use_native` and it is available
        (:mod:`._lbs_native`: with several bodies the stored rows no longer stay in cache), else the GEMM. The kernel
        takes the weights before whitening, so q goes through T first: sum_j (W T)_j q_j = sum_h W_h (T q)_h."""
        if self.use_native:
            qk = q if self._T_eye else np.matmul(self._T_np, q.reshape(3, self.H, 4)).reshape(3, -1)  # [3, 4H]
            out = _lbs_native.deform(np.ascontiguousarray(qk), self._Wt_np, self._dWt_np, self._Xt_np)
            if out is not None:
                return out
        return q @ self._PhiG_T_np

    def _project_rows(self, rhs: np.ndarray) -> np.ndarray:
        """``([Phi; G]^T [4H', 4n] @ rhs^T [4n, 3])^T`` (3, 4H') float64 for rhs (3, 4n) (:meth:`_gradient`), by
        the C kernel like :meth:`_deform_rows` (its result in the weights' own handles, then through T^T), else the
        GEMM."""
        if self.use_native:
            g = _lbs_native.project(rhs, self._Wt_np, self._dWt_np, self._Xt_np)  # [3, 4H]
            if g is not None:
                if self._T_eye:
                    return g
                return np.matmul(self._T_np.T, g.reshape(3, self.H_orig, 4)).reshape(3, -1)  # [3, 4H']
        return (self._PhiG_T_np @ rhs.T).T

    def _eval(self, q: torch.Tensor, ctx: Optional["_StepContext"]) -> "_Eval":
        """Objective of one step at q (method.md 9.2), in structure-of-arrays form: one product
        ``q [3, 4H] @ [Phi; G]^T [4H, 4n]`` (:meth:`_deform_rows`: the C kernel, or the GEMM) gives the displacements
        and F - I at all cubature points as contiguous rows, then everything is elementwise over n (numpy float64: ~1 us per operation on 1e3-element rows,
        several times less than torch's per-op overhead). With ctx None only the potential terms are evaluated."""
        n, mu, lam = self.n, self.mu, self.lam
        out = self._deform_rows(q.numpy())  # [3, 4n] = [a, (block, c)]: block 0 = x - X, block 1 + b = (F - I)[:, a, b]
        x = self._Xt_np + out[:, :n]  # [3, n]
        F = out[:, n:].reshape(3, 3, n) + self._eye3n_np  # [a, b, n]
        f = F.reshape(9, n)
        c00 = f[4] * f[8] - f[5] * f[7]
        c01 = f[5] * f[6] - f[3] * f[8]
        c02 = f[3] * f[7] - f[4] * f[6]
        Jm1 = f[0] * c00 + f[1] * c01 + f[2] * c02 - 1.0  # [n] J - 1
        I1 = float(np.vdot(f, f))
        if self._vcl is None and self._stiff_scale is not None:  # per-region E: sum_p e_p psi_p
            Jv = Jm1
            psi_p = 0.5 * mu * (np.einsum("kn,kn->n", f, f) - 3.0) + (0.5 * lam) * Jm1 * Jm1 - mu * Jm1  # [n]
            psi_sum = float(self._stiff_scale @ psi_p)
        elif self._vcl is None:
            Jv = Jm1
            psi_sum = 0.5 * mu * (I1 - 3.0 * n) + 0.5 * lam * float(Jm1 @ Jm1) - mu * float(Jm1.sum())
        else:  # mean dilatation: lam_p per point, the rest of lam on the mean J of each cluster
            Jc = np.bincount(self._vcl, weights=Jm1, minlength=self._vcount.shape[0]) / self._vcount  # [K]
            Jv, lp = Jc[self._vcl], self._lam_point
            psi_sum = (0.5 * mu * (I1 - 3.0 * n) + 0.5 * lp * float(Jm1 @ Jm1)
                       + 0.5 * (lam - lp) * float(self._vcount @ (Jc * Jc)) - mu * float(Jm1.sum()))
        ev = _Eval(q=q, x=x, F=F, Jm1=Jm1, Jv=Jv, cof0=(c00, c01, c02))
        ev.pe["elastic"] = self.v_p * psi_sum
        if self._stab_D is not None:  # mu/2 sum_t v_t |F_t - Fbar|^2 (selective reduced integration)
            qn = q.numpy()
            self.stabilization_matrix()
            ev.Sq = qn @ self._S_np  # [3, 4H]
            ev.pe["elastic"] += 0.5 * mu * float(np.vdot(qn, ev.Sq))
        gx = self._g_np @ x  # [n]
        ev.pe["gravity"] = -(self.m_p * float(gx.sum()) if self._m_pt is None else float(self._m_pt @ gx))
        if self.floor_height is not None:
            ev.d = np.minimum(self._up_np @ x - self._floor_heights(x), 0.0)  # [n]
            ev.pe["floor"] = self.m_p * self.FLOOR_K * float(ev.d @ ev.d)
        for name, s in self._springs():
            r = x[:, s.idx_np] - s.target_np  # [3, k]
            ev.pe[name] = ev.pe.get(name, 0.0) + self.m_p * s.energy_np(r)
        if ctx is None:
            return ev
        dq = q - ctx.q_pred
        ev.Mdq = dq @ self.Mblk  # [3, 4H]
        E = 0.5 * float((dq * ev.Mdq).sum()) + ctx.h * ctx.h * sum(ev.pe.values())
        if ctx.D is not None:
            v = (q - ctx.q_prev).reshape(-1)
            ev.Dv = ctx.D @ v
            E += 0.5 * float(v @ ev.Dv)
        ev.E = E
        return ev

    def _springs(self):
        return ([("pin", self.pin)] if self.pin else []) + [(f"drag{k}", v) for k, v in self.drags.items()]

    def _gradient(self, ev: "_Eval", ctx: "_StepContext", dx_extra: Optional[np.ndarray] = None) -> torch.Tensor:
        """Gradient (3, 4H) of the step objective at ``ev`` (from :meth:`_eval`): inertia + h^2 (elastic P through
        G, external forces through Phi, as one product ``[Phi; G]^T [4H, 4n] @ [f_ext | v P]^T [4n, 3]``,
        :meth:`_project_rows`) + dissipation.
        ``dx_extra``: optional (n, 3) gradient of a further potential with respect to the cubature points'
        positions (J/m; e.g. contact with other bodies), added to f_ext so it goes through the same product."""
        n, v = self.n, self.v_p
        F = ev.F
        rhs = np.empty((3, 4 * n))
        P = rhs[:, n:].reshape(3, 3, n)  # v P[a, b, c] = v (mu F + c cof F), written in place
        if self._stiff_scale is None:
            np.multiply(F, self.mu * v, out=P)
            cv = self._c_coeff(ev) * v  # [n] coefficient of cof F in P
        else:  # per-region E: every point's P times its factor
            ev_ = (self.mu * v) * self._stiff_scale  # [n]
            np.multiply(F, ev_, out=P)
            cv = self._c_coeff(ev) * (v * self._stiff_scale)
        cof = self._cof(ev)
        for a in range(3):
            for b in range(3):
                P[a, b] += cv * cof[a][b]
        fx = rhs[:, :n]
        if self._m_pt is None:
            fx[:] = (-self.m_p * self._g_np)[:, None]
        else:
            np.multiply(-self._g_np[:, None], self._m_pt[None, :], out=fx)
        if ev.d is not None:
            fx += (2.0 * self.m_p * self.FLOOR_K) * self._up_np[:, None] * ev.d[None, :]
        for _, s in self._springs():
            r = ev.x[:, s.idx_np] - s.target_np
            cap = s.force_scale_np(r)
            np.add.at(fx, (slice(None), s.idx_np), (2.0 * self.m_p * s.k) * (r if cap is None else r * cap))
        if dx_extra is not None:
            fx += dx_extra.T
        gq = self._project_rows(rhs)  # [3, 4H]
        if ev.Sq is not None:
            gq += self.mu * ev.Sq
        grad = ev.Mdq + (ctx.h * ctx.h) * torch.from_numpy(gq)  # [3, 4H]
        if ev.Dv is not None:
            grad = grad + ev.Dv.view(3, self.K4)
        return grad

    def _elastic_hessian(self, ev: "_Eval", exact: bool = False) -> torch.Tensor:
        """Elastic part (12H', 12H') float64 of the step Hessian at ``ev``, without the h^2 factor: the assembled
        per-point PSD-projected Neo-Hookean Hessians (plus the clusters' volumetric term), the costly part of
        :meth:`_hessian` (a GEMM over every cubature point). ``exact``: as there."""
        Y = None
        # per-point part; with volume clusters the rank-one volumetric term is per cluster (added below) and the
        # d2J/dF2 coefficient uses the cluster's mean J
        lam_p, c_p = (self.lam, None) if self._vcl is None else (self._lam_point, self._c_coeff(ev))
        if self.project_psd and self.use_native:  # fused C kernel (projection + rows), held to the path below
            hs = None if exact else self._hsub  # a cubature subset (set_hessian_points): rows of n / k points each
            if hs is None:
                if self._Ybuf is None:  # 5 MB for 1024 points: reused, a fresh allocation costs page faults
                    self._Ybuf = torch.empty(self.n, 18, self.K4, dtype=torch.float32)
                f, c, vol, G, buf, GT = ev.F.reshape(9, self.n), c_p, self.v_p, self.G32, self._Ybuf, None
                scale_t = None if self._stiff_scale is None else self._stiff_scale_t
            else:
                if hs["Y"] is None:
                    hs["Y"] = torch.empty(hs["idx"].size, 18, self.K4, dtype=torch.float32)
                f = np.ascontiguousarray(ev.F.reshape(9, self.n)[:, hs["idx"]])  # [9, k]
                c = None if c_p is None else np.ascontiguousarray(c_p[hs["idx"]])
                vol, G, buf, GT = self.v_p * hs["scale"], hs["G32"], hs["Y"], hs["GT"]
                scale_t = None if self._stiff_scale is None else self._stiff_scale_t[hs["idx_t"]]
            Y = _hessian_native.hessian_rows(f, self.mu, lam_p, vol, G, out=buf, c=c)
            if Y is not None:
                if scale_t is not None:  # per-region E: each point's rows times its factor
                    Y.mul_(scale_t.to(Y.dtype)[:, None, None])
                Hel = self._assemble_rows(Y, GT)
        if Y is None:  # no C kernel (or not projecting): the torch path over every point
            if self.project_psd:  # float32 out: assembled in float32 anyway
                Hc = nh.projected_hessian_soa(ev.F.reshape(9, self.n), self.mu, lam_p, torch.float32, c=c_p)
            else:
                Hc = nh.hessian(torch.from_numpy(ev.F).permute(2, 0, 1).contiguous(), self.mu, lam_p, c=c_p)
            Hc = Hc * self.v_p
            if self._stiff_scale is not None:
                Hc = Hc * self._stiff_scale_t.to(Hc.dtype)[:, None, None]
            Hel = self._assemble(Hc)
        if self._vcl is not None:
            cof = torch.from_numpy(np.stack([np.stack(r, 1) for r in self._cof(ev)], 1))  # [n, a, b] cof(F)
            Hel += self._cluster_volumetric_hessian(torch.einsum("pab,pbk->pak", cof, self.G))  # dJ_p/dq
        return Hel

    def _hessian(self, ev: "_Eval", ctx: "_StepContext", exact: bool = False,
                 elastic: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Hessian (12H', 12H') float64 of the step objective at ``ev``: h^2 (assembled per-point PSD-projected
        Neo-Hookean Hessians + spring and active-floor terms) + mass + dissipation. ``exact``: every cubature point,
        even with a Hessian subset (:meth:`set_hessian_points`). ``elastic``: the elastic part to use instead of
        :meth:`_elastic_hessian` at ``ev`` (one kept from an earlier iterate; not modified)."""
        Hel = self._elastic_hessian(ev, exact) if elastic is None else elastic.clone()
        h2 = ctx.h * ctx.h
        Hmat = Hel.mul_(h2)
        K4 = self.K4
        key = (self._hess_version, h2)  # mass and spring terms change only with material / springs (version)
        if self._blk_key != key:
            blk = self.Mblk.clone()
            for _, s in self._springs():
                blk += h2 * 2.0 * s.hess
            S = self.stabilization_matrix()
            if S is not None:
                blk += (h2 * self.mu) * S
            self._blk, self._blk_key = blk, key
        blk = self._blk
        for a in range(3):
            Hmat[a * K4:(a + 1) * K4, a * K4:(a + 1) * K4] += blk
        for _, s in self._springs():  # a far drag's capped points: their exact Hessian instead of the plain one's
            capped = s.capped_hessian_np(ev.x[:, s.idx_np] - s.target_np)
            if capped is None:
                continue
            cap, w = capped
            Pc = self.Phi[s.idx[torch.from_numpy(cap)]]  # [c, 4H]
            wt = torch.from_numpy(w * (self.m_p * h2))  # [3, 3, c]
            for a in range(3):
                for b in range(a, 3):
                    blk_ab = Pc.T @ (Pc * wt[a, b][:, None])  # [4H, 4H]
                    Hmat[a * K4:(a + 1) * K4, b * K4:(b + 1) * K4] += blk_ab
                    if b != a:
                        Hmat[b * K4:(b + 1) * K4, a * K4:(a + 1) * K4] += blk_ab
        if ev.d is not None:
            act = torch.from_numpy(ev.d < 0)
            if bool(act.any()):
                Pa = self.Phi[act]
                _add_kron(Hmat, (2.0 * self.m_p * self.FLOOR_K * h2) * torch.outer(self.up, self.up), Pa.T @ Pa)
        if ctx.D is not None:
            Hmat += ctx.D
        return Hmat

    def _objective(self, q, q_pred, q_prev, beta_h, with_derivs):
        """Backward-Euler objective E(q) (method.md 9.2) with optional gradient (3, 4H) (``with_derivs="grad"``)
        and Hessian (``True``). ``beta_h``: Rayleigh coefficient of ``beta_h/2 |q - q_prev|_K0^2``, or a
        (12H', 12H') dissipation matrix. Convenience wrapper over the step internals (tests, benchmarks)."""
        if isinstance(beta_h, torch.Tensor):
            D = beta_h
        else:
            D = beta_h * self._rest_stiffness() if beta_h > 0 else None
        ctx = _StepContext(h=self.dt, q_pred=q_pred, q_prev=q_prev, D=D)
        ev = self._eval(q, ctx)
        if not with_derivs:
            return ev.E
        grad = self._gradient(ev, ctx)
        if with_derivs == "grad":
            return ev.E, grad
        return ev.E, grad, self._hessian(ev, ctx)

    # ------------------------------------------------------------------------------------------ stepping
    def _factor(self, Hm: torch.Tensor):
        """Cholesky factor of Hm + eps I (eps = HESS_EPS x total mass, x100 on failure, 6 tries) or None. Hm is
        regularised in place (its diagonal keeps the last eps)."""
        reg = self.HESS_EPS * self.m_p * self.n
        diag = Hm.diagonal()
        diag += reg
        for _ in range(6):
            L, info = torch.linalg.cholesky_ex(Hm)
            if int(info) == 0:
                return L
            diag += 99.0 * reg  # eps x 100
            reg *= 100.0
        return None

    def _newton(self, q0: torch.Tensor, qdot0: torch.Tensor, h: float, stats: StepStats):
        """One backward-Euler step of size h from (q0, qdot0) by Newton with Armijo backtracking (module docstring;
        the Hessian policy is :attr:`solver`). Returns (q, final _Eval or None, iters, grad_norm, ok). A
        :attr:`frozen` body returns q0, evaluated, without iterating."""
        if self.frozen:
            return q0, self._eval(q0, _StepContext(h=h, q_pred=q0, q_prev=q0, D=None)), 0, 0.0, True
        ctx = _StepContext(h=h, q_pred=q0 + h * qdot0, q_prev=q0, D=self._step_dissipation(q0, h))
        key = (self._hess_version, h)
        if not (self.solver == "adaptive" and self._chol_converged and self._chol_key == key
                and self._chol_age < self.hessian_max_age):
            self._chol = None
        self._chol_age += 1
        q = ctx.q_pred.clone()
        ev = self._eval(q, ctx)
        gtol = self.grad_tol * h * h * self.total_mass * 9.8  # residual force below grad_tol x weight (at 1 g)
        gnorm, iters = float("inf"), 0
        factor_at = -1  # iteration at which the current factor was computed (-1: an earlier step)
        backtracked = False  # the last iteration's line search, with a factor from an earlier iterate, backtracked
        self._chol_converged = False
        far = self.FAR_RESIDUAL * h * h * self.total_mass * 9.8  # a residual force of FAR_RESIDUAL weights
        exact_factor = False  # the current factor sums every cubature point although a subset is set
        for it in range(self.NEWTON_EXTRA * self.newton_iters + 1):
            grad = self._gradient(ev, ctx)
            gnorm = float(grad.norm())
            if not math.isfinite(gnorm):
                return q, None, iters, gnorm, False
            g = grad.reshape(-1)
            if gnorm < gtol:
                self._chol_converged = True
                break
            # newton_iters is the budget of an ordinary step; one still far from balance (a residual force of
            # FAR_RESIDUAL weights) iterates on, up to NEWTON_EXTRA times the budget
            if it >= self.newton_iters and (gnorm <= far or it >= self.NEWTON_EXTRA * self.newton_iters):
                break
            contacts = None if ev.d is None else ev.d < 0
            # a factor from an earlier iterate is a poor model when its line search backtracked, or when the floor
            # contacts changed since it was computed: it lacks (or still carries) their stiff penalty
            stale = self._chol is not None and factor_at < it and (
                backtracked or not _same_mask(contacts, self._chol_contacts))
            # only the contacts changed: the elastic part of the factor is still the chord's model, the floor's
            # stiff penalty is what it lacks; a factor that already kept it, or one poor at its line search, is
            # refreshed whole ("newton", the reference, always is)
            keep = (stale and self.KEEP_ELASTIC and self.solver != "newton" and not backtracked
                    and not self._chol_partial and self._chol_elastic is not None)
            # a subset Hessian is no longer trusted past the budget, nor once a line search backtracked with it: the
            # exact one for the rest of the step (on a thin plant at 32 handles the subset's model took 44
            # iterations a step and rejected most steps, the exact one 5; a duck's modes basis at 32 handles
            # backtracked every step, 5 iterations and 3 factors a step, 52 ms, and now rests at 8 ms)
            exact = self._hsub is not None and (exact_factor or backtracked or it >= self.newton_iters)
            if exact and not exact_factor:
                stale, exact_factor, keep = True, True, False
            if self._chol is None or self.solver == "newton" or stale:
                Hel = self._chol_elastic if keep else self._elastic_hessian(ev, exact)
                Hm = self._hessian(ev, ctx, exact=exact, elastic=Hel)
                if not math.isfinite(float(Hm.sum())):  # any NaN or inf entry makes the sum one (10x cheaper)
                    return q, None, iters, float("nan"), False
                self._chol = self._factor(Hm)
                if self._chol is None:
                    self._chol_elastic = None
                    return q, None, iters, gnorm, False
                if not keep:  # the age counts from the elastic part's iterate, as a reused factor's
                    self._chol_key, self._chol_age = key, 0
                self._chol_elastic, self._chol_partial = Hel, keep
                self._chol_contacts = contacts
                factor_at = it
                stats.hessians += 1
            iters = it + 1
            delta = -_chol_solve(self._chol, g)
            slope = float(g @ delta)
            if slope >= 0 or float(delta.abs().max()) < self.tol:
                if slope < 0:  # converged: take the tiny last step
                    q = q + delta.view(3, self.K4)
                    ev = self._eval(q, ctx)
                    # a tiny step from a stale, too stiff factor is not convergence: only a fresh one counts
                    self._chol_converged = factor_at == it
                break
            t, E0 = 1.0, float(ev.E)
            D = delta.view(3, self.K4)
            accepted = False
            for _ in range(10):
                qn = q + t * D
                evn = self._eval(qn, ctx)
                En = float(evn.E)
                if math.isfinite(En) and En <= E0 + 1e-3 * t * slope:
                    accepted = True
                    break
                t *= 0.3
            if not accepted:
                if factor_at < it:  # a factor from an earlier iterate: refresh it and retry from this one
                    self._chol = None
                    continue
                break
            backtracked = t < 1.0 and factor_at < it  # a fresh factor that backtracks stays (full Newton would too)
            q, ev = qn, evn
        # a step that ends far from balance is not taken (_advance halves it): accepting it let a body sink through
        # the floor (a yucca at 32 handles: residual forces of 1e5-1e7 weights, its pot 26 % of its height under)
        ok = bool(torch.isfinite(q).all()) and (self._chol_converged or gnorm <= far)
        return q, ev, iters, gnorm, ok

    def _step_dissipation(self, q0: torch.Tensor, h: float, x0: Optional[torch.Tensor] = None):
        """Constant dissipation matrix D of one step: Rayleigh ``beta h K0`` (beta = damping * h) plus viscous floor
        friction ``h eta m_p (P_T (x) Phi_C^T diag(w) Phi_C)`` on the cubature points C touching the floor at the start
        of the step (P_T = I - up up^T, eta = ``friction`` in 1/s). Each touching point's w is the weight it carries in
        point weights (its floor force at the step's start over m_p 9.8 m/s^2, at least 1; in quarter-octave steps, so a
        resting body keeps its D): the friction follows the normal force, as Coulomb's does, and a body resting on 3 of
        its 1446 points feels it as much as one resting on all of them (with w = 1 a potted plant landed on its pot's
        rim and slid on at 0.47 m/s). ``x0``: the cubature points' positions at q0 (n, 3) when the caller has them.
        Returns None when both are off."""
        D = None
        if self.damping > 0:
            key = (self._hess_version, h, self.damping)  # K0 changes only with the material (version)
            if self._rayleigh_key != key:
                self._rayleigh = (self.damping * h * h) * self._rest_stiffness()
                self._rayleigh_key = key
            D = self._rayleigh
        if self.floor_height is not None and self.friction > 0:
            if x0 is None:
                cached = self._x_cache
                x0 = (torch.from_numpy(cached[1].T) if cached is not None and cached[0] is q0  # [n, 3]
                      else self.positions(q0))
            gap = (x0 @ self.up - self._floor_heights_t(x0)).numpy()  # [n] m above the floor
            touch = gap < self.CONTACT_GAP  # [n] bool
            if touch.any():
                # the weight each touching point carries, in point weights at 1 g: its penalty force 2 m_p k d over
                # m_p 9.8 (a fixed unit: under a weaker or no gravity a contact still carries its force)
                w = np.maximum(2.0 * self.FLOOR_K * np.maximum(-gap[touch], 0.0) / 9.8, 1.0)  # [c]
                w = np.exp2(np.round(4.0 * np.log2(w)) / 4.0)  # quarter octaves: a resting body keeps its D
                # a resting body touches the floor with the same points step after step: D is kept per touching set
                key = (touch.tobytes(), w.tobytes(), h, self.friction, self.m_p, tuple(self.up.tolist()),
                       self._rayleigh_key)
                if self._friction_D_key != key:
                    Pc = self.Phi[torch.from_numpy(touch)]  # [c, K4]
                    PT = torch.eye(3, dtype=torch.float64) - torch.outer(self.up, self.up)
                    Kf = torch.zeros(3 * self.K4, 3 * self.K4, dtype=torch.float64) if D is None else D.clone()
                    self._friction_D = _add_kron(Kf, (h * self.friction * self.m_p) * PT,
                                                 Pc.T @ (torch.from_numpy(w)[:, None] * Pc))
                    self._friction_D_key = key
                D = self._friction_D
        return D

    def _sane(self, q: torch.Tensor, ev: Optional["_Eval"]) -> bool:
        if ev is None or not torch.isfinite(q).all():
            return False
        # bounded handle transforms: |F|_Frobenius <= 50 at every cubature point (a NaN makes the max NaN)
        f = ev.F.reshape(9, -1)
        worst = float(np.einsum("kn,kn->n", f, f).max())
        return math.isfinite(worst) and worst <= 2500.0

    def _advance(self, h: float, depth: int, stats: StepStats) -> bool:
        q, ev, iters, gnorm, ok = self._newton(self.q, self.qdot, h, stats)
        stats.newton_iters += iters
        stats.grad_norm = gnorm
        if ok and self._sane(q, ev):
            self.qdot = (q - self.q) / h
            self.q = q
            self._pe_cache = (q, ev.pe)  # potential terms at the new state, for energies()
            self._x_cache = (q, ev.x)
            self.time += h
            return True
        stats.rejected += 1
        self._chol = None
        if depth >= 3:
            return False
        stats.substeps += 1
        return self._advance(0.5 * h, depth + 1, stats) and self._advance(0.5 * h, depth + 1, stats)

    def step(self, n: int = 1) -> StepStats:
        """Advance n steps of size dt. Returns StepStats (wall-clock ms for all n steps). Never produces NaN:
        a failed step is retried as half steps; if that fails too the velocity is zeroed."""
        stats = StepStats()
        t0 = time.perf_counter()
        with single_thread(self.num_threads):
            for _ in range(n):
                q_save, qd_save = self.q.clone(), self.qdot.clone()
                if not self._advance(self.dt, 0, stats):
                    self.q, self.qdot = q_save, torch.zeros_like(qd_save)
                    self.time += self.dt
                    stats.failed += 1
        stats.ms = (time.perf_counter() - t0) * 1e3
        return stats

    # ------------------------------------------------------------------------------------------ reference
    def objective_autograd(self, q: torch.Tensor, q_pred: torch.Tensor, q_prev: torch.Tensor, beta_h: float):
        """Plain reference: the same objective value from generic torch ops (elastic energy through
        :func:`physskin_gs.elastic.neohookean_energy_density`), for autograd gradient/Hessian checks."""
        from physskin_gs.elastic import neohookean_energy_density
        from physskin_gs.lbs import deformation_gradient, lbs_points

        Zp = q.reshape(3, self.H, 4).permute(1, 0, 2)
        W = self.Phi.reshape(self.n, self.H, 4)[:, :, 3]
        dW = self.G.reshape(self.n, 3, self.H, 4)[:, :, :, 3].permute(0, 2, 1)
        x = lbs_points(self.X, W, Zp)
        F = deformation_gradient(self.X, W, dW, Zp)
        dq = q - q_pred
        inert = 0.5 * (dq * (dq @ self.Mblk)).sum()
        if self._vcl is None:
            psi = neohookean_energy_density(F, self.mu, self.lam)  # [n]
            el = self.v_p * (psi.sum() if self._stiff_scale is None else (self._stiff_scale_t * psi).sum())
        else:  # mean dilatation: deviatoric + linear J terms per point, lam/2 (Jbar - 1)^2 per cluster
            J = torch.linalg.det(F)
            cnt = torch.from_numpy(self._vcount)
            Jbar = torch.zeros(cnt.shape[0], dtype=J.dtype).index_add(0, self._vcl_t, J) / cnt
            el = self.v_p * (neohookean_energy_density(F, self.mu, self._lam_point).sum()
                             + 0.5 * (self.lam - self._lam_point) * (cnt * (Jbar - 1.0) ** 2).sum())
        gx = x @ self.g_vec  # [n]
        pe = el - (self.m_p * gx.sum() if self._m_pt is None else (torch.from_numpy(self._m_pt) * gx).sum())
        if self.floor_height is not None:
            d = (x @ self.up - self._floor_heights_t(x)).clamp_max(0.0)
            pe = pe + self.m_p * self.FLOOR_K * (d * d).sum()
        for s in ([self.pin] if self.pin else []) + list(self.drags.values()):
            r = x[s.idx] - s.target
            if s.reach is None:
                pe = pe + self.m_p * s.k * (r * r).sum()
            else:  # capped beyond reach (_Spring.energy_np)
                n = r.norm(dim=1)
                c = s.reach
                pe = pe + self.m_p * s.k * torch.where(n <= c, n * n, 2.0 * c * n - c * c).sum()
        E = inert + self.dt ** 2 * pe
        if beta_h > 0:
            v = (q - q_prev).reshape(-1)
            E = E + 0.5 * beta_h * (v @ (self._rest_stiffness() @ v))
        return E

    def newton_step_autograd(self) -> None:
        """Reference step: the same Newton/line-search loop with the Hessian from autograd (torch.func.hessian)
        of :meth:`objective_autograd` and no per-point projection. Slow; for benchmarks and tests only."""
        h = self.dt
        q0, qd0 = self.q, self.qdot
        q_pred = q0 + h * qd0
        beta_h = self.damping * h * h
        q = q_pred.clone()
        eps = self.HESS_EPS * self.m_p * self.n
        f = lambda v: self.objective_autograd(v.reshape(3, self.K4), q_pred, q0, beta_h)  # noqa: E731
        for _ in range(self.newton_iters):
            v = q.reshape(-1)
            g = torch.func.grad(f)(v)
            Hm = torch.func.hessian(f)(v)
            eye = torch.eye(Hm.shape[0], dtype=Hm.dtype)
            L, info = torch.linalg.cholesky_ex(Hm + eps * eye)
            if int(info) != 0:
                L, info = torch.linalg.cholesky_ex(Hm + 1e3 * eps * eye)
            delta = -_chol_solve(L, g)
            slope = float(g @ delta)
            if slope >= 0 or float(delta.abs().max()) < self.tol:
                if slope < 0:
                    q = (v + delta).reshape(3, self.K4)
                break
            t, E0 = 1.0, float(f(v))
            for _ in range(10):
                if float(f(v + t * delta)) <= E0 + 1e-3 * t * slope:
                    break
                t *= 0.3
            q = (v + t * delta).reshape(3, self.K4)
        self.qdot = (q - q0) / h
        self.q = q
        self.time += h
