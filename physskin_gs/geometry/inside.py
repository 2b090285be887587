"""Exact inside test for closed (or nearly closed) triangle meshes: the generalised winding number.

:func:`winding_number` is the plain, exact sum: the ground truth that scores the voxel interior fill (method.md 8.6)
and the reference of :func:`fast_winding_number`, the tree-accelerated approximation (libigl's, Barill et al. 2018)
that the tet mesher's voxel fill uses on meshes of any size.
w(p) = (1 / 4 pi) sum_f Omega_f(p), with the signed solid angle Omega_f of each triangle seen from p
(Van Oosterom and Strackee, 1983). w is 1 inside a closed, consistently oriented mesh, 0 outside, and
degrades gracefully (fractional) near holes. Overlapping closed parts add up (w >= 1 inside any of them).
Cost O(N F), evaluated in chunks; fine for N F up to ~1e8 on one core in a few seconds (a 157k-face mesh and the
~10^4 voxel centres of its fill took 200 s: use :func:`fast_winding_number` there).
"""

from __future__ import annotations

import numpy as np


def winding_number(vertices: np.ndarray, faces: np.ndarray, points: np.ndarray, chunk: int = 2_000_000) -> np.ndarray:
    """Generalised winding number of each query point.

    Args:
        vertices: (V, 3) float, faces: (F, 3) int (outward orientation gives +1 inside).
        points: (N, 3) float query points, same units.
        chunk: max number of (point, face) pairs evaluated at once (bounds memory).

    Returns:
        (N,) float64 winding numbers.
    """
    tri = np.asarray(vertices, dtype=np.float64)[np.asarray(faces, dtype=np.int64)]  # [F, 3, 3]
    pts = np.asarray(points, dtype=np.float64)
    n_faces = tri.shape[0]
    out = np.zeros(pts.shape[0], dtype=np.float64)
    step = max(1, chunk // max(n_faces, 1))
    for s in range(0, pts.shape[0], step):
        p = pts[s : s + step]  # [n, 3]
        a = tri[None, :, 0, :] - p[:, None, :]  # [n, F, 3]
        b = tri[None, :, 1, :] - p[:, None, :]
        c = tri[None, :, 2, :] - p[:, None, :]
        la, lb, lc = (np.linalg.norm(x, axis=2) for x in (a, b, c))  # [n, F]
        det = np.einsum("nfi,nfi->nf", a, np.cross(b, c))
        den = (
            la * lb * lc
            + np.einsum("nfi,nfi->nf", a, b) * lc
            + np.einsum("nfi,nfi->nf", b, c) * la
            + np.einsum("nfi,nfi->nf", c, a) * lb
        )
        out[s : s + step] = (2.0 * np.arctan2(det, den)).sum(axis=1) / (4.0 * np.pi)
    return out


def inside_mesh(vertices: np.ndarray, faces: np.ndarray, points: np.ndarray, threshold: float = 0.5) -> np.ndarray:
    """(N,) bool: winding number > ``threshold`` (0.5 for a closed, outward-oriented mesh)."""
    return winding_number(vertices, faces, points) > threshold


def fast_winding_number(vertices: np.ndarray, faces: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Generalised winding number of each query point by libigl's fast winding number (Barill et al. 2018,
    "Fast Winding Numbers for Soups and Clouds": exact near the query point, a second-order Taylor expansion of
    far triangle clusters of a BVH); about O((N + F) log F). Agrees with :func:`winding_number` to about 1e-2 (on
    a 79k-face armchair 4e-3 at 5000 points: none of them on the other side of 0.5), at about 1/1000 of its time.

    Args:
        vertices: (V, 3) float, faces: (F, 3) int (outward orientation gives +1 inside).
        points: (N, 3) float query points, same units.

    Returns:
        (N,) float64 winding numbers.
    """
    import igl

    pts = np.ascontiguousarray(np.asarray(points, dtype=np.float64).reshape(-1, 3))
    if pts.shape[0] == 0 or len(faces) == 0:
        return np.zeros(pts.shape[0], dtype=np.float64)
    v = np.ascontiguousarray(np.asarray(vertices, dtype=np.float64))
    f = np.ascontiguousarray(np.asarray(faces, dtype=np.int64))
    return np.asarray(igl.fast_winding_number(v, f, pts), dtype=np.float64)
