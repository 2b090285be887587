"""Surface sampling and farthest point sampling (method.md 7.1 steps 2 and 4, 7.2 "Encoder input").

* :func:`sample_surface`: area-uniform points on a triangle mesh with their face normals, seeded
  (our own vectorised barycentric sampling, independent of trimesh's RNG).
* :func:`farthest_point_sampling`: greedy FPS, O(N k) time and O(N) memory, vectorised over N with numpy;
  :func:`farthest_point_sampling_reference` is the plain per-point version the tests hold it to.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional, Tuple, Union

import numpy as np
import torch

ArrayLike = Union[np.ndarray, torch.Tensor]


def triangle_areas_normals(vertices: np.ndarray, faces: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Areas (F,) float64 and unit normals (F, 3) float64 of triangles (zero vector for zero-area faces)."""
    v = np.asarray(vertices, dtype=np.float64)
    tri = v[np.asarray(faces, dtype=np.int64)]  # [F, 3, 3]
    cross = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])  # [F, 3]
    dbl = np.linalg.norm(cross, axis=1)  # [F] = 2 * area
    normals = np.divide(cross, dbl[:, None], out=np.zeros_like(cross), where=dbl[:, None] > 0)
    return dbl / 2.0, normals


def sample_surface(
    vertices: np.ndarray, faces: np.ndarray, n: int, seed: Optional[int] = 0, rng: Optional[np.random.Generator] = None
) -> Tuple[np.ndarray, np.ndarray]:
    """Area-uniform random points on a triangle mesh.

    A face is drawn with probability proportional to its area, then a uniform point in it from barycentric
    coordinates ``(1 - sqrt(r1), sqrt(r1) (1 - r2), sqrt(r1) r2)``.

    Args:
        vertices: (V, 3) float, any units. faces: (F, 3) int.
        n: number of samples.
        seed / rng: a numpy Generator, or a seed for a new one (deterministic for a given seed).

    Returns:
        points (n, 3) float32 in the vertices' units and normals (n, 3) float32, the unit normal of the face
        each point lies on (orientation as stored: right-hand rule on the face winding).

    Raises:
        ValueError: the mesh has zero total area.
    """
    pts, nrm, _, _ = sample_surface_faces(vertices, faces, n, seed=seed, rng=rng)
    return pts, nrm


def sample_surface_faces(
    vertices: np.ndarray, faces: np.ndarray, n: int, seed: Optional[int] = 0, rng: Optional[np.random.Generator] = None
) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`sample_surface` (the same points for the same seed) with where each point lies: returns points (n, 3)
    float32, normals (n, 3) float32, face (n,) int64 (the face index) and bary (n, 3) float64 (its barycentric
    coordinates on that face's corners, summing to 1). Raises ValueError for a mesh of zero total area."""
    rng = rng if rng is not None else np.random.default_rng(seed)
    areas, normals = triangle_areas_normals(vertices, faces)
    total = areas.sum()
    if not (total > 0 and np.isfinite(total)):
        raise ValueError("cannot sample a surface of zero (or non-finite) area")
    cdf = np.cumsum(areas) / total
    face = np.searchsorted(cdf, rng.random(n) * cdf[-1], side="right")  # [n]
    face = np.minimum(face, len(areas) - 1)
    r1 = np.sqrt(rng.random(n))[:, None]
    r2 = rng.random(n)[:, None]
    bary = np.concatenate([1.0 - r1, r1 * (1.0 - r2), r1 * r2], axis=1)  # [n, 3]
    tri = np.asarray(vertices, dtype=np.float64)[np.asarray(faces, dtype=np.int64)[face]]  # [n, 3, 3]
    pts = bary[:, 0:1] * tri[:, 0] + bary[:, 1:2] * tri[:, 1] + bary[:, 2:3] * tri[:, 2]
    return pts.astype(np.float32), normals[face].astype(np.float32), face.astype(np.int64), bary


def farthest_point_sampling(
    points: ArrayLike, k: int, seed: Optional[int] = 0, start: Optional[int] = None, dtype=np.float32
) -> np.ndarray:
    """Greedy farthest point sampling: indices of k well-spread points.

    Starts from ``start`` (or a random index drawn with ``seed``), then repeatedly adds the point with the
    largest squared distance to the chosen set (ties: lowest index). O(N k) time, O(N) memory, vectorised
    over N with single-threaded numpy on coordinate planes (torch's multi-threaded kernels were 2-60x slower
    on a loaded 2-core machine because of thread spin-waits). N = 113k, k = 2048: about 4 s on one busy core.

    Args:
        points: (N, 3) float array or tensor (finite).
        k: number of indices; if k >= N all N indices are returned in FPS order.
        seed: seed for the random first index when ``start`` is None.
        start: explicit first index.
        dtype: working precision (np.float64 matches :func:`farthest_point_sampling_reference` exactly).

    Returns:
        (min(k, N),) int64 numpy array of distinct indices into ``points``.
    """
    if isinstance(points, torch.Tensor):
        points = points.detach().cpu().numpy()
    pts = np.asarray(points, dtype=dtype)
    n = pts.shape[0]
    k = int(min(k, n))
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    if start is None:
        start = int(np.random.default_rng(seed).integers(n))
    x, y, z = (np.ascontiguousarray(pts[:, i]) for i in range(3))  # [N] each
    out = np.empty(k, dtype=np.int64)
    min_d = np.full(n, np.inf, dtype=dtype)  # [N] squared distance to the chosen set
    d = np.empty(n, dtype=dtype)
    tmp = np.empty(n, dtype=dtype)
    idx = int(start)
    for i in range(k):
        out[i] = idx
        np.subtract(x, x[idx], out=d)
        np.multiply(d, d, out=d)
        np.subtract(y, y[idx], out=tmp)
        np.multiply(tmp, tmp, out=tmp)
        d += tmp
        np.subtract(z, z[idx], out=tmp)
        np.multiply(tmp, tmp, out=tmp)
        d += tmp
        np.minimum(min_d, d, out=min_d)
        idx = int(min_d.argmax())
    return out


def farthest_point_sampling_reference(points: np.ndarray, k: int, start: int = 0) -> np.ndarray:
    """Plain reference FPS (one Python loop per chosen point and per candidate); for tests on small N.

    Same tie rule (lowest index) and float64 arithmetic as ``farthest_point_sampling(..., dtype=np.float64)``.
    """
    pts = np.asarray(points, dtype=np.float64)
    n = pts.shape[0]
    k = min(k, n)
    chosen = [int(start)]
    min_d = [float("inf")] * n
    for _ in range(k - 1):
        last = pts[chosen[-1]]
        best, best_i = -1.0, -1
        for j in range(n):
            dx, dy, dz = pts[j, 0] - last[0], pts[j, 1] - last[1], pts[j, 2] - last[2]
            dj = dx * dx + dy * dy + dz * dz
            if dj < min_d[j]:
                min_d[j] = dj
            if min_d[j] > best:
                best, best_i = min_d[j], j
        chosen.append(best_i)
    return np.asarray(chosen, dtype=np.int64)


class GridCells(NamedTuple):
    """Occupied cells of a cubic grid over a point set (:func:`grid_cells`).

    key: (V, 3) int64 cell indices of the points (>= 0); dims: (3,) int64 grid size in cells; cell: (V,) int64
    index of each point's occupied cell in [0, count), ordered like the flattened keys; count: number of
    occupied cells; size: cell edge (the points' length unit); origin: (3,) float64, so the centre of cell
    ``key`` is ``origin + (key + 0.5) * size``."""

    key: np.ndarray
    dims: np.ndarray
    cell: np.ndarray
    count: int
    size: float
    origin: np.ndarray


def grid_cells(points: np.ndarray, n: int, tol: float = 0.05, max_iter: int = 24) -> GridCells:
    """About ``n`` occupied cells of a cubic grid whose cell faces lie on the bounding box's three mid-planes.

    points: (V, 3) float64, finite, any length unit; n: target count (>= 1). The cell size is adjusted (a
    power-law step, then bisection on log size, at most ``max_iter`` tries of O(V log V) each) until the
    occupied-cell count is within ``tol`` of n; otherwise the closest try (the coarsest among equals) is kept:
    counts move in steps on coarse grids, and a 3-D set always fills at least the 8 cells around the box centre.
    With faces on the mid-planes, mirroring a point set about one of them maps cells onto cells,
    so rules that pick per cell in a mirror-invariant way (a centroid, the point nearest the cell centre) keep
    the point set's mirror symmetry; points exactly on a mid-plane are the exception (they fall on one side).
    Memory O(V). Deterministic. Returns :class:`GridCells`. Raises ValueError for an empty, non-(V, 3) or
    non-finite array."""
    pts = np.asarray(points, dtype=np.float64)
    if pts.ndim != 2 or pts.shape[1] != 3 or pts.shape[0] == 0:
        raise ValueError(f"grid_cells needs (V, 3) points with V >= 1, got {pts.shape}")
    if not np.isfinite(pts).all():
        raise ValueError("grid_cells needs finite points")
    lo, hi = pts.min(0), pts.max(0)
    centre = 0.5 * (lo + hi)
    span = float((hi - lo).max())
    target = max(1, int(n))
    if not span > 0:  # one position: one cell
        return GridCells(np.zeros_like(pts, dtype=np.int64), np.ones(3, np.int64), np.zeros(len(pts), np.int64), 1,
                         1.0, centre - 0.5)

    def attempt(size: float) -> GridCells:
        key = np.floor((pts - centre) / size).astype(np.int64)  # faces on the mid-planes
        kmin = key.min(0)
        key -= kmin
        dims = key.max(0) + 1
        if float(np.prod(dims.astype(np.float64))) < 2.0 ** 62:  # flattened keys keep the lexicographic order
            _, cell = np.unique((key[:, 0] * dims[1] + key[:, 1]) * dims[2] + key[:, 2], return_inverse=True)
        else:  # a huge sparse grid (far outliers): unique rows, the same order without int64 overflow
            _, cell = np.unique(key, axis=0, return_inverse=True)
        cell = cell.reshape(-1)
        return GridCells(key, dims, cell, int(cell.max()) + 1, size, centre + kmin * size)

    # first guess: the bounding box's volume split into n cells, but never finer than the longest side / n (a
    # flat or thin set has a tiny box volume)
    ext = np.maximum(hi - lo, 1e-9 * span)
    size = max(float(np.prod(ext) / target) ** (1.0 / 3.0), span / target)
    best, lo_s, hi_s = None, None, None  # lo_s: a size with too many cells, hi_s: one with too few
    for _ in range(max_iter):
        g = attempt(size)
        err = abs(math.log(g.count / target))
        best_err = math.inf if best is None else abs(math.log(best.count / target))
        if err < best_err or (err == best_err and g.size > best.size):  # ties: the coarsest
            best = g
        if abs(g.count - target) <= tol * target:
            break
        if g.count > target:
            lo_s = size
        else:
            hi_s = size
        if lo_s is not None and hi_s is not None:
            size = math.sqrt(lo_s * hi_s)  # bisection on log size
        else:  # occupancy scales like size^-d, d from 2 (a shell) to 3 (a volume)
            size *= (g.count / target) ** (1.0 / 2.5)
    return best


def cell_centroids(points: np.ndarray, cells: GridCells) -> Tuple[np.ndarray, np.ndarray]:
    """Per occupied cell of ``cells`` (from :func:`grid_cells` on the same points): the number of points (C,)
    float64 and their centroid (C, 3) float64, in the points' units. points: (V, 3) float64."""
    cnt = np.bincount(cells.cell, minlength=cells.count).astype(np.float64)
    sums = np.stack([np.bincount(cells.cell, weights=points[:, a], minlength=cells.count) for a in range(3)], 1)
    return cnt, sums / cnt[:, None]
