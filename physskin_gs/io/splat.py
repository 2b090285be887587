"""antimatter15 ``.splat`` reader (formats.md section 2).

A headerless array of 32-byte little-endian records: position float32 x3, *linear* scale float32 x3,
RGBA uint8 (``rgb = (0.5 + C0 f_dc) 255``, ``A = sigmoid(opacity) 255``), quaternion uint8 wxyz
(``q/|q| 128 + 128``). There is no SH beyond DC.
"""

from __future__ import annotations

import os

import numpy as np
import torch

from physskin_gs.errors import OptionError, SceneFormatError
from physskin_gs.io.ply_header import warn
from physskin_gs.scene import C0, GaussianScene

#: the log-scale of a zero scale in a .splat record: a Gaussian that thin (e^-30 scene units) is flat
FLAT_LOG_SCALE = -30.0
#: One .splat record.
SPLAT_DTYPE = np.dtype([("pos", "<f4", (3,)), ("scale", "<f4", (3,)), ("rgba", "u1", (4,)), ("rot", "u1", (4,))])
assert SPLAT_DTYPE.itemsize == 32

#: Opacities are clamped to [EPS, 1 - EPS] before the logit (A = 0 and A = 255 occur in real files).
ALPHA_EPS = 1.0 / 512.0


def decode_splat_records(rec: np.ndarray, quat_order: str = "wxyz"):
    """Decode (N,) :data:`SPLAT_DTYPE` records to raw INRIA arrays.

    Returns:
        means (N, 3), log_scales (N, 3), quats (N, 4) unit wxyz, opacity_logits (N,), sh_dc (N, 3); float32.
        A zero scale (a flat, 2D splat; or a log-scale under about -103 written out by a converter) gives
        :data:`FLAT_LOG_SCALE`; negative or non-finite scales give NaN log-scales (reported by
        :func:`physskin_gs.io.validate`).
    """
    means = np.ascontiguousarray(rec["pos"], dtype=np.float32)
    s = rec["scale"].astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_scales = np.log(s).astype(np.float32)
    log_scales[s == 0] = FLAT_LOG_SCALE  # (-inf made such rows invalid: invisible and static)
    rgba = rec["rgba"].astype(np.float32) / 255.0  # [N, 4]
    sh_dc = ((rgba[:, :3] - 0.5) / C0).astype(np.float32)
    a = np.clip(rgba[:, 3], ALPHA_EPS, 1.0 - ALPHA_EPS)
    opac = np.log(a / (1.0 - a)).astype(np.float32)
    q = (rec["rot"].astype(np.float32) - 128.0) / 128.0  # [N, 4]
    if quat_order == "xyzw":
        q = q[:, [3, 0, 1, 2]]
    norm = np.linalg.norm(q, axis=1, keepdims=True)
    ident = np.array([1.0, 0.0, 0.0, 0.0], dtype=np.float32)
    q = np.where(norm > 1e-8, q / np.maximum(norm, 1e-8), ident).astype(np.float32)
    return means, log_scales, q, opac, sh_dc


def load_splat(path: str, quat_order: str = "wxyz") -> GaussianScene:
    """Load an antimatter15 ``.splat`` file.

    Args:
        path: file path.
        quat_order: byte order of the quaternion in each record, ``"wxyz"`` (default, antimatter15) or ``"xyzw"``.

    Returns:
        GaussianScene (sh_rest of shape (N, 0, 3)); quats are unit wxyz, a zero quaternion becomes the identity.

    Raises:
        SceneFormatError: empty file or a size that is not a multiple of 32 bytes.
        OptionError: unknown ``quat_order``.
    """
    if quat_order not in ("wxyz", "xyzw"):
        raise OptionError(f"quat_order must be 'wxyz' or 'xyzw', got {quat_order!r}")
    size = os.path.getsize(path)
    if size == 0:
        raise SceneFormatError(f"{path}: empty file (0 bytes)")
    if size % SPLAT_DTYPE.itemsize:
        raise SceneFormatError(
            f"{path}: not a valid .splat file: size {size} bytes is not a multiple of the 32-byte record "
            f"(truncated? {size % 32} stray bytes)"
        )
    rec = np.fromfile(path, dtype=SPLAT_DTYPE)
    means, log_scales, q, opac, sh_dc = decode_splat_records(rec, quat_order)
    bad = int((~np.isfinite(log_scales)).any(axis=1).sum())
    if bad:
        warn(f"{path}: {bad} records have negative or non-finite scales")
    n = len(rec)
    return GaussianScene(
        means=torch.from_numpy(means),
        quats=torch.from_numpy(q),
        log_scales=torch.from_numpy(log_scales),
        opacity_logits=torch.from_numpy(opac),
        sh_dc=torch.from_numpy(sh_dc),
        sh_rest=torch.zeros((n, 0, 3), dtype=torch.float32),
        source=os.path.abspath(path),
        format="splat",
    )
