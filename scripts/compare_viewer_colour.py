#!/usr/bin/env python
"""The browser's colours against ``render``'s, from the same camera (issue 25: view-dependent colour).

Opens the live viewer on a scene (paused, at rest) in headless Chromium, takes a screenshot with the Display
toggle "view-dependent colour" on and one with it off, reads the tab's camera back from viser, renders the same
camera with the project's CPU renderer (SH evaluated per Gaussian, as ``physskin-gs render`` and the exported
frames do) and with the degree-0 colour, and prints the differences over the object's pixels:

  mean |diff|       mean absolute per-pixel difference, in 1/255, over the object's pixels (where ``render``'s
                    alpha is at least 0.5, so both renderers agree the object covers the pixel);
  mean colour diff  the largest per-channel difference of the two images' mean colours over those pixels, 1/255.

The two renderers differ anyway at splat edges (the browser's WebGL rasteriser on SwiftShader against ours), so
the per-pixel number has a floor that colour alone cannot remove; the mean colour is what the eye compares.
Writes the four images (the part of the page left of viser's panel) and the numbers (JSON) into ``--out``.

Usage:
  python scripts/compare_viewer_colour.py ../shared/data/splats/lego_gsplat_sh3.ply --out /tmp/view_colour
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np


def compare(a: np.ndarray, b: np.ndarray, mask: np.ndarray) -> dict:
    """Differences of two (H, W, 3) uint8 images over the (H, W) bool ``mask`` (the object's pixels)."""
    if not mask.any():
        return {"pixels": 0, "mean_abs": float("nan"), "mean_colour": float("nan")}
    da, db = a[mask].astype(np.float64), b[mask].astype(np.float64)
    return {"pixels": int(mask.sum()), "mean_abs": float(np.abs(da - db).mean()),
            "mean_colour": float(np.abs(da.mean(0) - db.mean(0)).max())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path", help="scene with SH bands (e.g. ../shared/data/splats/lego_gsplat_sh3.ply)")
    ap.add_argument("--out", required=True, help="new folder for the images and numbers.json")
    ap.add_argument("--width", type=int, default=1200)
    ap.add_argument("--height", type=int, default=700)
    ap.add_argument("--timeout", type=float, default=240.0)
    args = ap.parse_args(argv)
    out = Path(args.out)
    if out.exists() and any(out.iterdir()):
        print(f"error: {out} exists and is not empty", file=sys.stderr)
        return 2

    import imageio.v2 as imageio
    import torch

    from physskin_gs.pipeline import AnimationConfig
    from physskin_gs.render import camera_from_viser
    from physskin_gs.render.video import render_scene_frame
    from physskin_gs_viewer.app import ViewerApp
    from physskin_gs_viewer.screenshots import _HIDE_NOTIFICATIONS_JS, panel_free_region, wait_changed, wait_stable
    from physskin_gs_viewer.testing import HeadlessChromium

    w, h = args.width, args.height
    region = panel_free_region(w, h)
    app = ViewerApp(args.path, AnimationConfig(gravity=0.0), port=0, play=False)
    app.start()
    browser = None
    try:
        if not app.wait_ready(600):
            print(f"viewer failed: {app.failed}", file=sys.stderr)
            return 1
        app.gui["handles"].value = False
        for g in app.live.handle_gizmos:
            g.visible = False
        app.panel.update_floor_grid(False, 0.0)  # only splats in the picture: no floor grid, no axes
        try:
            app.server.scene.world_axes.visible = False
        except AttributeError:
            pass
        browser = HeadlessChromium(app.url, w, h, timeout=60.0)
        wait_stable(browser, region, args.timeout)
        browser.call("Runtime.evaluate", expression=_HIDE_NOTIFICATIONS_JS)
        time.sleep(3.0)  # the view colours for the tab's own camera (it reports it once connected)
        on = browser.screenshot()
        app.display.set_view_colour(False)
        wait_changed(browser, on, region, args.timeout)
        time.sleep(2.0)
        off = browser.screenshot()
        client = next(iter(app.server.get_clients().values()))
        cam = client.camera
        camera = camera_from_viser(tuple(cam.wxyz), tuple(cam.position), float(cam.fov), w, h)
        frame = app.live.worker.slot.get()
        sc = app.live.anim.scene
        opac = sc.opacities.reshape(-1).float()
        renders = {}
        for key, colors in (("sh", sc.sh.float()), ("dc", sc.base_colors if hasattr(sc, "base_colors") else None)):
            if colors is None:
                colors = (0.5 + 0.28209479177387814 * sc.sh_dc.float()).clamp(0, 1)
            with torch.no_grad():
                r = render_scene_frame(frame.means_t.float(), frame.covars_t.float(), opac, colors, camera,
                                       background=(1.0, 1.0, 1.0), backend="torch")
            renders[key] = (r.rgb.clamp(0, 1) * 255).to(torch.uint8).numpy()
            renders["alpha"] = r.alpha[..., 0].numpy()
    finally:
        if browser is not None:
            browser.close()
        app.stop()

    out.mkdir(parents=True, exist_ok=True)
    imgs = {"viewer_view_colour": on, "viewer_dc": off, "render_sh": renders["sh"], "render_dc": renders["dc"]}
    for k, img in imgs.items():
        imageio.imwrite(out / f"{k}.png", img[region])
    crop = {k: v[region] for k, v in imgs.items()}
    mask = renders["alpha"][region] >= 0.5
    res = {
        "scene": str(args.path), "page_size": [w, h], "compared_size": [int(mask.shape[1]), int(mask.shape[0])],
        "camera_position": [float(v) for v in cam.position],
        "viewer_view_colour_vs_render_sh": compare(crop["viewer_view_colour"], crop["render_sh"], mask),
        "viewer_dc_vs_render_sh": compare(crop["viewer_dc"], crop["render_sh"], mask),
        "viewer_dc_vs_render_dc": compare(crop["viewer_dc"], crop["render_dc"], mask),
        "render_sh_vs_render_dc": compare(crop["render_sh"], crop["render_dc"], mask),
    }
    (out / "numbers.json").write_text(json.dumps(res, indent=1))
    print(f"wrote {out}/: viewer_view_colour.png (browser, view-dependent colour on), viewer_dc.png (off), "
          f"render_sh.png (render with the SH), render_dc.png (render with the degree-0 colour), numbers.json; "
          f"the part of the page left of the panel, {mask.shape[1]} x {mask.shape[0]} px")
    print("| browser | against render | pixels | mean abs diff (1/255) | mean colour diff (1/255) |")
    print("|---|---|---|---|---|")
    for key, label in (("viewer_view_colour_vs_render_sh", ("view-dependent colour on", "render (SH)")),
                       ("viewer_dc_vs_render_sh", ("off (degree-0 colour)", "render (SH)")),
                       ("viewer_dc_vs_render_dc", ("off (degree-0 colour)", "render with the degree-0 colour")),
                       ("render_sh_vs_render_dc", ("(render SH)", "render with the degree-0 colour"))):
        r = res[key]
        print(f"| {label[0]} | {label[1]} | {r['pixels']} | {r['mean_abs']:.2f} | {r['mean_colour']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
