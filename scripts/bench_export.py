#!/usr/bin/env python
"""Export benchmark (issue #13 item 4, issue #14): writing animation frames against a raw numpy write.

A synthetic scene of N Gaussians (default 1M, SH degree 3) of which M move (default 200k). For each export format
the run hands F frames (default 6) of moving rows to :class:`physskin_gs.io.sequence.SequenceExporter` and
measures, in the same process:

  baseline     ``ndarray.tofile`` of one frame's bytes (the INRIA PLY body) to F fresh files, per frame
  ply          seconds per frame on the writer thread, and how long the caller (the simulation) waited
  compressed   the same for compressed PLY frames (encoder included)
  usd          the same for one OpenUSD file (skipped without usd-core)

and prints seconds per frame, the ratio to the baseline, bytes per Gaussian per frame and the peak resident memory
growth (``ru_maxrss``). The disk is shared with whatever else runs, so the baseline is measured between the
formats and its median is used. Files go to ``.cache/bench_export/`` (git-ignored) and are deleted.

Usage: python scripts/bench_export.py [--n 1000000] [--moving 200000] [--sh 3] [--frames 6] [--formats ply,...]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import resource
import shutil
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from physskin_gs.io.inria_ply import inria_ply_body  # noqa: E402
from physskin_gs.io.sequence import SequenceExporter  # noqa: E402
from physskin_gs.scene import GaussianScene  # noqa: E402


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (``ru_maxrss``, KiB on Linux), in MiB; never decreases."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def make_scene(n: int, k: int, seed: int = 0) -> GaussianScene:
    """A random GaussianScene of ``n`` Gaussians with ``k`` SH rest coefficients per channel.

    Tensors (float32, CPU): means (n, 3) in [0, 4), quats (n, 4) unnormalised, log_scales (n, 3), opacity_logits
    (n,), sh_dc (n, 3), sh_rest (n, k, 3). Seeded by ``seed``.
    """
    g = torch.Generator().manual_seed(seed)
    return GaussianScene(means=torch.rand(n, 3, generator=g) * 4, quats=torch.randn(n, 4, generator=g),
                         log_scales=torch.randn(n, 3, generator=g) - 4, opacity_logits=torch.randn(n, generator=g),
                         sh_dc=torch.randn(n, 3, generator=g), sh_rest=0.1 * torch.randn(n, k, 3, generator=g))


def frame_rows(idx: torch.Tensor, frame: int, k: int) -> dict:
    """Random moving rows of frame ``frame`` for the (M,) row indices ``idx``, as ``SequenceExporter.add`` takes.

    Returns a dict of float32 tensors: ``means`` (M, 3), ``quats`` (M, 4) unit wxyz, ``log_scales`` (M, 3),
    ``sh_rest`` (M, k, 3). Seeded by ``frame``; only ``idx.numel()`` is used.
    """
    g = torch.Generator().manual_seed(frame)
    m = idx.numel()
    q = torch.randn(m, 4, generator=g)
    return {"means": torch.rand(m, 3, generator=g) + frame * 0.01, "quats": q / q.norm(dim=1, keepdim=True),
            "log_scales": torch.randn(m, 3, generator=g) - 4, "sh_rest": 0.1 * torch.randn(m, k, 3, generator=g)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--moving", type=int, default=200_000)
    ap.add_argument("--sh", type=int, default=3, choices=(0, 1, 2, 3))
    ap.add_argument("--frames", type=int, default=6)
    ap.add_argument("--formats", default="ply,compressed-ply,usd")
    args = ap.parse_args()
    k = (args.sh + 1) ** 2 - 1
    out = ROOT / ".cache" / "bench_export"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    scene = make_scene(args.n, k)
    idx = torch.arange(args.moving) * (args.n // args.moving)
    rows = [frame_rows(idx, f, k) for f in range(1, args.frames + 1)]  # prepared before any timing
    _, body = inria_ply_body(scene)
    base_mb = peak_rss_mb()
    baseline = []

    def measure_baseline(tag: str) -> None:
        """F frames' bytes written with numpy to F kept files (as an export keeps its frames), then removed."""
        paths = [out / f"raw_{tag}_{i}.bin" for i in range(args.frames)]
        t = time.perf_counter()
        for p in paths:
            body.tofile(p)
        baseline.append((time.perf_counter() - t) / args.frames)
        for p in paths:
            p.unlink()

    results = []
    for fmt in [f.strip() for f in args.formats.split(",") if f.strip()]:
        measure_baseline(fmt)
        if fmt == "usd" and importlib.util.find_spec("pxr") is None:
            print("usd: skipped (usd-core not installed)")
            continue
        folder = out / fmt
        rss0 = peak_rss_mb()
        t0 = time.perf_counter()
        ex = SequenceExporter(folder, fmt, scene, idx, fps=30.0)
        setup = time.perf_counter() - t0
        t1 = time.perf_counter()
        for f, r in enumerate(rows, 1):
            ex.add(f, r)
        handed = time.perf_counter() - t1
        s = ex.close()
        total = time.perf_counter() - t1
        results.append((fmt, setup, s["write_seconds"] / args.frames, s["wait_seconds"] / args.frames,
                        handed / args.frames, total / args.frames, s["bytes"] / args.frames / args.n,
                        peak_rss_mb() - rss0))
        shutil.rmtree(folder)
    measure_baseline("end")
    b = statistics.median(baseline)
    print(f"\n{args.n} Gaussians (SH degree {args.sh}, {body.nbytes / args.n:.0f} B each in a PLY), {args.moving} "
          f"moving, {args.frames} frames; baseline numpy tofile of one PLY body ({body.nbytes / 1e6:.0f} MB): "
          f"{b * 1e3:.0f} ms per frame (median of {len(baseline)} runs of {args.frames} frames; min {min(baseline) * 1e3:.0f}, "
          f"max {max(baseline) * 1e3:.0f})")
    print(f"{'format':<16}{'setup s':>9}{'write ms/frame':>16}{'x baseline':>12}{'caller ms/frame':>17}"
          f"{'waited ms':>11}{'wall ms/frame':>15}{'B/Gaussian':>12}{'RSS +MB':>9}")
    for fmt, setup, write, wait, handed, total, bpg, drss in results:
        print(f"{fmt:<16}{setup:>9.2f}{write * 1e3:>16.0f}{write / b:>12.2f}{handed * 1e3:>17.0f}{wait * 1e3:>11.0f}"
              f"{total * 1e3:>15.0f}{bpg:>12.1f}{drss:>9.0f}")
    print(f"peak RSS {peak_rss_mb():.0f} MB (scene + frame rows prepared: {base_mb:.0f} MB)")
    shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
