"""Training shapes for the self-supervised losses: loading, synthetic shapes and augmentation.

Prefers the geometry layer (``physskin_gs.geometry.dataset``: ShapeDataset / ShapeSample / sample_from_mesh /
procedural_sample). When that module is not importable, a small built-in mesh sampler is used: area-uniform
surface samples plus interior voxel-vote points (method.md 7.2: R^3 occupancy of the surface samples, dilated by
one voxel, a voxel is interior when >= 4 of its 6 axis directions hit an occupied voxel).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence

import numpy as np
import torch

from physskin_gs.errors import PhysSkinError


@dataclass
class TrainShape:
    """One training object in its normalised frame: surface (S, 3) and volume (V, 3) float32 points."""

    name: str
    surface: torch.Tensor
    volume: torch.Tensor


def _normalise(surface: np.ndarray, volume: np.ndarray):
    lo, hi = surface.min(0), surface.max(0)
    c = 0.5 * (lo + hi)
    s = 0.5 * float((hi - lo).max())
    if not s > 1e-9:
        raise PhysSkinError("degenerate shape: zero extent")
    return (surface - c) / s, (volume - c) / s


def interior_vote(points: np.ndarray, res: int = 48, rng: Optional[np.random.Generator] = None, max_points: int = 20000):
    """Interior points of a closed-ish point shell by the 4-of-6 axis vote (method.md 7.2). points in [-1, 1]^3."""
    rng = rng or np.random.default_rng(0)
    idx = np.clip(((points + 1.0) * 0.5 * res).astype(int), 0, res - 1)
    occ = np.zeros((res, res, res), bool)
    occ[idx[:, 0], idx[:, 1], idx[:, 2]] = True
    # dilate by one voxel (6-neighbourhood)
    d = occ.copy()
    for ax in range(3):
        d |= np.roll(occ, 1, ax) | np.roll(occ, -1, ax)
    occ = d
    votes = np.zeros(occ.shape, np.int8)
    for ax in range(3):
        fwd = np.maximum.accumulate(occ, axis=ax)
        bwd = np.flip(np.maximum.accumulate(np.flip(occ, ax), axis=ax), ax)
        votes += fwd.astype(np.int8) + bwd.astype(np.int8)
    inside = (votes >= 4) & ~occ
    ijk = np.argwhere(inside)
    if len(ijk) == 0 or inside.mean() > 0.9:
        return np.zeros((0, 3), np.float32)
    if len(ijk) > max_points:
        ijk = ijk[rng.choice(len(ijk), max_points, replace=False)]
    pts = (ijk + rng.random(ijk.shape)) / res * 2.0 - 1.0
    return pts.astype(np.float32)


def mesh_shape(path: Path, n_surface: int = 4096, seed: int = 0) -> TrainShape:
    """Built-in sampler: area-uniform surface samples and voxel-vote interior points of a mesh file."""
    import trimesh

    try:
        mesh = trimesh.load(str(path), force="mesh")
    except Exception as exc:  # noqa: BLE001 - trimesh raises many types
        raise PhysSkinError(f"{path}: cannot read mesh ({exc})") from exc
    if len(mesh.faces) == 0 or not np.isfinite(mesh.vertices).all():
        raise PhysSkinError(f"{path}: empty or non-finite mesh")
    rng = np.random.default_rng(seed)
    surf, _ = trimesh.sample.sample_surface(mesh, n_surface, seed=seed)
    surf = np.asarray(surf, np.float32)
    ext = surf.max(0) - surf.min(0)
    if ext.min() < 1e-6 * ext.max():
        raise PhysSkinError(f"{path}: degenerate (zero-thickness) mesh")
    surf_n, _ = _normalise(surf, surf)
    inner = interior_vote(surf_n, rng=rng)
    vol = np.concatenate([surf_n, inner], 0)
    return TrainShape(Path(path).stem, torch.from_numpy(surf_n.astype(np.float32)), torch.from_numpy(vol.astype(np.float32)))


def synthetic_shape(kind: str, n_surface: int = 2048, n_volume: int = 3000, seed: int = 0) -> TrainShape:
    """Tiny synthetic shapes for tests: 'sphere', 'box' or 'ellipsoid' (surface and uniform interior)."""
    g = torch.Generator().manual_seed(seed)
    if kind in ("sphere", "ellipsoid"):
        axes = torch.tensor([1.0, 1.0, 1.0] if kind == "sphere" else [1.0, 0.6, 0.4])
        s = torch.randn(n_surface, 3, generator=g)
        s = s / s.norm(dim=1, keepdim=True)
        v = torch.randn(n_volume, 3, generator=g)
        v = v / v.norm(dim=1, keepdim=True) * torch.rand(n_volume, 1, generator=g) ** (1 / 3)
        s, v = s * axes, v * axes
    elif kind == "box":
        axes = torch.tensor([1.0, 0.7, 0.5])
        s = torch.rand(n_surface, 3, generator=g) * 2 - 1
        ax = torch.randint(0, 3, (n_surface,), generator=g)
        s[torch.arange(n_surface), ax] = torch.sign(torch.randn(n_surface, generator=g))
        s = s * axes
        v = (torch.rand(n_volume, 3, generator=g) * 2 - 1) * axes
    else:
        raise ValueError(f"unknown synthetic shape {kind!r}")
    return TrainShape(kind, s.float(), torch.cat([s, v]).float())


def _from_sample(sample) -> TrainShape:
    surf = torch.as_tensor(np.asarray(sample.surface), dtype=torch.float32)
    vol = torch.as_tensor(np.asarray(sample.volume), dtype=torch.float32)
    return TrainShape(str(sample.name), surf, vol)


def load_shapes(
    paths: Sequence[str],
    exclude: Sequence[str] = (),
    seed: int = 0,
    log=print,
    num_procedural: int = 0,
    cache_dir: str = ".cache/shapes",
) -> List[TrainShape]:
    """Load training shapes from files or directories (meshes and splats), plus procedural shapes.

    Uses ``physskin_gs.geometry.dataset.ShapeDataset.build`` (cached samples: 2048 FPS surface points, 16384
    volume points) when the geometry layer is present, else the built-in mesh sampler (no procedural shapes).
    Files whose stem is in ``exclude`` are skipped; unreadable or degenerate shapes are skipped with a log line.
    Raises FileNotFoundError for a missing path and PhysSkinError if nothing usable remains.
    """
    files: List[Path] = []
    for p in paths:
        p = Path(p)
        if not p.exists():
            raise FileNotFoundError(f"training data not found: {p}")
        files += sorted(q for q in p.iterdir() if q.is_file()) if p.is_dir() else [p]
    excl = {_stem(e) for e in exclude}
    files = [f for f in files if _stem(f.name) not in excl and f.suffix.lower() not in (".md", ".txt", ".json")]
    shapes: List[TrainShape] = []
    try:
        from physskin_gs.geometry import dataset as gds  # type: ignore
    except Exception:  # noqa: BLE001 - geometry layer not available
        gds = None
    if gds is not None:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ds = gds.ShapeDataset.build(files, cache_dir=cache_dir, num_procedural=num_procedural, seed=seed,
                                        augment=False)
        for path, why in ds.skipped:
            log(f"skip {Path(path).name}: {why}")
        shapes = [_from_sample(smp) for smp in ds.samples]
    else:
        for f in files:
            if f.suffix.lower() in (".splat", ".spz") or f.name.endswith(".compressed.ply"):
                continue
            try:
                shapes.append(mesh_shape(f, seed=seed))
            except Exception as exc:  # noqa: BLE001 - skip bad shapes, keep training
                log(f"skip {f.name}: {exc}")
    if not shapes:
        raise PhysSkinError(f"no usable training shapes in {list(paths)}")
    return shapes


def _stem(name) -> str:
    n = Path(str(name)).name
    for suf in (".compressed.ply",):
        if n.endswith(suf):
            return n[: -len(suf)]
    return Path(n).stem


def random_rotation(g: torch.Generator) -> torch.Tensor:
    """Uniform random rotation (3, 3) from the QR decomposition of a Gaussian matrix."""
    q, r = torch.linalg.qr(torch.randn(3, 3, generator=g, dtype=torch.float64))
    q = q * torch.sign(torch.diagonal(r))
    if torch.det(q) < 0:
        q[:, 0] = -q[:, 0]
    return q.float()


def augment(shape: TrainShape, g: torch.Generator, scale_range=(0.75, 1.25)) -> TrainShape:
    """Random rotation + mild anisotropic scaling, then re-normalisation to [-1, 1] (method.md 7.2)."""
    R = random_rotation(g)
    s = scale_range[0] + (scale_range[1] - scale_range[0]) * torch.rand(3, generator=g)
    M = R * s  # rotate then scale each output axis
    surf = shape.surface @ M.t()
    vol = shape.volume @ M.t()
    lo, hi = surf.min(0).values, surf.max(0).values
    c = 0.5 * (lo + hi)
    k = 0.5 * float((hi - lo).max())
    return TrainShape(shape.name, (surf - c) / k, (vol - c) / k)
