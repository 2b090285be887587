#!/usr/bin/env python
"""Benchmark the rasterisers: torch fast path (tiles) vs the straightforward pair reference, and gsplat on CUDA.

Scenes: random Gaussians N(0, 0.5^2) around z = 3 seen by an identity camera with focal = width, scales
uniform in [0, smax] (rendering.md 2), SH degree 3, opacities uniform in [0, 1]. Each configuration is timed
end to end through :func:`physskin_gs.render.rasterize` (projection + SH + compositing), best of --repeat
runs; the reference path uses the same projection and SH, then :func:`rasterize_pairs_reference`.
Peak memory is the growth of the process's peak RSS (ru_maxrss) while that path ran.

Usage:
    python scripts/bench_render.py                     # 100k and 300k at 512^2 and 1080p
    python scripts/bench_render.py --quick             # 100k at 512^2 only
    python scripts/bench_render.py --threads 2 --no-reference
"""

from __future__ import annotations

import argparse
import gc
import resource
import sys
import time

from physskin_gs._runtime import application_threads

application_threads()  # as the CLI does: thread settings before torch and numpy load

import torch

from physskin_gs.render import project_gaussians, rasterize, rasterize_pairs_reference
from physskin_gs.render.rasterizer import _finish, gaussian_colors
from physskin_gs.scene import quat_to_rotmat


def make_scene(n: int, smax: float, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    means = torch.randn(n, 3, generator=g) * 0.5 + torch.tensor([0.0, 0.0, 3.0])
    R = quat_to_rotmat(torch.randn(n, 4, generator=g))
    L = R * (torch.rand(n, 3, generator=g) * smax)[:, None, :]
    cov = L @ L.transpose(1, 2)
    op = torch.rand(n, generator=g)
    sh = torch.randn(n, 16, 3, generator=g) * 0.3
    return means, cov, op, sh


def camera(width: int, height: int):
    K = torch.tensor([[float(width), 0.0, width / 2], [0.0, float(width), height / 2], [0.0, 0.0, 1.0]])
    return torch.eye(4), K


def reference_render(means, cov, op, sh, vm, K, W, H):
    feats = gaussian_colors(means, sh, vm)
    p = project_gaussians(means, cov, vm, K, W, H)
    img = rasterize_pairs_reference(p.means2d, p.conics, op, p.radii, p.depths,
                                    torch.cat([feats, p.depths[:, None]], 1), W, H)
    return _finish(img, 3, None)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def timeit(fn, repeat: int):
    gc.collect()
    rss0 = peak_rss_mb()
    best = float("inf")
    out = None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, peak_rss_mb() - rss0, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="only 100k Gaussians at 512x512")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    ap.add_argument("--smax", type=float, default=0.01, help="largest per-axis scale (default 0.01: typical trained sizes)")
    ap.add_argument("--no-reference", action="store_true", help="skip the slow pair reference")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    sizes = [(100_000, 512, 512)] if args.quick else [
        (100_000, 512, 512), (300_000, 512, 512), (100_000, 1920, 1080), (300_000, 1920, 1080)
    ]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, smax {args.smax}, best of {args.repeat}")
    hdr = f"{'N':>8} {'image':>10} | {'tiles s':>8} {'MB':>6} | {'pairs s':>8} {'MB':>6} | {'speed-up':>8} {'max|d|':>8}"
    print(hdr)
    print("-" * len(hdr))
    rows = []
    for n, W, H in sizes:
        means, cov, op, sh = make_scene(n, args.smax)
        vm, K = camera(W, H)
        t_fast, mb_fast, out_fast = timeit(lambda: rasterize(means, cov, op, sh, vm, K, W, H, backend="torch"), args.repeat)
        if args.no_reference:
            print(f"{n:>8} {W:>4}x{H:<5} | {t_fast:>8.3f} {mb_fast:>6.0f} | {'-':>8} {'-':>6} | {'-':>8} {'-':>8}")
            continue
        t_ref, mb_ref, out_ref = timeit(lambda: reference_render(means, cov, op, sh, vm, K, W, H), 1)
        diff = float((out_fast.rgb - out_ref.rgb).abs().max())
        rows.append((n, W, H, t_fast, t_ref))
        print(f"{n:>8} {W:>4}x{H:<5} | {t_fast:>8.3f} {mb_fast:>6.0f} | {t_ref:>8.3f} {mb_ref:>6.0f} | "
              f"{t_ref / t_fast:>7.2f}x {diff:>8.1e}")
        sys.stdout.flush()
    if torch.cuda.is_available():
        print("\ngsplat (CUDA) vs torch backend")
        print(f"{'N':>8} {'image':>10} | {'gsplat s':>9} | {'max|d| rgb':>10} {'max|d| alpha':>12}")
        dev = torch.device("cuda")
        for n, W, H in sizes:
            means, cov, op, sh = make_scene(n, args.smax)
            vm, K = camera(W, H)
            ref = rasterize(means, cov, op, sh, vm, K, W, H, backend="torch")
            g = [t.to(dev) for t in (means, cov, op, sh, vm, K)]
            rasterize(*g, W, H, backend="gsplat")  # warm-up (JIT build on first use)
            torch.cuda.synchronize()
            best = float("inf")
            for _ in range(5):
                t = time.perf_counter()
                out = rasterize(*g, W, H, backend="gsplat")
                torch.cuda.synchronize()
                best = min(best, time.perf_counter() - t)
            print(f"{n:>8} {W:>4}x{H:<5} | {best:>9.4f} | {float((out.rgb.cpu() - ref.rgb).abs().max()):>10.2e} "
                  f"{float((out.alpha.cpu() - ref.alpha).abs().max()):>12.2e}")
    else:
        print("\ngsplat comparison skipped: no CUDA device")
    return 0


if __name__ == "__main__":
    sys.exit(main())
