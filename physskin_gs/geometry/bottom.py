"""How far each interior sample sits above the object's own bottom surface, column by column.

The floor acts on a body's cubature points, which lie inside it; its surface (the Gaussians) reaches lower. A
single offset for the whole body (the gap under its lowest cubature point) is right only when the bottom layer of
cubature points lies at one height over a flat base: when some of them sit on the bottom face and the rest a
layer higher (a box whose cells are cut by its base), the floor carries the body on the few low ones, off its
centre of mass, and it leans; on a curved base (a ball, hooves) the points away from the lowest one reach the floor
too late. :func:`lifts_above_bottom` gives each low sample its own lift: its height above the lowest surface in its
own column (the surface points within a quarter of a sample spacing of it, across ``up``), so the floor acts on each
column where that column's surface meets it.

Pure numpy; no filesystem.
"""

from __future__ import annotations

from typing import Optional, Union

import numpy as np
import torch
from scipy.spatial import cKDTree

from physskin_gs.geometry.support import plane_axes

__all__ = ["lifts_above_bottom"]

ArrayLike = Union[np.ndarray, torch.Tensor]


def _np(a: ArrayLike) -> np.ndarray:
    return (a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)).astype(np.float64)


def lifts_above_bottom(samples: ArrayLike, surface: ArrayLike, up: ArrayLike, spacing: float,
                       layer: float = 1.5, quantile: float = 0.02, lowest: Optional[float] = None) -> np.ndarray:
    """Per-sample lift (K,) float64, in the samples' units: for the lowest sample of each column (no other sample
    within half a spacing across ``up`` lies more than a quarter spacing under it) within ``layer`` spacings of the
    surface, its height along ``up`` above the bottom of the surface under it in its column (negative for a sample
    below ``lowest``); 0 for the others.

    Args:
        samples: (K, 3) interior samples (cubature points).
        surface: (N, 3) points of the body's surface and volume (the Gaussian centres), same units.
        up: (3,) up direction (normalised here).
        spacing: the samples' spacing (> 0): a sample's column is the disc of radius ``spacing / 4`` around it
            across ``up`` (``spacing / 2`` where that holds no surface point), and a sample more than
            ``layer * spacing`` above its column's bottom is not in the lowest layer (lift 0: the floor acts on it
            only where it reaches the floor itself).
        quantile: the column's bottom is this quantile of its surface points' heights (robust to a stray row).
        lowest: optional height along ``up`` (the body's robust bottom, e.g. a low quantile of all its points) no
            column's bottom goes below: a few stray rows under one column cannot lift the body off the floor.

    A sample whose wider disc holds no surface point under it either gets 0. Raises ValueError for bad shapes, a
    zero ``up`` or a non-positive ``spacing``.
    """
    X, P, u = _np(samples), _np(surface), _np(up).reshape(-1)
    if X.ndim != 2 or X.shape[1] != 3 or P.ndim != 2 or P.shape[1] != 3 or u.shape != (3,):
        raise ValueError(f"lifts_above_bottom: samples (K, 3), surface (N, 3), up (3,); got {X.shape}, {P.shape}, "
                         f"{u.shape}")
    if not (np.isfinite(spacing) and spacing > 0) or not np.linalg.norm(u) > 0:
        raise ValueError(f"lifts_above_bottom: spacing must be > 0 and up non-zero (got {spacing}, {u})")
    u = u / np.linalg.norm(u)
    lift = np.zeros(X.shape[0])
    if X.shape[0] == 0 or P.shape[0] == 0:
        return lift
    A = plane_axes(u)
    tree = cKDTree(P @ A.T, balanced_tree=False, compact_nodes=False)  # the surface across up (a quick build)
    hp, hx = P @ u, X @ u
    # only the lowest sample of each column meets the floor through its lift: one with another sample under it
    # (within half a spacing across up, more than a quarter spacing lower) is carried by that one, and lifting it
    # too would hold the layer between them rigid against the floor
    flat = X @ A.T
    lowest_in_column = np.ones(X.shape[0], bool)
    for k, idx in enumerate(cKDTree(flat).query_ball_point(flat, 0.5 * float(spacing))):
        lowest_in_column[k] = not bool((hx[idx] < hx[k] - 0.25 * float(spacing)).any())
    found = np.zeros(X.shape[0], bool)
    for radius in (0.25 * spacing, 0.5 * spacing):  # the column: a disc of radius spacing / 4; spacing / 2 if empty
        todo = np.flatnonzero(~found & lowest_in_column)
        if todo.size == 0:
            break
        for k, idx in zip(todo, tree.query_ball_point(flat[todo], float(radius))):
            h = hp[idx]
            h = h[h <= hx[k]]  # the surface under the sample (a sparse shell's disc may hold only its top)
            if h.size == 0:
                continue
            found[k] = True
            bottom = float(np.quantile(h, quantile, method="lower"))
            gap = hx[k] - (bottom if lowest is None else max(bottom, float(lowest)))
            if gap <= layer * float(spacing):  # negative below ``lowest``: it meets the floor that far under it
                lift[k] = gap
    return lift
