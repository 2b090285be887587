"""Training shapes for the self-supervised losses: loading, synthetic shapes and augmentation.

Sampling (FPS surface points, voxel-vote interior, procedural shapes; method.md 7.2) is the geometry layer's
(``physskin_gs.geometry.dataset``: ShapeDataset / ShapeSample / sample_from_mesh / procedural_sample); this module
only wraps its samples as :class:`TrainShape` tensors for the trainer.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence

import torch

from physskin_gs.errors import PhysSkinError
from physskin_gs.geometry.dataset import ShapeDataset


@dataclass
class TrainShape:
    """One training object in its normalised frame: surface (S, 3) and volume (V, 3) float32 points, and optionally
    a target skinning basis (V, K) at the volume points (the label-free subspace target, e.g. the eigen basis)."""

    name: str
    surface: torch.Tensor
    volume: torch.Tensor
    target: Optional[torch.Tensor] = None


def synthetic_shape(kind: str, n_surface: int = 2048, n_volume: int = 3000, seed: int = 0) -> TrainShape:
    """Tiny synthetic shapes for tests: 'sphere', 'box' or 'ellipsoid' (surface and uniform interior).

    Returns a :class:`TrainShape` with surface (n_surface, 3) and volume (n_surface + n_volume, 3) float32 points
    inside [-1, 1]^3 (unit sphere; ellipsoid axes (1, 0.6, 0.4); box half-extents (1, 0.7, 0.5)).
    Raises ValueError for another ``kind``.
    """
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
    surf = torch.as_tensor(sample.surface, dtype=torch.float32)  # [S, 3]
    vol = torch.as_tensor(sample.volume, dtype=torch.float32)  # [V, 3]
    return TrainShape(str(sample.name), surf, vol)


def load_shapes(
    paths: Sequence[str],
    exclude: Sequence[str] = (),
    seed: int = 0,
    log=print,
    num_procedural: int = 0,
    cache_dir: Optional[str] = None,
) -> List[TrainShape]:
    """Load training shapes from files or directories (meshes and splats), plus procedural shapes.

    Uses ``physskin_gs.geometry.dataset.ShapeDataset.build`` (cached samples: 2048 FPS surface points, 16384
    volume points, float32, normalised frame).
    Files whose stem is in ``exclude`` are skipped; unreadable or degenerate shapes found in a folder are skipped
    with a log line, while a file named in ``paths`` itself that cannot be used is an error (a user who names a
    file means it).
    Raises FileNotFoundError for a missing path and PhysSkinError for an unusable named file or if nothing usable
    remains.
    """
    files: List[Path] = []
    named = set()
    for p in paths:
        p = Path(p)
        if not p.exists():
            raise FileNotFoundError(f"training data not found: {p}")
        if p.is_dir():
            files += sorted(q for q in p.iterdir() if q.is_file())
        else:
            files.append(p)
            named.add(str(p.resolve()))
    excl = {_stem(e) for e in exclude}
    held = [f for f in files if _stem(f.name) in excl]
    for f in held:
        log(f"skip {f.name}: a held-out evaluation shape (--include-held-out trains on it too)")
    files = [f for f in files if _stem(f.name) not in excl and f.suffix.lower() not in (".md", ".txt", ".json")]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = ShapeDataset.build(files, cache_dir=cache_dir, num_procedural=num_procedural, seed=seed, augment=False)
    bad = [(path, why) for path, why in ds.skipped if str(Path(path).resolve()) in named]
    if bad:
        raise PhysSkinError("cannot train on " + "; ".join(f"{path}: {why}" for path, why in bad))
    for path, why in ds.skipped:
        log(f"skip {Path(path).name}: {why}")
    shapes = [_from_sample(smp) for smp in ds.samples]
    if not shapes:
        why = (f" ({len(held)} held-out evaluation shape{'s' if len(held) != 1 else ''} left out: "
               "--include-held-out trains on them)" if held else "")
        raise PhysSkinError(f"no usable training shapes in {list(map(str, paths))}{why}")
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
    """Random rotation + mild anisotropic scaling, then re-normalisation to [-1, 1] (method.md 7.2).

    A shape with a subspace ``target`` is only rotated (uniform scale 1): the eigen basis of a rotated shape is
    the rotated basis (same values at the same points), which an anisotropic scale would change. The target
    rows follow the volume points unchanged."""
    R = random_rotation(g)
    s = scale_range[0] + (scale_range[1] - scale_range[0]) * torch.rand(3, generator=g)
    if shape.target is not None:
        s = torch.ones(3)
    M = (R * s).to(shape.surface.device)  # rotate then scale each output axis
    surf = shape.surface @ M.t()
    vol = shape.volume @ M.t()
    lo, hi = surf.min(0).values, surf.max(0).values
    c = 0.5 * (lo + hi)
    k = 0.5 * float((hi - lo).max())
    return TrainShape(shape.name, (surf - c) / k, (vol - c) / k, shape.target)
