#!/usr/bin/env python
"""Viewer throughput benchmark (issue 6 targets).

CPU target: >= 15 updates per second of simulation + deformation + client update for a 100k-Gaussian scene.
GPU target: >= 60 fps for 1M Gaussians at 1080p with gsplat (skipped without CUDA).

Measures, in one process:
  baseline   viser ``set_gaussians`` of N splats alone (the floor cost of one client update);
  serial     one update done serially: ``anim.step`` + ``deformed_gaussians`` + wire packing + ``set_gaussians``;
  live       the real ViewerApp (sim thread + display thread + one websocket client receiving) for a few seconds:
             display updates/s and simulation steps/s.
and prints a table with ratios against the baseline.

Usage:
  python scripts/bench_viewer.py                       # real pipeline on a 100k synthetic scene if available
  python scripts/bench_viewer.py --fake                # toy AnimatedScene (viewer cost alone)
  python scripts/bench_viewer.py --scene ../shared/data/splats/plant_capture.splat
  python scripts/bench_viewer.py --gpu-only            # the 1M / 1080p gsplat render benchmark
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]


def make_anim(args):
    from physskin_gs_viewer.testing import FakeAnimatedScene, make_blob_scene

    if args.scene:
        from physskin_gs_viewer.app import validate_scene_path

        scene = validate_scene_path(args.scene)
    else:
        scene = make_blob_scene(args.n, log_scale=-5.0)
    if args.fake:
        return FakeAnimatedScene(scene, num_handles=8), "fake"
    try:
        from physskin_gs.pipeline import AnimationConfig, prepare_animation  # type: ignore[attr-defined]
    except ImportError:
        print("physskin_gs.pipeline not available: using the fake AnimatedScene", file=sys.stderr)
        return FakeAnimatedScene(scene, num_handles=8), "fake (no pipeline)"
    cfg = AnimationConfig(skinning=args.skinning)
    t0 = time.perf_counter()
    anim = prepare_animation(scene, cfg, progress=lambda m, f: None)
    print(f"prepare_animation: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return anim, f"pipeline (skinning {getattr(anim, 'skinning_source', args.skinning)})"


def timeit(fn, reps: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps


def bench_cpu(args) -> None:
    import viser

    from physskin_gs_viewer.app import ViewerApp
    from physskin_gs_viewer.sim import to_numpy
    from physskin_gs_viewer.splats import display_scale, pack_splat_buffer, rgba_u32, robust_extent, sh_dc_to_rgb, to_wire
    from physskin_gs_viewer.testing import ViserWsClient

    anim, kind = make_anim(args)
    n = anim.scene.num_gaussians
    rest = to_numpy(anim.scene.means)
    s = display_scale(robust_extent(rest))
    rgb = sh_dc_to_rgb(to_numpy(anim.scene.sh_dc))
    opac = to_numpy(anim.scene.opacities)[:, None]

    # --- serial stages, against a bare viser server with one connected client
    server = viser.ViserServer(host="127.0.0.1", port=0, verbose=False)
    g = anim.deformed_gaussians()
    c0, v0 = to_wire(to_numpy(g.means), to_numpy(g.covars), s)
    handle = server.scene.add_gaussian_splats("/b", c0, v0, rgb, opac, scale=1 / s)
    client = ViserWsClient(server.get_port())
    client.send_camera((2.0, 2.0, 1.0), (0.0, 0.0, 0.0))
    time.sleep(0.5)
    jitter = [0]

    def baseline():
        jitter[0] += 1
        c = c0.copy()
        c[0, 0] += 1e-3 * jitter[0]  # a changed buffer (an unchanged one sends nothing)
        handle.set_gaussians(c, v0, rgb, opac)

    drag = anim.start_handle_drag(0) if getattr(anim, "num_handles", 0) else None
    hp = anim.handle_positions()
    if drag is not None:
        anim.update_drag(drag, np.asarray(to_numpy(hp))[0] + 0.2 * robust_extent(rest))

    def step():
        anim.step(1)

    def deform():
        gg = anim.deformed_gaussians()
        return to_numpy(gg.means), to_numpy(gg.covars)

    state = {}

    rgba = rgba_u32(rgb, opac)

    def wire():  # what the display thread does per frame
        m, cv = state.get("mc") or deform()
        handle.buffer = pack_splat_buffer(m, cv, s, rgba)

    reps = args.reps
    t_base = timeit(baseline, reps)
    t_step = timeit(step, reps)
    t_def = timeit(deform, reps)
    state["mc"] = deform()
    t_wire = timeit(wire, reps)
    t_serial = t_step + t_def + t_wire
    if drag is not None:
        anim.end_drag(drag)
    client.close()
    server.stop()

    # --- the live app: threads + websocket client, flat out
    anim.reset()
    app = ViewerApp(anim, None, port=0, realtime=False, play=False, max_live=args.max_live)
    app.start()
    assert app.wait_ready(120), app.failed
    ws = ViserWsClient(app.port)
    ws.send_camera((2.0, 2.0, 1.0), (0.0, 0.0, 0.0))
    time.sleep(0.5)
    name = "/handles/h0"
    if app.live.handle_gizmos:
        p0 = np.asarray(app.live.handle_gizmos[0].position)
        ws.drag_start(name)
        ws.drag_to(name, p0 + 0.2 * app.live.extent)
    app.live.worker.set_playing(True)
    time.sleep(1.0)
    f0, d0, m0, t0 = anim.frame, app.display_updates, ws.count("SceneNodeUpdateMessage"), time.perf_counter()
    c0 = time.process_time()
    time.sleep(args.seconds)
    f1, d1, m1, t1 = anim.frame, app.display_updates, ws.count("SceneNodeUpdateMessage"), time.perf_counter()
    cpu_per_update = (time.process_time() - c0) / max(d1 - d0, 1)  # CPU seconds of this process per update
    ws.close()
    app.stop()
    steps_ps = (f1 - f0) / (t1 - t0)
    disp_ps = (d1 - d0) / (t1 - t0)
    recv_ps = (m1 - m0) / (t1 - t0)

    print()
    import os

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"# Viewer benchmark, CPU: {n:,} Gaussians, AnimatedScene = {kind}, torch threads = "
          f"{torch.get_num_threads()}, {os.cpu_count()} cores, load average {load:.1f} at the end")
    print()
    print("| measurement | ms / update | updates / s | ratio to baseline |")
    print("|---|---|---|---|")
    rows = [
        ("baseline: viser set_gaussians alone", t_base),
        ("anim.step(1)", t_step),
        ("deformed_gaussians + to numpy", t_def),
        ("wire packing + splat buffer update (display thread)", t_wire),
        ("serial total (step + deform + client update)", t_serial),
    ]
    for label, t in rows:
        print(f"| {label} | {1e3 * t:.1f} | {1 / t:.1f} | {t / t_base:.2f} |")
    print(f"| live app: display updates (sim + deform + client update, threaded) | {1e3 / max(disp_ps, 1e-9):.1f} | {disp_ps:.1f} | {(1 / max(disp_ps, 1e-9)) / t_base:.2f} |")
    print(f"| live app: simulation steps | {1e3 / max(steps_ps, 1e-9):.1f} | {steps_ps:.1f} | |")
    print(f"| live app: splat updates received by the websocket client | | {recv_ps:.1f} | |")
    print(f"| live app: CPU time of this process per display update | {1e3 * cpu_per_update:.1f} | "
          f"{1 / cpu_per_update:.1f} (1 core) .. {2 / cpu_per_update:.1f} (2 cores), if unloaded | |")
    ok = disp_ps >= 15.0
    print()
    print(f"target >= 15 updates/s: {'PASS' if ok else 'FAIL'} ({disp_ps:.1f} display updates/s, {steps_ps:.1f} steps/s"
          f" wall-clock; CPU-time estimate without other load: {1 / cpu_per_update:.1f}..{2 / cpu_per_update:.1f})")


def bench_gpu(args) -> None:
    if not torch.cuda.is_available():
        print("\n# GPU benchmark: skipped (no CUDA)")
        return
    from physskin_gs.render import rasterize

    from physskin_gs_viewer.camera import CameraState, look_at_wxyz, viewmat_and_K

    n, W, H = args.gpu_n, 1920, 1080
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(0)
    means = torch.randn(n, 3, device=dev, generator=gen) * 0.5
    L = torch.randn(n, 3, 3, device=dev, generator=gen) * 0.004
    covars = L @ L.transpose(1, 2) + 1e-6 * torch.eye(3, device=dev)
    opac = torch.rand(n, device=dev, generator=gen)
    colors = torch.rand(n, 3, device=dev, generator=gen)
    pos = np.array([0.0, -3.0, 0.5])
    cam = CameraState(tuple(look_at_wxyz(pos, (0, 0, 0), (0, 0, 1))), tuple(pos), 0.8, W / H)
    vm, K = viewmat_and_K(cam, W, H)
    vm, K = torch.as_tensor(vm, device=dev), torch.as_tensor(K, device=dev)

    def render():
        out = rasterize(means, covars, opac, colors, vm, K, W, H, backend="gsplat")
        return out.rgb

    t0 = time.perf_counter()
    render()
    torch.cuda.synchronize()
    print(f"gsplat first call (JIT build / load): {time.perf_counter() - t0:.1f} s", file=sys.stderr)

    def timed():
        render()
        torch.cuda.synchronize()

    t = timeit(timed, 50, warmup=5)

    def full():  # render + to uint8 on host + JPEG encode (what the viewer sends)
        import imageio.v3 as iio

        img = (render().clamp(0, 1) * 255).to(torch.uint8).cpu().numpy()
        iio.imwrite("<bytes>", img, extension=".jpeg", quality=80)

    tf = timeit(full, 20, warmup=2)
    print()
    print(f"# GPU: {n:,} Gaussians at {W}x{H}, gsplat")
    print("| measurement | ms / frame | fps |")
    print("|---|---|---|")
    print(f"| gsplat render | {1e3 * t:.2f} | {1 / t:.1f} |")
    print(f"| render + download + JPEG encode | {1e3 * tf:.2f} | {1 / tf:.1f} |")
    print(f"target >= 60 fps render: {'PASS' if 1 / t >= 60 else 'FAIL'}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000, help="Gaussians in the synthetic scene")
    ap.add_argument("--scene", default=None, help="use this scene file instead of the synthetic one")
    ap.add_argument("--fake", action="store_true", help="use the toy AnimatedScene (viewer cost alone)")
    ap.add_argument("--skinning", default="pretrained", choices=["pretrained", "fit"])
    ap.add_argument("--seconds", type=float, default=8.0, help="duration of the live-app measurement")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--max-live", type=int, default=200_000)
    ap.add_argument("--threads", type=int, default=2, help="torch threads (the CPU target is for 2 cores)")
    ap.add_argument("--gpu-n", type=int, default=1_000_000)
    ap.add_argument("--gpu-only", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if not args.gpu_only:
        bench_cpu(args)
    bench_gpu(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
