"""View-dependent colour of (deformed) Gaussians for one camera centre, as the viewer sends it to the browser.

The browser's splat renderer takes one RGBA colour per Gaussian, so spherical harmonics must be evaluated on the
server for the client's camera. For Gaussian i with centre ``mu_i`` (deformed), deformation gradient ``F_i`` and
camera centre ``c``::

    d      = mu_i - c                       # view direction, world frame
    d_rest = R_F^T d                        # R_F: rotation of the polar decomposition F = R_F S (method.md 10)
    rgb_i  = clamp(SH_i(d_rest) + 0.5, 0, 1)   # formats.md 1, then clamped to the displayable range

which is exactly what ``render`` and the exported frames show (:func:`physskin_gs.render.sh.sh_to_rgb` with
:func:`physskin_gs.deform.polar_rotation`), clamped to [0, 1].

Two interchangeable paths, held together by ``tests/test_view_colour.py``:

* :func:`view_rgb_reference`: plain torch (SVD polar rotation in float64, the project's SH basis).
* the compiled kernel (default when a C compiler is available): the polar rotation of 8 Gaussians at once in
  float32 vectors by seven Newton steps ``X <- (X + X^-T) / 2`` (Higham 1986; exact to float rounding for
  singular values in [0.2, 5], the deformer's clamp), then the direction and the SH basis of degrees 0-3 in
  float64 per Gaussian. Rows whose F is inverted or degenerate (det F <= 1e-9 |F|_F^3), or whose last Newton step
  still changed R by more than 1e-4 relative (singular values far outside [0.2, 5]), are flagged by the kernel and
  coloured by the reference (whose rotation-variant SVD also gives inverted F its sign fix).

Pure math: no viser, no files.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from physskin_gs import _native
from physskin_gs._threads import MAX_WORKERS, run_on_workers
from physskin_gs.deform import polar_rotation
from physskin_gs.errors import OptionError
from physskin_gs.render.sh import sh_to_rgb
from physskin_gs.sh import _C1, _C2, _C3, sh_degree_from_coeffs
from physskin_gs.scene import C0

__all__ = ["view_rgb", "view_rgb_reference", "view_rgba_words", "native_available"]

#: Rows per worker below which one thread does the work (thread hand-off costs more than it saves).
_ROWS_PER_WORKER = 16384

_SRC = r"""
#include <math.h>
#include <stdint.h>

typedef float v8 __attribute__((vector_size(32)));

/* Rotations of the polar decompositions of 8 matrices at once (X: 9 row-major entries, 8 lanes each), in place:
   NEWTON unscaled Newton steps X <- (X + X^-T) / 2. A singular value s converges like x <- (x + 1/x) / 2, so 7
   steps take every s in [0.2, 5] (the deformer's clamp) to 1 within float rounding. Returns in *step the squared
   change of the last step relative to |X|^2 (convergence is quadratic: 1e-8 leaves an error of about 1e-8). */
#define NEWTON 7
static void polar8(v8 X[9], v8 *step) {
    for (int it = 0; it < NEWTON; ++it) {
        v8 c00 = X[4] * X[8] - X[5] * X[7], c01 = X[5] * X[6] - X[3] * X[8], c02 = X[3] * X[7] - X[4] * X[6];
        v8 c10 = X[2] * X[7] - X[1] * X[8], c11 = X[0] * X[8] - X[2] * X[6], c12 = X[1] * X[6] - X[0] * X[7];
        v8 c20 = X[1] * X[5] - X[2] * X[4], c21 = X[2] * X[3] - X[0] * X[5], c22 = X[0] * X[4] - X[1] * X[3];
        v8 det = X[0] * c00 + X[1] * c01 + X[2] * c02;
        v8 h = 0.5f / det; /* X^-T = cofactors / det */
        v8 C[9] = {c00, c01, c02, c10, c11, c12, c20, c21, c22};
        v8 ch = {0}, nr = {0};
        for (int k = 0; k < 9; ++k) {
            v8 y = 0.5f * X[k] + h * C[k];
            ch += (y - X[k]) * (y - X[k]);
            nr += y * y;
            X[k] = y;
        }
        if (it == NEWTON - 1) *step = ch / nr;
    }
}

static int usable(const float *F) {
    /* finite with det F > 1e-9 |F|_F^3 (not inverted, not degenerate): otherwise the reference */
    double c0 = (double)F[4] * F[8] - (double)F[5] * F[7], c1 = (double)F[5] * F[6] - (double)F[3] * F[8];
    double c2 = (double)F[3] * F[7] - (double)F[4] * F[6];
    double det = F[0] * c0 + F[1] * c1 + F[2] * c2, fro2 = 0.0;
    for (int k = 0; k < 9; ++k) fro2 += (double)F[k] * F[k];
    return isfinite(fro2) && isfinite(det) && det > 1e-9 * fro2 * sqrt(fro2);
}

int physskin_view_rgb(int lo, int hi, int degree, int k_rest, const float *means, const float *F,
                      const float *sh_dc, const float *sh_rest, const int64_t *rows, const double *cam,
                      const double *cst, float *out, const uint8_t *alpha, uint32_t *words, int stride,
                      int32_t *flagged) {
    /* cst: C0, C1, C2[5], C3[7] */
    int nflag = 0;
    int nb = (degree + 1) * (degree + 1);
    for (int t = lo; t < hi; t += 8) {
        int w = hi - t < 8 ? hi - t : 8;
        float R[8][9];
        int ok[8];
        if (F) {
            v8 X[9];
            for (int l = 0; l < 8; ++l) {
                int i = t + (l < w ? l : 0);
                ok[l] = l < w && usable(F + 9 * (int64_t)i);
                for (int k = 0; k < 9; ++k) X[k][l] = ok[l] ? F[9 * (int64_t)i + k] : (k % 4 == 0 ? 1.0f : 0.0f);
            }
            v8 step;
            polar8(X, &step);
            for (int l = 0; l < 8; ++l) {
                if (!(step[l] <= 1e-8f)) ok[l] = 0; /* not converged (singular values far from 1): the reference */
            }
            for (int l = 0; l < 8; ++l)
                for (int k = 0; k < 9; ++k) R[l][k] = X[k][l];
        }
        for (int l = 0; l < w; ++l) {
            int64_t i = t + l;
            double d[3] = {(double)means[3 * i] - cam[0], (double)means[3 * i + 1] - cam[1],
                           (double)means[3 * i + 2] - cam[2]};
            if (F) {
                if (!ok[l]) { flagged[nflag++] = (int32_t)i; continue; }
                const float *r = R[l];
                double e[3];
                for (int b = 0; b < 3; ++b) e[b] = r[b] * d[0] + r[3 + b] * d[1] + r[6 + b] * d[2]; /* R^T d */
                d[0] = e[0]; d[1] = e[1]; d[2] = e[2];
            }
            double nrm = sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
            if (nrm < 1e-12) nrm = 1e-12;
            double x = d[0] / nrm, y = d[1] / nrm, z = d[2] / nrm;
            double Y[16];
            Y[0] = cst[0];
            if (degree >= 1) { Y[1] = -cst[1] * y; Y[2] = cst[1] * z; Y[3] = -cst[1] * x; }
            if (degree >= 2) {
                double xx = x * x, yy = y * y, zz = z * z;
                Y[4] = cst[2] * x * y; Y[5] = cst[3] * y * z; Y[6] = cst[4] * (2.0 * zz - xx - yy);
                Y[7] = cst[5] * x * z; Y[8] = cst[6] * (xx - yy);
                if (degree >= 3) {
                    Y[9] = cst[7] * y * (3.0 * xx - yy); Y[10] = cst[8] * x * y * z;
                    Y[11] = cst[9] * y * (4.0 * zz - xx - yy); Y[12] = cst[10] * z * (2.0 * zz - 3.0 * xx - 3.0 * yy);
                    Y[13] = cst[11] * x * (4.0 * zz - xx - yy); Y[14] = cst[12] * z * (xx - yy);
                    Y[15] = cst[13] * x * (xx - 3.0 * yy);
                }
            }
            int64_t r = rows ? rows[i] : i;
            const float *dc = sh_dc + 3 * r, *rest = sh_rest + (int64_t)3 * k_rest * r;
            uint32_t word = words ? (uint32_t)alpha[i] << 24 : 0u;
            for (int c = 0; c < 3; ++c) {
                double acc = Y[0] * (double)dc[c];
                for (int k = 1; k < nb; ++k) acc += Y[k] * (double)rest[3 * (k - 1) + c];
                acc += 0.5;
                float v = (float)(acc < 0.0 ? 0.0 : (acc > 1.0 ? 1.0 : acc));
                if (words) word |= (uint32_t)(v * 255.0f) << (8 * c); /* as rgba_u32: float32 product, truncated */
                else out[3 * i + c] = v;
            }
            if (words) words[(int64_t)stride * i] = word;
        }
    }
    return nflag;
}
"""

_STATE: dict = {}


def _kernel():
    """The ctypes function, or None (no compiler, or ``PHYSSKIN_NATIVE=0``); the reason in ``_STATE["why"]``."""
    if "fn" not in _STATE:
        fns, why = _native.functions("physskin_view_rgb", _SRC,
                                     {"rgb": ("physskin_view_rgb", "iiii" "pppppppppp" "i" "p", "i")})
        _STATE["fn"], _STATE["why"] = (None if fns is None else fns["rgb"]), why
        _STATE["cst"] = torch.tensor((C0, _C1) + _C2 + _C3, dtype=torch.float64)
    return _STATE["fn"]


def native_available() -> bool:
    """True when the compiled kernel can be used on this machine."""
    return _kernel() is not None


def _check(means: torch.Tensor, sh_dc: torch.Tensor, sh_rest: torch.Tensor, F, rows) -> int:
    n = int(means.shape[0])
    if means.ndim != 2 or means.shape[1] != 3:
        raise OptionError(f"means has shape {tuple(means.shape)}, expected (n, 3)")
    if sh_dc.ndim != 2 or sh_dc.shape[1] != 3 or sh_rest.ndim != 3 or sh_rest.shape[2] != 3 \
            or sh_rest.shape[0] != sh_dc.shape[0]:
        raise OptionError(f"sh_dc {tuple(sh_dc.shape)} / sh_rest {tuple(sh_rest.shape)}: expected (N, 3) / (N, K, 3)")
    if F is not None and tuple(F.shape) != (n, 3, 3):
        raise OptionError(f"F has shape {tuple(F.shape)}, expected ({n}, 3, 3)")
    if rows is None:
        if sh_dc.shape[0] != n:
            raise OptionError(f"{n} means but {sh_dc.shape[0]} SH rows and no row index")
    elif rows.shape != (n,):
        raise OptionError(f"rows has shape {tuple(rows.shape)}, expected ({n},)")
    return n


def view_rgb_reference(means: torch.Tensor, sh_dc: torch.Tensor, sh_rest: torch.Tensor, camera_position,
                       F: Optional[torch.Tensor] = None, rows: Optional[torch.Tensor] = None) -> torch.Tensor:
    """View-dependent colours, plain torch (the reference of :func:`view_rgb`; module docstring for the formula).

    Args:
        means: (n, 3) float, deformed centres, scene units.
        sh_dc: (N, 3), sh_rest: (N, K, 3) SH coefficients of the scene (K+1 = (d+1)^2, d <= 4).
        camera_position: (3,) camera centre, scene units.
        F: optional (n, 3, 3) deformation gradients at the centres (None: at rest, R_F = I).
        rows: optional (n,) int64 rows of the SH tables for each centre (None: row i for centre i, n == N).
    Returns:
        (n, 3) float32 RGB in [0, 1].
    Raises:
        OptionError for inconsistent shapes.
    """
    _check(means, sh_dc, sh_rest, F, rows)
    sh = torch.cat([sh_dc[:, None, :], sh_rest], 1)  # [N, K+1, 3]
    if rows is not None:
        sh = sh[rows]
    R = None
    if F is not None:
        R = polar_rotation(F.to(torch.float64))
    cam = torch.as_tensor(camera_position, dtype=torch.float64).reshape(3)
    rgb = sh_to_rgb(sh.to(torch.float64), means.to(torch.float64), cam, R)
    return rgb.clamp(0.0, 1.0).to(torch.float32)


def view_rgb(means: torch.Tensor, sh_dc: torch.Tensor, sh_rest: torch.Tensor, camera_position,
             F: Optional[torch.Tensor] = None, rows: Optional[torch.Tensor] = None,
             native: Optional[bool] = None, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """View-dependent colours of n Gaussians for one camera centre (module docstring), fast.

    Same arguments, result and errors as :func:`view_rgb_reference` (equal to it within float32 rounding, held by
    the tests), plus ``native`` (None: the compiled kernel when available and the inputs are CPU tensors of SH
    degree <= 3; False: the reference; True: require the kernel, RuntimeError without it) and ``out`` (an optional
    (n, 3) float32 contiguous CPU tensor to write into). With more than one torch thread the rows are shared by up
    to that many worker threads (at most 8).
    """
    n = _check(means, sh_dc, sh_rest, F, rows)
    fn = _usable_kernel(sh_rest, (means, sh_dc, sh_rest, F, rows), native)
    if fn is None:
        rgb = view_rgb_reference(means, sh_dc, sh_rest, camera_position, F, rows)
        if out is None:
            return rgb
        out.copy_(rgb)
        return out
    if out is None:
        out = torch.empty(n, 3, dtype=torch.float32)
    _run_kernel(fn, n, means, sh_dc, sh_rest, camera_position, F, rows, out, None, None, 0)
    return out


def view_rgba_words(means: torch.Tensor, sh_dc: torch.Tensor, sh_rest: torch.Tensor, camera_position,
                    alpha, words, F: Optional[torch.Tensor] = None, rows: Optional[torch.Tensor] = None,
                    native: Optional[bool] = None) -> None:
    """:func:`view_rgb` written straight into RGBA words, as the viewer's splat records hold them.

    Args:
        means, sh_dc, sh_rest, camera_position, F, rows, native: as :func:`view_rgb`.
        alpha: (n,) uint8 numpy array, the alpha byte of each word.
        words: (n, S) uint32 numpy array (C-contiguous rows; S >= 1): column 0 of row i receives the word of
            Gaussian i, ``R | G << 8 | B << 16 | A << 24`` with ``R = uint8(float32(rgb) * 255)`` as
            :func:`physskin_gs_viewer.splats.rgba_u32` makes them (pass a column view of the splat records, e.g.
            ``records[:, 7:]``, to fill them in place).
    Raises:
        OptionError for inconsistent shapes.
    """
    n = _check(means, sh_dc, sh_rest, F, rows)
    alpha = np.ascontiguousarray(alpha, dtype=np.uint8).reshape(-1)
    if alpha.shape[0] != n or words.dtype != np.uint32 or words.ndim != 2 or words.shape[0] != n \
            or words.strides[1] != 4 or words.strides[0] % 4:
        raise OptionError(f"alpha ({alpha.shape}) and words ({words.shape}, {words.dtype}) must have {n} rows")
    fn = _usable_kernel(sh_rest, (means, sh_dc, sh_rest, F, rows), native)
    if fn is None:
        words[:, 0] = _words(view_rgb_reference(means, sh_dc, sh_rest, camera_position, F, rows), alpha)
        return
    _run_kernel(fn, n, means, sh_dc, sh_rest, camera_position, F, rows, None, alpha, words, words.strides[0] // 4)


def _words(rgb: torch.Tensor, alpha):
    """(n,) uint32 RGBA words of (n, 3) float32 colours in [0, 1] and (n,) uint8 alpha bytes, as the kernel writes
    them (``R = uint8(float32(rgb) * 255)``, R in the low byte)."""
    b = np.clip(rgb.numpy() * np.float32(255.0), 0, 255).astype(np.uint32)  # [n, 3]
    return b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16) | (np.asarray(alpha).astype(np.uint32) << 24)


def _usable_kernel(sh_rest, tensors, native):
    degree = sh_degree_from_coeffs(sh_rest.shape[1] + 1)
    usable = degree <= 3 and all(t is None or t.device.type == "cpu" for t in tensors)
    fn = _kernel() if native is not False and usable else None
    if native and fn is None:
        raise RuntimeError("native view colour unavailable: " + (_STATE.get("why") or "needs CPU tensors, SH degree <= 3"))
    return fn


def _run_kernel(fn, n, means, sh_dc, sh_rest, camera_position, F, rows, out, alpha, words, stride) -> None:
    f32 = torch.float32
    degree = sh_degree_from_coeffs(sh_rest.shape[1] + 1)
    m = means.detach().to(f32).contiguous()
    Fc = None if F is None else F.detach().to(f32).reshape(n, 9).contiguous()
    dc = sh_dc.detach().to(f32).contiguous()
    rest = sh_rest.detach().to(f32).contiguous()
    rw = None if rows is None else rows.to(torch.int64).contiguous()
    cam = torch.as_tensor(camera_position, dtype=torch.float64).reshape(3).contiguous()
    cst = _STATE["cst"]
    T = max(1, min(MAX_WORKERS, torch.get_num_threads(), n // _ROWS_PER_WORKER))
    cuts = [n * i // T for i in range(T + 1)]
    flags = [torch.empty(max(cuts[i + 1] - cuts[i], 1), dtype=torch.int32) for i in range(T)]
    counts = [0] * T
    out_p = None if out is None else out.data_ptr()
    alpha_p = None if alpha is None else alpha.ctypes.data
    words_p = None if words is None else words.ctypes.data

    def part(_slot: int, i: int) -> None:
        counts[i] = fn(cuts[i], cuts[i + 1], degree, int(rest.shape[1]), m.data_ptr(),
                       None if Fc is None else Fc.data_ptr(), dc.data_ptr(), rest.data_ptr(),
                       None if rw is None else rw.data_ptr(), cam.data_ptr(), cst.data_ptr(), out_p, alpha_p,
                       words_p, int(stride), flags[i].data_ptr())

    run_on_workers("view-colour", part, list(range(T)), T, torch_ops=False)
    bad = [flags[i][:counts[i]] for i in range(T) if counts[i]]
    if bad:  # inverted or degenerate F: the reference's rotation-variant SVD
        idx = torch.cat(bad).long()
        rgb = view_rgb_reference(m[idx], dc, rest, camera_position, F[idx], idx if rw is None else rw[idx])
        if out is not None:
            out[idx] = rgb
        else:
            ii = idx.numpy()
            words[ii, 0] = _words(rgb, alpha[ii])
