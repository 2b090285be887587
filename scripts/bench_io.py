"""Benchmark scene I/O against a plain plyfile baseline run in the same process.

Usage: python scripts/bench_io.py [N] [M]   (default N = 100000 Gaussians at SH degree 3, about 24.8 MB;
M = 1000000 Gaussians at SH degree 0 for the compressed-PLY write speed, 0 skips it)

Prints a table of seconds (best of 3) and the ratio to the baseline "plyfile read + stack 62 columns", the bytes
per Gaussian of the compressed PLY, then the compressed-PLY write speed for M Gaussians at SH degree 0 in
Gaussians/s against a plain write (+ fsync, as save_compressed_ply does) of the same bytes.
Writes its temporary files under .cache/bench_io/ (git-ignored).
"""

from __future__ import annotations

import os
import sys
import time

from physskin_gs._runtime import application_threads

application_threads()  # as the CLI does: thread settings before torch and numpy load

import numpy as np
import torch

from physskin_gs.io import load_scene, save_scene
from physskin_gs.io.compressed_ply import save_compressed_ply
from physskin_gs.io.splat import SPLAT_DTYPE
from physskin_gs.scene import GaussianScene


def best_of(fn, repeat=3):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def random_scene(n: int, k: int = 15) -> GaussianScene:
    """Random raw scene of n Gaussians with K = k higher SH coefficients per channel (seed 0)."""
    g = torch.Generator().manual_seed(0)
    return GaussianScene(
        means=torch.randn(n, 3, generator=g), quats=torch.randn(n, 4, generator=g),
        log_scales=torch.randn(n, 3, generator=g) - 4, opacity_logits=torch.randn(n, generator=g),
        sh_dc=torch.randn(n, 3, generator=g), sh_rest=torch.randn(n, k, 3, generator=g) * 0.1,
    )


def raw_write(path: str, buf: np.ndarray) -> None:
    """Plain write of ``buf`` plus fsync: the floor for writing the same bytes."""
    with open(path, "wb") as f:
        f.write(buf)
        f.flush()
        os.fsync(f.fileno())


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    m = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000
    out_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".cache", "bench_io")
    os.makedirs(out_dir, exist_ok=True)
    scene = random_scene(n)
    path = os.path.join(out_dir, f"bench_{n}.ply")
    save_scene(scene, path)
    comp_path = os.path.join(out_dir, "bench_out.compressed.ply")

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
        ("write compressed PLY SH3", best_of(lambda: save_compressed_ply(scene, comp_path))),
    ]
    print(f"N = {n} Gaussians, SH degree 3, file {os.path.getsize(path) / 1e6:.1f} MB")
    print(f"{'operation':36s} {'seconds':>9s} {'x baseline':>11s}")
    for name, t in rows:
        print(f"{name:36s} {t:9.4f} {t / base:11.2f}")
    comp0 = save_compressed_ply(scene, os.path.join(out_dir, "bench_out_sh0.compressed.ply"), sh=False)
    print(f"compressed PLY bytes/Gaussian: SH3 {os.path.getsize(comp_path) / n:.2f}, "
          f"SH0 {os.path.getsize(comp0) / n:.2f} (INRIA SH3 {os.path.getsize(path) / n:.1f})")

    if m > 0:
        del scene
        big = random_scene(m, k=0)
        big_path = os.path.join(out_dir, f"bench_{m}_sh0.compressed.ply")
        t_enc = best_of(lambda: save_compressed_ply(big, big_path))
        buf = np.fromfile(big_path, dtype=np.uint8)
        raw_path = os.path.join(out_dir, "bench_raw.bin")
        t_raw = best_of(lambda: raw_write(raw_path, buf))
        print(f"write compressed PLY, {m} Gaussians SH0 ({buf.nbytes / m:.2f} B each): {t_enc:.4f} s = "
              f"{m / t_enc / 1e6:.2f} M Gaussians/s; plain write + fsync of the same bytes {t_raw:.4f} s "
              f"(x{t_enc / t_raw:.1f})")


if __name__ == "__main__":
    main()
