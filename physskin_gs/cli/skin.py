"""``physskin-gs skin``: skinning weights at every Gaussian centre (splat) or vertex (mesh).

Output ``.npz`` (numpy, no pickle), N = number of Gaussians or vertices, H = m + 1 (constant handle last):

* ``weights`` (N, H) float32: W in the field's units (learned columns RMS 1 over the object's volume points,
  fixed column norms; constant column exactly 1; method.md 5). Non-finite input rows get zeros.
* ``grads`` (N, H, 3) float32: dW/dX with respect to the NORMALISED coordinates; divide by ``scale`` for
  world units (method.md 3, frame scaling).
* ``center`` (3,), ``scale`` () float64: ``x_norm = (x_world - center) / scale``.
* ``valid`` (N,) bool: rows with finite input positions.
* ``metrics``: JSON string (Omega_orth x1e-2, kappa_log, H_spec with the constant handle excluded/included,
  seconds, method, checkpoint).
"""

from __future__ import annotations

import json
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

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


def prepare_object(path, seed: int = 0) -> PreparedObject:
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
        means = scene.means.detach().cpu().numpy().astype(np.float64)
        opac = torch.sigmoid(scene.opacity_logits).detach().cpu().numpy()
        keep = finite_rows(means) & np.isfinite(opac) & (opac >= 0.05)
        norm = compute_normalization(means[keep], allow_flat=False, what=str(path))
        sample = sample_from_splat(scene, seed=seed, name=path.name)
        pts, kind = means, "splat"
    else:
        mesh = load_mesh(str(path))
        used = np.unique(mesh.faces.reshape(-1))
        norm = compute_normalization(mesh.vertices[used].astype(np.float64), allow_flat=False, what=str(path))
        sample = sample_from_mesh(mesh, seed=seed)
        pts, kind = mesh.vertices.astype(np.float64), "mesh"
    valid = finite_rows(pts)
    q = np.zeros_like(pts)
    q[valid] = norm.to_normalized(pts[valid])
    return PreparedObject(path.name, kind, np.asarray(norm.center, np.float64), float(norm.scale), sample.surface,
                          sample.volume, torch.from_numpy(q.astype(np.float32)), valid)


def field_for_object(obj: PreparedObject, method: str, checkpoint: Optional[str], fit_seconds: float, seed: int = 0):
    """The skinning field of a prepared object: feed-forward network ('network') or per-object fit ('fit')."""
    from physskin_gs.model import default_checkpoint_path, fit_skinning, load_checkpoint, skinning_from_model

    if method in ("network", "pretrained"):
        model = load_checkpoint(checkpoint or default_checkpoint_path())
        return skinning_from_model(model, obj.surface, obj.volume)
    if method == "fit":
        from physskin_gs.model.checkpoint import checkpoint_metadata
        from physskin_gs.model.fit import fit_config_like

        ck = checkpoint or default_checkpoint_path()
        train = checkpoint_metadata(ck).get("train_config", {}).get("train") if Path(ck).is_file() else None
        return fit_skinning(obj.surface, obj.volume, time_budget_s=fit_seconds, seed=seed, config=fit_config_like(train))
    raise OptionError(f"unknown skinning method {method!r} (use 'network' or 'fit')")


def register(sub) -> None:
    p = sub.add_parser("skin", help="skinning weights and gradients at every Gaussian centre or mesh vertex")
    p.add_argument("path", help="splat scene (.ply/.splat/.compressed.ply) or mesh (.obj/.ply/.stl/...)")
    p.add_argument("-o", "--output", required=True, help="output .npz")
    p.add_argument("--checkpoint", default=None, help="network checkpoint (default: the shipped one)")
    p.add_argument("--skinning", choices=["network", "pretrained", "fit"], default="network",
                   help="feed-forward network (default; 'pretrained' is an alias, as in animate) or per-object fit")
    p.add_argument("--fit-seconds", type=float, default=60.0, help="time budget of --skinning fit")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="torch threads")
    p.add_argument("--force", action="store_true", help="overwrite an existing output file")
    p.set_defaults(func=run)


def run(args) -> int:
    import torch

    from physskin_gs.model import skinning_metrics

    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(args.output)
    if out.suffix != ".npz":
        raise OptionError(f"{out}: output must be a .npz file")
    if Path(args.path).resolve() == out.resolve():
        raise OptionError(f"{out}: refusing to overwrite the input file")
    if out.exists() and not args.force:
        raise OptionError(f"{out}: exists (use --force to overwrite)")
    t0 = time.perf_counter()
    obj = prepare_object(args.path, seed=args.seed)
    t1 = time.perf_counter()
    field = field_for_object(obj, args.skinning, args.checkpoint, args.fit_seconds, args.seed)
    W, G = field.weights_and_grads(obj.query)
    t2 = time.perf_counter()
    W = W.numpy()
    G = G.numpy()
    W[~obj.valid] = 0.0
    G[~obj.valid] = 0.0
    Wv = torch.from_numpy(W[obj.valid])
    metrics = {
        "excluding_constant": skinning_metrics(Wv),
        "including_constant": skinning_metrics(Wv, include_constant=True),
        "points": int(obj.valid.sum()),
        "kind": obj.kind,
        "method": args.skinning,
        "checkpoint": str(args.checkpoint) if args.checkpoint else "default",
        "sample_seconds": round(t1 - t0, 3),
        "skinning_seconds": round(t2 - t1, 3),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez(out, weights=W.astype(np.float32), grads=G.astype(np.float32), center=obj.center,
             scale=np.float64(obj.scale), valid=obj.valid, metrics=np.array(json.dumps(metrics)))
    ex = metrics["excluding_constant"]
    print(f"{obj.name}: {W.shape[0]} {'Gaussians' if obj.kind == 'splat' else 'vertices'}, H = {W.shape[1]} handles, "
          f"Omega_orth x1e-2 = {ex['omega_orth_x1e2']:.3f}, kappa_log = {ex['kappa_log']:.3f}, "
          f"H_spec = {ex['h_spec']:.4f}, {metrics['skinning_seconds']:.2f} s -> {out}")
    return 0
