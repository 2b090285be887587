#!/usr/bin/env python
"""Kaolin's cantilever regression against full-space FEM, for several skinning bases.

Runs :func:`physskin_gs.physics.fem_dynamics.cantilever_protocol` (backward-Euler stable Neo-Hookean FEM on a
box tet mesh vs the reduced :class:`SubspaceSimulator`; E 1e5 Pa, nu 0.45, rho 500 kg/m^3, one end pinned,
gravity, h 0.05 s, 100 steps) and prints one row per basis: kaolin's symmetric squared Chamfer (m^2, raw
positions in metres) at steps 1 and N, the reduced/FEM ratios of the first sag depth and of the oscillation
period, the reduced model's sideways tip drift (mm; the FEM's is ~1e-13 mm on the mirror-symmetric mesh), and
the seconds of the reduced run. The FEM runs once and is shared by all bases.

Symmetry: the beam, its load and the FEM mesh are mirror-symmetric across y = 0 and z = 0, so by default the
reduced model is too: the bases are built from mirror-symmetric samples (``--points mirror``) and the cubature
points come from the product's rule on mirror-symmetric samples (``--cubature cells``). Any sideways drift then comes from the
basis itself (a basis that splits a pair of equal modes, or nodes that break the symmetry), not from sampling
noise. ``--points random --cubature fps`` shows what plain uniform samples give (a few mm of drift from their
asymmetry, shrinking with the sample count).

Bases: ``legendre`` (Legendre polynomials of the long axis times {1, y, z}: rich and exactly symmetric, a
reference), ``rbf`` (16 Gaussian bumps on farthest volume points, radius 0.45, as ``--skinning rbf``),
``network`` (the shipped PhysSkin checkpoint), ``tet`` (the Laplacian eigenbasis of the beam's own tet mesh,
``--skinning tet``), ``eigen`` (``physskin_gs.model.eigen.build_eigen_field``, when that
module exists), ``const`` (constant handle only: rigid + affine motion, a floor). Unavailable ones are skipped.

``--kaolin-fem PATH`` also compares our FEM (and, P1-interpolated, each reduced run) with kaolin's warp.fem
reference trajectory (``wpfem_vertex_deformations_beam.pth``: keys v0, v1, v_end; its beam is x in [0, 1],
y, z in [0.75, 1], pinned x >= 0.98, gravity -y; use it with ``--kaolin-geometry``).

FEM resolution: the default 20 x 4 x 4 mesh runs in ~25 s but is itself ~3.6e-3 m^2 (Chamfer@100) away from
kaolin's reference on its beam; 30 x 6 x 6 (~2-4 min on 2 busy cores) is 2.9e-4 away, so use ``--divisions
30,6,6 --fem-cache fem.npz`` for Chamfer@100 numbers (the cache reuses the FEM run).

Example: ``python scripts/eval_cantilever.py --basis legendre,rbf,network --json out.json``
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from physskin_gs.physics.fem_dynamics import (  # noqa: E402
    cantilever_protocol,
    chamfer_distance,
    interpolate_p1,
    legendre_beam_weights,
)


def box_points(size, n_volume: int, n_surface: int, seed: int, mirror: bool = False):
    """Volume (uniform) and surface (area-weighted over the 6 faces) samples of the beam in its normalised frame
    (centre 0, half longest side 1). size: (3,) beam extents (m; only their ratios matter). ``mirror``: draw a
    quarter of each set and mirror it across the y = 0 and z = 0 planes, so the samples are exactly as
    mirror-symmetric as the beam (and the FEM mesh); counts are then rounded down to multiples of 4. Returns
    (surface (n_surface, 3), volume (n_volume, 3)) float32 tensors, dimensionless. Raises ValueError for
    negative counts (numpy)."""
    if mirror:
        surf, vol = box_points(size, n_volume // 4, n_surface // 4, seed)
        out = []
        for p in (surf, vol):
            for a in (1, 2):
                m = p.clone()
                m[:, a] = -m[:, a]
                p = torch.cat([p, m], 0)
            out.append(p)
        return out[0], out[1]
    rng = np.random.default_rng(seed)
    half = np.asarray(size, np.float64) / max(size)  # half extents in normalised units
    vol = (rng.random((n_volume, 3)) * 2 - 1) * half
    areas = np.array([half[1] * half[2], half[0] * half[2], half[0] * half[1]] * 2)
    face = rng.choice(6, size=n_surface, p=areas / areas.sum())
    surf = (rng.random((n_surface, 3)) * 2 - 1) * half
    ax = face % 3
    surf[np.arange(n_surface), ax] = np.where(face < 3, -1.0, 1.0) * half[ax]
    return torch.from_numpy(surf).float(), torch.from_numpy(vol).float()


def make_bases(names, size, seed: int, num_handles: int = 16, mirror: bool = False):
    """{name: (weights_fn, description)} for the requested bases; unavailable ones are reported and skipped.

    names: basis names (see the module docstring); size: (3,) beam extents (m); ``mirror``: build them from
    mirror-symmetric samples (:func:`box_points`). Each weights_fn maps normalised
    points (N, 3) float32 to (W (N, H), dW/dX (N, H, 3)). Unknown names, missing modules or checkpoints are
    printed to stderr and skipped (ValueError / ImportError / FileNotFoundError are caught, nothing is raised)."""
    from physskin_gs.geometry.sampling import farthest_point_sampling

    surf, vol = box_points(size, 16384, 8192, seed, mirror)
    out = {}
    for name in names:
        try:
            if name == "legendre":
                out[name] = (legendre_beam_weights(6, cross_degree=1), "Legendre P1..P6(x) x {1, y, z} + const")
            elif name == "const":
                out[name] = (lambda x: (torch.ones(x.shape[0], 1), torch.zeros(x.shape[0], 1, 3)), "constant only")
            elif name == "rbf":
                from physskin_gs.model.field import RBFSkinningField

                idx = farthest_point_sampling(vol, num_handles, seed=seed)
                field = RBFSkinningField(vol[torch.as_tensor(np.asarray(idx), dtype=torch.long)], radius=0.45)
                out[name] = (field.weights_and_grads, f"{num_handles} RBF r=0.45 on FPS volume points")
            elif name == "network":
                from physskin_gs import model as pm

                ckpt = pm.default_checkpoint_path()
                if not ckpt.is_file():
                    raise FileNotFoundError(f"no checkpoint at {ckpt}")
                net = pm.load_checkpoint(ckpt)
                enc_idx = np.asarray(farthest_point_sampling(surf, 2048, seed=seed))
                enc = surf[torch.as_tensor(enc_idx, dtype=torch.long)]
                field = pm.skinning_from_model(net, enc, vol)
                out[name] = (field.weights_and_grads, f"network {ckpt.name}")
            elif name == "eigen":
                from physskin_gs.model.eigen import build_eigen_field

                field = build_eigen_field(vol, num_handles=num_handles)
                out[name] = (field.weights_and_grads, f"eigen ({field.num_handles} handles)")
            elif name == "tet":  # the Laplacian eigenbasis of the beam's own tet mesh (``--skinning tet``)
                from physskin_gs.model.bases import SkinningOptions, build_skinning

                h = np.asarray(size, np.float64) / max(size)  # half extents, normalised (as box_points)
                corners = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)]) * h
                faces = np.array([[0, 1, 3], [0, 3, 2], [4, 6, 7], [4, 7, 5], [0, 4, 5], [0, 5, 1],
                                  [2, 3, 7], [2, 7, 6], [0, 2, 6], [0, 6, 4], [1, 5, 7], [1, 7, 3]])
                field, src = build_skinning("tet", surf, vol, SkinningOptions(num_handles=num_handles,
                                                                              mesh=(corners, faces)))
                out[name] = (field.weights_and_grads, src)
            else:
                raise ValueError(f"unknown basis {name!r}")
        except (ImportError, FileNotFoundError, ValueError) as exc:
            print(f"[skip] {name}: {exc}", file=sys.stderr)
    return out


class KaolinReference:
    """Kaolin's warp.fem beam frames (``wpfem_vertex_deformations_beam.pth``: v0, v1, v_end; its beam is x in
    [0, 1], y, z in [0.75, 1], pinned x >= 0.98, gravity -y), mapped into the protocol's frame (pinned x <= 0.02,
    gravity -z) by the proper rotation R plus a shift: x_o = x_max - x_k, y_o = z_k - c_z, z_o = y_k - c_y."""

    R = np.array([[-1.0, 0, 0], [0, 0, 1.0], [0, 1.0, 0]])

    def __init__(self, path: str, size) -> None:
        d = torch.load(path, weights_only=True, map_location="cpu")
        self.v0, self.v1, self.ve = (d[k].double().numpy() for k in ("v0", "v1", "v_end"))
        lo, hi = self.v0.min(0), self.v0.max(0)
        c = (lo + hi) / 2
        self.points = self.v0 @ self.R.T + np.array([hi[0], -c[2], -c[1]])  # rest vertices in our frame
        if not np.allclose(np.sort(hi - lo), np.sort(np.asarray(size, float)), rtol=1e-3):
            print(f"[warn] kaolin reference extents {hi - lo} differ from the beam size {size}", file=sys.stderr)

    def chamfers(self, disp_at_points, steps: int) -> dict:
        """{1: .., steps: ..} Chamfer (m^2) of our displacements at :attr:`points` (frames 1 and steps, a
        callable k -> (p, 3) metres in our frame) against kaolin's frames 1 and 100 (v1, v_end)."""
        return {k: chamfer_distance(self.v0 + disp_at_points(k) @ self.R, ref)
                for k, ref in ((1, self.v1), (steps, self.ve))}


def _fem_cache(path, common) -> dict:
    """Load the FEM run of ``common`` from ``path`` (.npz) when it matches, else run it and save it there."""
    from physskin_gs.geometry.tetmesh import TetMesh

    key = json.dumps({k: common[k] for k in ("size", "divisions", "steps", "dt", "pin_width")}, sort_keys=True)
    p = Path(path) if path else None
    if p is not None and p.is_file():
        z = np.load(p)
        if str(z["key"]) == key:
            tm = TetMesh(z["nodes"], z["tets"], "box-symmetric")
            return {"tm": tm, "traj": z["traj"], "seconds": float(z["seconds"]), "newton_max": int(z["newton_max"]),
                    "newton_mean": float(z["newton_mean"]), "converged": bool(z["converged"])}
        print(f"[info] {p} holds another setup; recomputing", file=sys.stderr)
    fem = cantilever_protocol(None, **common)["fem_cache"]
    if p is not None:
        np.savez_compressed(p, key=key, nodes=fem["tm"].nodes, tets=fem["tm"].tets, traj=fem["traj"],
                            seconds=fem["seconds"], newton_max=fem["newton_max"], newton_mean=fem["newton_mean"],
                            converged=fem["converged"])
    return fem


def main(argv=None) -> int:
    """Command-line entry point (argv: list of str, default sys.argv[1:]); prints the table, optionally writes
    ``--json``. Returns 0; argparse exits on bad arguments, and a bad --size / --divisions raises ValueError."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--basis", default="legendre,rbf,network,eigen",
                    help="comma list of legendre, rbf, network, eigen, const (default: %(default)s)")
    ap.add_argument("--size", default="1,0.2,0.2", help="beam L,b,h in metres (default %(default)s)")
    ap.add_argument("--kaolin-geometry", action="store_true", help="kaolin's beam: 1 x 0.25 x 0.25 m")
    ap.add_argument("--divisions", default="20,4,4", help="FEM cells per axis (y, z even) (default %(default)s)")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--dt", type=float, default=0.05)
    ap.add_argument("--n-cubature", type=int, default=1024)
    ap.add_argument("--points", default="mirror", choices=["mirror", "random"],
                    help="samples the bases are built from: mirror-symmetric like the beam and its FEM mesh "
                         "(default), or plain uniform ones (their sampling asymmetry then shows as drift)")
    ap.add_argument("--cubature", default="cells", choices=["cells", "fps", "fps_sym", "random", "grid"],
                    help="reduced cubature points (default %(default)s: the product's rule on mirror-symmetric "
                         "samples)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pin-width", type=float, default=0.02, help="pinned end slab in metres (kaolin: 0.02)")
    ap.add_argument("--volume-clusters", type=int, default=0,
                    help="mean-dilatation clusters of the reduced simulator (0: per point, the default)")
    ap.add_argument("--sim-defaults", action="store_true",
                    help="the simulator's own Newton settings (5 iterations, adaptive) instead of 20 full ones")
    ap.add_argument("--kaolin-fem", default=None, help="kaolin's wpfem_vertex_deformations_beam.pth to compare")
    ap.add_argument("--fem-cache", default=None, help="an .npz to reuse (or store) the FEM run of this setup")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args(argv)

    size = (1.0, 0.25, 0.25) if args.kaolin_geometry else tuple(float(v) for v in args.size.split(","))
    divisions = tuple(int(v) for v in args.divisions.split(","))
    sim_kwargs = dict(newton_iters=5, solver="adaptive", tol=1e-6, grad_tol=1e-3) if args.sim_defaults else None
    if args.volume_clusters:
        sim_kwargs = dict(sim_kwargs or {}, volume_clusters=args.volume_clusters)
    common = dict(size=size, divisions=divisions, steps=args.steps, dt=args.dt, n_cubature=args.n_cubature,
                  cubature=args.cubature, seed=args.seed, pin_width=args.pin_width, sim_kwargs=sim_kwargs)
    names = [b.strip() for b in args.basis.split(",") if b.strip()]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bases = make_bases(names, size, args.seed, mirror=args.points == "mirror")
    t0 = time.perf_counter()
    fem = _fem_cache(args.fem_cache, common)
    base = cantilever_protocol(None, fem=fem, **common)
    f = base["fem"]
    fn_ = base["fem_newton"]
    print(f"FEM: {fn_['nodes']} nodes, {fn_['tets']} tets, {base['seconds']['fem']:.1f} s, Newton max "
          f"{fn_['max_iters']} (mean {fn_['mean_iters']:.1f}), converged {fn_['all_converged']}; tip first sag "
          f"{f['first_sag_m']:.4f} m, period {f['period_s']:.3f} s, sideways {1e3 * f['side_max_m']:.2e} mm")
    base["setup"]["basis_points"] = args.points
    rows, results = [], {"setup": base["setup"], "fem": base["fem"], "fem_newton": base["fem_newton"],
                         "fem_seconds": base["seconds"]["fem"], "bases": {}}
    n = args.steps
    ref = KaolinReference(args.kaolin_fem, size) if args.kaolin_fem else None
    if ref is not None:
        tm = fem["tm"]
        results["kaolin_reference_fem"] = ref.chamfers(
            lambda k: interpolate_p1(tm, fem["traj"][k] - tm.nodes, ref.points), n)
    for name, (fn, desc) in bases.items():
        r = cantilever_protocol(fn, fem=fem, eval_points=None if ref is None else ref.points, **common)
        entry = {"description": desc, "chamfer_m2": {str(k): v for k, v in r["chamfer_m2"].items()},
                 "chamfer_curve_m2": r["chamfer_curve_m2"].tolist(), "rms_m": r["rms_m"].tolist(),
                 "reduced": r["reduced"], "sag_ratio": r["sag_ratio"], "period_ratio": r["period_ratio"],
                 "sideways_drift_mm": r["sideways_drift_mm"]["reduced"], "seconds": r["seconds"]["reduced"],
                 "reduced_newton": r["reduced_newton"]}
        if ref is not None:
            entry["kaolin_reference"] = ref.chamfers(lambda k: r["traj_eval"][k] - ref.points, n)
        results["bases"][name] = entry
        rows.append((name, r["chamfer_m2"][1], r["chamfer_m2"][n], r["sag_ratio"], r["period_ratio"],
                     r["sideways_drift_mm"]["reduced"], r["seconds"]["reduced"]))
        print(f"  done {name} ({desc})", file=sys.stderr, flush=True)
    print(f"\nChamfer: kaolin's symmetric squared Chamfer in m^2 (frame 1 / frame {n}); ratios reduced / FEM")
    print(f"{'basis':10s} {'Chamfer@1':>11s} {'Chamfer@' + str(n):>11s} {'sag ratio':>9s} {'period ratio':>12s} "
          f"{'drift mm':>9s} {'seconds':>8s}")
    for name, c1, cn, sr, pr, dr, sec in rows:
        print(f"{name:10s} {c1:11.3e} {cn:11.3e} {sr:9.3f} {pr:12.3f} {dr:9.2f} {sec:8.1f}")
    if ref is not None:
        kf = results["kaolin_reference_fem"]
        print(f"\nagainst kaolin's warp.fem frames (m^2): our FEM Chamfer@1 {kf[1]:.3e}, Chamfer@{n} {kf[n]:.3e}")
        for name, e in results["bases"].items():
            kr = e["kaolin_reference"]
            print(f"{name:10s} Chamfer@1 {kr[1]:.3e}, Chamfer@{n} {kr[n]:.3e}")
    print(f"total {time.perf_counter() - t0:.1f} s")
    if args.json:
        def clean(o):
            if isinstance(o, dict):
                return {str(k): clean(v) for k, v in o.items()}
            if isinstance(o, (list, tuple)):
                return [clean(v) for v in o]
            if isinstance(o, (np.floating, float)):
                return None if not math.isfinite(float(o)) else float(o)
            if isinstance(o, np.integer):
                return int(o)
            return o

        Path(args.json).write_text(json.dumps(clean(results), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
