#!/usr/bin/env python
"""Screenshots of the live viewer with several bodies (issue 24): a capture with several objects on its support,
opened with no options (``--select auto``: every object a body), one body pushed by dragging its handle gizmos over
the viewer's websocket (as a second tab sends a drag), then released.

    python scripts/make_table_capture.py out/table.ply
    python scripts/viewer_bodies_screenshots.py out/table.ply --body 1 --push 0.8 0 0 --out docs/screenshots

Writes ``viewer_bodies_rest.png``, ``viewer_bodies_pushed.png``, ``viewer_bodies_after.png`` and
``viewer_bodies_side.png`` (the last moment seen from the side it was pushed to) into ``--out`` (which
must not hold them already, unless ``--overwrite``), and prints what the simulation reports (bodies, contacts, the
pushed body's handle centroid, moved). Needs a headless Chromium: ``$PHYSSKIN_CHROMIUM``, else ``chromium`` on the PATH
(Debian: ``apt-get install chromium``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

NAMES = ("rest", "pushed", "after", "side")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path", help="capture with several objects on its support (e.g. out/table.ply)")
    ap.add_argument("--body", type=int, default=1, help="the body to push (the numbers the log lists; default 1)")
    ap.add_argument("--push", type=float, nargs=3, default=(0.8, 0.0, 0.0), metavar=("DX", "DY", "DZ"),
                    help="how far its handle gizmos are dragged, scene units (default 0.8 0 0)")
    ap.add_argument("--push-seconds", type=float, default=1.5, help="how long the drag lasts (default 1.5 s)")
    ap.add_argument("--after-seconds", type=float, default=4.0, help="wait after the release (default 4 s)")
    ap.add_argument("--out", default="out/viewer_bodies")
    ap.add_argument("--overwrite", action="store_true", help="replace screenshots already in --out")
    ap.add_argument("--width", type=int, default=1400)
    ap.add_argument("--height", type=int, default=720)
    args = ap.parse_args(argv)
    out = Path(args.out)
    if not (args.push_seconds > 0 and args.after_seconds >= 0):
        ap.error("--push-seconds must be > 0 and --after-seconds >= 0")
    if not (args.width >= 200 and args.height >= 200):
        ap.error("--width and --height must be at least 200 pixels")
    if not Path(args.path).is_file():
        ap.error(f"no such file: {args.path}")
    clash = [out / f"viewer_bodies_{n}.png" for n in NAMES if (out / f"viewer_bodies_{n}.png").exists()]
    if clash and not args.overwrite:
        ap.error(f"{clash[0]} exists (pass --overwrite to replace it)")
    import shutil

    from physskin_gs_viewer.testing import CHROMIUM

    if shutil.which(CHROMIUM) is None:
        ap.error(f"needs a headless Chromium: {CHROMIUM!r} was not found (set PHYSSKIN_CHROMIUM, or on Debian "
                 "apt-get install chromium)")

    import imageio.v2 as imageio

    from physskin_gs.pipeline import AnimationConfig  # type: ignore[attr-defined]
    from physskin_gs_viewer.app import ViewerApp
    from physskin_gs_viewer.screenshots import (_HIDE_NOTIFICATIONS_JS, panel_free_region, wait_changed,
                                                wait_stable)
    from physskin_gs_viewer.testing import HeadlessChromium, ViserWsClient

    app = ViewerApp(args.path, AnimationConfig(), port=0)
    app.start()
    browser = ws = None
    shots = {}
    try:
        if not app.wait_ready(900):
            print(f"viewer failed: {app.failed}", file=sys.stderr)
            return 1
        live = app.live
        anim = live.anim
        nb = int(getattr(anim, "num_bodies", 1))
        if not 0 <= args.body < nb:
            print(f"--body {args.body}: the scene has {nb} bod{'y' if nb == 1 else 'ies'}", file=sys.stderr)
            return 2
        # the gizmos are every body's learned handles in order (body 0's first): body k's are after those before it
        own = [anim.handle_positions(body=k).numpy() if nb > 1 else anim.handle_positions().numpy()
               for k in range(nb)]
        counts = [len(h) for h in own]
        for k, h in enumerate(own):
            print(f"body {k}: {len(h)} handle gizmos around {np.round(h.mean(0), 2).tolist()}")
        start = int(sum(counts[:args.body]))
        region = panel_free_region(args.width, args.height)
        browser = HeadlessChromium(app.url, args.width, args.height, timeout=60.0)
        shots["rest"] = rest = wait_stable(browser, region, 180.0)
        browser.call("Runtime.evaluate", expression=_HIDE_NOTIFICATIONS_JS)
        time.sleep(0.3)
        shots["rest"] = rest = browser.screenshot()
        hp = np.asarray(live.worker.slot.get().handle_positions, dtype=np.float64)
        names = [f"/handles/h{k}" for k in range(start, start + counts[args.body])]
        push = np.asarray(args.push, dtype=np.float64)
        ws = ViserWsClient(app.port)
        ws.send_camera(tuple(app.server.initial_camera.position), tuple(live.center), tuple(live.up))
        for name in names:
            ws.drag_start(name)
        steps = 15
        for i in range(1, steps + 1):
            for name, k in zip(names, range(start, start + counts[args.body])):
                ws.drag_to(name, hp[k] + i / steps * push)
            time.sleep(args.push_seconds / steps)
        shots["pushed"] = wait_changed(browser, rest, region, 120.0, interval=1.0, repeats=1)
        browser.call("Runtime.evaluate", expression=_HIDE_NOTIFICATIONS_JS)
        shots["pushed"] = browser.screenshot()
        for name in names:
            ws.drag_end(name)
        time.sleep(args.after_seconds)
        shots["after"] = browser.screenshot()
        # the same moment seen from the side the body was pushed to (the table no longer hides where it lies)
        cam0 = np.asarray(app.server.initial_camera.position, dtype=np.float64)
        up = np.asarray(live.up, dtype=np.float64)
        side = push - np.dot(push, up) * up
        if np.linalg.norm(side) > 1e-9:
            side /= np.linalg.norm(side)
            dist = float(np.linalg.norm(cam0 - live.center))
            pos = live.center + 1.6 * dist * side + 0.3 * dist * up
            for client in app.server.get_clients().values():
                client.camera.up_direction = tuple(float(v) for v in up)
                client.camera.position = tuple(float(v) for v in pos)
                client.camera.look_at = tuple(float(v) for v in live.center)
            shots["side"] = wait_changed(browser, shots["after"], region, 60.0, interval=1.0, repeats=2)
        stats = live.worker.slot.get().stats
        print("stats:", {k: v for k, v in (stats or {}).items() if "contact" in k or "bod" in k or "ms" in k})
        moved = (anim.handle_positions(body=args.body) if nb > 1 else anim.handle_positions()).numpy()
        shift = moved.mean(0) - own[args.body].mean(0)
        print(f"body {args.body}'s handle centroid moved by {np.round(shift, 3).tolist()} (scene units): "
              f"{float(np.dot(shift, live.up)):+.3f} along up")
    finally:
        if ws is not None:
            ws.close()
        if browser is not None:
            browser.close()
        app.stop()
    out.mkdir(parents=True, exist_ok=True)
    for n in NAMES:
        if n in shots:
            path = out / f"viewer_bodies_{n}.png"
            imageio.imwrite(path, shots[n])
            if not path.is_file() or path.stat().st_size == 0:
                print(f"could not write {path}", file=sys.stderr)
                return 1
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
