"""Optional C kernels for the two products of every simulator evaluation, computed from the skinning weights
instead of the stored [Phi; G] rows.

Each Newton evaluation of :class:`physskin_gs.physics.simulator.SubspaceSimulator` needs, at its n cubature points,
the displacements and F - I of the handle transforms q (3, 4H) (rest-relative LBS, PhysSkin Eq. 2 and its
derivative, method.md 9)::

    x_a - X_a      = sum_h W_h (q_ah . Xh)                 Xh = [X, 1]
    (F - I)_ab     = sum_h dW_hb (q_ah . Xh) + W_h q_ahb

and, for the gradient, the transposed product of per-point forces f (3, n) N and volume-weighted first
Piola-Kirchhoff stresses vP (3, 3, n) N m::

    g_ahc = sum_p Xh_c (W_h f_a + sum_b dW_hb vP_ab) + [c < 3] sum_p W_h vP_ac

The simulator's reference computes both as one GEMM with the stored rows [Phi; G]^T (4H, 4n): 2.2 MB in float64
for 1000 points and 17 handles, streamed twice per evaluation. With several bodies stepped together those rows no
longer stay in cache, and each body's evaluation cost 1.5x its cost alone. These kernels read W (H, n), grad W
(H, 3, n) and X (3, n) instead: a quarter of the bytes in float64, an eighth when the weights are float32 values
(as the pipeline's skinning fields are; the simulator passes them before its whitening, with the whitening applied
to q and to the result instead). Products and sums are float64 either way, so the results equal the GEMM's up to
summation order. Points are processed in cache-sized tiles; the inner loops run over points, so the compiler
vectorises them. ``tests/test_lbs_native.py`` holds them to the GEMM. Compiled through :mod:`physskin_gs._native`;
without a compiler the functions return None and the caller keeps its GEMM.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from physskin_gs import _native

__all__ = ["available", "deform", "project", "unavailable_reason"]

_SRC = r"""
/* physskin_gs: LBS displacements / F - I of handle transforms and the transposed product (see _lbs_native.py). */
#include <stddef.h>

#define TILE 64
#define LANES 8

#define LBS_KERNELS(SFX, WT) \
/* out (3, 4n): out[a][p] = x_a - X_a, out[a][n + b n + p] = (F - I)_ab.  q (3, H, 4); Wt (H, n); dWt (H, 3, n); \
   Xt (3, n). */ \
void physskin_lbs_deform_##SFX(int n, int H, const double* restrict q, const WT* restrict Wt, \
                         const WT* restrict dWt, const double* restrict Xt, double* restrict out) { \
    const size_t N = (size_t)n, K4 = 4 * (size_t)H; \
    double acc[12][TILE]; \
    for (size_t p0 = 0; p0 < N; p0 += TILE) { \
        const size_t m = (N - p0 < TILE) ? N - p0 : TILE; \
        for (int j = 0; j < 12; ++j) for (size_t l = 0; l < m; ++l) acc[j][l] = 0.0; \
        const double* restrict X0 = Xt + p0; \
        const double* restrict X1 = Xt + N + p0; \
        const double* restrict X2 = Xt + 2 * N + p0; \
        for (int h = 0; h < H; ++h) { \
            const double* qa0 = q + 4 * (size_t)h; \
            const double* qa1 = q + K4 + 4 * (size_t)h; \
            const double* qa2 = q + 2 * K4 + 4 * (size_t)h; \
            const double q00 = qa0[0], q01 = qa0[1], q02 = qa0[2], q03 = qa0[3]; \
            const double q10 = qa1[0], q11 = qa1[1], q12 = qa1[2], q13 = qa1[3]; \
            const double q20 = qa2[0], q21 = qa2[1], q22 = qa2[2], q23 = qa2[3]; \
            const WT* restrict w = Wt + (size_t)h * N + p0; \
            const WT* restrict d0 = dWt + (3 * (size_t)h) * N + p0; \
            const WT* restrict d1 = d0 + N; \
            const WT* restrict d2 = d1 + N; \
            for (size_t l = 0; l < m; ++l) { \
                const double x = X0[l], y = X1[l], z = X2[l], wl = w[l]; \
                const double u0 = q00 * x + q01 * y + q02 * z + q03; \
                const double u1 = q10 * x + q11 * y + q12 * z + q13; \
                const double u2 = q20 * x + q21 * y + q22 * z + q23; \
                const double g0 = d0[l], g1 = d1[l], g2 = d2[l]; \
                acc[0][l] += wl * u0; \
                acc[1][l] += wl * u1; \
                acc[2][l] += wl * u2; \
                acc[3][l] += g0 * u0 + wl * q00;   /* (F - I)_00 */ \
                acc[4][l] += g1 * u0 + wl * q01;   /* (F - I)_01 */ \
                acc[5][l] += g2 * u0 + wl * q02; \
                acc[6][l] += g0 * u1 + wl * q10; \
                acc[7][l] += g1 * u1 + wl * q11; \
                acc[8][l] += g2 * u1 + wl * q12; \
                acc[9][l] += g0 * u2 + wl * q20; \
                acc[10][l] += g1 * u2 + wl * q21; \
                acc[11][l] += g2 * u2 + wl * q22; \
            } \
        } \
        for (int a = 0; a < 3; ++a) { \
            double* o = out + (size_t)a * 4 * N; \
            for (size_t l = 0; l < m; ++l) o[p0 + l] = acc[a][l]; \
            for (int b = 0; b < 3; ++b) \
                for (size_t l = 0; l < m; ++l) o[(1 + (size_t)b) * N + p0 + l] = acc[3 + 3 * a + b][l]; \
        } \
    } \
} \
 \
/* g (3, H, 4) = the transposed product of rhs (3, 4n): rhs[a][p] = f_a, rhs[a][n + b n + p] = vP_ab. */ \
void physskin_lbs_project_##SFX(int n, int H, const double* restrict rhs, const WT* restrict Wt, \
                          const WT* restrict dWt, const double* restrict Xt, double* restrict g) { \
    const size_t N = (size_t)n, K4 = 4 * (size_t)H; \
    const double* restrict f0 = rhs; \
    const double* restrict f1 = rhs + 4 * N; \
    const double* restrict f2 = rhs + 8 * N; \
    const double* P[3][3]; \
    for (int a = 0; a < 3; ++a) for (int b = 0; b < 3; ++b) P[a][b] = rhs + (size_t)a * 4 * N + (1 + (size_t)b) * N; \
    const double* restrict X0 = Xt; \
    const double* restrict X1 = Xt + N; \
    const double* restrict X2 = Xt + 2 * N; \
    const size_t full = N - N % LANES; \
    for (int h = 0; h < H; ++h) { \
        const WT* restrict w = Wt + (size_t)h * N; \
        const WT* restrict d0 = dWt + (3 * (size_t)h) * N; \
        const WT* restrict d1 = d0 + N; \
        const WT* restrict d2 = d1 + N; \
        /* acc[a][c] for the Xh_c s_a sums (c < 4), acc[3 + a][c] for the W vP_ac sums (c < 3) */ \
        double acc[21][LANES]; \
        for (int j = 0; j < 21; ++j) for (int l = 0; l < LANES; ++l) acc[j][l] = 0.0; \
        for (size_t p0 = 0; p0 < full; p0 += LANES) { \
            for (int l = 0; l < LANES; ++l) { \
                const size_t p = p0 + l; \
                const double wl = w[p], g0 = d0[p], g1 = d1[p], g2 = d2[p]; \
                const double x = X0[p], y = X1[p], z = X2[p]; \
                const double P00 = P[0][0][p], P01 = P[0][1][p], P02 = P[0][2][p]; \
                const double P10 = P[1][0][p], P11 = P[1][1][p], P12 = P[1][2][p]; \
                const double P20 = P[2][0][p], P21 = P[2][1][p], P22 = P[2][2][p]; \
                const double s0 = wl * f0[p] + g0 * P00 + g1 * P01 + g2 * P02; \
                const double s1 = wl * f1[p] + g0 * P10 + g1 * P11 + g2 * P12; \
                const double s2 = wl * f2[p] + g0 * P20 + g1 * P21 + g2 * P22; \
                acc[0][l] += s0 * x; acc[1][l] += s0 * y; acc[2][l] += s0 * z; acc[3][l] += s0; \
                acc[4][l] += s1 * x; acc[5][l] += s1 * y; acc[6][l] += s1 * z; acc[7][l] += s1; \
                acc[8][l] += s2 * x; acc[9][l] += s2 * y; acc[10][l] += s2 * z; acc[11][l] += s2; \
                acc[12][l] += wl * P00; acc[13][l] += wl * P01; acc[14][l] += wl * P02; \
                acc[15][l] += wl * P10; acc[16][l] += wl * P11; acc[17][l] += wl * P12; \
                acc[18][l] += wl * P20; acc[19][l] += wl * P21; acc[20][l] += wl * P22; \
            } \
        } \
        double t[21]; \
        for (int j = 0; j < 21; ++j) { \
            double s = 0.0; \
            for (int l = 0; l < LANES; ++l) s += acc[j][l]; \
            t[j] = s; \
        } \
        for (size_t p = full; p < N; ++p) {  /* the last n mod LANES points */ \
            const double wl = w[p], g0 = d0[p], g1 = d1[p], g2 = d2[p]; \
            const double Xh[4] = {X0[p], X1[p], X2[p], 1.0}; \
            const double fa[3] = {f0[p], f1[p], f2[p]}; \
            for (int a = 0; a < 3; ++a) { \
                const double s = wl * fa[a] + g0 * P[a][0][p] + g1 * P[a][1][p] + g2 * P[a][2][p]; \
                for (int c = 0; c < 4; ++c) t[4 * a + c] += s * Xh[c]; \
                for (int c = 0; c < 3; ++c) t[12 + 3 * a + c] += wl * P[a][c][p]; \
            } \
        } \
        for (int a = 0; a < 3; ++a) { \
            double* ga = g + (size_t)a * K4 + 4 * (size_t)h; \
            for (int c = 0; c < 4; ++c) ga[c] = t[4 * a + c] + (c < 3 ? t[12 + 3 * a + c] : 0.0); \
        } \
    } \
} \

LBS_KERNELS(f64, double)
LBS_KERNELS(f32, float)
"""


def _loaded():
    """({"deform_f64" | "deform_f32" | "project_f64" | "project_f32": fn} or None, reason when None)."""
    return _native.functions("physskin_lbs", _SRC, {
        "deform_f64": ("physskin_lbs_deform_f64", "iippppp"), "project_f64": ("physskin_lbs_project_f64", "iippppp"),
        "deform_f32": ("physskin_lbs_deform_f32", "iippppp"), "project_f32": ("physskin_lbs_project_f32", "iippppp")})


def unavailable_reason() -> str:
    """Why the C kernels are unavailable ("" when they loaded)."""
    return _loaded()[1]


def available() -> bool:
    """Whether the C kernels compiled and loaded (False also when ``PHYSSKIN_NATIVE=0``)."""
    return _loaded()[0] is not None


def _check(name: str, a: np.ndarray, shape: tuple, dtype=np.float64) -> None:
    if not isinstance(a, np.ndarray) or a.dtype != dtype or a.shape != shape or not a.flags.c_contiguous:
        got = (getattr(a, "dtype", type(a).__name__), getattr(a, "shape", None))
        raise ValueError(f"{name} must be a C-contiguous {np.dtype(dtype).name} array of shape {shape}, got {got}")


def _weights(Wt: np.ndarray, dWt: np.ndarray) -> str:
    """"f32" or "f64", the kernel variant for the weights' dtype (both alike). Raises ValueError otherwise."""
    kind = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}.get(getattr(Wt, "dtype", None))
    if kind is None or getattr(dWt, "dtype", None) != Wt.dtype:
        raise ValueError(f"Wt and dWt must both be float32 or both float64, got {getattr(Wt, 'dtype', None)} / "
                         f"{getattr(dWt, 'dtype', None)}")
    return kind


def _call(which: str, a: np.ndarray, Wt: np.ndarray, dWt: np.ndarray, Xt: np.ndarray,
          out: Optional[np.ndarray]) -> Optional[np.ndarray]:
    """Check the arrays and run kernel ``which`` ("deform": ``a`` is q (3, 4H), out (3, 4n); "project": ``a`` is rhs
    (3, 4n), out (3, 4H)); None without the kernel. Raises ValueError."""
    fns = _loaded()[0]
    if fns is None:
        return None
    kind = _weights(Wt, dWt)
    H, n = Wt.shape
    a_shape, out_shape = ((3, 4 * H), (3, 4 * n)) if which == "deform" else ((3, 4 * n), (3, 4 * H))
    _check("q" if which == "deform" else "rhs", a, a_shape)
    _check("Wt", Wt, (H, n), Wt.dtype)
    _check("dWt", dWt, (H, 3, n), Wt.dtype)
    _check("Xt", Xt, (3, n))
    if out is None:
        out = np.empty(out_shape)
    _check("out", out, out_shape)
    fns[f"{which}_{kind}"](n, H, a.ctypes.data, Wt.ctypes.data, dWt.ctypes.data, Xt.ctypes.data, out.ctypes.data)
    return out


def deform(q: np.ndarray, Wt: np.ndarray, dWt: np.ndarray, Xt: np.ndarray,
           out: Optional[np.ndarray] = None) -> Optional[np.ndarray]:
    """Displacements and F - I of the handle transforms at the cubature points (module docstring), or None without
    the kernel.

    Args:
        q: (3, 4H) float64, the handle transforms in the simulator's layout (q[a, 4h + c]).
        Wt: (H, n) skinning weights, one row per handle. dWt: (H, 3, n) their gradients, 1/m. Both float64 or
            both float32 (read as stored; the products and sums are float64 either way).
        Xt: (3, n) float64 rest positions, m.
        out: optional (3, 4n) float64 buffer.

    Returns:
        (3, 4n) float64: ``[:, :n]`` the displacements x - X (m), ``[:, n:].reshape(3, 3, n)`` F - I; the same
        layout as ``q @ [Phi; G]^T`` in the simulator.

    Raises:
        ValueError: an array of the wrong shape, dtype or layout."""
    return _call("deform", q, Wt, dWt, Xt, out)


def project(rhs: np.ndarray, Wt: np.ndarray, dWt: np.ndarray, Xt: np.ndarray,
            out: Optional[np.ndarray] = None) -> Optional[np.ndarray]:
    """The transposed product ``([Phi; G]^T rhs^T)^T`` (3, 4H) (module docstring), or None without the kernel.

    Args:
        rhs: (3, 4n) float64: ``[:, :n]`` per-point forces f (N), ``[:, n:].reshape(3, 3, n)`` the points'
            volume-weighted stresses vP (N m).
        Wt, dWt, Xt: as in :func:`deform`.
        out: optional (3, 4H) float64 buffer.

    Returns:
        (3, 4H) float64 generalised forces in the layout of q.

    Raises:
        ValueError: an array of the wrong shape, dtype or layout."""
    return _call("project", rhs, Wt, dWt, Xt, out)
