"""Real spherical harmonics (degrees 0-4) in the 3DGS convention (pure math, no I/O).

Shared by the deformer (SH rotation for export) and the renderer (view-dependent colour).

The basis is the real, orthonormal SH basis with the sign convention used by INRIA 3DGS and gsplat
(formats.md section 1: ``rgb = max(sum_k Y_k(d) f_k + 0.5, 0)``). Coefficient k = l^2 + l + m holds
band l, order m. Under deformation the view direction is taken into each Gaussian's rest frame,
``d_rest = R_F^T d`` (method.md section 10), and the coefficients are never rotated.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from physskin_gs import _native
from physskin_gs._threads import MAX_WORKERS, run_on_workers
from physskin_gs.errors import OptionError
from physskin_gs.scene import C0 as _C0  # 1 / (2 sqrt(pi)), the one DC constant of the project

#: Normalisation constants of the real SH basis, band by band.
_C1 = 0.4886025119029199  # sqrt(3 / (4 pi))
_C2 = (1.0925484305920792, -1.0925484305920792, 0.31539156525252005, -1.0925484305920792, 0.5462742152960396)
_C3 = (
    -0.5900435899266435, 2.890611442640554, -0.4570457994644658, 0.3731763325901154,
    -0.4570457994644658, 1.445305721320277, -0.5900435899266435,
)
_C4 = (
    2.5033429417967046, -1.7701307697799304, 0.9461746957575601, -0.6690465435572892,
    0.10578554691520431, -0.6690465435572892, 0.47308734787878004, -1.7701307697799304,
    0.6258357354491761,
)

MAX_SH_DEGREE = 4


def sh_degree_from_coeffs(num_coeffs: int) -> int:
    """SH degree d from the number of coefficients per channel K+1 = (d+1)^2.

    Raises OptionError if ``num_coeffs`` is not a perfect square in {1, 4, 9, 16, 25}.
    """
    d = int(round(math.sqrt(num_coeffs))) - 1
    if (d + 1) ** 2 != num_coeffs or not 0 <= d <= MAX_SH_DEGREE:
        raise OptionError(
            f"SH coefficient count {num_coeffs} per channel is not (d+1)^2 for a degree d in 0..{MAX_SH_DEGREE}"
        )
    return d


def sh_basis(dirs: torch.Tensor, degree: int) -> torch.Tensor:
    """Real SH basis values Y_k(d) for k < (degree+1)^2.

    Args:
        dirs: (..., 3) float, directions (normalised here; a zero vector gives only the DC term non-zero).
        degree: 0..4.
    Returns:
        (..., (degree+1)^2) basis values, same dtype as ``dirs``.
    Raises:
        OptionError for a degree outside 0..4.
    """
    if not 0 <= degree <= MAX_SH_DEGREE:
        raise OptionError(f"SH degree {degree} is not supported (0..{MAX_SH_DEGREE})")
    d = dirs / dirs.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    x, y, z = d.unbind(-1)
    out = [torch.full_like(x, _C0)]
    if degree >= 1:
        out += [-_C1 * y, _C1 * z, -_C1 * x]
    if degree >= 2:
        xx, yy, zz = x * x, y * y, z * z
        xy, yz, xz = x * y, y * z, x * z
        out += [
            _C2[0] * xy,
            _C2[1] * yz,
            _C2[2] * (2.0 * zz - xx - yy),
            _C2[3] * xz,
            _C2[4] * (xx - yy),
        ]
    if degree >= 3:
        out += [
            _C3[0] * y * (3.0 * xx - yy),
            _C3[1] * xy * z,
            _C3[2] * y * (4.0 * zz - xx - yy),
            _C3[3] * z * (2.0 * zz - 3.0 * xx - 3.0 * yy),
            _C3[4] * x * (4.0 * zz - xx - yy),
            _C3[5] * z * (xx - yy),
            _C3[6] * x * (xx - 3.0 * yy),
        ]
    if degree >= 4:
        out += [
            _C4[0] * xy * (xx - yy),
            _C4[1] * yz * (3.0 * xx - yy),
            _C4[2] * xy * (7.0 * zz - 1.0),
            _C4[3] * yz * (7.0 * zz - 3.0),
            _C4[4] * (zz * (35.0 * zz - 30.0) + 3.0),
            _C4[5] * xz * (7.0 * zz - 3.0),
            _C4[6] * (xx - yy) * (7.0 * zz - 1.0),
            _C4[7] * xz * (xx - 3.0 * yy),
            _C4[8] * (xx * (xx - 3.0 * yy) - yy * (3.0 * xx - yy)),
        ]
    return torch.stack(out, dim=-1)


def eval_sh(sh: torch.Tensor, dirs: torch.Tensor, degree: Optional[int] = None) -> torch.Tensor:
    """Evaluate SH colour ``sum_k Y_k(d) f_k`` (no +0.5 offset, no clamp).

    Args:
        sh: (..., K+1, C) coefficients, DC first, channels last (C = 3 for RGB).
        dirs: (..., 3) view directions (need not be normalised), broadcastable with ``sh[..., 0, 0]``.
        degree: SH degree to use (default: all of ``sh``); higher coefficients are ignored.
    Returns:
        (..., C) values in the dtype of ``sh``.
    Raises:
        OptionError if K+1 is not a square or ``degree`` exceeds the coefficients present.
    """
    full = sh_degree_from_coeffs(sh.shape[-2])
    deg = full if degree is None else int(degree)
    if deg > full or deg < 0:
        raise OptionError(f"SH degree {deg} requested but the coefficients only hold degree {full}")
    n = (deg + 1) ** 2
    basis = sh_basis(dirs.to(sh.dtype), deg)  # [..., n]
    return (basis.unsqueeze(-1) * sh[..., :n, :]).sum(dim=-2)


# ------------------------------------------------------------------------------------------------ rotation
def _probe_dirs(l: int, dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(1234 + l)
    d = torch.randn(2 * l + 1, 3, generator=g, dtype=torch.float64)
    return (d / d.norm(dim=1, keepdim=True)).to(dtype)


#: rotate_sh shares rows from this many on between torch's threads (each part single-threaded; same values).
ROTATE_PARALLEL_MIN = 32768


_ROTATE_SRC = r"""
/* physskin_gs: per-Gaussian SH rotation, bands 1-3 (see physskin_gs/sh.py, rotate_sh). For each band l the
   rotated probe directions R^T d_k (k < 2l+1) are normalised, the band's real SH basis is evaluated there (the
   constants and sign convention of sh_basis), M = Y0inv Yr and out = M sh per channel; float64 inside. */
#include <math.h>
#include <stddef.h>

static void band(int l, const double* d, const double* C, double* Y) {
    double n = sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
    if (n < 1e-12) n = 1e-12;
    double x = d[0] / n, y = d[1] / n, z = d[2] / n;
    if (l == 1) { Y[0] = -C[0] * y; Y[1] = C[0] * z; Y[2] = -C[0] * x; return; }
    double xx = x * x, yy = y * y, zz = z * z;
    if (l == 2) {
        Y[0] = C[1] * (x * y); Y[1] = C[2] * (y * z); Y[2] = C[3] * (2.0 * zz - xx - yy); Y[3] = C[4] * (x * z);
        Y[4] = C[5] * (xx - yy);
        return;
    }
    Y[0] = C[6] * y * (3.0 * xx - yy); Y[1] = C[7] * (x * y) * z; Y[2] = C[8] * y * (4.0 * zz - xx - yy);
    Y[3] = C[9] * z * (2.0 * zz - 3.0 * xx - 3.0 * yy); Y[4] = C[10] * x * (4.0 * zz - xx - yy);
    Y[5] = C[11] * z * (xx - yy); Y[6] = C[12] * x * (xx - 3.0 * yy);
}

/* rows [s, e): sh and out (N, K1, 3) float32 (K1 = (degree + 1)^2), R (N, 3, 3) float32; D: the probe
   directions of bands 1..degree one after the other (3 + 5 + 7 rows of 3), Yi: their inverse basis matrices
   (9 + 25 + 49 values, row-major), C: 13 basis constants. Band 0 is copied. */
void physskin_rotate_sh(int s, int e, int K1, int degree, const float* sh, const float* R, const double* D,
                        const double* Yi, const double* C, float* out) {
    for (int i = s; i < e; ++i) {
        const float* Ri = R + 9 * (size_t)i;
        const float* si = sh + (size_t)i * K1 * 3;
        float* oi = out + (size_t)i * K1 * 3;
        oi[0] = si[0]; oi[1] = si[1]; oi[2] = si[2];
        const double* Dl = D;
        const double* Yl = Yi;
        for (int l = 1; l <= degree; ++l) {
            int w = 2 * l + 1, lo = l * l;
            double Yr[7][7], M[7][7];
            for (int k = 0; k < w; ++k) {
                double dr[3];
                for (int a = 0; a < 3; ++a)
                    dr[a] = (double)Ri[a] * Dl[3 * k] + (double)Ri[3 + a] * Dl[3 * k + 1]
                            + (double)Ri[6 + a] * Dl[3 * k + 2];
                band(l, dr, C, Yr[k]);
            }
            for (int a = 0; a < w; ++a)
                for (int b = 0; b < w; ++b) {
                    double acc = 0.0;
                    for (int k = 0; k < w; ++k) acc += Yl[a * w + k] * Yr[k][b];
                    M[a][b] = acc;
                }
            for (int a = 0; a < w; ++a)
                for (int c = 0; c < 3; ++c) {
                    double acc = 0.0;
                    for (int b = 0; b < w; ++b) acc += M[a][b] * (double)si[3 * (lo + b) + c];
                    oi[3 * (lo + a) + c] = (float)acc;
                }
            Dl += 3 * w;
            Yl += w * w;
        }
    }
}
"""
_ROTATE_STATE: dict = {}


def _rotate_kernel():
    """The ctypes function, or None; its float64 tables (probe directions (15, 3), inverse basis matrices (83,),
    constants (13,)) are kept in ``_ROTATE_STATE["tables"]``."""
    if "fn" not in _ROTATE_STATE:
        fns, why = _native.functions("physskin_rotate_sh", _ROTATE_SRC,
                                     {"rotate": ("physskin_rotate_sh", "iiii" "pppppp")})
        fn = None if fns is None else fns["rotate"]
        if fn is not None:
            dd = torch.float64
            D = torch.cat([_probe_dirs(l, dd) for l in (1, 2, 3)]).contiguous()  # [15, 3], as the reference
            Yi = torch.cat([torch.linalg.inv(sh_basis(_probe_dirs(l, dd), l)[:, l * l:(l + 1) ** 2]).reshape(-1)
                            for l in (1, 2, 3)]).contiguous()  # [83]
            C = torch.tensor((_C1,) + _C2 + _C3, dtype=dd)
            _ROTATE_STATE["tables"] = (D, Yi, C)
        _ROTATE_STATE["fn"], _ROTATE_STATE["why"] = fn, why
    return _ROTATE_STATE["fn"]


def _rotate_native(sh: torch.Tensor, R: torch.Tensor, degree: int) -> torch.Tensor:
    fn = _rotate_kernel()
    D, Yi, C = _ROTATE_STATE["tables"]
    shc, Rc = sh.contiguous(), R.contiguous()
    out = torch.empty_like(shc)
    N, K1 = int(sh.shape[0]), int(sh.shape[1])
    T = max(1, min(MAX_WORKERS, torch.get_num_threads(), N // 8192))
    cuts = [N * i // T for i in range(T + 1)]
    run_on_workers("sh", lambda _slot, i: fn(cuts[i], cuts[i + 1], K1, degree, shc.data_ptr(), Rc.data_ptr(),
                                             D.data_ptr(), Yi.data_ptr(), C.data_ptr(), out.data_ptr()),
                   list(range(T)), T, torch_ops=False)
    return out


def rotate_sh(sh: torch.Tensor, R: torch.Tensor, chunk: int = 1 << 16, native: Optional[bool] = None) -> torch.Tensor:
    """Rotate SH coefficients per Gaussian: sh (N, K+1, 3) (degree <= 3), R (N, 3, 3) rotations -> (N, K+1, 3)
    with ``eval_sh(out, d) == eval_sh(sh, R^T d)`` (method.md 10). DC is unchanged. Band l's (2l+1)^2 matrix comes
    from evaluating the basis at 2l+1 generic directions and at their rotated images, then solving.

    From :data:`ROTATE_PARALLEL_MIN` rows on, with more than one torch thread, contiguous parts of the rows are
    rotated by that many worker threads at once, each writing its rows of the one output (the small batched
    solves do not use torch's own threads; inputs that require grad stay serial); the result is the same bit for
    bit (:func:`rotate_sh_serial`, the reference).

    ``native``: None (default) uses a compiled kernel (the same probe directions, basis and solve in float64,
    about 4x faster; equal to the reference to float32 rounding, held by the tests) for float32 CPU tensors that
    do not require grad, when a C compiler is available; False the torch path; True requires the kernel.

    Raises OptionError if K+1 is not (d+1)^2, ValueError for degree 4 (not supported), RuntimeError for
    ``native=True`` when the kernel cannot be used."""
    degree0 = _rotation_degree(sh.shape[1])
    usable = (sh.dtype == torch.float32 and R.dtype == torch.float32 and sh.device.type == "cpu"
              and R.device.type == "cpu" and not sh.requires_grad and not R.requires_grad
              and R.shape == (sh.shape[0], 3, 3) and sh.ndim == 3 and sh.shape[2] == 3)
    if native is not False and usable and _rotate_kernel() is not None:
        return _rotate_native(sh, R, degree0)
    if native:
        raise RuntimeError("native SH rotation unavailable: " + (_ROTATE_STATE.get("why") or
                                                                 "needs float32 CPU tensors without grad"))
    T = min(torch.get_num_threads(), MAX_WORKERS, sh.shape[0] // max(1, ROTATE_PARALLEL_MIN // 2))
    if T <= 1 or sh.shape[0] < ROTATE_PARALLEL_MIN or sh.requires_grad or R.requires_grad:
        return rotate_sh_serial(sh, R, chunk)  # (autograd: in-place writes from several threads are unsafe)
    degree = _rotation_degree(sh.shape[1])  # errors before any thread starts
    bounds = [sh.shape[0] * i // T for i in range(T + 1)]
    out = torch.empty(sh.shape, dtype=sh.dtype, device=sh.device)

    def part(_slot: int, i: int) -> None:
        a, b = bounds[i], bounds[i + 1]
        out[a:b, :1] = sh[a:b, :1]  # DC; bands 1..degree (all the other coefficients) are written below
        _rotate_bands(out[a:b], sh[a:b], R[a:b], chunk, degree)

    run_on_workers("sh", part, range(T), T)
    return out


def rotate_sh_serial(sh: torch.Tensor, R: torch.Tensor, chunk: int = 1 << 16) -> torch.Tensor:
    """:func:`rotate_sh` on the calling thread only (the reference of the parallel path). Same arguments and
    errors."""
    degree = _rotation_degree(sh.shape[1])
    out = sh.clone()
    _rotate_bands(out, sh, R, chunk, degree)
    return out


def _rotation_degree(num_coeffs: int) -> int:
    """SH degree of ``num_coeffs`` coefficients for :func:`rotate_sh`. Raises OptionError if it is not (d+1)^2,
    ValueError for degree 4."""
    degree = sh_degree_from_coeffs(num_coeffs)
    if degree > 3:
        raise ValueError(f"SH degree {degree} > 3 is not supported for rotation")
    return degree


def _rotate_bands(out: torch.Tensor, sh: torch.Tensor, R: torch.Tensor, chunk: int, degree: int) -> None:
    """Write bands 1..degree of sh (n, K+1, 3) rotated by R (n, 3, 3) into out (n, K+1, 3) in place, ``chunk``
    rows at a time (out's band 0 is left as it is)."""
    dd = torch.float64
    for l in range(1, degree + 1):
        lo, hi = l * l, (l + 1) * (l + 1)
        D = _probe_dirs(l, dd)  # [k, 3]
        Y0 = sh_basis(D, l)[:, lo:hi]  # [k, 2l+1]
        Y0inv = torch.linalg.inv(Y0)
        for s in range(0, sh.shape[0], chunk):
            Rc = R[s:s + chunk].to(dd)
            # rotated probe directions R^T d_k: [n, k, 3]
            Dr = torch.einsum("nba,kb->nka", Rc, D)
            Yr = sh_basis(Dr, l)[:, :, lo:hi]  # [n, k, 2l+1]
            M = Y0inv @ Yr  # [n, 2l+1, 2l+1]: c' = M c
            out[s:s + chunk, lo:hi] = (M @ sh[s:s + chunk, lo:hi].to(dd)).to(sh.dtype)
