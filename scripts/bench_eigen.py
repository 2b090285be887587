"""Build and query speed of the skinning-eigenmode field (``physskin_gs.model.eigen``) for a few node counts.

Usage: .venv/bin/python scripts/bench_eigen.py [--handles 16] [--nodes 256,512,1024,2048] [--queries 100000]
                                              [--repeat 2] [--splat PATH]

Shapes: a procedural shape of 16,384 volume points (4,096 surface + 12,288 interior) and, when the file exists,
the normalised Gaussian centres of ``spot_mesh2splat_10k.splat`` used as the point set. For each node count it
prints the best-of-``repeat`` wall time of ``build_eigen_field`` (cell nodes, clusters kept whole: the default)
against the earlier build (farthest-point nodes, ``cluster_tol=0``) measured in the same run, the handles the
field kept, one W + dW/dX query of ``--queries`` points near the shape (the volume points resampled with 0.3 x
point-spacing jitter) as a ratio to the build, the first and last eigenvalue and the share of near-object
queries where the RKPM correction is fully on (gamma = 1).
Targets: 16 handles from 16k points built in <= 2 s on 2 cores; 100k-point queries well under 2 s.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from scipy.spatial import cKDTree

from physskin_gs.geometry.normalize import normalize_points
from physskin_gs.geometry.shapes import procedural_shape
from physskin_gs.model.eigen import build_eigen_field

DEFAULT_SPLAT = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "splats" / "spot_mesh2splat_10k.splat"


def best_time(fn, repeat):
    """(best wall seconds over ``repeat`` calls, last result)."""
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def near_queries(points: np.ndarray, n: int, seed: int = 0) -> np.ndarray:
    """n points near the shape: resampled volume points plus Gaussian jitter of 0.3 x the mean spacing."""
    rng = np.random.default_rng(seed)
    spacing = float(cKDTree(points).query(points, k=2)[0][:, 1].mean())
    return points[rng.integers(0, len(points), n)] + rng.normal(0.0, 0.3 * spacing, (n, 3))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--handles", type=int, default=16)
    ap.add_argument("--nodes", default="256,512,1024,2048")
    ap.add_argument("--queries", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--splat", default=str(DEFAULT_SPLAT))
    a = ap.parse_args()

    shapes = []
    s = procedural_shape(3, n_surface=4096, n_interior=12288)
    shapes.append((s.name, np.concatenate([s.surface, s.interior]).astype(np.float64)))
    if Path(a.splat).is_file():
        from physskin_gs.io import load_scene

        means, _ = normalize_points(load_scene(a.splat).means.double().numpy())
        shapes.append((Path(a.splat).stem, np.asarray(means, dtype=np.float64)))
    else:
        print(f"(no splat at {a.splat}; procedural shape only)")

    print(f"{'shape':<24} {'V':>6} {'nodes':>5} {'fps build s':>11} {'build s':>8} {'build/fps':>9} {'H':>3} "
          f"{'query s':>8} {'query/build':>11} {'gamma=1':>7} {'lam_1':>9} {'lam_m':>9}")
    for name, pts in shapes:
        X = near_queries(pts, a.queries)
        for n in [int(v) for v in a.nodes.split(",")]:
            # baseline: the earlier build (farthest-point nodes, every requested handle kept), same run
            t_fps, _ = best_time(lambda: build_eigen_field(pts, a.handles, seed=0, num_nodes=n, nodes="fps",
                                                           cluster_tol=0.0), a.repeat)
            t_build, field = best_time(lambda: build_eigen_field(pts, a.handles, seed=0, num_nodes=n), a.repeat)
            t_query, _ = best_time(lambda: field.evaluate(X), a.repeat)
            gamma = np.concatenate([field.shape_functions(X[i:i + 16384])[3] for i in range(0, len(X), 16384)])
            print(f"{name:<24} {len(pts):>6} {field.nodes.shape[0]:>5} {t_fps:>11.3f} {t_build:>8.3f} "
                  f"{t_build / t_fps:>9.2f} {field.num_handles:>3d} {t_query:>8.3f} {t_query / t_build:>11.2f} "
                  f"{np.mean(gamma == 1.0):>7.3f} {field.eigenvalues[0]:>9.3g} {field.eigenvalues[-1]:>9.3g}")

if __name__ == "__main__":
    main()
