"""Normalisation of point sets to the learning frame (method.md 7.2).

The learning frame is centred on the bounding-box centre and divided by half the largest extent, so the
longest axis spans exactly [-1, 1] and the others lie inside it. Non-finite rows are dropped first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple, Union

import numpy as np
import torch

from physskin_gs.errors import PhysSkinError

ArrayLike = Union[np.ndarray, torch.Tensor]

#: An axis whose extent is below this fraction of the largest extent counts as flat (zero thickness).
FLAT_TOLERANCE = 1e-6


class DegenerateGeometryError(PhysSkinError, ValueError):
    """A point set or mesh cannot be normalised or filled: empty, a single point, or flat (zero thickness)."""


@dataclass(frozen=True)
class Normalization:
    """Similarity map between world (scene) units and the normalised learning frame.

    ``x_norm = (x_world - center) / scale`` and ``x_world = x_norm * scale + center``.

    Attributes:
        center: (3,) float64, the bounding-box centre in world units.
        scale: float, half the largest bounding-box extent in world units (> 0).
    """

    center: np.ndarray
    scale: float

    def to_normalized(self, points: ArrayLike) -> ArrayLike:
        """(..., 3) world-unit points -> (..., 3) normalised points (same type and dtype as the input)."""
        if isinstance(points, torch.Tensor):
            c = torch.as_tensor(self.center, dtype=points.dtype, device=points.device)
            return (points - c) / self.scale
        pts = np.asarray(points)
        return ((pts - self.center) / self.scale).astype(pts.dtype if pts.dtype.kind == "f" else np.float64)

    def to_world(self, points: ArrayLike) -> ArrayLike:
        """(..., 3) normalised points -> (..., 3) world-unit points (same type and dtype as the input)."""
        if isinstance(points, torch.Tensor):
            c = torch.as_tensor(self.center, dtype=points.dtype, device=points.device)
            return points * self.scale + c
        pts = np.asarray(points)
        return (pts * self.scale + self.center).astype(pts.dtype if pts.dtype.kind == "f" else np.float64)

    def to_dict(self) -> dict:
        return {"center": [float(v) for v in self.center], "scale": float(self.scale)}

    @classmethod
    def from_dict(cls, d: dict) -> "Normalization":
        return cls(center=np.asarray(d["center"], dtype=np.float64), scale=float(d["scale"]))


def finite_rows(points: ArrayLike) -> np.ndarray:
    """(N,) bool mask of the rows of an (N, 3) array or tensor whose coordinates are all finite.

    Arrays are checked column by column (numpy's reduction over the short last axis is several times slower at 1M
    rows)."""
    if isinstance(points, torch.Tensor):
        return torch.isfinite(points).all(dim=-1).cpu().numpy()
    p = np.asarray(points)
    ok = np.isfinite(p[..., 0])
    for a in range(1, p.shape[-1]):
        ok &= np.isfinite(p[..., a])
    return ok


def compute_normalization(points: ArrayLike, *, allow_flat: bool = False, what: str = "point set") -> Normalization:
    """The :class:`Normalization` of an (N, 3) point set (method.md 7.2), ignoring non-finite rows.

    Args:
        points: (N, 3) float array or tensor, world units.
        allow_flat: if False (the default, and required for volume sampling), reject sets whose extent along
            some axis is below ``FLAT_TOLERANCE`` times the largest extent (e.g. ``c3d_alligator.obj``).
        what: a name for the data, used in error messages (e.g. the file name).

    Raises:
        DegenerateGeometryError: no finite rows, all points identical, or flat while ``allow_flat`` is False.
    """
    pts = points.detach().cpu().numpy() if isinstance(points, torch.Tensor) else np.asarray(points)
    if pts.ndim != 2 or pts.shape[1] != 3:
        raise DegenerateGeometryError(f"{what}: expected an (N, 3) array of points, got shape {pts.shape}")
    if pts.dtype.kind != "f":
        pts = pts.astype(np.float64)
    ok = finite_rows(pts)
    if not ok.all():
        pts = pts[ok]
    if pts.shape[0] == 0:
        raise DegenerateGeometryError(f"{what}: no finite points to normalise")
    lo, hi = pts.min(axis=0).astype(np.float64), pts.max(axis=0).astype(np.float64)
    extent = hi - lo  # [3]
    largest = float(extent.max())
    if not largest > 0.0:
        raise DegenerateGeometryError(f"{what}: all {pts.shape[0]} finite points coincide (zero extent)")
    flat = extent < FLAT_TOLERANCE * largest
    if flat.any() and not allow_flat:
        axes = ", ".join("xyz"[i] for i in np.nonzero(flat)[0])
        raise DegenerateGeometryError(
            f"{what}: degenerate (flat) shape, zero extent along {axes} "
            f"(bbox extents {np.array2string(extent, precision=4)}); a volume cannot be sampled from it"
        )
    return Normalization(center=(lo + hi) / 2.0, scale=largest / 2.0)


def normalize_points(
    points: ArrayLike, *, allow_flat: bool = False, what: str = "point set"
) -> Tuple[ArrayLike, Normalization]:
    """Drop non-finite rows, centre on the bbox centre and divide by half the largest extent (method.md 7.2).

    Args:
        points: (N, 3) float np.ndarray or torch.Tensor, world units.
        allow_flat: accept zero-thickness sets (see :func:`compute_normalization`).
        what: name used in error messages.

    Returns:
        (normalised, norm): normalised is (M, 3), M = number of finite rows, same type as the input
        (float32 numpy for non-float numpy input), with max |coord| = 1 along the longest axis;
        norm is the :class:`Normalization` (world -> normalised).

    Raises:
        DegenerateGeometryError: see :func:`compute_normalization`.
    """
    norm = compute_normalization(points, allow_flat=allow_flat, what=what)
    if isinstance(points, torch.Tensor):
        keep = torch.as_tensor(finite_rows(points), device=points.device)
        return norm.to_normalized(points[keep]), norm
    pts = np.asarray(points)
    if pts.dtype.kind != "f":
        pts = pts.astype(np.float32)
    return norm.to_normalized(pts[finite_rows(pts)]), norm
