#!/usr/bin/env python
"""Viewer throughput benchmark (issue 6 and issue 13 targets).

CPU target: >= 15 updates per second of simulation + deformation + client update for a 100k-Gaussian scene,
and (issue 13, "viewer at 1M+") for a 1M-Gaussian scene of which 200k move (``--million``).
GPU target: >= 60 fps for 1M Gaussians at 1080p with gsplat (skipped without CUDA).

Measures, in one process:
  baseline   viser ``set_gaussians`` of N splats alone (the floor cost of one client update);
  serial     each stage of one update on its own, with the torch thread count its thread uses in the app: the
             simulation thread's ``anim.step`` (+ handle-transform snapshot), the display thread's deformation,
             wire packing (numpy reference and the torch SplatPacker) and viser buffer update; plus the previous
             design's sim-thread ``deformed_gaussians`` for comparison;
  colour     for scenes with SH bands: the view-dependent colour of the moving rows (deformer pass with F + the C
             kernel) and of the static rows, and the torch reference of the kernel;
  live       the real ViewerApp (sim thread + display thread + one websocket client receiving, its camera orbiting
             so that the static rows are recoloured as a user looking around makes them) for a few seconds:
             display updates/s, simulation steps/s, and the CPU time of each thread per update (which, unlike
             the wall-clock rates, hardly depends on other load on the machine).
and prints a table with ratios against the baseline. With ``--million`` it first builds the 1M scene (800k static
floor + a 200k block that moves, ``AnimationConfig(select=<the block's box>, up="z")``), writes it to a PLY and
opens it in the app the way the CLI does, measuring
  first frame  seconds until the page has the rest scene (``/scene/preview``), and until the live nodes are in
               place (``/scene/static`` + ``/scene/moving``, physics running), as a websocket client sees them;
  memory       the viewer process's resident memory per Gaussian, static and moving, from three fresh processes
               (800k/200k, 200k/200k, 800k/50k static/moving; a separate process plays the browser);
then runs the measurements above on that scene.

Usage:
  python scripts/bench_viewer.py                       # real pipeline on a 100k synthetic scene if available
  python scripts/bench_viewer.py --fake                # toy AnimatedScene (viewer cost alone)
  python scripts/bench_viewer.py --scene data/plant_capture.splat --solver both   # issue 6's real test case
  python scripts/bench_viewer.py --gpu-only            # the 1M / 1080p gsplat render benchmark
  python scripts/bench_viewer.py --million              # issue 13: 1M Gaussians, 200k moving (SH degree 3,
                                                       # view-dependent colour on, the camera orbiting: issue 25)
  python scripts/bench_viewer.py --million --no-view-colour --no-memory   # the same with the degree-0 colour
  python scripts/bench_viewer.py --million --bodies 4 --no-memory   # issue 24: the 200k moving as four bodies
  python scripts/bench_viewer.py --memory-probe 800000 200000   # one memory probe (prints JSON; used by --million)
"""

from __future__ import annotations

import os

import argparse
import sys
import time
from pathlib import Path
from typing import Tuple

from physskin_gs._runtime import application_threads

application_threads()  # as the CLI does: thread settings before torch and numpy load

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
    cfg = AnimationConfig(skinning=args.skinning or "pretrained")
    t0 = time.perf_counter()
    anim = prepare_animation(scene, cfg, progress=lambda m, f: None)
    print(f"prepare_animation: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return anim, f"pipeline (skinning {getattr(anim, 'skinning_source', args.skinning)})"


MILLION_BOX = "-0.3,-0.3,0.04,0.3,0.3,1.1"  # the block of make_million_scene (the select box)


def make_million_scene(n_static: int = 800_000, n_moving: int = 200_000, seed: int = 0, sh_degree: int = 0,
                       blocks: int = 1):
    """A synthetic capture: a 4 x 4 x 0.02 floor slab of ``n_static`` grey Gaussians (z from 0 to 0.02) and an
    orange 0.5 x 0.5 x 1 block of ``n_moving`` Gaussians standing on it (z from 0.05 to 1.05), z up, SH of
    ``sh_degree`` (bands above 0 random, 0.1 per coefficient, as a trained capture's view-dependent sheen).
    ``blocks`` > 1: that many 0.4 x 0.4 x 0.8 blocks of ``n_moving / blocks`` Gaussians each instead, 1.2 m apart
    on a grid (several bodies, issue 24).

    :data:`MILLION_BOX` selects the block: with ``AnimationConfig(select=MILLION_BOX, up="z")`` the block moves
    and the floor is static. Returns a GaussianScene of ``n_static + n_moving`` rows (floor first).
    """
    from physskin_gs.scene import C0, GaussianScene

    g = torch.Generator().manual_seed(seed)
    floor = torch.rand(n_static, 3, generator=g) * torch.tensor([4.0, 4.0, 0.02]) - torch.tensor([2.0, 2.0, 0.0])
    if blocks <= 1:
        block = (torch.rand(n_moving, 3, generator=g) * torch.tensor([0.5, 0.5, 1.0])
                 + torch.tensor([-0.25, -0.25, 0.05]))
    else:
        side = int(np.ceil(np.sqrt(blocks)))
        parts = []
        for k, cnt in enumerate(np.diff(np.linspace(0, n_moving, blocks + 1).astype(int))):
            cx, cy = 1.2 * (k % side - (side - 1) / 2), 1.2 * (k // side - (side - 1) / 2)
            parts.append(torch.rand(int(cnt), 3, generator=g) * torch.tensor([0.4, 0.4, 0.8])
                         + torch.tensor([cx - 0.2, cy - 0.2, 0.05]))
        block = torch.cat(parts)
    n = n_static + n_moving
    rgb = torch.empty(n, 3)
    rgb[:n_static] = 0.45 + 0.15 * torch.rand(n_static, 1, generator=g)
    rgb[n_static:] = torch.tensor([0.9, 0.45, 0.1]) * (0.8 + 0.2 * torch.rand(n_moving, 1, generator=g))
    q = torch.randn(n, 4, generator=g)
    return GaussianScene(
        means=torch.cat([floor, block]), quats=q / q.norm(dim=1, keepdim=True),
        log_scales=torch.full((n, 3), -5.0) + 0.3 * torch.rand(n, 3, generator=g),
        opacity_logits=torch.full((n,), 3.0), sh_dc=(rgb - 0.5) / C0,
        sh_rest=0.1 * torch.randn(n, (sh_degree + 1) ** 2 - 1, 3, generator=g),
        source="synthetic 1M capture", format="synthetic",
    )


def million_config(args):
    from physskin_gs.pipeline import AnimationConfig  # type: ignore[attr-defined]

    kw = {} if args.skinning is None else {"skinning": args.skinning}  # default: the app's (AnimationConfig's)
    if args.bodies > 1:  # the CLI's default selection: every object on the support is a body
        return AnimationConfig(up="z", **kw)
    return AnimationConfig(select=MILLION_BOX, up="z", **kw)


def rss_mib() -> float:
    """Resident set size of this process now, MiB: psutil when installed, else the Linux kernel's per-process
    statistics (procfs; nan where neither exists)."""
    try:
        import psutil

        return psutil.Process().memory_info().rss / 2**20
    except ImportError:
        pass
    try:
        with open(os.path.join(os.sep, "proc", str(os.getpid()), "statm")) as f:  # Linux procfs, not a data path
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError):
        return float("nan")


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far, MiB (``getrusage`` ru_maxrss: KiB on Linux)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def bench_first_frame(args, path):
    """Open ``path`` in the app as the CLI does and time what a websocket client gets: the first splats (the rest
    scene) and the live nodes. Returns (AnimatedScene, dict of seconds)."""
    from physskin_gs_viewer.app import ViewerApp
    from physskin_gs_viewer.testing import ViserWsClient

    out = {}
    t0 = time.perf_counter()
    app = ViewerApp(path, million_config(args), port=0, play=False, realtime=args.realtime, max_live=args.max_live,
                    progress_stream=open(os.devnull, "w"))
    out["load"] = time.perf_counter() - t0  # ViewerApp validates (loads) the file before the server starts
    t1 = time.perf_counter()
    app.start()
    ws = ViserWsClient(app.port)
    ws.send_camera((3.0, 3.0, 2.0), (0.0, 0.0, 0.5))
    first = live = None
    end = t1 + 600
    while time.perf_counter() < end and (first is None or live is None):
        now = time.perf_counter()
        if first is None and ws.count("GaussianSplatsMessage") > 0:
            first = now - t1
        if live is None and ws.get("GaussianSplatsMessage", "/scene/moving") is not None:
            live = now - t1
        if app.failed:
            raise RuntimeError(app.failed)
        time.sleep(0.01)
    out["first_splats"] = first
    out["live"] = live
    if not app.wait_ready(120):  # the client may see the live nodes a moment before the app calls itself ready
        raise RuntimeError(app.failed or "the viewer did not get ready")
    out.update({f"app_{k}": v for k, v in getattr(app, "timings", {}).items()})
    anim = app.live.anim
    ws.close()
    app.stop()
    return anim, out


def memory_probe(n_static: int, n_moving: int, args) -> dict:
    """One fresh process: build, prepare and show ``n_static + n_moving`` Gaussians (:func:`make_million_scene`)
    with a separate client process receiving (the browser's part is not in this process).

    Returns the process's RSS in MiB at each stage, each read after ``gc.collect()`` and glibc ``malloc_trim(0)``
    (so memory freed but still mapped does not count): ``rss_imports``, ``rss_scene``, ``rss_prepared``
    (AnimatedScene built, the scene's only reference), ``rss_ready`` (viewer set up, paused, the client has
    both nodes), ``rss_live`` (after ``probe_seconds`` of play); plus ``rss_live_untrimmed`` (what ``top`` shows
    while it plays), the peak (VmHWM) and the number of display updates.
    """
    import gc
    import subprocess

    from physskin_gs.pipeline import prepare_animation  # type: ignore[attr-defined]
    from physskin_gs_viewer.app import ViewerApp, release_free_memory

    def rss() -> float:
        gc.collect()
        release_free_memory()
        return rss_mib()

    out = {"n_static": n_static, "n_moving": n_moving, "rss_imports": rss()}
    scene = make_million_scene(n_static, n_moving)
    out["rss_scene"] = rss()
    anim = prepare_animation(scene, million_config(args))
    del scene
    out["rss_prepared"] = rss()
    out["peak_prepared"] = peak_rss_mib()
    app = ViewerApp(anim, None, port=0, play=False, realtime=True, max_live=args.max_live)
    app.start()
    assert app.wait_ready(300), app.failed
    client = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from physskin_gs_viewer.testing import ViserWsClient, wait_until\n"
        f"c = ViserWsClient({app.port}); c.send_camera((3.0, 3.0, 2.0), (0.0, 0.0, 0.5))\n"
        "names = ['/scene/moving'] + (['/scene/static'] if " + str(n_static > 0) + " else [])\n"
        "ok = wait_until(lambda: all(c.get('GaussianSplatsMessage', n) is not None for n in names), 120)\n"
        "print('ok' if ok else 'timeout', flush=True); time.sleep(120)")], stdout=subprocess.PIPE, text=True)
    try:
        assert client.stdout.readline().strip() == "ok", "the client did not get the splat nodes"
        time.sleep(1.0)
        out["rss_ready"] = rss()
        app.live.worker.set_playing(True)
        time.sleep(args.probe_seconds)
        out["rss_live_untrimmed"] = rss_mib()
        out["rss_live"] = rss()
        out["peak_live"] = peak_rss_mib()
        out["display_updates"] = app.display_updates
        try:
            out["accounted"] = viewer_accounting(app)
        except Exception as exc:  # noqa: BLE001 - a diagnostic (it reads viser internals)
            out["accounted"] = {"error": repr(exc)}
    finally:
        client.kill()
        client.wait(10)
        app.stop()
    return out


def viewer_accounting(app) -> dict:
    """Bytes of the arrays the live viewer holds, by what they scale with: ``static`` (per static row sent),
    ``moving`` (per moving row shown live) and ``all`` (per row of the scene), each split into ``viser`` (the
    splat nodes' records: handle props and the messages kept to replay to new tabs) and ``viewer`` (our own:
    colours, row indices, packer, the display deformer's output buffers). Reads viser internals (diagnostic)."""
    live = app.live

    def nb(x) -> int:
        if isinstance(x, np.ndarray):
            return int(x.nbytes)
        if isinstance(x, torch.Tensor):
            return int(x.element_size() * x.nelement())
        return 0

    out = {"static": {"viser": 0, "viewer": 0}, "moving": {"viser": 0, "viewer": 0}, "all": {"viser": 0, "viewer": 0}}
    out["all"]["viewer"] = nb(live.base_rgb) + nb(live.opac) + nb(live.moving)
    out["static"]["viewer"] = nb(live.static_idx) + (nb(live.static_shown) if live.static_shown is not live.static_idx
                                                     else 0)
    mv = nb(live.live_idx) + nb(live.live_rgb) + nb(live.moving_rows_t) + nb(live.live_pos_t)
    pk = live.packer
    mv += nb(pk._buf) + nb(pk._c) + nb(pk._tri)
    src = live.worker.source
    if src is not None:
        mv += nb(src.moving_idx)
        if src.private:
            mv += nb(src.deformer.means) + nb(src.deformer.covars)
    if live.live_rgba is not None:
        mv += nb(live.live_rgba[1])
    out["moving"]["viewer"] = mv
    kind = {"/scene/static": "static", "/scene/moving": "moving"}
    for node in (live.static_node, live.moving_node):
        if node is not None:
            out[kind[node.name]]["viser"] += nb(node._impl.props.buffer)
    try:
        msgs = list(app.server._websock_server._broadcast_buffer.message_from_id.values())
    except AttributeError:
        msgs = []
    for m in msgs:
        k = kind.get(getattr(m, "name", None))
        if k is None:
            continue
        if type(m).__name__ == "GaussianSplatsMessage":
            out[k]["viser"] += nb(m.props.buffer)
        elif type(m).__name__ == "SceneNodeUpdateMessage" and "buffer" in m.updates:
            out[k]["viser"] += nb(m.updates["buffer"])
    out["n_static_shown"] = 0 if live.static_shown is None else int(len(live.static_shown))
    out["n_live"] = int(len(live.live_idx))
    out["n"] = int(live.base_rgb.shape[0])
    return out


#: (static, moving) Gaussians of the three memory probes: the full case, then fewer static, then fewer moving
PROBES = ((800_000, 200_000), (200_000, 200_000), (800_000, 50_000))


def bench_memory(args) -> list:
    """Run :func:`memory_probe` for each of :data:`PROBES` in a fresh process; returns their results."""
    import json
    import subprocess

    res = []
    for ns, nm in PROBES:
        cmd = [sys.executable, __file__, "--memory-probe", str(ns), str(nm), "--probe-seconds", str(args.probe_seconds)]
        if args.skinning is not None:
            cmd += ["--skinning", args.skinning]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
        if p.returncode != 0 or not lines:
            raise RuntimeError(f"memory probe {ns}/{nm} failed:\n{p.stderr[-2000:]}")
        res.append(json.loads(lines[-1]))
    return res


def per_gaussian(mem: list, stage: str, base: str) -> Tuple[float, float]:
    """Bytes per static and per moving Gaussian of ``rss[stage] - rss[base]``, from the probes of :data:`PROBES`
    (differences between the full case and the one with fewer static / fewer moving rows)."""
    a, b, c = mem
    d = lambda m: (m[stage] - m[base]) * 2**20  # noqa: E731
    return (d(a) - d(b)) / (a["n_static"] - b["n_static"]), (d(a) - d(c)) / (a["n_moving"] - c["n_moving"])


def print_million(first: dict, mem: list) -> None:
    """The issue-13 table: time to the first frame and memory per Gaussian."""
    print()
    print("# Viewer at 1M: first frame and memory")
    print()
    print("| measurement | value |")
    print("|---|---|")
    print(f"| load the 1M PLY (ViewerApp validates the file before the server starts) | {first['load']:.2f} s |")
    for key, label in (("first_splats", "start -> first splats in the page (the rest scene, while preparing)"),
                       ("live", "start -> live nodes in the page (static + moving, physics running)")):
        v = first.get(key)
        print(f"| {label} | {'never' if v is None else f'{v:.2f} s'} |")
    for k in ("app_preview", "app_live"):
        if k in first:
            print(f"| app.timings[{k[4:]!r}] (server side: handed to viser) | {first[k]:.2f} s |")
    if not mem:
        return
    for m in mem:
        print(f"| RSS {m['n_static']:,} static + {m['n_moving']:,} moving: imports / scene / prepared / viewer ready / "
              f"live (untrimmed, peak) | {m['rss_imports']:.0f} / {m['rss_scene']:.0f} / {m['rss_prepared']:.0f} / "
              f"{m['rss_ready']:.0f} / {m['rss_live']:.0f} ({m['rss_live_untrimmed']:.0f}, {m['peak_live']:.0f}) MiB, "
              f"{m['display_updates']} display updates |")
    # differences between processes: glibc and the websocket buffers make these good to about +-20 MiB
    st, mv = per_gaussian(mem, "rss_live", "rss_imports")
    print(f"| process RSS per static / per moving Gaussian, live (scene + AnimatedScene + viewer; from the probes' "
          f"differences, +-20 MiB noise) | {st:.0f} / {mv:.0f} B |")
    a = mem[0]
    n = a["n_static"] + a["n_moving"]
    acc = a.get("accounted", {})
    if "static" in acc:
        ns, nm, nn = max(acc["n_static_shown"], 1), max(acc["n_live"], 1), max(acc["n"], 1)
        print(f"| arrays the viewer holds, per static row: viser (props + replay message) / ours (index) | "
              f"{acc['static']['viser'] / ns:.0f} / {acc['static']['viewer'] / ns:.0f} B |")
        print(f"| arrays the viewer holds, per moving row: viser (props + add + last update) / ours (packer, "
              f"deformer buffers, indices, colours) | {acc['moving']['viser'] / nm:.0f} / "
              f"{acc['moving']['viewer'] / nm:.0f} B |")
        print(f"| arrays the viewer holds, per row of the scene (colours, opacities, mask) | "
              f"{acc['all']['viewer'] / nn:.0f} B |")
    print(f"| 1M (800k static + 200k moving), live: process RSS | {a['rss_live']:.0f} MiB ({a['rss_live_untrimmed']:.0f} "
          f"untrimmed), of which the viewer {a['rss_live'] - a['rss_prepared']:.0f} MiB "
          f"({(a['rss_live'] - a['rss_prepared']) * 2**20 / n:.0f} B per Gaussian) |")


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

    # the rows the display packs each frame: the moving ones on the split path, every row otherwise
    rows = to_numpy(split.moving_idx, dtype=np.int64) if split is not None else np.arange(n)
    rgba = rgba_u32(rgb[rows], opac[rows])
    packer = SplatPacker(len(rows), rgba)
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

    view = None
    if int(anim.scene.sh_degree) > 0 and split is not None and not args.no_view_colour:
        from physskin_gs.render.view_colour import view_rgb_reference, view_rgba_words

        mrows = split.moving_idx
        dc, rest_sh = anim.scene.sh_dc.cpu(), anim.scene.sh_rest.cpu()
        static_rows = torch.from_numpy(np.setdiff1d(np.arange(n), mrows.numpy()))
        static_means = anim.scene.means.float().cpu()[static_rows].contiguous()
        cam = (2.0, 2.0, 1.0)

        alpha = np.clip(opac[mrows.numpy()].reshape(-1) * 255.0, 0, 255).astype(np.uint8)
        words = np.zeros((len(mrows), 8), np.uint32)

        def deform_view():  # as the display thread: deformation with F in the same pass, then the colour words
            split.run_moving(state["Z"], lambda m, c, F: view_rgba_words(m, dc, rest_sh, cam, alpha, words[:, 7:],
                                                                         F, rows=mrows), gradients=True)

        def view_ref():
            split.run_moving(state["Z"], lambda m, c, F: view_rgb_reference(m, dc, rest_sh, cam, F, mrows),
                             gradients=True)

        static_alpha = np.clip(opac[static_rows.numpy()].reshape(-1) * 255.0, 0, 255).astype(np.uint8)
        static_words = np.zeros((len(static_rows), 8), np.uint32)

        def static_view():  # as the display thread after a camera turn: the static node's colour words
            view_rgba_words(static_means, dc, rest_sh, cam, static_alpha, static_words[:, 7:], None, rows=static_rows)

        view = (deform_view, view_ref, static_view, len(static_rows))

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
    if view is not None:
        t_view = timeit(view[0], reps) - t_def
        t_view_ref = timeit(view[1], 2, warmup=1) - t_def
        t_static_view = timeit(view[2], reps)
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
    if args.no_view_colour:
        app.display.set_view_colour(False)
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

    def moving_updates():  # splat buffer updates of the moving node (not the handle gizmos' updates)
        return ws.count("SceneNodeUpdateMessage", "/scene/moving")

    def static_messages():
        return ws.count("SceneNodeUpdateMessage", "/scene/static") + ws.count("GaussianSplatsMessage", "/scene/static")

    def sample():
        return (anim.frame, app.display_updates, moving_updates(), time.perf_counter(),
                time.process_time(), thread_cpu(sim_t), thread_cpu(disp_t))

    st0 = static_messages()
    a0 = sample()
    end = time.perf_counter() + args.seconds
    while time.perf_counter() < end:  # the camera orbits about z, as a user looking around
        ang = np.radians(args.orbit * (args.seconds - (end - time.perf_counter())))
        x, y = 2.0 * np.cos(np.pi / 4 + ang) * np.sqrt(2.0), 2.0 * np.sin(np.pi / 4 + ang) * np.sqrt(2.0)
        ws.send_camera((x, y, 1.0), (0.0, 0.0, 0.0))
        time.sleep(0.1)
    a1 = sample()
    st1 = static_messages()
    n_static = int(len(app.live.static_idx))
    n_moving_live = int(len(app.live.live_idx))
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
    print(f"# Viewer benchmark, CPU: {n:,} Gaussians ({n_moving_live:,} moving shown live, {n_static:,} static sent "
          f"once), AnimatedScene = {kind}, solver = {solver}, SH degree {int(anim.scene.sh_degree)}, view-dependent "
          f"colour {'on' if view is not None else 'off'}, camera orbiting at {args.orbit:g} deg/s, "
          f"deformation on the {'display' if split is not None else 'simulation'} thread, torch threads "
          f"sim {sim_threads} / display {disp_threads}, {os.cpu_count()} cores, load average {load:.1f} at the end")
    print()
    print("| measurement | ms / update | updates / s | ratio to baseline |")
    print("|---|---|---|---|")
    rows = [
        (f"baseline: viser set_gaussians of all {n:,} splats alone", t_base),
        ("sim thread: anim.step(1) (+ handle-transform snapshot)", t_step),
        ("old: deformed_gaussians on the sim thread + copies", t_old),
        ("display thread: deformation of the moving Gaussians", t_def),
        ("old: numpy wire packing (pack_splat_buffer)", t_pack_old),
        ("display thread: torch wire packing (SplatPacker)", t_pack),
        ("display thread: viser buffer update (handle.buffer = ...)", t_send),
        ("serial total (step + deform + pack + update)", t_step + t_def + t_pack + t_send),
        ("display thread total (deform + pack + update)", t_def + t_pack + t_send),
    ]
    if view is not None:
        rows += [
            (f"display thread: view-dependent colour of the moving rows (F in the deformer's pass + C kernel, "
             f"SH degree {int(anim.scene.sh_degree)})", t_view),
            ("  the same with the torch reference (SVD polar, float64)", t_view_ref),
            (f"display thread: view-dependent colour of the {view[3]:,} static rows (after a camera turn of 3 deg)",
             t_static_view),
            ("display thread total with view-dependent colour (deform + colour + pack + update)",
             t_def + t_view + t_pack + t_send),
        ]
    for label, t in rows:
        print(f"| {label} | {1e3 * t:.1f} | {1 / t:.1f} | {t / t_base:.2f} |")
    ms_disp = 1e3 / max(disp_ps, 1e-9)
    print(f"| live app: display updates (sim + deform + client update, threaded) | {ms_disp:.1f} | {disp_ps:.1f} | "
          f"{ms_disp / 1e3 / t_base:.2f} |")
    print(f"| live app: simulation steps | {1e3 / max(steps_ps, 1e-9):.1f} | {steps_ps:.1f} | |")
    print(f"| live app: moving-node splat updates received by the websocket client | | {recv_ps:.1f} | |")
    print(f"| live app: static-node messages received during the run (recoloured on camera turns) | | {st1 - st0} | |")
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
    ap.add_argument("--skinning", default=None, choices=["pretrained", "fit", "eigen", "network", "rbf"],
                    help="skinning basis (default: pretrained for the scene cases, as before; the app's default, "
                         "AnimationConfig().skinning, for --million)")
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
    ap.add_argument("--million", action="store_true",
                    help="issue 13: 1M Gaussians (800k static floor, a 200k block moving), first frame, memory")
    ap.add_argument("--no-memory", action="store_true", help="with --million: skip the memory probes")
    ap.add_argument("--bodies", type=int, default=1,
                    help="with --million: the 200k moving Gaussians as this many blocks, each a body (issue 24)")
    ap.add_argument("--sh-degree", type=int, default=3, choices=[0, 1, 2, 3],
                    help="with --million: SH degree of the synthetic scene (view-dependent colour is on for > 0)")
    ap.add_argument("--no-view-colour", action="store_true",
                    help="turn the viewer's view-dependent colour off (the degree-0 colour, as before issue 25)")
    ap.add_argument("--orbit", type=float, default=10.0,
                    help="degrees per second the test client's camera turns during the live run (the static rows "
                         "are recoloured for the camera after 3 degrees: once it rests, at most every second while it turns)")
    ap.add_argument("--memory-probe", nargs=2, type=int, metavar=("N_STATIC", "N_MOVING"),
                    help="run one memory probe in this process and print it as JSON")
    ap.add_argument("--probe-seconds", type=float, default=6.0, help="seconds live before a memory probe reads RSS")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.memory_probe:
        import json

        print(json.dumps(memory_probe(*args.memory_probe, args)), flush=True)
        return 0
    if args.million and not args.gpu_only:
        import tempfile

        from physskin_gs.io import save_scene

        with tempfile.TemporaryDirectory(prefix="physskin-bench-") as tmp:
            path = Path(tmp) / "million.ply"
            t0 = time.perf_counter()
            save_scene(make_million_scene(sh_degree=args.sh_degree, blocks=args.bodies), path)
            print(f"wrote the 1M scene ({path.stat().st_size / 2**20:.0f} MiB) in {time.perf_counter() - t0:.1f} s",
                  file=sys.stderr)
            anim, first = bench_first_frame(args, path)
        mem = [] if args.no_memory else bench_memory(args)
        kind = f"pipeline (skinning {getattr(anim, 'skinning_source', args.skinning)}), " + (
            f"{getattr(anim, 'num_bodies', 1)} bodies (select auto)" if args.bodies > 1 else "select = the block")
        for solver in (("fast", "full") if args.solver == "both" else (args.solver,)):
            anim.reset()
            bench_cpu(args, anim, kind, solver)
        print_million(first, mem)
        bench_gpu(args)
        return 0
    if not args.gpu_only:
        anim, kind = make_anim(args)
        for solver in (("fast", "full") if args.solver == "both" else (args.solver,)):
            anim.reset()
            bench_cpu(args, anim, kind, solver)
    bench_gpu(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
