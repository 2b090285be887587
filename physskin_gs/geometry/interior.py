"""Voxel interior fill for meshes and surface-only splats (method.md 7.2 and 8).

Pipeline (all steps vectorised, O(R^3) on the grid plus O(N) on the input points; no loop runs until
convergence):

1. **Shell:** rasterise surface points (mesh samples, or splat centres weighted by opacity) into a grid with
   cubic voxels, R voxels along the longest axis (R <= 128). Splats may also mark each Gaussian's 2-sigma
   axis-aligned box, with its radius clamped to <= 2 voxels (method.md 8.2).
2. **Close:** dilate the shell by ``dilation`` voxels (box structure) so small holes close.
3. **Fill**, ``method``:

   * ``"vote"``: a non-shell voxel is interior when >= 4 of its 6 axis directions hit a shell voxel, from a
     cumulative logical-or along each axis (method.md 7.2). Tolerates holes, open meshes, overlapping parts
     and soups; fills deep concavities (a mug's cup, the gap between a cow's legs).
   * ``"flood"``: exterior flood fill from the grid border (6-connected background,
     ``scipy.ndimage.binary_fill_holes``); exact for closed shells, but one hole leaks and empties it.
   * ``"auto"`` (default): flood fill, unless it leaked (its interior is < ``AUTO_LEAK_RATIO`` of the vote's),
     then the vote. On the spot validation (method.md 8.6) flood is more precise than the vote because the
     vote fills the concavities between the legs; on open meshes (teapot) flood leaks and the vote takes over.

4. **Open again:** erode the filled solid by ``dilation`` voxels, keeping the raw shell, so the solid does not
   grow by the dilation radius (a morphological closing of the shell, then filled).
5. **Sample:** interior points are the centres of solid voxels that hold no surface point and do not touch
   the outside of the solid (26-neighbourhood), plus uniform jitter within the voxel; at most ``max_points``
   of them (random subsample without replacement).

Volume estimate: ``V = (n_interior_voxels + 0.5 n_shell_voxels) * voxel_size^3``, where shell voxels are the
voxels holding surface points plus the small gaps the closing fills between them (:func:`close_shell`); the
surface cuts those roughly in half on average. This removes the
systematic over-estimate of counting every occupied voxel (method.md 8.7 counts shell + interior in full;
``SplatVolume.occupied_volume`` gives that figure too). On a unit sphere at R = 64 the error is < 2 %.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import Optional, Tuple, Union

import numpy as np
import torch

from physskin_gs.errors import OptionError
from physskin_gs.scene import quat_to_rotmat
from physskin_gs.geometry.normalize import DegenerateGeometryError, Normalization, compute_normalization, finite_rows
from physskin_gs.geometry.sampling import (cell_centroids, farthest_point_sampling, grid_cells, sample_surface,
                                           triangle_areas_normals)

ArrayLike = Union[np.ndarray, torch.Tensor]

#: Largest accepted grid resolution (voxels along the longest axis), method.md 8.4.
MAX_RESOLUTION = 128
#: Log-scales are clamped to at least this value inside numerics (method.md 8.1).
MIN_LOG_SCALE = -12.0
#: "auto" falls back from flood fill to the vote when the flood interior is below this fraction of the vote's.
AUTO_LEAK_RATIO = 0.5


class FillWarning(UserWarning):
    """The interior fill fell back to shell points only (empty interior or a leaky, box-filling one)."""


# --------------------------------------------------------------------------------------------- the grid
@dataclass(frozen=True)
class VoxelGrid:
    """An axis-aligned grid of cubic voxels.

    Attributes:
        origin: (3,) float64, position of the minimum corner of voxel (0, 0, 0), in the frame of the points.
        voxel_size: edge length of one voxel, same units.
        shape: (nx, ny, nz) voxel counts.
    """

    origin: np.ndarray
    voxel_size: float
    shape: Tuple[int, int, int]

    @classmethod
    def around(cls, lo: np.ndarray, hi: np.ndarray, resolution: int, pad: int = 2) -> "VoxelGrid":
        """Grid covering the box [lo, hi] with ``resolution`` voxels along its longest side plus ``pad`` on each side."""
        lo, hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
        extent = hi - lo
        vs = float(extent.max()) / resolution
        if not vs > 0:
            raise DegenerateGeometryError("cannot build a voxel grid around a single point")
        inner = np.maximum(np.ceil(extent / vs - 1e-9).astype(np.int64), 1)
        dims = inner + 2 * pad
        origin = (lo + hi) / 2.0 - dims * vs / 2.0
        return cls(origin=origin, voxel_size=vs, shape=tuple(int(d) for d in dims))

    @property
    def num_voxels(self) -> int:
        return int(np.prod(self.shape))

    def index(self, points: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """Voxel indices (N, 3) int64 of points (N, 3) and an (N,) bool mask of those inside the grid."""
        ijk = np.floor((np.asarray(points, dtype=np.float64) - self.origin) / self.voxel_size).astype(np.int64)
        ok = ((ijk >= 0) & (ijk < np.asarray(self.shape))).all(axis=1)
        return ijk, ok

    def flat_index(self, ijk: np.ndarray) -> np.ndarray:
        """Row-major flat index (N,) of in-range voxel indices (N, 3)."""
        return np.ravel_multi_index((ijk[:, 0], ijk[:, 1], ijk[:, 2]), self.shape)

    def centers(self, ijk: np.ndarray) -> np.ndarray:
        """(N, 3) float64 centres of voxels (N, 3) int."""
        return self.origin + (np.asarray(ijk, dtype=np.float64) + 0.5) * self.voxel_size

    def rasterize(self, points: np.ndarray, weights: Optional[np.ndarray] = None, threshold: float = 0.0) -> np.ndarray:
        """Bool grid of voxels whose summed point weights exceed ``threshold`` (any point when weights is None)."""
        ijk, ok = self.index(points)
        flat = self.flat_index(ijk[ok])
        if weights is None:
            occ = np.zeros(self.num_voxels, dtype=bool)
            occ[flat] = True
        else:
            acc = np.bincount(flat, weights=np.asarray(weights, dtype=np.float64)[ok], minlength=self.num_voxels)
            occ = acc > threshold
        return occ.reshape(self.shape)


# ------------------------------------------------------------------------------------ grid operations
def dilate_box(grid: np.ndarray, radius: Union[int, Tuple[int, int, int]]) -> np.ndarray:
    """Binary dilation with a (2rx+1, 2ry+1, 2rz+1) box, separable shifted ORs (no wrap-around). O(R^3 r)."""
    r = (radius,) * 3 if np.isscalar(radius) else tuple(radius)
    out = grid.copy()
    for axis, ra in enumerate(r):
        src = out.copy()
        for s in range(1, int(ra) + 1):
            if s >= src.shape[axis]:
                break
            lo = [slice(None)] * 3
            hi = [slice(None)] * 3
            lo[axis], hi[axis] = slice(0, -s), slice(s, None)
            out[tuple(hi)] |= src[tuple(lo)]
            out[tuple(lo)] |= src[tuple(hi)]
    return out


def erode_box(grid: np.ndarray, radius: int) -> np.ndarray:
    """Binary erosion with a (2r+1)^3 box; voxels outside the grid count as empty."""
    return ~dilate_box(~grid, radius) & _interior_of_border(grid.shape, radius)


def _interior_of_border(shape, r: int) -> np.ndarray:
    m = np.zeros(shape, dtype=bool)
    if all(s > 2 * r for s in shape):
        m[r : shape[0] - r, r : shape[1] - r, r : shape[2] - r] = True
    return m


def vote_interior(shell: np.ndarray, min_votes: int = 4) -> np.ndarray:
    """Interior by the axis vote (method.md 7.2): a non-shell voxel with >= ``min_votes`` of its 6 axis rays
    (+x, -x, +y, -y, +z, -z) hitting a shell voxel. Cumulative any along each axis: O(R^3), no ray loops.

    Args:
        shell: (nx, ny, nz) bool occupancy of the surface.
    Returns:
        (nx, ny, nz) bool, never True on a shell voxel.
    """
    votes = np.zeros(shell.shape, dtype=np.uint8)
    for axis in range(3):
        # For a non-shell voxel, "a shell voxel at index <= i" equals "at index < i": no shift is needed.
        votes += np.logical_or.accumulate(shell, axis=axis)
        votes += np.flip(np.logical_or.accumulate(np.flip(shell, axis=axis), axis=axis), axis=axis)
    return (votes >= min_votes) & ~shell


def vote_interior_reference(shell: np.ndarray, min_votes: int = 4) -> np.ndarray:
    """Plain per-voxel, per-ray reference of :func:`vote_interior` (small grids only, for tests)."""
    nx, ny, nz = shell.shape
    out = np.zeros_like(shell)
    for i in range(nx):
        for j in range(ny):
            for k in range(nz):
                if shell[i, j, k]:
                    continue
                hits = [
                    shell[i + 1 :, j, k].any(), shell[:i, j, k].any(),
                    shell[i, j + 1 :, k].any(), shell[i, :j, k].any(),
                    shell[i, j, k + 1 :].any(), shell[i, j, :k].any(),
                ]
                out[i, j, k] = sum(hits) >= min_votes
    return out


def flood_interior(shell: np.ndarray) -> np.ndarray:
    """Interior by exterior flood fill: non-shell voxels not 6-connected to the grid border."""
    from scipy.ndimage import binary_fill_holes

    return binary_fill_holes(shell) & ~shell


def solid_from_shell(shell0: np.ndarray, dilation: int = 1, method: str = "auto") -> Tuple[np.ndarray, str]:
    """Filled solid (shell + interior) from a raw shell grid (method.md 7.2 / 8.3); see the module docstring.

    Args:
        shell0: (nx, ny, nz) bool raw surface occupancy. The grid needs >= ``dilation`` + 1 empty padding voxels.
        dilation: closing radius in voxels (0-2).
        method: "auto", "vote" or "flood".

    Returns:
        (solid (nx, ny, nz) bool, superset of shell0; the method actually used: "vote" or "flood").
    """
    if method not in ("auto", "vote", "flood"):
        raise OptionError(f"unknown fill method {method!r}; expected 'auto', 'vote' or 'flood'")
    shell = dilate_box(shell0, dilation) if dilation > 0 else shell0
    used = method
    if method == "vote":
        interior = vote_interior(shell)
    else:
        interior = flood_interior(shell)
        if method == "auto":
            voted = vote_interior(shell)
            if interior.sum() < AUTO_LEAK_RATIO * voted.sum():
                interior, used = voted, "vote"
            else:
                used = "flood"
    solid = shell | interior
    if dilation > 0:
        solid = erode_box(solid, dilation) | shell0
    return solid, used


def close_shell(shell0: np.ndarray, dilation: int) -> np.ndarray:
    """Morphological closing of the raw shell (dilate, then erode, by ``dilation``), plus the raw shell: the
    shell with its small gaps filled. Gap voxels straddle the surface, so they count as shell, not interior."""
    if dilation <= 0:
        return shell0
    return erode_box(dilate_box(shell0, dilation), dilation) | shell0


def _sampling_mask(solid: np.ndarray, inner: np.ndarray) -> np.ndarray:
    """Interior voxels to sample: those whose 26 neighbours are all solid. The closing fills staircase corners
    just outside a curved surface; skipping voxels that touch the outside keeps jittered samples inside
    (the shell points cover that layer). Thin parts with no such voxel keep all interior voxels."""
    deep = inner & erode_box(solid, 1)
    return deep if deep.any() else inner


def _jittered_centers(grid: VoxelGrid, ijk: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return grid.centers(ijk) + (rng.random(ijk.shape) - 0.5) * grid.voxel_size


# --------------------------------------------------------------------------------------- meshes
@dataclass
class MeshVolume:
    """Surface and interior samples of a mesh in the normalised frame (method.md 7.2).

    Attributes:
        surface: (S, 3) float32 area-uniform surface points, normalised frame.
        normals: (S, 3) float32 unit face normals at those points (file orientation).
        interior: (I, 3) float32 interior points (jittered voxel centres), normalised frame.
        normalization: world -> normalised map of the mesh.
        volume: float, volume estimate in normalised units^3 (see module docstring).
        method: "vote" or "flood", the fill used.
        resolution: grid resolution along the longest axis.
    """

    surface: np.ndarray
    normals: np.ndarray
    interior: np.ndarray
    normalization: Normalization
    volume: float
    method: str
    resolution: int


def _watertight(verts: np.ndarray, faces: np.ndarray) -> bool:
    """True when every edge of the (vertex-welded) triangle mesh is shared by exactly two faces (trimesh)."""
    try:
        import trimesh

        return bool(trimesh.Trimesh(verts, faces, process=True).is_watertight)
    except Exception:  # noqa: BLE001 - a mesh trimesh cannot process is treated as open
        return False


def mesh_volume_points(
    mesh,
    n_surface: int = 4096,
    n_interior: int = 12288,
    R: int = 64,
    seed: int = 0,
    method: str = "auto",
    dilation: int = 1,
    allow_flat: bool = False,
) -> MeshVolume:
    """Surface samples plus voxel-fill interior samples of a triangle mesh, in the normalised frame.

    The mesh is normalised (method.md 7.2, flat meshes rejected), densely sampled (about 8 samples per voxel
    face area, 50k-400k points) to rasterise the shell, filled with :func:`solid_from_shell` (``auto``: the exterior
    flood fill for a watertight mesh, whose concavities the axis vote would fill), and the
    interior is sampled as jittered centres of the interior voxels (with replacement when there are fewer
    voxels than ``n_interior``).

    Args:
        mesh: a :class:`physskin_gs.io.mesh.Mesh` (or anything with ``vertices`` (V, 3) and ``faces`` (F, 3)).
        n_surface: number of returned area-uniform surface samples.
        n_interior: number of returned interior samples (0 when the fill is empty).
        R: voxels along the longest axis (8..128).
        seed: seeds every random draw.
        method / dilation: see :func:`solid_from_shell`.
        allow_flat: accept a flat mesh (a single triangle, a planar card): it has no interior, so
            ``interior`` is empty and ``volume`` 0; the surface samples are the whole body.

    Raises:
        DegenerateGeometryError: empty mesh, or flat (zero thickness) without ``allow_flat``.
        OptionError: R outside [8, 128].
    """
    if not 8 <= R <= MAX_RESOLUTION:
        raise OptionError(f"grid resolution R={R} outside [8, {MAX_RESOLUTION}]")
    rng = np.random.default_rng(seed)
    name = getattr(mesh, "name", "mesh")
    verts = np.asarray(mesh.vertices, dtype=np.float64)
    faces = np.asarray(mesh.faces, dtype=np.int64)
    used_v = np.unique(faces.reshape(-1)) if faces.size else np.zeros(0, dtype=np.int64)
    norm = compute_normalization(verts[used_v], allow_flat=allow_flat, what=name)
    vn = norm.to_normalized(verts)  # [V, 3]
    surface, normals = sample_surface(vn, faces, n_surface, rng=rng)

    lo, hi = vn[used_v].min(axis=0), vn[used_v].max(axis=0)
    grid = VoxelGrid.around(lo, hi, R, pad=dilation + 2)
    area = triangle_areas_normals(vn, faces)[0].sum()
    n_raster = int(np.clip(8.0 * area / grid.voxel_size**2, 50_000, 400_000))
    dense, _ = sample_surface(vn, faces, n_raster, rng=rng)
    shell0 = grid.rasterize(np.concatenate([dense, vn[used_v].astype(np.float32)]))
    if method == "auto" and _watertight(verts, faces):
        # a closed surface (or a union of closed parts) bounds exactly what the exterior flood leaves; the axis vote
        # would also fill deep concavities (between an ant's legs: a third of its "interior" was outside)
        method = "flood"
    solid, used = solid_from_shell(shell0, dilation=dilation, method=method)
    shell_c = close_shell(shell0, dilation)
    inner = solid & ~shell_c
    ijk = np.argwhere(_sampling_mask(solid, inner))  # [M, 3]
    if ijk.shape[0] > 0 and n_interior > 0:
        pick = rng.choice(ijk.shape[0], size=n_interior, replace=n_interior > ijk.shape[0])
        interior = _jittered_centers(grid, ijk[pick], rng).astype(np.float32)
    else:
        interior = np.zeros((0, 3), dtype=np.float32)
    volume = (inner.sum() + 0.5 * shell_c.sum()) * grid.voxel_size**3
    return MeshVolume(surface, normals, interior, norm, float(volume), used, R)


# --------------------------------------------------------------------------------------- splats
@dataclass
class SplatVolume:
    """Result of :func:`fill_splat_interior`; every length is in world (scene) units.

    Attributes:
        interior: (M, 3) float32 interior points (jittered voxel centres), M <= max_points; empty on fallback.
        shell: (K, 3) float32 centres of the kept Gaussians (finite, opacity >= threshold).
        occupancy: (nx, ny, nz) bool solid (shell + interior) grid.
        grid_origin: (3,) float64 world position of the minimum corner of voxel (0, 0, 0).
        voxel_size: float, voxel edge length.
        volume: float, volume estimate (module docstring), world units^3; on fallback the occupied volume.
        occupied_volume: float, (shell + interior voxels) * voxel_size^3 (method.md 8.7 literally).
        fallback: True when the interior was unusable and only shell points should be used.
        message: the warning text on fallback (also emitted as a :class:`FillWarning`), else "".
        method: "vote", "flood" or "none".
        normalization: world -> normalised map computed from the kept centres.
        kept: (N,) bool mask of the input Gaussians that were kept.
        elapsed: seconds spent.
    """

    interior: torch.Tensor
    shell: torch.Tensor
    occupancy: torch.Tensor
    grid_origin: np.ndarray
    voxel_size: float
    volume: float
    occupied_volume: float
    fallback: bool
    message: str
    method: str
    normalization: Optional[Normalization]
    kept: torch.Tensor
    elapsed: float = 0.0

    @property
    def points(self) -> torch.Tensor:
        """(K + M, 3) float32 volume points: shell centres then interior points (shell only on fallback)."""
        if self.fallback:
            return self.shell
        return torch.cat([self.shell, self.interior], dim=0)


def _as_numpy(x: Optional[ArrayLike], dtype=None) -> Optional[np.ndarray]:
    """numpy view/copy of x; float dtypes are kept unless ``dtype`` is given, others become float64."""
    if x is None:
        return None
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    x = np.asarray(x)
    if dtype is not None:
        return x.astype(dtype, copy=False)
    return x if x.dtype.kind == "f" else x.astype(np.float64)


def _box_radii_voxels(
    log_scales: np.ndarray, quats: Optional[np.ndarray], world_voxel: float, max_radius: int
) -> np.ndarray:
    """(N, 3) int per-axis voxel radii of each Gaussian's 2-sigma axis-aligned box, clamped to [0, max_radius]."""
    ls = np.nan_to_num(np.asarray(log_scales, dtype=np.float32), nan=MIN_LOG_SCALE, posinf=30.0, neginf=MIN_LOG_SCALE)
    s2 = np.exp(2.0 * np.clip(ls, MIN_LOG_SCALE, 30.0))  # [N, 3] variances along the local axes
    if quats is None:
        half = np.repeat(2.0 * np.sqrt(s2.max(axis=1, keepdims=True)), 3, axis=1)  # sphere around the 2-sigma ellipsoid
    else:
        q = np.nan_to_num(np.asarray(quats, dtype=np.float32), nan=0.0, posinf=0.0, neginf=0.0)
        R = quat_to_rotmat(torch.from_numpy(q)).numpy()  # [N, 3, 3]; zero quats -> identity
        # Sigma_aa = sum_k R_ak^2 s_k^2
        half = 2.0 * np.sqrt(np.einsum("nak,nk->na", R * R, s2))
    return np.clip(np.floor(half / world_voxel + 0.5), 0, max_radius).astype(np.int64)


def fill_splat_interior(
    means: ArrayLike,
    log_scales: Optional[ArrayLike] = None,
    opacities: Optional[ArrayLike] = None,
    resolution: int = 64,
    opacity_threshold: float = 0.05,
    max_points: int = 50_000,
    time_limit: float = 10.0,
    seed: int = 0,
    *,
    quats: Optional[ArrayLike] = None,
    mark_boxes: bool = False,
    max_box_radius: int = 2,
    dilation: int = 1,
    method: str = "auto",
    max_fill_fraction: float = 0.9,
) -> SplatVolume:
    """Interior points for a surface-only splat (method.md 8), bounded in time and memory.

    Steps: keep finite centres with opacity >= ``opacity_threshold``; normalise; rasterise the opacity-weighted
    centres into a grid of ``resolution`` voxels along the longest axis (a voxel is shell when its summed
    opacity reaches the threshold); optionally mark each Gaussian's 2-sigma box (radius <= ``max_box_radius``
    voxels, by grouping Gaussians by radius triple and dilating each group's grid: O(27 R^3), not O(N r^3));
    close, fill and sample as in the module docstring.

    With ``method="auto"`` the closing escalates until the exterior flood fill holds: raw shell with
    ``dilation``; then the 2-sigma boxes (needs ``log_scales``); then one more dilation voxel; if all leak,
    the axis vote on the raw shell. On ``spot_mesh2splat_10k.splat`` (method.md 8.6) this gives precision
    1.00, recall >= 0.998 and volume within 2 % at R = 32, 64 and 128 (the vote alone: precision 0.97 at R = 64).

    Fallback (``fallback=True``, a :class:`FillWarning`, only shell points in ``points``): fewer than 4 kept
    centres or a flat/zero-extent set; an empty interior; or, when the shell leaked (the vote was used), a solid
    filling more than ``max_fill_fraction`` of the centres' bounding box; or the wall clock passed
    ``time_limit`` before the fill step. A closed shell (flood fill succeeded) is never rejected for filling its
    box, so a cube-shaped object keeps its interior.

    Args:
        means: (N, 3) float, world units (NaN/Inf rows are dropped).
        log_scales: (N, 3) float log standard deviations (for the 2-sigma boxes; optional); clamped to
            [-12, 30] inside numerics, NaN treated as tiny. Never modified.
        opacities: (N,) float **activated** opacities in [0, 1] (``sigmoid(opacity_logits)``); None = all 1.
        resolution: voxels along the longest axis, 8..128.
        opacity_threshold: minimum opacity of a kept Gaussian (0.05-0.1, method.md 8.1).
        max_points: maximum number of interior points (random subsample without replacement).
        time_limit: wall-clock guard in seconds (checked between the vectorised stages).
        seed: seeds the jitter and subsampling.
        quats: optional (N, 4) wxyz quaternions (any norm) for exact 2-sigma boxes; without them the box is
            the bounding cube of the largest axis.
        mark_boxes: always mark the 2-sigma boxes (off by default: it thickens the shell and over-estimates the
            volume by ~5 % at R = 64; "auto" uses them only when the plain shell leaks).
        dilation: closing radius in voxels (1-2).
        method: "auto", "vote" or "flood" (see :func:`solid_from_shell`).
        max_fill_fraction: leak guard described above.

    Returns:
        :class:`SplatVolume`.

    Raises:
        DegenerateGeometryError: means is not (N, 3) or no Gaussian survives the filter.
        OptionError: resolution outside [8, 128].
    """
    t0 = time.perf_counter()
    if not 8 <= resolution <= MAX_RESOLUTION:
        raise OptionError(f"fill resolution {resolution} outside [8, {MAX_RESOLUTION}]")
    m = _as_numpy(means)
    if m is None or m.ndim != 2 or m.shape[1] != 3:
        raise DegenerateGeometryError(f"means must have shape (N, 3), got {None if m is None else m.shape}")
    n = m.shape[0]
    keep = finite_rows(m)
    op = None
    if opacities is not None:
        op = _as_numpy(opacities).reshape(-1)
        if op.shape[0] != n:
            raise DegenerateGeometryError(f"opacities has {op.shape[0]} rows, means has {n}")
        keep &= np.isfinite(op) & (op >= opacity_threshold)
    kept_idx = np.nonzero(keep)[0]
    if kept_idx.size == 0:
        raise DegenerateGeometryError(
            f"no Gaussians left after filtering ({n} given; need finite means and opacity >= {opacity_threshold})"
        )
    centers = m[kept_idx]  # [K, 3]
    shell_t = torch.from_numpy(np.ascontiguousarray(centers, dtype=np.float32))
    kept_t = torch.from_numpy(keep)
    rng = np.random.default_rng(seed)

    def fallback(msg: str, occ=None, grid=None, norm=None, method_used="none", volume=0.0) -> SplatVolume:
        warnings.warn(msg, FillWarning, stacklevel=3)
        shape = occ.shape if occ is not None else (0, 0, 0)
        wv = (grid.voxel_size * norm.scale) if grid is not None else 0.0
        origin = norm.to_world(grid.origin) if grid is not None else np.zeros(3)
        return SplatVolume(
            interior=torch.zeros((0, 3), dtype=torch.float32),
            shell=shell_t,
            occupancy=torch.from_numpy(occ) if occ is not None else torch.zeros(shape, dtype=torch.bool),
            grid_origin=origin,
            voxel_size=float(wv),
            volume=float(volume),
            occupied_volume=float(volume),
            fallback=True,
            message=msg,
            method=method_used,
            normalization=norm,
            kept=kept_t,
            elapsed=time.perf_counter() - t0,
        )

    if kept_idx.size < 4:
        return fallback(f"interior fill: only {kept_idx.size} Gaussians kept; using shell points only")
    try:
        norm = compute_normalization(centers, allow_flat=True, what="splat centres")
    except DegenerateGeometryError as exc:
        return fallback(f"interior fill: {exc}; using shell points only")
    cn = norm.to_normalized(centers)  # [K, 3] float64
    lo, hi = cn.min(axis=0), cn.max(axis=0)
    pad = dilation + max_box_radius + 3
    grid = VoxelGrid.around(lo, hi, resolution, pad=pad)
    ijk, in_grid = grid.index(cn)
    flat = grid.flat_index(ijk[in_grid])  # [K'] voxel of each kept centre
    if op is not None:
        # Opacity-weighted occupancy: one kept Gaussian marks its voxel; several faint ones together also do.
        acc = np.bincount(flat, weights=op[kept_idx][in_grid].astype(np.float64), minlength=grid.num_voxels)
        shell0 = (acc >= opacity_threshold * (1 - 1e-6)).reshape(grid.shape)
    else:
        shell0 = np.zeros(grid.num_voxels, dtype=bool)
        shell0[flat] = True
        shell0 = shell0.reshape(grid.shape)

    def box_shell() -> np.ndarray:
        ls = _as_numpy(log_scales)[kept_idx]
        qs = _as_numpy(quats)[kept_idx] if quats is not None else None
        radii = _box_radii_voxels(ls, qs, grid.voxel_size * norm.scale, max_box_radius)  # [K, 3]
        nr = max_box_radius + 1
        code = (radii[:, 0] * nr + radii[:, 1]) * nr + radii[:, 2]  # [K] radius triple id
        # One boolean grid per radius triple, filled in a single scatter, then one O(R^3) box dilation each.
        groups = np.zeros((nr**3, grid.num_voxels), dtype=bool)
        groups[code[in_grid], flat] = True
        out = shell0.copy()
        for c in np.nonzero(groups[1:].any(axis=1))[0] + 1:
            r = (c // (nr * nr), (c // nr) % nr, c % nr)
            out |= dilate_box(groups[c].reshape(grid.shape), r)
        return out

    if mark_boxes and log_scales is not None and time.perf_counter() - t0 < time_limit:
        shell0 = box_shell()

    if time.perf_counter() - t0 > time_limit:
        return fallback(f"interior fill: time limit {time_limit:.1f} s reached before the fill; using shell points only",
                        occ=shell0, grid=grid, norm=norm)
    if method == "auto":
        # Escalate the closing until the flood fill holds: 2-sigma boxes, then one more dilation voxel.
        # If it still leaks, use the axis vote on the base shell.
        attempts = [(shell0, dilation)]
        if not mark_boxes and log_scales is not None:
            attempts.append((None, dilation))  # None: the box shell, built lazily
        attempts.append((attempts[-1][0], dilation + 1))
        solid, used = None, "vote"
        boxed = None
        for shell_try, dil in attempts:
            if time.perf_counter() - t0 > time_limit:
                break
            if shell_try is None:
                boxed = box_shell() if boxed is None else boxed
                shell_try = boxed
            if dil > pad - 1:
                continue
            solid_try, used_try = solid_from_shell(shell_try, dilation=dil, method="auto")
            if used_try == "flood":
                solid, used, shell0 = solid_try, "flood", shell_try
                break
        if solid is None:
            solid, used = solid_from_shell(shell0, dilation=dilation, method="vote")
    else:
        solid, used = solid_from_shell(shell0, dilation=dilation, method=method)
    shell_c = close_shell(shell0, dilation)
    inner = solid & ~shell_c
    vox_world = grid.voxel_size * norm.scale
    occupied = float(solid.sum()) * vox_world**3
    n_inner = int(inner.sum())
    if n_inner == 0:
        return fallback("interior fill: the interior is empty (open or flat shell); using shell points only",
                        occ=solid, grid=grid, norm=norm, method_used=used, volume=occupied)
    box_voxels = float(np.prod(np.maximum(np.ceil((hi - lo) / grid.voxel_size), 1)))
    fill = solid.sum() / box_voxels
    if used == "vote" and fill > max_fill_fraction:
        return fallback(
            f"interior fill: the shell is leaky and the filled solid covers {fill:.0%} of the bounding box "
            f"(> {max_fill_fraction:.0%}); using shell points only",
            occ=solid, grid=grid, norm=norm, method_used=used, volume=occupied,
        )
    ijk = np.argwhere(_sampling_mask(solid, inner))
    if ijk.shape[0] > max_points:
        ijk = ijk[rng.choice(ijk.shape[0], size=max_points, replace=False)]
    pts = norm.to_world(_jittered_centers(grid, ijk, rng)).astype(np.float32)
    volume = (n_inner + 0.5 * float(shell_c.sum())) * vox_world**3
    return SplatVolume(
        interior=torch.from_numpy(pts),
        shell=shell_t,
        occupancy=torch.from_numpy(solid),
        grid_origin=norm.to_world(grid.origin),
        voxel_size=float(vox_world),
        volume=float(volume),
        occupied_volume=occupied,
        fallback=False,
        message="",
        method=used,
        normalization=norm,
        kept=kept_t,
        elapsed=time.perf_counter() - t0,
    )


# ------------------------------------------------------------------------------------- sparse splats
#: Below this many usable Gaussians (finite, opacity >= 0.05) a splat is too sparse for its centres to stand for
#: its volume (the voxel fill of a handful of centres is empty): animate and skin then use
#: :func:`sparse_splat_body`, the solid convex hull of the Gaussians' 2-sigma ellipsoids.
SPARSE_SPLAT_GAUSSIANS = 64
#: Ellipsoid semi-axes of :func:`sparse_splat_body` are at least this fraction of the body's size (no flat body).
SPARSE_MIN_AXIS_FRACTION = 0.02


@dataclass(frozen=True)
class SparseBody:
    """The solid that stands for a sparse splat (:func:`sparse_splat_body`); every length in world units.

    Attributes:
        volume: (V, 3) float32 points uniform in the body (the convex hull of the ellipsoids).
        surface: (S, 3) float32 points uniform on the hull's boundary.
        measure: the hull's volume, world units^3 (> 0).
        num_gaussians: K, the Gaussians it was built from.
    """

    volume: torch.Tensor
    surface: torch.Tensor
    measure: float
    num_gaussians: int


def _fibonacci_sphere(n: int) -> np.ndarray:
    """(n, 3) float64 unit vectors spread evenly over the sphere (deterministic golden-angle spiral)."""
    i = np.arange(n, dtype=np.float64) + 0.5
    z = 1.0 - 2.0 * i / n
    r = np.sqrt(np.maximum(0.0, 1.0 - z * z))
    phi = i * np.pi * (3.0 - np.sqrt(5.0))
    return np.stack([r * np.cos(phi), r * np.sin(phi), z], axis=1)


def sparse_splat_body(means: ArrayLike, log_scales: ArrayLike, quats: Optional[ArrayLike] = None, *,
                      n_volume: int = 4096, n_surface: int = 2048, sigma: float = 2.0, seed: int = 0,
                      directions: int = 64) -> SparseBody:
    """The solid body of a sparse splat: the convex hull of its Gaussians' ``sigma``-sigma ellipsoids, sampled.

    A handful of Gaussians is not a point cloud whose centres outline a volume (the voxel fill finds no
    interior and centres alone have no extent for one Gaussian, or no thickness for two); each Gaussian is a solid
    blob, and the object they make is taken to be the convex hull of those blobs, so it is one connected body
    (a skinning basis on separate blobs would move them independently). Each ellipsoid is ``directions`` points
    ``c + R diag(a) u`` (golden-spiral unit vectors u, semi-axes ``a = sigma exp(log_scale)``, each at least
    :data:`SPARSE_MIN_AXIS_FRACTION` of the body's size so the body is never flat); the hull of those points is
    split into tetrahedra (Delaunay) and sampled uniformly, and its boundary triangles give the surface samples.

    Args:
        means: (K, 3) finite centres, world units, K >= 1.
        log_scales: (K, 3) log standard deviations (clamped to [-12, 30]; NaN treated as tiny).
        quats: (K, 4) wxyz rotations (any norm; zero = identity), or None (axis-aligned).
        n_volume, n_surface: numbers of volume and surface samples.
        sigma: ellipsoid size in standard deviations (2: the 2-sigma boxes of the interior fill).
        seed: seeds the samples (deterministic for a given seed).
        directions: points per ellipsoid.

    Returns:
        :class:`SparseBody`.

    Raises:
        DegenerateGeometryError: no finite centre, or shapes that are not (K, 3) / (K, 4).
    """
    c = _as_numpy(means, np.float64)
    if c is None or c.ndim != 2 or c.shape[1] != 3:
        raise DegenerateGeometryError(f"means must have shape (K, 3), got {None if c is None else c.shape}")
    ls = _as_numpy(log_scales, np.float64)
    if ls is None or ls.shape != c.shape:
        raise DegenerateGeometryError(f"log_scales must have shape {c.shape}, got {None if ls is None else ls.shape}")
    ok = finite_rows(c)
    c, ls = c[ok], ls[ok]
    if c.shape[0] == 0:
        raise DegenerateGeometryError("a sparse splat body needs at least one Gaussian with a finite centre")
    k = c.shape[0]
    if quats is None:
        R = np.broadcast_to(np.eye(3), (k, 3, 3))
    else:
        q = _as_numpy(quats, np.float32)
        if q.shape != (ok.shape[0], 4):
            raise DegenerateGeometryError(f"quats must have shape ({ok.shape[0]}, 4), got {q.shape}")
        q = np.nan_to_num(q[ok], nan=0.0, posinf=0.0, neginf=0.0)
        R = quat_to_rotmat(torch.from_numpy(np.ascontiguousarray(q))).numpy().astype(np.float64)  # zero -> identity
    axes = sigma * np.exp(np.clip(np.nan_to_num(ls, nan=MIN_LOG_SCALE), MIN_LOG_SCALE, 30.0))  # [K, 3]
    size = max(float((c.max(0) - c.min(0)).max()), 2.0 * float(axes.max()))
    axes = np.maximum(axes, SPARSE_MIN_AXIS_FRACTION * size)
    u = _fibonacci_sphere(int(directions))  # [D, 3]
    shell = (c[:, None, :] + np.einsum("kab,kb,db->kda", R, axes, u)).reshape(-1, 3)  # [K*D, 3]
    rng = np.random.default_rng(seed)
    from scipy.spatial import ConvexHull, Delaunay

    hull = ConvexHull(shell)
    tri = Delaunay(shell[hull.vertices])
    tets = tri.points[tri.simplices]  # [T, 4, 3]
    vols = np.abs(np.einsum("ti,ti->t", np.cross(tets[:, 1] - tets[:, 0], tets[:, 2] - tets[:, 0]),
                            tets[:, 3] - tets[:, 0])) / 6.0
    pick = np.minimum(np.searchsorted(np.cumsum(vols) / vols.sum(), rng.random(int(n_volume)), side="right"),
                      len(vols) - 1)
    bary = rng.dirichlet(np.ones(4), size=int(n_volume))  # uniform in a tetrahedron
    volume = np.einsum("nj,nja->na", bary, tets[pick])
    surface, _ = sample_surface(hull.points, hull.simplices, int(n_surface), rng=rng)
    return SparseBody(volume=torch.from_numpy(volume.astype(np.float32)),
                      surface=torch.from_numpy(np.ascontiguousarray(surface, dtype=np.float32)),
                      measure=float(hull.volume), num_gaussians=int(k))


# ------------------------------------------------------------------------------------- cubature
def sample_cubature(volume_points: ArrayLike, n: int = 1024, seed: int = 0, method: str = "cells") -> torch.Tensor:
    """Cubature points drawn from a volume point set (method.md 6.1 / 9.1); each stands for an equal share of the
    volume (the lumped mass ``rho V / n``).

    ``method="cells"`` (default): about n occupied cells of a cubic grid with faces on the bounding box's
    mid-planes (:func:`physskin_gs.geometry.sampling.grid_cells`), and in each the point nearest the centroid
    of the cell's points (the middle of its occupied part; on the kaolin cantilever as accurate as farthest
    points, Chamfer@100 0.7-1.8e-3 vs 0.4-2.1e-3 m^2 over three seeds): evenly spread like farthest points, O(M log M), and mirror-symmetric when the points are (so a
    symmetric object under a symmetric load stays symmetric; farthest points from a random start push a
    symmetric cantilever 5 mm sideways). ``method="fps"``: farthest point sampling from a seeded random start,
    exactly n points. ``method="random"``: uniform without replacement. Non-finite rows are ignored.

    Args:
        volume_points: (M, 3) float array or tensor.
        n: number of cubature points ("cells": within about 5 % of n where the grid allows); at most M.
        seed: seeds the start index / the draw ("cells" is deterministic and does not use it).

    Returns:
        (k, 3) float32 tensor, rows of ``volume_points``, k <= min(n, M) for "fps" / "random" and about n for
        "cells" (at most M).

    Raises DegenerateGeometryError without finite points, OptionError for an unknown method.
    """
    pts = torch.as_tensor(_as_numpy(volume_points, np.float32))
    pts = pts[torch.isfinite(pts).all(dim=1)]
    if pts.shape[0] == 0:
        raise DegenerateGeometryError("sample_cubature: no finite volume points")
    if method == "cells":
        p64 = pts.numpy().astype(np.float64)
        if pts.shape[0] <= n:
            idx = np.arange(pts.shape[0])
        else:
            g = grid_cells(p64, n)
            _, cen = cell_centroids(p64, g)  # [C, 3] centroid of each cell's points (the middle of its occupied part)
            d = ((p64 - cen[g.cell]) ** 2).sum(1)  # [M] squared distance to the cell's centroid
            # equal distances (a two-point cell's centroid is their midpoint) are broken by the distance to the
            # cell's centre, not by row order, so mirror-image cells pick mirror-image points
            dq = np.round(d / (1e-9 * g.size * g.size))
            dc = ((p64 - (g.origin + (g.key + 0.5) * g.size)) ** 2).sum(1)  # [M] to the cell centre
            order = np.lexsort((dc, dq, g.cell))  # by cell, nearest the centroid first
            idx = np.sort(order[np.r_[0, np.nonzero(np.diff(g.cell[order]))[0] + 1]])
    elif method == "fps":
        idx = farthest_point_sampling(pts, n, seed=seed)
    elif method == "random":
        k = min(n, pts.shape[0])
        idx = np.random.default_rng(seed).choice(pts.shape[0], size=k, replace=False)
    else:
        raise OptionError(f"unknown cubature sampling method {method!r}; expected 'cells', 'fps' or 'random'")
    return pts[torch.from_numpy(np.asarray(idx, dtype=np.int64))]
