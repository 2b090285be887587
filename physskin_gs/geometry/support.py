"""The support an object stands on: the plane under it that carries it, judged by what stands on the plane.

A support plane is accepted for what stands on it, not for how wide it is. For a candidate plane (n, d) with n
toward the side examined, the points above its slab are split into connected parts (an occupancy grid,
26-connected), and a part *stands* on the plane when

1. *it touches it*: some of its points (its *contact*) lie within a voxel of the slab;
2. *it ends there*: the contact does not continue below the slab (a wall or a table leg that passes through the
   plane continues; an object standing on a table top does not);
3. *it is carried*: the plane's own points lie under most of the contact;
4. *it is stable*: its centre of mass, projected along n, lies inside the convex hull of the carried contact
   (within a small margin), and that contact is not a mere edge (its least width at least a tenth of the part's
   height): a wall against a floor edge, a table top's rim against the wall, a sheet on its edge are not. A part
   that fails only the centre-of-mass test stands with the standing parts within two voxels of it when the group is
   stable (a toy's leg cut off at the hip by the voxels: the body stands on the leg's foot too);
5. *it is not the plane's own surface*: a flat sheet parallel to the plane (a sliver of the table cut off by a
   slightly tilted candidate) does not stand on it.

The plane is a support when something stands on it and

* it reaches beyond the footprint of what stands on it (some of the points of its surface that carries the
  contact lie outside that footprint: the flat bottom of an isolated object does not). The footprint is that of
  the standing parts' points clear of the surface layer (more than a voxel above the slab), so the support's own
  noise, a sheet of paper or cloth on it, which touch what stands on it, do not stretch it to the support's rim;
* it is at least as wide as that footprint: the area of its carrying surface's hull (the widest of its parallel
  layers) covers the footprint's (a flat face of an isolated object, a chair's back, a figure's side, a guitar's
  body, is narrower than the rest of the object standing on it; a table cut off at the object still covers it);
* it carries what stands on it on *one piece*: the standing parts' centre of mass lies inside the hull of their
  contacts on a single connected piece of the plane's surface (a table, a floor, a plinth's lid is one surface
  around and under the footprint, even cut off at its edge; a drone's four propeller discs are four pieces, none
  under its centre of mass);
* it is a surface, not a cut through a body: right under its carrying surface (one to three voxels below the
  slab) there are, per unit thickness, less than half as many points as in the slab (a table top or a plinth's lid
  is a dense layer over sparser legs, walls and inside; a surface crossing the plane continues as densely);
* what stands on it weighs at least as much as what lies on its other side under its carrying surface (a chip
  cut off a body, an ear or a leaf, the pot of a plant seen upside down from its soil, is not what a capture shows
  standing; the legs, the underside of a table or the cut-off plinth under a statue weigh less than what the
  capture is framed on; the wider floor under a plate or a table does not count), and at least a tenth of the
  capture (a floater beside a plant is not what it was framed on).

Candidates are the well-populated planes of random seeds' local normals and, in a levelled capture, the densest
thin layers across each of the file's axes (a small plinth top holds few points next to the walls and panels above
it, but it is the densest layer along the up axis).

Of the accepted planes, one whose standing parts hold a parallel accepted plane's surface (the floor under a table)
gives way to that nearer support; the rest are ranked by standing mass times inlier fraction. Parts above the
plane that touch it without standing on it (a wall passing through it or standing beside the support, a table
leg) are returned, so that the caller keeps them static even where they touch the object. The file's own
up-axis convention (``prior``) breaks near ties; a runner-up with another normal that scores nearly as much makes
the result *unsure* (and the caller falls back to the convention), a support that reaches less than 15 %
beyond what stands on it is trusted only when it agrees with the convention, and one that turns the capture upside
down against the convention is used but *unsure*. No width ratio against the whole
scene and no "every other point on one side" test: a support only 1.1 times the object's footprint, cut off at the
capture's edge, with a wall or furniture crossing it, is found all the same.

Pure numpy/scipy on a subsample (scene units); :func:`find_support` is called by
:func:`physskin_gs.geometry.scene_analysis.analyze_scene`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

import numpy as np
from scipy import ndimage
from scipy.spatial import ConvexHull, QhullError, cKDTree

__all__ = ["SupportCandidate", "find_support", "standing_parts", "plane_axes"]

#: a refined candidate plane replaces a close one found earlier when it holds this many times its inliers
REPLACE_RATIO = 1.25
#: a support gives way to a parallel one when this fraction of the other's surface lies in what stands on it (the
#: floor under a table top: all of the top); a plane slicing the objects on a table is only partly
NEAREST_HELD = 0.8

_FULL_3D = np.ones((3, 3, 3), dtype=bool)
#: a support carries what stands on it on one connected piece of its surface (:func:`_on_one_piece`); False: the
#: test is skipped (the rule before 2026-12-06, twelfth session)
ONE_PIECE = True


@dataclass
class SupportCandidate:
    """One oriented plane and what stands on it (subsample statistics).

    Attributes:
        normal: (3,) unit normal toward the side that stands on the plane; offset: the plane is n . x = offset.
        inliers: subsample points in the slab; inlier_fraction: of the subsample.
        standing_mass: opacity mass of the parts standing on the plane; standing_fraction: of the mass above.
        parts: number of standing parts; beyond: fraction of the slab's points outside their footprint.
        minority: fraction of the off-slab points on the other side.
        accepted: whether it is a support; why: what failed (empty when accepted).
        width_ratio: area of the carrying surface's hull / area of the standing parts' footprint hull.
        carried: 1 when the standing parts' contacts are carried by the plane's points (accepted candidates).
        standing, slab, parts_idx: subsample indices of what stands on it, of its slab, of each standing part.
        through: subsample indices of the parts above it that touch it without standing on it (walls, legs passing
            through it, a wall beside it; accepted candidates).
    """

    normal: np.ndarray
    offset: float
    inliers: int
    inlier_fraction: float
    standing_mass: float = 0.0
    standing_fraction: float = 0.0
    parts: int = 0
    beyond: float = 0.0
    minority: float = 0.0
    accepted: bool = False
    why: str = ""
    width_ratio: float = 0.0
    carried: float = 0.0
    standing: Optional[np.ndarray] = None  # indices (into the subsample) of what stands on it
    slab: Optional[np.ndarray] = None  # indices of its slab's points
    parts_idx: Optional[List[np.ndarray]] = None  # each standing part's indices, heaviest first
    through: Optional[np.ndarray] = None  # indices of the parts that touch it without standing (walls, legs)


# ------------------------------------------------------------------------------------------------ planes
def _local_normals(p: np.ndarray, seeds: np.ndarray, k: int) -> np.ndarray:
    """(S, 3) PCA normals (smallest-eigenvalue axis) at ``p[seeds]`` from their k nearest neighbours in p."""
    k = min(k, p.shape[0])
    _, nb = cKDTree(p).query(p[seeds], k=k)  # [S, k]
    x = p[nb]  # [S, k, 3]
    x = x - x.mean(axis=1, keepdims=True)
    cov = np.einsum("ski,skj->sij", x, x) / k  # [S, 3, 3]
    _, v = np.linalg.eigh(cov)  # ascending eigenvalues
    return v[:, :, 0]


def _score(p: np.ndarray, normals: np.ndarray, offsets: np.ndarray, band: float, chunk: int = 128):
    """Inlier / above / below counts (H,) of H planes against points p (M, 3), in chunks of hypotheses.

    Float32 signed distances, hypotheses along rows (each count runs over a contiguous row); inliers are
    ``count(sd <= band) - count(sd < -band)`` (the same rows as ``|sd| <= band``), above ``M - count(sd <=
    band)``, below the rest (p is finite: every row is in one class)."""
    h, m = normals.shape[0], p.shape[0]
    inl = np.empty(h, dtype=np.int64)
    above = np.empty(h, dtype=np.int64)
    p_t = np.ascontiguousarray(p.T, dtype=np.float32)  # [3, M]
    n32 = normals.astype(np.float32)
    o32 = offsets.astype(np.float32)
    for s in range(0, h, chunk):
        e = min(s + chunk, h)
        sd = n32[s:e] @ p_t  # [C, M]
        sd -= o32[s:e, None]
        not_above = np.count_nonzero(sd <= band, axis=1)  # [C]
        inl[s:e] = not_above - np.count_nonzero(sd < -band, axis=1)
        above[s:e] = m - not_above
    return inl, above, m - inl - above


def _refine(p: np.ndarray, n: np.ndarray, d: float, band: float, iters: int = 3):
    """Least-squares refit of a plane to its inliers in p, then to those within a quarter band (the surface's own
    layer: the bottoms of what stands on a table top, inside the band, tilt a fit to the whole band); returns
    (n, d) oriented toward the majority."""
    base = None
    for it in range(iters + 2):
        b = band if it < iters else 0.25 * band
        sel = np.abs(p @ n - d) <= b
        if it == iters - 1:
            base = int(sel.sum())
        if it >= iters and (base is None or sel.sum() < max(3, 0.3 * base)):
            break  # too thin a layer (a noisy or curved top): the full band's fit stands
        inl = p[sel]
        if inl.shape[0] < 3:
            break
        c = inl.mean(axis=0)
        r = inl - c  # [k, 3]
        n_new = np.linalg.eigh(r.T @ r)[1][:, 0]  # the scatter's least-variance axis (the SVD's last, without U)
        if n_new @ n < 0:
            n_new = -n_new
        n, d = n_new, float(n_new @ c)
    sd = p @ n - d
    if np.count_nonzero(sd < -band) > np.count_nonzero(sd > band):
        n, d = -n, -d
    return n, d


def plane_axes(n: np.ndarray) -> np.ndarray:
    """(2, 3) float64 orthonormal axes of the plane normal to the unit vector ``n`` (3,) (with ``n`` a right-handed
    frame); used wherever points are seen across a normal (supports, stable bases, floor columns)."""
    a = np.eye(3)[int(np.argmin(np.abs(n)))]
    u = np.cross(n, a)
    u /= np.linalg.norm(u)
    return np.stack([u, np.cross(n, u)])  # [2, 3]


def _hull_margin(hull_pts: np.ndarray, q: np.ndarray) -> float:
    """Signed distance of the 2-D point q outside the convex hull of hull_pts (<= 0 inside); inf if degenerate."""
    if hull_pts.shape[0] < 3:
        return float("inf")
    try:
        h = ConvexHull(hull_pts)
    except QhullError:
        return float("inf")
    eq = h.equations  # [F, 3]: a . x + b <= 0 inside, |a| = 1
    return float(np.max(eq[:, :2] @ q + eq[:, 2]))


def _hull_width(pts: np.ndarray) -> float:
    """Least width of the convex hull of (K, 2) points (over the hull's edge directions); 0 if degenerate."""
    if pts.shape[0] < 3:
        return 0.0
    try:
        h = ConvexHull(pts)
    except QhullError:
        return 0.0
    v = pts[h.vertices]  # [V, 2]
    eq = h.equations  # [F, 3], unit normals
    return float(np.min(np.max(-(v @ eq[:, :2].T + eq[:, 2]), axis=0)))


def _is_sheet(x: np.ndarray, w: np.ndarray, n: np.ndarray) -> bool:
    """Whether the points x (K, 3) form a flat sheet roughly parallel to the plane normal ``n`` (a sliver of the
    plane's own surface cut off by a slightly tilted candidate, not something standing on it)."""
    c = (w[:, None] * x).sum(0) / max(float(w.sum()), 1e-30)
    cov = ((x - c).T * w) @ (x - c) / max(float(w.sum()), 1e-30)
    ev, vec = np.linalg.eigh(cov)
    return bool(ev[0] < 0.02 * ev[1] and abs(vec[:, 0] @ n) > np.cos(np.deg2rad(25.0)))


def _hull_size(pts: np.ndarray) -> float:
    if pts.shape[0] < 3:
        return 0.0
    try:
        return float(np.sqrt(ConvexHull(pts).volume))
    except QhullError:
        return 0.0


def geodesic_split(occ: np.ndarray, seeds_a: np.ndarray, seeds_b: np.ndarray) -> np.ndarray:
    """Share the occupied voxels ``occ`` (X, Y, Z) bool between two seed sets (bool masks of the same shape):
    each occupied voxel goes to the seeds it reaches in the fewest steps through occupied voxels (26-connected;
    one multi-source shortest-path pass, scipy's ``dijkstra(min_only=True)``; a voxel equally far from both may go
    to either). Returns (X, Y, Z) int8: 1 (a),
    2 (b), 0 (empty or reached by neither). A wall touching an object is split from it where they meet, not where
    a plane would cut. :func:`_geodesic_split_reference` is the plain breadth-first version it is tested against."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import dijkstra

    lab = np.zeros(occ.shape, dtype=np.int8)
    a, b = occ & seeds_a, occ & seeds_b & ~seeds_a
    if not (a.any() or b.any()):
        return lab
    node = np.full(occ.shape, -1, dtype=np.int64)
    vox = np.flatnonzero(occ)
    node.ravel()[vox] = np.arange(vox.size)
    rows, cols = [], []

    def spans(d: int, size: int):  # (source, destination) slices of an offset d along an axis of ``size``
        return slice(max(0, -d), size - max(0, d)), slice(max(0, d), size - max(0, -d))

    for dx in (0, 1):  # the 13 offsets with a positive first non-zero component: each edge once
        for dy in ((-1, 0, 1) if dx else (0, 1)):
            for dz in ((-1, 0, 1) if (dx or dy) else (1,)):
                sx, sy, sz = (spans(d, size) for d, size in zip((dx, dy, dz), occ.shape))
                src, dst = node[sx[0], sy[0], sz[0]], node[sx[1], sy[1], sz[1]]
                m = (src >= 0) & (dst >= 0)
                rows.append(src[m])
                cols.append(dst[m])
    r, c = np.concatenate(rows), np.concatenate(cols)
    g = coo_matrix((np.ones(r.size), (r, c)), shape=(vox.size, vox.size)).tocsr()
    kind = np.zeros(vox.size, dtype=np.int8)  # [V] each seed node's set
    kind[node[a]] = 1
    kind[node[b]] = 2
    _, _, src = dijkstra(g, directed=False, indices=np.flatnonzero(kind), unweighted=True, min_only=True,
                         return_predecessors=True)  # src: the seed each node's shortest path starts from
    reached = src >= 0
    out = np.zeros(vox.size, dtype=np.int8)
    out[reached] = kind[src[reached]]
    lab.ravel()[vox] = out
    return lab


def _geodesic_split_reference(occ: np.ndarray, seeds_a: np.ndarray, seeds_b: np.ndarray) -> np.ndarray:
    """Plain reference of :func:`geodesic_split`: breadth-first growth from both seed sets at once, one voxel
    layer a round (a voxel reached by both in the same round goes to ``b``). Slow; for tests."""
    lab = np.zeros(occ.shape, dtype=np.int8)
    lab[occ & seeds_b] = 2
    lab[occ & seeds_a & (lab == 0)] = 1
    free = occ & (lab == 0)
    while free.any():
        grow_b = ndimage.binary_dilation(lab == 2, structure=_FULL_3D) & free
        grow_a = ndimage.binary_dilation(lab == 1, structure=_FULL_3D) & free & ~grow_b
        if not (grow_a.any() or grow_b.any()):
            break
        lab[grow_b] = 2
        lab[grow_a] = 1
        free &= ~(grow_a | grow_b)
    return lab


def _wall_strip(c2_below: np.ndarray, c2_rest: np.ndarray, voxel: float) -> Optional[np.ndarray]:
    """Whether the contact points that continue below the plane (``c2_below``, (K, 2) in plane coordinates, scene
    units) are a wall's or a leg's strip beside what stands, rather than the edge of its own base: most of them lie
    more than 1.5 ``voxel`` outside the convex hull of the rest of the contact (``c2_rest``, (R, 2)). An object at a
    table's edge has its points over the edge on its own base's rim; a wall behind it runs on past it. Returns that
    hull's (F, 3) equations (``a . x + b <= 0`` inside, ``|a| = 1``) when they are, else None (also for fewer than 8
    strip points or a degenerate hull)."""
    if c2_below.shape[0] < 8 or c2_rest.shape[0] < 3:
        return None
    try:
        eq = ConvexHull(c2_rest).equations  # [F, 3]
    except QhullError:
        return None
    out = np.max(c2_below @ eq[:, :2].T + eq[:, 2], axis=1)  # [K] distance outside the hull
    return eq if np.mean(out > 1.5 * voxel) >= 0.5 else None


#: voxels (of the standing test) within which parts that touch the plane count as one body for stability
GROUP_VOXELS = 2


def standing_parts(p: np.ndarray, w: np.ndarray, n: np.ndarray, d: float, band: float, voxel: float,
                   min_part: float = 0.02):
    """The parts of the points p (M, 3) that stand on the plane n . x = d (module docstring, tests 1-4).

    ``w``: (M,) opacity weights; ``band``: half-thickness of the plane's slab; ``voxel``: occupancy voxel edge (scene
    units); parts lighter than ``min_part`` of the mass above are ignored. Returns (list of (indices into p of the
    part, contact indices), mass above the slab, reason of the most massive part that does not stand, or '',
    indices into p of the parts that touch the plane but do not stand on it: walls and legs passing through it,
    a wall beside the support, sheets of the support itself; they never move with what stands on it).
    """
    sd = p @ n - d  # [M]
    above = np.flatnonzero(sd > band)
    slab = np.flatnonzero(np.abs(sd) <= band)
    # below the slab, past its first voxel (the support's own thickness and noise): what a wall or a leg that
    # passes through the plane leaves there
    below_layer = np.flatnonzero((sd < -band - voxel) & (sd >= -band - 3.0 * voxel))
    if above.shape[0] == 0 or slab.shape[0] == 0:
        return [], float(w[above].sum()), "nothing above the plane", np.zeros(0, dtype=np.int64)
    B = plane_axes(n)
    pa = p[above]
    lo = pa.min(0)
    ijk = np.floor((pa - lo) / voxel).astype(np.int64)  # [A, 3]
    dims = ijk.max(0) + 1
    occ = np.zeros(tuple(dims), dtype=bool)
    occ[tuple(ijk.T)] = True
    labels, k = ndimage.label(occ, structure=_FULL_3D)
    lab = labels[tuple(ijk.T)]  # [A] 1..k
    mass = np.bincount(lab, weights=w[above], minlength=k + 1)
    total = float(mass.sum())
    slab2 = p[slab] @ B.T
    slab_tree = cKDTree(slab2)
    below_tree = cKDTree(p[below_layer] @ B.T) if below_layer.shape[0] else None
    out = []
    through = []
    worst = ""
    worst_label = 0  # the part whose failure ``worst`` says
    unstable = []  # (label, idx, carried contact, contact 2-D) of the parts that failed only the stability test
    stood = []  # (label, idx, contact, contact 2-D) of the parts that stand
    for c in np.argsort(-mass[1:]) + 1:
        if mass[c] < min_part * total:
            break
        idx = above[lab == c]
        contact = idx[sd[idx] <= band + voxel]
        what = None
        if contact.shape[0] < 3:
            what = "does not touch the plane"
        else:
            c2 = p[contact] @ B.T
            if below_tree is not None:
                dist, _ = below_tree.query(c2, k=1, distance_upper_bound=0.75 * voxel)
                if np.mean(np.isfinite(dist)) > 0.5:
                    what = "continues below the plane, as a wall or a leg does"
            if what is None:
                dist, _ = slab_tree.query(c2, k=1, distance_upper_bound=2.0 * voxel)
                carried = np.isfinite(dist)
                if np.mean(carried) < 0.5:
                    what = "is not carried by the plane's points"
                else:  # stability on the contact the plane's points carry (not on a rim that overhangs it)
                    contact, c2 = contact[carried], c2[carried]
            if what is None and _is_sheet(p[idx], w[idx], n):
                what = "is a sheet parallel to it, the plane's own surface cut by a tilted plane"
            if what is None and not _stable(p, w, sd, idx, c2, B, band, voxel):
                what = "is not stable on it: its centre of mass is outside its contact, or it stands on an edge"
                if not _on_edge(sd, idx, c2, band):  # (a wall or a sheet on its edge is never grouped)
                    unstable.append((c, idx, contact, c2))
        if what is None:
            out.append((idx, contact))
            stood.append((c, idx, contact, c2))
        elif what != "does not touch the plane":  # touches it, but passes through it or stands beside it
            through.append((c, idx))
        if what is not None and not worst:
            worst, worst_label = f"the largest part above it {what}", c
    # a body that the voxels split (a toy's leg, a gap at its hip a voxel wide) stands on all its contact: a part
    # whose centre of mass lies outside its own wide contact stands with the standing parts within GROUP_VOXELS of
    # it, when together they are stable
    for c, idx, contact, c2 in unstable:
        near = ndimage.binary_dilation(labels == c, structure=_FULL_3D, iterations=GROUP_VOXELS)
        mates = set(np.unique(labels[near]).tolist()) - {0, c}
        group = [g for g in stood if g[0] in mates]
        if not group:
            continue
        g_idx = np.concatenate([idx] + [g[1] for g in group])
        g_c2 = np.concatenate([c2] + [g[3] for g in group])
        if _stable(p, w, sd, g_idx, g_c2, B, band, voxel):
            out.append((idx, contact))
            through = [t for t in through if t[0] != c]
            stood.append((c, idx, contact, c2))
            if c == worst_label:  # (it stands after all: what it said no longer holds)
                worst = ""
    out.sort(key=lambda t: -float(w[t[0]].sum()))
    return out, total, worst, (np.concatenate([t[1] for t in through]) if through else np.zeros(0, dtype=np.int64))


def _on_edge(sd: np.ndarray, idx: np.ndarray, c2: np.ndarray, band: float) -> bool:
    """Whether the contact c2 (K, 2) of the points idx is an edge: its hull narrower than a tenth of their height
    over the plane (``sd``: signed distances; ``band``: the slab's half-thickness)."""
    return _hull_width(c2) < 0.1 * (float(np.quantile(sd[idx], 0.98)) - band)


def _stable(p: np.ndarray, w: np.ndarray, sd: np.ndarray, idx: np.ndarray, c2: np.ndarray, B: np.ndarray,
            band: float, voxel: float) -> bool:
    """Whether the points idx (weights w, signed distances sd to the plane) stand stably on their carried contact
    c2 (K, 2), in the plane's axes B: the centre of mass projected into the contact's hull (within a tenth of its
    size) and the hull at least a tenth of their height wide (not an edge)."""
    com = (w[idx, None] * p[idx]).sum(0) / max(float(w[idx].sum()), 1e-30)
    margin = _hull_margin(c2, B @ com)
    height = float(np.quantile(sd[idx], 0.98)) - band
    return not (margin > 0.1 * max(_hull_size(c2), voxel) or _hull_width(c2) < 0.1 * height)


def _carrying_region(slab2: np.ndarray, contact: np.ndarray, p: np.ndarray, B: np.ndarray, voxel: float):
    """The slab points (S, 2), projected, that form one connected surface (2-D occupancy at ``voxel``,
    8-connected) with the points under the contacts ``contact`` (indices into p): the support itself, not other
    things the plane happens to slice (floaters, a wall's edge, the top of a ball)."""
    piece_of = _slab_pieces(slab2, voxel)
    under = np.unique(piece_of(p[contact] @ B.T))
    under = under[under > 0]
    return slab2[np.isin(piece_of(slab2), under)]


def _slab_pieces(slab2: np.ndarray, voxel: float):
    """The connected pieces of the projected slab points ``slab2`` (S, 2) (2-D occupancy grid at ``voxel``, scene
    units, 8-connected), as a function mapping any (K, 2) projected points to their piece, (K,) int64 (1..; 0:
    outside every slab cell)."""
    lo = slab2.min(0)
    ij = np.floor((slab2 - lo) / voxel).astype(np.int64)  # [S, 2]
    dims = ij.max(0) + 1
    occ = np.zeros(tuple(dims), dtype=bool)
    occ[tuple(ij.T)] = True
    labels, _ = ndimage.label(occ, structure=np.ones((3, 3), dtype=bool))

    def piece_of(q2: np.ndarray) -> np.ndarray:
        cij = np.floor((q2 - lo) / voxel).astype(np.int64)
        ok = np.all((cij >= 0) & (cij < dims), axis=1)
        out = np.zeros(q2.shape[0], dtype=np.int64)
        out[ok] = labels[tuple(cij[ok].T)]
        return out

    return piece_of


def _on_one_piece(slab2: np.ndarray, parts, p: np.ndarray, w: np.ndarray, B: np.ndarray, voxel: float) -> bool:
    """Whether what stands on the plane is carried by one piece of its surface: the standing parts' joint centre
    of mass, projected, lies inside the hull of their contacts over some single connected piece of the slab (2-D
    occupancy at ``voxel``, 8-connected; within a tenth of that hull's size, the margin of :func:`_stable`). A table,
    a floor, a plinth's lid is one surface around and under an object's footprint, even cut off at its edge; the
    pads of an object lying on them (a drone's four propeller discs, the feet of an upturned table) are separate
    pieces, none of which carries its centre of mass."""
    piece_of = _slab_pieces(slab2, voxel)
    idx = np.concatenate([a for a, _ in parts])
    contact = np.concatenate([c for _, c in parts])
    com = B @ ((w[idx, None] * p[idx]).sum(0) / max(float(w[idx].sum()), 1e-30))
    c2 = p[contact] @ B.T  # [K, 2]
    lab = piece_of(c2)  # [K] the piece under each contact (0: none)
    for piece in np.unique(lab[lab > 0]):
        on = c2[lab == piece]
        if on.shape[0] >= 3 and _hull_margin(on, com) <= 0.1 * max(_hull_size(on), voxel):
            return True
    return False


def _candidates(p: np.ndarray, rng: np.random.Generator, band: float, hypotheses: int, max_planes: int,
                axis_layers: int = 2):
    """Distinct well-populated planes of the subsample (PCA normals of random seeds, refined by least squares),
    plus the ``axis_layers`` densest layers (a band thick) across each coordinate axis, refined likewise."""
    m = p.shape[0]
    seeds = np.sort(rng.choice(m, size=min(hypotheses, m), replace=False))
    normals = _local_normals(p, seeds, 16)  # [H, 3]
    offsets = np.einsum("hi,hi->h", normals, p[seeds])  # [H]
    inl, above, below = _score(p, normals, offsets, band)
    # a support has most of what is off it on one side (a wall or a leg crossing it only partly): rank by inliers
    # times that one-sidedness, so the flat panels of a tall object do not crowd out a small floor
    minority = np.minimum(above, below) / np.maximum(above + below, 1)
    rank = inl * np.clip(1.0 - 2.0 * minority, 0.0, 1.0)
    planes: List[Tuple[np.ndarray, float]] = []
    near = np.zeros(normals.shape[0], dtype=bool)  # hypotheses close to one already refined or kept
    cos25 = np.cos(np.deg2rad(25.0))

    def close_to(n_k: np.ndarray, d_k: float) -> np.ndarray:  # [H] hypotheses close to the plane (either
        # orientation): the panels of one curved surface (a coat's side) would otherwise fill the list and leave
        # out a smaller floor
        c = normals @ n_k
        return (np.abs(c) > cos25) & (np.abs(offsets - c * d_k) < 3 * band)

    def keep(n_r: np.ndarray, d_r: float) -> bool:
        """Add the refined plane unless a kept one is close to it (25 degrees, 3 bands); of two close ones the
        clearly better-populated (:data:`REPLACE_RATIO` x the inliers) replaces the first (a fit pulled askew by what
        stands on a table top must not shadow the top's own layer; near equals keep the first). Returns whether it
        was added."""
        dup = [i for i, (q, e) in enumerate(planes) if abs(n_r @ q) > cos25 and abs(d_r - (n_r @ q) * e) < 3 * band]
        if not dup:
            planes.append((n_r, d_r))
            return True
        count = lambda n_, d_: int(np.count_nonzero(np.abs(p @ n_ - d_) <= band))  # noqa: E731
        i = dup[0]
        if count(n_r, d_r) > REPLACE_RATIO * count(*planes[i]):
            planes[i] = (n_r, d_r)
        return False

    for h in np.argsort(-rank, kind="stable"):
        if rank[h] < 0.005 * m or len(planes) >= max_planes:
            break
        if near[h]:
            continue
        near |= close_to(normals[h], float(offsets[h]))
        n_r, d_r = _refine(p, normals[h], offsets[h], band)
        n_r = n_r / np.linalg.norm(n_r)
        if keep(n_r, float(d_r)):
            near |= close_to(n_r, float(d_r))
    # the densest thin layers across each of the file's axes: a small plinth or table top in a levelled capture
    # holds few points next to the walls and panels above, but it is the densest layer along the up axis
    for a in range(3):
        h = p[:, a]
        lo, hi = float(h.min()), float(h.max())
        bins = int(min(4096, max(1, np.ceil((hi - lo) / band))))
        counts, edges = np.histogram(h, bins=bins, range=(lo, hi))
        for b in np.argsort(-counts)[:axis_layers]:
            if counts[b] < max(0.005 * m, 3.0 * np.median(counts[counts > 0])):
                break
            n_a = np.eye(3)[a]
            n_r, d_r = _refine(p, n_a, 0.5 * float(edges[b] + edges[b + 1]), band)
            keep(n_r / np.linalg.norm(n_r), float(d_r))
    return planes


#: a support carries at least this share of the opacity mass above it (the parts standing on it, not walls and
#: shelves beside them): below it the plane runs through a body
MIN_STANDING_FRACTION = 0.25


def find_support(p: np.ndarray, w: np.ndarray, rng: np.random.Generator, *, band: float, voxel: float,
                 hypotheses: int = 1024, max_planes: int = 10, min_beyond: float = 0.05,
                 min_share: float = 1.0, unsure_ratio: float = 0.7, prior: Optional[np.ndarray] = None,
                 min_wide: float = 0.15, min_width: float = 1.0, min_standing: float = 0.1,
                 prior_fixed: bool = False):
    """The support plane of the subsample p (M, 3) float64 (scene units) with opacity weights w (M,).

    ``band``: slab half-thickness; ``voxel``: occupancy voxel edge of the standing test; ``min_beyond``: least
    fraction of the plane's points outside the footprint of what stands on it; ``min_share``: least mass of what
    stands on it relative to the mass on its other side under its carrying surface; a runner-up with another normal
    (> 20 degrees) scoring ``unsure_ratio`` of the winner (standing mass x inlier fraction) makes the result unsure.
    ``prior``: the (3,) unit up vector of the file's convention, or None: between near-equal candidates the one
    within 30 degrees of it wins (and is sure), and a support reaching less than ``min_wide`` beyond what stands on
    it is trusted only when it agrees with the prior (else None is returned, unsure). ``min_width``: least area of
    a support's carrying surface (the widest of its parallel layers) over the footprint of what stands on it.
    ``min_standing``: least share of the subsample's mass that stands on a support.
    ``prior_fixed``: the prior is the known up (recorded in the file): only planes within 30 degrees of it are
    examined (a flat part of a deformed or tipped object is not the support of a scene whose up is known).

    Returns (best accepted :class:`SupportCandidate` or None, reason (one sentence), unsure (bool), every
    candidate examined).
    """
    m = p.shape[0]
    if m < 32:
        return None, f"only {m} opaque non-floater points", False, []
    w_total = float(w.sum())
    examined: List[SupportCandidate] = []
    orientations = []
    for n0, d0 in _candidates(p, rng, band, hypotheses, max_planes):
        sd0 = p @ n0 - d0
        for sgn in (1.0, -1.0):
            n, d = sgn * n0, sgn * d0
            sd = sgn * sd0
            n_in = int(np.count_nonzero(np.abs(sd) <= band))
            n_ab, n_be = int(np.count_nonzero(sd > band)), int(np.count_nonzero(sd < -band))
            cand = SupportCandidate(normal=n, offset=d, inliers=n_in, inlier_fraction=n_in / m,
                                    minority=n_be / max(n_ab + n_be, 1))
            examined.append(cand)
            # the most it could score: all of the mass above it standing on it
            orientations.append((float(w[sd > band].sum()) * cand.inlier_fraction, cand, sd, n_ab))
    best_score = 0.0
    cos15 = np.cos(np.deg2rad(15.0))
    cos30 = np.cos(np.deg2rad(30.0))
    for bound, cand, sd, n_ab in sorted(orientations, key=lambda t: -t[0]):
        n, d = cand.normal, cand.offset
        if prior_fixed and prior is not None and float(n @ prior) < cos30:
            cand.why = ("more than 30 degrees from the known up (recorded in the file, from the capture's cameras, or "
                        "given with --up)")
            continue
        # (half the rival threshold: the best so far may still give way to a nearer support, and the rival test
        # is then made against that one)
        if bound < 0.5 * unsure_ratio * best_score and not any(a.accepted and a.normal @ n > cos15 for a in examined):
            cand.why = "not examined: it could not carry as much as the support found"  # (nor be its rival)
            continue
        if n_ab < 0.02 * m:
            cand.why = "nothing stands on it"
            continue
        parts, total, worst, through = standing_parts(p, w, n, d, band, voxel)
        if not parts:
            cand.why = worst or "nothing stands on it"
            continue
        idx = np.concatenate([a for a, _ in parts])
        B = plane_axes(n)
        # the footprint of the bodies standing on it: their points clear of the surface layer (the support's own
        # noise and layers, which the contact test counts as touching, must not stretch it to the support's rim)
        high = idx[sd[idx] > band + voxel]
        foot = p[high if high.shape[0] >= 3 else idx] @ B.T
        slab2 = _carrying_region(p[np.abs(sd) <= band] @ B.T, np.concatenate([c for _, c in parts]), p, B, voxel)
        if slab2.shape[0] < 3:
            cand.why = "none of its surface lies under what stands on it"
            continue
        try:
            hull = ConvexHull(foot)
            eq = hull.equations
            outside = np.max(slab2 @ eq[:, :2].T + eq[:, 2], axis=1) > 0.25 * voxel
            beyond = float(outside.mean())
        except QhullError:
            beyond = 1.0
        cand.standing_mass = float(w[idx].sum())
        cand.standing_fraction = cand.standing_mass / max(total, 1e-30)
        cand.parts = len(parts)
        cand.beyond = beyond
        # what hangs below the support itself: the other side's mass under its carrying surface (a table's legs
        # and underside, a plinth; not the wider floor a plate or a table stands on)
        under = np.flatnonzero(sd < -band)
        far = 0.0
        if under.shape[0]:
            try:
                eqs = ConvexHull(slab2).equations
                inside = np.max((p[under] @ B.T) @ eqs[:, :2].T + eqs[:, 2], axis=1) <= 0.5 * voxel
                far = float(w[under[inside]].sum())
            except QhullError:
                far = float(w[under].sum())
        if cand.standing_mass < min_standing * w_total:  # a floater or a leaf tip beside a plant is not what the
            # capture is framed on
            cand.why = (f"what stands on it is {cand.standing_mass / max(w_total, 1e-30):.0%} of the capture: not "
                        "what it was framed on")
            continue
        if cand.standing_fraction < MIN_STANDING_FRACTION:  # a plane through a body (a drone's frame plate)
            # carries a small part of what lies above it; a support carries most of it (real captures 90-100 %,
            # generated ones with walls and shelves 45 % and more; the yellow drone's plate 15 %)
            cand.why = (f"what stands on it is {cand.standing_fraction:.0%} of the mass above it: a plane through "
                        "a body, not under it")
            continue
        if cand.standing_mass < min_share * far:  # a chip cut off a body (an ear, a leaf) is not what a
            # capture shows standing on its support
            cand.why = (f"what stands on it is {cand.standing_mass / max(far, 1e-30):.0%} of the mass on its other "
                        "side: a piece cut off a body, or the body upside down")
            continue
        if beyond < min_beyond:
            cand.why = (f"it ends at the footprint of what stands on it ({beyond:.0%} of it beyond): the flat "
                        "base of the object itself")
            continue
        if ONE_PIECE and not _on_one_piece(slab2, parts, p, w, B, voxel):
            cand.why = ("no one piece of it carries what stands on it (its centre of mass lies between separate "
                        "pieces: pads of the object, such as propeller discs, not a surface it stands on)")
            continue
        deep = (sd < -band - voxel) & (sd >= -band - 3.0 * voxel)
        if deep.any():  # a support is a surface with little right under it; a cut through a body is not
            dist, _ = cKDTree(slab2).query(p[deep] @ B.T, k=1, distance_upper_bound=0.75 * voxel)
            # points per unit thickness right under the surface, over those in it: a cut through a body (a
            # surface crossing the plane) continues below as densely as it is in the slab; a table top or a
            # plinth's lid is a dense layer over its sparser legs, walls and inside
            cut = float(np.count_nonzero(np.isfinite(dist)) / (2.0 * voxel)) / max(slab2.shape[0] / (2.0 * band),
                                                                                  1e-30)
            if cut > 0.5:
                cand.why = (f"it cuts through a body (right under it the points are {cut:.0%} as dense as in it): "
                            "not a surface")
                continue
        cand.accepted = True
        best_score = max(best_score, cand.standing_mass * cand.inlier_fraction)
        cand.standing, cand.slab = idx, np.flatnonzero(np.abs(sd) <= band)
        cand.parts_idx = [a for a, _ in parts]
        cand.through = through
        cand.carried = float(np.mean([c.shape[0] for _, c in parts]) > 0)
        cand.width_ratio = _hull_size(slab2) ** 2 / max(_hull_size(foot) ** 2, 1e-300)
    accepted = [c for c in examined if c.accepted]
    # a support is at least as wide as what stands on it: the hull of its carrying surface covers the footprint's
    # area (the best of its layers: paper, cloth, a noisy top). A flat face of an isolated object (a chair's back,
    # a figure's side, a guitar's body) is narrower than the rest of the object standing on it.
    cos15 = np.cos(np.deg2rad(15.0))
    wide = [max(b.width_ratio for b in accepted if b.normal @ a.normal > cos15) for a in accepted]
    for a, wr in zip(accepted, wide):
        if wr < min_width:
            a.accepted = False
            a.why = (f"it is narrower than the footprint of what stands on it (area x{wr:.2f}): a face of the "
                     "object, not a support")
    accepted = [c for c in examined if c.accepted]
    # the nearest support: a plane whose standing parts hold a parallel support's surface (the floor under a table)
    # carries that support, not the object on it
    mask = np.zeros(m, dtype=bool)
    nearest = []
    for a in accepted:
        mask[:] = False
        mask[a.standing] = True
        if not any(b is not a and b.normal @ a.normal > np.cos(np.deg2rad(15.0)) and mask[b.slab].mean() >= NEAREST_HELD
                   for b in accepted):
            nearest.append(a)
    # what it carries, times how much of the capture it is: a table top carries the object and is most of what a
    # capture of a tabletop object shows; a wall the object happens to touch is neither
    accepted = sorted(nearest or accepted, key=lambda c: -c.standing_mass * c.inlier_fraction)
    if not accepted:
        tried = [c for c in examined if c.why][:1]  # the best-populated candidate and why it is not one
        detail = "".join(f"; of the best-populated one ({c.inlier_fraction:.1%} of the points), {c.why}"
                         for c in tried)
        return None, f"no plane carries the object{detail}", True, examined
    score = lambda c: c.standing_mass * c.inlier_fraction  # noqa: E731
    top = accepted[0]
    if prior is not None:  # between near equals, the one the file's own convention agrees with
        near = [c for c in accepted if score(c) >= unsure_ratio * score(top)]
        top = next((c for c in near if c.normal @ prior > np.cos(np.deg2rad(30.0))), top)
    # planes within 15 degrees of the chosen one are the same support seen through noise, a layer or a slightly
    # tilted top: of those, the best-populated fit
    same = [c for c in accepted if c.normal @ top.normal > np.cos(np.deg2rad(15.0))]
    best = max(same, key=lambda c: c.inliers)
    reach = max(c.beyond for c in same)  # how far the support reaches past what stands on it: the layer of it
    # (paper, cloth, the noisy top) that shows it best
    rival = next((c for c in accepted if c.normal @ top.normal < np.cos(np.deg2rad(20.0))
                  and score(c) >= unsure_ratio * score(top)), None)
    reason = (f"support plane with {best.inlier_fraction:.1%} of sampled points carrying {best.parts} standing "
              f"part{'s' if best.parts > 1 else ''} ({best.standing_fraction:.0%} of the mass above it), "
              f"{reach:.0%} of it beyond their footprint")
    agrees = prior is not None and best.normal @ prior > np.cos(np.deg2rad(30.0))
    unsure = rival is not None and not agrees
    if unsure:
        ang = float(np.degrees(np.arccos(np.clip(rival.normal @ best.normal, -1, 1))))
        reason += f"; ambiguous: another plane {ang:.0f} degrees off scores {score(rival) / score(top):.0%} as much"
    if unsure and prior is not None:  # two planes carry as much and neither is the file's convention: keep that
        return None, reason + "; using the file's up-axis convention instead", True, examined
    if reach < min_wide and not agrees:
        # a support that hardly reaches past what stands on it, across the file's convention, is more often a flat
        # face of an isolated object (a chair's back, a figure's side) than a table cut to the footprint
        return None, (f"the best support candidate reaches only {reach:.0%} beyond what stands on it and is "
                      f"{np.degrees(np.arccos(np.clip(best.normal @ prior, -1, 1))) if prior is not None else 90:.0f} "
                      "degrees from the file's up-axis convention: too weak to trust"), True, examined
    if prior is not None and best.normal @ prior < -np.cos(np.deg2rad(30.0)):
        # the capture would be upside down in its own file's frame: possible (a flipped export), but as often the
        # flat face of an isolated object lying on it (a synthetic chair on its back): used, and said
        unsure = True
        reason += "; unsure: it turns the capture upside down against the file's up-axis convention"
    return best, reason, unsure, examined
