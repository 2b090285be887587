"""Optional C kernel for the simulator's Hessian rows (each step's hottest per-point work).

For every cubature point c it computes the PSD-projected stable Neo-Hookean Hessian (the same analytic eigensystem
as :func:`physskin_gs.physics.neohookean.projected_hessian_soa`: rotation-variant SVD from the eigen-decomposition
of F^T F, closed-form twist/flip eigenvalues, the 3x3 scaling block clamped when it is not positive definite),
scales it by the cubature volume, and contracts it with the point's dF/dq rows G_c (3, 4H):

    Y[c, (b, pair), k'] = sum_b' Hc[(a, b), (a', b')] G_c[b', k']        pair = (a, a') with a <= a'

which is exactly the ``Y`` of :meth:`SubspaceSimulator._assemble` (the GEMM ``G_all^T @ Y`` stays in torch).
The numpy/torch path is the reference; ``tests/test_physics.py`` holds this kernel to it. Compiled once through
:mod:`physskin_gs._native` (no compiler: :func:`hessian_rows` returns None and the caller uses the reference).
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from physskin_gs import _native

__all__ = ["hessian_rows", "available"]

_SRC = r"""
/* physskin_gs: projected stable Neo-Hookean Hessian rows per cubature point (see _hessian_native.py). */
#include <math.h>
#include <stddef.h>

static void cross3(const double* a, const double* b, double* o) {
    o[0] = a[1] * b[2] - a[2] * b[1]; o[1] = a[2] * b[0] - a[0] * b[2]; o[2] = a[0] * b[1] - a[1] * b[0];
}
static double dot3(const double* a, const double* b) { return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]; }
static void unit_or(double* v, const double* fb) {
    double n = sqrt(dot3(v, v));
    if (n > 1e-300) { v[0] /= n; v[1] /= n; v[2] /= n; } else { v[0] = fb[0]; v[1] = fb[1]; v[2] = fb[2]; }
}
static void orth_unit(const double* e, double* w) {
    if (fabs(e[0]) < 0.9) { w[0] = 0.0; w[1] = e[2]; w[2] = -e[1]; } else { w[0] = -e[2]; w[1] = 0.0; w[2] = e[0]; }
    double n = sqrt(dot3(w, w)); if (n < 1e-300) n = 1e-300;
    w[0] /= n; w[1] /= n; w[2] /= n;
}

/* symmetric 3x3 (a00 a01 a02 a11 a12 a22): eigenvalues descending l[3], eigenvectors V[i][3] (right-handed);
   trigonometric eigenvalues, Eberly's robust eigenvectors (same algorithm as neohookean._sym3_eigh_soa) */
static void sym3_eigh(double a00, double a01, double a02, double a11, double a12, double a22, double* l, double V[3][3]) {
    double scale = fabs(a00);
    double t[5] = {fabs(a01), fabs(a02), fabs(a11), fabs(a12), fabs(a22)};
    for (int i = 0; i < 5; ++i) if (t[i] > scale) scale = t[i];
    if (!(scale > 0)) scale = 1.0;
    double inv = 1.0 / scale;
    a00 *= inv; a01 *= inv; a02 *= inv; a11 *= inv; a12 *= inv; a22 *= inv;
    double q = (a00 + a11 + a22) / 3.0;
    double b00 = a00 - q, b11 = a11 - q, b22 = a22 - q;
    double p2 = (b00 * b00 + b11 * b11 + b22 * b22 + 2.0 * (a01 * a01 + a02 * a02 + a12 * a12)) / 6.0;
    double p = sqrt(p2);
    if (p <= 1e-150) {
        l[0] = l[1] = l[2] = q * scale;
        for (int i = 0; i < 3; ++i) for (int j = 0; j < 3; ++j) V[i][j] = (i == j) ? 1.0 : 0.0;
        return;
    }
    double ip = 1.0 / p;
    double c00 = b00 * ip, c11 = b11 * ip, c22 = b22 * ip, c01 = a01 * ip, c02 = a02 * ip, c12 = a12 * ip;
    double det = c00 * (c11 * c22 - c12 * c12) - c01 * (c01 * c22 - c12 * c02) + c02 * (c01 * c12 - c11 * c02);
    double r = 0.5 * det; if (r < -1.0) r = -1.0; if (r > 1.0) r = 1.0;
    double phi = acos(r) / 3.0;
    double l0 = q + 2.0 * p * cos(phi);
    double l2 = q + 2.0 * p * cos(phi + 2.0 * M_PI / 3.0);
    double l1 = 3.0 * q - l0 - l2;
    int iso_max = r >= 0;
    double li = iso_max ? l0 : l2;
    double r0[3] = {a00 - li, a01, a02}, r1[3] = {a01, a11 - li, a12}, r2[3] = {a02, a12, a22 - li};
    double x01[3], x02[3], x12[3];
    cross3(r0, r1, x01); cross3(r0, r2, x02); cross3(r1, r2, x12);
    double n01 = dot3(x01, x01), n02 = dot3(x02, x02), n12 = dot3(x12, x12);
    double best[3];
    const double* bp = (n01 >= n02) ? x01 : x02;
    double nb = (n01 >= n02) ? n01 : n02;
    if (n12 > nb) bp = x12;
    best[0] = bp[0]; best[1] = bp[1]; best[2] = bp[2];
    const double ex[3] = {1.0, 0.0, 0.0};
    unit_or(best, ex);
    double u[3], v[3];
    orth_unit(best, u);
    cross3(best, u, v);
    double Au[3] = {a00 * u[0] + a01 * u[1] + a02 * u[2], a01 * u[0] + a11 * u[1] + a12 * u[2], a02 * u[0] + a12 * u[1] + a22 * u[2]};
    double Av[3] = {a00 * v[0] + a01 * v[1] + a02 * v[2], a01 * v[0] + a11 * v[1] + a12 * v[2], a02 * v[0] + a12 * v[1] + a22 * v[2]};
    double m00 = dot3(u, Au) - l1, m01 = dot3(u, Av), m11 = dot3(v, Av) - l1;
    double x, y;
    if (fabs(m00) >= fabs(m11)) { x = -m01; y = m00; } else { x = m11; y = -m01; }
    double nrm = sqrt(x * x + y * y);
    if (nrm > 0) { x /= nrm; y /= nrm; } else { x = 1.0; y = 0.0; }
    double emid[3] = {x * u[0] + y * v[0], x * u[1] + y * v[1], x * u[2] + y * v[2]};
    double eoth[3];
    cross3(best, emid, eoth);
    double *v0 = iso_max ? best : eoth, *v2 = iso_max ? eoth : best;
    double c12v[3];
    cross3(emid, v2, c12v);
    double sgn = dot3(v0, c12v) < 0 ? -1.0 : 1.0;
    for (int k = 0; k < 3; ++k) { V[0][k] = v0[k]; V[1][k] = emid[k]; V[2][k] = sgn * v2[k]; }
    l[0] = l0 * scale; l[1] = l1 * scale; l[2] = l2 * scale;
}

/* F row-major f[9]; U[i] (column u_i), s[3] (only s[2] may be negative), V[i] (column v_i), det U = det V = +1 */
static void svd3(const double* f, double U[3][3], double* s, double V[3][3]) {
    double s00 = f[0] * f[0] + f[3] * f[3] + f[6] * f[6], s01 = f[0] * f[1] + f[3] * f[4] + f[6] * f[7];
    double s02 = f[0] * f[2] + f[3] * f[5] + f[6] * f[8], s11 = f[1] * f[1] + f[4] * f[4] + f[7] * f[7];
    double s12 = f[1] * f[2] + f[4] * f[5] + f[7] * f[8], s22 = f[2] * f[2] + f[5] * f[5] + f[8] * f[8];
    double l[3];
    sym3_eigh(s00, s01, s02, s11, s12, s22, l, V);
    double w[3][3];
    for (int i = 0; i < 3; ++i)
        for (int a = 0; a < 3; ++a) w[i][a] = f[3 * a] * V[i][0] + f[3 * a + 1] * V[i][1] + f[3 * a + 2] * V[i][2];
    const double ex[3] = {1.0, 0.0, 0.0};
    U[0][0] = w[0][0]; U[0][1] = w[0][1]; U[0][2] = w[0][2];
    unit_or(U[0], ex);
    double t = dot3(w[1], U[0]);
    double w1o[3] = {w[1][0] - t * U[0][0], w[1][1] - t * U[0][1], w[1][2] - t * U[0][2]};
    double n1 = sqrt(dot3(w1o, w1o));
    double l0 = l[0] > 0 ? l[0] : 0.0;
    double ref = sqrt(l0); if (ref < 1e-300) ref = 1e-300;
    if (n1 > 1e-12 * ref) { U[1][0] = w1o[0] / n1; U[1][1] = w1o[1] / n1; U[1][2] = w1o[2] / n1; }
    else orth_unit(U[0], U[1]);
    cross3(U[0], U[1], U[2]);
    for (int i = 0; i < 3; ++i) s[i] = dot3(U[i], w[i]);
}

/* n points; f: 9 rows of n doubles (SOA, f[k*n + c] = F_c[k/3][k%3]); G: (n, 3, K4) floats; Y: (n, 18, K4) floats */
int physskin_hessian_rows(int n, int K4, const double* f, double mu, double lam, double vol,
                          const float* G, float* Y, const double* cvec) {
    static const int PA[6] = {0, 0, 0, 1, 1, 2}, PB[6] = {0, 1, 2, 1, 2, 2};
    static const int I[3] = {0, 0, 1}, J[3] = {1, 2, 2};
    const double r2 = 0.70710678118654752440;
    for (int c = 0; c < n; ++c) {
        double F[9];
        for (int k = 0; k < 9; ++k) F[k] = f[(size_t)k * n + c];
        double U[3][3], s[3], V[3][3];
        svd3(F, U, s, V);
        double Jd = s[0] * s[1] * s[2];
        double cc = cvec ? cvec[c] : lam * (Jd - 1.0) - mu;  /* cvec: the caller's coefficient of d2J/dF2 */
        double g0 = s[1] * s[2], g1 = s[0] * s[2], g2 = s[0] * s[1];
        double A[3][3];
        A[0][0] = mu + lam * g0 * g0; A[1][1] = mu + lam * g1 * g1; A[2][2] = mu + lam * g2 * g2;
        A[0][1] = A[1][0] = lam * g0 * g1 + cc * s[2];
        A[0][2] = A[2][0] = lam * g0 * g2 + cc * s[1];
        A[1][2] = A[2][1] = lam * g1 * g2 + cc * s[0];
        double m2 = A[0][0] * A[1][1] - A[0][1] * A[0][1];
        double dA = A[0][0] * (A[1][1] * A[2][2] - A[1][2] * A[1][2]) - A[0][1] * (A[0][1] * A[2][2] - A[1][2] * A[0][2])
                    + A[0][2] * (A[0][1] * A[1][2] - A[1][1] * A[0][2]);
        if (!(A[0][0] > 0 && m2 > 0 && dA > 0)) {  /* clamp the scaling block's negative eigenvalues */
            double la[3], Q[3][3];
            sym3_eigh(A[0][0], A[0][1], A[0][2], A[1][1], A[1][2], A[2][2], la, Q);
            for (int i = 0; i < 3; ++i) for (int j = 0; j < 3; ++j) {
                double acc = 0.0;
                for (int k = 0; k < 3; ++k) acc += (la[k] > 0 ? la[k] : 0.0) * Q[k][i] * Q[k][j];
                A[i][j] = acc;
            }
        }
        const double sk[3] = {s[2], s[1], s[0]};
        double C[9][9], B[9][9];  /* modes (rows, vec row-major (a, b)) and the clamped block applied to them */
        for (int p = 0; p < 3; ++p) {
            double tw = mu + cc * sk[p], fl = mu - cc * sk[p];
            if (tw < 0) tw = 0; if (fl < 0) fl = 0;
            const double *ui = U[I[p]], *uj = U[J[p]], *vi = V[I[p]], *vj = V[J[p]];
            for (int a = 0; a < 3; ++a) for (int b = 0; b < 3; ++b) {
                double pij = ui[a] * vj[b], pji = uj[a] * vi[b];
                C[p][3 * a + b] = (pij - pji) * r2;
                C[3 + p][3 * a + b] = (pij + pji) * r2;
                B[p][3 * a + b] = tw * C[p][3 * a + b];
                B[3 + p][3 * a + b] = fl * C[3 + p][3 * a + b];
            }
        }
        for (int i = 0; i < 3; ++i) for (int a = 0; a < 3; ++a) for (int b = 0; b < 3; ++b)
            C[6 + i][3 * a + b] = U[i][a] * V[i][b];
        for (int i = 0; i < 3; ++i) for (int k = 0; k < 9; ++k)
            B[6 + i][k] = A[i][0] * C[6][k] + A[i][1] * C[7][k] + A[i][2] * C[8][k];
        /* Hs[b'][b][pair] = vol * sum_m C[m][(a, b)] B[m][(a', b')] */
        float Hs[3][3][6];
        for (int pr = 0; pr < 6; ++pr) for (int b = 0; b < 3; ++b) for (int bq = 0; bq < 3; ++bq) {
            int i0 = 3 * PA[pr] + b, j0 = 3 * PB[pr] + bq;
            double acc = 0.0;
            for (int m = 0; m < 9; ++m) acc += C[m][i0] * B[m][j0];
            Hs[bq][b][pr] = (float)(vol * acc);
        }
        const float* Gc = G + (size_t)c * 3 * K4;
        float* Yc = Y + (size_t)c * 18 * K4;
        for (int b = 0; b < 3; ++b) for (int pr = 0; pr < 6; ++pr) {
            float h0 = Hs[0][b][pr], h1 = Hs[1][b][pr], h2 = Hs[2][b][pr];
            float* y = Yc + (size_t)(6 * b + pr) * K4;
            for (int k = 0; k < K4; ++k) y[k] = h0 * Gc[k] + h1 * Gc[K4 + k] + h2 * Gc[2 * K4 + k];
        }
    }
    return 0;
}
"""

def _loaded():
    """({"rows": function} or None, reason when None)."""
    return _native.functions("physskin_hessian", _SRC, {"rows": ("physskin_hessian_rows", "iip" "ddd" "ppp", "i")})


def _load():
    fns = _loaded()[0]
    return None if fns is None else fns["rows"]


def unavailable_reason() -> str:
    """Why the C kernel is unavailable ("" when it loaded)."""
    return _loaded()[1]


def available() -> bool:
    """Whether the C kernel compiled and loaded (False also when ``PHYSSKIN_NATIVE=0``)."""
    return _load() is not None


def hessian_rows(f: np.ndarray, mu: float, lam: float, vol: float, G: torch.Tensor,
                 out: Optional[torch.Tensor] = None, c: Optional[np.ndarray] = None) -> Optional[torch.Tensor]:
    """Y (n, 18, 4H) float32 for :meth:`SubspaceSimulator._assemble` (module docstring), or None without the kernel.

    f: (9, n) float64 C-contiguous, f[3a + b] = F_ab at each cubature point; mu, lam: Pa; vol: cubature volume
    (m^3) multiplied into the Hessian; G: (n, 3, 4H) float32 contiguous dF/dq rows. ``out``: optional
    preallocated (n, 18, 4H) float32 buffer. ``c``: optional (n,) float64 coefficient of d2J/dF2 (Pa) in place of
    ``lam (J - 1) - mu`` (as :func:`physskin_gs.physics.neohookean.projected_hessian_soa`).

    Raises:
        ValueError: ``f``, ``G``, ``out`` or ``c`` of the wrong shape, dtype, layout or device."""
    fn = _load()
    if fn is None:
        return None
    n, K4 = G.shape[0], G.shape[2]
    f = np.ascontiguousarray(f, dtype=np.float64)
    if f.shape != (9, n) or G.dtype != torch.float32 or not G.is_contiguous() or G.shape[1] != 3:
        raise ValueError(f"hessian_rows: f {f.shape} / G {tuple(G.shape)} {G.dtype} do not match")
    if G.device.type != "cpu":
        raise ValueError("hessian_rows: G must be a CPU tensor")
    if out is not None and (tuple(out.shape) != (n, 18, K4) or out.dtype != torch.float32
                            or not out.is_contiguous() or out.device.type != "cpu"):
        raise ValueError(f"hessian_rows: out must be a contiguous CPU float32 ({n}, 18, {K4}) tensor")
    Y = out if out is not None else torch.empty(n, 18, K4, dtype=torch.float32)
    cp = None
    if c is not None:
        c = np.ascontiguousarray(c, dtype=np.float64)
        if c.shape != (n,):
            raise ValueError(f"hessian_rows: c must be ({n},), got {c.shape}")
        cp = c.ctypes.data
    fn(n, K4, f.ctypes.data, float(mu), float(lam), float(vol), G.data_ptr(), Y.data_ptr(), cp)
    return Y
