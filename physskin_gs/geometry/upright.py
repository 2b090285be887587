"""Which way is up for an object without a support: the axis it stands on most stably.

A capture whose support was cropped away (a pot cut free of its table, a figure cut at its boots) or a synthetic
object without a floor keeps one piece of evidence of its up axis: it was captured standing. An object at rest
stands on a base, its lowest layer, and its centre of mass lies over that base. For each of the six directions
of the file's axes taken as up (±x, ±y, ±z), :func:`stable_base_up` takes the base (the points within
``base_layer`` of the object's height above its lowest point, robust quantiles) and measures how far the centre of
mass, projected along the direction, lies inside the convex hull of the base, relative to the size of the
object's whole projected outline (the *stability margin*; negative outside). A chair on its four legs, a pot on its
foot, a figure on its two soles, a donut on its flat side have a wide base under their centre of mass; the same
objects on an edge or a rounded end have a point-like or one-sided base.

The direction with the largest margin is the answer when it is *clear*: its margin at least ``min_margin`` and
``min_lead`` above the runner-up's. Otherwise (a ball, a cube, an object that lies as stably as it stands) there
is no evidence and the caller keeps the file's convention and says it is unsure. The limit of the rule is an object
that rests more stably in another pose than the one it was captured in: a table with a flat top stands more
stably on its top (margin 0.5 for a 2 x 2 top) than on four legs at +-0.85 (0.425), so a table with no floor
comes out upside down; the caller marks an answer that contradicts the file's convention as unsure.

The six candidates are the file's axes, not arbitrary directions: the evidence picks which of them is up (the
usual doubt between +z for Blender / NeRF-synthetic exports and -y for COLMAP frames); it does not level a
tilted capture (a support plane does that).

Pure numpy/scipy on a subsample; scene units; called by
:func:`physskin_gs.geometry.scene_analysis.analyze_scene` when no support is found.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional

import numpy as np
from scipy.spatial import ConvexHull, QhullError

from physskin_gs.geometry.support import plane_axes

__all__ = ["AXES", "StableBase", "stability_margin", "stable_base_up"]

#: The six candidate up directions, by name.
AXES: Dict[str, np.ndarray] = {
    "+x": np.array([1.0, 0.0, 0.0]), "-x": np.array([-1.0, 0.0, 0.0]),
    "+y": np.array([0.0, 1.0, 0.0]), "-y": np.array([0.0, -1.0, 0.0]),
    "+z": np.array([0.0, 0.0, 1.0]), "-z": np.array([0.0, 0.0, -1.0]),
}


@dataclass(frozen=True)
class StableBase:
    """Result of :func:`stable_base_up`.

    Attributes:
        up: (3,) float64 unit vector of the chosen axis, or None when the evidence is not clear.
        axis: its name ("+z", ...), or "" when not clear.
        margins: axis name -> stability margin (dimensionless; > 0: the centre of mass is over the base).
        reason: one sentence with the best two margins.
        thinness: the object's extent along ``up`` over its largest extent across it (1-99 % quantiles of the
            points; 1.0 when ``up`` is None). Below :data:`FLAT_SLAB` it is a thin slab lying on its face, which
            may be meant to stand on an edge (a relief, a sign, a picture): the analysis is then unsure.
    """

    up: Optional[np.ndarray]
    axis: str
    margins: Dict[str, float]
    reason: str
    thinness: float = 1.0


#: A base axis along which the object is thinner than this fraction of its width across makes it a slab lying on
#: its face (the corpus: a photo relief 0.041, taken lying flat though its picture stands, and a hovering robot's
#: flat ground plate 0.035; every other object without a support 0.3 or more)
FLAT_SLAB = 0.1


def _thinness(x: np.ndarray, up: np.ndarray) -> float:
    """Extent of ``x`` (M, 3) along unit ``up`` over its largest extent along the two file axes across it (1-99 %
    quantiles); 1.0 for a degenerate width."""
    across = [a for a in AXES.values() if abs(float(a @ up)) < 0.5 and float(a.sum()) > 0]
    ext = lambda v: float(np.subtract(*np.quantile(x @ v, [0.99, 0.01])))  # noqa: E731
    width = max(ext(a) for a in across)
    return ext(up) / width if width > 0 else 1.0


def stability_margin(points: np.ndarray, weights: np.ndarray, up: np.ndarray, base_layer: float = 0.02,
                     tail: float = 0.002) -> float:
    """Stability margin of an object standing along ``up``: signed distance of the centre of mass's projection
    inside the convex hull of its base (the points within ``base_layer`` x height above the ``tail`` quantile of
    the heights), divided by the square root of the area of the hull of all points' projections (so a
    dimensionless number; about 0.3-0.4 for a chair on its legs, negative when the centre of mass is outside).

    ``points``: (M, 3) float, scene units; ``weights``: (M,) non-negative (opacities); ``up``: (3,) unit vector.
    Returns -1.0 when the base or the outline is degenerate (fewer than 3 points or collinear). Reference version:
    plain numpy and Qhull, no fast path.
    """
    h = points @ up  # [M] heights
    lo, hi = np.quantile(h, [tail, 1.0 - tail])
    base = (h >= lo) & (h <= lo + base_layer * max(hi - lo, 1e-30))
    B = plane_axes(up)
    p2 = points @ B.T  # [M, 2]
    com = B @ ((weights[:, None] * points).sum(0) / max(float(weights.sum()), 1e-30))  # [2]
    try:
        outline = ConvexHull(p2).volume  # (the area, for a 2-D hull)
        eq = ConvexHull(p2[base]).equations  # [F, 3], unit normals, <= 0 inside
    except (QhullError, ValueError):
        return -1.0
    return float(-np.max(eq[:, :2] @ com + eq[:, 2]) / np.sqrt(max(outline, 1e-300)))


def stable_base_up(points: np.ndarray, weights: np.ndarray, *, max_points: int = 40_000, min_margin: float = 0.1,
                   min_lead: float = 0.05, seed: int = 0) -> StableBase:
    """The axis of the file (±x, ±y, ±z) the object stands on most stably (module docstring).

    Args:
        points: (M, 3) float positions of the object (scene units; the opaque, non-floater rows).
        weights: (M,) non-negative weights (opacities).
        max_points: subsample size.
        min_margin, min_lead: the best margin must be at least ``min_margin`` and exceed the runner-up's by
            ``min_lead`` to be clear.
        seed: subsampling seed.

    Returns:
        A :class:`StableBase` (``up`` None when the evidence is not clear or the object has fewer than 16 points).
    """
    x = np.asarray(points, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    if x.shape[0] > max_points:
        idx = np.random.default_rng(seed).choice(x.shape[0], size=max_points, replace=False)
        x, w = x[idx], w[idx]
    if x.shape[0] < 16:
        return StableBase(None, "", {}, f"only {x.shape[0]} points: no base to judge")
    margins = {name: stability_margin(x, w, u) for name, u in AXES.items()}
    ranked = sorted(margins, key=lambda k: -margins[k])
    best, second = ranked[0], ranked[1]
    mb, ms = margins[best], margins[second]
    facts = f"stability margin {mb:+.2f} standing on {best}'s base, next {ms:+.2f} on {second}'s"
    if mb >= min_margin and mb - ms >= min_lead:
        return StableBase(AXES[best].copy(), best, margins, f"it stands most stably with {best} up ({facts})",
                          _thinness(x, AXES[best]))
    return StableBase(None, "", margins, f"no axis it clearly stands on ({facts})")
