"""``physskin-gs skin``: skinning weights at every Gaussian centre (splat) or vertex (mesh), or at query points.

``physskin-gs skin PATH -o OUT.npz [--skinning eigen|network|fit|rbf] [--points PTS.npy]``: the field is built
for the object in PATH (its normalisation, volume points and column scales), then evaluated at the object's own
points, or at ``PTS.npy`` ((N, 3) in the scene units of PATH), with the same normalisation, so ``--points`` at the
object's own points gives the same rows. For a splat the object is every usable Gaussian of the file (floaters
left out, no support or background removed): ``animate`` builds its field on the object its scene analysis
finds, so on a capture with a support or background the two differ (one line says so).

Output ``.npz`` (numpy, no pickle), N = number of Gaussians, vertices or query points, H = m + 1 (constant handle
last):

* ``weights`` (N, H) float32: W in the field's units (learned columns RMS 1 over the object's volume points,
  fixed column norms; constant column exactly 1; method.md 5). Non-finite input rows get zeros.
* ``grads`` (N, H, 3) float32: dW/dX with respect to the NORMALISED coordinates; divide by ``scale`` for
  world units (method.md 3, frame scaling).
* ``grads_scene`` (N, H, 3) float32: dW/dx in scene units (``grads / scale``).
* ``points`` (N, 3) float64: each row's position in scene units (row i of the file for a splat; for a mesh the
  vertices of :func:`physskin_gs.io.mesh.load_mesh`, welded as trimesh loads them, so an OBJ's rows are not its
  ``v`` lines one for one; ``--points`` gives weights at vertices of your own choosing).
* ``center`` (3,), ``scale`` () float64: ``x_norm = (x_world - center) / scale``.
* ``valid`` (N,) bool: rows with finite input positions.
* ``metrics``: JSON string (Omega_orth x1e-2, kappa_log, H_spec with the constant handle excluded/included,
  seconds, method, checkpoint).
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from physskin_gs.cli._skinning import add_skinning_arguments, check_handles, skinning_options
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
    max_handles: Optional[int] = None  # bound on the learned handles: usable - 1 for a splat, None for a mesh
    path: Optional[str] = None  # the input file (a mesh is re-read for the tet basis)
    selected: Optional[int] = None  # a splat's rows the scene analysis takes as the object (None: not analysed)
    bodies: int = 1  # the objects among them (animate moves each as a body of its own)
    points: Optional[np.ndarray] = None  # (N, 3) float64 scene units: the query rows' positions (non-finite kept)


def prepare_object(path, seed: int = 0, warn: bool = False) -> PreparedObject:
    """Load a splat scene or a mesh and sample it (geometry layer) in its normalised frame.

    Splats: the usable Gaussians (finite, opacity >= 0.05; from 100 of them on, floaters of the scene analysis
    left out) set the normalisation and the volume; fewer than
    :data:`physskin_gs.geometry.interior.SPARSE_SPLAT_GAUSSIANS` of them are sampled as the solid hull of their
    2-sigma ellipsoids (:func:`physskin_gs.geometry.interior.sparse_splat_body`, as ``animate`` does), and
    ``max_handles`` is ``usable - 1`` (W at N Gaussians has rank at most N). Meshes: area-uniform surface and
    voxel-fill volume samples, whatever the vertex count (a cube of 8 vertices, an open cube, a flat
    single-triangle fin, whose volume points are its surface samples); ``max_handles`` is None.

    Raises FileNotFoundError, SceneFormatError (unreadable file; a mesh with no face of positive area) or
    DegenerateGeometryError (a splat without a usable Gaussian).
    """
    import torch

    from physskin_gs.geometry.dataset import sample_from_mesh, sample_from_splat
    from physskin_gs.geometry.interior import SPARSE_SPLAT_GAUSSIANS, sparse_splat_body
    from physskin_gs.geometry.normalize import DegenerateGeometryError, compute_normalization, finite_rows
    from physskin_gs.geometry.scene_analysis import SMALL_SCENE_ROWS
    from physskin_gs.io import detect_format, load_scene
    from physskin_gs.io.mesh import load_mesh

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: input file not found")
    fmt = detect_format(str(path))
    max_handles = None
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
        # floaters (small or far clusters, scene analysis) must not set the normalisation or the volume; a small
        # scene has none (the analysis' own rule)
        from physskin_gs.geometry.scene_analysis import analyze_gaussian_scene

        selected, n_bodies = None, 1
        if keep.sum() >= SMALL_SCENE_ROWS:
            an = analyze_gaussian_scene(scene)
            keep &= ~an.floater
            moving = np.asarray(an.object).copy()  # the rows animate's scene analysis moves: the object, and
            for rows_, _ in an.other_bodies:  # the other objects on its support (each a body of its own)
                moving[rows_] = True
            selected = int(moving.sum())
            n_bodies = 1 + len(an.other_bodies)
        usable = int(keep.sum())
        if usable == 0:
            raise DegenerateGeometryError(f"{path}: no usable Gaussians (finite, opacity >= 0.05) among its "
                                          f"{scene.num_gaussians} rows")
        rows = np.flatnonzero(keep)
        if usable < SPARSE_SPLAT_GAUSSIANS:
            body = sparse_splat_body(means[rows], scene.log_scales[rows], scene.quats[rows], n_volume=16384,
                                     seed=seed)
            bv = body.volume.numpy().astype(np.float64)
            norm = compute_normalization(np.concatenate([means[rows], bv]), allow_flat=True, what=str(path))
            surface = torch.from_numpy(norm.to_normalized(body.surface.numpy().astype(np.float64)).astype(np.float32))
            volume = torch.from_numpy(norm.to_normalized(bv).astype(np.float32))
        else:
            norm = compute_normalization(means[keep], allow_flat=False, what=str(path))
            sample = sample_from_splat(scene.subset(torch.from_numpy(rows)), seed=seed, name=path.name)
            surface, volume = sample.surface, sample.volume
        pts, kind = means, "splat"
        max_handles = usable - 1
    else:
        mesh = load_mesh(str(path))  # refuses a mesh without a face of positive area
        used = np.unique(mesh.faces.reshape(-1))
        norm = compute_normalization(mesh.vertices[used].astype(np.float64), allow_flat=True, what=str(path))
        sample = sample_from_mesh(mesh, seed=seed, allow_flat=True)  # the field's points: sampled, any vertex count
        surface, volume = sample.surface, sample.volume
        pts, kind, n_bodies = mesh.vertices.astype(np.float64), "mesh", 1
        usable = int(np.isfinite(mesh.vertices[used]).all(axis=1).sum())
    valid = finite_rows(pts)
    q = np.zeros_like(pts)
    q[valid] = norm.to_normalized(pts[valid])
    return PreparedObject(path.name, kind, np.asarray(norm.center, np.float64), float(norm.scale), surface,
                          volume, torch.from_numpy(q.astype(np.float32)), valid, usable, max_handles, str(path),
                          selected if kind == "splat" else None, n_bodies if kind == "splat" else 1, pts)


def mesh_in_frame(obj: PreparedObject):
    """The surface mesh of a mesh object in its normalised frame, ``(vertices (V, 3) float64, faces (F, 3))``, or
    None for a splat (what the ``tet`` basis meshes)."""
    if obj.kind != "mesh" or obj.path is None:
        return None
    from physskin_gs.io.mesh import load_mesh

    mesh = load_mesh(str(obj.path))
    return (np.asarray(mesh.vertices, np.float64) - obj.center[None]) / obj.scale, np.asarray(mesh.faces)


def field_for_object(obj: PreparedObject, method: Optional[str], options=None):
    """(field, source) of a prepared object from the basis ``method`` (:func:`physskin_gs.model.bases.build_skinning`)."""
    from physskin_gs.model.bases import SkinningOptions, build_skinning

    options = options or SkinningOptions()
    if options.mesh is None:  # tet / auto mesh the input itself
        options.mesh = mesh_in_frame(obj)
    return build_skinning(method, obj.surface, obj.volume, options)


def load_query_points(path, obj: Optional[PreparedObject] = None):
    """Query points from a ``.npy`` file (one array written by ``numpy.save``).

    Args:
        path: the ``.npy`` file: an (N, 3) array of real numbers (any integer or floating dtype), N >= 1, in the
            scene units of the object; every value finite, within the float32 range (|x| <= 3.4e38), and at most
            1e18 object scales from the object's centre on every axis (``|x - center| / scale <= 1e18``), so the
            float32 field evaluation cannot overflow.
        obj: the prepared object whose normalisation (``center``, ``scale``) maps the points; None checks the
            file alone (everything but the distance to the object), before the object is loaded, and returns
            ``(None, scene points)``.

    Returns:
        (normalised (N, 3) float32 torch tensor ``(x - center) / scale``, scene (N, 3) float64 numpy array).

    Raises:
        FileNotFoundError: ``path`` is not a file.
        OptionError: ``PATH: <reason>`` for an empty file, a file that is not ``.npy`` (a ``.npz`` archive,
            serialised Python objects, anything else), a truncated or corrupt one, an array of Python objects (never
            loaded),
            a boolean, complex, structured, string or date dtype, a shape other than (N, 3) with N >= 1, or
            values that are not finite, beyond the float32 range or too far from the object.

    Points more than a quarter of the object's size outside the box of its volume points are kept, with one note on
    stderr counting them (their fields are extrapolated).
    """
    import torch

    max_distance = 1e18  # normalised units: squared distances stay inside float32
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"--points {path}: input file not found")
    need = "--points needs one (N, 3) array of real numbers saved with numpy.save"
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
    except OSError as exc:
        raise OptionError(f"{path}: cannot read the query points file ({exc.strerror or exc})") from None
    if not head:
        raise OptionError(f"{path}: empty file; {need}")
    if head[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
        raise OptionError(f"{path}: a .npz archive (zip), not a .npy array; {need}")
    if not head.startswith(b"\x93NUMPY"):
        what = "serialised Python objects (never loaded)" if head[:1] == b"\x80" else "not a .npy file (no NumPy header)"
        raise OptionError(f"{path}: {what}; {need}")
    try:
        pts = np.load(path, allow_pickle=False)
    except ValueError as exc:
        if "Object arrays" in str(exc):
            raise OptionError(f"{path}: an array of Python objects (dtype object; such data is never loaded); "
                              f"{need}") from None
        raise OptionError(f"{path}: truncated or corrupt .npy file ({exc})") from None
    except (OSError, EOFError) as exc:
        raise OptionError(f"{path}: truncated or corrupt .npy file ({exc})") from None
    if not isinstance(pts, np.ndarray):  # np.load gives an array for a .npy header; guard the contract anyway
        raise OptionError(f"{path}: not a .npy array; {need}")
    dt = pts.dtype
    if dt.names is not None:
        raise OptionError(f"{path}: a structured array (fields {', '.join(dt.names)}); {need}, e.g. "
                          "numpy.stack([a['x'], a['y'], a['z']], axis=1)")
    if dt.kind == "c":
        raise OptionError(f"{path}: complex values ({dt}); {need}")
    if dt.kind == "b":
        raise OptionError(f"{path}: a boolean array; {need}")
    if dt.kind not in "iuf":
        raise OptionError(f"{path}: dtype {dt} is not a real number type; {need}")
    if pts.ndim == 1 and pts.shape[0] == 3:
        raise OptionError(f"{path}: a 1-D array of 3 values; {need} (one point is shape (1, 3): "
                          "numpy.save(path, p.reshape(1, 3)))")
    if pts.ndim != 2 or pts.shape[1] != 3:
        raise OptionError(f"{path}: shape {pts.shape}; {need}")
    if pts.shape[0] == 0:
        raise OptionError(f"{path}: no query points (shape {pts.shape}); {need}, N >= 1")
    with np.errstate(over="ignore", invalid="ignore"):
        pts = pts.astype(np.float64)

    def first(bad: np.ndarray) -> str:
        i = int(np.flatnonzero(bad)[0])
        return f"first: row {i} = [{', '.join(f'{v:.6g}' for v in pts[i])}]"

    bad = ~np.isfinite(pts).all(1)
    if bad.any():
        raise OptionError(f"{path}: {int(bad.sum())} query points are not finite (NaN or Inf; {first(bad)})")
    f32 = float(np.finfo(np.float32).max)
    bad = (np.abs(pts) > f32).any(1)
    if bad.any():
        raise OptionError(f"{path}: {int(bad.sum())} query points have a coordinate beyond the float32 range "
                          f"(|x| > {f32:.4g} scene units; {first(bad)})")
    if obj is None:
        return None, pts
    with np.errstate(over="ignore", invalid="ignore"):
        q = (pts - obj.center[None]) / obj.scale
    bad = ~(np.abs(q) <= max_distance).all(1)
    if bad.any():
        raise OptionError(f"{path}: {int(bad.sum())} query points lie more than {max_distance:.0e} object "
                          f"scales ({obj.scale:.6g} scene units each) from the object's centre, where the float32 "
                          f"field evaluation overflows ({first(bad)})")
    vol = getattr(obj, "volume", None)
    if vol is not None and len(vol):  # (the object's volume points, normalised frame)
        v = np.asarray(vol, dtype=np.float64)
        gap = np.linalg.norm(np.maximum(v.min(0) - q, 0.0) + np.maximum(q - v.max(0), 0.0), axis=1)  # to its box
        far = gap > 0.25 * float(np.ptp(v, axis=0).max())
        if far.any():
            print(f"note: {path}: {int(far.sum())} of {len(q)} query points lie outside the object's box by more "
                  f"than a quarter of its size ({first(far)}): the fields there are extrapolated, not the object's",
                  file=sys.stderr)
    return torch.from_numpy(q.astype(np.float32)), pts


def register(sub) -> None:
    p = sub.add_parser("skin", help="skinning weights and gradients at every Gaussian centre or mesh vertex",
                       description="Compute the skinning fields of one object and write them to an .npz: weights W "
                                   "(N, m + 1) and their gradients (N, m + 1, 3) at every Gaussian centre or mesh "
                                   "vertex (or at --points), with the basis named by --skinning (the default, "
                                   "modes: the elastic modes of the mesh's own tet mesh for a mesh, of a voxel tet "
                                   "mesh of its volume for a splat).")
    p.add_argument("path", help="splat scene (.ply/.splat/.compressed.ply) or mesh (.obj/.ply/.stl/...)")
    p.add_argument("-o", "--output", required=True, help="output .npz")
    p.epilog = ("The .npz holds weights (N, m + 1; the constant handle last, all 1), grads (N, m + 1, 3; per unit "
                "of the normalised frame (x - center) / scale), grads_scene (per scene unit), points (N, 3; each row's "
                "position in scene units: a splat's rows in file order, a mesh's welded vertices as trimesh loads "
                "them, not an OBJ's v lines one for one), center, scale, valid and metrics (a JSON string).")
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

    from physskin_gs.cli._common import OutputError, check_int, check_number, require_input_file, verify_written

    check_number("--fit-seconds", args.fit_seconds, 0, 3600, lo_open=True, unit="s")
    check_int("--seed", args.seed, 0)
    check_handles(args)
    if args.threads is not None:
        check_int("--threads", args.threads, 1, 256)
        torch.set_num_threads(args.threads)
    out = Path(args.output)
    if out.suffix.lower() != ".npz":
        raise OptionError(f"{out}: output must be a .npz file")
    from physskin_gs.cli._outputs import Output, claim_outputs

    require_input_file(args.path)
    if args.points:
        require_input_file(args.points, "--points")
        load_query_points(args.points)  # the file's own faults before any work (the distance check needs the object)
    claim_outputs([Output("-o", args.output, replace=args.force)], inputs=[args.path, args.points, args.checkpoint])
    opts = skinning_options(args)
    if resolve_skinning(args.skinning) == "network" and args.checkpoint:
        from physskin_gs.model import load_checkpoint

        load_checkpoint(args.checkpoint)  # a bad checkpoint fails before any work
    t0 = time.perf_counter()
    obj = prepare_object(args.path, seed=args.seed, warn=True)
    if obj.kind == "splat" and obj.selected is not None and obj.selected < 0.98 * obj.usable:
        what = ("the object its scene analysis finds" if obj.bodies == 1 else
                f"the {obj.bodies} objects its scene analysis finds on the support, each a body with a field of its "
                "own")
        print(f"[physskin-gs] note: skin builds the field on every usable Gaussian of the file ({obj.usable}, floaters "
              f"left out); animate moves only {what} ({obj.selected} of them, without the support and background) and "
              "builds its field there, so the two fields differ", file=sys.stderr, flush=True)
    if args.points:
        query, points = load_query_points(args.points, obj)
        valid = np.ones(query.shape[0], bool)
    else:
        query, valid, points = obj.query, obj.valid, obj.points
    usable = obj.usable if obj.usable >= 0 else int(obj.valid.sum())
    # few usable Gaussians: at most usable - 1 learned handles (a mesh's field is built from sampled volume points,
    # whatever its vertex count); a reduction is said in one line
    from physskin_gs.model.bases import SkinningReducedWarning, reduced_handles_note

    opts.max_handles = obj.max_handles
    t1 = time.perf_counter()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", SkinningReducedWarning)
            field, source = field_for_object(obj, args.skinning, opts)
    except OptionError:
        raise
    except ValueError as exc:  # the basis cannot be built from such points
        raise OptionError(f"{args.path}: cannot build the {resolve_skinning(args.skinning)} skinning basis from "
                          f"{usable} usable points ({exc})") from None
    for w in caught:
        if isinstance(w.message, SkinningReducedWarning):
            what = "Gaussians" if obj.kind == "splat" else "vertices"
            note = reduced_handles_note(usable, what, w.message.requested, field.num_handles - 1)
            print(f"[physskin-gs] note: {args.path}: {note}", file=sys.stderr, flush=True)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
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
        # the network's checkpoint, only where the network made the weights (--checkpoint is not read otherwise)
        "checkpoint": ((str(args.checkpoint) if args.checkpoint else "default")
                       if str(source).startswith("network") else None),
        "sample_seconds": round(t1 - t0, 3),
        "skinning_seconds": round(t2 - t1, 3),
    }
    from physskin_gs.io._shared import atomic_output

    try:
        with atomic_output(out) as tmp, open(tmp, "wb") as fh:  # (a file object: savez adds no ".npz" to it)
            np.savez(fh, weights=W.astype(np.float32), grads=G.astype(np.float32),
                     points=np.asarray(points, np.float64),
                     grads_scene=(G / obj.scale).astype(np.float32), center=obj.center, scale=np.float64(obj.scale),
                     valid=valid, metrics=np.array(json.dumps(finite_or_none(metrics), allow_nan=False)))
    except OSError as exc:
        raise OutputError(f"could not write {out}: {exc.strerror or exc}") from None
    verify_written(out, "skinning weights")
    ex = metrics["excluding_constant"]
    what = "query points" if args.points else ("Gaussians" if obj.kind == "splat" else "vertices")
    print(f"{obj.name}: {W.shape[0]} {what}, H = {W.shape[1]} handle{'' if W.shape[1] == 1 else 's'} ({source}), "
          f"Omega_orth x1e-2 = {ex['omega_orth_x1e2']:.3f}, kappa_log = {ex['kappa_log']:.3f}, "
          f"H_spec = {ex['h_spec']:.4f}, {metrics['skinning_seconds']:.2f} s -> {out}")
    return 0
