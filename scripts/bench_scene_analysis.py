"""Timing of physskin_gs.geometry.scene_analysis.analyze_scene on a synthetic capture of N Gaussians.

The scene: a box-shaped object (surface samples; one side face denser than the floor) on a wide thin floor
disc, 1 % random floaters in a box three times the scene's size, 10 % near-transparent rows and a few NaN
rows, all rotated by a fixed random rotation; the object and the floor of two colours (with noise), random quats.
Prints per-stage times of ``analyze_scene`` (given the colours and quats, as ``animate`` gives them) next to the
time to generate the arrays and to copy them once (the O(N) floor any pass over the data pays), and the total
without the colours and quats (no base claim, :func:`physskin_gs.geometry.scene_analysis._claim_base`) as a
ratio, in this run.

Usage: OPENBLAS_NUM_THREADS=1 python scripts/bench_scene_analysis.py [--n 1000000] [--repeat 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from scipy.spatial.transform import Rotation

from physskin_gs.geometry.scene_analysis import analyze_scene


def synthetic_capture(n: int, seed: int = 0):
    """(means (n, 3) float32, opacities (n,) float32, log_scales (n, 3) float32, object rows (n,) bool,
    true up (3,), colors (n, 3) float32 in [0, 1], quats (n, 4) float32 wxyz) of the synthetic capture described in
    the module docstring."""
    rng = np.random.default_rng(seed)
    n_float = n // 100
    n_nan = 10
    n_floor = int(0.2 * n)
    n_obj = n - n_float - n_nan - n_floor
    # floor: disc of radius 2, 0.02 thick, z in [0, 0.02]
    r = 2.0 * np.sqrt(rng.random(n_floor))
    phi = 2 * np.pi * rng.random(n_floor)
    floor = np.stack([r * np.cos(phi), r * np.sin(phi), 0.02 * rng.random(n_floor)], axis=1)  # [Nf, 3]
    # object: box [-0.5, 0.5] x [-0.4, 0.4] x [0.05, 2.05] surface without the bottom; face x=+0.5 gets 30 %
    face = rng.integers(0, 5, n_obj)
    face[: int(0.3 * n_obj)] = 0
    u, v = rng.random(n_obj), rng.random(n_obj)
    obj = np.empty((n_obj, 3))
    ext = np.array([1.0, 0.8, 2.0])
    base = np.array([-0.5, -0.4, 0.05])
    faces = [(1, 2, 0, 1.0), (1, 2, 0, 0.0), (0, 2, 1, 1.0), (0, 2, 1, 0.0), (0, 1, 2, 1.0)]  # in-plane a, b; normal c
    for f, (a, b, c, side) in enumerate(faces):
        sel = face == f
        obj[sel, a] = base[a] + u[sel] * ext[a]
        obj[sel, b] = base[b] + v[sel] * ext[b]
        obj[sel, c] = base[c] + side * ext[c]
    obj += 0.003 * rng.standard_normal(obj.shape)
    flo = rng.uniform(-3.0, 3.0, (n_float, 3)) + np.array([0.0, 0.0, 1.0])
    nan = np.full((n_nan, 3), np.nan)
    pts = np.concatenate([floor, obj, flo, nan])
    is_obj = np.zeros(n, dtype=bool)
    is_obj[n_floor : n_floor + n_obj] = True
    rot = Rotation.random(random_state=seed).as_matrix()
    means = (pts @ rot.T + np.array([1.0, -2.0, 0.5])).astype(np.float32)
    opac = rng.uniform(0.1, 1.0, n).astype(np.float32)
    opac[rng.random(n) < 0.1] = 0.01
    log_scales = np.full((n, 3), -4.0, dtype=np.float32)
    colors = np.where(is_obj[:, None], np.array([0.7, 0.3, 0.2]), np.array([0.5, 0.5, 0.5]))
    colors = np.clip(colors + 0.05 * rng.standard_normal((n, 3)), 0.0, 1.0).astype(np.float32)
    quats = rng.standard_normal((n, 4)).astype(np.float32)
    quats /= np.linalg.norm(quats, axis=1, keepdims=True)
    return means, opac, log_scales, is_obj, rot @ np.array([0.0, 0.0, 1.0]), colors, quats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2, help="torch threads (numpy/BLAS: set OPENBLAS_NUM_THREADS)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    t = time.perf_counter()
    means, opac, log_scales, is_obj, up_true, colors, quats = synthetic_capture(args.n)
    t_gen = time.perf_counter() - t
    t = time.perf_counter()
    copies = (means.copy(), opac.copy(), log_scales.copy())
    t_copy = time.perf_counter() - t
    del copies

    runs, plain = [], []
    for _ in range(args.repeat):  # (alternating, so both see the same machine)
        plain.append(analyze_scene(means, opac, log_scales).timings["total"])
        a = analyze_scene(means, opac, log_scales, quats=quats, colors=colors)
        runs.append(a.timings)
    stages = list(runs[0].keys())
    print(f"N = {args.n:,} Gaussians, {args.repeat} runs (min / median seconds)")
    print(f"{'stage':<12}{'min':>9}{'median':>9}")
    print(f"{'generate':<12}{t_gen:9.3f}{'':>9}")
    print(f"{'copy':<12}{t_copy:9.3f}{'':>9}")
    for s in stages:
        v = np.array([r[s] for r in runs])
        print(f"{s:<12}{v.min():9.3f}{np.median(v):9.3f}")
    err = np.degrees(np.arccos(np.clip(a.up @ up_true, -1.0, 1.0)))
    opaque = ~(a.invalid | a.transparent)
    agree = (a.object == is_obj)[opaque].mean()
    looks = np.array([r["total"] for r in runs])
    print(f"{'no looks':<12}{min(plain):9.3f}{np.median(plain):9.3f}   (total with the looks / without: "
          f"{looks.min() / min(plain):.2f}x min, {np.median(looks) / np.median(plain):.2f}x median)")
    print(a.summary())
    print(f"up error {err:.2f} deg; object mask agrees with the truth on {agree:.2%} of the opaque rows")


if __name__ == "__main__":
    main()
