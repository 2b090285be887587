"""Preparation time of a large synthetic capture, stage by stage, against the time to load the file (issue #13).

The capture (:func:`synthetic_capture`): a closed procedural "animal" (an ellipsoid body, a head, four leg
cylinders and a tail, sampled on the surface of their union, i.e. a surface-only splat as real captures are)
holding ``--object-share`` of the Gaussians (default 20 %: 200k of 1M), standing on a flat disc of floor
Gaussians (flat surfels, the rest of the rows), plus 0.2 % floaters; the whole scene is rotated by a fixed
random rotation so no axis is up. It is written as an INRIA PLY to ``.cache/bench_prepare/`` (git-ignored) and
reused by later runs with the same settings.

Each run: load the PLY (``physskin_gs.pipeline.load_for_animation``), then ``prepare_animation`` (its stage
seconds are read from ``info["timings"]``), then the first frame (one simulation step + deformation of every
moving Gaussian). For each field-evaluation mode asked for (``--field-eval grid,direct``) the whole preparation
is run again, so the two modes can be compared stage by stage; each stage's seconds are printed next to their
ratio to the load time of the same run, and the peak RSS of the process (``resource.getrusage``, MiB).

Usage::

    OPENBLAS_NUM_THREADS=1 python scripts/bench_prepare.py --n 1000000 [--skinning eigen|network]
        [--field-eval grid,direct] [--sh-degree 0|3] [--repeat 3] [--scheme-study 0.04,0.02] [--json out.json]

Each mode runs in its own subprocess (its own peak RSS, no warm caches from the other mode); with ``--repeat``
the modes alternate and the fastest run of each mode is shown (on a machine shared with other work the least
disturbed one). After the runs, the deformed Gaussians of the two modes are compared
under the same handle transforms (a drag, 15 steps). ``--scheme-study`` measures error and cost of the three
interpolation schemes at the given cells on the moving centres.

Targets of issue #13 on 2 cores: load to first frame <= 10x the load time and <= 30 s for 1M Gaussians.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import resource
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Dict, Tuple

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / ".cache" / "bench_prepare"


# ---------------------------------------------------------------------------------------------- the capture
def _union_surface_samples(n: int, rng: np.random.Generator) -> Tuple[np.ndarray, np.ndarray]:
    """(points (n, 3), outward normals (n, 3)) on the surface of a union of primitives (z up, floor z = 0).

    Primitives (units: the animal is about 1.6 long, 1.2 tall): body ellipsoid, head sphere, four vertical leg
    cylinders from z = 0 to the body, a slanted tail cylinder. Samples inside another primitive are dropped, so
    the samples lie on the closed surface of the union; primitives are sampled in proportion to their area."""
    body_c, body_r = np.array([0.0, 0.0, 0.75]), np.array([0.8, 0.35, 0.3])
    head_c, head_r = np.array([0.95, 0.0, 1.05]), 0.25
    legs = [np.array([sx * 0.5, sy * 0.2, 0.0]) for sx in (-1, 1) for sy in (-1, 1)]
    leg_r, leg_h = 0.09, 0.7
    tail_a, tail_b, tail_r = np.array([-0.75, 0.0, 0.8]), np.array([-1.1, 0.0, 1.1]), 0.04

    def inside(p: np.ndarray, skip: int) -> np.ndarray:
        ins = np.zeros(p.shape[0], dtype=bool)
        if skip != 0:
            ins |= (((p - body_c) / body_r) ** 2).sum(1) < 1.0
        if skip != 1:
            ins |= ((p - head_c) ** 2).sum(1) < head_r ** 2
        for k, c in enumerate(legs):
            if skip != 2 + k:
                ins |= (((p[:, :2] - c[:2]) ** 2).sum(1) < leg_r ** 2) & (p[:, 2] > 0) & (p[:, 2] < leg_h)
        if skip != 6:
            ax = (tail_b - tail_a) / np.linalg.norm(tail_b - tail_a)
            t = (p - tail_a) @ ax
            d = p - tail_a - t[:, None] * ax
            ins |= ((d ** 2).sum(1) < tail_r ** 2) & (t > 0) & (t < np.linalg.norm(tail_b - tail_a))
        return ins

    def sample(kind: int, m: int) -> Tuple[np.ndarray, np.ndarray]:
        if kind == 0 or kind == 1:
            d = rng.standard_normal((m, 3))
            d /= np.linalg.norm(d, axis=1, keepdims=True)
            if kind == 0:
                p = body_c + d * body_r
                nrm = d / body_r
            else:
                p = head_c + d * head_r
                nrm = d
        elif 2 <= kind <= 5:
            c = legs[kind - 2]
            a = 2 * np.pi * rng.random(m)
            z = leg_h * rng.random(m)
            nrm = np.stack([np.cos(a), np.sin(a), np.zeros(m)], 1)
            p = np.stack([c[0] + leg_r * np.cos(a), c[1] + leg_r * np.sin(a), z], 1)
            cap = rng.random(m) < leg_r / (2 * leg_h + leg_r)  # the bottom cap (the hoof on the floor)
            rr = leg_r * np.sqrt(rng.random(m))
            p[cap] = np.stack([c[0] + rr * np.cos(a), c[1] + rr * np.sin(a), np.zeros(m)], 1)[cap]
            nrm[cap] = np.array([0.0, 0.0, -1.0])
        else:
            L = np.linalg.norm(tail_b - tail_a)
            ax = (tail_b - tail_a) / L
            u = np.cross(ax, [0.0, 1.0, 0.0])
            u /= np.linalg.norm(u)
            v = np.cross(ax, u)
            a = 2 * np.pi * rng.random(m)
            nrm = np.cos(a)[:, None] * u + np.sin(a)[:, None] * v
            p = tail_a + (L * rng.random(m))[:, None] * ax + tail_r * nrm
        nrm = nrm / np.linalg.norm(nrm, axis=1, keepdims=True)
        return p, nrm

    areas = np.array([4 * np.pi * (body_r.prod() ** (2 / 3)), 4 * np.pi * head_r ** 2]
                     + [2 * np.pi * leg_r * leg_h + np.pi * leg_r ** 2] * 4
                     + [2 * np.pi * tail_r * np.linalg.norm(tail_b - tail_a)])
    pts, nrms, have = [], [], 0
    while have < n:
        m = int((n - have) * 1.4) + 1000
        kinds = rng.choice(len(areas), size=m, p=areas / areas.sum())
        for k in range(len(areas)):
            sel = int((kinds == k).sum())
            if sel == 0:
                continue
            p, q = sample(k, sel)
            keep = ~inside(p, k)
            pts.append(p[keep])
            nrms.append(q[keep])
            have += int(keep.sum())
    P, Nn = np.concatenate(pts)[:n], np.concatenate(nrms)[:n]
    perm = rng.permutation(n)
    return P[perm], Nn[perm]


def _frames_from_normals(nrm: np.ndarray) -> np.ndarray:
    """(n, 3, 3) rotations whose third column is the unit normal (n, 3) (flat Gaussians: thin along local z)."""
    a = np.where(np.abs(nrm[:, :1]) < 0.9, np.array([[1.0, 0.0, 0.0]]), np.array([[0.0, 1.0, 0.0]]))
    t1 = np.cross(nrm, a)
    t1 /= np.linalg.norm(t1, axis=1, keepdims=True)
    t2 = np.cross(nrm, t1)
    return np.stack([t1, t2, nrm], axis=-1)


def synthetic_capture(n: int, object_share: float = 0.2, sh_degree: int = 0, seed: int = 0):
    """(GaussianScene, info dict) of the capture in the module docstring: ``n`` rows, of which
    ``round(object_share * n)`` on the object, 0.2 % floaters, the rest a floor disc; SH degree 0..3."""
    from physskin_gs.scene import GaussianScene, rotmat_to_quat

    rng = np.random.default_rng(seed)
    n_obj = int(round(object_share * n))
    n_flo = max(10, n // 500)
    n_floor = n - n_obj - n_flo
    if n_floor < 1000:
        raise SystemExit(f"error: --object-share {object_share} leaves {n_floor} floor rows of {n}")
    obj, obj_n = _union_surface_samples(n_obj, rng)
    spacing_obj = math.sqrt(5.0 / n_obj)  # about the object's area / count
    # floor disc of radius 2.5 at z = -0.002 (just below the hooves), flat surfels
    r = 2.5 * np.sqrt(rng.random(n_floor))
    a = 2 * np.pi * rng.random(n_floor)
    floor = np.stack([r * np.cos(a), r * np.sin(a), np.full(n_floor, -0.002) + 0.001 * rng.standard_normal(n_floor)], 1)
    spacing_floor = math.sqrt(np.pi * 2.5 ** 2 / n_floor)
    d = rng.standard_normal((n_flo, 3))
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    flo = np.array([0.0, 0.0, 0.8]) + d * rng.uniform(2.0, 4.0, (n_flo, 1))
    means = np.concatenate([obj, floor, flo])
    Rl = np.concatenate([_frames_from_normals(obj_n), np.broadcast_to(np.eye(3), (n_floor, 3, 3)),
                         np.broadcast_to(np.eye(3), (n_flo, 3, 3))])
    scales = np.concatenate([
        np.stack([np.full(n_obj, spacing_obj), np.full(n_obj, spacing_obj), np.full(n_obj, 0.1 * spacing_obj)], 1),
        np.stack([np.full(n_floor, spacing_floor), np.full(n_floor, spacing_floor), np.full(n_floor, 1e-3)], 1),
        np.full((n_flo, 3), 0.01)]) * np.exp(0.2 * rng.standard_normal((n, 3)))
    q, _ = np.linalg.qr(np.random.default_rng(seed + 7).normal(size=(3, 3)))
    R = q * np.sign(np.linalg.det(q))
    means = means @ R.T
    Rl = np.einsum("ij,njk->nik", R, Rl)
    quats = rotmat_to_quat(torch.from_numpy(Rl).float())
    op = np.concatenate([np.full(n_obj, 3.0), np.full(n_floor, 4.0), np.full(n_flo, 1.0)])
    dc = np.concatenate([0.5 * rng.standard_normal((n_obj, 3)), np.full((n_floor, 3), 0.2), np.full((n_flo, 3), 1.5)])
    K = (sh_degree + 1) ** 2 - 1
    rest = (0.05 * rng.standard_normal((n, K, 3))).astype(np.float32)
    scene = GaussianScene(means=torch.from_numpy(means).float(), quats=quats,
                          log_scales=torch.from_numpy(np.log(scales)).float(),
                          opacity_logits=torch.from_numpy(op).float(), sh_dc=torch.from_numpy(dc).float(),
                          sh_rest=torch.from_numpy(rest), format="inria-ply")
    return scene, {"n_object": n_obj, "n_floor": n_floor, "n_floaters": n_flo, "true_up": (R @ [0.0, 0, 1]).tolist()}


def capture_path(n: int, object_share: float, sh_degree: int, seed: int) -> Path:
    return CACHE / f"capture_n{n}_obj{object_share:g}_sh{sh_degree}_s{seed}.ply"


def ensure_capture(n: int, object_share: float, sh_degree: int, seed: int) -> Tuple[Path, Dict]:
    """Write the capture PLY once (reused by later runs); returns (path, facts)."""
    from physskin_gs.io import save_scene

    path = capture_path(n, object_share, sh_degree, seed)
    meta = path.with_suffix(".json")
    if path.is_file() and meta.is_file():
        return path, json.loads(meta.read_text())
    CACHE.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    scene, facts = synthetic_capture(n, object_share, sh_degree, seed)
    save_scene(scene, str(path))
    facts["generate_s"] = time.perf_counter() - t
    meta.write_text(json.dumps(facts))
    del scene
    gc.collect()
    return path, facts


# ---------------------------------------------------------------------------------------------- the run
_STAGES = [("scene_analysis", "scene analysis"), ("selection", "selection"), ("interior_fill", "interior fill"),
           ("normalisation", "normalisation"), ("field_build", "field build"), ("cubature", "cubature points"),
           ("cubature_weights", "cubature weights + simulator"),
           ("gaussian_weights", "field evaluation at the Gaussians"), ("deformer_setup", "deformer set-up"),
           ("handles_pins", "handles + pins")]


def peak_rss_mib() -> float:
    """Peak resident set size of this process in MiB (Linux ru_maxrss is in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def deformation_probe(anim, frames: int = 15) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A reproducible deformation: grab the cubature points near the object's top and pull them up and sideways
    by 25 % of its height for ``frames`` steps (after the first frame). Returns (handle transforms (H, 3, 4)
    float64, deformed means (M, 3) float32, deformed covariances (M, 3, 3) float32) of the moving rows."""
    up = anim.up_vector
    X = anim.cubature_positions().double()
    top = X[(X @ up).argmax()]
    side = torch.linalg.cross(up, torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64))
    if float(side.norm()) < 1e-3:
        side = torch.linalg.cross(up, torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64))
    side = side / side.norm()
    did = anim.start_drag(top, radius=0.3 * anim.height_scene)
    anim.update_drag(did, top + 0.25 * anim.height_scene * (up + side))
    anim.step(frames)
    Z = anim.handle_transforms_scene()
    d = anim.deformer
    d.deform(Z)
    return Z.numpy(), d.means.numpy().copy(), d.covars.numpy().copy()


def run_once(path: Path, skinning: str, field_eval: str, seed: int = 0, probe_out: str = None) -> Dict:
    """Load, prepare and take the first frame; returns seconds per stage and facts. With ``probe_out`` also
    runs :func:`deformation_probe` and saves its arrays there (``.npz``)."""
    t_imp = time.perf_counter()
    from physskin_gs.pipeline import AnimationConfig, load_for_animation, prepare_animation

    t_imp = time.perf_counter() - t_imp  # the first call in a process: the package's imports (torch is already in)
    gc.collect()
    t0 = time.perf_counter()
    scene = load_for_animation(str(path))
    t_load = time.perf_counter() - t0
    cfg = AnimationConfig(skinning=skinning, field_eval=field_eval, seed=seed)
    t1 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        anim = prepare_animation(scene, cfg)
    t_prep = time.perf_counter() - t1
    t2 = time.perf_counter()
    anim.step(1)
    t_step = time.perf_counter() - t2
    t3 = time.perf_counter()
    dg = anim.deformed_gaussians()
    t_def = time.perf_counter() - t3
    total = time.perf_counter() - t0
    assert torch.isfinite(dg.means).all()
    info = anim.info
    out = {"imports": t_imp, "load": t_load, "prepare": t_prep, "first_step": t_step, "first_deform": t_def,
           "load_to_first_frame": total, "timings": dict(info.get("timings", {})),
           "field_eval": info.get("field_eval"), "num_moving": info["num_moving"],
           "num_gaussians": scene.num_gaussians, "skinning": info["skinning"], "peak_rss_mib": peak_rss_mib(),
           "object_size": info["robust_extent_scene"], "torch_threads": torch.get_num_threads()}
    if probe_out:
        Z, m, c = deformation_probe(anim)
        np.savez(probe_out, Z=Z, means=m, covars=c, rest=scene.means[anim.moving].numpy())
    del anim, dg, scene
    gc.collect()
    return out


def print_table(res: Dict) -> None:
    load = res["load"]
    fe = res.get("field_eval") or {}
    rep_note = ""
    if res.get("repeats", 1) > 1:
        per = ", ".join(f"{t:.2f} s / {ld:.2f} s = {t / ld:.1f}x" for t, ld in
                        zip(res["load_to_first_frame_runs"], res["load_runs"]))
        rep_note = (f"; fastest of {res['repeats']} runs (load to first frame / load per run: {per}; the load of "
                    f"this 2-core VM's page cache varies several-fold between processes)")
    print(f"\n== {res['num_gaussians']} Gaussians ({res['num_moving']} moving), skinning {res['skinning']}, "
          f"field evaluation {fe.get('mode')} ({fe.get('reason', '')}){rep_note}")
    if fe.get("mode") == "grid":
        rep = fe.get("error", {})
        print(f"   grid: {fe.get('scheme')} cell {fe.get('cell'):.4g} (length scale "
              f"{fe.get('length_scale') or 0:.3g}), "
              f"{fe.get('num_nodes')} nodes, {fe.get('num_occupied')} occupied cells ({fe.get('num_rejected')} "
              f"rejected by the check; refined grid: {(fe.get('refined') or {}).get('num_nodes', 0)} nodes), "
              f"{fe.get('num_refined', 0)} centres on the refined grid, {fe.get('num_fallback')} evaluated "
              f"directly; build "
              f"{fe.get('build_seconds', 0):.2f} s (nodes {fe.get('node_seconds', 0):.2f} s, check "
              f"{fe.get('check_seconds', 0):.2f} s), plan {fe.get('plan_seconds', 0):.2f} s, interpolation "
              f"{fe.get('interpolation_seconds', 0):.2f} s")
        print(f"   error on {rep.get('num_points')} centres (relative to RMS): W max {rep.get('w_max_rel', 0):.2e} "
              f"p99 {rep.get('w_p99_rel', 0):.2e} mean {rep.get('w_mean_rel', 0):.2e}; grad W max "
              f"{rep.get('g_max_rel', 0):.2e} p99 {rep.get('g_p99_rel', 0):.2e} mean {rep.get('g_mean_rel', 0):.2e}")
    print(f"   {'stage':40s} {'seconds':>9s} {'x load':>8s}")
    rows = [("load", load)] + [(label, res["timings"].get(key, float("nan"))) for key, label in _STAGES]
    rows += [("prepare (total)", res["prepare"]), ("first step", res["first_step"]),
             ("first deformation", res["first_deform"]), ("load to first frame", res["load_to_first_frame"])]
    for label, sec in rows:
        print(f"   {label:40s} {sec:9.2f} {sec / load:8.1f}")
    print(f"   peak RSS {res['peak_rss_mib']:.0f} MiB; imports of physskin_gs.pipeline (once per process, before "
          f"the load, not counted above) {res.get('imports', float('nan')):.2f} s")


def best_run(runs: list) -> Dict:
    """The fastest of the runs (smallest load-to-first-frame time; on a machine shared with other work the least
    disturbed one), with ``repeats``, the per-run totals ``load_to_first_frame_runs`` and the largest peak RSS."""
    out = dict(min(runs, key=lambda r: r["load_to_first_frame"]))
    out["peak_rss_mib"] = max(r["peak_rss_mib"] for r in runs)
    out["repeats"] = len(runs)
    out["load_to_first_frame_runs"] = [r["load_to_first_frame"] for r in runs]
    out["load_runs"] = [r["load"] for r in runs]
    return out


def compare_probes(a: str, b: str, size: float) -> Dict:
    """deformation_difference of probe b against probe a (same handle transforms required)."""
    from physskin_gs.model.grid_field import deformation_difference

    pa, pb = np.load(a), np.load(b)
    dz = float(np.abs(pa["Z"] - pb["Z"]).max())
    out = deformation_difference(torch.from_numpy(pa["means"]), torch.from_numpy(pa["covars"]),
                                 torch.from_numpy(pb["means"]), torch.from_numpy(pb["covars"]), size)
    out["handle_transform_diff"] = dz
    out["max_displacement_rel"] = float(np.linalg.norm(pa["means"] - pa["rest"], axis=1).max() / size)
    return out


def scheme_study(path: Path, skinning: str, cells, seed: int = 0, sample: int = 20000) -> None:
    """Error and cost of each interpolation scheme at given cells, on the moving centres of the capture."""
    from physskin_gs.model.grid_field import SCHEMES, GridSkinningField, grid_error_report
    from physskin_gs.pipeline import AnimationConfig, load_for_animation, prepare_animation

    scene = load_for_animation(str(path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        anim = prepare_animation(scene, AnimationConfig(skinning=skinning, field_eval="direct", seed=seed))
    field = anim.field
    x = anim.norm.to_normalized(scene.means[anim.moving].double()).float()
    g = torch.Generator().manual_seed(seed + 1)
    xs = x[torch.randperm(x.shape[0], generator=g)[:sample]]
    t = time.perf_counter()
    ref = field.weights_and_grads(xs)
    per_pt = (time.perf_counter() - t) / xs.shape[0]
    print(f"\n== scheme study, {skinning}: {x.shape[0]} centres; direct {per_pt * 1e6:.1f} us per centre "
          f"({per_pt * x.shape[0]:.2f} s for all); errors on {xs.shape[0]} random centres, relative to RMS")
    print(f"   {'scheme':12s} {'check':>5s} {'cell':>7s} {'nodes':>7s} {'build s':>8s} {'interp s':>8s} "
          f"{'direct%':>7s} | {'W max':>8s} {'W p99':>8s} {'W mean':>8s} | {'dW max':>8s} {'dW p99':>8s} "
          f"{'dW mean':>8s}")
    for scheme in SCHEMES:
        for cell in cells:
            for check in ((None, (0.01, 0.1)) if scheme == "hermite" else (None,)):
                grid = GridSkinningField(field, x, cell=cell, scheme=scheme, check_tol=check)
                t = time.perf_counter()
                grid.weights_and_grads(x)
                ti = time.perf_counter() - t
                direct_share = grid.last_fallback / x.shape[0]
                r = grid_error_report(field, grid, xs, reference=ref)
                print(f"   {scheme:12s} {'yes' if check else 'no':>5s} {cell:7.4f} {grid.num_nodes:7d} "
                      f"{grid.build_seconds:8.2f} {ti:8.2f} {100 * direct_share:7.1f} | "
                      f"{r['w_max_rel']:8.1e} {r['w_p99_rel']:8.1e} {r['w_mean_rel']:8.1e} | {r['g_max_rel']:8.1e} "
                      f"{r['g_p99_rel']:8.1e} {r['g_mean_rel']:8.1e}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000, help="Gaussians in the capture (e.g. 100000, 1000000, 3000000)")
    ap.add_argument("--object-share", type=float, default=0.2, help="share of the rows on the object (moving)")
    ap.add_argument("--sh-degree", type=int, default=0, choices=(0, 1, 2, 3))
    ap.add_argument("--skinning", default="eigen", help="eigen (default), network, fit, rbf")
    ap.add_argument("--field-eval", default="grid,direct", help="comma list of grid, direct, auto")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per mode (alternating); the tables show the "
                    "fastest run of each mode")
    ap.add_argument("--in-process", action="store_true", help="run every mode in this process (default: one "
                    "subprocess per mode, so each peak RSS is its own)")
    ap.add_argument("--scheme-study", default=None, metavar="CELLS",
                    help="also compare the interpolation schemes at these cells, e.g. 0.04,0.02")
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if not 0 < args.object_share < 0.99:
        raise SystemExit("error: --object-share must be in (0, 0.99)")
    path, facts = ensure_capture(args.n, args.object_share, args.sh_degree, args.seed)
    if args.worker:  # one mode, results to a JSON file (the parent prints them)
        mode, out = args.worker.split(":", 1)
        res = run_once(path, args.skinning, mode, args.seed, probe_out=out + ".npz")
        Path(out + ".json").write_text(json.dumps(res))
        return 0
    print(f"capture {path} ({path.stat().st_size / 2**20:.0f} MiB): {facts}; torch threads {torch.get_num_threads()}")
    results, probes = [], {}
    modes = [m.strip() for m in args.field_eval.split(",") if m.strip()]
    runs: Dict[str, list] = {m: [] for m in modes}
    for rep in range(max(1, args.repeat)):
        for mode in modes:  # modes alternate, so a burst of load elsewhere does not favour one of them
            stem = str(CACHE / f"run_{os.getpid()}_{mode}")
            if args.in_process:
                res = run_once(path, args.skinning, mode, args.seed, probe_out=stem + ".npz")
            else:
                cmd = [sys.executable, __file__, "--n", str(args.n), "--object-share", str(args.object_share),
                       "--sh-degree", str(args.sh_degree), "--skinning", args.skinning, "--seed", str(args.seed),
                       "--worker", f"{mode}:{stem}"] + (["--threads", str(args.threads)] if args.threads else [])
                subprocess.run(cmd, check=True)
                res = json.loads(Path(stem + ".json").read_text())
                os.remove(stem + ".json")
            runs[mode].append(res)
            probes[res["field_eval"]["mode"] if res.get("field_eval") else mode] = (stem + ".npz", res["object_size"])
    for mode in modes:
        res = best_run(runs[mode])
        print_table(res)
        results.append(res)
    if "grid" in probes and "direct" in probes:
        diff = compare_probes(probes["direct"][0], probes["grid"][0], probes["direct"][1])
        print(f"\n== grid vs direct, deformed Gaussians under the same handle transforms (drag, 15 steps; "
              f"largest displacement {diff['max_displacement_rel']:.3f} of the object size; handle transforms "
              f"differ by {diff['handle_transform_diff']:.1e}): |d mean| max {diff['mean_max_rel']:.2e} mean "
              f"{diff['mean_mean_rel']:.2e} of the object size; |d Sigma|_F / |Sigma|_F max {diff['cov_max_rel']:.2e} "
              f"p99 {diff['cov_p99_rel']:.2e} mean {diff['cov_mean_rel']:.2e}")
        results.append({"grid_vs_direct": diff})
    for npz, _ in probes.values():
        if os.path.exists(npz):
            os.remove(npz)
    if args.scheme_study:
        scheme_study(path, args.skinning, [float(v) for v in args.scheme_study.split(",")], args.seed)
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "capture": facts, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
