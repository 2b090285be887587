"""Training shapes for the skinning-field encoder (method.md 6.1, 7.2): meshes, splat centres, procedural shapes.

Every :class:`ShapeSample` lives in the normalised frame (bbox centre at 0, longest axis spanning [-1, 1]):

* ``surface``: (S, 3) encoder input, FPS-reduced to S = 2048 (area-uniform mesh samples, or finite splat
  centres with sigmoid(opacity) >= 0.05).
* ``volume``: (V, 3) cubature pool = surface points + interior points from the voxel fill
  (:mod:`physskin_gs.geometry.interior`); by default 1/4 surface and 3/4 interior, V = 16384.
* ``normals``: (S, 3) unit normals at ``surface`` (meshes and procedural shapes; file orientation), or None.

:class:`ShapeDataset` caches each shape as one safetensors file (no pickle) keyed by the source file's name,
size and mtime plus the sampling parameters, and applies augmentation on access: a uniformly random
rotation, then a mild per-axis scale, then re-normalisation.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from physskin_gs.geometry.interior import fill_splat_interior, mesh_volume_points
from physskin_gs.geometry.normalize import DegenerateGeometryError, compute_normalization, finite_rows
from physskin_gs.geometry.sampling import farthest_point_sampling
from physskin_gs.geometry.shapes import procedural_shape, random_rotation

#: Shared meshes kept out of training for evaluation (diverse: organic closed, multi-part, genus 1, the
#: cantilever beam, a small metric-scale STL). Both bunnies stay in training.
HELD_OUT_MESHES = [
    "c3d_spot.obj",
    "pyvista_ant.ply",
    "pybullet_torus.obj",
    "kaolin_beam_surf.obj",
    "robosuite_lemon.stl",
]
#: Shared splats kept out of training: the spot splat is the held-out spot mesh.
HELD_OUT_SPLATS = ["spot_mesh2splat_10k.splat"]
#: Never used: degenerate (flat) inputs.
EXCLUDED_MESHES = ["c3d_alligator.obj"]
#: Splats whose licence allows training use (SOURCES.md): CC-BY-4.0 plant, MIT-repo guitar. Not the lego
#: (test-only), the rubber toy (non-commercial) or the scene tiles (not objects).
TRAINING_SPLATS = ["plant_capture.splat", "guitar_playcanvas.compressed.ply"]

#: Bump when the sampling code changes in a way that invalidates cached shapes.
CACHE_VERSION = "3"  # 3: watertight meshes filled by the exterior flood, not the axis vote

_SPLAT_FORMATS = ("inria-ply", "splat", "compressed-ply")


@dataclass
class ShapeSample:
    """One training shape in the normalised frame.

    Attributes:
        name: identifier (file name, or ``procedural_<family>_<seed>``).
        surface: (S, 3) float32 FPS-reduced encoder input, S = 2048 by default.
        volume: (V, 3) float32 cubature pool (surface + interior points).
        normals: (S, 3) float32 unit normals at ``surface``, or None (splats).
    """

    name: str
    surface: torch.Tensor
    volume: torch.Tensor
    normals: Optional[torch.Tensor] = None

    def __post_init__(self) -> None:
        for attr in ("surface", "volume", "normals"):
            t = getattr(self, attr)
            if t is None:
                continue
            t = torch.as_tensor(t, dtype=torch.float32)
            if t.ndim != 2 or t.shape[1] != 3:
                raise ValueError(f"ShapeSample.{attr} has shape {tuple(t.shape)}, expected (N, 3)")
            setattr(self, attr, t)
        if self.normals is not None and self.normals.shape[0] != self.surface.shape[0]:
            raise ValueError("ShapeSample.normals must have one row per surface point")


# ----------------------------------------------------------------------------------------- builders
def _split_volume(n_volume: int, surface_fraction: float) -> Tuple[int, int]:
    n_s = int(round(n_volume * surface_fraction))
    return n_s, n_volume - n_s


def sample_from_mesh(
    path_or_mesh,
    n_encoder: int = 2048,
    n_volume: int = 16384,
    seed: int = 0,
    *,
    resolution: int = 64,
    surface_fraction: float = 0.25,
    n_candidates: int = 16384,
    allow_flat: bool = False,
) -> ShapeSample:
    """A :class:`ShapeSample` from a triangle mesh (method.md 7.2).

    Encoder input: FPS of ``n_candidates`` area-uniform samples down to ``n_encoder``. Volume: ``n_volume``
    points, ``surface_fraction`` of them fresh surface samples and the rest interior samples of the voxel fill
    (resolution R, see :func:`mesh_volume_points`); surface samples fill in when the interior is empty.

    Args:
        path_or_mesh: a mesh file path or a :class:`physskin_gs.io.mesh.Mesh`.
        allow_flat: accept a flat mesh (a single-triangle fin, a card; the product's commands do): its volume
            points are all surface samples (no interior). Training keeps flat meshes out (the default).

    Raises:
        FileNotFoundError / SceneFormatError: from :func:`physskin_gs.io.mesh.load_mesh`.
        DegenerateGeometryError: empty mesh, or flat without ``allow_flat`` (e.g. ``c3d_alligator.obj``).
    """
    from physskin_gs.io.mesh import Mesh, load_mesh

    mesh = path_or_mesh if isinstance(path_or_mesh, Mesh) or hasattr(path_or_mesh, "faces") else load_mesh(path_or_mesh)
    name = getattr(mesh, "name", None) or "mesh"
    n_vs, n_vi = _split_volume(n_volume, surface_fraction)
    mv = mesh_volume_points(mesh, n_surface=n_candidates + n_vs, n_interior=n_vi, R=resolution, seed=seed,
                            allow_flat=allow_flat)
    cand, cand_n = mv.surface[:n_candidates], mv.normals[:n_candidates]
    idx = farthest_point_sampling(cand, n_encoder, seed=seed)
    vol_surface = mv.surface[n_candidates:]
    interior = mv.interior
    if interior.shape[0] < n_vi:  # flat-ish or open: top up with surface samples
        extra = np.random.default_rng(seed).choice(mv.surface.shape[0], size=n_vi - interior.shape[0])
        interior = np.concatenate([interior, mv.surface[extra]])
    volume = np.concatenate([vol_surface, interior])
    return ShapeSample(
        name=name,
        surface=torch.from_numpy(cand[idx]),
        volume=torch.from_numpy(volume.astype(np.float32)),
        normals=torch.from_numpy(cand_n[idx]),
    )


def _splat_arrays(scene) -> Tuple[np.ndarray, Optional[np.ndarray], Optional[np.ndarray], Optional[np.ndarray], str]:
    """(means, log_scales, activated opacities, quats, name) from a GaussianScene or a tuple."""
    if hasattr(scene, "means") and hasattr(scene, "opacity_logits"):
        name = os.path.basename(scene.source) if getattr(scene, "source", None) else "splat"
        return (
            scene.means.detach().cpu().numpy(),
            scene.log_scales.detach().cpu().numpy(),
            torch.sigmoid(scene.opacity_logits).detach().cpu().numpy(),
            scene.quats.detach().cpu().numpy(),
            name,
        )
    means, log_scales, opacities = (list(scene) + [None, None])[:3]
    conv = lambda x: None if x is None else (x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x))
    return conv(means), conv(log_scales), conv(opacities), None, "splat"


def sample_from_splat(
    scene,
    n_encoder: int = 2048,
    n_volume: int = 16384,
    seed: int = 0,
    *,
    opacity_threshold: float = 0.05,
    resolution: int = 64,
    surface_fraction: float = 0.25,
    name: Optional[str] = None,
) -> ShapeSample:
    """A :class:`ShapeSample` from Gaussian centres (method.md 7.2 encoder input, 8 interior fill).

    Encoder input: FPS of the finite centres with opacity >= ``opacity_threshold`` down to ``n_encoder``.
    Volume: kept centres (``surface_fraction`` of ``n_volume``, random without replacement) plus the
    interior points of :func:`fill_splat_interior`; on its fallback (open/leaky shell) shell points only.

    Args:
        scene: a :class:`physskin_gs.scene.GaussianScene`, or a tuple ``(means (N, 3), log_scales (N, 3) or
            None, opacities (N,) activated in [0, 1] or None)``.

    Raises:
        DegenerateGeometryError: no Gaussian survives the filter, or the kept centres are flat.
    """
    means, log_scales, opac, quats, default_name = _splat_arrays(scene)
    name = name or default_name
    keep = finite_rows(means)
    if opac is not None:
        keep &= np.isfinite(opac) & (opac >= opacity_threshold)
    centers = means[keep].astype(np.float64)
    if centers.shape[0] == 0:
        raise DegenerateGeometryError(f"{name}: no Gaussians with finite centre and opacity >= {opacity_threshold}")
    norm = compute_normalization(centers, allow_flat=False, what=name)
    cn = norm.to_normalized(centers).astype(np.float32)  # [K, 3]
    idx = farthest_point_sampling(cn, n_encoder, seed=seed)
    rng = np.random.default_rng(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sv = fill_splat_interior(means, log_scales, opac, resolution=resolution, quats=quats,
                                 opacity_threshold=opacity_threshold, seed=seed)
    n_vs, n_vi = _split_volume(n_volume, surface_fraction)
    interior = norm.to_normalized(sv.interior.numpy().astype(np.float64)).astype(np.float32)
    if sv.fallback or interior.shape[0] == 0:
        n_vs, n_vi = n_volume, 0
    shell = cn[rng.choice(cn.shape[0], size=n_vs, replace=n_vs > cn.shape[0])]
    if n_vi > 0:
        interior = interior[rng.choice(interior.shape[0], size=n_vi, replace=n_vi > interior.shape[0])]
        volume = np.concatenate([shell, interior])
    else:
        volume = shell
    return ShapeSample(name=name, surface=torch.from_numpy(cn[idx]), volume=torch.from_numpy(volume), normals=None)


def procedural_sample(seed: int, n_encoder: int = 2048, n_volume: int = 16384, *, surface_fraction: float = 0.25,
                      family: Optional[str] = None) -> ShapeSample:
    """A :class:`ShapeSample` of a procedural union of primitives (:mod:`physskin_gs.geometry.shapes`).

    Deterministic in ``seed``. Encoder input: FPS of 8192 area-uniform boundary samples down to ``n_encoder``.
    """
    n_vs, n_vi = _split_volume(n_volume, surface_fraction)
    n_cand = max(8192, n_encoder)
    shape = procedural_shape(seed, n_surface=n_cand + n_vs, n_interior=n_vi, family=family)
    cand, cand_n = shape.surface[:n_cand], shape.normals[:n_cand]
    idx = farthest_point_sampling(cand, n_encoder, seed=seed)
    volume = np.concatenate([shape.surface[n_cand:], shape.interior])
    return ShapeSample(name=shape.name, surface=torch.from_numpy(cand[idx]),
                       volume=torch.from_numpy(volume.astype(np.float32)), normals=torch.from_numpy(cand_n[idx]))


# --------------------------------------------------------------------------------------- cache files
def save_sample(sample: ShapeSample, path: Union[str, Path]) -> None:
    """Write a sample as safetensors (tensors ``surface``, ``volume``, optional ``normals``; name in metadata).
    Atomic (temporary file + rename)."""
    from safetensors.torch import save_file

    tensors = {"surface": sample.surface.contiguous(), "volume": sample.volume.contiguous()}
    if sample.normals is not None:
        tensors["normals"] = sample.normals.contiguous()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    from physskin_gs.io._shared import atomic_output

    with atomic_output(path) as tmp:  # a unique temporary name, removed on any failure
        save_file(tensors, tmp, metadata={"name": sample.name, "format": "physskin_gs.shape", "version": CACHE_VERSION})


def is_shape_sample(path: Union[str, Path]) -> bool:
    """Whether ``path`` is a shape-sample file written by :func:`save_sample` (reads only its safetensors header:
    the ``format`` metadata). A model checkpoint, any other safetensors file or an unreadable one: False."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as fh:
            return (fh.metadata() or {}).get("format") == "physskin_gs.shape"
    except Exception:  # noqa: BLE001 - not a readable safetensors file
        return False


def load_sample(path: Union[str, Path]) -> ShapeSample:
    """Read a sample written by :func:`save_sample`. Raises SceneFormatError for a file that is not one."""
    from safetensors import safe_open

    from physskin_gs.errors import SceneFormatError

    try:
        with safe_open(str(path), framework="pt") as fh:
            meta = fh.metadata() or {}
            keys = set(fh.keys())
            tensors = {k: fh.get_tensor(k) for k in keys}
    except Exception as exc:
        raise SceneFormatError(f"{path}: not a readable shape cache file ({exc})") from exc
    if meta.get("format") != "physskin_gs.shape" or not {"surface", "volume"} <= keys:
        raise SceneFormatError(f"{path}: not a physskin_gs shape cache file")
    return ShapeSample(name=meta.get("name", Path(path).stem), surface=tensors["surface"], volume=tensors["volume"],
                       normals=tensors.get("normals"))


def _cache_key(parts: Sequence) -> str:
    return hashlib.sha1(json.dumps([CACHE_VERSION, *parts], sort_keys=True, default=str).encode()).hexdigest()[:12]


def default_training_paths(shared_data: Union[str, Path]) -> List[Path]:
    """Training inputs under a ``shared/data`` folder: meshes minus held-out and excluded ones, plus
    :data:`TRAINING_SPLATS` that exist."""
    root = Path(shared_data)
    meshes = sorted(p for p in (root / "meshes").glob("*") if p.is_file()
                    and p.name not in HELD_OUT_MESHES and p.name not in EXCLUDED_MESHES)
    splats = [root / "splats" / n for n in TRAINING_SPLATS if (root / "splats" / n).is_file()]
    return meshes + splats


# -------------------------------------------------------------------------------------- the dataset
def augment_sample(sample: ShapeSample, rng: np.random.Generator, scale_range: Tuple[float, float] = (0.8, 1.25),
                   rotate: bool = True) -> ShapeSample:
    """Random rotation (uniform on SO(3)) then per-axis scale in ``scale_range``, then re-normalisation of
    surface and volume together (bbox centre, half largest extent). Normals use the inverse transpose."""
    rot = random_rotation(rng) if rotate else np.eye(3)
    lin = np.diag(rng.uniform(scale_range[0], scale_range[1], size=3)) @ rot  # [3, 3]
    lin_t = torch.as_tensor(lin, dtype=torch.float32)
    surf = sample.surface @ lin_t.T
    vol = sample.volume @ lin_t.T
    both = torch.cat([surf, vol])
    lo, hi = both.min(dim=0).values, both.max(dim=0).values
    center, scale = (lo + hi) / 2, (hi - lo).max() / 2
    normals = None
    if sample.normals is not None:
        inv_t = torch.as_tensor(np.linalg.inv(lin).T, dtype=torch.float32)
        normals = sample.normals @ inv_t.T
        normals = normals / normals.norm(dim=1, keepdim=True).clamp_min(1e-12)
    return ShapeSample(sample.name, (surf - center) / scale, (vol - center) / scale, normals)


class ShapeDataset:
    """A list of :class:`ShapeSample` with on-access augmentation.

    ``dataset[i]`` returns sample i augmented with the dataset's own generator (seeded at construction);
    ``dataset.get(i, rng)`` uses a given ``numpy.random.Generator`` (None = the dataset's). With
    ``augment=False`` the stored sample is returned unchanged.
    """

    def __init__(self, samples: Sequence[ShapeSample], augment: bool = True, seed: int = 0,
                 scale_range: Tuple[float, float] = (0.8, 1.25)):
        self.samples: List[ShapeSample] = list(samples)
        self.augment = augment
        self.scale_range = scale_range
        self._rng = np.random.default_rng(seed)
        self.skipped: List[Tuple[str, str]] = []

    def __len__(self) -> int:
        return len(self.samples)

    @property
    def names(self) -> List[str]:
        return [s.name for s in self.samples]

    def get(self, i: int, rng: Optional[np.random.Generator] = None) -> ShapeSample:
        s = self.samples[i]
        if not self.augment:
            return s
        return augment_sample(s, rng if rng is not None else self._rng, self.scale_range)

    def __getitem__(self, i: int) -> ShapeSample:
        return self.get(i)

    @classmethod
    def build(
        cls,
        paths: Iterable[Union[str, Path]],
        cache_dir: Union[str, Path, None] = None,
        num_procedural: int = 64,
        seed: int = 0,
        *,
        n_encoder: int = 2048,
        n_volume: int = 16384,
        resolution: int = 64,
        augment: bool = True,
        verbose: bool = False,
    ) -> "ShapeDataset":
        """Sample (or load from the cache) every mesh / splat in ``paths`` plus ``num_procedural`` procedural
        shapes (seeds ``seed*100000 + k``).

        Files are told apart by content (:func:`physskin_gs.io.detect_format`): Gaussian scenes go through
        :func:`sample_from_splat`, meshes through :func:`sample_from_mesh`. A file that fails (unreadable,
        degenerate) is skipped and recorded in ``dataset.skipped`` as (path, reason) with a warning. Cache
        files are ``<cache_dir>/<name>-<key>.safetensors``; the key covers the file name, size, mtime, the
        sampling parameters and :data:`CACHE_VERSION`; ``cache_dir`` None: the user cache
        (:func:`physskin_gs._native.user_cache` ``("shapes")``).
        """
        from physskin_gs.errors import PhysSkinError

        if cache_dir is None:
            from physskin_gs._native import user_cache

            cache_dir = user_cache("shapes")
        cache = Path(cache_dir)
        samples: List[ShapeSample] = []
        skipped: List[Tuple[str, str]] = []
        params = {"n_encoder": n_encoder, "n_volume": n_volume, "resolution": resolution, "seed": seed}
        for p in paths:
            p = Path(p)
            t0 = time.perf_counter()
            try:
                st = p.stat()
                key = _cache_key([p.name, st.st_size, int(st.st_mtime), params])
                cfile = cache / f"{p.name}-{key}.safetensors"
                if cfile.is_file():
                    sample = load_sample(cfile)
                else:
                    sample = _sample_path(p, n_encoder, n_volume, seed, resolution)
                    save_sample(sample, cfile)
            except (PhysSkinError, OSError, ValueError) as exc:
                skipped.append((str(p), str(exc)))
                warnings.warn(f"ShapeDataset.build: skipping {p}: {exc}")
                continue
            samples.append(sample)
            if verbose:
                print(f"  {sample.name:40s} {time.perf_counter() - t0:6.2f} s")
        for k in range(num_procedural):
            pseed = seed * 100000 + k
            key = _cache_key(["procedural", pseed, params])
            cfile = cache / f"procedural_{pseed}-{key}.safetensors"
            if cfile.is_file():
                sample = load_sample(cfile)
            else:
                sample = procedural_sample(pseed, n_encoder=n_encoder, n_volume=n_volume)
                save_sample(sample, cfile)
            samples.append(sample)
        ds = cls(samples, augment=augment, seed=seed)
        ds.skipped = skipped
        return ds


def _sample_path(path: Path, n_encoder: int, n_volume: int, seed: int, resolution: int) -> ShapeSample:
    from physskin_gs.io import detect_format, load_scene

    fmt = detect_format(str(path))
    if fmt in _SPLAT_FORMATS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            scene = load_scene(str(path))
        return sample_from_splat(scene, n_encoder, n_volume, seed, resolution=resolution, name=path.name)
    return sample_from_mesh(path, n_encoder, n_volume, seed, resolution=resolution)
