"""A finite support: where the floor plane of :class:`~physskin_gs.physics.simulator.SubspaceSimulator` exists
(issue 24: a toy pushed off a table falls past the table's edge).

The support is the plane ``up . x = h`` (the simulator's ``floor_height``) restricted to a 2-D occupancy mask in
that plane: cells of edge ``cell`` (metres) on in-plane axes ``e1, e2`` from ``origin``. A point is held by the
support when its projection falls in an occupied cell **and** it is no deeper than ``depth`` below the plane
(deeper points are under the table top, not in it: they are not pushed up through it). Every other point meets the
optional ``ground`` plane below (the bottom of the capture), or nothing. The per-point floor height this gives
enters the simulator's floor penalty, its gradient, its Gauss-Newton Hessian and the floor friction unchanged
(the simulator's docstring), so a point leaving the mask's edge simply stops being supported.

Pure math: numpy (torch for the reference energy's autograd).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from physskin_gs.errors import OptionError

__all__ = ["FloorRegion", "floor_region_from_points"]


@dataclass
class FloorRegion:
    """Where the floor exists (module docstring).

    Attributes:
        origin: (3,) float64 point of the plane's cell (0, 0) corner (metres, simulation frame).
        e1, e2: (3,) float64 orthonormal in-plane axes (perpendicular to up).
        cell: cell edge (metres, > 0).
        mask: (A, B) bool occupancy; cell (a, b) covers ``origin + [a, a+1) cell e1 + [b, b+1) cell e2``.
        depth: points more than this (metres) below the support are under it.
        ground: height along up (metres) of an unbounded ground plane below, or None.
    """

    origin: np.ndarray
    e1: np.ndarray
    e2: np.ndarray
    cell: float
    mask: np.ndarray
    depth: float
    ground: Optional[float] = None

    def __post_init__(self) -> None:
        self.origin = np.asarray(self.origin, np.float64).reshape(3)
        self.e1 = np.asarray(self.e1, np.float64).reshape(3)
        self.e2 = np.asarray(self.e2, np.float64).reshape(3)
        self.mask = np.asarray(self.mask, bool)
        if self.mask.ndim != 2 or not self.mask.any():
            raise OptionError("a floor region needs a non-empty 2-D mask")
        if not (self.cell > 0 and np.isfinite(self.cell) and self.depth > 0 and np.isfinite(self.depth)):
            raise OptionError(f"floor region: cell and depth must be positive, got {self.cell}, {self.depth}")
        if self.ground is not None and not np.isfinite(self.ground):
            raise OptionError("floor region: the ground height must be finite")

    def inside(self, x: np.ndarray) -> np.ndarray:
        """(n,) bool: whether the projections of the points ``x`` (3, n) (metres) fall in an occupied cell."""
        rel = np.asarray(x, np.float64).T - self.origin  # [n, 3]
        a = np.floor(rel @ self.e1 / self.cell).astype(np.int64)
        b = np.floor(rel @ self.e2 / self.cell).astype(np.int64)
        A, B = self.mask.shape
        ok = (a >= 0) & (a < A) & (b >= 0) & (b < B)
        out = np.zeros(a.shape[0], bool)
        out[ok] = self.mask[a[ok], b[ok]]
        return out

    def heights(self, x: np.ndarray, up: np.ndarray, support: float) -> np.ndarray:
        """(n,) float64 floor height along ``up`` for each point ``x`` (3, n): ``support`` where the support holds
        it (inside the mask, not deeper than ``depth`` below), else the ground's height, else -inf (nothing)."""
        u = np.asarray(up, np.float64) @ np.asarray(x, np.float64)  # [n]
        held = self.inside(x) & (u >= support - self.depth)
        below = -np.inf if self.ground is None else float(self.ground)
        return np.where(held, float(support), below)

    def heights_torch(self, x: torch.Tensor, up: torch.Tensor, support: float) -> torch.Tensor:
        """:meth:`heights` of points ``x`` (n, 3) float64 tensor (torch ops only, so it runs inside torch.func
        transforms; the result carries no gradient: membership is piecewise constant)."""
        o = torch.as_tensor(self.origin, dtype=x.dtype)
        rel = x - o
        a = torch.floor(rel @ torch.as_tensor(self.e1, dtype=x.dtype) / self.cell).long()
        b = torch.floor(rel @ torch.as_tensor(self.e2, dtype=x.dtype) / self.cell).long()
        A, B = self.mask.shape
        ok = (a >= 0) & (a < A) & (b >= 0) & (b < B)
        m = torch.as_tensor(self.mask)
        inside = m[a.clamp(0, A - 1), b.clamp(0, B - 1)] & ok
        held = inside & ((x @ up.to(x.dtype)) >= support - self.depth)
        below = -math.inf if self.ground is None else float(self.ground)
        return torch.where(held, torch.full_like(a, 0, dtype=x.dtype) + float(support),
                           torch.full_like(a, 0, dtype=x.dtype) + below).detach()


def floor_region_from_points(points: np.ndarray, up: np.ndarray, cell: float, depth: float,
                             ground: Optional[float] = None, close: int = 2) -> FloorRegion:
    """The :class:`FloorRegion` covered by ``points`` (M, 3) metres (the support's rows and the footprints of what
    stands on it): their projections binned into cells of edge ``cell``, closed by ``close`` cells and with holes
    filled (the support under an object is not seen by the cameras; scipy.ndimage).
    Raises OptionError for no points or a non-positive cell."""
    from scipy import ndimage

    p = np.asarray(points, np.float64).reshape(-1, 3)
    p = p[np.isfinite(p).all(1)]
    if p.shape[0] == 0:
        raise OptionError("a floor region needs at least one point")
    if not (cell > 0 and np.isfinite(cell)):
        raise OptionError(f"floor region cell must be positive, got {cell}")
    up = np.asarray(up, np.float64)
    up = up / np.linalg.norm(up)
    a = np.array([1.0, 0.0, 0.0]) if abs(up[0]) < 0.9 else np.array([0.0, 1.0, 0.0])
    e1 = a - (a @ up) * up
    e1 /= np.linalg.norm(e1)
    e2 = np.cross(up, e1)
    uv = np.stack([p @ e1, p @ e2], 1)  # [M, 2]
    pad = close + 1
    lo = uv.min(0) - pad * cell
    ij = np.floor((uv - lo) / cell).astype(np.int64)
    shape = tuple(ij.max(0) + 1 + pad)
    mask = np.zeros(shape, bool)
    mask[ij[:, 0], ij[:, 1]] = True
    if close > 0:
        mask = ndimage.binary_closing(mask, structure=np.ones((3, 3), bool), iterations=close)
    mask = ndimage.binary_fill_holes(mask)
    origin = lo[0] * e1 + lo[1] * e2
    return FloorRegion(origin=origin, e1=e1, e2=e2, cell=float(cell), mask=mask, depth=float(depth), ground=ground)
