#!/usr/bin/env python
"""Viewer throughput benchmark (issue 6 targets).

CPU target: >= 15 updates per second of simulation + deformation + client update for a 100k-Gaussian scene.
GPU target: >= 60 fps for 1M Gaussians at 1080p with gsplat (skipped without CUDA).

Measures, in one process:
  baseline   viser ``set_gaussians`` of N splats alone (the floor cost of one client update);
  serial     each stage of one update on its own, with the torch thread count its thread uses in the app: the
             simulation thread's ``anim.step`` (+ handle-transform snapshot), the display thread's deformation,
             wire packing (numpy reference and the torch SplatPacker) and viser buffer update; plus the previous
             design's sim-thread ``deformed_gaussians`` for comparison;
  live       the real ViewerApp (sim thread + display thread + one websocket client receiving) for a few seconds:
             display updates/s, simulation steps/s, and the CPU time of each thread per update (which, unlike
             the wall-clock rates, hardly depends on other load on the machine).
and prints a table with ratios against the baseline.

Usage:
  python scripts/bench_viewer.py                       # real pipeline on a 100k synthetic scene if available
  python scripts/bench_viewer.py --fake                # toy AnimatedScene (viewer cost alone)
  python scripts/bench_viewer.py --scene data/plant_capture.splat --solver both   # issue 6's real test case
  python scripts/bench_viewer.py --gpu-only            # the 1M / 1080p gsplat render benchmark
"""

from __future__ import annotations

import os

import argparse
import sys
import time
from pathlib import Path

import numpy as np
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as the CLI does (physskin_gs/cli/__init__.py), before torch
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


def thread_cpu(thread) -> float:
    """CPU seconds used so far by a running ``threading.Thread`` (nan where the platform cannot tell)."""
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
    except (AttributeError, OSError, TypeError):
        return float("nan")


def bench_cpu(args, anim=None, kind="", solver="fast") -> None:
    import viser

    from physskin_gs_viewer.app import ViewerApp, _set_fast_solver
    from physskin_gs_viewer.sim import SplitDeformSource, default_threads, to_numpy
    from physskin_gs_viewer.splats import (
        SplatPacker,
        display_scale,
        pack_splat_buffer,
        rgba_u32,
        robust_extent,
        sh_dc_to_rgb,
        to_wire,
    )
    from physskin_gs_viewer.testing import ViserWsClient

    if anim is None:
        anim, kind = make_anim(args)
    fast = solver == "fast"
    _set_fast_solver(anim, fast)
    n = anim.scene.num_gaussians
    rest = to_numpy(anim.scene.means)
    s = display_scale(robust_extent(rest))
    rgb = sh_dc_to_rgb(to_numpy(anim.scene.sh_dc))
    opac = to_numpy(anim.scene.opacities)[:, None]
    sim_threads, disp_threads = default_threads()

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

    split = SplitDeformSource(anim) if SplitDeformSource.supported(anim) and not args.no_split else None
    state = {}

    def step():  # what the simulation thread does per step
        anim.step(1)
        if split is not None:
            state["Z"] = split.snapshot()

    def deform_old():  # the previous design: the simulation thread deformed every Gaussian and copied them
        if hasattr(anim, "_cache_key"):
            anim._cache_key = None  # as after a step (the AnimatedScene caches the deformation per frame)
        gg = anim.deformed_gaussians()
        return to_numpy(gg.means.clone()), to_numpy(gg.covars.clone())

    rgba = rgba_u32(rgb, opac)
    packer = SplatPacker(n, rgba)
    mc = {}

    def deform_new():
        if split is None:
            gg = anim.deformed_gaussians()
            mc["m"], mc["c"] = gg.means, gg.covars
        else:
            split.run_moving(state["Z"], lambda m, c: mc.update(m=m.clone(), c=c.clone()))

    def pack_old():
        return pack_splat_buffer(to_numpy(mc["m"]), to_numpy(mc["c"]), s, rgba)

    def pack_new():
        return packer.pack(mc["m"], mc["c"], s)

    def send():
        jitter[0] += 1
        buf = packer.pack(mc["m"], mc["c"], s)
        buf[0, 0] ^= jitter[0] & 1  # a changed buffer
        handle.buffer = buf

    reps = args.reps
    torch.set_num_threads(disp_threads)
    t_base = timeit(baseline, reps)
    torch.set_num_threads(sim_threads)
    t_step = timeit(step, reps)
    t_old = timeit(deform_old, reps)
    torch.set_num_threads(disp_threads)
    t_def = timeit(deform_new, reps)
    t_pack_old = timeit(pack_old, reps)
    t_pack = timeit(pack_new, reps)
    t_send = timeit(send, reps) - t_pack
    if drag is not None:
        anim.end_drag(drag)
    client.close()
    server.stop()
    torch.set_num_threads(args.threads)

    # --- the live app: threads + websocket client, flat out
    anim.reset()
    app = ViewerApp(anim, None, port=0, realtime=args.realtime, play=False, max_live=args.max_live,
                    split=False if args.no_split else None)
    app.start()
    assert app.wait_ready(120), app.failed
    if "fast" in app.gui:
        app.gui["fast"].value = fast
    app.live.worker.submit("solver", lambda a: _set_fast_solver(a, fast))
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
    sim_t, disp_t = app.live.worker._thread, app._display_thread

    def sample():
        return (anim.frame, app.display_updates, ws.count("SceneNodeUpdateMessage"), time.perf_counter(),
                time.process_time(), thread_cpu(sim_t), thread_cpu(disp_t))

    a0 = sample()
    time.sleep(args.seconds)
    a1 = sample()
    ws.close()
    app.stop()
    f0, d0, m0, t0, p0, s0, q0 = a0
    f1, d1, m1, t1, p1, s1, q1 = a1
    wall = t1 - t0
    steps_ps = (f1 - f0) / wall
    disp_ps = (d1 - d0) / wall
    recv_ps = (m1 - m0) / wall
    nd, ns = max(d1 - d0, 1), max(f1 - f0, 1)
    cpu_per_update = (p1 - p0) / nd
    sim_cpu, disp_cpu = (s1 - s0) / ns, (q1 - q0) / nd
    other_cpu = ((p1 - p0) - (s1 - s0) - (q1 - q0)) / nd

    print()
    import os

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"# Viewer benchmark, CPU: {n:,} Gaussians, AnimatedScene = {kind}, solver = {solver}, "
          f"deformation on the {'display' if split is not None else 'simulation'} thread, torch threads "
          f"sim {sim_threads} / display {disp_threads}, {os.cpu_count()} cores, load average {load:.1f} at the end")
    print()
    print("| measurement | ms / update | updates / s | ratio to baseline |")
    print("|---|---|---|---|")
    rows = [
        ("baseline: viser set_gaussians alone", t_base),
        ("sim thread: anim.step(1) (+ handle-transform snapshot)", t_step),
        ("old: deformed_gaussians on the sim thread + copies", t_old),
        ("display thread: deformation of the moving Gaussians", t_def),
        ("old: numpy wire packing (pack_splat_buffer)", t_pack_old),
        ("display thread: torch wire packing (SplatPacker)", t_pack),
        ("display thread: viser buffer update (handle.buffer = ...)", t_send),
        ("serial total (step + deform + pack + update)", t_step + t_def + t_pack + t_send),
        ("display thread total (deform + pack + update)", t_def + t_pack + t_send),
    ]
    for label, t in rows:
        print(f"| {label} | {1e3 * t:.1f} | {1 / t:.1f} | {t / t_base:.2f} |")
    ms_disp = 1e3 / max(disp_ps, 1e-9)
    print(f"| live app: display updates (sim + deform + client update, threaded) | {ms_disp:.1f} | {disp_ps:.1f} | "
          f"{ms_disp / 1e3 / t_base:.2f} |")
    print(f"| live app: simulation steps | {1e3 / max(steps_ps, 1e-9):.1f} | {steps_ps:.1f} | |")
    print(f"| live app: splat updates received by the websocket client | | {recv_ps:.1f} | |")
    print(f"| live app: CPU of the sim thread per step | {1e3 * sim_cpu:.1f} | | |")
    print(f"| live app: CPU of the display thread per update | {1e3 * disp_cpu:.1f} | | |")
    print(f"| live app: CPU of other threads per update (websocket send, test client, GUI) | {1e3 * other_cpu:.1f} | | |")
    print(f"| live app: CPU time of this process per display update | {1e3 * cpu_per_update:.1f} | "
          f"{1 / cpu_per_update:.1f} (1 core) .. {2 / cpu_per_update:.1f} (2 cores), if unloaded | |")
    # Model for two cores of our own: one step per update, the display thread is serial, all threads share 2 cores.
    per_update = sim_cpu + disp_cpu + other_cpu
    est = min(2.0 / per_update, 1.0 / max(disp_cpu, 1e-9), 1.0 / max(sim_cpu, 1e-9))
    print(f"| model, 2 dedicated cores: min(2 / (sim + display + other), 1 / display, 1 / sim) CPU per update | "
          f"{1e3 / est:.1f} | {est:.1f} | |")
    ok = disp_ps >= 15.0
    print()
    print(f"target >= 15 updates/s: {'PASS' if ok else 'FAIL'} ({disp_ps:.1f} display updates/s, {steps_ps:.1f} "
          f"steps/s wall-clock, load average {load:.1f}; with 2 cores of its own, by the CPU-time model: {est:.1f})")


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
    ap.add_argument("--solver", default="fast", choices=["fast", "full", "both"],
                    help="fast: the viewer's default fast solver (Hessian factor reused); full: full Newton; "
                         "both: one after the other on the same prepared scene")
    ap.add_argument("--seconds", type=float, default=8.0, help="duration of the live-app measurement")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--max-live", type=int, default=200_000)
    ap.add_argument("--no-split", action="store_true",
                    help="deform on the simulation thread (the previous design), for comparison")
    ap.add_argument("--realtime", action="store_true",
                    help="pace the simulation to wall-clock time as the app does (default: flat out)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (the CPU target is for 2 cores)")
    ap.add_argument("--gpu-n", type=int, default=1_000_000)
    ap.add_argument("--gpu-only", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if not args.gpu_only:
        anim, kind = make_anim(args)
        for solver in (("fast", "full") if args.solver == "both" else (args.solver,)):
            anim.reset()
            bench_cpu(args, anim, kind, solver)
    bench_gpu(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
