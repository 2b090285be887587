"""``physskin-gs evaluate``: skinning quality of the network vs the per-object fit (method.md 11-12).

For each input shape (mesh or splat): sample it (geometry layer), take E evaluation points (a fixed random subset
of its volume points: surface + interior), and report for the feed-forward network and for a per-object fit
with a fixed time budget:

* Omega_orth (x1e-2), kappa_log, H_spec of the learned columns (constant handle excluded), and the same with the
  constant handle included;
* the mean Neo-Hookean energy density (Pa) of B random handle perturbations Z = sigma N(0, 1) (fixed seed) at
  fixed E and nu, with F from the exact LBS formula (method.md 3) and the field's dW/dX;
* seconds (network: encode + column norms + weights and gradients; fit: the whole fit).
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

from physskin_gs.cli._skinning import shared_data_dir
from physskin_gs.errors import OptionError


def register(sub) -> None:
    p = sub.add_parser("evaluate", help="skinning bases against a finite-element reference (--reference fem), or "
                                        "the network against the per-object fit by orthogonality and energy",
                       description="Score skinning bases. --reference fem: every basis against a tet-mesh "
                                   "finite-element model of each shape (frequency ratio of the lowest modes, static "
                                   "tip deflection), with the tet-mesh Laplacian basis as a row of its own; "
                                   "--reference orth (the default): the paper's orthogonality metrics and energy, "
                                   "network against the per-object fit. Shapes: --data files or folders (meshes or "
                                   "splats; default: the five held-out meshes in $PHYSSKIN_SHARED_DATA/meshes, "
                                   "by default ../shared/data beside the repository).")
    p.add_argument("--reference", choices=["fem", "orth"], default="orth",
                   help="fem: every basis against tet FEM ground truth (frequencies, mode capture, static "
                        "deflection); orth (default): the paper's orthogonality metrics and energy, network vs fit")
    p.add_argument("--bases", default=None,
                   help="--reference fem: comma-separated bases (default modes,eigen,network,rbf, plus fit when "
                        "--fit-seconds > 0); a laplacian-fem row (tet-mesh Laplacian eigenbasis) is always added")
    p.add_argument("--nodes", type=int, default=3000, help="--reference fem: tet-mesh nodes per shape (default 3000)")
    from physskin_gs.cli._skinning import add_handles_argument

    add_handles_argument(p)
    p.add_argument("--modes", type=int, default=10, help="--reference fem: non-rigid FEM modes compared (default 10)")
    p.add_argument("--density", type=float, default=1000.0, help="--reference fem: density in kg/m^3")
    p.add_argument("--freeform", action="store_true",
                   help="--reference fem: also FreeForm's 5 x 1 x 1 m cantilever protocol (bend and twist) per basis")
    p.add_argument("--checkpoint", default=None, help="network checkpoint (default: the shipped one)")
    p.add_argument("--data", nargs="+", default=None,
                   help="mesh/splat files or folders (default: the held-out shared meshes)")
    p.add_argument("--json", default=None, help="write all results to this JSON file")
    p.add_argument("--force", action="store_true", help="replace an existing --json file")
    p.add_argument("--points", type=int, default=5000, help="evaluation points per shape")
    p.add_argument("--fit-seconds", type=float, default=60.0,
                   help="time budget of the per-object fit in seconds (default 60; 0: skip)")
    p.add_argument("--transforms", type=int, default=64, help="random handle perturbations for the energy")
    p.add_argument("--sigma", type=float, default=0.02, help="perturbation scale (field units)")
    p.add_argument("--E", type=float, default=None, help="Young's modulus (Pa): default 5e5 for the energy, 1e5 for fem")
    p.add_argument("--nu", type=float, default=0.45, help="Poisson ratio for the energy")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None)
    p.set_defaults(func=run)
    from physskin_gs.cli._common import remember_defaults

    remember_defaults(p)


def default_eval_paths():
    """Held-out evaluation meshes (:data:`physskin_gs.geometry.dataset.HELD_OUT_MESHES`) present under
    ``$PHYSSKIN_SHARED_DATA/meshes`` (default ``../shared/data`` beside the repository), as a list of str paths (empty when none exist)."""
    from physskin_gs.geometry.dataset import HELD_OUT_MESHES

    root = shared_data_dir() / "meshes"
    return [str(root / n) for n in HELD_OUT_MESHES if (root / n).is_file()]


def field_report(field, X, Z, E, nu) -> dict:
    """Metrics of a :class:`SkinningField` at points X (N, 3) float32 for transforms Z (B, H, 3, 4) (method.md 11).

    Returns a dict: ``omega_orth_x1e2``, ``kappa_log``, ``h_spec`` (constant handle excluded), ``including_constant``
    (the same three with it), ``energy_nh`` (mean Neo-Hookean energy density in Pa over the B transforms and N
    points, Lame parameters from E in Pa and nu) and ``query_seconds`` (weights and gradients).
    """
    import torch

    from physskin_gs.elastic import lame_parameters, neohookean_energy_density
    from physskin_gs.lbs import deformation_gradient
    from physskin_gs.model import skinning_metrics

    t0 = time.perf_counter()
    W, G = field.weights_and_grads(X)
    dt = time.perf_counter() - t0
    mu, lam = lame_parameters(E, nu)
    with torch.no_grad():  # one batched call: F (B, N, 3, 3); the mean over b and n of psi_NH
        energy = float(neohookean_energy_density(deformation_gradient(X, W, G, Z), mu, lam).mean())
    return {
        **skinning_metrics(W),
        "including_constant": skinning_metrics(W, include_constant=True),
        "energy_nh": energy,
        "query_seconds": dt,
    }


def run(args) -> int:
    import torch

    from physskin_gs.cli.skin import prepare_object
    from physskin_gs.model import default_checkpoint_path, fit_skinning, load_checkpoint, skinning_from_model
    from physskin_gs.model.checkpoint import checkpoint_metadata
    from physskin_gs.model.fit import fit_config_like
    from physskin_gs.model.losses import sample_transforms

    if args.threads:
        torch.set_num_threads(args.threads)
    from physskin_gs.cli._common import check_int, check_number

    check_int("--points", args.points, 17)
    check_number("--fit-seconds", args.fit_seconds, 0, 3600, unit="s")
    check_number("--nu", args.nu, -1.0, 0.5, lo_open=True, hi_open=True)
    if args.E is not None:
        check_number("--E", args.E, 0, None, lo_open=True, unit="Pa")
    check_number("--density", args.density, 0, None, lo_open=True, unit="kg/m^3")
    check_number("--sigma", args.sigma, 0, None, lo_open=True)
    check_int("--transforms", args.transforms, 1)
    check_int("--nodes", args.nodes, 100, 200000)
    check_int("--modes", args.modes, 1, 50)
    from physskin_gs.cli._skinning import check_handles

    check_handles(args)
    from physskin_gs.cli._common import given_options

    unused = (("transforms", "sigma") if args.reference == "fem" else
              ("bases", "nodes", "modes", "density", "freeform", "num_handles"))
    given = [("--handles" if d == "num_handles" else f"--{d.replace('_', '-')}") for d in given_options(args, unused)]
    if given:  # accepted by the one parser, used by the other mode only
        mode = ("--reference fem" if args.reference == "fem" else "the network check (without --reference fem)")
        print(f"note: {', '.join(given)}: not used by {mode}", file=sys.stderr)
    if args.json is not None and not str(args.json).lower().endswith(".json"):
        # (any name was taken: `--json scene.obj --force` replaced a file the command never wrote)
        raise OptionError(f"--json {args.json}: name a .json file")
    paths = _input_paths(args.data)
    from physskin_gs.cli._outputs import Output, claim_outputs

    # the inputs are the shapes evaluated (with the files they read beside them) and the checkpoint; other files in
    # a --data folder are not (an earlier run's results.json there was refused as "the input file")
    claim_outputs([Output("--json", args.json, replace=args.force)], inputs=[*paths, args.checkpoint])
    if args.reference == "fem":
        from physskin_gs.cli.evaluate_fem import run_fem

        args.E = 1e5 if args.E is None else args.E
        result = run_fem(args, paths)
        if args.json:
            _write_json(args.json, {"settings": {k: getattr(args, k) for k in
                        ("nodes", "modes", "points", "fit_seconds", "E", "nu", "density", "seed", "checkpoint")},
                        **result})
        return 0
    args.E = 5e5 if args.E is None else args.E
    ckpt = args.checkpoint or default_checkpoint_path()
    model = load_checkpoint(ckpt)
    fit_cfg = fit_config_like(checkpoint_metadata(ckpt).get("train_config", {}).get("train"))
    results = []
    from physskin_gs import interrupts

    for path in paths:
        interrupts.check()
        obj = prepare_object(path, seed=args.seed)
        g = torch.Generator().manual_seed(args.seed)
        idx = torch.randperm(obj.volume.shape[0], generator=g)[: args.points]
        X = obj.volume[idx]
        Z = sample_transforms(args.transforms, model.num_handles + 1, args.sigma, g)
        t0 = time.perf_counter()
        field = skinning_from_model(model, obj.surface, obj.volume)
        t_setup = time.perf_counter() - t0
        net = field_report(field, X, Z, args.E, args.nu)
        net["seconds"] = t_setup + net["query_seconds"]
        row = {"shape": obj.name, "points": int(X.shape[0]), "network": net}
        if args.fit_seconds > 0:
            t0 = time.perf_counter()
            ffield = fit_skinning(obj.surface, obj.volume, time_budget_s=args.fit_seconds, seed=args.seed,
                                  num_handles=model.num_handles, config=fit_cfg)
            t_fit = time.perf_counter() - t0
            fit = field_report(ffield, X, Z, args.E, args.nu)
            fit["seconds"] = t_fit + fit["query_seconds"]
            row["fit"] = fit
        results.append(row)
        _print_row(row)
    summary = _summary(results)
    _print_table(results, summary)
    if args.json:
        out = {"checkpoint": str(ckpt), "fit_config": fit_cfg.to_dict(), "settings": {k: getattr(args, k) for k in
               ("points", "fit_seconds", "transforms", "sigma", "E", "nu", "seed")},
               "shapes": results, "summary": summary}
        _write_json(args.json, out)
    return 0


def _input_paths(data):
    """Files to evaluate: the given files and folders' files, or the held-out meshes. A folder's files that are
    no shape or scene format (:func:`physskin_gs.io.detect_format`: a manifest, notes) are skipped with a note on
    stderr, before any work; a file named on its own is kept (its loader says what is wrong). Raises
    FileNotFoundError / OptionError (nothing to evaluate)."""
    from physskin_gs.errors import SceneFormatError
    from physskin_gs.io import detect_format

    paths = []
    for p in data or default_eval_paths():
        p = Path(p)
        if not p.exists():
            raise FileNotFoundError(f"{p}: evaluation input not found")
        if not p.is_dir():
            paths.append(p)
            continue
        for q in sorted(q for q in p.iterdir() if q.is_file() and q.suffix != ".md"):
            try:
                detect_format(str(q))
            except (SceneFormatError, OSError) as exc:
                print(f"note: skipping {q}: not a shape or scene file ({str(exc).split(': ', 1)[-1]})",
                      file=sys.stderr)
                continue
            paths.append(q)
    if not paths:
        raise OptionError("nothing to evaluate: pass --data (the default held-out meshes live in the shared data "
                          "folder, $PHYSSKIN_SHARED_DATA or ../shared/data)")
    return paths


def _write_json(path, obj) -> None:
    """Strict JSON (no NaN/Infinity: non-finite numbers become null), written atomically (a unique temporary name,
    renamed into place). Raises OutputError when the file cannot be written."""
    from physskin_gs.cli._common import OutputError, finite_or_none, verify_written
    from physskin_gs.io._shared import write_text_atomic

    try:
        write_text_atomic(path, json.dumps(finite_or_none(obj), indent=2, allow_nan=False))
    except OSError as exc:
        raise OutputError(f"could not write {path}: {exc.strerror or exc}") from None
    verify_written(path, "results")


def _mean(vals):
    vals = [v for v in vals if v is not None and math.isfinite(v)]
    return sum(vals) / len(vals) if vals else float("nan")


def _summary(results):
    out = {}
    for method in ("network", "fit"):
        rows = [r[method] for r in results if method in r]
        if not rows:
            continue
        out[method] = {k: _mean([r[k] for r in rows]) for k in
                       ("omega_orth_x1e2", "kappa_log", "h_spec", "energy_nh", "seconds")}
        out[method]["including_constant"] = {
            k: _mean([r["including_constant"][k] for r in rows]) for k in ("omega_orth_x1e2", "kappa_log", "h_spec")}
    if "network" in out and "fit" in out:
        out["energy_ratio_network_over_fit"] = out["network"]["energy_nh"] / out["fit"]["energy_nh"]
    return out


def _fmt(r):
    return (f"{r['omega_orth_x1e2']:10.3f} {r['kappa_log']:8.3f} {r['h_spec']:8.4f} "
            f"{r['including_constant']['omega_orth_x1e2']:10.3f} {r['including_constant']['kappa_log']:8.3f} "
            f"{r['including_constant']['h_spec']:8.4f} {r['energy_nh']:12.4g} {r['seconds']:8.2f}")


def _print_row(row):
    print(f"{row['shape']}: network Omega {row['network']['omega_orth_x1e2']:.3f} kappa {row['network']['kappa_log']:.3f}"
          f" H {row['network']['h_spec']:.4f}" + (f" | fit Omega {row['fit']['omega_orth_x1e2']:.3f} kappa "
          f"{row['fit']['kappa_log']:.3f} H {row['fit']['h_spec']:.4f}" if "fit" in row else ""), flush=True)


def _print_table(results, summary):
    hdr = (f"{'shape':32s} {'method':8s} {'Omega_x1e2':>10s} {'kappa':>8s} {'H_spec':>8s} "
           f"{'Om(+c)':>10s} {'ka(+c)':>8s} {'H(+c)':>8s} {'E_NH (Pa)':>12s} {'seconds':>8s}")
    print(hdr)
    print("-" * len(hdr))
    for r in results:
        for m in ("network", "fit"):
            if m in r:
                print(f"{r['shape']:32s} {m:8s} {_fmt(r[m])}")
    for m in ("network", "fit"):
        if m in summary:
            s = summary[m]
            print(f"{'MEAN':32s} {m:8s} {s['omega_orth_x1e2']:10.3f} {s['kappa_log']:8.3f} {s['h_spec']:8.4f} "
                  f"{s['including_constant']['omega_orth_x1e2']:10.3f} {s['including_constant']['kappa_log']:8.3f} "
                  f"{s['including_constant']['h_spec']:8.4f} {s['energy_nh']:12.4g} {s['seconds']:8.2f}")
    if "energy_ratio_network_over_fit" in summary:
        print(f"energy ratio network / fit: {summary['energy_ratio_network_over_fit']:.3f}")
