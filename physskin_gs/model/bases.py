"""One interface for every skinning source: a :class:`SkinningBasis` builds a :class:`SkinningField` for one object.

A basis is chosen by name in one place, :data:`SKINNING_BASES` (``--skinning NAME`` in animate, skin, evaluate and
the viewer all go through :func:`build_skinning`), in the manner of kaolin's ``create_with_mlp`` /
``create_with_rkpm``:

* ``eigen``: skinning eigenmodes on the object's own volume points (RKPM shape functions, no tet mesh;
  :mod:`physskin_gs.model.eigen`; FreeForm, CVPR 2026; Benchekroun et al. 2023). Classical, deterministic, about
  a second.
* ``network``: the feed-forward PhysSkin network (one forward pass; alias ``pretrained``). Falls back to ``fit``
  with a warning when the shipped checkpoint is missing and none was asked for.
* ``fit``: per-object optimisation of the same self-supervised losses (Simplicits style), within a time budget.
* ``rbf``: m Gaussian bumps on farthest points (no learning; a baseline and a last-resort fallback).

Every basis takes the object's ``surface`` (S, 3) and ``volume`` (V, 3) points in its normalised frame (about
[-1, 1]^3, float32) and returns a field whose ``weights_and_grads(x)`` gives W (N, H) and dW/dX (N, H, 3) at any
points of the same frame, H = m + 1 with the constant handle last, learned columns with RMS 1 over ``volume``
(method.md 5, protocol step 4). Fields are saved and loaded with :func:`save_field` / :func:`load_field`
(safetensors, no pickle).

Few points (a 9-Gaussian scene): a basis never builds more learned handles than its points support
(:func:`handle_capacity`, from the distinct volume points) nor more than ``SkinningOptions.max_handles`` (the
caller's bound: ``usable Gaussians - 1`` in animate and skin, since W at N points has rank at most N). Bases that
take a count build that many (``eigen``, ``fit``, ``rbf``); the ``network``, whose checkpoint fixes m, keeps the m'
most independent of its columns over the volume points (:class:`ColumnSubsetField`, column-pivoted QR). With no
learned handle left the field is :class:`ConstantSkinningField` (H = 1: one affine body, rigid or stretching
as the material lets it). Each reduction is announced by a :class:`SkinningReducedWarning` carrying the counts,
which the commands turn into one ``note:`` line (:func:`reduced_handles_note`).
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import torch

from physskin_gs.errors import CheckpointError, OptionError
from physskin_gs.model.eigen import EigenSkinningField, build_eigen_field  # the default basis: its imports load with the registry
from physskin_gs.model.field import RBFSkinningField, SkinningField

__all__ = [
    "SkinningOptions",
    "SkinningBasis",
    "SKINNING_BASES",
    "DEFAULT_SKINNING",
    "skinning_names",
    "resolve_skinning",
    "build_skinning",
    "save_field",
    "load_field",
    "SkinningFallbackWarning",
    "SkinningReducedWarning",
    "ConstantSkinningField",
    "ColumnSubsetField",
    "handle_capacity",
    "reduced_handles_note",
]

ProgressFn = Optional[Callable[[str, float], None]]

#: The product's default skinning source (the physically best basis in ``evaluate --reference fem``; README).
DEFAULT_SKINNING = "auto"

_ALIASES = {"pretrained": "network"}
_FIELD_MAGIC = "physskin_gs.field"


class SkinningFallbackWarning(UserWarning):
    """A skinning basis could not be built as asked and another one was used (the message says which and why)."""


class SkinningReducedWarning(UserWarning):
    """A basis built fewer learned handles than it would have (few points; :func:`build_skinning`).

    Attributes: requested (the learned handles it builds without a bound: ``num_handles``, or the network
    checkpoint's m), used (the learned handles it built, 0 = one rigid/affine body)."""

    def __init__(self, message: str, requested: int = 0, used: int = 0) -> None:
        super().__init__(message)
        self.requested = int(requested)
        self.used = int(used)


class ConstantSkinningField(SkinningField):
    """The field with no learned handle: H = 1, W = 1 everywhere, dW/dX = 0 (the whole object is one affine
    body, rigid when the material resists stretching). Used when the points support no learned handle."""

    kind = "constant"
    num_handles = 1

    def weights_and_grads(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """x (N, 3) -> (ones (N, 1), zeros (N, 1, 3)) float32."""
        n = int(x.shape[0])
        return torch.ones(n, 1), torch.zeros(n, 1, 3)


class ColumnSubsetField(SkinningField):
    """Learned columns ``columns`` (m',) int of another field, then its constant handle: W (N, m' + 1) and
    dW/dX (N, m' + 1, 3) are the inner field's columns ``[*columns, -1]`` (units unchanged)."""

    kind = "columns"

    def __init__(self, inner: SkinningField, columns) -> None:
        cols = [int(c) for c in columns]
        m = int(inner.num_handles) - 1
        if any(not 0 <= c < m for c in cols) or len(set(cols)) != len(cols):
            raise ValueError(f"columns {cols} are not distinct learned columns of a field with {m} learned handles")
        self.inner = inner
        self.columns = cols
        self._index = torch.tensor(cols + [m], dtype=torch.long)
        self.num_handles = len(cols) + 1

    def weights_and_grads(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        if x.shape[0] == 0:  # some fields cannot take an empty batch
            return torch.zeros(0, self.num_handles), torch.zeros(0, self.num_handles, 3)
        W, G = self.inner.weights_and_grads(x)
        return W[:, self._index].contiguous(), G[:, self._index].contiguous()


def independent_columns(W: torch.Tensor, k: int) -> List[int]:
    """The k (<= m) most independent learned columns of W (N, m) at N points, in ascending order: column-pivoted
    QR of the columns with their mean removed (the constant handle spans the mean), so the chosen columns span
    as much of what the others can do as k columns can. Deterministic."""
    import scipy.linalg

    A = W.double().numpy()
    A = A - A.mean(0, keepdims=True)
    _, _, piv = scipy.linalg.qr(A, mode="economic", pivoting=True)
    return sorted(int(c) for c in piv[: int(k)])


def handle_capacity(name: Optional[str], volume) -> int:
    """The most learned handles the basis ``name`` can build from ``volume`` (V, 3) points: D - 1 for D distinct
    points (W at D points has rank at most D), and for ``eigen`` D - 2, or 0 below 5 distinct points (its RKPM
    nodes need m + 2 nodes and more than 4). Raises OptionError for an unknown name."""
    key = resolve_skinning(name)
    v = torch.as_tensor(volume).float().reshape(-1, 3)
    v = v[torch.isfinite(v).all(1)]
    distinct = int(torch.unique(v, dim=0).shape[0]) if v.shape[0] else 0
    if key in ("eigen", "auto"):  # auto: eigen's bound (its fallback's)
        return distinct - 2 if distinct >= 5 else 0
    return max(distinct - 1, 0)


def reduced_handles_note(usable: int, what: str, requested: int, used: int) -> str:
    """The one-line note of a reduced handle count, e.g. ``"9 usable Gaussians: 8 handles instead of 16"`` or
    ``"1 usable Gaussian: one rigid body (no skinning handles)"``; ``what`` is the plural noun ('Gaussians')."""
    noun = what[:-1] if usable == 1 and what.endswith("s") else what
    if used <= 0:
        return f"{usable} usable {noun}: one rigid body (no skinning handles)"
    return f"{usable} usable {noun}: {used} handle{'s' if used != 1 else ''} instead of {requested}"


def _bounded(options: "SkinningOptions", natural: int) -> int:
    """``natural`` learned handles within ``options.max_handles`` (None = no bound)."""
    return natural if options.max_handles is None else max(0, min(int(natural), int(options.max_handles)))


def _warn_reduced(name: str, requested: int, used: int, stacklevel: int = 4) -> None:
    warnings.warn(SkinningReducedWarning(
        f"{name} skinning: {used} learned handles instead of {requested} (the points support no more)",
        requested, used), stacklevel=stacklevel)


def _learned_handles(name: str, options: "SkinningOptions") -> int:
    """The learned handles a basis that sets its own count builds: ``options.num_handles`` within
    ``options.max_handles``, with a :class:`SkinningReducedWarning` when that is fewer."""
    m = _bounded(options, options.num_handles)
    if m < options.num_handles:
        _warn_reduced(name, options.num_handles, m, stacklevel=5)
    return m


@dataclass
class SkinningOptions:
    """Options shared by every basis. num_handles: learned handles m (the constant handle is added); checkpoint:
    network checkpoint path (None = the shipped one); fit_seconds: time budget of ``fit`` (s); seed: sampling seed;
    max_handles: upper bound on the learned handles from the points (None = none; 0 = one rigid body), e.g.
    ``usable Gaussians - 1`` (module docstring, *few points*); mesh: the input's surface mesh in the normalised frame
    (mesh inputs only; the ``tet`` and ``modes`` bases mesh it); bounds: the object's box for the voxel meshes."""

    num_handles: int = 16
    checkpoint: Optional[str] = None
    fit_seconds: float = 60.0
    seed: int = 0
    max_handles: Optional[int] = None
    mesh: Optional[Tuple[np.ndarray, np.ndarray]] = None  # (vertices (V, 3) normalised frame, faces (F, 3)): ``tet``
    #: (lo (3,), hi (3,)) normalised frame: the object's box (its moving centres'), which the voxel meshes of
    #: ``voxel`` and ``modes`` are fitted to (:func:`voxel_tetmesh_of_points`); None: the surface points' box
    bounds: Optional[Tuple[np.ndarray, np.ndarray]] = None
    #: parts of other materials (``--region``): ``materials(points (k, 3) normalised frame)`` -> (Young's modulus
    #: (k,), density (k,)) as multiples of the object's; the ``modes`` basis takes the modes of that body. None: one
    #: material
    materials: Optional[Callable[[np.ndarray], Tuple[np.ndarray, np.ndarray]]] = None


class SkinningBasis:
    """A way to build a skinning field for one object. Subclasses set ``name`` and ``summary`` and implement
    :meth:`build`."""

    name: str = ""
    summary: str = ""

    def build(self, surface: torch.Tensor, volume: torch.Tensor, options: SkinningOptions,
              progress: ProgressFn = None) -> Tuple[SkinningField, str]:
        """surface (S, 3), volume (V, 3) float32 in the normalised frame -> (field, source description)."""
        raise NotImplementedError


def _report(progress: ProgressFn, stage: str, frac: float) -> None:
    if progress is not None:
        progress(stage, float(frac))


def _encoder_points(surface: torch.Tensor, seed: int, n: int = 2048) -> torch.Tensor:
    """At most n farthest points of the surface (the network's encoder input, method.md 7.2)."""
    from physskin_gs.geometry.sampling import farthest_point_sampling

    surface = torch.as_tensor(surface).float()
    if surface.shape[0] <= n:
        return surface
    idx = farthest_point_sampling(surface, n, seed=seed)
    return surface[torch.as_tensor(np.asarray(idx), dtype=torch.long)]


class EigenBasis(SkinningBasis):
    name = "eigen"
    summary = "skinning eigenmodes on the object's volume points (RKPM, no tet mesh; about 1 s)"

    def build(self, surface, volume, options, progress=None):
        m = _learned_handles(self.name, options)
        if m == 0:
            return ConstantSkinningField(), "eigen"
        _report(progress, "skinning: eigenmodes of the object's volume points", 0.35)
        volume = torch.as_tensor(volume).float()
        field = build_eigen_field(volume, num_handles=m + 1, seed=options.seed)  # counts the constant handle
        if options.max_handles is not None and field.num_handles - 1 > options.max_handles:  # a cluster straddled
            # the bound (its count may move up to a cluster's end): cut exactly at the bound
            field = build_eigen_field(volume, num_handles=m + 1, seed=options.seed, cluster_tol=0.0)
        return field, "eigen"


class NetworkBasis(SkinningBasis):
    """The checkpoint fixes the number of handles (``options.num_handles`` is not used); below
    ``options.max_handles`` the most independent columns are kept (:class:`ColumnSubsetField`)."""

    name = "network"
    summary = "feed-forward PhysSkin network (one forward pass; shipped checkpoint or --checkpoint)"

    def build(self, surface, volume, options, progress=None):
        from physskin_gs import model as pm

        ckpt = Path(options.checkpoint) if options.checkpoint else pm.default_checkpoint_path()
        if not ckpt.is_file():
            if options.checkpoint and ckpt.is_dir():
                from physskin_gs.model.checkpoint import folder_given_error

                raise folder_given_error(ckpt)
            if options.checkpoint:
                raise CheckpointError(f"{ckpt}: checkpoint file not found")
            warnings.warn(f"no network checkpoint at {ckpt}; fitting a per-object skinning field instead",
                          SkinningFallbackWarning, stacklevel=3)
            return SKINNING_BASES["fit"].build(surface, volume, options, progress)
        _report(progress, "skinning: encoding with the network", 0.35)
        net = pm.load_checkpoint(ckpt)
        surf = _encoder_points(surface, options.seed)
        volume = torch.as_tensor(volume).float()
        field = pm.skinning_from_model(net, surf, volume)
        m = field.num_handles - 1
        k = _bounded(options, m)
        if k < m:  # the checkpoint fixes m: keep its k most independent columns over the volume points
            _warn_reduced(self.name, m, k)
            field = (ColumnSubsetField(field, independent_columns(field.weights(volume)[:, :-1], k)) if k > 0
                     else ConstantSkinningField())
        return field, f"network:{ckpt.name}"


class FitBasis(SkinningBasis):
    name = "fit"
    summary = "per-object fit of the self-supervised losses (Simplicits style; --fit-seconds)"

    def build(self, surface, volume, options, progress=None):
        from physskin_gs import model as pm
        from physskin_gs.model.checkpoint import checkpoint_metadata
        from physskin_gs.model.fit import fit_config_like

        if not options.fit_seconds > 0:
            raise OptionError(f"--fit-seconds must be positive, got {options.fit_seconds}")
        m = _learned_handles(self.name, options)
        if m == 0:
            return ConstantSkinningField(), "fit"
        ck = Path(options.checkpoint) if options.checkpoint else pm.default_checkpoint_path()
        train = checkpoint_metadata(ck).get("train_config", {}).get("train") if ck.is_file() else None
        _report(progress, f"skinning: fitting (up to {options.fit_seconds:.0f} s)", 0.35)
        field = pm.fit_skinning(_encoder_points(surface, options.seed), torch.as_tensor(volume).float(),
                                time_budget_s=options.fit_seconds, seed=options.seed,
                                num_handles=m, config=fit_config_like(train))
        return field, "fit"


class RBFBasis(SkinningBasis):
    name = "rbf"
    summary = "m Gaussian bumps (radius 0.45) on farthest volume points (no learning; a baseline)"

    def build(self, surface, volume, options, progress=None):
        from physskin_gs.geometry.sampling import farthest_point_sampling

        m = _learned_handles(self.name, options)
        if m == 0:
            return ConstantSkinningField(), "rbf"
        volume = torch.as_tensor(volume).float()
        idx = farthest_point_sampling(volume, min(m, volume.shape[0]), seed=options.seed)
        centers = volume[torch.as_tensor(np.asarray(idx), dtype=torch.long)]
        return RBFSkinningField(centers, radius=0.45), "rbf"


def input_tetmesh(options: "SkinningOptions"):
    """(TetMesh with nodes (n, 3) in the normalised frame, path description) of a mesh input's own surface
    (``options.mesh``: vertices (V, 3) normalised frame, faces (F, 3)), as the ``tet`` and ``modes`` bases mesh
    it: :func:`physskin_gs.geometry.tetmesh.tetmesh_for_shape` with :data:`TET_NODES` nodes, a surface of more than
    :data:`TET_SIMPLIFY_ABOVE` faces simplified first. The path is e.g. 'tetgen', 'union+tetgen', 'qslim+tetgen'
    or 'voxel'. Raises OptionError when there is no mesh or it cannot be tetrahedralised."""
    from physskin_gs.geometry.tetmesh import tetmesh_for_shape

    if options.mesh is None:
        raise OptionError("this skinning basis needs a mesh input (its surface is tetrahedralised); for a splat use "
                          "eigen, voxel or modes")
    v, f = options.mesh
    try:
        simplify = TET_MAX_SURFACE_FACES if len(f) > TET_SIMPLIFY_ABOVE else None
        tm = tetmesh_for_shape(np.asarray(v, np.float64), np.asarray(f), target_nodes=TET_NODES,
                               max_surface_faces=simplify)
    except ValueError as exc:
        raise OptionError(f"cannot tetrahedralise the mesh ({exc})") from None
    path = tm.info.get("path", tm.method)
    why = tm.info.get("tetgen_error")
    if path == "voxel" and why:  # say why the input's own surface was not meshed as it is
        path = f"voxel: {plain_tetgen_reason(why)}"
    return tm, path


def plain_tetgen_reason(why) -> str:
    """Why TetGen did not mesh a surface, in words for a summary line (the raw exception text, "TetGen failed:
    RuntimeError: The input surface mesh contain self-intersections.", was printed as it was). Raises nothing."""
    text = str(why)
    low = text.lower()
    if "intersect" in low:
        return "its surface intersects itself, so TetGen could not mesh it"
    if "timed out" in low or "timeout" in low:
        return "TetGen took too long on its surface"
    if "crashed" in low:
        return "TetGen crashed on its surface"
    if low.startswith("tetgen failed"):
        return "TetGen could not mesh its surface"
    return text.split(" (")[0]


class TetBasis(SkinningBasis):
    name = "tet"
    summary = ("Laplacian eigenmodes of the input mesh's own tet mesh (mesh inputs only: coupling follows the "
               "material's connectivity; about 1-8 s)")

    def build(self, surface, volume, options, progress=None):
        from physskin_gs.model.tet_field import TetSkinningField
        from physskin_gs.physics.fem import laplacian_eigenbasis

        if options.mesh is None:
            raise OptionError("--skinning tet needs a mesh input (its surface is tetrahedralised); for a splat use "
                              "eigen, voxel or modes")
        m = _bounded(options, options.num_handles)
        if m == 0:
            return ConstantSkinningField(), "tet"
        _report(progress, "skinning: tet mesh of the input mesh (TetGen, or a voxel fill of its inside) "
                "and its Laplacian eigenmodes", 0.35)
        try:
            tm, path = input_tetmesh(options)
        except OptionError as exc:
            raise OptionError(f"--skinning tet: {exc}") from None
        m = min(m, tm.num_nodes - 2)
        W = laplacian_eigenbasis(tm, m=m)
        return TetSkinningField(tm.nodes, tm.tets, W), f"tet ({path}, {tm.num_nodes} nodes)"


#: Occupied voxels of the ``voxel`` and ``modes`` bases' voxel meshes, which are also the cubature points
#: (:func:`physskin_gs.pipeline.voxel_cubature`): about the 1024 sampled otherwise, so a step costs about the same
#: (Spot's 60-step drop: 1256 voxels 5.3-5.6 ms per step, 2070 voxels 8.8-9.8, 1024 sampled points 3.8-4.1); on
#: the four object-only captures the frequency ratio with 1024 is within the noise of where the grid falls on thin
#: stems of that with 1800 (docs/skinning.md).
VOXEL_CELLS = 1024
#: Cell sizes :func:`voxel_tetmesh_of_points` tries around the count-matching one (relative range, steps).
VOXEL_FIT_RANGE = (0.85, 1.15, 61)


def voxel_tetmesh_of_points(volume: np.ndarray, target_cells: int, bounds=None):
    """The tet mesh of a point set's occupied voxels: about ``target_cells`` cells of a cubic grid fitted to the
    points' bounding box, joined where parts nearly touch and cut to one face-connected body
    (:func:`physskin_gs.geometry.tetmesh.glue_occupancy`), each voxel split into mirrored Kuhn tets
    (:func:`physskin_gs.geometry.tetmesh.voxel_tetmesh` ``mirrored``).

    The grid: the cell size that gives about ``target_cells`` occupied cells
    (:func:`physskin_gs.geometry.sampling.grid_cells`), then, within :data:`VOXEL_FIT_RANGE` of it, the size at
    which an even number of cells along each axis (one along an axis thinner than a cell) overhangs the box least,
    the cells centred on the box. A grid cut anywhere else leaves slivers of cells along the box's faces, each
    occupied or not by chance (whether a sample falls in it), so a box-like body got a ragged, lopsided skin; with
    the even count and the mirrored split, a mirror-symmetric point set gives a mirror-symmetric mesh.

    volume: (V, 3) float, normalised frame. bounds: None or (lo (3,), hi (3,)), the box to fit instead of the
    points' own (the object's centres: a splat's interior fill samples voxels of its own grid, up to one of them
    beyond the centres, and unevenly); points outside it fall into its outer cells. Returns a TetMesh (method
    'voxel'). Raises ValueError for fewer than 4 finite points."""
    from physskin_gs.geometry.sampling import grid_cells
    from physskin_gs.geometry.tetmesh import GLUE_MAX_DILATIONS, glue_occupancy, voxel_tetmesh

    pts = np.asarray(volume, np.float64)
    pts = pts[np.isfinite(pts).all(1)]
    if pts.shape[0] < 4:
        raise ValueError(f"a voxel tet mesh needs at least 4 points, got {pts.shape[0]}")
    h0 = grid_cells(pts, max(8, int(target_cells))).size
    lo, hi = pts.min(0), pts.max(0)
    if bounds is not None:
        lo, hi = (np.asarray(b, np.float64).reshape(3) for b in bounds)
    ext = np.maximum(hi - lo, 1e-9 * max(float((hi - lo).max()), 1e-300))

    def cells(h: float) -> np.ndarray:
        """(3,) cells along each axis covering the box at size h: even (a sample 2 % of a cell beyond is clipped
        in), but one along an axis thinner than a cell."""
        n = np.maximum(np.ceil(ext / h - 0.02), 1).astype(np.int64)
        return np.where(n > 1, n + (n % 2), 1)

    sizes = h0 * np.linspace(*VOXEL_FIT_RANGE)
    h = float(min(sizes, key=lambda s: (float(np.sum(cells(s) - ext / s)), abs(s - h0))))
    n = cells(h)
    origin = 0.5 * (lo + hi) - 0.5 * n * h
    key = np.clip(np.floor((pts - origin) / h).astype(np.int64), 0, n - 1)
    pad = 2 * ((GLUE_MAX_DILATIONS + 2) // 2)  # empty layers for the glue's dilations; even keeps the mirroring
    occ = np.zeros(tuple(int(d) + 2 * pad for d in n), bool)
    k = key + pad
    occ[k[:, 0], k[:, 1], k[:, 2]] = True
    occ = fill_notches(occ)
    occ, _ = glue_occupancy(occ)
    return voxel_tetmesh(occ, origin - pad * h, h, mirrored=True)


#: Most passes of :func:`fill_notches`.
NOTCH_PASSES = 3


def fill_notches(occupancy: np.ndarray) -> np.ndarray:
    """A voxel occupancy with its sampling notches filled: an empty voxel with at least 4 of its 6 face neighbours
    occupied becomes occupied, up to :data:`NOTCH_PASSES` times. Sparse samples of a solid leave cells of its outer
    layer empty by chance (3000 random points of a cube in 1000 voxels: 30 of them), and the voxels are the cubature
    points, the floor's contact points among them: that cube, dropped on the floor, sank 35 mm into it and rested
    there (3.5 % of its height; with the notches filled: 1.2 mm above it, as with sampled points). A flat face's
    notch has 5 occupied neighbours, an edge's 4; a corner's 3 stays (as does a real gap between two parts, whose
    voxels have 2). occupancy: (R0, R1, R2) bool; returns a new array. Mirror-symmetric: a symmetric occupancy
    stays symmetric."""
    from scipy import ndimage

    occ = np.asarray(occupancy, dtype=bool).copy()
    cross = ndimage.generate_binary_structure(3, 1)
    cross[1, 1, 1] = False
    for _ in range(NOTCH_PASSES):
        notch = ~occ & (ndimage.convolve(occ.astype(np.int8), cross.astype(np.int8), mode="constant") >= 4)
        if not notch.any():
            break
        occ |= notch
    return occ


def _voxel_bounds(surface, options: SkinningOptions):
    """The box a voxel mesh is fitted to (:func:`voxel_tetmesh_of_points`): ``options.bounds``, else the surface
    points' (a splat's Gaussian centres, a mesh's surface samples), else None (the volume points')."""
    if options.bounds is not None:
        return options.bounds
    s = torch.as_tensor(surface).double().numpy().reshape(-1, 3)
    s = s[np.isfinite(s).all(1)]
    return (s.min(0), s.max(0)) if s.shape[0] >= 4 else None


class VoxelBasis(SkinningBasis):
    name = "voxel"
    summary = ("Laplacian eigenmodes of the object's occupied voxels (mirrored Kuhn tets of about 1024 cells of a "
               "grid fitted to its box; its voxels are the cubature; splats and meshes; about 0.5 s)")

    def build(self, surface, volume, options, progress=None):
        from physskin_gs.model.tet_field import TetSkinningField
        from physskin_gs.physics.fem import laplacian_eigenbasis

        m = _learned_handles(self.name, options)
        if m == 0:
            return ConstantSkinningField(), "voxel"
        _report(progress, "skinning: voxel tet mesh of the volume points and its Laplacian eigenmodes", 0.35)
        tm = voxel_tetmesh_of_points(torch.as_tensor(volume).numpy(), VOXEL_CELLS, _voxel_bounds(surface, options))
        m = min(m, tm.num_nodes - 2)
        W = laplacian_eigenbasis(tm, m=m)
        return TetSkinningField(tm.nodes, tm.tets, W), f"voxel ({tm.num_nodes} nodes)"


class ModesBasis(SkinningBasis):
    """Weights from the displacement fields of the object's lowest linear-elastic vibration modes
    (:func:`physskin_gs.physics.fem.elastic_mode_weights`, Poisson ratio :data:`MODES_NU`) on its tet mesh: the input
    mesh's own (``tet``'s mesh) for a mesh, the occupied voxels of its volume points (``voxel``'s mesh) for a splat
    or a surface that cannot be tetrahedralised."""

    name = "modes"
    summary = ("linear-elastic vibration modes of the object's tet mesh (the input mesh's own, or the voxels its "
               "volume points fill; about 1-10 s)")

    def build(self, surface, volume, options, progress=None):
        from physskin_gs.model.tet_field import TetSkinningField
        from physskin_gs.physics.fem import elastic_mode_weights

        m = _learned_handles(self.name, options)
        if m == 0:
            return ConstantSkinningField(), "modes"
        if m > MODES_MAX_HANDLES:
            warnings.warn(f"modes skinning with {m} handles: above {MODES_MAX_HANDLES} the finest mode fields vary "
                          "faster than the cubature points resolve, and the object can tear (a koala did at 64); "
                          "--skinning tet or voxel (the Laplacian's smooth fields) is safe there",
                          SkinningFallbackWarning, stacklevel=3)
        tm = None
        if options.mesh is not None:
            _report(progress, "skinning: tet mesh of the input mesh (TetGen, or a voxel fill of its inside) "
                    "and its elastic modes", 0.35)
            try:
                tm, path = input_tetmesh(options)
            except OptionError as exc:
                warnings.warn(f"modes skinning: {exc}; using the voxels the volume points fill",
                              SkinningFallbackWarning, stacklevel=3)
        try:
            if tm is None:
                _report(progress, "skinning: voxel tet mesh of the volume points and its elastic modes", 0.35)
                tm = voxel_tetmesh_of_points(torch.as_tensor(volume).numpy(), VOXEL_CELLS,
                                             _voxel_bounds(surface, options))
                path = "voxel"
            m = min(m, tm.num_nodes - 3)
            stiff = dens = None
            if options.materials is not None:  # parts of other materials: the modes of that body
                stiff = options.materials(tm.nodes[tm.tets].mean(1))[0]  # [T] at the tets' centroids
                dens = options.materials(tm.nodes)[1]  # [n]
                if np.allclose(stiff, 1.0) and np.allclose(dens, 1.0):
                    stiff = dens = None
            W = elastic_mode_weights(tm, m=m, nu=MODES_NU, tet_stiffness=stiff, node_density=dens)
        except ValueError as exc:  # too few points for a voxel mesh, or modes that hold no field
            raise OptionError(f"--skinning modes: {exc}") from None
        what = "" if stiff is None else ", of its parts' materials"
        return TetSkinningField(tm.nodes, tm.tets, W), f"modes ({path}, {tm.num_nodes} nodes{what})"


class AutoBasis(SkinningBasis):
    """The default: ``modes`` (the elastic modes of the input mesh's own tet mesh, or of a splat's occupied voxels;
    the lowest frequency error on all 36 evaluation meshes and on average on the splat captures, docs/skinning.md);
    above :data:`MODES_MAX_HANDLES` learned handles the Laplacian eigenmodes of the same mesh (``tet``, or ``voxel``
    for a splat); ``eigen`` when no tet mesh can be made at all (with a warning each time)."""

    name = "auto"
    summary = ("the default: modes (the elastic modes of the input mesh's own tet mesh, or of the voxels a splat "
               "fills)")

    def build(self, surface, volume, options, progress=None):
        if _bounded(options, options.num_handles) > MODES_MAX_HANDLES:  # modes tear there: the Laplacian's fields
            warnings.warn(f"{options.num_handles} handles: the default skinning is the Laplacian eigenmodes of the "
                          f"same mesh above {MODES_MAX_HANDLES} (the elastic modes' finest fields would tear the "
                          "object between cubature points)", SkinningFallbackWarning, stacklevel=2)
            if options.mesh is not None:
                try:
                    return TetBasis().build(surface, volume, options, progress)
                except OptionError:
                    pass
            return VoxelBasis().build(surface, volume, options, progress)
        try:
            return ModesBasis().build(surface, volume, options, progress)
        except OptionError as exc:
            warnings.warn(f"modes skinning unavailable ({exc}); using eigen", SkinningFallbackWarning, stacklevel=2)
        return EigenBasis().build(surface, volume, options, progress)


#: Most learned handles of the ``modes`` basis the product trusts: at 64 the finest mode fields vary between the ~1000
#: cubature points and a koala tore (a fresh user's run, 2026-12-05); 32 was measured stable (docs/skinning.md).
MODES_MAX_HANDLES = 32
#: Poisson ratio of the ``modes`` basis's mode shapes (the default material's; shapes barely move with it, and the
#: field does not change when the material is changed in the viewer).
MODES_NU = 0.45
#: Tet-mesh nodes of the ``tet`` basis (the FEM reference of ``evaluate --reference fem`` uses 3000 by default).
TET_NODES = 3000
#: Surfaces of more than ``TET_SIMPLIFY_ABOVE`` faces are simplified to ``TET_MAX_SURFACE_FACES`` before TetGen for
#: the ``tet`` basis. TetGen keeps every surface vertex: a 52k-face statue became 126k nodes and a 29 s build (at
#: 6000 faces 18k nodes, 4 s), while up to ~40k faces the exact surface takes at most ~6 s on 2 cores, and TetGen
#: can stall or fail on a simplified surface (a normalised 38k-face PartNet chair: 20 s lost before the exact one).
TET_SIMPLIFY_ABOVE = 40000
TET_MAX_SURFACE_FACES = 2 * TET_NODES

#: Every skinning source by name (the one place where names map to implementations).
SKINNING_BASES: Dict[str, SkinningBasis] = {b.name: b for b in (EigenBasis(), NetworkBasis(), FitBasis(), RBFBasis(),
                                                                  TetBasis(), VoxelBasis(), ModesBasis(),
                                                                  AutoBasis())}


def skinning_names(aliases: bool = True) -> List[str]:
    """Accepted ``--skinning`` names (canonical first, then aliases such as 'pretrained')."""
    return list(SKINNING_BASES) + (list(_ALIASES) if aliases else [])


def resolve_skinning(name: Optional[str]) -> str:
    """Canonical basis name for ``name`` (None or 'default' = :data:`DEFAULT_SKINNING`; 'pretrained' = 'network').

    Raises OptionError for an unknown name, listing the valid ones."""
    key = DEFAULT_SKINNING if name in (None, "", "default") else str(name).strip().lower()
    key = _ALIASES.get(key, key)
    if key not in SKINNING_BASES:
        raise OptionError(f"unknown skinning source {name!r}; use one of {', '.join(skinning_names())}")
    return key


def build_skinning(name: Optional[str], surface: torch.Tensor, volume: torch.Tensor,
                   options: Optional[SkinningOptions] = None, progress: ProgressFn = None) -> Tuple[SkinningField, str]:
    """Build the skinning field ``name`` (see :data:`SKINNING_BASES`) for one object.

    Few points (module docstring): the learned handles are at most :func:`handle_capacity` of ``volume`` and
    ``options.max_handles``; a reduction warns with a :class:`SkinningReducedWarning` (requested and used counts),
    and with no learned handle left the field is a :class:`ConstantSkinningField` (H = 1).

    Args:
        surface: (S, 3) float32 surface points, normalised frame (encoder input of ``network``/``fit``).
        volume: (V, 3) float32 volume points (surface + interior), normalised frame, V >= 1; the reference set of
            the column scales, and the domain of ``eigen``.
    Returns:
        (field, source) with source a short description ('eigen', 'network:physskin_m16.safetensors', ...).
    Raises:
        OptionError (unknown name, bad options, no (V, 3) volume points), CheckpointError (an asked-for checkpoint
        is missing or bad).
    """
    options = options or SkinningOptions()
    if int(options.num_handles) < 1:
        raise OptionError(f"the number of handles must be >= 1, got {options.num_handles}")
    if options.max_handles is not None and int(options.max_handles) < 0:
        raise OptionError(f"the bound on the number of handles must be >= 0, got {options.max_handles}")
    key = resolve_skinning(name)
    volume = torch.as_tensor(volume).float()
    if volume.ndim != 2 or volume.shape[1] != 3 or volume.shape[0] < 1:
        raise OptionError(f"skinning needs volume points (N, 3) with N >= 1, got {tuple(volume.shape)}")
    cap = handle_capacity(key, volume)
    bound = cap if options.max_handles is None else min(cap, int(options.max_handles))
    options = replace(options, max_handles=bound)
    return SKINNING_BASES[key].build(torch.as_tensor(surface).float(), volume, options, progress)


# ---------------------------------------------------------------------------------------------- save / load
def _field_state(field: SkinningField) -> Tuple[str, Dict[str, torch.Tensor], Dict]:
    from physskin_gs.model.network import PhysSkinNet, SimplicitsMLP
    from physskin_gs.model.neural_field import NeuralSkinningField

    if isinstance(field, ConstantSkinningField):
        return "constant", {"one": torch.ones(1)}, {}
    if isinstance(field, ColumnSubsetField):
        kind, tensors, meta = _field_state(field.inner)
        return "columns", {f"inner.{k}": v for k, v in tensors.items()}, {"inner_kind": kind, "inner": meta,
                                                                           "columns": field.columns}
    if isinstance(field, RBFSkinningField):
        return "rbf", {"centers": field.centers}, {"radius": field.radius}
    if isinstance(field, NeuralSkinningField):
        model = field.model
        tensors = {f"model.{k}": v for k, v in model.state_dict().items()}
        for k, v in field.cache.items():  # tensors, or tuples of tensors (precomputed keys and values)
            if isinstance(v, (tuple, list)):
                tensors.update({f"cache.{k}.{i}": t for i, t in enumerate(v)})
            else:
                tensors[f"cache.{k}"] = v
        tensors["norms"] = field.norms
        meta = {"n_ref": field.n_ref, "grad_mode": field.grad_mode, "chunk": field.chunk}
        if isinstance(model, PhysSkinNet):
            meta.update(net="physskin", config=model.config.to_dict())
        elif isinstance(model, SimplicitsMLP):
            lin = [m for m in model.net if isinstance(m, torch.nn.Linear)]
            meta.update(net="simplicits", num_handles=model.num_handles, hidden=lin[0].out_features, layers=len(lin))
        else:
            raise OptionError(f"cannot save a neural field of {type(model).__name__}")
        return "neural", tensors, meta
    if getattr(field, "kind", None) in ("eigen", "tet"):
        return field.kind, dict(field.state()), {}
    raise OptionError(f"cannot save a skinning field of type {type(field).__name__}")


def save_field(field: SkinningField, path) -> Path:
    """Write a field to ``path`` (.safetensors: its tensors, kind and settings in the metadata), atomically
    (temporary file, then rename). Raises OptionError for a field type that cannot be saved, OSError when the
    write fails."""
    from safetensors.torch import save_file

    kind, tensors, meta = _field_state(field)
    from physskin_gs.io._shared import atomic_output

    path = Path(path)
    with atomic_output(path) as tmp:  # a unique temporary name, removed on any failure
        save_file({k: torch.as_tensor(v).detach().contiguous().cpu() for k, v in tensors.items()}, tmp,
                  metadata={_FIELD_MAGIC: kind, "settings": json.dumps(meta), "num_handles": str(field.num_handles)})
    return path


def load_field(path) -> SkinningField:
    """Read a field written by :func:`save_field` (no pickle). Raises CheckpointError for a missing, corrupt or
    foreign file."""
    from physskin_gs.model.checkpoint import read_checkpoint

    tensors, meta = read_checkpoint(path)
    kind = meta.get(_FIELD_MAGIC)
    try:
        field = _field_from_state(kind, tensors, json.loads(meta.get("settings", "{}")))
    except (KeyError, RuntimeError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{path}: not a valid physskin_gs skinning field ({exc})") from exc
    if field is None:
        raise CheckpointError(f"{path}: not a physskin_gs skinning field (metadata {_FIELD_MAGIC!r} is {kind!r})")
    return field


def _field_from_state(kind, tensors: Dict[str, torch.Tensor], settings: Dict) -> Optional[SkinningField]:
    """The field of :func:`_field_state`'s (kind, tensors, settings), or None for an unknown kind."""
    if kind == "constant":
        return ConstantSkinningField()
    if kind == "columns":
        inner = _field_from_state(settings["inner_kind"], {k[6:]: v for k, v in tensors.items()
                                                           if k.startswith("inner.")}, settings["inner"])
        if inner is None:
            raise ValueError(f"unknown inner field kind {settings['inner_kind']!r}")
        return ColumnSubsetField(inner, settings["columns"])
    if kind == "rbf":
        return RBFSkinningField(tensors["centers"], settings["radius"])
    if kind == "eigen":
        return EigenSkinningField.from_state(tensors)
    if kind == "tet":
        from physskin_gs.model.tet_field import TetSkinningField

        return TetSkinningField.from_state(tensors)
    if kind == "neural":
        from physskin_gs.model.network import NetConfig, PhysSkinNet, SimplicitsMLP
        from physskin_gs.model.neural_field import NeuralSkinningField

        if settings["net"] == "physskin":
            model = PhysSkinNet(NetConfig.from_dict(settings["config"]))
        else:
            model = SimplicitsMLP(settings["num_handles"], settings["hidden"], settings["layers"])
        model.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")}, strict=True)
        model.eval()
        cache, parts = {}, {}
        for k, v in tensors.items():
            if k.startswith("cache."):
                name, _, i = k[6:].partition(".")
                if i:
                    parts.setdefault(name, {})[int(i)] = v
                else:
                    cache[name] = v
        cache.update({n: tuple(d[i] for i in sorted(d)) for n, d in parts.items()})
        return NeuralSkinningField(model, cache, tensors["norms"], settings["n_ref"], chunk=settings["chunk"],
                                   grad_mode=settings["grad_mode"])
    return None
