"""Surface sampling and farthest point sampling (method.md 7.1 steps 2 and 4, 7.2 "Encoder input").

* :func:`sample_surface`: area-uniform points on a triangle mesh with their face normals, seeded
  (our own vectorised barycentric sampling, independent of trimesh's RNG).
* :func:`farthest_point_sampling`: greedy FPS, O(N k) time and O(N) memory, vectorised over N with torch;
  :func:`farthest_point_sampling_reference` is the plain per-point version the tests hold it to.
"""

from __future__ import annotations

from typing import Optional, Tuple, Union

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
    tri = np.asarray(vertices, dtype=np.float64)[np.asarray(faces, dtype=np.int64)[face]]  # [n, 3, 3]
    pts = (1.0 - r1) * tri[:, 0] + r1 * (1.0 - r2) * tri[:, 1] + r1 * r2 * tri[:, 2]
    return pts.astype(np.float32), normals[face].astype(np.float32)


def farthest_point_sampling(
    points: ArrayLike, k: int, seed: Optional[int] = 0, start: Optional[int] = None, dtype: torch.dtype = torch.float32
) -> np.ndarray:
    """Greedy farthest point sampling: indices of k well-spread points.

    Starts from ``start`` (or a random index drawn with ``seed``), then repeatedly adds the point with the
    largest squared distance to the chosen set (ties: lowest index). O(N k) time, O(N) memory: N = 100k,
    k = 2048 takes well under a second on one core.

    Args:
        points: (N, 3) float array or tensor (finite).
        k: number of indices; if k >= N all N indices are returned in FPS order.
        seed: seed for the random first index when ``start`` is None.
        start: explicit first index.
        dtype: working precision (float64 to match :func:`farthest_point_sampling_reference` bit for bit).

    Returns:
        (min(k, N),) int64 numpy array of distinct indices into ``points``.
    """
    pts = torch.as_tensor(np.asarray(points) if not isinstance(points, torch.Tensor) else points)
    pts = pts.detach().to("cpu", dtype)
    n = pts.shape[0]
    k = int(min(k, n))
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    if start is None:
        start = int(np.random.default_rng(seed).integers(n))
    x, y, z = pts.T.contiguous()  # [N] each: coordinate planes are faster than [N, 3] rows
    out = torch.empty(k, dtype=torch.int64)
    min_d = torch.full((n,), float("inf"), dtype=dtype)  # [N] squared distance to the chosen set
    d = torch.empty(n, dtype=dtype)
    tmp = torch.empty(n, dtype=dtype)
    idx = int(start)
    for i in range(k):
        out[i] = idx
        torch.sub(x, x[idx], out=d)
        d.mul_(d)
        torch.sub(y, y[idx], out=tmp)
        d.addcmul_(tmp, tmp)
        torch.sub(z, z[idx], out=tmp)
        d.addcmul_(tmp, tmp)
        torch.minimum(min_d, d, out=min_d)
        idx = int(torch.argmax(min_d))
    return out.numpy()


def farthest_point_sampling_reference(points: np.ndarray, k: int, start: int = 0) -> np.ndarray:
    """Plain reference FPS (one Python loop per chosen point and per candidate); for tests on small N.

    Same tie rule (lowest index) and float64 arithmetic as ``farthest_point_sampling(..., dtype=torch.float64)``.
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
