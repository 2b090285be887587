"""Turning (deformed) Gaussians into what viser's client-side splat renderer takes, plus picking.

viser stores each splat in 32 bytes: float32 centre, the covariance upper triangle in **float16**, RGBA uint8
(rendering.md section 3). float16 loses small variances (1e-7 has a 19% error, below about 6e-8 it is zero),
and trained scenes go far below that. We therefore send the scene scaled up by ``s`` (centres times ``s``,
covariances times ``s^2``) and give the splat node ``scale = 1/s``: the client applies the node's world matrix,
scale included, to both the centre and the covariance, so what it draws is the original scene. ``s`` is chosen
so that the scene's extent becomes :data:`DISPLAY_EXTENT`; covariance entries are then clipped to the float16
range.

Everything here is numpy, no viser import.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

#: Extent (robust bounding-box diagonal) the scene is scaled to on the wire.
DISPLAY_EXTENT = 100.0
#: Largest covariance entry kept (float16 max is 65504).
F16_COV_MAX = 6.0e4
#: Degree-0 SH basis value 1 / (2 sqrt(pi)).
SH_C0 = 0.28209479177387814


def robust_extent(means: np.ndarray, lo: float = 1.0, hi: float = 99.0) -> float:
    """Diagonal of the ``lo``..``hi`` percentile bounding box of ``means`` (N, 3); 1.0 for empty/degenerate input."""
    means = np.asarray(means, dtype=np.float64)
    if means.shape[0] == 0:
        return 1.0
    finite = means[np.all(np.isfinite(means), axis=1)]
    if finite.shape[0] == 0:
        return 1.0
    a, b = np.percentile(finite, [lo, hi], axis=0)
    ext = float(np.linalg.norm(b - a))
    if not np.isfinite(ext) or ext <= 1e-12:
        ext = float(np.abs(finite).max()) * 2 or 1.0
    return ext


def display_scale(extent: float) -> float:
    """Wire scale factor ``s`` so that a scene of ``extent`` scene units spans :data:`DISPLAY_EXTENT` on the wire."""
    return DISPLAY_EXTENT / max(float(extent), 1e-12)


def _sanitize_wire(centres: np.ndarray, covars: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """In place: clip float32 wire covariances (N, 3, 3) to +-:data:`F16_COV_MAX` and zero non-finite entries
    of them and of the centres (N, 3). Returns the same two arrays."""
    np.clip(covars, -F16_COV_MAX, F16_COV_MAX, out=covars)
    if not np.isfinite(centres).all():
        np.nan_to_num(centres, copy=False, nan=0.0, posinf=0.0, neginf=0.0)
    if not np.isfinite(covars).all():
        np.nan_to_num(covars, copy=False, nan=0.0, posinf=0.0, neginf=0.0)
    return centres, covars


def to_wire(means: np.ndarray, covars: np.ndarray, s: float) -> Tuple[np.ndarray, np.ndarray]:
    """Scale centres (N, 3) by ``s`` and covariances (N, 3, 3) by ``s^2`` and clip them to the float16 range.

    Returns float32 arrays (N, 3) and (N, 3, 3). Non-finite entries become 0 (an invisible, degenerate splat
    rather than a NaN that would poison the client's sort).
    """
    c = np.asarray(means, dtype=np.float32) * np.float32(s)
    v = np.asarray(covars, dtype=np.float32) * np.float32(s * s)
    return _sanitize_wire(c, v)


def rest_wire(scene, rows: Optional[np.ndarray], s: float, chunk: int = 262_144) -> Tuple[np.ndarray, np.ndarray]:
    """Wire centres and covariances (as :func:`to_wire`) of some rows of a GaussianScene at rest.

    The covariances ``R diag(exp(log_scales))^2 R^T`` are computed chunk by chunk straight into the output, so
    a million rows need no full-scene (N, 3, 3) temporaries (the rest scene is what the static part of a live
    scene and the preview shown during preparation draw; nothing here deforms).

    Args:
        scene: a GaussianScene (``means`` (N, 3), ``quats`` (N, 4) wxyz, ``log_scales`` (N, 3), torch).
        rows: (R,) int64 row indices, or None for every row.
        s: wire scale (:func:`display_scale`).
        chunk: rows per chunk (bounds the temporaries to about ``chunk * 100`` bytes).
    Returns:
        (R, 3) float32 centres times ``s`` and (R, 3, 3) float32 covariances times ``s^2``, clipped to
        +-:data:`F16_COV_MAX`; non-finite entries are 0.
    """
    import torch

    from physskin_gs.scene import quat_to_rotmat

    n = int(scene.means.shape[0])
    idx = None if rows is None else torch.as_tensor(np.asarray(rows, dtype=np.int64))
    r = n if idx is None else int(idx.numel())
    centres = np.empty((r, 3), np.float32)
    covars = np.empty((r, 3, 3), np.float32)
    s32, s2 = np.float32(s), np.float32(s * s)
    with torch.no_grad():
        for a in range(0, r, chunk):
            b = min(a + chunk, r)
            sel = slice(a, b) if idx is None else idx[a:b]
            m = scene.means[sel].detach().float()
            L = quat_to_rotmat(scene.quats[sel].detach().float()) * torch.exp(scene.log_scales[sel].detach().float())[:, None, :]
            c = torch.bmm(L, L.transpose(1, 2))  # [B, 3, 3] = R S^2 R^T, as GaussianScene.covariances()
            np.multiply(m.numpy(), s32, out=centres[a:b])
            np.multiply(c.numpy(), s2, out=covars[a:b])
    return _sanitize_wire(centres, covars)


#: Flat indices of the covariance upper triangle (xx, xy, xz, yy, yz, zz) in a row-major 3x3.
TRIU = np.array([0, 1, 2, 4, 5, 8])


def unit_bytes(values: np.ndarray) -> np.ndarray:
    """Values in [0, 1] (any shape) -> uint8 ``clip(float32(v) * 255, 0, 255)``, truncated: the colour and alpha
    bytes of the splat records."""
    return np.clip(np.asarray(values, np.float32) * 255.0, 0, 255).astype(np.uint8)


def rgba_u32(rgbs: np.ndarray, opacities: np.ndarray) -> np.ndarray:
    """(N, 3) colours and (N,) or (N, 1) opacities in [0, 1] -> (N,) uint32 RGBA words (R in the low byte)."""
    n = rgbs.shape[0]
    rgba = np.empty((n, 4), np.uint8)
    rgba[:, :3] = unit_bytes(rgbs)
    rgba[:, 3] = unit_bytes(np.asarray(opacities).reshape(n))
    return rgba.view(np.uint32).reshape(n)


def pack_splat_buffer(means: np.ndarray, covars: np.ndarray, s: float, rgba: np.ndarray) -> np.ndarray:
    """viser's 32-byte splat records for one frame, built in one pass (the fast path of ``set_gaussians``).

    Args:
        means: (N, 3) centres, world units.
        covars: (N, 3, 3) covariances, world units squared.
        s: wire scale (:func:`display_scale`): centres times ``s``, covariances times ``s^2``, clipped to the
            float16 range; non-finite values become 0.
        rgba: (N,) uint32 from :func:`rgba_u32` (constant across frames, so computed once).
    Returns:
        (N, 8) uint32: float32 centre xyz, a zero word, the covariance upper triangle as 6 float16, RGBA.
        Equal to what ``GaussianSplatHandle.set_gaussians(*to_wire(...), rgbs, opacities)`` stores.
    """
    n = means.shape[0]
    buf = np.empty((n, 8), np.uint32)
    c = np.asarray(means, np.float32) * np.float32(s)  # [N, 3]
    tri = np.asarray(covars, np.float32).reshape(n, 9)[:, TRIU]  # [N, 6] (a copy)
    tri *= np.float32(s * s)
    np.clip(tri, -F16_COV_MAX, F16_COV_MAX, out=tri)
    if not (np.isfinite(c).all() and np.isfinite(tri).all()):
        c = np.nan_to_num(c, nan=0.0, posinf=0.0, neginf=0.0)
        tri = np.nan_to_num(tri, nan=0.0, posinf=0.0, neginf=0.0)
    buf[:, 0:3] = c.view(np.uint32)
    buf[:, 3] = 0
    buf[:, 4:7] = np.ascontiguousarray(tri, dtype=np.float16).view(np.uint32)
    buf[:, 7] = rgba
    return buf


class SplatPacker:
    """Fast per-frame version of :func:`pack_splat_buffer`, in torch, into one preallocated buffer.

    The RGBA word and the zero padding word are written once (:meth:`set_rgba`); each :meth:`pack` writes only
    the centres and the covariance upper triangle, with a few fused torch kernels (the float32 -> float16
    conversion is vectorised), so that 100k Gaussians pack in a few milliseconds on one core instead of about
    20 ms for the numpy path. The result is bit-identical to :func:`pack_splat_buffer` (tested).

    The returned array is a view of the packer's buffer, overwritten by the next :meth:`pack`: hand it to
    viser right away (``handle.buffer = ...`` copies it) and pack from one thread at a time.

    Args:
        n: number of Gaussians (rows).
        rgba: optional (n,) uint32 from :func:`rgba_u32`.
    """

    def __init__(self, n: int, rgba: Optional[np.ndarray] = None) -> None:
        import torch

        self.n = int(n)
        self._buf = torch.zeros(self.n, 8, dtype=torch.int32)  # [N, 8] words; column 3 stays 0
        self._f32 = self._buf.view(torch.float32)  # [N, 8]: words 0..2 are the centre
        self._f16 = self._buf.view(torch.float16)  # [N, 16]: halves 8..13 are the covariance triangle
        self._c = torch.empty(self.n, 3, dtype=torch.float32)  # scratch, scaled centres
        self._tri = torch.empty(self.n, 6, dtype=torch.float32)  # scratch, scaled covariance triangle
        self._triu = torch.as_tensor(TRIU, dtype=torch.int64)
        self._np = self._buf.numpy().view(np.uint32)  # [N, 8] uint32 view, no copy
        if rgba is not None:
            self.set_rgba(rgba)

    def set_rgba(self, rgba: np.ndarray) -> None:
        """Store the (n,) uint32 RGBA words (:func:`rgba_u32`) sent with every following frame."""
        rgba = np.asarray(rgba, dtype=np.uint32).reshape(-1)
        if rgba.shape[0] != self.n:
            raise ValueError(f"rgba has {rgba.shape[0]} rows, the packer {self.n}")
        self._np[:, 7] = rgba

    def rgba_view(self) -> np.ndarray:
        """(n, 1) uint32 view of the RGBA column of the packer's buffer (write colour words into it in place)."""
        return self._np[:, 7:]

    def pack(self, means, covars, s: float) -> np.ndarray:
        """Pack one frame.

        Args:
            means: (n, 3) float32 torch tensor (or array), centres in world units (any device; moved to the CPU).
            covars: (n, 3, 3) float32 torch tensor (or array), covariances in world units squared.
            s: wire scale (:func:`display_scale`); centres times ``s``, covariances times ``s^2`` clipped to
                +-:data:`F16_COV_MAX`; non-finite values become 0.
        Returns:
            (n, 8) uint32 view of the packer's buffer (valid until the next call), equal to
            ``pack_splat_buffer(means, covars, s, rgba)``.
        """
        import torch

        m = torch.as_tensor(means)
        c = torch.as_tensor(covars)
        if m.device.type != "cpu":
            m, c = m.cpu(), c.cpu()
        if m.shape != (self.n, 3) or c.shape != (self.n, 3, 3):
            raise ValueError(f"expected means ({self.n}, 3) and covars ({self.n}, 3, 3), got "
                             f"{tuple(m.shape)} and {tuple(c.shape)}")
        s32 = float(np.float32(s))
        s2 = float(np.float32(s * s))  # as the reference: float32(s * s)
        torch.mul(m.to(torch.float32), s32, out=self._c)  # [N, 3]
        torch.nan_to_num_(self._c, nan=0.0, posinf=0.0, neginf=0.0)
        self._f32[:, 0:3].copy_(self._c)
        torch.index_select(c.to(torch.float32).reshape(self.n, 9), 1, self._triu, out=self._tri)  # [N, 6]
        self._tri.mul_(s2).clamp_(-F16_COV_MAX, F16_COV_MAX)  # +-inf -> +-max as np.clip; NaN stays NaN
        torch.nan_to_num_(self._tri, nan=0.0, posinf=0.0, neginf=0.0)
        self._f16[:, 8:14].copy_(self._tri)  # float32 -> float16, round to nearest even like numpy
        return self._np


def sh_dc_to_rgb(sh_dc: np.ndarray) -> np.ndarray:
    """(N, 3) degree-0 SH coefficients -> (N, 3) float32 base colour ``clamp(0.5 + C0 * dc, 0, 1)``."""
    return np.clip(0.5 + SH_C0 * np.asarray(sh_dc, dtype=np.float32), 0.0, 1.0)


def subsample_index(n: int, max_count: Optional[int], seed: int = 0) -> Optional[np.ndarray]:
    """A fixed random subset of ``max_count`` of ``n`` rows (sorted int64), or None when everything fits."""
    if max_count is None or max_count <= 0 or n <= max_count:
        return None
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(n, size=int(max_count), replace=False)).astype(np.int64)


def pick_on_ray(points: np.ndarray, origin, direction, extent: float, radii=(0.005, 0.01, 0.03)) -> Optional[Pick]:
    """:func:`pick_point` with the search radius widened in turn: ``radii`` x ``extent`` (scene units), the first
    that hits wins (a fine radius first, so the point picked is near the ray). None when none hits."""
    for r in radii:
        pick = pick_point(points, origin, direction, radius=r * extent)
        if pick is not None:
            return pick
    return None


# ------------------------------------------------------------------------------------------- colour maps
_VIRIDIS = np.array(
    [
        [0.267, 0.005, 0.329],
        [0.283, 0.141, 0.458],
        [0.254, 0.265, 0.530],
        [0.207, 0.372, 0.553],
        [0.164, 0.471, 0.558],
        [0.128, 0.567, 0.551],
        [0.135, 0.659, 0.518],
        [0.267, 0.749, 0.441],
        [0.478, 0.821, 0.318],
        [0.741, 0.873, 0.150],
        [0.993, 0.906, 0.144],
    ],
    dtype=np.float32,
)

#: Distinct colours for argmax handle colouring (cycled).
PALETTE = np.array(
    [
        [0.90, 0.10, 0.10], [0.10, 0.45, 0.90], [0.15, 0.75, 0.20], [0.95, 0.60, 0.05],
        [0.60, 0.20, 0.80], [0.05, 0.80, 0.80], [0.95, 0.30, 0.65], [0.55, 0.40, 0.20],
        [0.50, 0.50, 0.50], [0.75, 0.85, 0.10], [0.10, 0.20, 0.50], [1.00, 0.85, 0.70],
    ],
    dtype=np.float32,
)


def colormap(values: np.ndarray) -> np.ndarray:
    """Viridis-like colour map: values (N,) in [0, 1] (clipped) -> (N, 3) float32 RGB, piecewise linear."""
    v = np.clip(np.nan_to_num(np.asarray(values, dtype=np.float32)), 0.0, 1.0) * (len(_VIRIDIS) - 1)
    i0 = np.floor(v).astype(np.int64)
    i1 = np.minimum(i0 + 1, len(_VIRIDIS) - 1)
    f = (v - i0)[:, None]
    return (_VIRIDIS[i0] * (1 - f) + _VIRIDIS[i1] * f).astype(np.float32)


def weight_colors(weights: np.ndarray, handle: Optional[int]) -> np.ndarray:
    """Colour Gaussians by skinning weights.

    Args:
        weights: (M, H) skinning weights of the moving Gaussians.
        handle: show handle ``handle``'s weight through :func:`colormap` (scaled by that column's max), or
            None for all handles: the argmax handle's palette colour, darkened where the max weight is low.
    Returns:
        (M, 3) float32 RGB in [0, 1].
    """
    w = np.asarray(weights, dtype=np.float32)
    if handle is not None:
        col = w[:, handle]
        top = float(col.max()) if col.size else 1.0
        return colormap(col / (top if top > 1e-12 else 1.0))
    idx = np.argmax(w, axis=1)
    wmax = w[np.arange(w.shape[0]), idx]
    shade = 0.35 + 0.65 * np.clip(wmax, 0.0, 1.0)
    return (PALETTE[idx % len(PALETTE)] * shade[:, None]).astype(np.float32)


# ------------------------------------------------------------------------------------------- picking
@dataclass(frozen=True)
class Pick:
    """Result of :func:`pick_point`: the row index into the searched points, its position, and ray depth."""

    index: int
    point: np.ndarray
    depth: float


def pick_point(
    points: np.ndarray,
    origin,
    direction,
    radius: float,
    slab: Optional[float] = None,
) -> Optional[Pick]:
    """The point nearest the camera among those within ``radius`` of a ray (the object's first surface).

    Args:
        points: (M, 3) candidate positions (the object's current Gaussian centres), world units.
        origin, direction: the ray (3,), world units; ``direction`` need not be normalised.
        radius: how far from the ray a point may be, world units (e.g. 1% of the scene extent).
        slab: among hits, keep those within ``slab`` of the nearest hit's depth and return the one closest to the
            ray (the "surface" under the cursor rather than a stray front splat); defaults to ``4 * radius``.
    Returns:
        A :class:`Pick`, or None when no point lies within ``radius`` of the ray in front of the camera.
    """
    p = np.asarray(points, dtype=np.float64)
    o = np.asarray(origin, dtype=np.float64)
    d = np.asarray(direction, dtype=np.float64)
    n = np.linalg.norm(d)
    if p.shape[0] == 0 or not np.isfinite(n) or n < 1e-12:
        return None
    d = d / n
    rel = p - o  # [M, 3]
    t = rel @ d  # [M] depth along the ray
    perp = np.linalg.norm(rel - t[:, None] * d, axis=1)  # [M] distance to the ray
    hit = (t > 0) & (perp <= radius)
    if not np.any(hit):
        return None
    idx = np.nonzero(hit)[0]
    t_front = t[idx].min()
    slab = 4.0 * radius if slab is None else slab
    near = idx[t[idx] <= t_front + slab]
    best = int(near[np.argmin(perp[near])])
    return Pick(index=best, point=p[best].copy(), depth=float(t[best]))
