"""Procedural training shapes: unions of random solid primitives (method.md 7.2 "augment", issue 3 data).

A shape is a union of primitives (boxes, ellipsoids, cylinders, capsules, superquadrics), arranged as one of
several families: blobs (2-5 overlapping primitives), superquadrics with attachments, bodies with limbs
(chains of capsules), thin plates with rods, and bent rods. The whole union then gets a random rotation
and a mild anisotropic scale (a global linear map L).

There is no marching cubes here (scikit-image is not a dependency). Instead:

* **surface:** each primitive is tessellated (trimesh.creation, or our superquadric grid), the
  concatenation is mapped by L and sampled area-uniformly; samples lying strictly inside another primitive
  (analytic inside test, evaluated in the pre-L frame) are dropped. What remains is area-uniform on the
  union's boundary, up to the tessellation of curved primitives (< 1 % radial error).
* **interior:** uniform points in each primitive (rejection in its local box) with counts proportional to
  its volume, dropping those inside an earlier primitive, so the result is uniform in the union; L has a
  constant Jacobian, so it stays uniform after L.

Everything is seeded with ``numpy.random.default_rng(seed)``: the same seed gives bit-identical output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

import numpy as np
import torch

from physskin_gs.geometry.normalize import compute_normalization
from physskin_gs.scene import quat_to_rotmat

FAMILIES = ("blob", "superquadric", "limbs", "plate", "rod")


# --------------------------------------------------------------------------------------------- primitives
@dataclass
class Primitive:
    """One solid primitive in the shape frame.

    Attributes:
        kind: "box" | "ellipsoid" | "cylinder" | "capsule" | "superquadric".
        center: (3,) float64.
        rotation: (3, 3) float64, local -> shape frame (columns are the local axes).
        size: (3,) float64 half extents: box half sizes; ellipsoid/superquadric radii; cylinder (r, r, half
            height); capsule (r, r, half length of the axis segment, without the caps).
        exponents: (e1, e2) superquadric exponents (ignored otherwise).
    """

    kind: str
    center: np.ndarray
    rotation: np.ndarray
    size: np.ndarray
    exponents: Tuple[float, float] = (1.0, 1.0)

    def local(self, points: np.ndarray) -> np.ndarray:
        """(N, 3) shape-frame points -> (N, 3) local coordinates."""
        return (points - self.center) @ self.rotation

    def inside_value(self, points: np.ndarray) -> np.ndarray:
        """(N,) float: <= 0 inside, > 0 outside (a distance-like implicit function, shape-frame points)."""
        x = self.local(points)
        s = self.size
        if self.kind == "box":
            return (np.abs(x) - s).max(axis=1)
        if self.kind == "ellipsoid":
            return (np.linalg.norm(x / s, axis=1) - 1.0) * s.min()
        if self.kind == "cylinder":
            return np.maximum(np.linalg.norm(x[:, :2], axis=1) - s[0], np.abs(x[:, 2]) - s[2])
        if self.kind == "capsule":
            z = np.clip(x[:, 2], -s[2], s[2])
            return np.sqrt(x[:, 0] ** 2 + x[:, 1] ** 2 + (x[:, 2] - z) ** 2) - s[0]
        if self.kind == "superquadric":
            e1, e2 = self.exponents
            a = np.abs(x / s) + 1e-300
            f = (a[:, 0] ** (2.0 / e2) + a[:, 1] ** (2.0 / e2)) ** (e2 / e1) + a[:, 2] ** (2.0 / e1)
            return (f ** (e1 / 2.0) - 1.0) * s.min()
        raise ValueError(f"unknown primitive kind {self.kind!r}")

    def local_bound(self) -> np.ndarray:
        """(3,) half extents of the local axis-aligned bounding box."""
        s = self.size
        if self.kind == "capsule":
            return np.array([s[0], s[0], s[2] + s[0]])
        return s.copy()

    def tessellate(self) -> Tuple[np.ndarray, np.ndarray]:
        """(vertices (V, 3) float64 in the shape frame, faces (F, 3) int64), outward oriented."""
        import trimesh

        s = self.size
        if self.kind == "box":
            m = trimesh.creation.box(extents=2 * s)
            v, f = np.asarray(m.vertices), np.asarray(m.faces)
        elif self.kind == "ellipsoid":
            m = trimesh.creation.icosphere(subdivisions=3)
            v, f = np.asarray(m.vertices) * s, np.asarray(m.faces)
        elif self.kind == "cylinder":
            m = trimesh.creation.cylinder(radius=s[0], height=2 * s[2], sections=48)
            v, f = np.asarray(m.vertices), np.asarray(m.faces)
        elif self.kind == "capsule":
            m = trimesh.creation.capsule(height=2 * s[2], radius=s[0], count=[24, 24])
            v, f = np.asarray(m.vertices), np.asarray(m.faces)
        elif self.kind == "superquadric":
            v, f = _superquadric_mesh(s, *self.exponents)
        else:
            raise ValueError(f"unknown primitive kind {self.kind!r}")
        return v @ self.rotation.T + self.center, f.astype(np.int64)


def _spow(x: np.ndarray, e: float) -> np.ndarray:
    return np.sign(x) * np.abs(x) ** e


def _superquadric_mesh(a: np.ndarray, e1: float, e2: float, nu: int = 48, nv: int = 96):
    """Lat-long tessellation of a superquadric with radii a and exponents (e1, e2); poles included."""
    u = np.linspace(-np.pi / 2, np.pi / 2, nu + 1)  # latitude
    v = np.linspace(-np.pi, np.pi, nv, endpoint=False)  # longitude
    uu, vv = np.meshgrid(u, v, indexing="ij")  # [nu+1, nv]
    cu, su = _spow(np.cos(uu), e1), _spow(np.sin(uu), e1)
    x = a[0] * cu * _spow(np.cos(vv), e2)
    y = a[1] * cu * _spow(np.sin(vv), e2)
    z = a[2] * su
    verts = np.stack([x, y, z], axis=-1).reshape(-1, 3)
    i, j = np.meshgrid(np.arange(nu), np.arange(nv), indexing="ij")
    p00 = (i * nv + j).ravel()
    p01 = (i * nv + (j + 1) % nv).ravel()
    p10 = ((i + 1) * nv + j).ravel()
    p11 = ((i + 1) * nv + (j + 1) % nv).ravel()
    faces = np.concatenate([np.stack([p00, p01, p11], 1), np.stack([p00, p11, p10], 1)])
    # Orient outward: the signed volume must be positive.
    tri = verts[faces]
    if np.einsum("ij,ij->i", tri[:, 0], np.cross(tri[:, 1], tri[:, 2])).sum() < 0:
        faces = faces[:, ::-1]
    return verts, faces


def random_rotation(rng: np.random.Generator) -> np.ndarray:
    """(3, 3) uniformly random proper rotation (from a normalised Gaussian quaternion)."""
    q = torch.from_numpy(rng.normal(size=4))  # float64; normalised by quat_to_rotmat
    return quat_to_rotmat(q).numpy()


def _frame_along(direction: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Rotation whose local z axis is ``direction`` (random roll)."""
    zax = direction / np.linalg.norm(direction)
    tmp = rng.normal(size=3)
    xax = tmp - tmp.dot(zax) * zax
    xax /= np.linalg.norm(xax)
    return np.stack([xax, np.cross(zax, xax), zax], axis=1)


def _random_primitive(rng: np.random.Generator, center: np.ndarray, scale: float = 1.0,
                      kinds=("box", "ellipsoid", "cylinder", "capsule")) -> Primitive:
    kind = str(rng.choice(kinds))
    size = rng.uniform(0.15, 0.55, size=3) * scale
    if kind in ("cylinder", "capsule"):
        r = rng.uniform(0.1, 0.35) * scale
        size = np.array([r, r, rng.uniform(0.15, 0.6) * scale])
    return Primitive(kind, np.asarray(center, dtype=np.float64), random_rotation(rng), size)


def _random_superquadric(rng: np.random.Generator, center, scale=1.0) -> Primitive:
    e = (float(rng.uniform(0.3, 1.6)), float(rng.uniform(0.3, 1.6)))
    return Primitive("superquadric", np.asarray(center, dtype=np.float64), random_rotation(rng),
                     rng.uniform(0.25, 0.7, size=3) * scale, e)


def _point_on(prim: Primitive, rng: np.random.Generator) -> np.ndarray:
    """A random point on the surface of a primitive (radial projection of a random direction)."""
    d = rng.normal(size=3)
    d /= np.linalg.norm(d)
    lo, hi = 0.0, float(np.linalg.norm(prim.local_bound())) * 1.01
    world_d = prim.rotation @ d
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        if prim.inside_value((prim.center + mid * world_d)[None])[0] <= 0:
            lo = mid
        else:
            hi = mid
    return prim.center + lo * world_d


def _chain(rng: np.random.Generator, start: np.ndarray, direction: np.ndarray, segments: int,
           radius: float, length: float) -> List[Primitive]:
    """Capsules joined end to end (a limb or a bent rod), each bending a little from the previous one."""
    prims, p, d = [], np.asarray(start, dtype=np.float64), direction / np.linalg.norm(direction)
    for _ in range(segments):
        half = length * rng.uniform(0.7, 1.2) / 2
        prims.append(Primitive("capsule", p + d * half, _frame_along(d, rng), np.array([radius, radius, half])))
        p = p + d * 2 * half
        bend = rng.normal(size=3) * 0.5
        d = d + bend - bend.dot(d) * d
        d /= np.linalg.norm(d)
        radius *= rng.uniform(0.75, 1.0)
    return prims


def random_primitives(family: str, rng: np.random.Generator) -> List[Primitive]:
    """Random primitives of one shape family (see :data:`FAMILIES`), in a frame of size about 1."""
    if family == "blob":
        prims = [_random_primitive(rng, np.zeros(3))]
        for _ in range(int(rng.integers(1, 5))):
            anchor = _point_on(prims[int(rng.integers(len(prims)))], rng)
            prims.append(_random_primitive(rng, anchor, scale=rng.uniform(0.5, 1.0)))
        return prims
    if family == "superquadric":
        prims = [_random_superquadric(rng, np.zeros(3))]
        for _ in range(int(rng.integers(0, 3))):
            prims.append(_random_primitive(rng, _point_on(prims[0], rng), scale=0.6))
        return prims
    if family == "limbs":
        body = Primitive(str(rng.choice(["ellipsoid", "box", "capsule"])), np.zeros(3), random_rotation(rng),
                         rng.uniform(0.25, 0.6, size=3))
        if body.kind == "capsule":
            body.size[1] = body.size[0]
        prims = [body]
        for _ in range(int(rng.integers(2, 7))):
            start = _point_on(body, rng)
            out = start - body.center
            prims += _chain(rng, start, out + rng.normal(size=3) * 0.3, int(rng.integers(1, 4)),
                            radius=rng.uniform(0.05, 0.12), length=rng.uniform(0.25, 0.5))
        return prims
    if family == "plate":
        thick = rng.uniform(0.04, 0.12)
        plate = Primitive(str(rng.choice(["box", "cylinder"])), np.zeros(3), random_rotation(rng),
                          np.array([rng.uniform(0.4, 0.8), rng.uniform(0.25, 0.8), thick]))
        if plate.kind == "cylinder":
            plate.size[1] = plate.size[0]
        prims = [plate]
        for _ in range(int(rng.integers(0, 3))):
            start = _point_on(plate, rng)
            prims += _chain(rng, start, rng.normal(size=3), 1, radius=rng.uniform(0.04, 0.1),
                            length=rng.uniform(0.3, 0.8))
        return prims
    if family == "rod":
        d = rng.normal(size=3)
        segs = int(rng.integers(1, 5))
        length = rng.uniform(1.5, 2.5) / segs
        start = -d / np.linalg.norm(d) * length * segs / 2
        return _chain(rng, start, d, segs, radius=rng.uniform(0.06, 0.15), length=length)
    raise ValueError(f"unknown shape family {family!r}; expected one of {FAMILIES}")


# ---------------------------------------------------------------------------------------------- shapes
@dataclass
class ProceduralShape:
    """A procedural union of primitives and its samples, in the normalised frame ([-1, 1] on the longest axis).

    Attributes:
        name: ``procedural_<family>_<seed>``.
        family: one of :data:`FAMILIES`.
        surface: (S, 3) float32 area-uniform boundary points.
        normals: (S, 3) float32 unit outward normals.
        interior: (I, 3) float32 uniform points inside the union.
        primitives: the primitives, in the pre-transform shape frame.
        linear: (3, 3) the global map L (rotation times mild anisotropic scale) followed by the normalisation:
            ``x_norm = (L x_shape - center) / scale`` with ``center``/``scale`` below.
        center, scale: the normalisation applied after L.
    """

    name: str
    family: str
    surface: np.ndarray
    normals: np.ndarray
    interior: np.ndarray
    primitives: List[Primitive]
    linear: np.ndarray
    center: np.ndarray
    scale: float

    def contains(self, points: np.ndarray) -> np.ndarray:
        """(N,) bool: normalised-frame points inside the union (exact analytic test)."""
        x = (np.asarray(points, dtype=np.float64) * self.scale + self.center) @ np.linalg.inv(self.linear).T
        return _union_value(self.primitives, x) <= 0


def _union_value(prims: List[Primitive], x: np.ndarray) -> np.ndarray:
    return np.min(np.stack([p.inside_value(x) for p in prims]), axis=0)


def procedural_shape(seed: int, n_surface: int = 8192, n_interior: int = 12288, family: Optional[str] = None,
                     max_attempts: int = 8) -> ProceduralShape:
    """Generate one procedural shape, deterministically from ``seed``.

    Args:
        seed: any int; the same seed gives the same shape and samples.
        n_surface: number of surface samples (with normals).
        n_interior: number of interior samples.
        family: force a family (default: drawn from the seed).
        max_attempts: re-draws (deterministic) if a draw comes out too thin (an extent < 0.1 after normalising).

    Returns:
        :class:`ProceduralShape` in the normalised frame.
    """
    from physskin_gs.geometry.sampling import sample_surface

    for attempt in range(max_attempts):
        rng = np.random.default_rng([int(seed), attempt])
        fam = family or str(FAMILIES[int(rng.integers(len(FAMILIES)))])
        prims = random_primitives(fam, rng)
        lin = random_rotation(rng) @ np.diag(rng.uniform(0.75, 1.33, size=3))  # [3, 3]

        # Surface: tessellate, map by L, sample area-uniformly, drop samples inside other primitives.
        verts, faces, owner = [], [], []
        offset = 0
        for i, p in enumerate(prims):
            v, f = p.tessellate()
            verts.append(v)
            faces.append(f + offset)
            owner.append(np.full(f.shape[0], i))
            offset += v.shape[0]
        v_all = np.concatenate(verts) @ lin.T
        f_all, owner = np.concatenate(faces), np.concatenate(owner)
        cand_n = int(n_surface * 2.5) + 256
        kept_pts, kept_nrm = [], []
        total = 0
        for _round in range(6):
            pts, nrm, face = _sample_with_faces(v_all, f_all, cand_n, rng, sample_surface)
            x = pts.astype(np.float64) @ np.linalg.inv(lin).T
            own = owner[face]
            ok = np.ones(len(pts), dtype=bool)
            for j, p in enumerate(prims):
                ok &= ~((p.inside_value(x) < -1e-9) & (own != j))
            kept_pts.append(pts[ok])
            kept_nrm.append(nrm[ok])
            total += int(ok.sum())
            if total >= n_surface:
                break
        surface = np.concatenate(kept_pts)[:n_surface]
        normals = np.concatenate(kept_nrm)[:n_surface]

        # Interior: uniform per primitive, counts proportional to volume, drop points in earlier primitives.
        interior = _union_interior(prims, n_interior, rng) @ lin.T

        norm = compute_normalization(surface, allow_flat=True, what="procedural shape")
        s_n = norm.to_normalized(surface.astype(np.float64))
        extent = s_n.max(axis=0) - s_n.min(axis=0)
        if extent.min() >= 0.1 and surface.shape[0] >= n_surface and interior.shape[0] > 0:
            break
    return ProceduralShape(
        name=f"procedural_{fam}_{int(seed)}",
        family=fam,
        surface=s_n.astype(np.float32),
        normals=normals.astype(np.float32),
        interior=norm.to_normalized(interior).astype(np.float32),
        primitives=prims,
        linear=lin,
        center=norm.center,
        scale=norm.scale,
    )


def _sample_with_faces(v, f, n, rng, sample_surface):
    """sample_surface plus the face index of each sample (re-derived from the same draw)."""
    from physskin_gs.geometry.sampling import triangle_areas_normals

    areas, normals = triangle_areas_normals(v, f)
    cdf = np.cumsum(areas) / areas.sum()
    face = np.minimum(np.searchsorted(cdf, rng.random(n) * cdf[-1], side="right"), len(areas) - 1)
    r1 = np.sqrt(rng.random(n))[:, None]
    r2 = rng.random(n)[:, None]
    tri = v[f[face]]
    pts = (1.0 - r1) * tri[:, 0] + r1 * (1.0 - r2) * tri[:, 1] + r1 * r2 * tri[:, 2]
    return pts.astype(np.float32), normals[face].astype(np.float32), face


def _union_interior(prims: List[Primitive], n: int, rng: np.random.Generator) -> np.ndarray:
    """(<= n, 3) float64 uniform points inside the union of primitives (shape frame)."""
    # Volume of each primitive by rejection in its local box.
    probe = 4096
    vols, boxes = [], []
    for p in prims:
        b = p.local_bound()
        u = (rng.random((probe, 3)) * 2 - 1) * b
        frac = (p.inside_value(u @ p.rotation.T + p.center) <= 0).mean()
        vols.append(max(frac, 1e-3) * 8 * np.prod(b))
        boxes.append((b, max(frac, 1e-3)))
    vols = np.asarray(vols)
    out, have = [], 0
    for _round in range(6):
        want = n - have
        if want <= 0:
            break
        for i, p in enumerate(prims):
            m = int(np.ceil(1.5 * want * vols[i] / vols.sum())) + 8
            b, frac = boxes[i]
            u = (rng.random((int(m / frac) + 16, 3)) * 2 - 1) * b
            x = u @ p.rotation.T + p.center
            x = x[p.inside_value(x) <= 0][:m]  # uniform in primitive i, count proportional to its volume
            ok = np.ones(x.shape[0], dtype=bool)
            for j in range(i):
                ok &= prims[j].inside_value(x) > 0  # keep only the part not already covered
            x = x[ok]
            out.append(x)
            have += x.shape[0]
    pts = np.concatenate(out) if out else np.zeros((0, 3))
    if pts.shape[0] > n:
        pts = pts[rng.choice(pts.shape[0], size=n, replace=False)]
    return pts
