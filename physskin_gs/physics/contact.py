"""Several bodies stepped together: one implicit-Euler Newton solve over every body's handles, with penalty contact
between the bodies and against a static collider (issue 24; README, "Several objects, one scene").

Each body is a :class:`~physskin_gs.physics.simulator.SubspaceSimulator` (its own skinning basis, handles, cubature
points and material, all in one world frame: metres, the same up and gravity). One step minimises the sum of the
bodies' backward-Euler objectives plus ``h^2`` times the contact energy over all bodies' handle coordinates at once
(method.md 9.2), so momentum passes between bodies within the step:

    Phi(q_1 .. q_B) = sum_b Phi_b(q_b) + h^2 E_c(x(q))

**Contact samples.** A body's contact samples are its cubature points, each a sphere of radius ``r_b`` (by default
0.55 x the mean spacing s of its cubature points, so neighbouring spheres overlap and the surface has no gaps the
size of a sample). Two faces meet when their outer layers are s apart; sphere layers touch at 2 r_b where they
stack and at about 0.85 s where one nests in the other's pockets, so with 0.55 a body resting on another (and held
there by friction wherever it landed) sits within about 1 % of its size of face on face (a cube on a cube, 6-8
samples per edge, lattices at 0-35 degrees: -0.6 % .. +1.6 %, +1.2 % at most from 8 per edge; with 0.6: +0.9 ..
+3.3 %); the static collider is a point set (e.g. the captured support and background, subsampled) with
one radius ``r_s``. Two spheres of different bodies (or a body's sphere and a static one) closer than the sum of
their radii ``R`` overlap by ``delta = R - |x_i - x_j|`` and store

    E_ij = 1/2 k m delta^2    (k: :attr:`BodyContactSystem.contact_k` per unit mass, 1/s^2; m: the mean point mass)

a penalty of the same kind and stiffness per unit mass as the simulator's floor
(:attr:`BodyContactSystem.CONTACT_K`). Its gradient goes
through the bodies' LBS (``x_i = X_i + Phi_i q_b^T``); its Hessian is the Gauss-Newton term ``k m n n^T`` per pair
(``n`` the unit normal), PSD, coupling the two bodies' blocks: the joint Hessian is block-diagonal plus the contact
blocks, so a scene with no contact costs what its bodies cost alone.

**Friction.** Pairs in contact at the start of a step (``|x_i - x_j| < R``) also dissipate their relative tangential
motion during the step, ``1/2 h eta m |P_T (dx_i - dx_j)|^2`` (``P_T = I - n n^T``, ``dx`` a sample's displacement in
the step, ``eta`` the bodies' viscous ``friction`` in 1/s): the simulator's floor friction, between bodies and
against the collider. Viscous friction alone cannot hold a constant tangential load (a body resting across the
edge of another, where the sphere normals tilt, creeps off at F_t / (eta m)), so the pairs also carry lagged,
smoothed Coulomb friction (IPC, Li et al. 2020, Sec. 5): ``h^2 mu N f0(|u_T|)`` with N the pair's normal force
``k m delta`` at the start of the step, ``u_T = P_T (dx_i - dx_j)`` and ``f0`` the C1 ramp of IPC's Eq. 15 (``f0(y)
= -y^3 / (3 eps^2) + y^2 / eps + eps / 3`` below ``eps = eps_v h``, ``y`` above): sliding costs ``mu N`` per unit
of slip, and a load below ``mu N`` moves a pair by less than ``eps`` per step (``mu`` :attr:`BodyContactSystem.mu`,
``eps_v`` :attr:`BodyContactSystem.EPS_V`). Its Hessian is the PSD approximation ``h^2 mu N f1(y) / y P_T``.

**Tunnelling.** A step whose samples move by more than :attr:`BodyContactSystem.max_travel` of their radius is
redone as two half steps (up to 3 levels), so fast bodies are checked at sub-radius intervals.

Pure math: numpy / torch / scipy, no I/O.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

import numpy as np
import torch
from scipy.linalg.blas import stpsv as _stpsv
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components
from scipy.spatial import cKDTree

from physskin_gs._threads import single_thread
from physskin_gs.errors import OptionError
from physskin_gs.physics import _contact_native
from physskin_gs.physics.simulator import StepStats, SubspaceSimulator, _chol_solve, _StepContext

__all__ = ["BodyContactSystem", "ContactStats", "default_contact_radius"]

_NONE = np.zeros(0, np.int64)


def default_contact_radius(points: torch.Tensor, factor: float = 0.55) -> float:
    """Contact radius of a body's cubature points (n, 3) (metres): ``factor`` x their mean nearest-neighbour
    distance. Raises OptionError for fewer than 2 points."""
    p = np.asarray(points, dtype=np.float64)
    if p.shape[0] < 2:
        raise OptionError("a contact body needs at least 2 cubature points")
    d, _ = cKDTree(p).query(p, k=2)
    return float(factor * np.mean(d[:, 1]))


def _scatter_add(out: np.ndarray, idx: np.ndarray, vals: np.ndarray) -> None:
    """out[idx[p]] += vals[p] for (P, 3) vals with repeated indices (``np.add.at``, by one bincount per column)."""
    if idx.size == 0:
        return
    for c in range(out.shape[1]):
        out[:, c] += np.bincount(idx, weights=vals[:, c], minlength=out.shape[0])


def _pair_signature(p: "_Pairs") -> tuple:
    """Which samples touch what at an iterate (body-body and body-static pairs), for comparing two iterates."""
    return (p.i, p.j, p.s_i, p.s_j)


def _same_pairs(a: Optional[tuple], b: Optional[tuple], tol: float = 0.1) -> bool:
    """True when two :func:`_pair_signature` hold nearly the same pairs: fewer than ``tol`` of the larger set of
    body-body (and of body-static) pairs appear in only one of them (samples brushing the contact radius come and
    go at rest without making a factor a poor model)."""
    if a is None or b is None:
        return a is b
    for u, v in ((a[:2], b[:2]), (a[2:], b[2:])):
        big = max(u[0].size, v[0].size)
        if not big:
            continue
        if u[0].size == v[0].size and np.array_equal(u[0], v[0]) and np.array_equal(u[1], v[1]):
            continue  # the same pairs in the same order (one Verlet list's): no sort needed
        ku = u[0] * (1 << 31) + u[1]  # [P] one key per pair
        kv = np.sort(v[0] * (1 << 31) + v[1])
        at = np.minimum(np.searchsorted(kv, ku), max(kv.size - 1, 0))
        common = int(np.count_nonzero(kv[at] == ku)) if kv.size else 0  # pairs are unique within a signature
        if (ku.size - common) + (kv.size - common) > tol * big:
            return False
    return True


class _PackedCholesky:
    """A lower Cholesky factor L (n, n) kept as its packed lower triangle (column by column, float32): half the bytes
    of the square, and each Newton correction streams it twice (L y = g, then L^T x = y, by BLAS ``stpsv``): at
    several bodies it no longer stays in a core's cache between corrections (408 unknowns: 333 KB instead of 666).
    :func:`~physskin_gs.physics.simulator._chol_solve` on the square float32 factor is its reference (tested equal
    to float32 rounding)."""

    __slots__ = ("n", "ap")
    _flat: dict = {}  # n -> flat indices into L^T (row-major) of the packed order: column j of L, rows i >= j

    def __init__(self, L: torch.Tensor) -> None:
        n = int(L.shape[0])
        flat = self._flat.get(n)
        if flat is None:
            j, i = np.triu_indices(n)
            flat = self._flat[n] = j * n + i
        self.n = n
        self.ap = np.take(L.T.to(torch.float32).contiguous().numpy().reshape(-1), flat)  # [n (n + 1) / 2]

    def solve(self, g: torch.Tensor) -> torch.Tensor:
        """(n,) float64 solution of L L^T x = g for g (n,) (float32 accuracy, as the factor)."""
        y = _stpsv(self.n, self.ap, g.numpy().astype(np.float32), lower=1, trans=0, diag=0)
        x = _stpsv(self.n, self.ap, y, lower=1, trans=1, diag=0, overwrite_x=1)
        return torch.from_numpy(x.astype(np.float64))


def _solve(L, g: torch.Tensor) -> torch.Tensor:
    """Solution of L L^T x = g for a :class:`_PackedCholesky` or a square lower factor (torch)."""
    return L.solve(g) if isinstance(L, _PackedCholesky) else _chol_solve(L, g)


@dataclass
class ContactStats:
    """One :meth:`BodyContactSystem.step` call: wall-clock ms, Newton iterations, contact pairs at the end (body
    against body, body against the static collider), half steps taken, Hessians factored, deepest overlap (m).

    Per body: ``body_ms`` (B,) the wall-clock ms of the solves each body took part in (a body solved alone: its own;
    bodies solved together in one island, or all jointly: each is given that solve's whole time, not a share), and
    ``solved_together`` the bodies solved together in the last step (sorted tuples of body indices, every body in
    one of them)."""

    ms: float = 0.0
    newton_iters: int = 0
    pairs_body: int = 0
    pairs_static: int = 0
    substeps: int = 0
    hessians: int = 0
    max_overlap: float = 0.0
    failed: int = 0  # steps that could not be taken even as half steps: positions kept, velocities zeroed
    body_ms: list = field(default_factory=list)
    solved_together: list = field(default_factory=list)

    def _spent(self, bodies, t0: float) -> None:
        """Add the ms since ``t0`` (perf_counter) to every body of ``bodies``."""
        ms = (time.perf_counter() - t0) * 1e3
        for b in bodies:
            self.body_ms[b] += ms

    def as_dict(self) -> dict:
        """The fields as a JSON-ready dict (``contacts_body``, ``contacts_static``, ``max_overlap_m``,
        ``body_ms``, ``solved_together`` (lists of body indices), ...)."""
        return {"ms": self.ms, "newton_iters": self.newton_iters, "contacts_body": self.pairs_body,
                "contacts_static": self.pairs_static, "substeps": self.substeps, "hessians": self.hessians,
                "max_overlap_m": self.max_overlap, "failed": self.failed, "body_ms": [float(v) for v in self.body_ms],
                "solved_together": [list(g) for g in self.solved_together]}


@dataclass
class _Pairs:
    """Overlapping sample pairs at one iterate: body pairs (global sample indices i < j of different bodies) and
    body-static pairs (global sample index, static index); ``deepest``: their deepest overlap (m) where the C kernel
    measured it (None: not measured)."""

    i: np.ndarray
    j: np.ndarray
    s_i: np.ndarray
    s_j: np.ndarray
    deepest: Optional[float] = None


class _HessData:
    """The Gauss-Newton entries of the contact and friction terms at one iterate (what :meth:`BodyContactSystem.
    _contact_hessian` takes), computed by :meth:`BodyContactSystem._contact` / :meth:`~BodyContactSystem._friction`
    when first iterated: most iterates never need a Hessian."""

    def __init__(self, system: "BodyContactSystem", x: np.ndarray, pairs: _Pairs, fric: Optional[dict],
                 h2: float) -> None:
        self._args = (system, x, pairs, fric, h2)
        self._entries: Optional[list] = None

    def __iter__(self):
        if self._entries is None:
            system, x, pairs, fric, h2 = self._args
            _, _, gn = system._contact(x, pairs, True)
            if fric is not None:
                _, _, hf = system._friction(x - fric["x0"], fric, True)
                gn = gn + [(kind, i, j, ci / h2, cn / h2, n) for kind, i, j, ci, cn, n in hf]
            self._entries = gn
        return iter(self._entries)


class BodyContactSystem:
    """Bodies stepped together with penalty contact (module docstring).

    Args:
        bodies: the SubspaceSimulators (each with its own q; same world frame and time step: ``dt`` of the first
            is used for all).
        radii: contact radius per body (metres), or None for :func:`default_contact_radius` of each.
        static_points: optional (S, 3) static collider points (metres).
        static_radius: their radius (metres; default: the smallest body radius).
        contact_k: penalty stiffness per unit mass (1/s^2; default :attr:`CONTACT_K`).
        newton_iters: most Newton iterations per step.
        mu: Coulomb friction coefficient (default :attr:`MU`; 0: viscous friction only).
        native: evaluate the contact terms with the C kernel (:mod:`._contact_native`; default: when it builds
            here), False for the numpy reference.
        rest_pairs: ``(i, j, R)`` sample pairs of two bodies (global sample indices, i < j, bodies in order) that
            touch at their rest distance R (metres) instead of the sum of their radii, or None: the pairs that
            overlap at the bodies' current positions, each at its current distance (:meth:`touching_pairs`).
    Raises:
        OptionError for no bodies, mismatched radii or non-finite static points.
    """

    #: a step moving a sample further than this x its radius, with something within that sweep of it, is split
    max_travel = 1.0
    max_depth = 3
    #: a reused Hessian factor is refreshed after this many Newton corrections per body at the latest (the bodies'
    #: adaptive policy, 20, for one body): a factor of B bodies costs about B times one body's (their Hessians, then
    #: the contact Hessian and the Cholesky), so it is kept B times as long, the same refresh cost per body and step
    #: as each alone (two stacks of two cubes: 6.2 -> 5.9 ms a step, the Newton iterations as many)
    hessian_max_age = 20
    #: static points considered per contact sample (the nearest ones)
    STATIC_NEIGHBOURS = 8
    #: default penalty stiffness per unit mass (1/s^2), the floor's: a body resting on n_contact of its n samples
    #: overlaps by about (n / n_contact) g / k (10x stiffer was measured 1.3-2.5x slower and less stable)
    CONTACT_K = 1e6
    #: Coulomb friction coefficient between bodies and against the collider (dimensionless; wood on wood ~0.4-0.6)
    MU = 0.5
    #: slip speed (m/s) below which Coulomb friction is a stiff viscous ramp (IPC's eps_v): a resting load below
    #: mu N creeps by less than this
    EPS_V = 1e-3
    #: a Newton correction moving a body's samples by less than this x its size (box diagonal), root mean square,
    #: ends the step (1e-5: 3 micrometres for a 0.2 m cube)
    STEP_TOL = 1e-5
    #: keep the joint Hessian's factor packed (:class:`_PackedCholesky`); False: the square float32 factor
    PACKED_FACTOR = True
    #: a refresh of a poor factor within a step keeps its bodies' elastic parts (:meth:`_newton`); False: every
    #: refresh recomputes them (the reference)
    KEEP_ELASTIC = True
    #: a step whose Newton correction is negligible (:meth:`_negligible`) ends at the corrected iterate
    #: (:meth:`_corrected`); False: at the uncorrected one (the reference before 2026-12-06: a resting stack drifted
    #: and rocked at the tolerance, 1-2 mm/s)
    APPLY_NEGLIGIBLE = True

    def __init__(self, bodies: Sequence[SubspaceSimulator], radii: Optional[Sequence[float]] = None,
                 static_points=None, static_radius: Optional[float] = None, contact_k: Optional[float] = None,
                 newton_iters: int = 8, mu: Optional[float] = None, native: Optional[bool] = None,
                 rest_pairs=None) -> None:
        self.bodies = list(bodies)
        self.native = _contact_native.available() if native is None else bool(native) and _contact_native.available()
        if not self.bodies:
            raise OptionError("BodyContactSystem needs at least one body")
        if radii is None:
            radii = [default_contact_radius(b.X) for b in self.bodies]
        if len(radii) != len(self.bodies) or not all(r > 0 and math.isfinite(r) for r in radii):
            raise OptionError(f"radii: one positive radius per body ({len(self.bodies)}), got {list(radii)}")
        self.radii = [float(r) for r in radii]
        self.dt = float(self.bodies[0].dt)
        self.contact_k = float(self.CONTACT_K if contact_k is None else contact_k)
        self.mu = float(self.MU if mu is None else mu)
        if not (self.mu >= 0 and math.isfinite(self.mu)):
            raise OptionError(f"friction coefficient mu must be >= 0, got {mu}")
        self.newton_iters = int(newton_iters)
        self.sizes = [3 * b.K4 for b in self.bodies]  # unknowns per body
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(int)
        counts = [b.n for b in self.bodies]
        self._sample_body = np.repeat(np.arange(len(self.bodies), dtype=np.int64), counts)  # [N] body of each sample
        self._sample_local = np.concatenate([np.arange(c) for c in counts])  # [N] index in its body
        self._sample_r = np.repeat(self.radii, counts)  # [N]
        self.offsets_samples = np.concatenate([[0], np.cumsum(counts)]).astype(int)  # body b: samples [o_b, o_b+1)
        self._sample_m = np.concatenate([np.full(b.n, b.m_p) for b in self.bodies])  # [N] point mass (kg)
        self._static = None
        self._static_pts = None  # (S, 3) float64 C-ordered static collider points, or None
        self._per_sample_cache = None  # (frictions, arrays) of _per_sample
        self.static_radius = min(self.radii) if static_radius is None else float(static_radius)
        if static_points is not None:
            sp = np.ascontiguousarray(np.asarray(static_points, dtype=np.float64).reshape(-1, 3))  # (the C kernel)
            if not np.all(np.isfinite(sp)):
                raise OptionError("static collider points must be finite")
            if sp.shape[0]:
                self._static = cKDTree(sp)
                self._static_pts = sp
                self._static_lo, self._static_hi = sp.min(0), sp.max(0)
        self.time = 0.0
        self._L: Optional[torch.Tensor] = None  # Cholesky factor of the last joint Hessian (reused, see _newton)
        self._L_key = None
        self._L_converged = False
        self._L_age = 0
        self._L_pairs = None  # the contact pairs (_pair_signature) the factor was computed with
        self._L_elastic = (None, False)  # the bodies' elastic parts in _L, and whether _L kept them from an older one
        self._phi_np = [b.Phi.numpy() for b in self.bodies]  # [n_b, K4] float64 views of the bases
        self._phi32 = [p.astype(np.float32) for p in self._phi_np]  # the same in float32 (contact Hessian GEMMs)
        self._sizes = np.array([float((b.X.max(0).values - b.X.min(0).values).norm()) for b in self.bodies])  # [B] m
        self._phi_gram = [(b.Phi.T @ b.Phi / b.n).numpy() for b in self.bodies]  # [K4, K4] mean outer products
        same = len({g.shape for g in self._phi_gram}) == 1
        self._gram_stack = np.stack(self._phi_gram) if same else None  # [B, K4, K4] for _negligible
        self.skin = 0.5 * min(self.radii)  # Verlet-list margin (m), see _pairs_near
        self._verlet = None
        self._island_cache: dict = {}  # touching body pairs (bytes) -> islands (see _islands)
        self._subs: dict = {}  # island (tuple of body indices) -> its BodyContactSystem (see _sub_system)
        self._cur = None  # (the bodies' q tensors, x, pairs) of the current state (see _current)
        self._rest_keys = _NONE  # sorted i * N + j of the pairs that touch at a rest distance of their own
        self._rest_R = np.zeros(0)  # their contact distances (m)
        if rest_pairs is None and self.num_bodies > 1:
            rest_pairs = self.touching_pairs(self.positions())
        if rest_pairs is not None:
            i, j, R = (np.asarray(a).reshape(-1) for a in rest_pairs)
            i, j, R = i.astype(np.int64), j.astype(np.int64), R.astype(np.float64)
            N = int(self.offsets_samples[-1])
            if not (i.shape == j.shape == R.shape and np.all((0 <= i) & (i < j) & (j < N)) and np.all(R >= 0)):
                raise OptionError("rest_pairs: (i, j, R) with 0 <= i < j < the number of samples and R >= 0")
            keys = i * N + j
            order = np.argsort(keys)
            self._rest_keys = keys[order]
            self._rest_R = np.minimum(R[order], self._sample_r[i[order]] + self._sample_r[j[order]])

    # ------------------------------------------------------------------------------------------ geometry
    @property
    def num_bodies(self) -> int:
        """How many bodies step together."""
        return len(self.bodies)

    @property
    def rest_overlaps(self) -> int:
        """How many sample pairs of two bodies touch at a rest distance of their own (:meth:`touching_pairs`)."""
        return int(self._rest_keys.size)

    def touching_pairs(self, x: np.ndarray):
        """``(i, j, d)``: the sample pairs of two bodies whose spheres overlap at positions x (N, 3) (i < j, global
        sample indices) and their distances d (m). The system built at x keeps each such pair's contact distance
        at d (never more than the sum of the radii), so bodies that touch as they start (two parts of one object
        cut by two selection boxes, whose fills overlap by up to a cell; objects leaning on each other) rest as
        they are and resist any further approach at full stiffness; a penalty of their starting overlap (up to a
        whole contact distance) threw them apart on the first step. Every other pair is unchanged."""
        p = self._pairs(x, static=False)
        d = np.linalg.norm(x[p.i] - x[p.j], axis=1) if p.i.size else np.zeros(0)
        return p.i, p.j, d

    def _pair_R(self, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """(P,) contact distances (m) of the body-body sample pairs (i, j), i < j: the sum of their radii, or a
        touching pair's rest distance (:meth:`touching_pairs`)."""
        R = self._sample_r[i] + self._sample_r[j]
        if self._rest_keys.size and i.size:
            keys = i.astype(np.int64) * int(self.offsets_samples[-1]) + j
            at = np.minimum(np.searchsorted(self._rest_keys, keys), self._rest_keys.size - 1)
            hit = self._rest_keys[at] == keys
            R[hit] = self._rest_R[at[hit]]
        return R

    def positions(self, qs: Optional[List[torch.Tensor]] = None) -> np.ndarray:
        """(N, 3) float64 positions of every body's contact samples (bodies in order), metres."""
        qs = [b.q for b in self.bodies] if qs is None else qs
        return np.concatenate([b.positions(q).numpy() for b, q in zip(self.bodies, qs)])

    def _current(self):
        """(x (N, 3), pairs) at the bodies' current q. Cached: the state a step ends in is the next step's start and
        what :meth:`max_overlap` reports, so it is searched once; a body whose q was replaced (a step, a drag, a reset;
        q is never changed in place) invalidates it."""
        qs = [b.q for b in self.bodies]
        c = self._cur
        if c is not None and all(a is b for a, b in zip(c[0], qs)):
            return c[1], c[2]
        x = self.positions(qs)
        pairs = self._pairs_at(x)
        self._cur = (qs, x, pairs)
        return x, pairs

    def _pairs_near(self, x: np.ndarray) -> _Pairs:
        """:meth:`_pairs` at x (N, 3) from a Verlet list: the pairs closer than their contact distance plus twice
        :attr:`skin` at a reference state (body-body, and every static point in that reach), rebuilt only once a
        sample has moved more than ``skin`` from it. Then a pair overlapping now was a candidate, so the result is
        :meth:`_pairs`' (the same pairs in the same order; tested), while bodies at rest or moving slowly search
        nothing: each iterate only measures its candidates."""
        v = self._verlet_at(x)
        i, j = v["i"], v["j"]
        d = x[i] - x[j]
        keep = np.einsum("pa,pa->p", d, d) < v["R2"]
        s_i, s_j = self._static_near(x, v)
        return _Pairs(i[keep], j[keep], s_i, s_j)

    def _verlet_at(self, x: np.ndarray) -> dict:
        """The Verlet list valid at x (N, 3): the current one, or a new one built at x once a sample has moved more
        than its skin from the list's reference state."""
        v = self._verlet
        if v is not None and v["x"].shape == x.shape:
            dx = x - v["x"]
            moved = np.einsum("na,na->n", dx, dx)
            if float(moved.max(initial=0.0)) >= v["skin"] ** 2:
                v = None
        else:
            v = None
        if v is None:
            v = self._verlet = self._verlet_list(x)
        return v

    def _static_near(self, x: np.ndarray, v: dict):
        """(s_i, s_j) body-static pairs overlapping at x among the Verlet list v's static candidates, the
        :attr:`STATIC_NEIGHBOURS` nearest per sample, by sample then nearest first (as :meth:`_pairs`)."""
        if not v["s_i"].size:
            return _NONE, _NONE
        e = x[v["s_i"]] - self._static_pts[v["s_j"]]
        ds = np.sqrt(np.einsum("pa,pa->p", e, e))
        hit = np.nonzero(ds < self._sample_r[v["s_i"]] + self.static_radius)[0]
        si, sj, dh = v["s_i"][hit], v["s_j"][hit], ds[hit]
        order = np.lexsort((dh, si))  # by sample, then nearest first (as _pairs' k-nearest query)
        si, sj = si[order], sj[order]
        start = np.r_[True, si[1:] != si[:-1]] if si.size else np.zeros(0, bool)
        first = np.maximum.accumulate(np.where(start, np.arange(si.size), 0))
        rank = np.arange(si.size) - first
        k = rank < self.STATIC_NEIGHBOURS
        return si[k], sj[k]

    def _verlet_list(self, x: np.ndarray) -> dict:
        """Candidates of :meth:`_pairs_near` at x: body-body pairs within their contact distance + 2 skin (with the
        squared contact distance of each) and every (sample, static point) within r_i + r_s + 2 skin."""
        skin = self.skin
        p = self._pairs(x, static=False, grow=2 * skin)  # the exact search with every contact distance + 2 skin
        R = self._pair_R(p.i, p.j)
        s_i = s_j = np.zeros(0, np.int64)
        if self._static is not None:
            reach = max(self.radii) + self.static_radius + 2 * skin
            near = np.nonzero(np.all((x >= self._static_lo - reach) & (x <= self._static_hi + reach), axis=1))[0]
            if near.size:
                m = cKDTree(x[near]).sparse_distance_matrix(self._static, reach, output_type="ndarray")
                ok = m["v"] < (self._sample_r[near[m["i"]]] + self.static_radius + 2 * skin)
                s_i, s_j = near[m["i"][ok]].astype(np.int64), m["j"][ok].astype(np.int64)
        m = 0.5 * (self._sample_m[p.i] + self._sample_m[p.j])  # [P] pair masses (kg), as _contact's
        return {"x": x.copy(), "skin": skin, "i": p.i, "j": p.j, "R2": R * R, "m": m, "s_i": s_i, "s_j": s_j}

    def _pairs(self, x: np.ndarray, body_pairs=None, static: bool = True, grow: float = 0.0) -> _Pairs:
        """Overlapping sphere pairs at positions x (N, 3): for each pair of bodies whose boxes (grown by their radii)
        meet, only the samples inside the common box are searched (two small KD-trees), so bodies far apart or
        touching over a small patch cost little. ``body_pairs``: only these (A, B), A < B (default: all);
        ``static``: also the pairs against the static collider; ``grow`` (m): body-body pairs closer than their
        contact distance plus this (the Verlet list's candidates)."""
        starts = self.offsets_samples
        ii, jj = [], []
        boxes = [(x[a:b].min(0), x[a:b].max(0)) for a, b in zip(starts[:-1], starts[1:])]
        if body_pairs is None:
            body_pairs = [(A, B) for A in range(self.num_bodies) for B in range(A + 1, self.num_bodies)]
        for A, B in body_pairs:
            R = self.radii[A] + self.radii[B] + grow
            lo = np.maximum(boxes[A][0], boxes[B][0]) - R
            hi = np.minimum(boxes[A][1], boxes[B][1]) + R
            if np.any(lo > hi):
                continue
            xa, xb = x[starts[A]:starts[A + 1]], x[starts[B]:starts[B + 1]]
            sa = np.nonzero(np.all((xa >= lo) & (xa <= hi), axis=1))[0]
            sb = np.nonzero(np.all((xb >= lo) & (xb <= hi), axis=1))[0]
            if sa.size == 0 or sb.size == 0:
                continue
            m = cKDTree(xa[sa]).sparse_distance_matrix(cKDTree(xb[sb]), R, output_type="ndarray")
            gi, gj = starts[A] + sa[m["i"]], starts[B] + sb[m["j"]]
            keep = m["v"] < self._pair_R(gi, gj) + grow  # (a touching pair's rest distance is less than R)
            ii.append(gi[keep])
            jj.append(gj[keep])
        i = np.concatenate(ii).astype(np.int64) if ii else np.zeros(0, np.int64)
        j = np.concatenate(jj).astype(np.int64) if jj else np.zeros(0, np.int64)
        order = np.lexsort((j, i))  # one order whatever the trees: by first sample, then second
        i, j = i[order], j[order]
        s_i = s_j = np.zeros(0, np.int64)
        if static and self._static is not None:  # the STATIC_NEIGHBOURS nearest static points of samples near it
            reach = max(self.radii) + self.static_radius
            near = np.nonzero(np.all((x >= self._static_lo - reach) & (x <= self._static_hi + reach), axis=1))[0]
            if near.size:
                d, nb = self._static.query(x[near], k=self.STATIC_NEIGHBOURS, distance_upper_bound=reach)
                d, nb = d.reshape(near.size, -1), nb.reshape(near.size, -1)
                hit = np.isfinite(d) & (d < (self._sample_r[near][:, None] + self.static_radius))
                rows, cols = np.nonzero(hit)
                s_i, s_j = near[rows], nb[rows, cols]
        return _Pairs(i, j, s_i, s_j)

    # ------------------------------------------------------------------------------------------ contact terms
    def _contact(self, x: np.ndarray, pairs: _Pairs, with_derivs: bool):
        """Contact energy (J), and with ``with_derivs`` the force-like gradient dE/dx (N, 3) and the per-pair
        Gauss-Newton data for the Hessian: entries ``(kind, i, j, c_iso, c_nn, n)``, each pair's 3x3 matrix being
        ``c_iso I + c_nn n n^T`` (c_iso None: 0), kind "bb" (samples i, j of two bodies) or "bs" (sample i against the
        static collider, j None)."""
        k = self.contact_k
        E = 0.0
        gx = np.zeros_like(x) if with_derivs else None
        gn = []
        if pairs.i.size:
            v = x[pairs.i] - x[pairs.j]  # [P, 3]
            d = np.linalg.norm(v, axis=1)
            n = v / np.maximum(d, 1e-12)[:, None]
            delta = self._pair_R(pairs.i, pairs.j) - d
            m = 0.5 * (self._sample_m[pairs.i] + self._sample_m[pairs.j])
            E += 0.5 * k * float(m @ (delta * delta))
            if with_derivs:
                f = (-k * m * delta)[:, None] * n  # dE/dx_i
                _scatter_add(gx, pairs.i, f)
                _scatter_add(gx, pairs.j, -f)
                gn.append(("bb", pairs.i, pairs.j, None, k * m, n))
        if pairs.s_i.size:
            v = x[pairs.s_i] - self._static_pts[pairs.s_j]
            d = np.linalg.norm(v, axis=1)
            n = v / np.maximum(d, 1e-12)[:, None]
            delta = self._sample_r[pairs.s_i] + self.static_radius - d
            m = self._sample_m[pairs.s_i]
            E += 0.5 * k * float(m @ (delta * delta))
            if with_derivs:
                _scatter_add(gx, pairs.s_i, (-k * m * delta)[:, None] * n)
                gn.append(("bs", pairs.s_i, None, None, k * m, n))
        return E, gx, gn

    def _contact_hessian(self, H: torch.Tensor, gn, scale: float = 1.0) -> None:
        """Add ``scale`` x the Gauss-Newton contact and friction Hessian (without the h^2 factor) into the joint
        Hessian H (float64, CPU) in place. An entry's term is ``W (x) phi_i phi_j^T`` with the 3x3 ``W = c_iso I +
        c_nn n n^T``. A body's diagonal block only sees each sample's summed W (every pair it takes part in, against
        another body or the collider, contact and friction): ``sum_s W_s (x) phi_s phi_s^T`` over its touched
        samples, the 6 distinct (c, d) sub-blocks of one float32 GEMM ``[Phi_S w_cd]^T Phi_S``; an off-diagonal
        block (two touching bodies) sums W per pair (contact and friction of the same pair merged), the 9 sub-blocks
        of one GEMM likewise. In numpy on H's memory (a refresh's dozens of small block updates cost several times
        more as torch ops). :meth:`_contact_hessian_reference` is the plain per-pair version it is tested against."""
        N = int(self.offsets_samples[-1])
        iu = ((0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2))
        ends_s, ends_w, pi, pj, pw = [], [], [], [], []
        for kind, gi, gj, ci, cn, n in gn:
            w = (cn[:, None, None] * n[:, :, None] * n[:, None, :]).reshape(-1, 9)  # [P, 9] c_nn n n^T row-major
            if ci is not None:
                w[:, [0, 4, 8]] += ci[:, None]  # [P, 9] W row-major
            ends_s.append(gi)
            ends_w.append(w)
            if kind == "bb":
                ends_s.append(gj)
                ends_w.append(w)
                pi.append(gi)
                pj.append(gj)
                pw.append(w)
        if not ends_s:
            return
        Hn = H.numpy()  # [n_all, n_all] the same memory
        s_all, w_all = np.concatenate(ends_s), np.concatenate(ends_w)
        rows, at = np.unique(s_all, return_inverse=True)  # [S] touched samples, sorted (so grouped by body)
        Ws = np.empty((rows.size, 6), dtype=np.float32)  # [S, 6] summed W's distinct entries
        for k, (c, d) in enumerate(iu):
            Ws[:, k] = scale * np.bincount(at, weights=w_all[:, 3 * c + d], minlength=rows.size)
        body = self._sample_body[rows]
        cuts = np.flatnonzero(np.diff(body)) + 1
        for seg, ws in zip(np.split(rows, cuts), np.split(Ws, cuts)):
            a = int(self._sample_body[seg[0]])
            Pa = self._phi32[a][self._sample_local[seg]]  # [S_a, K] float32
            Ka = Pa.shape[1]
            blk6 = ((Pa[:, None, :] * ws[:, :, None]).reshape(-1, 6 * Ka).T @ Pa).reshape(6, Ka, Ka)
            o = self.offsets[a]
            Hv = Hn[o:o + 3 * Ka, o:o + 3 * Ka].reshape(3, Ka, 3, Ka)  # [c, k, d, l] view
            for k, (c, d) in enumerate(iu):
                b = blk6[k]
                if c == d:
                    Hv[c, :, c, :] += 0.5 * (b + b.T)  # symmetric to the last bit
                else:
                    Hv[c, :, d, :] += b
                    Hv[d, :, c, :] += b.T
        if not pi:
            return
        gi, gj, w = np.concatenate(pi), np.concatenate(pj), np.concatenate(pw)
        uk, inv = np.unique(gi * N + gj, return_inverse=True)  # contact and friction of one pair merged
        Wp = np.empty((uk.size, 9), dtype=np.float32)  # [U, 9] -scale x summed W
        for c in range(9):
            Wp[:, c] = -scale * np.bincount(inv, weights=w[:, c], minlength=uk.size)
        ui, uj = uk // N, uk % N
        ba, bb = self._sample_body[ui], self._sample_body[uj]  # a < b: pairs run from a lower body's sample
        for a, b in set(zip(ba.tolist(), bb.tolist())):
            sel = (ba == a) & (bb == b)
            Pa = self._phi32[a][self._sample_local[ui[sel]]]  # [U, Ka]
            Pb = self._phi32[b][self._sample_local[uj[sel]]]  # [U, Kb]
            Ka, Kb = Pa.shape[1], Pb.shape[1]
            blk9 = ((Pa[:, None, :] * Wp[sel][:, :, None]).reshape(-1, 9 * Ka).T @ Pb).reshape(3, 3, Ka, Kb)
            blk = blk9.transpose(0, 2, 1, 3).reshape(3 * Ka, 3 * Kb)  # [(c, k), (d, l)]
            oa, ob = self.offsets[a], self.offsets[b]
            Hn[oa:oa + 3 * Ka, ob:ob + 3 * Kb] += blk
            Hn[ob:ob + 3 * Kb, oa:oa + 3 * Ka] += blk.T

    def _contact_hessian_reference(self, H: torch.Tensor, gn) -> None:
        """Plain reference of :meth:`_contact_hessian`: every entry's four blocks (a a, b b, a b, b a) from the dense
        per-pair 3x3 matrices, float64. Slow; for tests."""
        for kind, gi, gj, ci, cn, n in gn:
            W = cn[:, None, None] * n[:, :, None] * n[:, None, :]  # [P, 3, 3]
            if ci is not None:
                W = W + ci[:, None, None] * np.eye(3)[None]
            bi = self._sample_body[gi]
            bj = None if gj is None else self._sample_body[gj]
            for a in np.unique(bi):
                sel_a = bi == a
                if kind == "bs":
                    self._add_block(H, a, a, gi[sel_a], gi[sel_a], W[sel_a], +1.0)
                    continue
                for b in np.unique(bj[sel_a]):
                    sel = sel_a & (bj == b)
                    ii, jj, ww = gi[sel], gj[sel], W[sel]
                    self._add_block(H, a, a, ii, ii, ww, +1.0)
                    self._add_block(H, b, b, jj, jj, ww, +1.0)
                    self._add_block(H, a, b, ii, jj, ww, -1.0)
                    self._add_block(H, b, a, jj, ii, ww, -1.0)

    def _add_block(self, H, a, b, ii, jj, W, sign) -> None:
        """H[block a, block b] += sign sum_p W_p (x) (Phi_i Phi_j^T) in q order ((c, k) rows); reference only."""
        Pa = self.bodies[a].Phi[torch.from_numpy(self._sample_local[ii])]  # [P, Ka]
        Pb = self.bodies[b].Phi[torch.from_numpy(self._sample_local[jj])]  # [P, Kb]
        w = torch.from_numpy(W)  # [P, 3, 3]
        P, Ka, Kb = Pa.shape[0], Pa.shape[1], Pb.shape[1]
        A = (w[:, :, :, None] * Pa[:, None, None, :]).reshape(P, 9 * Ka)  # [P, (c, d, k)]
        blk = (A.T @ Pb).view(3, 3, Ka, Kb).permute(0, 2, 1, 3).reshape(3 * Ka, 3 * Kb)  # [(c, k), (d, l)]
        oa, ob = self.offsets[a], self.offsets[b]
        H[oa:oa + blk.shape[0], ob:ob + blk.shape[1]] += sign * blk

    # ------------------------------------------------------------------------------------------ stepping
    def _joint(self, qs, ctxs, with_derivs, fric=None):
        """Joint objective at the bodies' iterates ``qs``: (E, evals, x, pairs, dE/dx, Hessian data); ``fric`` the
        step's friction pairs (:meth:`_friction_pairs`), whose dissipation is included. The Hessian data (the
        entries of :meth:`_contact_hessian`) is a :class:`_HessData`, computed only if a factor needs it. With the C
        kernel (:attr:`native`) the pairs, energies and gradient come from one pass (:mod:`._contact_native`);
        :meth:`_contact` and :meth:`_friction` are its reference."""
        evs = [b._eval(q, c) for b, q, c in zip(self.bodies, qs, ctxs)]
        x = np.ascontiguousarray(np.concatenate([ev.x.T for ev in evs]))  # [N, 3] the samples' positions
        h2 = ctxs[0].h ** 2
        E = sum(float(ev.E) for ev in evs)
        if self.native:
            Ec, Ef, pairs, gx = self._native_terms(x, fric, with_derivs, h2)
            return E + h2 * Ec + Ef, evs, x, pairs, gx, _HessData(self, x, pairs, fric, h2)
        pairs = self._pairs_near(x)
        Ec, gx, gn = self._contact(x, pairs, with_derivs)
        E += h2 * Ec
        if fric is not None:
            dx = x - fric["x0"]  # [N, 3] displacements in the step
            Ef, gf, hf = self._friction(dx, fric, with_derivs)
            E += Ef
            if with_derivs and gf is not None:
                gx = gx + gf / h2  # gx is later scaled by h^2 with the contact gradient
                gn = gn + [(kind, i, j, ci / h2, cn / h2, n) for kind, i, j, ci, cn, n in hf]
        return E, evs, x, pairs, gx, gn

    def _native_terms(self, x: np.ndarray, fric: Optional[dict], with_derivs: bool, h2: float):
        """(E_contact, E_friction, pairs (with their deepest overlap), dE/dx (N, 3) or None) at x (N, 3)
        by the C kernel, from the current Verlet list or, when a sample has left its skin, a new one."""
        flat = None if fric is None else fric["flat"]  # the native _friction_pairs' arrays
        v = self._verlet if self._verlet is not None and self._verlet["x"].shape == x.shape else None
        for _ in range(2):
            if v is None:
                v = self._verlet = self._verlet_list(x)
            s_i, s_j = self._static_near(x, v)
            static = None
            if s_i.size:
                static = (s_i, np.ascontiguousarray(self._static_pts[s_j]), self._sample_r[s_i] + self.static_radius,
                          self._sample_m[s_i])
            res = _contact_native.contact_terms(x, v, static, flat, self.contact_k, 1.0 / h2, with_derivs)
            if res is not None:
                break
            v = None
        Ec, Ef, deepest, gx, keep = res
        return Ec, Ef, _Pairs(v["i"][keep], v["j"][keep], s_i, s_j, deepest), gx

    def _pairs_at(self, x: np.ndarray) -> _Pairs:
        """The overlapping pairs at x (N, 3): :meth:`_pairs_near`, by the C kernel when there is one."""
        if self.native:
            return self._native_terms(np.ascontiguousarray(x), None, False, 1.0)[2]
        return self._pairs_near(x)

    def _friction_pairs(self, x0: np.ndarray, p: _Pairs, h: float) -> Optional[dict]:
        """The step's friction pairs from the positions x0 at its start and their overlapping pairs p: per pair the
        unit normal n (its tangential projector is P_T = I - n n^T), the viscous coefficient h eta m (eta: the mean
        of the two bodies' ``friction``) and the Coulomb weight h^2 mu N (N = k m delta, the pair's normal force at
        x0, in newtons), or None without contact. With the C kernel the same arrays come from one pass
        (:func:`._contact_native.friction_pairs`; this numpy code is its reference)."""
        if self.native:
            if not (p.i.size or p.s_i.size):
                return None
            flat = _contact_native.friction_pairs(
                np.ascontiguousarray(x0), p.i, p.j, p.s_i, p.s_j, self._static_pts,
                self._per_sample(), self.num_bodies, h, self.mu, self.contact_k, self.static_radius,
                pair_R=self._pair_R(p.i, p.j) if self._rest_keys.size else None)
            Pb = flat.pop("Pb")
            blocks = []  # the reference's blocks, as views of the flat arrays (for the Hessian entries)
            if Pb:
                blocks.append(("bb", flat["i"][:Pb], flat["j"][:Pb], flat["cv"][:Pb], flat["wc"][:Pb], flat["n"][:Pb]))
            if Pb < flat["i"].size:
                blocks.append(("bs", flat["i"][Pb:], None, flat["cv"][Pb:], flat["wc"][Pb:], flat["n"][Pb:]))
            flat["x0"], flat["eps"] = np.ascontiguousarray(x0), self.EPS_V * h
            return {"x0": flat["x0"], "blocks": blocks, "eps": flat["eps"], "flat": flat}
        eta = np.array([b.friction for b in self.bodies])
        k = self.contact_k
        blocks = []
        if p.i.size:
            v = x0[p.i] - x0[p.j]
            d = np.sqrt(np.einsum("pa,pa->p", v, v))
            n = v / np.maximum(d, 1e-12)[:, None]
            m = 0.5 * (self._sample_m[p.i] + self._sample_m[p.j])
            e = 0.5 * (eta[self._sample_body[p.i]] + eta[self._sample_body[p.j]])
            N = k * m * np.maximum(self._pair_R(p.i, p.j) - d, 0.0)
            n = self._patch_normals(self._sample_body[p.i] * self.num_bodies + self._sample_body[p.j], N, n)
            blocks.append(("bb", p.i, p.j, h * e * m, h * h * self.mu * N, n))
        if p.s_i.size:
            v = x0[p.s_i] - self._static_pts[p.s_j]
            d = np.sqrt(np.einsum("pa,pa->p", v, v))
            n = v / np.maximum(d, 1e-12)[:, None]
            m = self._sample_m[p.s_i]
            N = k * m * np.maximum(self._sample_r[p.s_i] + self.static_radius - d, 0.0)
            n = self._patch_normals(p.s_i, N, n)
            blocks.append(("bs", p.s_i, None, h * eta[self._sample_body[p.s_i]] * m, h * h * self.mu * N, n))
        if not blocks:
            return None
        return {"x0": x0, "blocks": blocks, "eps": self.EPS_V * h}

    def _per_sample(self) -> tuple:
        """(radius, mass, viscous friction eta (the body's ``friction``, 1/s), body index) per contact sample, for
        the C kernel; rebuilt when a body's friction changed."""
        key = tuple(b.friction for b in self.bodies)
        c = self._per_sample_cache
        if c is None or c[0] != key:
            eta = np.repeat(np.asarray(key, dtype=np.float64), [b.n for b in self.bodies])
            c = self._per_sample_cache = (key, (self._sample_r, self._sample_m, eta, self._sample_body))
        return c[1]

    @staticmethod
    def _patch_normals(group: np.ndarray, N: np.ndarray, n: np.ndarray) -> np.ndarray:
        """(P, 3) friction normals: per group (a pair of bodies; a sample against the collider) the unit mean of
        the pairs' normals n weighted by their normal forces N. Sphere-pair normals tilt where spheres of two
        lattices nest; friction on their own tangent planes would wedge a flat face into the pockets (and hold it
        above its rest height), on the patch's plane it resists only sliding along the contact."""
        G = int(group.max()) + 1  # group ids are small (body pairs, sample indices): no need to renumber them
        w = N + 1e-30  # pairs just touching (N ~ 0) still give a direction
        acc = np.stack([np.bincount(group, weights=w * n[:, c], minlength=G) for c in range(3)], 1)  # [G, 3]
        norm = np.sqrt(np.einsum("ga,ga->g", acc, acc))[group]  # [P]
        out = acc[group] / np.maximum(norm, 1e-300)[:, None]
        bad = norm < 1e-12 * np.maximum(np.bincount(group, weights=w)[group], 1e-300)  # opposite normals cancel
        out[bad] = n[bad]
        return out

    def _friction(self, dx: np.ndarray, fric: dict, with_derivs: bool):
        """Friction dissipation (the step objective's units: viscous plus smoothed Coulomb, module docstring), its
        gradient with respect to the positions (N, 3) and its Hessian entries (``c_iso I + c_nn n n^T`` with c_nn =
        -c_iso: a multiple of P_T per pair), or (E, None, []) without ``with_derivs``."""
        E = 0.0
        g = np.zeros_like(dx) if with_derivs else None
        hess = []
        eps = fric["eps"]
        for kind, i, j, cv, wc, n in fric["blocks"]:
            u = dx[i] - (dx[j] if j is not None else 0.0)  # [P, 3] relative displacement
            t = u - n * np.einsum("pa,pa->p", n, u)[:, None]  # P_T u (P_T symmetric, idempotent)
            y = np.sqrt(np.einsum("pa,pa->p", t, t))  # [P] tangential slip in the step (m)
            inner = y < eps
            yi = y[inner]
            f0 = y.copy()
            f0[inner] = -yi ** 3 / (3 * eps * eps) + yi * yi / eps + eps / 3
            E += 0.5 * float(cv @ (y * y)) + float(wc @ f0)
            if with_derivs:
                gy = 1.0 / np.maximum(y, 1e-300)  # f1(y) / y: 1/y above eps, 2/eps - y/eps^2 below
                gy[inner] = 2.0 / eps - yi / (eps * eps)
                c = cv + wc * gy  # [P] the force is c P_T u; the Hessian's PSD part c P_T
                f = c[:, None] * t
                _scatter_add(g, i, f)
                if j is not None:
                    _scatter_add(g, j, -f)
                hess.append((kind, i, j, c, -c, n))
        return E, g, hess

    def _factor(self, evs, ctxs, gn, h2, exact: bool = False, elastic: Optional[list] = None):
        """(Cholesky factor or None, the bodies' elastic parts): the factor of the joint Hessian (bodies' blocks +
        h^2 contact and friction terms), regularised as the bodies' own solver does (x100 on failure, 6 tries).
        ``exact``: every body's block sums all its cubature points, also where a subset is set
        (``SubspaceSimulator.set_hessian_points``). ``elastic``: per body the elastic part
        (``SubspaceSimulator._elastic_hessian``) to use instead of computing it at ``evs`` (kept from the factor
        being replaced: the GEMM over each body's cubature points is most of a refresh's cost)."""
        n_all = int(self.offsets[-1])
        Hm = torch.zeros(n_all, n_all, dtype=torch.float64)
        parts = []
        for bi, (b, ev, c) in enumerate(zip(self.bodies, evs, ctxs)):
            o, sz = self.offsets[bi], self.sizes[bi]
            Hel = b._elastic_hessian(ev, exact=exact) if elastic is None else elastic[bi]
            parts.append(Hel)
            Hm[o:o + sz, o:o + sz] = b._hessian(ev, c, exact=exact, elastic=Hel)
        if gn:
            self._contact_hessian(Hm, gn, scale=h2)
        held = self._frozen_unknowns()
        if held is not None:  # identity rows and columns: the correction leaves a frozen body's unknowns at zero
            Hm[held, :] = 0.0
            Hm[:, held] = 0.0
            Hm[held, held] = float(Hm.diagonal().abs().max())
        reg = sum(b.HESS_EPS * b.m_p * b.n for b in self.bodies)
        diag = Hm.diagonal()
        diag += reg
        for _ in range(6):
            L, info = torch.linalg.cholesky_ex(Hm)
            if int(info) == 0:
                # kept in float32: each Newton correction streams the factor twice, and at several bodies it no
                # longer fits a core's cache (408 unknowns: 1.3 MB in float64); the correction comes out within
                # ~1e-6 of the float64 one, while the gradient, energies and line search stay float64. Packed
                # (half the square's bytes) unless PACKED_FACTOR is off (the square is the reference)
                return (_PackedCholesky(L) if self.PACKED_FACTOR else L.to(torch.float32)), parts
            diag += 99.0 * reg  # reg x100
            reg *= 100.0
        return None, parts

    def _frozen_unknowns(self) -> Optional[torch.Tensor]:
        """(k,) int64 indices of the frozen bodies' unknowns (``SubspaceSimulator.set_frozen``), or None. The joint
        solve holds them: their gradient entries are zeroed and their Hessian rows and columns made a multiple of
        the identity, so each Newton correction solves the moving bodies' system against the frozen ones exactly
        (the contact terms with a frozen body act on the moving side only)."""
        parts = [torch.arange(int(self.offsets[k]), int(self.offsets[k + 1]))
                 for k, b in enumerate(self.bodies) if b.frozen]
        return torch.cat(parts) if parts else None

    def _newton(self, h: float, stats: ContactStats):
        """One joint backward-Euler step by Newton with Armijo backtracking. The Hessian factor is reused (as the
        bodies' "adaptive" policy does) while the step size and every body's Hessian version stay the same, the
        previous step converged and the factor has driven fewer than :attr:`hessian_max_age` x (the number of
        bodies) corrections. Within a step, a factor from an earlier iterate is refreshed when it has become a poor
        model: its line search backtracked or failed, the contact pairs changed since it was computed (an impact
        adds stiff terms it lacks), or the gradient fell by less than half in the last iteration; that refresh recomputes
        the contact and friction part and keeps the bodies' elastic parts of the factor it replaces (the costly GEMMs;
        the factor's age goes on from theirs) unless that factor had kept them and was computed in this step. The gradient is always exact, so reuse
        changes the cost, not the solution. As in the bodies' own solver, a step still far from balance after
        :attr:`newton_iters` iterations (a residual force above ``SubspaceSimulator.FAR_RESIDUAL`` x the bodies'
        weight) iterates on with the exact Hessian, up to ``NEWTON_EXTRA`` x the budget, and one that ends there is
        not taken: None (:meth:`_advance` halves the step). Returns (qs, evals, x, pairs) or None."""
        bodies = self.bodies
        x0, p0 = self._current()
        so = self.offsets_samples
        x0t = torch.from_numpy(x0)  # the bodies' positions at the step's start (their floor friction needs them)
        ctxs = [_StepContext(h=h, q_pred=b.q if b.frozen else b.q + h * b.qdot, q_prev=b.q,
                             D=b._step_dissipation(b.q, h, x0t[so[k]:so[k + 1]])) for k, b in enumerate(bodies)]
        held = self._frozen_unknowns()  # a frozen body's unknowns stay at its q (zero gradient, identity rows)
        qs = [c.q_pred.clone() for c in ctxs]
        h2 = h * h
        fric = self._friction_pairs(x0, p0, h)
        E, evs, x, pairs, gx, gn = self._joint(qs, ctxs, True, fric)
        free = [b for b in bodies if not b.frozen] or bodies  # the tolerances scale with the moving bodies' weight
        gtol = sum(b.grad_tol * h2 * b.total_mass * 9.8 for b in free)
        far = sum(b.FAR_RESIDUAL * h2 * b.total_mass * 9.8 for b in free)  # FAR_RESIDUAL x the bodies' weight
        budget = self.newton_iters
        extra = max(b.NEWTON_EXTRA for b in bodies) * budget
        exact_factor = False  # the factor sums every cubature point although a body has a subset set
        key = (h, tuple(b._hess_version for b in bodies))
        reuse_ok = (self._L is not None and self._L_converged and self._L_key == key
                    and self._L_age < self.hessian_max_age * self.num_bodies)
        L = self._L if reuse_ok else None
        L_pairs = self._L_pairs if reuse_ok else None
        # the bodies' elastic parts in L, and whether L already reused them from an earlier factor
        L_el, L_partial = self._L_elastic if reuse_ok else (None, False)
        # a factor of the same bodies and step size, too old (or unconverged) to step with, still tells whether the
        # first correction is negligible (_negligible is a size estimate): a resting scene needs no fresh one
        L_est = self._L if (L is None and self._L is not None and self._L_key == key) else None
        factor_at = -1  # iteration at which L was computed (-1: an earlier step)
        poor = False  # the last iteration showed L to be a poor model (backtracked, or slow progress)
        converged = False
        g_prev = math.inf
        gnorm = math.inf
        for it in range(extra + 1):
            # the contact gradient joins each body's f_ext (one GEMM per body)
            grads = [b._gradient(ev, c, gx[so[k]:so[k + 1]]) for k, (b, ev, c) in enumerate(zip(bodies, evs, ctxs))]
            g = torch.cat([gr.reshape(-1) for gr in grads])
            if held is not None:
                g[held] = 0.0
            gnorm = math.sqrt(float(g @ g))
            if not math.isfinite(gnorm):
                return None
            if gnorm < gtol:
                converged = True
                break
            # the budget of an ordinary step; one still far from balance iterates on (the bodies' own rule)
            if it >= budget and (gnorm <= far or it >= extra):
                break
            # past the budget a subset Hessian is no longer trusted: the exact one, once
            exact = it >= budget and any(b._hsub is not None for b in bodies)
            if exact and not exact_factor:
                L, exact_factor = None, True
            if L is None and L_est is not None and it == 0:
                d_est = -_solve(L_est, g)
                if self._negligible(d_est):
                    converged = True
                    if self.APPLY_NEGLIGIBLE:
                        qs, x, pairs = self._corrected(qs, d_est)
                    break
            sig = _pair_signature(pairs)
            keep_elastic = False
            if L is not None and factor_at < it and (poor or gnorm > 0.5 * g_prev or not _same_pairs(sig, L_pairs)):
                # a poor model: what changes fastest at rest or on impact is the contact and friction part (pairs
                # appear, slip crosses the Coulomb ramp), so its refresh keeps L's elastic parts (their age bounded
                # as a reused factor's); a factor that kept them and is poor again in the same step is refreshed whole
                keep_elastic = self.KEEP_ELASTIC and L_el is not None and not (L_partial and factor_at >= 0)
                L = None
            g_prev = gnorm
            if L is None:
                L, L_el = self._factor(evs, ctxs, gn, h2, exact=exact, elastic=L_el if keep_elastic else None)
                if L is None:
                    return None
                L_pairs, factor_at, L_partial = sig, it, keep_elastic
                if not keep_elastic:  # the age counts from the elastic parts' iterate: bounded as a reused factor's
                    self._L_key, self._L_age = key, 0
                stats.hessians += 1
            delta = -_solve(L, g)
            if self._negligible(delta):  # the correction moves no sample measurably: this iterate is the step's
                converged = True
                if self.APPLY_NEGLIGIBLE:
                    qs, x, pairs = self._corrected(qs, delta)
                break
            slope = float(g @ delta)
            stats.newton_iters += 1
            self._L_age += 1  # a factor ages by the corrections it drives (a step ending on a negligible one: none)
            if slope >= 0:
                if factor_at < it:  # a stale factor: refresh it and retry from here
                    L, g_prev = None, math.inf
                    continue
                break
            t = 1.0
            accepted = False
            for _ in range(12):
                qn = [q + t * delta[self.offsets[i]:self.offsets[i + 1]].view(3, -1) for i, q in enumerate(qs)]
                En, evn, xn, pn, gxn, gnn = self._joint(qn, ctxs, True, fric)
                if math.isfinite(En) and En <= E + 1e-4 * t * slope:
                    accepted = True
                    break
                t *= 0.3
            if not accepted:
                if factor_at < it:
                    L, g_prev = None, math.inf
                    continue
                break
            poor = t < 1.0 and factor_at < it  # a stale factor whose step had to be shortened: a fresh one next
            qs, E, evs, x, pairs, gx, gn = qn, En, evn, xn, pn, gxn, gnn
            if float(delta.abs().max()) * t < 1e-9:
                converged = True
                break
        self._L, self._L_pairs, self._L_converged, self._L_elastic = L, L_pairs, converged, (L_el, L_partial)
        if not converged and gnorm > far:  # far from balance: not taken (a body would sink or tunnel)
            return None
        return qs, evs, x, pairs

    def _advance(self, h: float, depth: int, stats: ContactStats) -> bool:
        x0, p0 = self._current()
        res = self._solve(h, p0, stats)
        if res is not None:
            qs, evs, x, pairs = res
            sane = all(b._sane(q, ev) for b, q, ev in zip(self.bodies, qs, evs))
            if sane and (depth >= self.max_depth or not self._may_tunnel(x0, x)):
                for b, q, ev in zip(self.bodies, qs, evs):
                    b.qdot = (q - b.q) / h
                    b.q = q
                    b._pe_cache = (q, ev.pe) if ev.q is q else None  # not after a correction applied unevaluated
                    b.time += h
                self.time += h
                self._cur = ([b.q for b in self.bodies], x, pairs)
                stats.pairs_body, stats.pairs_static = int(pairs.i.size), int(pairs.s_i.size)
                return True
        if depth >= self.max_depth:
            return False
        stats.substeps += 1
        return self._advance(0.5 * h, depth + 1, stats) and self._advance(0.5 * h, depth + 1, stats)

    def _corrected(self, qs: List[torch.Tensor], delta: torch.Tensor):
        """(qs + delta, positions (N, 3), their overlapping pairs): a negligible last correction applied. The step
        ends there instead of at qs (which keeps the inertial prediction's velocity error, step after step: a resting
        stack drifted by the tolerance until a correction exceeded it, then rocked back); its positions and pairs (the
        next step's start) are computed anew, the bodies' evaluations at qs are kept (for the sanity check, the
        correction being negligible, not for the energies: :meth:`_advance` drops those)."""
        qs = [q + delta[self.offsets[i]:self.offsets[i + 1]].view(3, -1) for i, q in enumerate(qs)]
        x = np.ascontiguousarray(self.positions(qs))
        return qs, x, self._pairs_at(x)

    def _negligible(self, delta: torch.Tensor) -> bool:
        """True when the Newton correction ``delta`` (all bodies' unknowns) moves every body's samples by less than
        :attr:`STEP_TOL` of its size, root mean square over its samples (``sqrt(dq_c^T (Phi^T Phi / n) dq_c)`` summed
        over the three coordinates: a 68 x 68 quadratic form, not a pass over the samples): the displacement test
        of IPC (Li et al. 2020, Sec. 4, there in the max norm) beside the force test. A resting stack's first
        iterate is off by a fraction of a micrometre, yet its residual force, stiffened by the friction ramp,
        hovers about the force tolerance; without this it would take a Newton iteration (and two evaluations per
        body) every step."""
        d = delta.numpy()
        tol2 = (self.STEP_TOL * self._sizes) ** 2  # [B] (m^2)
        if self._gram_stack is not None:  # every body has the same handle count: one batched product
            dq = d.reshape(self.num_bodies, 3, -1)  # [B, 3, K4]
            ms = np.einsum("bck,bck->b", np.matmul(dq, self._gram_stack), dq)  # [B] mean squared displacement (m^2)
            return bool(np.all(ms < tol2))
        for k in range(self.num_bodies):
            dq = d[self.offsets[k]:self.offsets[k + 1]].reshape(3, -1)  # [3, K4]
            ms = float(np.einsum("ck,ck->", dq @ self._phi_gram[k], dq))  # mean squared sample displacement (m^2)
            if ms >= tol2[k]:
                return False
        return True

    # ------------------------------------------------------------------------------------------ islands
    def _islands(self, p: _Pairs) -> List[tuple]:
        """The bodies grouped by contact at the start of a step (connected components of the graph of bodies joined
        by the body-body pairs p), each a sorted tuple of body indices, in order of their first body. The graph's
        edges are the few touching pairs of bodies; its components are kept per edge set (scipy's
        connected_components costs ~0.4 ms a call, a resting scene's edges do not change)."""
        B = self.num_bodies
        edges = np.flatnonzero(np.bincount(self._sample_body[p.i] * B + self._sample_body[p.j], minlength=B * B))
        key = edges.tobytes()
        got = self._island_cache.get(key)
        if got is not None:
            return got
        graph = coo_matrix((np.ones(edges.size), (edges // B, edges % B)), shape=(B, B))
        _, label = connected_components(graph, directed=False)
        groups: dict = {}
        for k in range(B):
            groups.setdefault(int(label[k]), []).append(k)
        got = sorted((tuple(g) for g in groups.values()), key=lambda g: g[0])
        if len(self._island_cache) > 64:
            self._island_cache.clear()
        self._island_cache[key] = got
        return got

    def _solve(self, h: float, p0: _Pairs, stats: ContactStats):
        """One step's Newton solve, island by island: bodies that touch nothing of each other at the start of the
        step are solved apart (each island its own Newton iterations, Hessian and convergence test: a resting stack
        does not iterate because another one moves), a body touching nothing at all by its own simulator's step
        (no contact terms: it costs what it costs alone), then all are checked together; islands whose results
        overlap are merged and solved again, and a body solved alone that ends touching the collider is solved
        again with it, so the result is the joint solve's. Returns (qs, evals, x, pairs) for all bodies in order,
        or None."""
        islands = self._islands(p0)
        static_at = set(self._sample_body[p0.s_i].tolist())  # bodies touching the collider at the start
        if len(islands) == 1 and (self.num_bodies > 1 or 0 in static_at):
            return self._joint_solve(h, stats)
        done = {}  # island -> (qs, evs, x (n, 3) in the island's sample order, pairs or None)
        alone = set()  # islands of one body solved by its own simulator
        pending = list(islands)
        while True:
            while pending:
                isl = pending.pop()
                t0 = time.perf_counter()
                if len(isl) == 1 and isl[0] not in static_at:
                    res = self._alone(isl[0], h, stats)
                    alone.add(isl)
                elif len(isl) == self.num_bodies:
                    return self._joint_solve(h, stats)
                else:
                    sub = self._sub_system(isl)
                    c = sub._cur  # the island's own end state of the last step, if its bodies are still there
                    if c is None or not all(a is self.bodies[b].q for a, b in zip(c[0], isl)):
                        sub._cur = ([self.bodies[b].q for b in isl],) + self._restrict(isl, sub, p0)
                    res = sub._newton(h, stats)
                    if res is not None:  # the next step's start if this result is taken (q identity decides)
                        sub._cur = (res[0], res[2], res[3])
                stats._spent(isl, t0)
                if res is None:
                    return None
                done[isl] = res
            x = np.empty((int(self.offsets_samples[-1]), 3))
            for isl, (_, _, xs, _) in done.items():
                x[self._island_samples(isl)] = xs
            owner = {b: isl for isl in done for b in isl}
            island_of = np.array([min(owner[b]) for b in range(self.num_bodies)])[self._sample_body]  # [N]
            full = self._pairs_at(x)
            cross = island_of[full.i] != island_of[full.j]
            touched = {owner[int(self._sample_body[i])] for i in full.i[cross]} | {
                owner[int(self._sample_body[j])] for j in full.j[cross]}
            hit = {owner[b] for b in set(self._sample_body[full.s_i].tolist())} & alone  # now on the collider
            if not touched and not hit:
                break
            for isl in touched | hit:
                del done[isl]
                alone.discard(isl)
            for isl in hit - touched:
                static_at.add(isl[0])  # solved again with its contact terms
                pending.append(isl)
            if touched:
                pending.append(tuple(sorted(b for isl in touched for b in isl)))
        qs, evs = [None] * self.num_bodies, [None] * self.num_bodies
        stats.solved_together = sorted(done, key=lambda g: g[0])
        for isl, (qi, ei, _, _) in done.items():
            for k, b in enumerate(isl):
                qs[b], evs[b] = qi[k], ei[k]
        return qs, evs, x, full

    def _joint_solve(self, h: float, stats: ContactStats):
        """:meth:`_newton` of all bodies together, its time given to each (``ContactStats.body_ms``)."""
        t0 = time.perf_counter()
        res = self._newton(h, stats)
        stats._spent(range(self.num_bodies), t0)
        stats.solved_together = [tuple(range(self.num_bodies))]
        return res

    def _alone(self, b: int, h: float, stats: ContactStats):
        """Body b's step by its own simulator's Newton solve (it touches nothing): ([q], [eval], x (n, 3), None)."""
        body = self.bodies[b]
        st = StepStats()
        q, ev, iters, _, ok = body._newton(body.q, body.qdot, h, st)
        stats.newton_iters += iters
        stats.hessians += st.hessians
        if not ok or ev is None:
            return None
        return [q], [ev], np.ascontiguousarray(ev.x.T), None

    def _island_samples(self, isl: tuple) -> np.ndarray:
        """The global sample indices of the bodies ``isl``, in order."""
        return np.concatenate([np.arange(self.offsets_samples[b], self.offsets_samples[b + 1]) for b in isl])

    def _sub_system(self, isl: tuple) -> "BodyContactSystem":
        """The system of the bodies ``isl`` alone (same radii, stiffness, collider and settings), kept while the
        island exists so its Hessian factor is reused across steps. ``_gidx``: its samples' indices here."""
        sub = self._subs.get(isl)
        if sub is None:
            if len(self._subs) > 4 * self.num_bodies:
                self._subs.clear()
            gidx = self._island_samples(isl)
            local = np.full(int(self.offsets_samples[-1]), -1, dtype=np.int64)  # [N] global -> island sample
            local[gidx] = np.arange(gidx.size)
            N = int(self.offsets_samples[-1])
            ri, rj = self._rest_keys // N, self._rest_keys % N
            inside = (local[ri] >= 0) & (local[rj] >= 0)
            sub = BodyContactSystem([self.bodies[b] for b in isl], radii=[self.radii[b] for b in isl],
                                    static_radius=self.static_radius, contact_k=self.contact_k,
                                    newton_iters=self.newton_iters, native=self.native,
                                    rest_pairs=(local[ri[inside]], local[rj[inside]], self._rest_R[inside]))
            if self._static is not None:
                sub._static, sub._static_pts = self._static, self._static_pts
                sub._static_lo, sub._static_hi = self._static_lo, self._static_hi
            sub._gidx, sub._local = gidx, local
            self._subs[isl] = sub
        for name in ("max_travel", "max_depth", "hessian_max_age", "STATIC_NEIGHBOURS", "contact_k", "newton_iters",
                     "mu", "EPS_V", "skin", "STEP_TOL", "PACKED_FACTOR", "KEEP_ELASTIC", "APPLY_NEGLIGIBLE"):
            setattr(sub, name, getattr(self, name))
        return sub

    def _restrict(self, isl: tuple, sub: "BodyContactSystem", p: _Pairs):
        """(x, pairs) of the current state in the numbering of ``sub`` (the island's bodies): the island's rows of the
        cached positions and the pairs among them (an island holds every body its samples touch)."""
        x0, _ = self._current()
        local = sub._local
        keep = local[p.i] >= 0
        skeep = local[p.s_i] >= 0
        return x0[sub._gidx], _Pairs(local[p.i[keep]], local[p.j[keep]], local[p.s_i[skeep]], p.s_j[skeep])

    def _may_tunnel(self, x0: np.ndarray, x1: np.ndarray) -> bool:
        """True when a sample moved further than :attr:`max_travel` x its radius during the step and something it
        could have hit lies within its sweep: another body's sample (at the start of the step) or a static point
        within ``travel / 2 + r_i + r_other`` of the middle of its path."""
        dx = x1 - x0
        t2 = np.einsum("na,na->n", dx, dx)  # [N] squared travel
        fast = np.nonzero(t2 > (self.max_travel * self._sample_r) ** 2)[0]
        if fast.size == 0:
            return False
        travel = np.sqrt(t2)
        mid = 0.5 * (x0[fast] + x1[fast])
        if self._static is not None:
            reach = 0.5 * travel[fast] + self._sample_r[fast] + self.static_radius  # [f]
            d, _ = self._static.query(mid, k=1, distance_upper_bound=float(reach.max()))
            if np.any(d <= reach):
                return True
        if self.num_bodies > 1:
            reach = 0.5 * travel[fast] + self._sample_r[fast] + max(self.radii)
            tree = cKDTree(x0)
            for f, m, r in zip(fast, mid, reach):
                if np.any(self._sample_body[tree.query_ball_point(m, float(r))] != self._sample_body[f]):
                    return True
        return False

    def step(self, n: int = 1) -> ContactStats:
        """Advance every body n steps of ``dt`` together. A step that fails (no descent, an insane state) is retried
        as half steps; if that fails too, the bodies keep their positions and lose their velocity."""
        stats = ContactStats(body_ms=[0.0] * self.num_bodies)
        t0 = time.perf_counter()
        with single_thread(self.bodies[0].num_threads):  # as SubspaceSimulator.step: the simulation's own threads
            self._steps(n, stats)
        stats.max_overlap = self.max_overlap()
        stats.ms = (time.perf_counter() - t0) * 1e3
        return stats

    def _steps(self, n: int, stats: ContactStats) -> None:
        for _ in range(n):
            saved = [(b.q.clone(), b.qdot.clone()) for b in self.bodies]
            if not self._advance(self.dt, 0, stats):
                for b, (q, qd) in zip(self.bodies, saved):
                    b.q, b.qdot = q, torch.zeros_like(qd)
                self.time += self.dt
                stats.failed += 1

    def max_overlap(self, x: Optional[np.ndarray] = None) -> float:
        """Deepest overlap (m) of two contact spheres of different bodies or of a body and the collider, now (or at
        the given positions x (N, 3))."""
        if x is None:
            x, p = self._current()
            if p.deepest is not None:
                return p.deepest
        else:
            p = self._pairs(x)
        best = 0.0
        if p.i.size:
            d = np.linalg.norm(x[p.i] - x[p.j], axis=1)
            best = max(best, float((self._pair_R(p.i, p.j) - d).max()))
        if p.s_i.size:
            d = np.linalg.norm(x[p.s_i] - self._static_pts[p.s_j], axis=1)
            best = max(best, float((self._sample_r[p.s_i] + self.static_radius - d).max()))
        return best

    def energies(self) -> Dict[str, float]:
        """Every body's energies summed by kind (kinetic, elastic, gravity relative to rest, floor and other
        penalties: :meth:`SubspaceSimulator.energies`), plus ``contact`` (the bodies' sphere overlaps and their
        overlaps with the static collider, J) and ``total``."""
        out: Dict[str, float] = {}
        for b in self.bodies:
            for k, v in b.energies().items():
                if k != "total":
                    out[k] = out.get(k, 0.0) + float(v)
        x, pairs = self._current()
        out["contact"] = float(self._contact(x, pairs, False)[0])
        out["total"] = sum(out.values())
        return out

    def momentum(self) -> np.ndarray:
        """(3,) total linear momentum of the bodies (kg m/s): sum over cubature points of m_p x_dot."""
        out = np.zeros(3)
        for b in self.bodies:
            v = (b.Phi @ b.qdot.T).numpy()  # [n, 3]
            m = b._m_pt if b._m_pt is not None else np.full(b.n, b.m_p)
            out += m @ v
        return out
