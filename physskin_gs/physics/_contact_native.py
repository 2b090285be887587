"""Optional C kernel for the contact terms of :class:`~physskin_gs.physics.contact.BodyContactSystem` (issue 24):
each Newton iterate's per-pair work in one pass.

For the body-body candidates of the Verlet list it marks the pairs that overlap (``|x_i - x_j| < R``) and adds
their penalty ``1/2 k m delta^2``; for the body-static pairs it adds the same; for the step's friction pairs it adds
the viscous and smoothed Coulomb dissipation ``1/2 cv |u_T|^2 + wc f0(|u_T|)`` (IPC's f0, ``u_T = P_T (dx_i - dx_j)``);
and it accumulates the gradients with respect to the samples' positions (the friction one times ``fscale``). First it
checks that no sample has left the Verlet list's skin (else the caller rebuilds the list and calls again). These
are exactly :meth:`BodyContactSystem._contact` and :meth:`BodyContactSystem._friction` (numpy, the reference;
``tests/test_contact.py`` holds this kernel to them), without their ~40 array operations per iterate.
Compiled once through :mod:`physskin_gs._native` (no compiler: :func:`available` is False and the caller uses the
reference).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from physskin_gs import _native

__all__ = ["contact_terms", "available", "unavailable_reason"]

_SRC = r"""
/* physskin_gs: penalty contact and friction terms over sample pairs (see _contact_native.py). */
#include <math.h>
#include <stdint.h>

static void add3(double* g, const double* f, double s) { g[0] += s * f[0]; g[1] += s * f[1]; g[2] += s * f[2]; }

/* One call per Newton iterate. A (int64): sizes and addresses, in this order:
     N, x (N,3), xref (N,3: the Verlet list's reference positions),
     P, ci, cj, R2, mc (body-body candidates), keep (P, uint8, out),
     S, si, sp (S,3), Rs, ms (overlapping body-static pairs),
     F, fi, fj (-1: the collider), cv, wc, fn (F,3), x0 (N,3) (friction pairs),
     gx (N,3, out, zeroed by the caller, 0: no gradient),
     out (3 doubles, out: contact energy sum 1/2 k m delta^2, friction energy, deepest overlap)
   D (double): eps, fscale, k, skin^2.
   Returns 0, or 1 when a sample moved skin or more from xref (nothing computed: rebuild the list). */
int physskin_contact_terms(const int64_t* A, const double* D) {
    int N = (int)A[0];
    const double* x = (const double*)A[1];
    const double* xr = (const double*)A[2];
    int P = (int)A[3];
    const int64_t* ci = (const int64_t*)A[4]; const int64_t* cj = (const int64_t*)A[5];
    const double* R2 = (const double*)A[6]; const double* mc = (const double*)A[7];
    uint8_t* keep = (uint8_t*)A[8];
    int S = (int)A[9];
    const int64_t* si = (const int64_t*)A[10]; const double* sp = (const double*)A[11];
    const double* Rs = (const double*)A[12]; const double* ms = (const double*)A[13];
    int F = (int)A[14];
    const int64_t* fi = (const int64_t*)A[15]; const int64_t* fj = (const int64_t*)A[16];
    const double* cv = (const double*)A[17]; const double* wc = (const double*)A[18];
    const double* fn = (const double*)A[19]; const double* x0 = (const double*)A[20];
    double* gx = (double*)A[21];
    double* out = (double*)A[22];
    double eps = D[0], fscale = D[1], k = D[2], skin2 = D[3];
    for (int s = 0; s < N; ++s) {
        double a = x[3 * s] - xr[3 * s], b = x[3 * s + 1] - xr[3 * s + 1], c = x[3 * s + 2] - xr[3 * s + 2];
        if (a * a + b * b + c * c >= skin2) return 1;
    }
    double E = 0.0, deepest = 0.0;
    for (int p = 0; p < P; ++p) {
        const double* a = x + 3 * ci[p];
        const double* b = x + 3 * cj[p];
        double v[3] = {a[0] - b[0], a[1] - b[1], a[2] - b[2]};
        double d2 = v[0] * v[0] + v[1] * v[1] + v[2] * v[2];
        keep[p] = d2 < R2[p];
        if (!keep[p]) continue;
        double d = sqrt(d2);
        double delta = sqrt(R2[p]) - d;
        if (delta > deepest) deepest = delta;
        E += 0.5 * k * mc[p] * delta * delta;
        if (gx) {
            double s = -k * mc[p] * delta / (d > 1e-12 ? d : 1e-12);
            add3(gx + 3 * ci[p], v, s);
            add3(gx + 3 * cj[p], v, -s);
        }
    }
    for (int p = 0; p < S; ++p) {
        const double* a = x + 3 * si[p];
        const double* b = sp + 3 * p;
        double v[3] = {a[0] - b[0], a[1] - b[1], a[2] - b[2]};
        double d = sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
        double delta = Rs[p] - d;
        if (delta > deepest) deepest = delta;
        E += 0.5 * k * ms[p] * delta * delta;
        if (gx) add3(gx + 3 * si[p], v, -k * ms[p] * delta / (d > 1e-12 ? d : 1e-12));
    }
    double Ef = 0.0;
    for (int p = 0; p < F; ++p) {
        const double* a = x + 3 * fi[p];
        const double* a0 = x0 + 3 * fi[p];
        double u[3] = {a[0] - a0[0], a[1] - a0[1], a[2] - a0[2]};
        if (fj[p] >= 0) {
            const double* b = x + 3 * fj[p];
            const double* b0 = x0 + 3 * fj[p];
            u[0] -= b[0] - b0[0]; u[1] -= b[1] - b0[1]; u[2] -= b[2] - b0[2];
        }
        const double* n = fn + 3 * p;
        double un = n[0] * u[0] + n[1] * u[1] + n[2] * u[2];
        double t[3] = {u[0] - un * n[0], u[1] - un * n[1], u[2] - un * n[2]};
        double y = sqrt(t[0] * t[0] + t[1] * t[1] + t[2] * t[2]);
        double f0, gy;
        if (y < eps) {
            f0 = -y * y * y / (3.0 * eps * eps) + y * y / eps + eps / 3.0;
            gy = 2.0 / eps - y / (eps * eps);
        } else {
            f0 = y;
            gy = 1.0 / (y > 1e-300 ? y : 1e-300);
        }
        Ef += 0.5 * cv[p] * y * y + wc[p] * f0;
        if (gx) {
            double c = fscale * (cv[p] + wc[p] * gy);
            add3(gx + 3 * fi[p], t, c);
            if (fj[p] >= 0) add3(gx + 3 * fj[p], t, -c);
        }
    }
    out[0] = E; out[1] = Ef; out[2] = deepest;
    return 0;
}

/* The step's friction pairs (BodyContactSystem._friction_pairs). A (int64): N, x0 (N,3), Pb, pi, pj (body-body),
   Ps, si, sj, spts (static points, indexed by sj), r, m, eta (N: per sample), body (N, int64), B, acc (scratch,
   (B*B + N) * 4 doubles, zeroed by the caller), then out: fi, fj (-1: the collider), cv, wc, n (Pb + Ps rows),
   then pR (Pb body-body contact distances, or 0: r[a] + r[b]).
   D: h, mu, k, static radius. Normal per pair, normal force N = k m max(R - d, 0), viscous cv = h eta m, Coulomb
   wc = h^2 mu N, and the friction normal: the N-weighted mean normal of the pair's group (a pair of bodies; a
   sample against the collider), the pair's own where the group's normals cancel. */
void physskin_friction_pairs(const int64_t* A, const double* D) {
    const double* x0 = (const double*)A[1];
    int Pb = (int)A[2];
    const int64_t* pi = (const int64_t*)A[3]; const int64_t* pj = (const int64_t*)A[4];
    int Ps = (int)A[5];
    const int64_t* si = (const int64_t*)A[6]; const int64_t* sj = (const int64_t*)A[7];
    const double* spts = (const double*)A[8];
    const double* r = (const double*)A[9]; const double* m = (const double*)A[10];
    const double* eta = (const double*)A[11]; const int64_t* body = (const int64_t*)A[12];
    int B = (int)A[13];
    double* acc = (double*)A[14];
    int64_t* fi = (int64_t*)A[15]; int64_t* fj = (int64_t*)A[16];
    double* cv = (double*)A[17]; double* wc = (double*)A[18]; double* n = (double*)A[19];
    const double* pR = (const double*)A[20];
    double h = D[0], mu = D[1], k = D[2], rs = D[3];
    int P = Pb + Ps;
    for (int p = 0; p < P; ++p) {
        int64_t a, b; const double* xb; double R, mp, e; int64_t g;
        if (p < Pb) {
            a = pi[p]; b = pj[p]; xb = x0 + 3 * b;
            R = pR ? pR[p] : r[a] + r[b]; mp = 0.5 * (m[a] + m[b]); e = 0.5 * (eta[a] + eta[b]);
            g = body[a] * B + body[b];
        } else {
            a = si[p - Pb]; b = -1; xb = spts + 3 * sj[p - Pb];
            R = r[a] + rs; mp = m[a]; e = eta[a];
            g = (int64_t)B * B + a;
        }
        const double* xa = x0 + 3 * a;
        double v[3] = {xa[0] - xb[0], xa[1] - xb[1], xa[2] - xb[2]};
        double d = sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
        double s = 1.0 / (d > 1e-12 ? d : 1e-12);
        double* np_ = n + 3 * p;
        np_[0] = v[0] * s; np_[1] = v[1] * s; np_[2] = v[2] * s;
        double N = R - d > 0.0 ? k * mp * (R - d) : 0.0;
        double w = N + 1e-30;
        double* ag = acc + 4 * g;
        ag[0] += w * np_[0]; ag[1] += w * np_[1]; ag[2] += w * np_[2]; ag[3] += w;
        fi[p] = a; fj[p] = b; cv[p] = h * e * mp; wc[p] = h * h * mu * N;
    }
    for (int p = 0; p < P; ++p) {
        int64_t g = p < Pb ? body[fi[p]] * B + body[fj[p]] : (int64_t)B * B + fi[p];
        const double* ag = acc + 4 * g;
        double norm = sqrt(ag[0] * ag[0] + ag[1] * ag[1] + ag[2] * ag[2]);
        if (norm < 1e-12 * (ag[3] > 1e-300 ? ag[3] : 1e-300)) continue;  /* opposite normals cancel: the pair's */
        double* np_ = n + 3 * p;
        np_[0] = ag[0] / norm; np_[1] = ag[1] / norm; np_[2] = ag[2] / norm;
    }
}
"""


def _loaded():
    return _native.functions("physskin_contact", _SRC, {"terms": ("physskin_contact_terms", "pp", "i"),
                                                         "friction": ("physskin_friction_pairs", "pp")})


def available() -> bool:
    """Whether the C kernel compiled and loaded (False also when ``PHYSSKIN_NATIVE=0``)."""
    return _loaded()[0] is not None


def unavailable_reason() -> str:
    """Why the C kernel is unavailable ("" when it loaded)."""
    return _loaded()[1]


_I64, _F64 = np.dtype(np.int64), np.dtype(np.float64)


def _ptr(a: np.ndarray, dtype) -> int:
    if a.dtype != dtype or not a.flags.c_contiguous:
        raise ValueError(f"contact_terms: expected a C-contiguous {np.dtype(dtype).name} array, got {a.dtype}")
    return a.__array_interface__["data"][0]


def _group(arrays, dtypes) -> list:
    """[size, addresses...] of a group of the kernel's input arrays, checked once and kept with them."""
    return [int(arrays[0].size)] + [_ptr(a, d) for a, d in zip(arrays, dtypes)]


_NO_STATIC = (np.zeros(0, np.int64), np.zeros((0, 3)), np.zeros(0), np.zeros(0))
_NO_STATIC_ARGS = _group(_NO_STATIC, (_I64, _F64, _F64, _F64))
_NO_FRICTION = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), np.zeros(0), np.zeros((0, 3)))
_NO_FRICTION_ARGS = _group(_NO_FRICTION, (_I64, _I64, _F64, _F64, _F64))


def contact_terms(x: np.ndarray, cand: dict, static, fric, k: float, fscale: float, with_derivs: bool):
    """Contact and friction terms at sample positions x (N, 3) float64, metres (module docstring).

    cand: the Verlet list: ``"x"`` (N, 3) its reference positions, ``"skin"`` (m), the body-body candidates
    ``"i", "j"`` (P,) int64 sample indices, ``"R2"`` (P,) squared contact distances (m^2), ``"m"`` (P,) pair masses
    (kg) (their addresses are kept in the dict, so its arrays must not be replaced); static: ``(s_i (S,) int64,
    points (S, 3), R (S,) contact distances, m (S,))`` of the overlapping body-static pairs, or None; fric: a dict
    with ``"i" (F,), "j" (F,) int64 (-1: the collider), "cv", "wc" (F,), "n" (F, 3) unit normals, "x0" (N, 3)
    positions at the step's start, "eps" (m)`` or None; k: stiffness per unit mass (1/s^2); fscale: factor on the
    friction gradient.

    Returns None when a sample has moved the skin or more from the list's reference (rebuild it and call again), else
    (E_contact, E_friction, deepest overlap (m), dE/dx (N, 3) or None, keep (P,) bool: the candidates that
    overlap).
    Raises RuntimeError without the kernel, ValueError for arrays of the wrong dtype, layout or shape."""
    fns = _loaded()[0]
    if fns is None:
        raise RuntimeError(unavailable_reason())
    N = x.shape[0]
    if cand["x"].shape != (N, 3) or (fric is not None and fric["x0"].shape != (N, 3)):
        raise ValueError(f"contact_terms: reference positions must be ({N}, 3)")
    ca = cand.get("_args")
    if ca is None:
        ca = cand["_args"] = ([_ptr(cand["x"], _F64)] +
                              _group((cand["i"], cand["j"], cand["R2"], cand["m"]), (_I64, _I64, _F64, _F64)))
    keep = np.empty(ca[1], dtype=np.uint8)
    sa = _NO_STATIC_ARGS if static is None else _group(static, (_I64, _F64, _F64, _F64))
    if fric is None:
        fa, x0, eps = _NO_FRICTION_ARGS + [_ptr(x, _F64)], x, 1.0
    else:
        fa = fric.get("_args")
        if fa is None:
            fa = fric["_args"] = (_group((fric["i"], fric["j"], fric["cv"], fric["wc"], fric["n"]),
                                         (_I64, _I64, _F64, _F64, _F64)) + [_ptr(fric["x0"], _F64)])
        eps = fric["eps"]
    gx = np.zeros((N, 3)) if with_derivs else None
    out = np.zeros(3)
    A = np.array([N, _ptr(x, _F64)] + ca + [_ptr(keep, np.dtype(np.uint8))] + sa + fa
                 + [0 if gx is None else _ptr(gx, _F64), _ptr(out, _F64)], dtype=np.int64)
    D = np.array([eps, fscale, k, cand["skin"] ** 2])
    if fns["terms"](_ptr(A, _I64), _ptr(D, _F64)):
        return None
    return float(out[0]), float(out[1]), float(out[2]), gx, keep.view(bool)


def friction_pairs(x0: np.ndarray, i: np.ndarray, j: np.ndarray, s_i: np.ndarray, s_j: np.ndarray,
                   static_points, per_sample: tuple, num_bodies: int, h: float, mu: float, k: float,
                   static_radius: float, pair_R: Optional[np.ndarray] = None) -> dict:
    """The step's friction pairs, as :meth:`BodyContactSystem._friction_pairs` (the reference) computes them, flat:
    ``{"i", "j" (-1: the collider), "cv", "wc", "n", "Pb"}`` over the body-body pairs (i, j) then the body-static
    pairs (s_i, s_j) at x0 (N, 3) float64 (metres): ``cv`` (F,) viscous coefficients h eta m, ``wc`` (F,) Coulomb
    weights h^2 mu N (N the pair's normal force, newtons), ``n`` (F, 3) unit friction normals (the patch's),
    ``Pb`` the number of body-body rows. per_sample: ``(r (m), m (kg), eta (1/s) (N,) float64, body (N,) int64)``;
    static_points: (S, 3) float64 or None (metres); h: step (s); mu: Coulomb coefficient; k: penalty stiffness per
    unit mass (1/s^2); static_radius: the static points' radius (m); pair_R: (Pb,) float64 contact distances of
    the body-body pairs (m; default the sums of their radii). Raises RuntimeError without the kernel,
    ValueError for mismatched shapes or arrays of the wrong dtype or layout."""
    fns = _loaded()[0]
    if fns is None:
        raise RuntimeError(unavailable_reason())
    N = x0.shape[0]
    r, m, eta, body = per_sample
    Pb, Ps = int(i.size), int(s_i.size)
    if (j.size != Pb or s_j.size != Ps or any(a.shape != (N,) for a in per_sample) or x0.shape != (N, 3)
            or (pair_R is not None and pair_R.shape != (Pb,))):
        raise ValueError("friction_pairs: mismatched pair or per-sample arrays")
    P = Pb + Ps
    out = {"i": np.empty(P, np.int64), "j": np.empty(P, np.int64), "cv": np.empty(P), "wc": np.empty(P),
           "n": np.empty((P, 3)), "Pb": Pb}
    acc = np.zeros(((num_bodies * num_bodies + N), 4))
    sp = _NO_STATIC[1] if static_points is None else static_points
    A = np.array([N, _ptr(x0, _F64), Pb, _ptr(i, _I64), _ptr(j, _I64), Ps, _ptr(s_i, _I64), _ptr(s_j, _I64),
                  _ptr(sp, _F64), _ptr(r, _F64), _ptr(m, _F64), _ptr(eta, _F64), _ptr(body, _I64), int(num_bodies),
                  _ptr(acc, _F64), _ptr(out["i"], _I64), _ptr(out["j"], _I64), _ptr(out["cv"], _F64),
                  _ptr(out["wc"], _F64), _ptr(out["n"], _F64),
                  0 if pair_R is None else _ptr(pair_R, _F64)], dtype=np.int64)
    fns["friction"](_ptr(A, _I64), _ptr(np.array([h, mu, k, static_radius]), _F64))
    return out
