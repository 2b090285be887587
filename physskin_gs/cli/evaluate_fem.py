"""``physskin-gs evaluate --reference fem``: every skinning basis side by side against a finite-element reference.

For each shape (mesh or splat, in its normalised frame): a tet mesh (TetGen for closed surfaces, a voxel fill split
into Kuhn tets otherwise; :func:`physskin_gs.geometry.tetmesh.tetmesh_for_shape`), P1 linear elasticity and a
lumped mass, the lowest non-rigid free-free modes and a pinned static deflection under gravity
(:func:`physskin_gs.physics.subspace_eval.fem_reference`). Each basis of ``--bases`` is built from the object's
own surface and volume points through :func:`physskin_gs.model.bases.build_skinning` (the same call the product
makes), evaluated at the tet nodes, and scored by :func:`physskin_gs.physics.subspace_eval.evaluate_basis`:

* frequency ratio sqrt(mu_j / lambda_j) of the lowest k Rayleigh-Ritz eigenvalues of the LBS subspace against the
  FEM's (geometric mean; >= 1 by the min-max principle, 1 = exact, larger = too stiff);
* mode capture: the M-norm residual of each FEM mode projected onto the subspace (0 = captured);
* static deflection with the lowest 10 % of the long axis pinned by mass-proportional springs (soft and stiff):
  tip ratio (subspace / FEM; 1 = exact, smaller = too stiff) and the relative M-norm error;
* the paper's orthogonality figures on the object's volume points (for reference: they say nothing about physics);
* the seconds the basis took to build.

A ``laplacian-fem`` row (the first m eigenvectors of the tet mesh's scalar Laplacian) shows what a mesh-based
classical basis reaches. Units: the FEM runs in the normalised frame (about 2 units across) with E in Pa and
density in kg/m^3; every reported number is a ratio, independent of that choice.
"""

from __future__ import annotations

import math
import time
import warnings
from pathlib import Path
from typing import Dict, List

import numpy as np

from physskin_gs.errors import OptionError, PhysSkinError

#: Bases scored by default (``fit`` joins when --fit-seconds > 0).
DEFAULT_BASES = ("modes", "eigen", "network", "rbf")


def tetmesh_for_object(path: Path, obj, target_nodes: int, grid_offset: float = 0.0):
    """Tet mesh of a prepared object in its normalised frame: its surface mesh (meshes), or a voxel fill of its
    volume points (splats; Kuhn tets of the largest face-connected part of the cells they occupy, about
    ``target_nodes`` nodes). ``grid_offset``: splats only, the voxel grid's origin moved by that fraction of a cell
    along every axis (0: at the points' minimum corner; ``scripts/eval_splat_grids.py`` scores bases against
    references on shifted grids). Raises PhysSkinError when no mesh can be made."""
    from physskin_gs.geometry.tetmesh import tetmesh_for_shape, voxel_tetmesh

    if obj.kind == "mesh":
        from physskin_gs.io.mesh import load_mesh

        mesh = load_mesh(str(path))
        v = (np.asarray(mesh.vertices, np.float64) - obj.center[None]) / obj.scale
        try:
            return tetmesh_for_shape(v, np.asarray(mesh.faces), target_nodes=target_nodes)
        except ValueError as exc:
            raise PhysSkinError(f"{path}: cannot tetrahedralise ({exc})") from None
    pts = obj.volume.numpy().astype(np.float64)
    lo, hi = pts.min(0), pts.max(0)
    # about target_nodes nodes: voxel count ~ occupied fraction x box / h^3
    frac = 0.5
    h = float(np.cbrt(frac * np.prod(np.maximum(hi - lo, 1e-6)) / max(target_nodes, 8)))
    lo = lo - float(grid_offset) * h
    res = np.maximum(np.ceil((hi - lo) / h).astype(int) + 1, 1)
    ijk = np.clip(np.floor((pts - lo) / h).astype(int), 0, res - 1)
    occ = np.zeros(tuple(res), bool)
    occ[tuple(ijk.T)] = True
    return voxel_tetmesh(occ, lo, h)


def _orthogonality(W) -> Dict[str, float]:
    """The paper's orthogonality metrics of weights W (N, H) (constant column last, excluded)."""
    import torch

    from physskin_gs.model import skinning_metrics

    return skinning_metrics(torch.as_tensor(np.asarray(W)) if not torch.is_tensor(W) else W)


def evaluate_shape(path: Path, bases: List[str], args, progress=print) -> Dict:
    """Scores of every basis in ``bases`` on the shape in ``path`` (module docstring): a JSON-ready dict with the tet
    mesh facts, the FEM eigenvalues ((rad/s)^2) and one :func:`evaluate_basis` report per basis plus
    ``laplacian-fem``. Raises PhysSkinError / SceneFormatError for an unreadable or untetrahedralisable shape,
    OptionError / CheckpointError from the bases."""
    import torch

    from physskin_gs.cli.skin import mesh_in_frame, prepare_object
    from physskin_gs.cli._skinning import skinning_options
    from physskin_gs.model.bases import build_skinning
    from physskin_gs.physics.fem import laplacian_eigenbasis
    from physskin_gs.physics.subspace_eval import evaluate_basis, fem_reference

    obj = prepare_object(path, seed=args.seed)
    t0 = time.perf_counter()
    tm = tetmesh_for_object(path, obj, args.nodes)
    t_mesh = time.perf_counter() - t0
    ref = fem_reference(tm, E=args.E, nu=args.nu, density=args.density, k=args.modes)
    g = torch.Generator().manual_seed(args.seed)
    X = obj.volume[torch.randperm(obj.volume.shape[0], generator=g)[: args.points]]
    nodes = torch.from_numpy(tm.nodes.astype(np.float32))
    row = {"shape": obj.name, "tet_mesh": {"method": tm.method, "nodes": tm.num_nodes, "tets": tm.num_tets,
                                           "seconds": round(t_mesh, 3), "info": _jsonable(tm.info)},
           "fem_seconds": {k: round(v, 3) for k, v in ref.seconds.items()},
           "fem_eigvals": [float(x) for x in ref.eigvals], "bases": {}}
    if abs(tm.num_nodes - args.nodes) > 0.25 * args.nodes:  # a mesher's count follows the shape, not --nodes
        progress(f"  note: {obj.name}: the reference tet mesh ({tm.method}) has {tm.num_nodes} nodes for --nodes "
                 f"{args.nodes}")
    covered = (tm.info.get("glue") or {}).get("original_covered_fraction")
    if covered is None and obj.kind == "splat":  # the voxel fill keeps its largest face-connected part
        covered = tm.info.get("kept_volume_fraction")
    if covered is not None and covered < 0.99:  # the FEM has the largest part only
        row["fem_covers"] = round(float(covered), 4)
        why = ("its voxels not face-connected to the largest part at the reference's resolution are left out"
               if obj.kind == "splat" else "parts too far apart to join; the largest is meshed")
        progress(f"  note: {obj.name}: the FEM reference covers {covered:.0%} of the shape's volume ({why}): every "
                 "basis is scored on that part only")
    from physskin_gs.model.bases import SkinningReducedWarning, reduced_handles_note

    opts = skinning_options(args)
    opts.max_handles = getattr(obj, "max_handles", None)  # few usable Gaussians: fewer handles, said in one line
    opts.mesh = mesh_in_frame(obj)  # the tet basis meshes the input's own surface (None for a splat)
    for name in bases:
        t0 = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("ignore")
            warnings.simplefilter("always", SkinningReducedWarning)
            field, source = build_skinning(name, obj.surface, obj.volume, opts)
        t_build = time.perf_counter() - t0
        if name == "network" and field.num_handles - 1 != getattr(args, "num_handles", 16):
            progress(f"  note: {obj.name} network: {field.num_handles - 1} + 1 handles, its checkpoint's (--handles "
                     "sets the other bases' count)")
        for w in caught:
            if isinstance(w.message, SkinningReducedWarning):
                progress(f"  note: {obj.name} {name}: " + reduced_handles_note(
                    obj.usable, "Gaussians" if obj.kind == "splat" else "vertices", w.message.requested,
                    field.num_handles - 1))
        W = field.weights(nodes).double().numpy()
        rep = evaluate_basis(ref, W)
        rep.update(source=source, build_seconds=round(t_build, 3), orthogonality=_orthogonality(field.weights(X)))
        row["bases"][name] = rep
        progress(f"  {obj.name} {name}: {_brief(rep)}")
    t0 = time.perf_counter()
    W = laplacian_eigenbasis(tm, m=opts.num_handles)
    t_lap = time.perf_counter() - t0
    rep = evaluate_basis(ref, W)
    rep.update(source="tet-mesh Laplacian", build_seconds=round(t_lap, 3),
               orthogonality=_orthogonality(W))
    row["bases"]["laplacian-fem"] = rep
    progress(f"  {obj.name} laplacian-fem: {_brief(rep)}")
    return row


def _jsonable(d):
    out = {}
    for k, v in (d or {}).items():
        if isinstance(v, (str, int, float, bool)) or v is None:
            out[k] = v
        elif isinstance(v, dict):
            out[k] = _jsonable(v)
        elif isinstance(v, (list, tuple)):
            out[k] = [x if isinstance(x, (str, int, float, bool)) else str(x) for x in v]
        else:
            out[k] = str(v)
    return out


def _soft(rep):
    return rep["static"][0]


def _stiff(rep):
    return rep["static"][-1]


def _brief(rep) -> str:
    return (f"freq ratio {rep['freq_ratio_geomean']:.3f}, tip ratio soft {_soft(rep)['tip_ratio']:.3f} / stiff "
            f"{_stiff(rep)['tip_ratio']:.3f}, {rep['build_seconds']:.2f} s")


def _geomean(vals):
    vals = [v for v in vals if v is not None and math.isfinite(v) and v > 0]
    return float(math.exp(sum(math.log(v) for v in vals) / len(vals))) if vals else float("nan")


def summarise(rows: List[Dict]) -> Dict:
    """Per basis over shapes: geometric mean and range of the frequency ratio, mean and range of the tip ratios,
    mean build seconds, and on how many shapes the basis has the best frequency ratio / tip ratio."""
    names = []
    for r in rows:
        names += [n for n in r["bases"] if n not in names]
    out = {}
    for n in names:
        reps = [r["bases"][n] for r in rows if n in r["bases"]]
        fr = [x["freq_ratio_geomean"] for x in reps]
        soft = [_soft(x)["tip_ratio"] for x in reps]
        stiff = [_stiff(x)["tip_ratio"] for x in reps]
        out[n] = {"shapes": len(reps), "freq_ratio_geomean": _geomean(fr), "freq_ratio_min": min(fr),
                  "freq_ratio_max": max(fr), "tip_ratio_soft_mean": float(np.mean(soft)),
                  "tip_ratio_soft_min": min(soft), "tip_ratio_soft_max": max(soft),
                  "tip_ratio_stiff_mean": float(np.mean(stiff)),
                  "build_seconds_mean": float(np.mean([x["build_seconds"] for x in reps])),
                  "best_freq": 0, "best_tip": 0}
    for r in rows:
        product = {n: v for n, v in r["bases"].items() if n != "laplacian-fem"}
        if product:
            out[min(product, key=lambda n: product[n]["freq_ratio_geomean"])]["best_freq"] += 1
            out[max(product, key=lambda n: _soft(product[n])["tip_ratio"])]["best_tip"] += 1
    return out


def print_table(rows: List[Dict], summary: Dict) -> None:
    hdr = (f"{'shape':26s} {'basis':14s} {'freq ratio':>10s} {'worst':>7s} {'mode res':>8s} {'tip soft':>8s} "
           f"{'tip stiff':>9s} {'static err':>10s} {'Omega':>8s} {'kappa':>7s} {'H_spec':>7s} {'build s':>8s}")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        for n, x in r["bases"].items():
            o = x["orthogonality"]
            print(f"{r['shape'][:26]:26s} {n:14s} {x['freq_ratio_geomean']:10.3f} {max(x['freq_ratios']):7.2f} "
                  f"{float(np.mean(x['mode_residuals'])):8.3f} {_soft(x)['tip_ratio']:8.3f} "
                  f"{_stiff(x)['tip_ratio']:9.3f} {_soft(x)['static_rel_error']:10.3f} {o['omega_orth_x1e2']:8.3f} "
                  f"{o['kappa_log']:7.2f} {o['h_spec']:7.4f} {x['build_seconds']:8.2f}")
    print()
    print(f"{'over shapes':26s} {'basis':14s} {'freq ratio (geo mean, range)':>30s} {'tip soft (mean, range)':>26s} "
          f"{'best freq/tip':>14s} {'build s':>8s}")
    for n, s in summary.items():
        best = f"{s['best_freq']:>6d}/{s['best_tip']:<6d}" if n != "laplacian-fem" else f"{'(ref.)':>13s}"
        print(f"{'':26s} {n:14s} {s['freq_ratio_geomean']:10.3f} ({s['freq_ratio_min']:.2f}-{s['freq_ratio_max']:.2f})"
              f"{'':7s} {s['tip_ratio_soft_mean']:8.3f} ({s['tip_ratio_soft_min']:.2f}-{s['tip_ratio_soft_max']:.2f})"
              f"{'':5s} {best} {s['build_seconds_mean']:8.2f}")
    print("best freq/tip: on how many shapes each product basis has the lowest frequency ratio / the highest soft tip "
          "ratio (a Galerkin subspace is never more compliant than the FEM, so higher is closer); laplacian-fem, the "
          "Laplacian of the reference's own tet mesh, is the comparator, not a contender")


def freeform_rows(bases: List[str], args, progress=print) -> Dict:
    """FreeForm's beam protocol (:func:`physskin_gs.physics.subspace_eval.freeform_beam_protocol`: a 5 x 1 x 1 m
    cantilever, E 5e6, nu 0.45, bend and twist, normalised point-wise MSE of the reduced static solution) for every
    basis, each built from 16384 volume points of the beam (its normalised frame: x in [-1, 1]) exactly as for a
    user's object, plus the tet-mesh Laplacian basis for reference."""
    import torch

    from physskin_gs.cli._skinning import skinning_options
    from physskin_gs.model.bases import build_skinning
    from physskin_gs.physics.fem import laplacian_eigenbasis
    from physskin_gs.physics.subspace_eval import freeform_beam_protocol
    from physskin_gs.geometry.tetmesh import box_tetmesh

    rng = np.random.default_rng(args.seed)
    size = np.array([5.0, 1.0, 1.0])
    center, half = size / 2, 2.5
    vol = (rng.random((16384, 3)) * size - center) / half  # [V, 3] normalised frame (uniform in the box)
    surf = vol[:4096]  # the encoder input of the network / fit: any points of the box do
    out = {}
    opts = skinning_options(args)
    for name in bases:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            field, _ = build_skinning(name, torch.from_numpy(surf).float(), torch.from_numpy(vol).float(), opts)
        res = freeform_beam_protocol(lambda nodes: field.weights(
            torch.from_numpy(((nodes - center) / half).astype(np.float32))).double().numpy())
        out[name] = {"bend_nmse": res["bend"]["nmse"], "twist_nmse": res["twist"]["nmse"], "rank": res["rank"]}
        progress(f"  freeform beam {name}: bend {res['bend']['nmse']:.4f}, twist {res['twist']['nmse']:.5f}")
    tm = box_tetmesh((5.0, 1.0, 1.0), (40, 8, 8))
    W = laplacian_eigenbasis(tm, m=opts.num_handles)
    order = np.lexsort(tm.nodes.T[::-1])

    def lap_fn(nodes):  # the protocol meshes the same box: match nodes by position
        o2 = np.lexsort(nodes.T[::-1])
        Wn = np.empty_like(W)
        Wn[o2] = W[order]
        return Wn

    res = freeform_beam_protocol(lap_fn)
    out["laplacian-fem"] = {"bend_nmse": res["bend"]["nmse"], "twist_nmse": res["twist"]["nmse"], "rank": res["rank"]}
    progress(f"  freeform beam laplacian-fem: bend {res['bend']['nmse']:.4f}, twist {res['twist']['nmse']:.5f}")
    return out


def _say(line: str) -> None:
    """Print a progress line, then stop here if an interrupt arrived (also one a library swallowed)."""
    from physskin_gs import interrupts

    print(line, flush=True)
    interrupts.check()


def _check_inputs(paths: List[Path]) -> List[str]:
    """Every input loads (mesh or splat) before the first reference is built: a bad file at the end of a list failed
    after the shapes before it had been evaluated, and their results were lost. Returns each input's format
    (:func:`physskin_gs.io.detect_format`). Raises what the loaders raise (FileNotFoundError, SceneFormatError,
    ...), naming the file."""
    from physskin_gs.io import detect_format, load_scene
    from physskin_gs.io.mesh import load_mesh

    formats = []
    for path in paths:
        if not Path(path).exists():
            raise FileNotFoundError(f"{path}: input file not found")
        formats.append(detect_format(str(path)))
        with warnings.catch_warnings():  # (the evaluation itself says what it has to say about the file)
            warnings.simplefilter("ignore")
            if formats[-1] in ("mesh", "mesh-ply"):
                load_mesh(str(path))
            else:
                load_scene(str(path))
    return formats


def run_fem(args, paths: List[Path]) -> Dict:
    """The whole FEM evaluation over ``paths``; prints the table and returns the JSON-ready result."""
    from physskin_gs.model.bases import resolve_skinning

    bases = [resolve_skinning(b) for b in (args.bases.split(",") if args.bases else DEFAULT_BASES)]
    if args.fit_seconds > 0 and not args.bases and "fit" not in bases:
        bases.append("fit")
    bases = list(dict.fromkeys(bases))
    if args.nodes < 100:
        raise OptionError(f"--nodes must be >= 100, got {args.nodes}")
    if "fit" in bases and not args.fit_seconds > 0:  # before any reference is built (it was after the first one)
        raise OptionError(f"--bases fit needs --fit-seconds > 0 (its time budget), got {args.fit_seconds:g}")
    formats = _check_inputs(paths)
    if "tet" in bases:  # it meshes a mesh's own surface: refused for a splat before any basis runs
        splats = [p.name for p, f in zip(paths, formats) if f not in ("mesh", "mesh-ply")]
        if splats:
            raise OptionError(f"--bases tet needs mesh inputs (it tetrahedralises the surface); {', '.join(splats)} "
                              "is a splat: use voxel (the Laplacian of the splat's voxel mesh) there")
    rows = []
    for path in paths:
        _say(f"{path.name}:")
        rows.append(evaluate_shape(path, bases, args, progress=_say))
    summary = summarise(rows)
    print_table(rows, summary)
    result = {"reference": "fem", "bases": bases, "shapes": rows, "summary": summary}
    if getattr(args, "freeform", False):
        print("FreeForm beam protocol (5 x 1 x 1 m cantilever, E 5e6, nu 0.45; normalised MSE, 0 = exact):", flush=True)
        result["freeform_beam"] = freeform_rows(bases, args, progress=_say)
    return result
