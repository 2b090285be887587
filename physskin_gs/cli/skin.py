"""``physskin-gs skin``: skinning weights at every Gaussian centre (splat) or vertex (mesh), or at query points.

``physskin-gs skin PATH -o OUT.npz [--skinning eigen|network|fit|rbf] [--points PTS.npy]``: the field is built
for the object in PATH (its normalisation, volume points and column scales), then evaluated at the object's own
points, or at ``PTS.npy`` ((N, 3) in the scene units of PATH), with the same normalisation, so ``--points`` at the
object's own points gives the same rows.

Output ``.npz`` (numpy, no pickle), N = number of Gaussians, vertices or query points, H = m + 1 (constant handle
last):

* ``weights`` (N, H) float32: W in the field's units (learned columns RMS 1 over the object's volume points,
  fixed column norms; constant column exactly 1; method.md 5). Non-finite input rows get zeros.
* ``grads`` (N, H, 3) float32: dW/dX with respect to the NORMALISED coordinates; divide by ``scale`` for
  world units (method.md 3, frame scaling).
* ``grads_scene`` (N, H, 3) float32: dW/dx in scene units (``grads / scale``).
* ``center`` (3,), ``scale`` () float64: ``x_norm = (x_world - center) / scale``.
* ``valid`` (N,) bool: rows with finite input positions.
* ``metrics``: JSON string (Omega_orth x1e-2, kappa_log, H_spec with the constant handle excluded/included,
  seconds, method, checkpoint).
"""

from __future__ import annotations

import json
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from physskin_gs.cli._skinning import add_skinning_arguments, skinning_options
from physskin_gs.errors import OptionError

_SPLAT_FORMATS = ("inria-ply", "splat", "compressed-ply")


@dataclass
class PreparedObject:
    """An input object in the normalised frame: encoder surface, volume pool, and the query points."""

    name: str
    kind: str  # 'splat' or 'mesh'
    center: np.ndarray
    scale: float
    surface: "object"  # torch (S, 3)
    volume: "object"  # torch (V, 3)
    query: "object"  # torch (N, 3) normalised (non-finite rows zeroed)
    valid: np.ndarray  # (N,) bool
    usable: int = -1  # points the field is built from (finite, opacity >= 0.05 for a splat; used mesh vertices)


def prepare_object(path, seed: int = 0, warn: bool = False) -> PreparedObject:
    """Load a splat scene or a mesh and sample it (geometry layer) in its normalised frame.

    Raises FileNotFoundError, SceneFormatError (unreadable file) or DegenerateGeometryError (flat shape).
    """
    import torch

    from physskin_gs.geometry.dataset import sample_from_mesh, sample_from_splat
    from physskin_gs.geometry.normalize import compute_normalization, finite_rows
    from physskin_gs.io import detect_format, load_scene
    from physskin_gs.io.mesh import load_mesh

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: input file not found")
    fmt = detect_format(str(path))
    if fmt in _SPLAT_FORMATS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            scene = load_scene(str(path))
        if warn:
            from physskin_gs.cli._common import warn_scene

            warn_scene(scene, path)
        means = scene.means.detach().cpu().numpy().astype(np.float64)
        opac = torch.sigmoid(scene.opacity_logits).detach().cpu().numpy()
        keep = finite_rows(means) & np.isfinite(opac) & (opac >= 0.05)
        # floaters (small or far clusters, scene analysis) must not set the normalisation or the volume
        from physskin_gs.geometry.scene_analysis import analyze_gaussian_scene

        if keep.sum() >= 100:
            keep &= ~analyze_gaussian_scene(scene).floater
        norm = compute_normalization(means[keep], allow_flat=False, what=str(path))
        sample = sample_from_splat(scene.subset(torch.from_numpy(np.flatnonzero(keep))), seed=seed, name=path.name)
        pts, kind = means, "splat"
        usable = int(keep.sum())
    else:
        mesh = load_mesh(str(path))
        used = np.unique(mesh.faces.reshape(-1))
        norm = compute_normalization(mesh.vertices[used].astype(np.float64), allow_flat=False, what=str(path))
        sample = sample_from_mesh(mesh, seed=seed)
        pts, kind = mesh.vertices.astype(np.float64), "mesh"
        usable = int(np.isfinite(mesh.vertices[used]).all(axis=1).sum())
    valid = finite_rows(pts)
    q = np.zeros_like(pts)
    q[valid] = norm.to_normalized(pts[valid])
    return PreparedObject(path.name, kind, np.asarray(norm.center, np.float64), float(norm.scale), sample.surface,
                          sample.volume, torch.from_numpy(q.astype(np.float32)), valid, usable)


def field_for_object(obj: PreparedObject, method: Optional[str], options=None):
    """(field, source) of a prepared object from the basis ``method`` (:func:`physskin_gs.model.bases.build_skinning`)."""
    from physskin_gs.model.bases import build_skinning

    return build_skinning(method, obj.surface, obj.volume, options)


def load_query_points(path, obj: PreparedObject):
    """Query points from a .npy file: (N, 3) finite numbers in scene units -> (normalised (N, 3) float32 torch,
    scene (N, 3) float64). Raises OptionError naming the file for a missing, unreadable or wrongly shaped array."""
    import torch

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"--points {path}: input file not found")
    try:
        pts = np.load(path, allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise OptionError(f"{path}: not a readable .npy array ({exc})") from None
    if pts.ndim != 2 or pts.shape[1] != 3 or pts.shape[0] < 1 or not np.issubdtype(pts.dtype, np.number):
        raise OptionError(f"{path}: --points needs an (N, 3) numeric array, got shape {pts.shape} {pts.dtype}")
    pts = pts.astype(np.float64)
    if not np.isfinite(pts).all():
        bad = int((~np.isfinite(pts).all(1)).sum())
        raise OptionError(f"{path}: {bad} query points are not finite")
    q = (pts - obj.center[None]) / obj.scale
    return torch.from_numpy(q.astype(np.float32)), pts


def register(sub) -> None:
    p = sub.add_parser("skin", help="skinning weights and gradients at every Gaussian centre or mesh vertex")
    p.add_argument("path", help="splat scene (.ply/.splat/.compressed.ply) or mesh (.obj/.ply/.stl/...)")
    p.add_argument("-o", "--output", required=True, help="output .npz")
    p.add_argument("--points", metavar="PTS.npy", help="query points (N, 3) in scene units (.npy) instead of the "
                   "Gaussian centres / mesh vertices; same normalisation as the object's own points")
    add_skinning_arguments(p)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="torch threads")
    p.add_argument("--force", action="store_true", help="overwrite an existing output file")
    p.set_defaults(func=run)


def run(args) -> int:
    import torch

    from physskin_gs.model import skinning_metrics
    from physskin_gs.model.bases import resolve_skinning

    from physskin_gs.cli._common import OutputError, check_int, check_number, verify_written

    check_number("--fit-seconds", args.fit_seconds, 0, 3600, lo_open=True, unit="s")
    check_int("--seed", args.seed, 0)
    if args.threads is not None:
        check_int("--threads", args.threads, 1, 256)
        torch.set_num_threads(args.threads)
    out = Path(args.output)
    if out.suffix != ".npz":
        raise OptionError(f"{out}: output must be a .npz file")
    if Path(args.path).resolve() == out.resolve():
        raise OptionError(f"{out}: refusing to overwrite the input file")
    if out.exists() and not args.force:
        raise OptionError(f"{out}: exists (use --force to overwrite)")
    if args.points and Path(args.points).resolve() == out.resolve():
        raise OptionError(f"{out}: refusing to overwrite the query points file")
    opts = skinning_options(args)
    if resolve_skinning(args.skinning) == "network" and args.checkpoint:
        from physskin_gs.model import load_checkpoint

        load_checkpoint(args.checkpoint)  # a bad checkpoint fails before any work
    t0 = time.perf_counter()
    obj = prepare_object(args.path, seed=args.seed, warn=True)
    if args.points:
        query, _ = load_query_points(args.points, obj)
        valid = np.ones(query.shape[0], bool)
    else:
        query, valid = obj.query, obj.valid
    usable = obj.usable if obj.usable >= 0 else int(obj.valid.sum())
    if usable < opts.num_handles + 1:
        what = "Gaussians (finite, opacity >= 0.05)" if obj.kind == "splat" else "vertices"
        raise OptionError(f"{args.path}: {usable} usable {what}; skinning {opts.num_handles} handles needs at least "
                          f"{opts.num_handles + 1}")
    t1 = time.perf_counter()
    try:
        field, source = field_for_object(obj, args.skinning, opts)
    except OptionError:
        raise
    except ValueError as exc:  # the basis cannot be built from so few / such points
        raise OptionError(f"{args.path}: cannot build the {resolve_skinning(args.skinning)} skinning basis from "
                          f"{usable} usable points ({exc})") from None
    W, G = field.weights_and_grads(query)
    t2 = time.perf_counter()
    W = W.numpy()
    G = G.numpy()
    W[~valid] = 0.0
    G[~valid] = 0.0
    Wv = torch.from_numpy(W[valid])
    from physskin_gs.cli._common import finite_or_none

    metrics = {
        "excluding_constant": skinning_metrics(Wv),
        "including_constant": skinning_metrics(Wv, include_constant=True),
        "points": int(valid.sum()),
        "query": "points" if args.points else ("gaussians" if obj.kind == "splat" else "vertices"),
        "kind": obj.kind,
        "method": resolve_skinning(args.skinning),
        "source": source,
        "checkpoint": str(args.checkpoint) if args.checkpoint else "default",
        "sample_seconds": round(t1 - t0, 3),
        "skinning_seconds": round(t2 - t1, 3),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp.npz")
    try:
        np.savez(tmp, weights=W.astype(np.float32), grads=G.astype(np.float32),
                 grads_scene=(G / obj.scale).astype(np.float32), center=obj.center, scale=np.float64(obj.scale),
                 valid=valid, metrics=np.array(json.dumps(finite_or_none(metrics), allow_nan=False)))
        os.replace(tmp, out)
    except OSError as exc:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise OutputError(f"could not write {out}: {exc.strerror or exc}") from None
    verify_written(out, "skinning weights")
    ex = metrics["excluding_constant"]
    what = "query points" if args.points else ("Gaussians" if obj.kind == "splat" else "vertices")
    print(f"{obj.name}: {W.shape[0]} {what}, H = {W.shape[1]} handles, "
          f"Omega_orth x1e-2 = {ex['omega_orth_x1e2']:.3f}, kappa_log = {ex['kappa_log']:.3f}, "
          f"H_spec = {ex['h_spec']:.4f}, {metrics['skinning_seconds']:.2f} s -> {out}")
    return 0
