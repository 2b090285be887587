"""Several bodies stepped together: one implicit-Euler Newton solve over every body's handles, with penalty contact
between the bodies and against a static collider (issue 24; ``../shared/docs/several-bodies.md``).

Each body is a :class:`~physskin_gs.physics.simulator.SubspaceSimulator` (its own skinning basis, handles, cubature
points and material, all in one world frame: metres, the same up and gravity). One step minimises the sum of the
bodies' backward-Euler objectives plus ``h^2`` times the contact energy over all bodies' handle coordinates at once
(method.md 9.2), so momentum passes between bodies within the step:

    Phi(q_1 .. q_B) = sum_b Phi_b(q_b) + h^2 E_c(x(q))

**Contact samples.** A body's contact samples are its cubature points, each a sphere of radius ``r_b`` (by default
0.6 x the mean spacing of its cubature points, so neighbouring spheres overlap and the surface has no gaps the
size of a sample); the static collider is a point set (e.g. the captured support and background, subsampled) with
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
against the collider, so stacked bodies stay where they rest instead of sliding on each other.

**Tunnelling.** A step whose samples move by more than :attr:`BodyContactSystem.max_travel` of their radius is
redone as two half steps (up to 3 levels), so fast bodies are checked at sub-radius intervals.

Pure math: numpy / torch / scipy, no I/O.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import List, Optional, Sequence

import numpy as np
import torch
from scipy.spatial import cKDTree

from physskin_gs.errors import OptionError
from physskin_gs.physics.simulator import SubspaceSimulator, _StepContext

__all__ = ["BodyContactSystem", "ContactStats", "default_contact_radius"]


def default_contact_radius(points: torch.Tensor, factor: float = 0.6) -> float:
    """Contact radius of a body's cubature points (n, 3) (metres): ``factor`` x their mean nearest-neighbour
    distance. Raises OptionError for fewer than 2 points."""
    p = np.asarray(points, dtype=np.float64)
    if p.shape[0] < 2:
        raise OptionError("a contact body needs at least 2 cubature points")
    d, _ = cKDTree(p).query(p, k=2)
    return float(factor * np.mean(d[:, 1]))


@dataclass
class ContactStats:
    """One :meth:`BodyContactSystem.step` call: wall-clock ms, Newton iterations, contact pairs at the end (body
    against body, body against the static collider), half steps taken, Hessians factored, deepest overlap (m)."""

    ms: float = 0.0
    newton_iters: int = 0
    pairs_body: int = 0
    pairs_static: int = 0
    substeps: int = 0
    hessians: int = 0
    max_overlap: float = 0.0

    def as_dict(self) -> dict:
        """The fields as a JSON-ready dict (``contacts_body``, ``contacts_static``, ``max_overlap_m``, ...)."""
        return {"ms": self.ms, "newton_iters": self.newton_iters, "contacts_body": self.pairs_body,
                "contacts_static": self.pairs_static, "substeps": self.substeps, "hessians": self.hessians,
                "max_overlap_m": self.max_overlap}


@dataclass
class _Pairs:
    """Overlapping sample pairs at one iterate: body pairs (global sample indices i < j of different bodies) and
    body-static pairs (global sample index, static index)."""

    i: np.ndarray
    j: np.ndarray
    s_i: np.ndarray
    s_j: np.ndarray


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
    Raises:
        OptionError for no bodies, mismatched radii or non-finite static points.
    """

    #: a step moving a sample further than this x its radius, with something within that sweep of it, is split
    max_travel = 1.0
    max_depth = 3
    #: a reused Hessian factor is refreshed after this many steps at the latest (the bodies' adaptive policy)
    hessian_max_age = 20
    #: static points considered per contact sample (the nearest ones)
    STATIC_NEIGHBOURS = 8
    #: default penalty stiffness per unit mass (1/s^2), the floor's: a body resting on n_contact of its n samples
    #: overlaps by about (n / n_contact) g / k (10x stiffer was measured 1.3-2.5x slower and less stable)
    CONTACT_K = 1e6

    def __init__(self, bodies: Sequence[SubspaceSimulator], radii: Optional[Sequence[float]] = None,
                 static_points=None, static_radius: Optional[float] = None, contact_k: Optional[float] = None,
                 newton_iters: int = 8) -> None:
        self.bodies = list(bodies)
        if not self.bodies:
            raise OptionError("BodyContactSystem needs at least one body")
        if radii is None:
            radii = [default_contact_radius(b.X) for b in self.bodies]
        if len(radii) != len(self.bodies) or not all(r > 0 and math.isfinite(r) for r in radii):
            raise OptionError(f"radii: one positive radius per body ({len(self.bodies)}), got {list(radii)}")
        self.radii = [float(r) for r in radii]
        self.dt = float(self.bodies[0].dt)
        self.contact_k = float(self.CONTACT_K if contact_k is None else contact_k)
        self.newton_iters = int(newton_iters)
        self.sizes = [3 * b.K4 for b in self.bodies]  # unknowns per body
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(int)
        counts = [b.n for b in self.bodies]
        self._sample_body = np.repeat(np.arange(len(self.bodies)), counts)  # [N] body of each global sample
        self._sample_local = np.concatenate([np.arange(c) for c in counts])  # [N] index in its body
        self._sample_r = np.repeat(self.radii, counts)  # [N]
        self.offsets_samples = np.concatenate([[0], np.cumsum(counts)]).astype(int)  # body b: samples [o_b, o_b+1)
        self._sample_m = np.concatenate([np.full(b.n, b.m_p) for b in self.bodies])  # [N] point mass (kg)
        self._static = None
        self.static_radius = min(self.radii) if static_radius is None else float(static_radius)
        if static_points is not None:
            sp = np.asarray(static_points, dtype=np.float64).reshape(-1, 3)
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

    # ------------------------------------------------------------------------------------------ geometry
    @property
    def num_bodies(self) -> int:
        """How many bodies step together."""
        return len(self.bodies)

    def positions(self, qs: Optional[List[torch.Tensor]] = None) -> np.ndarray:
        """(N, 3) float64 positions of every body's contact samples (bodies in order), metres."""
        qs = [b.q for b in self.bodies] if qs is None else qs
        return np.concatenate([b.positions(q).numpy() for b, q in zip(self.bodies, qs)])

    def _pairs(self, x: np.ndarray) -> _Pairs:
        """Overlapping sphere pairs at positions x (N, 3): for each pair of bodies whose boxes (grown by their radii)
        meet, only the samples inside the common box are searched (two small KD-trees), so bodies far apart or
        touching over a small patch cost little."""
        starts = self.offsets_samples
        ii, jj = [], []
        boxes = [(x[a:b].min(0), x[a:b].max(0)) for a, b in zip(starts[:-1], starts[1:])]
        for A in range(self.num_bodies):
            for B in range(A + 1, self.num_bodies):
                R = self.radii[A] + self.radii[B]
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
                keep = m["v"] < R
                ii.append(starts[A] + sa[m["i"][keep]])
                jj.append(starts[B] + sb[m["j"][keep]])
        i = np.concatenate(ii).astype(np.int64) if ii else np.zeros(0, np.int64)
        j = np.concatenate(jj).astype(np.int64) if jj else np.zeros(0, np.int64)
        s_i = s_j = np.zeros(0, np.int64)
        if self._static is not None:  # the STATIC_NEIGHBOURS nearest static points of the samples near the collider
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
        Gauss-Newton data (coefficients and normals) for the Hessian."""
        k = self.contact_k
        E = 0.0
        gx = np.zeros_like(x) if with_derivs else None
        gn = []
        if pairs.i.size:
            v = x[pairs.i] - x[pairs.j]  # [P, 3]
            d = np.linalg.norm(v, axis=1)
            n = v / np.maximum(d, 1e-12)[:, None]
            delta = self._sample_r[pairs.i] + self._sample_r[pairs.j] - d
            m = 0.5 * (self._sample_m[pairs.i] + self._sample_m[pairs.j])
            E += 0.5 * k * float(m @ (delta * delta))
            if with_derivs:
                f = (-k * m * delta)[:, None] * n  # dE/dx_i
                np.add.at(gx, pairs.i, f)
                np.add.at(gx, pairs.j, -f)
                gn.append(("bb", pairs.i, pairs.j, k * m, n, None))
        if pairs.s_i.size:
            v = x[pairs.s_i] - self._static_pts[pairs.s_j]
            d = np.linalg.norm(v, axis=1)
            n = v / np.maximum(d, 1e-12)[:, None]
            delta = self._sample_r[pairs.s_i] + self.static_radius - d
            m = self._sample_m[pairs.s_i]
            E += 0.5 * k * float(m @ (delta * delta))
            if with_derivs:
                np.add.at(gx, pairs.s_i, (-k * m * delta)[:, None] * n)
                gn.append(("bs", pairs.s_i, None, k * m, n, None))
        return E, gx, gn

    def _contact_hessian(self, H: torch.Tensor, gn) -> None:
        """Add the Gauss-Newton contact Hessian (without the h^2 factor) into the joint Hessian H in place."""
        for kind, gi, gj, c, n, w in gn:
            bi = self._sample_body[gi]
            bj = None if gj is None else self._sample_body[gj]
            for a in np.unique(bi):
                sel_a = bi == a
                if kind == "bs":
                    self._add_block(H, a, a, gi[sel_a], gi[sel_a], c[sel_a], self._w(n, w, sel_a), +1.0)
                    continue
                for b in np.unique(bj[sel_a]):
                    sel = sel_a & (bj == b)
                    ii, jj, cc, nn = gi[sel], gj[sel], c[sel], self._w(n, w, sel)
                    self._add_block(H, a, a, ii, ii, cc, nn, +1.0)
                    self._add_block(H, b, b, jj, jj, cc, nn, +1.0)
                    self._add_block(H, a, b, ii, jj, cc, nn, -1.0)
                    self._add_block(H, b, a, jj, ii, cc, nn, -1.0)

    @staticmethod
    def _w(n, w, sel) -> np.ndarray:
        """(P, 3, 3) per-pair matrices of the selected pairs: n n^T (contact) or the given w (friction)."""
        return n[sel][:, :, None] * n[sel][:, None, :] if w is None else w[sel]

    def _add_block(self, H, a, b, ii, jj, c, W, sign) -> None:
        """H[block a, block b] += sign sum_p c_p W_p (x) (Phi_i Phi_j^T) in q order ((c, k) rows)."""
        Pa = self.bodies[a].Phi[torch.from_numpy(self._sample_local[ii])]  # [P, Ka]
        Pb = self.bodies[b].Phi[torch.from_numpy(self._sample_local[jj])]  # [P, Kb]
        w = torch.from_numpy(c[:, None, None] * W)  # [P, 3, 3]
        P, Ka, Kb = Pa.shape[0], Pa.shape[1], Pb.shape[1]
        A = (w[:, :, :, None] * Pa[:, None, None, :]).reshape(P, 9 * Ka)  # [P, (c, d, k)]
        blk = (A.T @ Pb).view(3, 3, Ka, Kb).permute(0, 2, 1, 3).reshape(3 * Ka, 3 * Kb)  # [(c, k), (d, l)]
        oa, ob = self.offsets[a], self.offsets[b]
        H[oa:oa + blk.shape[0], ob:ob + blk.shape[1]] += sign * blk

    def _grad_q(self, gx: np.ndarray) -> List[torch.Tensor]:
        """Per body (3, K4) gradient of the contact energy with respect to q from dE/dx (N, 3)."""
        out = []
        start = 0
        for b in self.bodies:
            g = torch.from_numpy(gx[start:start + b.n])  # [n, 3]
            out.append(g.T @ b.Phi)  # [3, K4]
            start += b.n
        return out

    # ------------------------------------------------------------------------------------------ stepping
    def _joint(self, qs, ctxs, with_derivs, fric=None):
        """Joint objective at the bodies' iterates ``qs``: (E, evals, x, pairs, dE/dx, Hessian data); ``fric`` the
        step's friction pairs (:meth:`_friction_pairs`), whose dissipation is included."""
        evs = [b._eval(q, c) for b, q, c in zip(self.bodies, qs, ctxs)]
        x = np.concatenate([ev.x.T for ev in evs])  # [N, 3] the samples' positions, from the evaluations
        pairs = self._pairs(x)
        Ec, gx, gn = self._contact(x, pairs, with_derivs)
        h2 = ctxs[0].h ** 2
        E = sum(float(ev.E) for ev in evs) + h2 * Ec
        if fric is not None:
            dx = x - fric["x0"]  # [N, 3] displacements in the step
            Ef, gf = self._friction(dx, fric, with_derivs)
            E += Ef
            if with_derivs and gf is not None:
                gx = gx + gf / h2  # gx is later scaled by h^2 with the contact gradient
                gn = gn + [(kind, i, j, c / h2, None, w) for kind, i, j, c, w in fric["blocks"]]
        return E, evs, x, pairs, gx, gn

    def _friction_pairs(self, x0: np.ndarray, h: float) -> Optional[dict]:
        """The step's friction pairs from the positions at its start: per pair the tangential projector P_T (3, 3)
        and the coefficient h eta m (eta: the mean of the two bodies' ``friction``), or None without contact."""
        p = self._pairs(x0)
        eta = np.array([b.friction for b in self.bodies])
        blocks = []
        gi, gj, cs, Ws = [], [], [], []
        if p.i.size:
            v = x0[p.i] - x0[p.j]
            n = v / np.maximum(np.linalg.norm(v, axis=1), 1e-12)[:, None]
            m = 0.5 * (self._sample_m[p.i] + self._sample_m[p.j])
            e = 0.5 * (eta[self._sample_body[p.i]] + eta[self._sample_body[p.j]])
            W = np.eye(3)[None] - n[:, :, None] * n[:, None, :]
            blocks.append(("bb", p.i, p.j, h * e * m, W))
            gi.append(p.i), gj.append(p.j), cs.append(h * e * m), Ws.append(W)
        sb = None
        if p.s_i.size:
            v = x0[p.s_i] - self._static_pts[p.s_j]
            n = v / np.maximum(np.linalg.norm(v, axis=1), 1e-12)[:, None]
            c = h * eta[self._sample_body[p.s_i]] * self._sample_m[p.s_i]
            W = np.eye(3)[None] - n[:, :, None] * n[:, None, :]
            blocks.append(("bs", p.s_i, None, c, W))
            sb = (p.s_i, c, W)
        if not blocks:
            return None
        return {"x0": x0, "blocks": blocks, "bb": (gi, gj, cs, Ws), "bs": sb}

    def _friction(self, dx: np.ndarray, fric: dict, with_derivs: bool):
        """Friction dissipation (the step objective's units) and its gradient with respect to the positions."""
        E = 0.0
        g = np.zeros_like(dx) if with_derivs else None
        for kind, i, j, c, W in fric["blocks"]:
            u = dx[i] - (dx[j] if j is not None else 0.0)  # [P, 3] relative displacement
            t = np.einsum("pab,pb->pa", W, u)  # P_T u (P_T symmetric, idempotent)
            E += 0.5 * float(c @ np.einsum("pa,pa->p", t, t))
            if with_derivs:
                f = c[:, None] * t
                np.add.at(g, i, f)
                if j is not None:
                    np.add.at(g, j, -f)
        return E, g

    def _factor(self, evs, ctxs, gn, h2):
        """Cholesky factor of the joint Hessian (bodies' blocks + h^2 contact and friction terms), regularised as
        the bodies' own solver does (x100 on failure, 6 tries), or None."""
        n_all = int(self.offsets[-1])
        Hm = torch.zeros(n_all, n_all, dtype=torch.float64)
        for bi, (b, ev, c) in enumerate(zip(self.bodies, evs, ctxs)):
            o, sz = self.offsets[bi], self.sizes[bi]
            Hm[o:o + sz, o:o + sz] = b._hessian(ev, c)
        if gn:
            Hc = torch.zeros_like(Hm)
            self._contact_hessian(Hc, gn)
            Hm += h2 * Hc
        reg = sum(b.HESS_EPS * b.m_p * b.n for b in self.bodies)
        eye = torch.eye(n_all, dtype=torch.float64)
        for _ in range(6):
            L, info = torch.linalg.cholesky_ex(Hm + reg * eye)
            if int(info) == 0:
                return L
            reg *= 100.0
        return None

    def _newton(self, h: float, stats: ContactStats):
        """One joint backward-Euler step by Newton with Armijo backtracking. The Hessian factor is reused (as the
        bodies' "adaptive" policy does) while the step size and every body's Hessian version stay the same, the
        previous step converged and the factor is younger than :attr:`hessian_max_age` steps; it is refreshed
        when a line search with it backtracks or fails (new contacts make it a poor model). The gradient is always
        exact, so reuse changes the cost, not the solution. Returns (qs, evals, x, pairs) or None."""
        bodies = self.bodies
        ctxs = [_StepContext(h=h, q_pred=b.q + h * b.qdot, q_prev=b.q, D=b._step_dissipation(b.q, h)) for b in bodies]
        qs = [c.q_pred.clone() for c in ctxs]
        h2 = h * h
        fric = self._friction_pairs(self.positions(), h)
        E, evs, x, pairs, gx, gn = self._joint(qs, ctxs, True, fric)
        gtol = sum(b.grad_tol * h2 * b.total_mass * 9.8 for b in bodies)
        key = (h, tuple(b._hess_version for b in bodies))
        reuse_ok = (self._L is not None and self._L_converged and self._L_key == key
                    and self._L_age < self.hessian_max_age)
        L = self._L if reuse_ok else None
        self._L_age += 1
        fresh = False  # L was computed at an iterate of this step
        converged = False
        for it in range(self.newton_iters):
            gc = self._grad_q(gx)
            grads = [b._gradient(ev, c) + h2 * g for b, ev, c, g in zip(bodies, evs, ctxs, gc)]
            g = torch.cat([gr.reshape(-1) for gr in grads])
            gnorm = float(g.norm())
            if not math.isfinite(gnorm):
                return None
            if gnorm < gtol:
                converged = True
                break
            if L is None:
                L = self._factor(evs, ctxs, gn, h2)
                if L is None:
                    return None
                fresh = True
                self._L_key, self._L_age = key, 0
                stats.hessians += 1
            delta = -torch.cholesky_solve(g[:, None], L)[:, 0]
            slope = float(g @ delta)
            stats.newton_iters += 1
            if slope >= 0:
                if not fresh:  # a stale factor: refresh it and retry from here
                    L = None
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
                if not fresh:
                    L = None
                    continue
                break
            if t < 1.0 and not fresh:
                L = None  # a stale factor whose step had to be shortened: a fresh one next iteration
            qs, E, evs, x, pairs, gx, gn = qn, En, evn, xn, pn, gxn, gnn
            if float(delta.abs().max()) * t < 1e-9:
                converged = True
                break
        self._L, self._L_converged = L, converged
        return qs, evs, x, pairs

    def _advance(self, h: float, depth: int, stats: ContactStats) -> bool:
        x0 = self.positions()
        res = self._newton(h, stats)
        if res is not None:
            qs, evs, x, pairs = res
            sane = all(b._sane(q, ev) for b, q, ev in zip(self.bodies, qs, evs))
            if sane and (depth >= self.max_depth or not self._may_tunnel(x0, x)):
                for b, q, ev in zip(self.bodies, qs, evs):
                    b.qdot = (q - b.q) / h
                    b.q = q
                    b._pe_cache = (q, ev.pe)
                    b.time += h
                self.time += h
                stats.pairs_body, stats.pairs_static = int(pairs.i.size), int(pairs.s_i.size)
                return True
        if depth >= self.max_depth:
            return False
        stats.substeps += 1
        return self._advance(0.5 * h, depth + 1, stats) and self._advance(0.5 * h, depth + 1, stats)

    def _may_tunnel(self, x0: np.ndarray, x1: np.ndarray) -> bool:
        """True when a sample moved further than :attr:`max_travel` x its radius during the step and something it
        could have hit lies within its sweep: another body's sample (at the start of the step) or a static point
        within ``travel / 2 + r_i + r_other`` of the middle of its path."""
        travel = np.linalg.norm(x1 - x0, axis=1)
        fast = np.nonzero(travel > self.max_travel * self._sample_r)[0]
        if fast.size == 0:
            return False
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
        stats = ContactStats()
        t0 = time.perf_counter()
        for _ in range(n):
            saved = [(b.q.clone(), b.qdot.clone()) for b in self.bodies]
            if not self._advance(self.dt, 0, stats):
                for b, (q, qd) in zip(self.bodies, saved):
                    b.q, b.qdot = q, torch.zeros_like(qd)
                self.time += self.dt
        x = self.positions()
        stats.max_overlap = self.max_overlap(x)
        stats.ms = (time.perf_counter() - t0) * 1e3
        return stats

    def max_overlap(self, x: Optional[np.ndarray] = None) -> float:
        """Deepest overlap (m) of two contact spheres of different bodies or of a body and the collider, now."""
        x = self.positions() if x is None else x
        p = self._pairs(x)
        best = 0.0
        if p.i.size:
            d = np.linalg.norm(x[p.i] - x[p.j], axis=1)
            best = max(best, float((self._sample_r[p.i] + self._sample_r[p.j] - d).max()))
        if p.s_i.size:
            d = np.linalg.norm(x[p.s_i] - self._static_pts[p.s_j], axis=1)
            best = max(best, float((self._sample_r[p.s_i] + self.static_radius - d).max()))
        return best

    def momentum(self) -> np.ndarray:
        """(3,) total linear momentum of the bodies (kg m/s): sum over cubature points of m_p x_dot."""
        out = np.zeros(3)
        for b in self.bodies:
            v = (b.Phi @ b.qdot.T).numpy()  # [n, 3]
            m = b._m_pt if b._m_pt is not None else np.full(b.n, b.m_p)
            out += m @ v
        return out
