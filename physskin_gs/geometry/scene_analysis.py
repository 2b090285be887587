"""Scene analysis of a real Gaussian-splat capture: valid rows, floaters, robust extent, support plane, up axis
and the object to animate.

A real capture is rarely just the object: it holds NaN rows, near-transparent Gaussians, floaters (small
clusters far from anything), a support (floor disc, table top) and, often, no known up axis (it may have been
rotated arbitrarily). :func:`analyze_scene` sorts every row into exactly one of

``invalid`` (non-finite mean or opacity) > ``transparent`` (opacity < threshold) > ``floater`` > ``support``
> ``object`` > ``background``

and reports the up axis, derived from the support plane when one is found and from a caller-given prior
otherwise.

Method (all stages vectorised; statistics and plane fitting on bounded random subsamples, the final
classification of all rows O(N)):

1. *Rows*: ``valid`` = finite mean and opacity; ``opaque`` = valid and opacity >= ``opacity_threshold``.
2. *First extent*: opacity-weighted 1-99 % quantiles per axis of (a subsample of) the opaque points.
3. *Floaters*: an occupancy grid (cubic voxels, about ``grid_resolution`` cells along the longest axis,
   coarser for small N) over that extent padded by ``grid_pad`` per side. Voxels holding at least
   ``min_voxel_count`` opaque points are labelled into 26-connected components (``scipy.ndimage.label``).
   The component with the largest opacity mass is the main one; components with less than
   ``min_cluster_fraction`` of the opaque mass, or farther than ``far_fraction`` times the extent from the
   main one, are floaters, and so are points outside the grid and opaque points in sparser voxels that
   do not touch (26-neighbourhood) a kept component.
4. *Robust extent*: opacity-weighted quantiles of the opaque non-floater points.
5. *Support plane* (:func:`physskin_gs.geometry.support.find_support`): distinct well-populated planes of a
   subsample (PCA normals of random seed points, ranked by inliers times one-sidedness, refined by least squares,
   and the densest thin layers across each coordinate axis), each examined in both orientations. A plane is a
   support when something *stands* on it: a connected part above its slab that touches it, ends there (does not
   continue below, as a wall or a leg does), is stable (its centre of mass over the contact the plane's points
   carry) and is not a sheet of the plane itself; the plane must reach beyond the footprint of what stands on it
   (the flat base of an isolated object does not), be at least as wide as that footprint (a face of the object is
   not), be a surface rather than a cut through a body, and carry at least as much mass as lies on its other side
   under it (and a tenth of the capture). Of the accepted planes the nearest (not the floor under a supported table)
   that carries the most, weighted by its share of the capture, wins; the file's up-axis convention breaks near
   ties, a rival with another normal makes the analysis *unsure* (then the convention is used), and a support that
   reaches less than 15 % beyond what stands on it is trusted only when it agrees with the convention (one that
   turns the capture upside down against it is used, unsure). Its normal, oriented toward what stands on it, is the
   up axis. *Without a support* (an object cut free of its table, a synthetic object) the up axis is the axis of the
   file the object stands on most stably (:mod:`physskin_gs.geometry.upright`: its centre of mass over the widest
   base), when that evidence is clear; else the file's convention (``format_prior_up``). Either way the analysis is
   *unsure* unless the evidence and the convention agree.
6. *Object*: opaque non-floater points more than ``object_clearance`` (times the extent) above the plane
   (all of them when no plane is found) are voxelised again; the 26-connected component holding the heaviest
   part that stands on the support (without a support: the one with the largest opacity mass) is the object.
   Rows between the support's own surface (the 90 % quantile of its inliers' distances, times 1.5, within the
   band) and the clearance that lie in or next to an object voxel join the
   object (feet and hooves standing in the slab), so lifting the object leaves none of it on the floor. Where
   the object's rows touch a part the support test found touching the plane without standing on it (a wall
   behind the object, a wall beside a cut-off table, a table leg), the object's rows are voxelised again at the
   standing test's finer voxel and the 26-connected parts holding more of such a part than of what stands are
   left static. A wall so close that even those voxels join it to the object is found by its foot: the object's
   contact points over something that continues below the support, lying along a line past the standing
   contact's hull; the object's rows are then shared geodesically between the wall and what stands, and the
   wall's share is left static. Last, the object's base inside the support's own slab (a ball's lowest cap, a
   crate's lowest edge, feet in a noisy or tilted top) is told from the support by how it looks, when colours
   (and quats) are given: rows under the object's footprint whose colour (or colour and flat normal) is the
   object's, learned from this capture's own rows on each side, and only when the two are separable there
   (:func:`_claim_base`).
   Everything else valid, opaque and not a floater is ``background`` (static), except the plane's inliers,
   which are ``support``.

*Small scenes*: with fewer than ``small_scene_rows`` (:data:`SMALL_SCENE_ROWS`) opaque rows there is no crowd for
a floater to stand out from and no surface for the voxels to connect (a 9-Gaussian file, an LOD tile with a
dozen opaque rows): steps 3 and 6 keep every opaque row, so nothing is a floater and every opaque row off the
support is the object (a plane needs at least 32 points, so such a scene has none).

Coordinates are scene units throughout; nothing here reads files or assumes a coordinate convention except
:data:`DEFAULT_UP`, used only when no plane is found and no prior is given.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple, Union

import numpy as np
import torch
from scipy import ndimage
from scipy.spatial import ConvexHull, QhullError

from physskin_gs.geometry.normalize import DegenerateGeometryError, finite_rows
from physskin_gs.scene import quat_to_rotmat

ArrayLike = Union[np.ndarray, torch.Tensor]

#: Up axis used when no support plane is found and the caller gives no ``format_prior_up``: -y, the
#: convention of COLMAP / OpenCV-camera captures (most real 3DGS captures). Blender/NeRF-synthetic scenes
#: are +z up; pass ``format_prior_up`` for them.
DEFAULT_UP = np.array([0.0, -1.0, 0.0])

#: At most this many far heavy components are listed in :attr:`SceneAnalysis.far_parts`.
FAR_PARTS_LISTED = 3

#: Scenes with fewer opaque rows than this are small (module docstring): no floaters, every opaque row is object.
SMALL_SCENE_ROWS = 100
#: another part standing on the support is an object (``other_bodies``) when it holds at least this fraction of the
#: main object's opacity mass; lighter parts (crumbs, a fork's tip) stay with the static scene
OTHER_OBJECT_MASS = 0.25

#: 3x3x3 structuring element: 26-connectivity for the occupancy-grid components.
_FULL_3D = np.ones((3, 3, 3), dtype=bool)


# ----------------------------------------------------------------------------------------------- results
@dataclass(frozen=True)
class SupportPlane:
    """The plane the object stands on.

    Attributes:
        normal: (3,) float64 unit vector, oriented toward the object's mass (this is the up axis).
        offset: d in scene units, the plane is ``{x : normal . x = d}``.
        band: half-thickness of the inlier slab, scene units (rows with ``|normal . x - d| <= band`` are
            inliers).
        inliers: number of rows classified ``support`` (all rows, not the subsample).
        inlier_fraction: inlier fraction in the plane-fitting subsample.
        minority_fraction: fraction of the off-plane subsample points on the side away from the object.
        width_ratio: area of the support's projected hull / area of the object's projected footprint hull.
        coverage: fraction of the object's footprint inside the support's hull.
        confidence: heuristic in [0, 1] (1 = wide, well populated, object entirely on one side).
    """

    normal: np.ndarray
    offset: float
    band: float
    inliers: int
    inlier_fraction: float
    minority_fraction: float
    width_ratio: float
    coverage: float
    confidence: float

    def signed_distance(self, points: np.ndarray) -> np.ndarray:
        """(M,) signed distances ``normal . x - offset`` of (M, 3) points, scene units (> 0: object side)."""
        return np.asarray(points, dtype=np.float64) @ self.normal - self.offset


@dataclass
class SceneAnalysis:
    """Result of :func:`analyze_scene`. Masks are (N,) bool over the input rows and mutually exclusive;
    each valid row is in exactly one of transparent / floater / support / object / background.

    Attributes:
        up: (3,) float64 unit up vector in scene coordinates.
        up_source: ``"support-plane"``, ``"stable-base"`` (no support; the file axis the object stands on most
            stably, :mod:`physskin_gs.geometry.upright`), ``"format-prior"`` or ``"default"`` (:data:`DEFAULT_UP`);
            ``"given"`` when :func:`physskin_gs.pipeline.analyze_for_animation` was given the up (``--up``) and no
            support near it carries the object.
        reason: one sentence saying how ``up`` was chosen (and why a plane was rejected, if so).
        plane: the :class:`SupportPlane`, or None when none was accepted.
        center: (3,) float64, centre of the robust extent (scene units).
        size: (3,) float64, per-axis size of the robust extent (scene units; quantile range, not min/max).
        lo, hi: (3,) float64, the robust extent's quantile corners.
        scale: float, ``max(size)``; the unit of every relative tolerance.
        invalid: rows with a non-finite mean (or opacity).
        transparent: valid rows with opacity below the threshold.
        floater: opaque rows in small or far clusters, in isolated sparse voxels, or outside the padded grid.
        support: opaque non-floater rows in the support plane's slab, less the base an object claimed out of it.
        object: the object: largest connected component above the support, with the floaters in the voxels next
            to its own, within :data:`HAZE_VOXELS` voxels without a support (its haze: static, they would hang in the
            air where it had been).
        background: the remaining valid opaque rows (static: below the plane, other clusters, the thin
            layer between slab and object).
        transparent_in_object: transparent rows that fall in the object's voxels or the voxels next to them (not
            part of ``object``; callers that move the object may want to move these with it).
        voxel_size: edge of the cubic occupancy voxels, scene units.
        grid_shape: (3,) cells of the occupancy grid.
        timings: stage name -> seconds.
        unsure: whether the up axis may be wrong (no support and no agreeing evidence, or a rival plane).
        other_objects: how many other parts stand on the support apart from the object, each with at least
            :data:`OTHER_OBJECT_MASS` of its opacity mass and a connected component of its own (``len(other_bodies)``).
        other_bodies: their rows, one ``(object rows, transparent rows in it)`` pair of int64 arrays each, heaviest
            standing part first; disjoint from ``object`` and counted in ``background`` (a caller animating one
            object leaves them static; :func:`physskin_gs.bodies.prepare_bodies` moves them all).
    """

    up: np.ndarray
    up_source: str
    reason: str
    plane: Optional[SupportPlane]
    center: np.ndarray
    size: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    scale: float
    invalid: np.ndarray
    transparent: np.ndarray
    floater: np.ndarray
    support: np.ndarray
    object: np.ndarray
    background: np.ndarray
    transparent_in_object: np.ndarray
    voxel_size: float
    grid_shape: Tuple[int, int, int]
    timings: Dict[str, float] = field(default_factory=dict)
    unsure: bool = False  # no support found, or a rival plane: the up axis may be wrong (say so, name --up)
    other_objects: int = 0  # other objects standing on the support (at least a quarter of the object's mass)
    #: rows of each other object: (object rows, transparent rows in it) int64 arrays, disjoint from ``object``
    other_bodies: List[Tuple[np.ndarray, np.ndarray]] = field(default_factory=list)
    #: no support found: the share of the sampled points in the best-populated plane that was turned down (it moves
    #: with the object: a table under a photo frame, the ground under a hovering robot, when it holds much of them)
    flat_part: float = 0.0
    #: components heavy enough to be objects (at least ``min_cluster_fraction`` of the opaque mass) but left as
    #: floaters for their distance from the main one, heaviest first (at most :data:`FAR_PARTS_LISTED`): (their
    #: opacity mass over the main component's, lo (3,), hi (3,) scene units) (a second object beside the first)
    far_parts: List[Tuple[float, np.ndarray, np.ndarray]] = field(default_factory=list)
    #: with a support: connected parts over the support's captured extent that do not stand on it (nothing of them
    #: within the clearance above it), at least :data:`OTHER_OBJECT_MASS` of the object's opacity mass, heaviest
    #: first (at most :data:`FAR_PARTS_LISTED`): (mass over the object's, lo (3,), hi (3,) scene units). They stay
    #: static (background): an object held above another in a drop set-up, a lamp hanging over a table
    hovering_parts: List[Tuple[float, np.ndarray, np.ndarray]] = field(default_factory=list)
    #: the file's axes ("-z", "+x", ...) the object stands on (stability margin > 0, most stable first) other than
    #: the up used, when the stable-base test ran: what an unsure analysis offers in place of its up
    up_candidates: List[str] = field(default_factory=list)

    @property
    def num_rows(self) -> int:
        """N, the number of input rows."""
        return int(self.invalid.shape[0])

    @property
    def counts(self) -> Dict[str, int]:
        """Row count per class (``invalid``, ``transparent``, ``floater``, ``support``, ``object``,
        ``background``) plus ``total``."""
        out = {
            k: int(getattr(self, k).sum())
            for k in ("invalid", "transparent", "floater", "support", "object", "background")
        }
        out["total"] = self.num_rows
        return out

    @property
    def static(self) -> np.ndarray:
        """(N,) bool, rows that stay put: support and background."""
        return self.support | self.background

    def summary(self) -> str:
        """One line: up vector with its reason, the plane, and the moving / static / floater counts."""
        c = self.counts
        up = "[" + ", ".join(f"{v:+.3f}" for v in self.up) + "]"
        if self.plane is not None:
            p = self.plane
            pl = (
                f"plane n.x={p.offset:+.4g} ({p.inliers} inliers, width x{p.width_ratio:.2f}, "
                f"conf {p.confidence:.2f})"
            )
        else:
            pl = "no support plane"
        return (
            f"up {up} ({self.up_source}: {self.reason}); {pl}; moving {c['object']}, "
            f"static {c['support'] + c['background']} (support {c['support']}), floaters {c['floater']}, "
            f"transparent {c['transparent']}, invalid {c['invalid']} of {c['total']}"
        )


# ----------------------------------------------------------------------------------------------- helpers
def _to_numpy(a: ArrayLike, dtype) -> np.ndarray:
    if isinstance(a, torch.Tensor):
        a = a.detach().cpu().numpy()
    return np.asarray(a, dtype=dtype)


def _unit(v, what: str) -> np.ndarray:
    v = np.asarray(v, dtype=np.float64).reshape(-1)
    n = float(np.linalg.norm(v)) if v.shape == (3,) else 0.0
    if not np.isfinite(n) or n == 0.0:
        raise ValueError(f"{what} must be a finite non-zero 3-vector, got {v!r}")
    return v / n


def weighted_quantiles(values: np.ndarray, weights: np.ndarray, qs) -> np.ndarray:
    """Weighted quantiles of each column.

    Args:
        values: (M, D) float array.
        weights: (M,) non-negative weights (total > 0).
        qs: sequence of Q quantiles in [0, 1].

    Returns:
        (Q, D) float64, in the units of ``values``; the midpoint rule, so equal weights give the midpoint
        (Hazen) quantiles. Nothing is validated: M must be >= 1 (IndexError otherwise) and the total weight
        > 0 (a zero total gives meaningless values and a RuntimeWarning).
    """
    values = np.asarray(values, dtype=np.float64)
    vs, ws, _ = _sort_columns(values, weights)
    return _sorted_quantiles(vs, ws, qs)


def _sort_columns(values: np.ndarray, weights: np.ndarray):
    """Each column of (M, D) ``values`` sorted, with its weights and order: (values (D, M) float64, weights
    (D, M) float64, orders (D, M) intp with ``values[orders[j], j]`` ascending)."""
    w = np.asarray(weights, dtype=np.float64)
    vs = np.empty((values.shape[1], values.shape[0]))
    ws = np.empty_like(vs)
    orders = np.empty(vs.shape, dtype=np.intp)
    for j in range(values.shape[1]):
        col = np.ascontiguousarray(values[:, j])  # a contiguous column sorts ~5x faster than a strided one
        order = np.argsort(col)  # [M] (deterministic; the order among exactly equal values is immaterial up to
        # the weights of the tied rows)
        vs[j] = col[order]
        ws[j] = w[order]
        orders[j] = order
    return vs, ws, orders


def _sorted_quantiles(vs: np.ndarray, ws: np.ndarray, qs) -> np.ndarray:
    """(Q, D) weighted midpoint-rule quantiles from sorted columns (:func:`_sort_columns`' output)."""
    qs = np.asarray(qs, dtype=np.float64)
    out = np.empty((qs.shape[0], vs.shape[0]))
    for j in range(vs.shape[0]):
        cw = np.cumsum(ws[j])
        pos = (cw - 0.5 * ws[j]) / cw[-1]  # [M] quantile of each sorted value
        out[:, j] = np.interp(qs, pos, vs[j])
    return out


def _subsample(idx: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """At most ``k`` of the indices ``idx``, sorted (all of them when there are few)."""
    if idx.shape[0] <= k:
        return idx
    return np.sort(idx[rng.choice(idx.shape[0], size=k, replace=False)])


class _Grid:
    """Cubic-voxel occupancy grid over an axis-aligned box (lo corner, voxel edge h, shape dims)."""

    def __init__(self, lo: np.ndarray, hi: np.ndarray, resolution: int):
        span = np.maximum(hi - lo, 1e-12)
        self.h = float(span.max()) / resolution
        self.dims = np.maximum(np.ceil(span / self.h).astype(np.int64), 1)  # [3]
        self.lo = lo.astype(np.float64)

    @property
    def shape(self) -> Tuple[int, int, int]:
        return tuple(int(v) for v in self.dims)

    def flat_index(self, pts: np.ndarray) -> np.ndarray:
        """(M,) int64 flat voxel index of (M, 3) points, -1 outside the grid."""
        flat = np.zeros(pts.shape[0], dtype=np.int64)  # [M]
        inside = np.ones(pts.shape[0], dtype=bool)  # [M]
        for a in range(3):  # column by column: reductions over a length-3 axis are slow in numpy
            u = pts[:, a].astype(np.float64)  # [M] (in place below: the same values, fewer temporaries)
            u -= self.lo[a]
            u /= self.h
            np.floor(u, out=u)
            inside &= u >= 0
            inside &= u < self.dims[a]
            if a:
                flat *= self.dims[a]
            flat += u.astype(np.int64)
        flat[~inside] = -1
        return flat


def _components(grid: _Grid, flat: np.ndarray, mass: np.ndarray, min_count: int):
    """Label voxels holding >= ``min_count`` points (flat index >= 0) into 26-connected components.

    Returns (labels (X, Y, Z) int32 with 0 = empty, component masses (K+1,) with index 0 unused, number K).
    """
    nvox = int(np.prod(grid.dims))
    inside = flat >= 0
    counts = np.bincount(flat[inside], minlength=nvox)
    vmass = np.bincount(flat[inside], weights=mass[inside], minlength=nvox)
    occ = (counts >= min_count).reshape(grid.shape)
    labels, k = ndimage.label(occ, structure=_FULL_3D)
    cmass = np.bincount(labels.ravel(), weights=vmass, minlength=k + 1)  # [K+1]
    cmass[0] = 0.0
    return labels, cmass, k


def _least_gaps(labels: np.ndarray, main: int, comps: np.ndarray) -> np.ndarray:
    """(len(comps),) float64 least distance, in voxels between centres, from each component in ``comps`` to the
    component ``main`` of ``labels`` (X, Y, Z); the same as the minimum of the Euclidean distance transform to
    ``main`` over each component's voxels (a k-d tree over ``main``'s voxels, queried only by the components
    asked for: the transform of the whole grid cost 50-75 ms of a 1M-row analysis)."""
    from scipy.spatial import cKDTree

    flat = labels.ravel()
    tree = cKDTree(np.stack(np.unravel_index(np.flatnonzero(flat == main), labels.shape), 1))  # [M, 3]
    out = np.empty(comps.shape[0])
    for i, c in enumerate(comps):
        ijk = np.stack(np.unravel_index(np.flatnonzero(flat == c), labels.shape), 1)  # [V_c, 3]
        out[i] = float(tree.query(ijk, k=1)[0].min())
    return out


def _margin_along(base, up: np.ndarray, min_cos: float) -> float:
    """The stability margin of ``base`` (a :class:`physskin_gs.geometry.upright.StableBase`) for the file axis
    closest to ``up`` (3,) unit; -1.0 when no file axis has a cosine above ``min_cos`` with it."""
    from physskin_gs.geometry.upright import AXES

    name = max(AXES, key=lambda k: float(AXES[k] @ up))
    return float(base.margins.get(name, -1.0)) if float(AXES[name] @ up) > min_cos else -1.0


# ----------------------------------------------------------------------------------------------- analysis
#: voxels (of the analysis grid, about 1/40 of the scene) around an object with no support within which floaters
#: are its own haze and move with it (:func:`analyze_scene`; transparent rows, and beside a support: one voxel)
HAZE_VOXELS = 3
#: ... and at most this fraction of the scene's size (a sparse capture's voxels are coarse: a 1000-row fragment's
#: are a tenth of it)
HAZE_REACH = 0.1
#: the base claim (:func:`_claim_base`): the support's examples lie in this many cells (of the standing test's
#: voxel) around the object's footprint; neighbours voted on, and how many of them must be the object's for a claim;
#: the chain tolerance, in the object's row spacing at its base; least leave-one-out accuracy of each set of examples
#: for the claim to be made; most examples per set; weight of the flat-normal cue against the colour's (a unit of
#: which spans black to white)
BASE_RING_CELLS = 3
BASE_VOTES = 7
BASE_CLAIM_VOTES = 6
BASE_GAP = 4.0
BASE_SEPARABLE = 0.9
BASE_EXAMPLES = 1500
BASE_NORMAL_WEIGHT = 0.25
#: voxels the inside of an object (:func:`_interior`) grows from the voxels enclosed along all six axis directions
INSIDE_GROW = 3


def analyze_scene(
    means: ArrayLike,
    opacities: ArrayLike,
    log_scales: Optional[ArrayLike] = None,
    *,
    format_prior_up=None,
    prior_name: str = "the format prior",
    seed: int = 0,
    opacity_threshold: float = 0.05,
    quantiles: Tuple[float, float] = (0.01, 0.99),
    grid_resolution: int = 96,
    grid_pad: float = 0.25,
    min_voxel_count: int = 2,
    min_cluster_fraction: float = 0.01,
    far_fraction: float = 0.1,
    big_scale_fraction: float = 0.1,
    max_stat_points: int = 200_000,
    plane_points: int = 20_000,
    plane_hypotheses: int = 1024,
    plane_band: float = 0.01,
    support_voxels: int = 40,
    min_beyond: float = 0.05,
    object_clearance: float = 0.015,
    small_scene_rows: int = SMALL_SCENE_ROWS,
    stable_base: bool = True,
    prior_if_it_stands: bool = False,
    prior_recorded: bool = False,
    support_search: bool = True,
    quats: Optional[ArrayLike] = None,
    colors: Optional[ArrayLike] = None,
) -> SceneAnalysis:
    """Classify the rows of a Gaussian capture and find its support plane and up axis (see module doc).

    Args:
        means: (N, 3) float array or tensor, scene units. Non-finite rows are flagged ``invalid``.
        opacities: (N,) activated opacities in [0, 1] (``sigmoid`` of the logits).
        log_scales: optional (N, 3) log standard deviations. When given, Gaussians whose largest std exceeds
            ``big_scale_fraction`` times the first extent are left out of the statistics and the plane fit
            (a huge blob's centre says little about a surface) but are still classified.
        format_prior_up: unit-able 3-vector used as the up axis when no support plane is accepted
            (otherwise :data:`DEFAULT_UP`). It never overrides a detected plane.
        prior_name: what the prior is, for ``reason`` (e.g. "the up axis recorded in the file").
        seed: seed of the subsampling / hypothesis generator; equal inputs and seed give equal results.
        opacity_threshold: rows with opacity below this are ``transparent``.
        quantiles: (low, high) quantiles of the robust extent.
        grid_resolution: occupancy cells along the longest padded axis (cubic voxels); reduced for small N
            to about ``sqrt(N_opaque / 24)`` (at least 16) so surface voxels hold several points.
        grid_pad: padding of the grid box per side, as a fraction of the first extent's size per axis.
        min_voxel_count: opaque points a voxel needs to count as occupied (points in sparser voxels are
            floaters unless such a voxel touches a kept component).
        min_cluster_fraction: components with less of the opaque mass are floaters.
        far_fraction: components farther than this times the extent from the main component are floaters.
        big_scale_fraction: see ``log_scales``.
        max_stat_points: subsample size of the quantile statistics.
        plane_points: subsample size of the plane fit.
        plane_hypotheses: number of plane hypotheses (seed points).
        plane_band: half-thickness of the support slab, fraction of the robust extent ``scale``.
        support_voxels: voxels along the robust extent of the standing test (:mod:`physskin_gs.geometry.support`).
        min_beyond: least fraction of a support's points outside the footprint of what stands on it.
        object_clearance: object rows lie more than this fraction of ``scale`` above the plane.
        small_scene_rows: with fewer opaque rows, no row is a floater and every opaque row off the support is
            object (module docstring, *small scenes*).
        stable_base: without a support, take the axis of the file the object stands on most stably when that
            evidence is clear (:func:`physskin_gs.geometry.upright.stable_base_up`), before ``format_prior_up``.
        prior_if_it_stands: with ``stable_base``, keep ``format_prior_up`` whenever the object can stand that way
            (its centre of mass over its base there: stability margin > 0), and take the most stable axis only
            when it cannot. For meshes, whose +y convention is usually right: a cup, a bowl or a table stands more
            stably upside down, a chair on its back and a figure lying down, yet were modelled standing; a
            z-up file seen +y up lies on its side or stands on an edge (a horse -0.49, a goblet -0.43). The
            answer is sure when the most stable axis is the convention's too.
        prior_recorded: ``format_prior_up`` is recorded in the file or fixed by its format (a physskin_gs export,
            glTF): without a support, the analysis is sure of it, and a support plane is looked for only within 30
            degrees of it (a flat part of an exported, deformed frame is not a support).
        support_search: look for a support plane (False for a mesh: a mesh is the object, and a flat part of it,
            a chair's base or a scorpion's feet, was taken as a support and kept half of it static).
        quats: optional (N, 4) unit quaternions (wxyz) of the Gaussians; with ``log_scales``, the normal (shortest
            axis) of a flat Gaussian is one of the cues that claim an object's base out of the support's slab
            (:func:`_claim_base`).
        colors: optional (N, 3) base colours in [0, 1] (``0.5 + C0 * sh_dc``), the other cue of the base claim.

    Returns:
        A :class:`SceneAnalysis`.

    Raises:
        ValueError: wrong shapes, or a bad ``format_prior_up``.
        DegenerateGeometryError: no valid opaque row (nothing to analyse).
    """
    timings: Dict[str, float] = {}
    t0 = time.perf_counter()
    pts = _to_numpy(means, np.float32)
    if pts.ndim != 2 or pts.shape[1] != 3:
        raise ValueError(f"means must have shape (N, 3), got {pts.shape}")
    n = pts.shape[0]
    colors_np = None if colors is None else _to_numpy(colors, np.float32)
    quats_np = None if quats is None or log_scales is None else _to_numpy(quats, np.float32)
    scales_np = None if quats_np is None else _to_numpy(log_scales, np.float32)
    for name_, arr, w in (("colors", colors_np, 3), ("quats", quats_np, 4)):
        if arr is not None and arr.shape != (n, w):
            raise ValueError(f"{name_} must have shape ({n}, {w}), got {arr.shape}")
    op = _to_numpy(opacities, np.float32).reshape(-1)
    if op.shape[0] != n:
        raise ValueError(f"opacities has {op.shape[0]} rows, means has {n}")
    ls = None
    if log_scales is not None:
        ls = _to_numpy(log_scales, np.float32)
        if ls.shape != (n, 3):
            raise ValueError(f"log_scales must have shape ({n}, 3), got {ls.shape}")
    prior = None if format_prior_up is None else _unit(format_prior_up, "format_prior_up")
    rng = np.random.default_rng(seed)

    # 1. rows ------------------------------------------------------------------------------------------
    valid = np.isfinite(op) & finite_rows(pts)  # [N]
    transparent = valid & (op < opacity_threshold)
    opaque = valid & ~transparent
    opaque_idx = np.flatnonzero(opaque)
    if opaque_idx.shape[0] == 0:
        raise DegenerateGeometryError(
            f"no valid opaque Gaussians to analyse ({int((~valid).sum())} of {n} rows non-finite, "
            f"{int(transparent.sum())} below opacity {opacity_threshold})"
        )
    timings["rows"] = time.perf_counter() - t0

    # 2. first extent (opacity-weighted quantiles of a subsample of the opaque rows) ----------------------
    t = time.perf_counter()
    sub = _subsample(opaque_idx, max_stat_points, rng)
    vs, ws, orders = _sort_columns(pts[sub], op[sub])  # [3, M] sorted once; step 4 filters them
    q = _sorted_quantiles(vs, ws, quantiles)  # [2, 3]
    lo0, hi0 = q[0], q[1]
    size0 = hi0 - lo0
    scale0 = float(size0.max())
    if not scale0 > 0.0:
        scale0 = float(np.abs(pts[sub]).max()) or 1.0
    stat_ok = np.ones(n, dtype=bool)
    if ls is not None:
        lmax = np.fmax(np.fmax(ls[:, 0], ls[:, 1]), ls[:, 2])  # [N] largest log-std (NaN only if all are NaN)
        big = np.nan_to_num(lmax, nan=-np.inf) > np.log(big_scale_fraction * scale0)
        stat_ok = ~big
    timings["extent0"] = time.perf_counter() - t

    # 3. floaters ----------------------------------------------------------------------------------------
    t = time.perf_counter()
    pad = grid_pad * np.maximum(size0, 0.25 * scale0)  # [3]
    res = int(np.clip(np.sqrt(opaque_idx.shape[0] / 24.0), 16, grid_resolution))
    grid = _Grid(lo0 - pad, hi0 + pad, res)
    flat_all = np.full(n, -1, dtype=np.int64)  # [N] voxel of every valid row (-1: invalid or outside), reused below
    all_valid = bool(valid.all())
    flat_all[valid] = grid.flat_index(pts if all_valid else pts[valid])
    flat_op = flat_all[opaque_idx]  # [No]
    small = opaque_idx.shape[0] < small_scene_rows
    labels, cmass, k = _components(grid, flat_op, op[opaque_idx], 1 if small else min_voxel_count)
    floater_comp = np.ones(k + 1, dtype=bool)  # component id -> floater (0 = empty / sparse voxel)
    if k > 0:
        main = int(np.argmax(cmass))
        frac = cmass / cmass.sum()
        floater_comp = frac < min_cluster_fraction  # a light component is a floater wherever it is
        heavy = np.flatnonzero(~floater_comp)
        heavy = heavy[(heavy != main) & (heavy != 0)]
        if heavy.size:  # a heavy one only when it is far from the main one
            floater_comp[heavy] = _least_gaps(labels, main, heavy) * grid.h > far_fraction * scale0
        floater_comp[0] = True
        floater_comp[main] = False
    lab_flat = labels.ravel()
    op_lab = np.where(flat_op >= 0, lab_flat[np.maximum(flat_op, 0)], 0)  # [No] component of each point
    # a point in a sparse voxel next to a kept component belongs to it (fuzzy rims, volumetric blobs)
    near_kept = ndimage.binary_dilation(~floater_comp[labels], structure=_FULL_3D).ravel()  # [X*Y*Z]
    sparse_ok = (op_lab == 0) & (flat_op >= 0) & near_kept[np.maximum(flat_op, 0)]
    floater = np.zeros(n, dtype=bool)
    far_parts = []  # heavy components left as floaters for their distance: (mass / the main one's, lo, hi)
    if not small:  # a small scene has no floaters (module docstring)
        floater[opaque_idx] = floater_comp[op_lab] & ~sparse_ok
        if k > 0 and heavy.size:
            far = heavy[floater_comp[heavy]]
            for c in far[np.argsort(-cmass[far])][:FAR_PARTS_LISTED]:
                P = np.asarray(pts[opaque_idx[op_lab == c]], dtype=np.float64)  # [m, 3]
                if P.shape[0]:
                    far_parts.append((float(cmass[c] / cmass[main]), P.min(0), P.max(0)))
    timings["floaters"] = time.perf_counter() - t

    # 4. robust extent -------------------------------------------------------------------------------------
    t = time.perf_counter()
    keep = ~floater[sub] & stat_ok[sub]
    if keep.sum() < 2:
        keep = ~floater[sub]
    if keep.sum() < 2:
        keep = np.ones(sub.shape[0], dtype=bool)
    sub = sub[keep]
    kept = keep[orders]  # [3, M] the kept rows, in each column's sorted order
    q = _sorted_quantiles(vs[kept].reshape(3, -1), ws[kept].reshape(3, -1), quantiles)
    lo, hi = q[0], q[1]
    size = hi - lo
    center = 0.5 * (lo + hi)
    scale = float(size.max())
    if not scale > 0.0:
        scale = scale0
    timings["extent"] = time.perf_counter() - t

    # 5. support plane -------------------------------------------------------------------------------------
    t = time.perf_counter()
    flat_part = 0.0  # (no support: the share of the sampled points in the best-populated plane turned down)
    plane_idx = _subsample(sub, plane_points, rng)
    band = plane_band * scale
    from physskin_gs.geometry.support import find_support

    if support_search:
        found, why, unsure, examined = find_support(pts[plane_idx].astype(np.float64),
                                                    op[plane_idx].astype(np.float64),
                                                    rng, band=band, voxel=scale / support_voxels,
                                                    hypotheses=plane_hypotheses, min_beyond=min_beyond, prior=prior,
                                                    prior_fixed=prior_recorded)
        if found is None:  # the best-populated plane turned down, and how much of the capture it holds
            tried = [c for c in examined if c.why][:1]
            flat_part = float(tried[0].inlier_fraction) if tried else 0.0
    else:
        found, why, unsure = None, "a mesh is the object: no support searched", True
    plane = None
    base = None
    cos30 = np.cos(np.deg2rad(30.0))
    prior_sure = prior_recorded and prior is not None  # without a support, the prior is sure only when recorded
    prior_margin = -1.0  # the stability margin of the file's convention (prior_if_it_stands)
    flat_slab = False  # the stable-base up lays a thin slab on its face (upright.FLAT_SLAB)
    if found is None and stable_base and plane_idx.shape[0] >= 16:  # which of the file's axes it stands on
        from physskin_gs.geometry.upright import stable_base_up

        base = stable_base_up(pts[plane_idx], op[plane_idx], seed=seed)
        if prior is not None:
            prior_margin = _margin_along(base, prior, cos30)
    if found is not None:
        plane = {"normal": found.normal / np.linalg.norm(found.normal), "offset": found.offset,
                 "inlier_fraction": found.inlier_fraction, "minority": found.minority, "width": found.width_ratio,
                 "coverage": found.carried, "confidence": (0.5 if unsure else 1.0) * min(1.0, found.beyond / 0.2),
                 "parts": [plane_idx[part] for part in found.parts_idx],
                 "through": plane_idx[found.through] if found.through is not None else np.zeros(0, np.int64)}
    timings["plane"] = time.perf_counter() - t

    # 6. classification of all rows ------------------------------------------------------------------------
    t = time.perf_counter()
    base_cues = colors_np is not None or quats_np is not None
    cand = opaque & ~floater  # [N]
    support = np.zeros(n, dtype=bool)
    above = cand.copy()
    if plane is not None:
        nrm, d = plane["normal"], plane["offset"]
        sd = _signed_distance(pts, nrm, d)  # [N] float64, object side > 0
        if not all_valid:
            sd[~valid] = 0.0
        slab = cand & (np.abs(sd) <= band)
        # the support's own half-thickness: most of its inliers lie much closer to the plane than the band
        # when the support is a clean surface; rows above that thickness but inside the band belong to what
        # stands on it (feet, hooves) when they touch the object (attached below, after the object is found)
        # (the median, not a high quantile: the slab also holds the bottom of what stands on the support and the
        # support's own edge, and a clean top's noise is mostly within 4 medians of |sd|, about 2.7 sigma)
        thick = float(np.median(np.abs(sd[slab]))) if slab.any() else band
        thick = min(band, max(4.0 * thick, 0.05 * band))
        support = cand & (np.abs(sd) <= thick)
        contact = cand & (sd > thick) & (sd <= max(object_clearance * scale, band))
        above = cand & (sd > max(object_clearance * scale, band))
        up, source = nrm, "support-plane"
        reason = why
    elif base is not None and base.up is not None and prior_if_it_stands and prior_margin > 0.0:
        # modelled standing as the file has it: keep the convention
        up, source = prior, "format-prior"
        why = why.replace("; using the file's up-axis convention instead", "")
        most_stable = prior_margin >= max(base.margins.values())  # the evidence's best axis too
        # more stable only upside down (a cup, a bowl, a plate, a table on its top): a file's convention is swapped
        # between axes (y up, z up), not turned over, so that is no doubt about the axis
        flipped = bool(float(base.up @ prior) < -cos30)
        reason = (f"no support plane found: {why}; using {prior_name}: the object can stand that way (stability "
                  f"margin {prior_margin:+.2f}" + (")" if most_stable else
                  f"; it would rest more stably with {base.axis} up, as objects modelled standing often do: a cup "
                  "upside down, a chair on its back)"))
        prior_sure = most_stable or flipped
        unsure = not prior_sure
    elif base is not None and base.up is not None:
        up, source = base.up, "stable-base"
        why = why.replace("; using the file's up-axis convention instead", "")  # (the evidence is used instead)
        agrees = prior is not None and float(base.up @ prior) > cos30
        reason = f"no support plane found: {why}; {base.reason}" + ("" if agrees or prior is None
                                                                      else f", not {prior_name}")
        unsure = not agrees  # sure only when the evidence and the file's convention agree
        from physskin_gs.geometry.upright import FLAT_SLAB

        flat_slab = base.thinness < FLAT_SLAB
        if flat_slab:  # lying on its face, it may be meant to stand on an edge (a photo relief)
            reason += (f"; it is a thin slab lying on its face (its height {base.thinness:.0%} of its width), which "
                       "may be meant to stand on an edge (a relief, a sign, a picture)")
            unsure = True
    elif prior is not None:
        up, source = prior, "format-prior"
        unsure = unsure and not prior_sure  # a recorded up axis (our exports, glTF) is not a guess
        reason = f"no support plane found: {why}; using {prior_name}" + (f"; {base.reason}" if base else "")
    else:
        up, source = DEFAULT_UP.copy(), "default"
        reason = f"no support plane found: {why}; no format prior given, so the default -y"

    above_idx = np.flatnonzero(above)
    sup_vox = _voxels_of(support, flat_all, grid.shape).ravel()  # [G] the support's voxels: a lid under what stands
    others = 0
    obj = np.zeros(n, dtype=bool)
    in_object = np.zeros(n, dtype=bool)
    more_bodies: List[Tuple[np.ndarray, np.ndarray]] = []  # (object rows, transparent rows) of the other objects
    hovering: List[Tuple[float, np.ndarray, np.ndarray]] = []  # SceneAnalysis.hovering_parts
    if above_idx.shape[0] > 0:
        flat_ab = flat_all[above_idx]
        olabels, omass, ok_ = _components(grid, flat_ab, op[above_idx], 1)
        if ok_ > 0:
            best = int(np.argmax(omass))
            olab_flat = olabels.ravel()
            ab_lab = np.where(flat_ab >= 0, olab_flat[np.maximum(flat_ab, 0)], 0)
            others_lab: List[int] = []
            if plane is not None and plane["parts"]:  # the object is what stands on the support, not the wall

                def part_label(part) -> int:
                    fl = flat_all[part]
                    votes = np.bincount(np.where(fl >= 0, olab_flat[np.maximum(fl, 0)], 0), minlength=ok_ + 1)
                    votes[0] = 0
                    return int(np.argmax(votes)) if votes.max() > 0 else 0

                lab0 = part_label(plane["parts"][0])
                if lab0 > 0:
                    best = lab0
                if not small:  # other things standing on the support, heavy enough to be objects (docstring)
                    m0 = float(op[plane["parts"][0]].sum())
                    for part in plane["parts"][1:]:
                        lab = part_label(part)
                        if float(op[part].sum()) >= OTHER_OBJECT_MASS * m0 and lab > 0 and lab != best \
                                and lab not in others_lab:
                            others_lab.append(lab)

            def body_mask(label: int) -> np.ndarray:
                m = np.zeros(n, dtype=bool)
                m[above_idx] = True if small else ab_lab == label  # a small scene: every component (docstring)
                if plane is not None and contact.any():
                    # contact rows (between the support's surface and the clearance) in or next to an object voxel
                    # move with the object, so nothing of it stays behind on the floor when it is lifted
                    # (dilated far enough to reach from the clearance down to the support's surface)
                    reach = max(1, int(np.ceil(max(object_clearance * scale, band) / grid.h)))
                    near = ndimage.binary_dilation((olabels == label), structure=_FULL_3D, iterations=reach).ravel()
                    c_idx = np.flatnonzero(contact)
                    flat_c = flat_all[c_idx]
                    m[c_idx] = (flat_c >= 0) & near[np.maximum(flat_c, 0)]
                if plane is not None and plane["through"].shape[0] and not small:
                    _drop_through_parts(m, pts, plane, scale / support_voxels)
                if plane is not None and not small:
                    _drop_wall_strips(m, pts, sd, band, scale / support_voxels, plane["normal"], rng)
                    if base_cues:  # the base inside the support's own slab (docstring, _claim_base)
                        clear = max(object_clearance * scale, band)
                        _claim_base(m, cand & (sd >= -band) & (sd <= clear), pts, sd, clear, band,
                                    scale / support_voxels, plane["normal"], colors_np, quats_np, scales_np, rng)
                return m

            def transparent_in(label: int, taken: np.ndarray) -> np.ndarray:
                m = np.zeros(n, dtype=bool)
                tr_idx = np.flatnonzero(transparent)
                if tr_idx.shape[0] > 0:
                    flat_tr = flat_all[tr_idx]
                    lab_tr = np.where(flat_tr >= 0, olab_flat[np.maximum(flat_tr, 0)], 0)
                    hit = lab_tr > 0 if small else lab_tr == label
                    if plane is not None:
                        hit &= sd[tr_idx] > thick  # above the support's own surface, like the contact rows
                    m[tr_idx] = hit
                return m & ~taken

            obj = body_mask(best)
            in_object = transparent_in(best, np.zeros(n, dtype=bool))
            if not small:
                # floaters and transparent rows in the voxels next to the object's are its own haze (a capture's
                # view-dependent glow, the soft edge of its surface): left static, they hung in the air where the
                # object had been, visible once it moved (a donut's 25 opaque glow blobs, 1 voxel off its icing).
                # An object cut free (no support) drops a quarter of its height at once: there, floaters within
                # HAZE_VOXELS voxels are its haze too (a plush dragon's 31 and a toy's 67 large blobs, 2-3 voxels
                # off them); beside a support, floaters that far are as often a wall's or a table's sparse edge
                # (generated seeds 2028, 2044, 3000 lost a fifth of their precision)
                own = olabels == best
                near = ndimage.binary_dilation(own, structure=_FULL_3D).ravel()  # [G] the voxels next to it
                haze = min(HAZE_VOXELS, int(HAZE_REACH * scale / grid.h))  # (a sparse scene's voxels are coarse)
                wide = near if plane is not None or haze <= 1 else ndimage.binary_dilation(  # cut free: wider
                    own, structure=_FULL_3D, iterations=haze).ravel()
                # what lies inside it moves with it too (_interior): large blobs inside a box, hidden while it stands,
                # stayed where it had stood once it fell over (a fresh user's card box, 189 floaters)
                # (not a voxel that holds something else: the wall behind a crate is not the crate's inside)
                inside = _interior(own | _voxels_of(obj & ~above, flat_all, grid.shape), sup_vox) \
                    & ~((olabels > 0) & ~own).ravel()  # [G]
                near, wide = near | inside, wide | inside
                for rows, into, next_to in ((floater, obj, wide), (transparent, in_object, near)):
                    r_idx = np.flatnonzero(rows & ~obj & ~in_object)
                    fl = flat_all[r_idx]
                    hit = (fl >= 0) & next_to[np.maximum(fl, 0)]
                    if plane is not None:
                        hit &= sd[r_idx] > thick  # above the support's own surface, like the contact rows
                    into[r_idx[hit]] = True
                floater = floater & ~obj
            taken = obj | in_object
            for lab in others_lab:
                m = body_mask(lab) & ~taken
                if m.mean() == 0.0 or not m.any():
                    continue
                if not small:  # what lies inside it (above)
                    r_idx = np.flatnonzero(floater & ~taken & ~m)
                    fl = flat_all[r_idx]
                    mine = olabels == lab
                    inside = _interior(mine | _voxels_of(m & ~above, flat_all, grid.shape), sup_vox) \
                        & ~((olabels > 0) & ~mine).ravel()  # [G]
                    hit = (fl >= 0) & inside[np.maximum(fl, 0)]
                    if plane is not None:
                        hit &= sd[r_idx] > thick
                    m[r_idx[hit]] = True
                    floater = floater & ~m
                t_in = transparent_in(lab, taken | m)
                taken |= m | t_in
                more_bodies.append((np.flatnonzero(m), np.flatnonzero(t_in)))
            others = len(more_bodies)
            if plane is not None and plane["parts"] and not small:
                hovering = _hovering_parts(pts, above_idx, ab_lab, omass, {best, *others_lab},
                                           float(omass[best]), pts[np.flatnonzero(support)],
                                           plane["normal"], sd, max(object_clearance * scale, band))
    support &= ~obj  # (the base an object claimed out of the slab is its own, and the other bodies' theirs)
    for rows, _ in more_bodies:
        support[rows] = False
    background = cand & ~support & ~obj
    timings["classify"] = time.perf_counter() - t

    support_plane = None
    if plane is not None:
        support_plane = SupportPlane(
            normal=plane["normal"],
            offset=float(plane["offset"]),
            band=float(band),
            inliers=int(support.sum()),
            inlier_fraction=float(plane["inlier_fraction"]),
            minority_fraction=float(plane["minority"]),
            width_ratio=float(plane["width"]),
            coverage=float(plane["coverage"]),
            confidence=float(plane["confidence"]),
        )
    timings["total"] = time.perf_counter() - t0
    from physskin_gs.geometry.upright import AXES

    return SceneAnalysis(
        up=np.asarray(up, dtype=np.float64),
        up_source=source,
        reason=reason,
        plane=support_plane,
        center=center,
        size=size,
        lo=lo,
        hi=hi,
        scale=scale,
        invalid=~valid,
        transparent=transparent,
        floater=floater,
        support=support,
        object=obj,
        background=background,
        transparent_in_object=in_object,
        voxel_size=grid.h,
        grid_shape=grid.shape,
        timings=timings,
        unsure=bool(unsure or (plane is None and source != "stable-base" and not prior_sure)),
        other_objects=int(others),
        other_bodies=more_bodies,
        flat_part=float(flat_part if plane is None else 0.0),
        far_parts=far_parts,
        hovering_parts=hovering,
        up_candidates=[] if base is None else [
            k for k in sorted(base.margins, key=lambda k: -base.margins[k])
            if ((base.margins[k] > 0.0 and float(AXES[k] @ np.asarray(up, dtype=np.float64)) < cos30)
                # a slab lying on its face: the axes of its edges, whatever their margins
                or (flat_slab and abs(float(AXES[k] @ np.asarray(up, dtype=np.float64))) < 0.5))],
    )


def _hovering_parts(pts: np.ndarray, above_idx: np.ndarray, ab_lab: np.ndarray, omass: np.ndarray, objects: set,
                    m0: float, support_pts: np.ndarray, normal: np.ndarray, sd: np.ndarray, clear: float):
    """:attr:`SceneAnalysis.hovering_parts`: the components (labels ``ab_lab`` (A,) of the rows ``above_idx`` (A,)
    above the clearance, masses ``omass`` (K+1,)) that are not the objects (``objects``, labels), hold at least
    :data:`OTHER_OBJECT_MASS` of ``m0`` (the object's opacity mass), lie wholly over the support's captured extent
    (their footprint inside the 1-99 % box of ``support_pts`` (S, 3) across ``normal``; a wall behind the table
    reaches past it) and have nothing within ``clear`` above the support (``sd`` (N,) signed distances; scene
    units): they do not stand on it."""
    if support_pts.shape[0] < 16 or m0 <= 0:
        return []
    n = np.asarray(normal, dtype=np.float64)
    from physskin_gs.geometry.support import plane_axes

    B = plane_axes(n)  # [2, 3]
    s2 = support_pts @ B.T  # [S, 2]
    lo2, hi2 = np.quantile(s2, 0.01, axis=0), np.quantile(s2, 0.99, axis=0)
    out = []
    for lab in np.flatnonzero(omass >= OTHER_OBJECT_MASS * m0):
        if lab == 0 or int(lab) in objects:
            continue
        rows = above_idx[ab_lab == lab]
        if rows.shape[0] < 16 or float(np.quantile(sd[rows], 0.01)) <= 2.0 * clear:
            continue
        p2 = pts[rows] @ B.T
        if np.any(p2.min(0) < lo2) or np.any(p2.max(0) > hi2):
            continue
        P = np.asarray(pts[rows], dtype=np.float64)
        out.append((float(omass[lab] / m0), P.min(0), P.max(0)))
    out.sort(key=lambda t: -t[0])
    return out[:FAR_PARTS_LISTED]


def _voxels_of(rows: np.ndarray, flat_all: np.ndarray, shape) -> np.ndarray:
    """(D0, D1, D2) bool: the voxels (of the analysis grid ``shape``) holding a row of ``rows`` (N,) bool, given
    every row's voxel ``flat_all`` (N,) (-1 outside the grid). Raises nothing."""
    vox = np.zeros(int(np.prod(shape)), dtype=bool)
    fl = flat_all[rows]
    vox[fl[fl >= 0]] = True
    return vox.reshape(shape)


def _interior(own: np.ndarray, lid: np.ndarray) -> np.ndarray:
    """(G,) bool: the voxels inside an object. Seeds: empty voxels from which a line along each of the grid's six
    axis directions meets the object's voxels ``own`` (D0, D1, D2) bool (its rows', down to its feet in the contact
    layer) or the support's voxels ``lid`` (G,) bool (which close it from below: an object's underside is never
    captured); grown by ``INSIDE_GROW`` voxels into empty ones whose lines miss in at most two directions.

    Lines, not a flood fill: a wall a voxel thin has gaps where few rows fell, and a flood fill leaked out through
    them (a card box's inside was not enclosed at any closing radius that kept it a box). An open cavity is not
    inside (no voxel of a cup's sees its walls upward, so it has no seed), nor the space under a table between its
    legs (the sides miss). Computed in the object's box grown by two voxels. Raises nothing."""
    out = np.zeros(own.size, dtype=bool)
    occ = np.argwhere(own)
    if occ.shape[0] == 0:
        return out
    lo = np.maximum(occ.min(0) - 2, 0)
    hi = np.minimum(occ.max(0) + 3, own.shape)
    sl = tuple(slice(int(a), int(b)) for a, b in zip(lo, hi))
    shell = own[sl] | lid.reshape(own.shape)[sl]  # [d0, d1, d2]
    hits = np.zeros(shell.shape, dtype=np.int8)  # [d0, d1, d2] directions whose line meets the shell
    for ax in range(3):
        hits += np.logical_or.accumulate(shell, axis=ax)
        hits += np.flip(np.logical_or.accumulate(np.flip(shell, axis=ax), axis=ax), axis=ax)
    cav = (hits == 6) & ~shell
    if cav.any():  # grown into the empty neighbours that miss along one or two directions (lines through gaps)
        cav |= ndimage.binary_dilation(cav, structure=_FULL_3D, iterations=INSIDE_GROW,
                                       mask=(hits >= 4) & ~shell)
    full = np.zeros(own.shape, dtype=bool)
    full[sl] = cav
    return full.ravel()


def analyze_gaussian_scene(scene, **kwargs) -> SceneAnalysis:
    """:func:`analyze_scene` of a :class:`physskin_gs.scene.GaussianScene` (means (N, 3) in scene units,
    sigmoid of the (N,) opacity logits, (N, 3) log-scales); keyword arguments are passed through.

    Raises:
        ValueError / DegenerateGeometryError: as :func:`analyze_scene`.
    """
    kwargs.setdefault("quats", scene.quats)
    kwargs.setdefault("colors", scene.colors())
    return analyze_scene(scene.means, torch.sigmoid(scene.opacity_logits), scene.log_scales, **kwargs)


def _base_features(idx: np.ndarray, up: np.ndarray, colors: Optional[np.ndarray] = None,
                   quats: Optional[np.ndarray] = None, log_scales: Optional[np.ndarray] = None) -> np.ndarray:
    """(len(idx), F) features of rows ``idx`` for :func:`_claim_base`: the base colour (3 columns, [0, 1]) when
    ``colors`` is given, and when ``quats`` (wxyz) and ``log_scales`` are, ``BASE_NORMAL_WEIGHT`` times
    ``|n . up| * flatness``: n the Gaussian's shortest axis, flatness ``1 - s_min / s_mid`` (0 for a round blob, whose
    shortest axis means nothing)."""
    cols = []
    if colors is not None:
        cols.append(np.clip(colors[idx].astype(np.float64), 0.0, 1.0))
    if quats is not None and log_scales is not None:
        ls = log_scales[idx].astype(np.float64)
        k = np.argmin(ls, axis=1)  # [M] the shortest axis
        srt = np.sort(ls, axis=1)
        flat = 1.0 - np.exp(srt[:, 0] - srt[:, 1])  # [M] in [0, 1)
        rot = quat_to_rotmat(torch.from_numpy(quats[idx].astype(np.float64))).numpy()  # [M, 3, 3] local -> scene
        nrm = rot[np.arange(len(idx)), :, k]  # [M, 3] the shortest axis's column
        cols.append((BASE_NORMAL_WEIGHT * np.abs(nrm @ up) * flat)[:, None])
    if not cols:
        return np.zeros((len(idx), 0))
    # (a row with a finite mean but a non-finite colour or scale is a valid row: it votes as black / round)
    return np.nan_to_num(np.concatenate(cols, axis=1), nan=0.0, posinf=0.0, neginf=0.0)


def _claim_base(obj: np.ndarray, slab: np.ndarray, pts: np.ndarray, sd: np.ndarray, clear: float, band: float,
                h: float, up: np.ndarray, colors: Optional[np.ndarray], quats: Optional[np.ndarray],
                log_scales: Optional[np.ndarray], rng: np.random.Generator, reference: bool = False) -> int:
    """Claim for the object mask ``obj`` (N,) bool, in place, the rows of its base that lie inside the support's own
    slab: a ball's lowest cap, a crate's lowest edge, a vase's bottom, feet sunk into a noisy or tilted top. Returns
    how many.

    The slab is the support's by position alone; what tells its rows apart is where they are and how they look.

    * Candidates: the ``slab`` rows (N,) bool (from the band under the support's surface up to the clearance
      ``clear``, scene units) under the object's footprint: the cells (edge ``h``, scene units, in the plane) of its
      lowest rows above the clearance (``sd`` (N,), signed distance above the plane in scene units, in ``(clear,
      clear + 2 band]``; else its 200 lowest rows above it), grown by one cell and their holes filled.
    * Examples, learned from this capture: those lowest rows of the object (above the contact layer, which holds
      the support's own noisy or tilted rows too), and the slab's rows in the ``BASE_RING_CELLS`` cells around the
      footprint (the support next to the object), as many of each (at most ``BASE_EXAMPLES``).
    * Features (:func:`_base_features`): the colour alone first, what a viewer sees; when that does not separate
      the examples, the colour with the flat Gaussians' normal against the support's ``up`` (3,) (a crate's side
      the colour of its table).
    * A candidate goes to the object when at least ``BASE_CLAIM_VOTES`` of its ``BASE_VOTES`` nearest examples are
      the object's, and only when the examples are separable (leave-one-out majority votes right for at least
      ``BASE_SEPARABLE`` of each set). Where the object's base looks like its support, a claim would be a coin toss
      that tears rows out of the table, and rows that look like the table are not seen when left on it.
    * Only what joins the object is claimed: the claim grows from the object's base through the candidates, each
      claimed row within ``BASE_GAP`` times the object's row spacing at its base of the next (a lone table row whose
      colour noise matches the object stays), and only the candidates it meets are classified. ``reference=True``:
      every candidate is classified and the claimed ones kept whose connected component (pairs within that
      distance, ``scipy.sparse.csgraph``) holds a row of the object's base, the plain version a test holds the
      growth to.

    Measured on 200 generated hard captures: the object rows that move 0.935 -> 0.983 (mean), the rows called
    object that are 0.9734 -> 0.9733, the support and background left static 0.9752 -> 0.9749 (most of the
    support rows taken lie under the object, where a real capture has none). ``pts`` (N, 3) scene units;
    ``colors`` (N, 3) in [0, 1], ``quats`` (N, 4) wxyz and ``log_scales`` (N, 3) or None."""
    from scipy.spatial import cKDTree

    from physskin_gs.geometry.support import plane_axes

    low = np.flatnonzero(obj & (sd > clear) & (sd <= clear + 2.0 * band))
    if low.shape[0] < 4 * BASE_VOTES:
        above = np.flatnonzero(obj & (sd > clear))
        low = above[np.argsort(sd[above], kind="stable")[:200]]
    if low.shape[0] < 4 * BASE_VOTES:
        return 0
    B = plane_axes(up)  # [2, 3]
    l2 = pts[low].astype(np.float64) @ B.T  # [L, 2]
    pad = BASE_RING_CELLS + 2
    lo = l2.min(0) - pad * h
    dims = np.floor((l2.max(0) + pad * h - lo) / h).astype(np.int64) + 1
    if float(np.prod(dims)) > 16e6:  # (a base spread far wider than its cells)
        return 0
    foot = np.zeros(tuple(dims), dtype=bool)  # [D0, D1] the footprint's cells
    ij = np.floor((l2 - lo) / h).astype(np.int64)
    foot[ij[:, 0], ij[:, 1]] = True
    foot = ndimage.binary_fill_holes(ndimage.binary_dilation(foot, structure=np.ones((3, 3), bool)))
    around = ndimage.binary_dilation(foot, structure=np.ones((3, 3), bool), iterations=BASE_RING_CELLS) & ~foot
    rows = np.flatnonzero(slab & ~obj)
    r2 = pts[rows] @ B.T.astype(np.float32)  # [S, 2] (float32: cells are a fortieth of the scene)
    # the grid's border cells are in neither set (padded), so a row outside it can be clamped onto the border
    ri = np.clip(np.floor((r2[:, 0] - lo[0]) / h).astype(np.int64), 0, dims[0] - 1)  # [S]
    rj = np.clip(np.floor((r2[:, 1] - lo[1]) / h).astype(np.int64), 0, dims[1] - 1)  # [S]
    cand = rows[foot[ri, rj]]
    sup = rows[around[ri, rj]]
    k_ex = min(low.shape[0], sup.shape[0], BASE_EXAMPLES)
    if cand.shape[0] == 0 or k_ex < 4 * BASE_VOTES:
        return 0
    body, sup = _subsample(low, k_ex, rng), _subsample(sup, k_ex, rng)
    ex = np.concatenate([body, sup])
    is_body = np.arange(2 * k_ex) < k_ex  # [2K]
    # the colour alone first (what a viewer sees), then with the normal (a base the colour of its support)
    cues = ([dict(colors=colors)] if colors is not None else []) + (
        [dict(colors=colors, quats=quats, log_scales=log_scales)] if quats is not None and log_scales is not None
        else [])
    for cue in cues:
        feats = _base_features(ex, up, **cue)  # [2K, F]
        tree = cKDTree(feats)
        _, nb = tree.query(feats, k=BASE_VOTES + 1)  # [2K, V + 1] (the first: the example or its twin)
        vote = is_body[nb[:, 1:]].mean(axis=1) > 0.5  # [2K] leave-one-out votes
        if min(float(vote[is_body].mean()), float((~vote[~is_body]).mean())) >= BASE_SEPARABLE:
            break
    else:
        return 0
    # grown from the object's base through the candidates, one ring of neighbours at a time: only what joins the
    # object is claimed, by a chain of claimed rows each within BASE_GAP times the object's row spacing at its base
    # of the next (a lone table row whose colour noise matches the object's stays), and only the candidates met
    # are classified (the table under a crate with no bottom face is not)
    sub = _subsample(low, 5000, rng)  # (the spacing of a subsample, scaled to all rows of a surface: 1 / sqrt(n))
    spacing = float(np.median(cKDTree(pts[sub]).query(pts[sub[:1000]], k=2)[0][:, 1]))
    gap = BASE_GAP * spacing * float(np.sqrt(sub.shape[0] / low.shape[0]))
    base = np.flatnonzero(obj & (sd <= clear + gap))  # [A] the object's rows a candidate can be within gap of
    cpts = pts[cand].astype(np.float64)  # [C, 3]
    ctree = None
    seen = np.zeros(cand.shape[0], dtype=bool)  # [C] classified
    won = np.zeros(cand.shape[0], dtype=bool)  # [C] claimed
    if base.shape[0] == 0:
        return 0
    if reference:
        from scipy.sparse import coo_matrix
        from scipy.sparse.csgraph import connected_components

        _, nb = tree.query(_base_features(cand, up, **cue), k=BASE_VOTES)  # [C, V]
        voted = cand[is_body[nb].sum(axis=1) >= BASE_CLAIM_VOTES]
        pool = np.concatenate([base, voted])
        pairs = cKDTree(pts[pool].astype(np.float64)).query_pairs(gap, output_type="ndarray")  # [P, 2]
        graph = coo_matrix((np.ones(pairs.shape[0]), (pairs[:, 0], pairs[:, 1])), shape=(pool.shape[0],) * 2)
        _, comp = connected_components(graph, directed=False)
        joined = np.zeros(comp.max() + 1, dtype=bool)
        joined[comp[: base.shape[0]]] = True
        won_rows = voted[joined[comp[base.shape[0]:]]]
        obj[won_rows] = True
        return int(won_rows.shape[0])
    d, _ = cKDTree(pts[base].astype(np.float64)).query(cpts, k=1, distance_upper_bound=gap, workers=-1)  # [C]
    front = np.flatnonzero(np.isfinite(d))
    while front.shape[0]:
        seen[front] = True
        _, nb = tree.query(_base_features(cand[front], up, **cue), k=BASE_VOTES)  # [F, V]
        new = front[is_body[nb].sum(axis=1) >= BASE_CLAIM_VOTES]
        won[new] = True
        if new.shape[0] == 0:
            break
        ctree = cKDTree(cpts) if ctree is None else ctree
        nxt = ctree.query_ball_point(cpts[new], r=gap, return_sorted=False)
        front = np.unique(np.concatenate([np.asarray(x, np.int64) for x in nxt] + [np.zeros(0, np.int64)]))
        front = front[~seen[front]]
    won = cand[won]
    obj[won] = True
    return int(won.shape[0])


def _drop_through_parts(obj: np.ndarray, pts: np.ndarray, plane: dict, h: float) -> None:
    """Remove from the object mask ``obj`` (N,) bool, in place, the parts of it that pass through the support (a
    wall behind the object, a table leg): the object's rows voxelised at the standing test's voxel ``h`` (scene
    units, finer than the analysis grid, so a wall touching the object is a part of its own there), and each
    26-connected part holding over ten times more of the standing test's pass-through rows (``plane["through"]``)
    than of its standing rows (``plane["parts"]``) is dropped; a part holding more of both (a vase against a wall
    joined to it at this voxel, however the two compare in size) is shared between them by
    :func:`physskin_gs.geometry.support.geodesic_split` and the pass-through share dropped. ``pts``: (N, 3) means,
    scene units."""
    rows = np.flatnonzero(obj)
    if rows.shape[0] == 0:
        return
    x = pts[rows].astype(np.float64)
    ijk = np.floor((x - x.min(0)) / h).astype(np.int64)  # [R, 3]
    dims = ijk.max(0) + 1
    if float(np.prod(dims)) > 64e6:  # (an object spread over a far larger box than the analysis' extent)
        return
    occ = np.zeros(tuple(dims), dtype=bool)
    occ[tuple(ijk.T)] = True
    labels, k = ndimage.label(occ, structure=_FULL_3D)
    row_lab = labels[tuple(ijk.T)]  # [R] 1..k
    lab_of = np.zeros(obj.shape[0], dtype=np.int64)
    lab_of[rows] = row_lab
    stand_rows = np.concatenate(plane["parts"])
    standing = np.bincount(lab_of[stand_rows], minlength=k + 1)
    through = np.bincount(lab_of[plane["through"]], minlength=k + 1)
    drop = 10 * standing < through  # a pass-through part with at most a few stray standing rows
    drop[0] = False
    out = drop[row_lab]  # [R]
    # a part holding both (an object touching a wall): shared where they meet, from the two sets of rows
    both = np.flatnonzero((through > 0) & (standing > 0) & ~drop)
    if both.size:
        from physskin_gs.geometry.support import geodesic_split

        seed_t, seed_s = np.zeros(occ.shape, dtype=bool), np.zeros(occ.shape, dtype=bool)
        for mask, r in ((seed_t, plane["through"]), (seed_s, stand_rows)):
            r = r[obj[r]]  # (rows of the object only: the grid covers those)
            mask[tuple(ijk[np.searchsorted(rows, r)].T)] = True
        sel = np.isin(labels, both)
        split = geodesic_split(sel, seed_t, seed_s)
        out |= split[tuple(ijk.T)] == 1
    obj[rows[out]] = False


def _drop_wall_strips(obj: np.ndarray, pts: np.ndarray, sd: np.ndarray, band: float, h: float, n: np.ndarray,
                      rng: np.random.Generator, max_below: int = 50_000) -> None:
    """Remove from the object mask ``obj`` (N,) bool, in place, a wall or a leg joined to it that passes the support
    beside it: so close that even the standing test's voxels ``h`` join them, so it stood on the support with the
    object and moved with it (a generated cow against a wall: 94 % of the wall moved). The object's contact points
    (within ``band`` + ``h`` of the plane, ``sd`` (N,) its signed distances, ``n`` its normal) are split into those
    over something that continues below the plane (points 1-3 voxels under the slab within 0.75 voxel, as the
    standing test asks of a part) and the rest; when the first are a minority lying mostly outside the rest's hull
    (:func:`physskin_gs.geometry.support._wall_strip`: a wall runs on past what stands, the rim of an object's own
    base at a table's edge does not) along a line (a wall's foot, not a leg's), the object's rows are shared by
    :func:`physskin_gs.geometry.support.geodesic_split` at voxel ``h`` between the wall (seeds: its foot and the
    rows within a voxel of the plane through the foot and the support's normal, past the standing contact's hull)
    and what stands (seeds: the rest of the contact and every row more than two voxels off the wall's plane), and
    the wall's share is dropped. A wall that ends at the support's level behind its edge leaves nothing below the
    plane: failing that test, the foot is looked for among the contact points past the support's top
    (:func:`_past_support`), on the line through most of them (:func:`_line_inliers`), and the split is made only
    when what stands lies wholly on one side of the wall and the foot runs on past it (a box's face over a cut
    edge ends where the box does). Only the object mask changes, never the support chosen. ``pts``: (N, 3) means,
    scene units."""
    from scipy.spatial import cKDTree

    from physskin_gs.geometry.support import geodesic_split, plane_axes

    rows = np.flatnonzero(obj)  # sorted
    if rows.shape[0] < 16:
        return
    contact = rows[sd[rows] <= band + h]
    if contact.shape[0] < 16:
        return
    below = np.flatnonzero((sd < -band - h) & (sd >= -band - 3.0 * h))
    if below.shape[0] > max_below:
        below = rng.choice(below, max_below, replace=False)
    B = plane_axes(n)
    c2 = pts[contact].astype(np.float64) @ B.T  # [K, 2]
    goes_on = np.zeros(contact.shape[0], dtype=bool)
    if below.shape[0]:
        dist, _ = cKDTree(pts[below].astype(np.float64) @ B.T).query(c2, k=1, distance_upper_bound=0.75 * h)
        goes_on = np.isfinite(dist)  # [K]
    foot = _wall_foot(c2, goes_on, h, None)
    one_sided = foot is None
    if one_sided:  # a wall that ends at the support's level behind its edge: its foot lies past the support's top
        foot = _wall_foot(c2, _past_support(c2, pts, sd, obj, band, h, B, rng), h, rng)
        if foot is None:
            return
    goes_on, eq, vec = foot
    m = B.T @ vec  # (3,) the wall's normal (in the support plane, across the strip)
    x = pts[rows].astype(np.float64)  # [R, 3]
    e = float(pts[contact[goes_on]].astype(np.float64).mean(0) @ m)
    off = np.abs(x @ m - e)  # [R] distance from the wall's plane
    outside = np.max((x @ B.T) @ eq[:, :2].T + eq[:, 2], axis=1) > 1.5 * h  # [R] beyond the standing contact
    if one_sided:  # what stands lies wholly in front of such a wall, and the wall runs on past it (a box's face does
        # not: over a cut support's edge it looks like a wall's foot, but it ends where the box does)
        clear = x[off > 2.0 * h]  # [C, 3]
        side = np.sign(clear @ m - e)
        if side.shape[0] == 0 or min(np.mean(side > 0), np.mean(side < 0)) > 0.02:
            return
        t = np.cross(n, m)  # (3,) along the foot
        ft, st = pts[contact[goes_on]].astype(np.float64) @ t, clear @ t
        if not (ft.min() < st.min() - 2.0 * h or ft.max() > st.max() + 2.0 * h):
            return
    ijk = np.floor((x - x.min(0)) / h).astype(np.int64)  # [R, 3]
    dims = ijk.max(0) + 1
    if float(np.prod(dims)) > 64e6:
        return
    occ = np.zeros(tuple(dims), dtype=bool)
    occ[tuple(ijk.T)] = True
    at = np.searchsorted(rows, contact)  # [K] the contact rows' places in rows
    wall_seed, stand_seed = np.zeros(occ.shape, dtype=bool), np.zeros(occ.shape, dtype=bool)
    wall_seed[tuple(ijk[(off <= h) & outside].T)] = True  # the wall's own rows, past what stands
    wall_seed[tuple(ijk[at[goes_on]].T)] = True  # and its foot
    stand_seed[tuple(ijk[off > 2.0 * h].T)] = True  # clear of the wall: what stands (its body too)
    stand_seed[tuple(ijk[at[~goes_on]].T)] = True  # and its contact
    wall = geodesic_split(occ, wall_seed, stand_seed)[tuple(ijk.T)] == 1  # [R]
    if wall.any() and not wall.all():
        obj[rows[wall]] = False


def _wall_foot(c2: np.ndarray, strip: np.ndarray, h: float, rng: Optional[np.random.Generator]):
    """A wall's foot among the contact points c2 (K, 2) (plane coordinates, scene units): the candidates ``strip``
    (K,) bool are a minority lying beside the rest's hull (:func:`~physskin_gs.geometry.support._wall_strip`) along a
    line (their covariance's minor eigenvalue under 5 % of the major). With ``rng``, only the candidates on the line
    through the most of them (:func:`_line_inliers`) are the foot. Returns (foot (K,) bool, the
    rest's hull equations (F, 3), the line's unit normal (2,)) or None."""
    from physskin_gs.geometry.support import _wall_strip

    if rng is not None and strip.sum() >= 8:  # points past a cut support's edges join the foot there: the line
        keep = _line_inliers(c2[strip], h, rng)  # through the most of them
        strip = strip.copy()
        strip[np.flatnonzero(strip)[~keep]] = False
    if strip.sum() < 8 or strip.mean() > 0.5:
        return None
    eq = _wall_strip(c2[strip], c2[~strip], h)  # the standing contact's hull, when the rest is a wall's strip
    if eq is None:
        return None
    s2 = c2[strip]
    ev, vec = np.linalg.eigh(np.cov((s2 - s2.mean(0)).T))
    if not ev[0] < 0.05 * ev[1]:
        return None
    return strip, eq, vec[:, 0]


def _line_inliers(p2: np.ndarray, tol: float, rng: np.random.Generator, tries: int = 64) -> np.ndarray:
    """(K,) bool: the points of p2 (K, 2) within ``tol`` of the line through the most of them (RANSAC over
    ``tries`` random pairs; scene units)."""
    best = np.zeros(p2.shape[0], dtype=bool)
    if p2.shape[0] < 2:
        return best
    for _ in range(tries):
        a, b = rng.choice(p2.shape[0], 2, replace=False)
        t = p2[b] - p2[a]
        ln = float(np.hypot(t[0], t[1]))
        if ln <= tol:
            continue
        nrm = np.array([-t[1], t[0]]) / ln
        near = np.abs((p2 - p2[a]) @ nrm) <= tol
        if near.sum() > best.sum():
            best = near
    return best


def _past_support(c2: np.ndarray, pts: np.ndarray, sd: np.ndarray, obj: np.ndarray, band: float, h: float,
                  B: np.ndarray, rng: np.random.Generator, max_rows: int = 50_000) -> np.ndarray:
    """(K,) bool: which of the contact points ``c2`` (K, 2) (plane coordinates, scene units) lie more than 1.5 ``h``
    outside the support's top: the convex hull of the cells (edge ``h``) of the support's own slab (rows within
    ``band`` of the plane that are not in ``obj``), its holes filled and eroded by two cells, so that the line a wall
    leaves where it crosses the plane is not taken for support. A wall's foot behind the support's edge lies there;
    all False for a slab too small or degenerate."""
    none = np.zeros(c2.shape[0], dtype=bool)
    slab = np.flatnonzero((np.abs(sd) <= band) & ~obj)
    if slab.shape[0] < 16:
        return none
    if slab.shape[0] > max_rows:
        slab = rng.choice(slab, max_rows, replace=False)
    s2 = pts[slab].astype(np.float64) @ B.T  # [S, 2]
    s2 = s2[np.isfinite(s2).all(1)]
    if s2.shape[0] < 16:
        return none
    lo = s2.min(0)
    ext = (s2.max(0) - lo) / h
    if float(np.prod(ext + 1.0)) > 16e6:  # (a slab spread far wider than its cells: no top to speak of)
        return none
    ij = np.floor((s2 - lo) / h).astype(np.int64)
    dims = ij.max(0) + 1
    occ = np.zeros(tuple(dims + 4), dtype=bool)  # a margin of two cells, so the erosion sees the edge
    occ[ij[:, 0] + 2, ij[:, 1] + 2] = True
    top = ndimage.binary_erosion(ndimage.binary_fill_holes(occ), structure=np.ones((3, 3), bool), iterations=2)
    rows_ = np.flatnonzero(top.any(1))
    if rows_.shape[0] == 0:
        return none
    first = np.argmax(top[rows_], axis=1)  # the first and last cell of each row of cells bound the hull
    last = top.shape[1] - 1 - np.argmax(top[rows_, ::-1], axis=1)
    cells = np.concatenate([np.stack([rows_, first], 1), np.stack([rows_, last], 1)])
    try:
        eq = ConvexHull((cells - 2 + 0.5) * h + lo).equations  # [F, 3]
    except QhullError:
        return none
    return np.max(c2 @ eq[:, :2].T + eq[:, 2], axis=1) > 1.5 * h

# ----------------------------------------------------------------------------------------------- plane
def _signed_distance(pts: np.ndarray, n: np.ndarray, d: float) -> np.ndarray:
    """(M,) float64 ``pts @ n - d`` of (M, 3) points, column by column (no (M, 3) float64 copy)."""
    sd = pts[:, 0].astype(np.float64)
    sd *= n[0]
    for a in (1, 2):
        col = pts[:, a].astype(np.float64)
        col *= n[a]
        sd += col
    sd -= d
    return sd
