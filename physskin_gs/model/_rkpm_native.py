"""Optional C kernel for the eigen field's blended RKPM shape functions (the hot part of its evaluation).

For every query point x it does what :meth:`physskin_gs.model.eigen.EigenSkinningField.shape_functions`
followed by ``Phi @ C`` does (module docstring of :mod:`physskin_gs.model.eigen`, step 3), in one pass and
without the sparse matrices:

1. the nodes whose support contains x (``|x - x_n| < r_n``), found in a bucket table built once per field
   (:func:`bucket_table`: each node is listed in every bucket its support's bounding box overlaps, in
   ascending node order, so a query reads one bucket and its sums run over ascending nodes as the reference's);
2. the cubic B-spline weights and their gradients, the Shepard weights ``s_n`` and the moment sums
   ``sum s_n [1, xn, xn xn^T]`` (and their x-derivatives), the 4x4 moment matrix with the ridge, its inverse
   (Gauss-Jordan with partial pivoting), ``beta``, the Mahalanobis ``kappa``, the blend ``gamma`` and every
   derivative exactly as the reference computes them;
3. ``Phi_n`` and ``grad Phi_n`` per covering node, accumulated straight into W (N, H) and grad W (N, H, 3)
   with the nodal coefficients C (n, m); the constant handle (column m) is 1 with zero gradient.

A point that no support covers gets ``covered = 0`` and zero rows; the caller fills it (nearest scaled node).
Results agree with the numpy / scipy reference to rounding (about 1e-15 of the field's largest value on
random points; the summation order per point is the same, the 4x4 inverse and FMA contraction differ; within
1e-12 of a support's edge, where the spline's gradient is ill-conditioned, grad W can differ by 1e-5 of its
largest value, both being equally right, and a point exactly on a support sphere may count as covered by one
and not the other); ``tests/test_eigen.py`` holds it to the
reference. Compiled once through :mod:`physskin_gs._native`; without a compiler :func:`evaluate` returns None
and the eigen field uses the reference. Calls release the GIL (ctypes), so the chunks of
:func:`physskin_gs.model.grid_field.evaluate_field` run on several threads.
"""

from __future__ import annotations

import threading
from typing import Optional, Tuple

import numpy as np
import torch

from physskin_gs import _native
from physskin_gs._threads import MAX_WORKERS, run_on_workers

__all__ = ["available", "evaluate", "gram", "bucket_table", "BucketTable", "MAX_GRAM_NODES"]

_SRC = r"""
/* physskin_gs: blended RKPM shape functions and field values per query point (see _rkpm_native.py). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void moments(const double* m, const double* xq, double A[4][4]) {
    double m0 = m[0];
    const double* m1 = m + 1;
    double m2[3][3] = {{m[4], m[5], m[6]}, {m[5], m[7], m[8]}, {m[6], m[8], m[9]}};
    A[0][0] = m0;
    for (int i = 0; i < 3; ++i) {
        double s1 = m1[i] - m0 * xq[i];
        A[0][i + 1] = s1;
        A[i + 1][0] = s1;
    }
    for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j)
            A[i + 1][j + 1] = m2[i][j] - xq[i] * m1[j] - m1[i] * xq[j] + m0 * xq[i] * xq[j];
}

/* inverse of a 4x4 matrix by Gauss-Jordan with partial pivoting; returns 0 when singular */
static int inv4(double A[4][4], double R[4][4]) {
    double M[4][8];
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) { M[i][j] = A[i][j]; M[i][j + 4] = (i == j) ? 1.0 : 0.0; }
    for (int c = 0; c < 4; ++c) {
        int p = c;
        double best = fabs(M[c][c]);
        for (int r = c + 1; r < 4; ++r) if (fabs(M[r][c]) > best) { best = fabs(M[r][c]); p = r; }
        if (!(best > 0.0)) return 0;
        if (p != c) for (int j = 0; j < 8; ++j) { double t = M[c][j]; M[c][j] = M[p][j]; M[p][j] = t; }
        double ip = 1.0 / M[c][c];
        for (int j = 0; j < 8; ++j) M[c][j] *= ip;
        for (int r = 0; r < 4; ++r) {
            if (r == c) continue;
            double f = M[r][c];
            if (f != 0.0) for (int j = 0; j < 8; ++j) M[r][j] -= f * M[c][j];
        }
    }
    for (int i = 0; i < 4; ++i) for (int j = 0; j < 4; ++j) R[i][j] = M[i][j + 4];
    return 1;
}

/* Shape functions of one point: fills idx[0..cnt), phi[0..cnt) and dphi[3 * (0..cnt)) (ascending nodes) and
   *gamma; returns cnt (> 0), 0 when no support covers the point, -1 when its moment matrix is singular. */
static int shape_point(const double* xp, const double* nodes, const double* radius, const double* feat,
                       const double* xn, const double* c0, double h, double ridge, double klo, double khi,
                       const double* borig, double bsize, const int64_t* bdims, const int64_t* bstart,
                       const int32_t* bnode, int* idx, double* phi, double* dphi, double* gamma_out) {
    double band = khi - klo, ih = 1.0 / h;
    *gamma_out = 0.0;
    /* 1. covering nodes, from the point's bucket (ascending node order) */
    int64_t b[3];
    for (int k = 0; k < 3; ++k) {
        double u = floor((xp[k] - borig[k]) / bsize);
        if (!(u >= 0.0 && u < (double)bdims[k])) return 0;
        b[k] = (int64_t)u;
    }
    int64_t bk = (b[0] * bdims[1] + b[1]) * bdims[2] + b[2];
    int cnt = 0;
    double S0 = 0.0, dS0[3] = {0.0, 0.0, 0.0};
    double* sw = phi;   /* Shepard weights, then Phi, in place */
    double* dsw = dphi; /* their gradients, then grad Phi, in place */
    for (int64_t e = bstart[bk]; e < bstart[bk + 1]; ++e) {
        int j = bnode[e];
        double d0 = nodes[3 * j] - xp[0], d1 = nodes[3 * j + 1] - xp[1], d2 = nodes[3 * j + 2] - xp[2];
        double r = radius[j], dd = d0 * d0 + d1 * d1 + d2 * d2;
        if (!(dd < 1.0000001 * r * r)) continue; /* cheap rejection of most bucket candidates; q decides below */
        double q = sqrt(dd) / r;
        if (!(q < 1.0)) continue;
        double w, g;
        if (q <= 0.5) { w = 1.0 - 6.0 * q * q + 6.0 * q * q * q; g = -12.0 + 18.0 * q; }
        else { double u = 1.0 - q; w = 2.0 * u * u * u; g = -6.0 * u * u / (q > 0.0 ? q : 1.0); }
        double c = -g / (r * r);
        idx[cnt] = j;
        sw[cnt] = w;
        dsw[3 * cnt] = c * d0; dsw[3 * cnt + 1] = c * d1; dsw[3 * cnt + 2] = c * d2;
        S0 += w;
        dS0[0] += c * d0; dS0[1] += c * d1; dS0[2] += c * d2;
        ++cnt;
    }
    if (!(S0 > 0.0)) return 0;
    /* 2. Shepard weights, moments and their derivatives */
    double inv = 1.0 / S0;
    double mom[10] = {0}, dmom[3][10];
    memset(dmom, 0, sizeof(dmom));
    for (int a = 0; a < cnt; ++a) {
        double s = sw[a] * inv;
        sw[a] = s;
        const double* f = feat + 10 * (size_t)idx[a];
        for (int k = 0; k < 3; ++k) {
            double ds = (dsw[3 * a + k] - s * dS0[k]) * inv;
            dsw[3 * a + k] = ds;
            for (int l = 0; l < 10; ++l) dmom[k][l] += ds * f[l];
        }
        for (int l = 0; l < 10; ++l) mom[l] += s * f[l];
    }
    double xq[3];
    for (int k = 0; k < 3; ++k) xq[k] = (xp[k] - c0[k]) / h;
    double A[4][4], Ai[4][4];
    moments(mom, xq, A);
    for (int k = 1; k < 4; ++k) A[k][k] += ridge;
    if (!inv4(A, Ai)) return -1;
    double beta[4] = {Ai[0][0], Ai[1][0], Ai[2][0], Ai[3][0]};
    double av[3] = {A[0][1], A[0][2], A[0][3]};
    double Cia[3];
    for (int i = 0; i < 3; ++i) Cia[i] = Ai[i + 1][1] * av[0] + Ai[i + 1][2] * av[1] + Ai[i + 1][3] * av[2];
    double kappa = av[0] * Cia[0] + av[1] * Cia[1] + av[2] * Cia[2];
    double t = (kappa - klo) / band;
    if (t < 0.0) t = 0.0;
    if (t > 1.0) t = 1.0;
    double sm = t * t * t * (t * (6.0 * t - 15.0) + 10.0), dsm = 30.0 * t * t * (t - 1.0) * (t - 1.0);
    double gamma = 1.0 - sm;
    double dbeta[3][4], dgamma[3];
    for (int k = 0; k < 3; ++k) {
        double dA[4][4];
        moments(dmom[k], xq, dA);
        double rhs[4];
        for (int i = 0; i < 4; ++i)
            rhs[i] = -(dA[i][0] * beta[0] + dA[i][1] * beta[1] + dA[i][2] * beta[2] + dA[i][3] * beta[3]);
        rhs[k + 1] += ih;
        for (int i = 0; i < 4; ++i)
            dbeta[k][i] = Ai[i][0] * rhs[0] + Ai[i][1] * rhs[1] + Ai[i][2] * rhs[2] + Ai[i][3] * rhs[3];
        double da[3] = {dA[0][1], dA[0][2], dA[0][3]};
        double dda[3] = {da[0], da[1], da[2]};
        dda[k] -= ih;
        double quad = 0.0;
        for (int i = 0; i < 3; ++i)
            for (int j = 0; j < 3; ++j) {
                double dcov = dA[i + 1][j + 1] - da[i] * av[j] - av[i] * da[j];
                quad += Cia[i] * dcov * Cia[j];
            }
        double dkappa = 2.0 * (Cia[0] * dda[0] + Cia[1] * dda[1] + Cia[2] * dda[2]) - quad;
        dgamma[k] = (-dsm / band) * dkappa;
    }
    double base = beta[0] - 1.0 - (beta[1] * xq[0] + beta[2] * xq[1] + beta[3] * xq[2]);
    double T[4][4];
    T[0][0] = 1.0 + gamma * base;
    for (int l = 1; l < 4; ++l) T[0][l] = gamma * beta[l];
    for (int k = 0; k < 3; ++k) {
        T[k + 1][0] = dgamma[k] * base + gamma * (dbeta[k][0] - (dbeta[k][1] * xq[0] + dbeta[k][2] * xq[1]
                                                               + dbeta[k][3] * xq[2]));
        for (int l = 1; l < 4; ++l) T[k + 1][l] = dgamma[k] * beta[l] + gamma * dbeta[k][l];
    }
    /* 3. Phi and grad Phi per covering node (in place over the Shepard weights) */
    for (int a = 0; a < cnt; ++a) {
        const double* xj = xn + 3 * (size_t)idx[a];
        double ev[4];
        for (int i = 0; i < 4; ++i) ev[i] = T[i][0] + T[i][1] * xj[0] + T[i][2] * xj[1] + T[i][3] * xj[2];
        double s = sw[a];
        phi[a] = s * ev[0];
        for (int k = 0; k < 3; ++k) dphi[3 * a + k] = dsw[3 * a + k] * ev[0] + s * ev[k + 1];
    }
    *gamma_out = gamma;
    return cnt;
}

#define SHAPE_ARGS nodes, radius, feat, xn, c0, h, ridge, klo, khi, borig, bsize, bdims, bstart, bnode

/* W (N, m + 1) and grad W (N, m + 1, 3), float64 (f32 == 0) or float32 (f32 != 0); returns the number of singular
   moment matrices (rows left zero), -1 when the scratch cannot be allocated */
int physskin_rkpm_eval(int N, const double* x, int n, const double* nodes, const double* radius,
                       const double* feat, const double* xn, const double* c0, double h, double ridge,
                       double klo, double khi, int m, const double* coeffs,
                       const double* borig, double bsize, const int64_t* bdims, const int64_t* bstart,
                       const int32_t* bnode, void* Wv, void* Gv, int f32, uint8_t* covered, double* gamma_out) {
    int H = m + 1, nbad = 0;
    size_t nn = (size_t)(n > 0 ? n : 1);
    int* idx = (int*)malloc(sizeof(int) * nn);
    double* phi = (double*)malloc(sizeof(double) * nn);
    double* dphi = (double*)malloc(sizeof(double) * 3 * nn);
    double* acc = (double*)malloc(sizeof(double) * 4 * (size_t)H);  /* W then grad W (x, y, z) per column */
    if (!idx || !phi || !dphi || !acc) { free(idx); free(phi); free(dphi); free(acc); return -1; }
    double* aw = acc;
    double* ax = acc + H;
    double* ay = acc + 2 * H;
    double* az = acc + 3 * H;
    for (int p = 0; p < N; ++p) {
        memset(acc, 0, sizeof(double) * 4 * (size_t)H);
        aw[m] = 1.0;
        covered[p] = 0;
        int cnt = shape_point(x + 3 * (size_t)p, SHAPE_ARGS, idx, phi, dphi, gamma_out + p);
        if (cnt < 0) ++nbad;
        for (int a = 0; a < cnt; ++a) {
            double f = phi[a], g0 = dphi[3 * a], g1 = dphi[3 * a + 1], g2 = dphi[3 * a + 2];
            const double* Cj = coeffs + (size_t)idx[a] * m;
            for (int c = 0; c < m; ++c) {
                double v = Cj[c];
                aw[c] += f * v; ax[c] += g0 * v; ay[c] += g1 * v; az[c] += g2 * v;
            }
        }
        if (cnt > 0) covered[p] = 1;
        if (f32) {
            float* Wp = (float*)Wv + (size_t)p * H;
            float* Gp = (float*)Gv + (size_t)p * H * 3;
            for (int c = 0; c < H; ++c) {
                Wp[c] = (float)aw[c];
                Gp[3 * c] = (float)ax[c]; Gp[3 * c + 1] = (float)ay[c]; Gp[3 * c + 2] = (float)az[c];
            }
        } else {
            double* Wp = (double*)Wv + (size_t)p * H;
            double* Gp = (double*)Gv + (size_t)p * H * 3;
            for (int c = 0; c < H; ++c) {
                Wp[c] = aw[c];
                Gp[3 * c] = ax[c]; Gp[3 * c + 1] = ay[c]; Gp[3 * c + 2] = az[c];
            }
        }
    }
    free(idx); free(phi); free(dphi); free(acc);
    return nbad;
}

/* dense Gram matrices over N quadrature points with volumes vol: Mg += sum_p vol_p Phi(p) Phi(p)^T and
   Kg += sum_p vol_p sum_k dPhi_k(p) dPhi_k(p)^T, both (n, n) row-major (both triangles); covered (N,) as in
   eval; returns the number of singular moment matrices (points skipped), -1 when the scratch cannot be
   allocated */
int physskin_rkpm_gram(int N, const double* x, const double* vol, int n, const double* nodes,
                       const double* radius, const double* feat, const double* xn, const double* c0, double h,
                       double ridge, double klo, double khi, const double* borig, double bsize,
                       const int64_t* bdims, const int64_t* bstart, const int32_t* bnode,
                       double* Mg, double* Kg, uint8_t* covered) {
    int nbad = 0;
    size_t nn = (size_t)(n > 0 ? n : 1);
    int* idx = (int*)malloc(sizeof(int) * nn);
    double* phi = (double*)malloc(sizeof(double) * nn);
    double* dphi = (double*)malloc(sizeof(double) * 3 * nn);
    if (!idx || !phi || !dphi) { free(idx); free(phi); free(dphi); return -1; }
    for (int p = 0; p < N; ++p) {
        double gamma;
        covered[p] = 0;
        int cnt = shape_point(x + 3 * (size_t)p, SHAPE_ARGS, idx, phi, dphi, &gamma);
        if (cnt < 0) { ++nbad; continue; }
        if (cnt == 0) continue;
        covered[p] = 1;
        double v = vol[p];
        for (int a = 0; a < cnt; ++a) {
            double fa = v * phi[a];
            double ga0 = v * dphi[3 * a], ga1 = v * dphi[3 * a + 1], ga2 = v * dphi[3 * a + 2];
            double* Mr = Mg + (size_t)idx[a] * n;
            double* Kr = Kg + (size_t)idx[a] * n;
            for (int b = 0; b < cnt; ++b) {
                int jb = idx[b];
                Mr[jb] += fa * phi[b];
                Kr[jb] += ga0 * dphi[3 * b] + ga1 * dphi[3 * b + 1] + ga2 * dphi[3 * b + 2];
            }
        }
    }
    free(idx); free(phi); free(dphi);
    return nbad;
}
"""

_TABLE_LOCK = threading.Lock()


def _load():
    """{"eval", "gram"}: the bound kernel functions, or None when unavailable."""
    return _native.functions("physskin_rkpm", _SRC, {
        "eval": ("physskin_rkpm_eval", "ipippppp" "dddd" "ipp" "d" "ppppp" "ipp", "i"),
        "gram": ("physskin_rkpm_gram", "ippi" "ppppp" "dddd" "p" "d" "pppppp", "i"),
    })[0]


def available() -> bool:
    """Whether the C kernel compiled and loaded (False also when ``PHYSSKIN_NATIVE=0``)."""
    return _load() is not None


class BucketTable:
    """Support buckets of a node set (:func:`bucket_table`). Attributes: origin (3,) float64, size (bucket edge,
    same units as the nodes), dims (3,) int64 buckets per axis, start (B + 1,) int64 CSR offsets over the
    x-major buckets, node (E,) int32 node indices, ascending within each bucket."""

    def __init__(self, origin: np.ndarray, size: float, dims: np.ndarray, start: np.ndarray, node: np.ndarray):
        self.origin, self.size, self.dims, self.start, self.node = origin, size, dims, start, node


def bucket_table(nodes: np.ndarray, radius: np.ndarray, max_buckets: int = 1 << 22,
                 max_entries: int = 1 << 25) -> BucketTable:
    """Buckets of edge about the median radius over the supports' bounding box; each node is listed in every
    bucket that its support's bounding box ``[x_n - r_n, x_n + r_n]`` overlaps, so the nodes that can cover a
    point are exactly those of the point's bucket. nodes (n, 3) float64, radius (n,) float64 > 0 (same units).
    The edge grows (x 1.5 per try) while the buckets exceed ``max_buckets`` or the entries ``max_entries``.
    Raises ValueError for empty or mismatched input."""
    nodes = np.ascontiguousarray(nodes, np.float64)
    radius = np.ascontiguousarray(radius, np.float64)
    n = nodes.shape[0]
    if n == 0 or nodes.shape != (n, 3) or radius.shape != (n,):
        raise ValueError(f"bucket_table: nodes {nodes.shape} and radius {radius.shape} do not match")
    lo_all = (nodes - radius[:, None]).min(0)
    hi_all = (nodes + radius[:, None]).max(0)
    size = max(float(np.median(radius)), 1e-12)
    while True:
        origin = lo_all - 1e-9 * size
        dims = np.maximum(np.floor((hi_all - origin) / size).astype(np.int64) + 1, 1)
        lo = np.clip(np.floor((nodes - radius[:, None] - origin) / size).astype(np.int64), 0, dims - 1)  # [n, 3]
        hi = np.clip(np.floor((nodes + radius[:, None] - origin) / size).astype(np.int64), 0, dims - 1)
        ext = hi - lo + 1  # [n, 3]
        cnt = ext.prod(1)  # [n]
        if float(np.prod(dims.astype(np.float64))) <= max_buckets and int(cnt.sum()) <= max_entries:
            break
        size *= 1.5
    total = int(cnt.sum())
    node = np.repeat(np.arange(n, dtype=np.int64), cnt)  # [E]
    k = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(cnt) - cnt, cnt)  # index inside the node's box
    ey, ez = ext[node, 1], ext[node, 2]
    i, j, l = k // (ey * ez), (k // ez) % ey, k % ez
    bk = ((lo[node, 0] + i) * dims[1] + lo[node, 1] + j) * dims[2] + lo[node, 2] + l  # [E]
    order = np.lexsort((node, bk))  # by bucket, then ascending node
    bk, node = bk[order], node[order]
    B = int(np.prod(dims))
    start = np.zeros(B + 1, np.int64)
    np.cumsum(np.bincount(bk, minlength=B), out=start[1:])
    return BucketTable(origin, size, dims, start, node.astype(np.int32))


def _table(field) -> BucketTable:
    t = getattr(field, "_bucket_table", None)
    if t is None:
        with _TABLE_LOCK:
            t = getattr(field, "_bucket_table", None)
            if t is None:
                t = bucket_table(field.nodes, field.radius)
                field._bucket_table = t
    return t


def _check(field, x: np.ndarray) -> None:
    """The arrays the C code reads through raw pointers: shapes, dtypes and layout (ValueError otherwise)."""
    n = field.nodes.shape[0]
    arrays = {"nodes": (field.nodes, (n, 3)), "radius": (field.radius, (n,)), "feat": (field._feat, (n, 10)),
              "xn": (field._xn, (n, 3)), "coeffs": (field.coeffs, (n, field.coeffs.shape[1] if field.coeffs.ndim == 2
                                                                   else -1))}
    for name, (a, shape) in arrays.items():
        if a.shape != shape or a.dtype != np.float64 or not a.flags.c_contiguous:
            raise ValueError(f"RKPM kernel: field array {name} {a.shape} {a.dtype} is not C-contiguous float64 {shape}")
    if x.ndim != 2 or x.shape[1] != 3:
        raise ValueError(f"RKPM kernel: points must be (N, 3), got {x.shape}")


def evaluate(field, x: np.ndarray, dtype=np.float64
             ) -> Optional[Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """Blended RKPM field of an :class:`~physskin_gs.model.eigen.EigenSkinningField` at x (N, 3) float64 finite,
    normalised frame: (W (N, H), dW/dX (N, H, 3) in ``dtype`` (np.float64 or np.float32; sums in float64 either
    way), covered (N,) bool, gamma (N,) float64), or None without the kernel. Uncovered rows are zero except the
    constant column (1); the caller fills them. Raises ValueError for x not (N, 3) or field arrays that are not
    C-contiguous float64 of matching shapes, RuntimeError if the kernel cannot allocate its scratch or a moment
    matrix is singular (the ridge prevents that for finite input)."""
    fns = _load()
    if fns is None:
        return None
    x = np.ascontiguousarray(x, dtype=np.float64)
    _check(field, x)
    N, n, m = x.shape[0], field.nodes.shape[0], field.coeffs.shape[1]
    t = _table(field)
    f32 = np.dtype(dtype) == np.float32
    W = np.empty((N, m + 1), np.float32 if f32 else np.float64)
    G = np.empty((N, m + 1, 3), np.float32 if f32 else np.float64)
    cov = np.empty(N, np.uint8)
    gam = np.empty(N)
    c0 = np.ascontiguousarray(field._c0, np.float64)
    lo, hi = field.kappa_band
    fn = fns["eval"]
    nbad = fn(N, x.ctypes.data, n, field.nodes.ctypes.data, field.radius.ctypes.data, field._feat.ctypes.data,
              field._xn.ctypes.data, c0.ctypes.data, float(field.length_scale), float(field.ridge), float(lo),
              float(hi), m, field.coeffs.ctypes.data, t.origin.ctypes.data, float(t.size), t.dims.ctypes.data,
              t.start.ctypes.data, t.node.ctypes.data, W.ctypes.data, G.ctypes.data, int(f32), cov.ctypes.data,
              gam.ctypes.data)
    if nbad:
        raise RuntimeError(f"RKPM kernel: {'allocation failed' if nbad < 0 else f'{nbad} singular moment matrices'}")
    return W, G, cov.astype(bool), gam


#: Slices of the quadrature points in :func:`gram` (each with its own accumulators; a constant, so the sums do not
#: depend on the thread count).
GRAM_SLICES = 2
#: Largest node count for :func:`gram` (two dense (n, n) float64 accumulators: 2 x 72 MB at 3000).
MAX_GRAM_NODES = 3000


def gram(field, x: np.ndarray, vol: np.ndarray) -> Optional[Tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Mass and stiffness Gram matrices of the field's shape functions over quadrature points x (N, 3) float64
    finite, normalised frame, with volumes vol (N,): (M (n, n), K (n, n)) dense float64 symmetric with
    ``M = sum_p vol_p Phi(p) Phi(p)^T`` and ``K = sum_p vol_p sum_k dPhi_k(p) dPhi_k(p)^T`` (the Dirichlet
    energy without the Lame factor; ``Phi^T diag(vol) Phi`` of the reference), and covered (N,) bool. None without
    the kernel or when n > :data:`MAX_GRAM_NODES`. Raises RuntimeError as :func:`evaluate`."""
    fns = _load()
    n = field.nodes.shape[0]
    if fns is None or n > MAX_GRAM_NODES:
        return None
    x = np.ascontiguousarray(x, dtype=np.float64)
    _check(field, x)
    vol = np.ascontiguousarray(vol, dtype=np.float64)
    N = x.shape[0]
    if vol.shape != (N,):
        raise ValueError(f"gram: vol {vol.shape} does not match the {N} points")
    t = _table(field)
    # one pair of accumulators per slice of the points, summed in slice order; the slice count depends on N and n
    # only (not on the thread count), so the result is the same on any number of threads (at most 2 slices, the
    # 2-core machines this runs on; at most 256 MB of accumulators)
    S = int(max(1, min(GRAM_SLICES, N // 2048, (1 << 28) // (16 * n * n))))
    T = int(max(1, min(MAX_WORKERS, torch.get_num_threads(), S)))
    Ms = [np.zeros((n, n)) for _ in range(S)]
    Ks = [np.zeros((n, n)) for _ in range(S)]
    cov = np.empty(N, np.uint8)
    c0 = np.ascontiguousarray(field._c0, np.float64)
    lo, hi = field.kappa_band
    bounds = np.linspace(0, N, S + 1).astype(np.int64)
    bad = [0] * S

    def part(_slot: int, i: int) -> None:
        s, e = int(bounds[i]), int(bounds[i + 1])
        bad[i] = fns["gram"](e - s, x[s:].ctypes.data, vol[s:].ctypes.data, n, field.nodes.ctypes.data,
                             field.radius.ctypes.data, field._feat.ctypes.data, field._xn.ctypes.data,
                             c0.ctypes.data, float(field.length_scale), float(field.ridge), float(lo), float(hi),
                             t.origin.ctypes.data, float(t.size), t.dims.ctypes.data, t.start.ctypes.data,
                             t.node.ctypes.data, Ms[i].ctypes.data, Ks[i].ctypes.data, cov[s:].ctypes.data)

    run_on_workers("rkpm", part, list(range(S)), T, torch_ops=False)
    if any(b < 0 for b in bad):
        raise RuntimeError("RKPM kernel: allocation failed")
    if sum(bad):
        raise RuntimeError(f"RKPM kernel: {sum(bad)} singular moment matrices")
    M, K = Ms[0], Ks[0]
    for i in range(1, S):
        M += Ms[i]
        K += Ks[i]
    return M, K, cov.astype(bool)
