"""Benchmark scene I/O against a plain plyfile baseline run in the same process.

Usage: python scripts/bench_io.py [N]   (default N = 100000 Gaussians at SH degree 3, about 24.8 MB)

Prints a table of seconds (best of 3) and the ratio to the baseline "plyfile read + stack 62 columns".
Writes its temporary files under .cache/bench_io/ (git-ignored).
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as the CLI does (physskin_gs/cli/__init__.py), before torch
import torch

from physskin_gs.io import load_scene, save_scene
from physskin_gs.io.splat import SPLAT_DTYPE
from physskin_gs.scene import GaussianScene


def best_of(fn, repeat=3):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    out_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".cache", "bench_io")
    os.makedirs(out_dir, exist_ok=True)
    g = torch.Generator().manual_seed(0)
    scene = GaussianScene(
        means=torch.randn(n, 3, generator=g), quats=torch.randn(n, 4, generator=g),
        log_scales=torch.randn(n, 3, generator=g) - 4, opacity_logits=torch.randn(n, generator=g),
        sh_dc=torch.randn(n, 3, generator=g), sh_rest=torch.randn(n, 15, 3, generator=g) * 0.1,
    )
    path = os.path.join(out_dir, f"bench_{n}.ply")
    save_scene(scene, path)

    def baseline():
        from plyfile import PlyData

        v = PlyData.read(path)["vertex"].data
        return np.stack([v[name] for name in v.dtype.names], axis=1)

    splat_path = os.path.join(out_dir, f"bench_{n}.splat")
    rec = np.zeros(n, dtype=SPLAT_DTYPE)
    rec["pos"] = scene.means.numpy()
    rec["scale"] = scene.scales.numpy()
    rec["rgba"] = 128
    rec["rot"] = 128
    rec.tofile(splat_path)

    base = best_of(baseline)
    rows = [
        ("plyfile read + stack (baseline)", base),
        ("load_scene INRIA SH3", best_of(lambda: load_scene(path))),
        ("save_scene INRIA SH3", best_of(lambda: save_scene(scene, os.path.join(out_dir, "bench_out.ply")))),
        ("load_scene .splat", best_of(lambda: load_scene(splat_path))),
    ]
    print(f"N = {n} Gaussians, SH degree 3, file {os.path.getsize(path) / 1e6:.1f} MB")
    print(f"{'operation':36s} {'seconds':>9s} {'x baseline':>11s}")
    for name, t in rows:
        print(f"{name:36s} {t:9.4f} {t / base:11.2f}")


if __name__ == "__main__":
    main()
