"""Scripted browser session: screenshots of the live viewer before, during and after a drag.

Used by tests/test_viewer_browser.py and to make the screenshots in docs/screenshots/::

    python -m physskin_gs_viewer.screenshots data/spot_mesh2splat_10k.splat --out docs/screenshots

The page is opened in Debian's headless Chromium (SwiftShader WebGL); the drag is sent over the websocket as a
second tab would send it (TransformControls drag start / update / end messages), so it takes the same path
as a user's drag.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Dict, Optional

import numpy as np

from .testing import HeadlessChromium, ViserWsClient

_HIDE_NOTIFICATIONS_JS = """
(() => {
  let n = 0;
  for (const el of document.querySelectorAll('div')) {
    const t = el.textContent || '';
    const r = el.getBoundingClientRect();
    if (t.startsWith('Software WebGL rendering detected') && r.width < 500 && r.height < 200) {
      el.style.visibility = 'hidden'; n += 1;
    }
  }
  return n;
})()
"""


def panel_free_region(width: int, height: int):
    """The part of the page left of viser's GUI panel (about 340 px wide on the right)."""
    return (slice(0, height), slice(0, max(width - 340, width // 3)))


def object_mask(img: np.ndarray, background: int = 245) -> np.ndarray:
    """(H, W) bool: pixels that are not (near-)white background."""
    return img.astype(np.int32).min(axis=2) < background


def wait_stable(
    browser: HeadlessChromium,
    region,
    timeout: float,
    min_object_px: int = 200,
    interval: float = 2.0,
    repeats: int = 3,
):
    """Screenshots until the ``region`` (slice pair) shows an object and ``repeats`` consecutive shots agree.

    SwiftShader can take seconds per frame and viser fades splats in, so one unchanged pair of shots is not
    enough to call the page settled.
    """
    end = time.monotonic() + timeout
    return _poll_until_steady(
        browser, region, end, interval, repeats, browser.screenshot(),
        ready=lambda sub: object_mask(sub).sum() >= min_object_px, tol=0.3,
    )


def wait_changed(browser: HeadlessChromium, ref: np.ndarray, region, timeout: float, interval: float = 2.0, repeats: int = 2):
    """Screenshots until ``region`` differs from ``ref`` and then stays the same for ``repeats`` shots."""
    ref_sub = ref[region].astype(np.int32)
    return _poll_until_steady(
        browser, region, time.monotonic() + timeout, interval, repeats, ref,
        ready=lambda sub: (np.abs(sub - ref_sub).max(axis=2) > 40).sum() > 100, tol=0.5,
    )


def _poll_until_steady(browser: HeadlessChromium, region, end: float, interval: float, repeats: int, img, *, ready, tol):
    """Screenshot every ``interval`` s until ``ready(region as int32)`` holds and ``region`` changed by a mean of
    less than ``tol`` (0-255 levels) since the previous shot, ``repeats`` times in a row; or until the monotonic
    time ``end``. Returns the last screenshot ((H, W, 3) uint8), or ``img`` if none was taken."""
    prev = None
    same = 0
    while time.monotonic() < end:
        time.sleep(interval)
        img = browser.screenshot()
        sub = img[region].astype(np.int32)
        if ready(sub) and prev is not None and np.abs(sub - prev).mean() < tol:
            same += 1
            if same >= repeats:
                return img
        else:
            same = 0
        prev = sub
    return img


def drag_session(
    app,
    out_dir: Optional[Path] = None,
    *,
    width: int = 1400,
    height: int = 720,
    pull: float = 0.35,
    timeout: float = 180.0,
    settle_s: float = 2.5,
    record_dir: Optional[Path] = None,
    click: bool = True,
    direction: str = "side",
    field_shot: bool = False,
) -> Dict[str, np.ndarray]:
    """Open ``app`` (started, ready) in headless Chromium and capture rest / dragged / released screenshots.

    Pulls the handle farthest from the object's centre by ``pull`` x the scene extent (``direction`` "side":
    sideways on screen, away from the centre; "up": along the up vector), via websocket drag messages. With ``record_dir``, the drag is recorded there (frame%04d.ply + sequence.json).
    With ``click``, the object is first clicked in the page (click-to-grab); the grab gizmo's position is
    returned as ``"grab_point"``. Returns the images (and writes PNGs into ``out_dir`` when given). Every wait
    is bounded by ``timeout``. With ``field_shot``, a last screenshot shows the skinning field (argmax colours,
    x-ray) as ``"skinning"``.
    """
    import imageio.v2 as imageio

    live = app.live
    region = panel_free_region(width, height)
    browser = HeadlessChromium(app.url, width, height, timeout=60.0)
    ws = None
    shots: Dict[str, np.ndarray] = {}
    try:
        rest = wait_stable(browser, region, timeout)
        browser.call("Runtime.evaluate", expression=_HIDE_NOTIFICATIONS_JS)
        time.sleep(0.3)
        shots["rest"] = rest = browser.screenshot()
        # The 3D canvas's width in pixels as the tab reports it (the page less a docked panel).
        widths = [c.camera.image_width for c in app.server.get_clients().values()]
        if widths:
            shots["canvas_width"] = np.asarray(widths, dtype=np.int64)
        if click:
            # Click the object's median pixel: the browser sends a ray, the app puts a grab gizmo there.
            ys, xs = np.nonzero(object_mask(rest[region]))
            top = ys <= np.percentile(ys, 30)  # upper part of the object, away from the handle gizmos
            x, y = int(np.median(xs[top])), int(np.median(ys[top]))
            before = set(app._grabs)
            for kind in ("mousePressed", "mouseReleased"):
                browser.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)
                time.sleep(0.05)
            end = time.monotonic() + 30.0
            while time.monotonic() < end and set(app._grabs) == before:
                time.sleep(0.1)
            new_ids = set(app._grabs) - before
            if new_ids:
                shots["grab_point"] = np.asarray(app._grabs[new_ids.pop()].position, dtype=np.float64)

        hp = live.worker.slot.get().handle_positions
        k = int(np.argmax(np.linalg.norm(hp - live.center, axis=1))) if len(hp) else 0
        name = f"/handles/h{k}"
        cam = np.asarray(app.server.initial_camera.position, dtype=np.float64)
        if direction == "up":
            d = live.up
        else:  # sideways on screen: perpendicular to the view direction and to up
            d = np.cross(live.center - cam, live.up)
            d /= np.linalg.norm(d)
            if np.dot(hp[k] - live.center, d) < 0:  # pull the handle further out, not through the body
                d = -d
        target = hp[k] + pull * live.extent * d
        ws = ViserWsClient(app.port)
        ws.send_camera(tuple(app.server.initial_camera.position), tuple(live.center), tuple(live.up))
        if record_dir is not None:
            app.start_recording(out_dir=record_dir)
        ws.drag_start(name)
        for i in range(1, 11):
            ws.drag_to(name, hp[k] + i / 10 * (target - hp[k]))
            time.sleep(0.05)
        shots["dragged"] = wait_changed(browser, rest, region, timeout)
        time.sleep(settle_s)
        browser.call("Runtime.evaluate", expression=_HIDE_NOTIFICATIONS_JS)
        shots["dragged"] = browser.screenshot()
        ws.drag_end(name)
        shots["released"] = wait_changed(browser, shots["dragged"], region, timeout)
        time.sleep(settle_s * 2)
        shots["released"] = browser.screenshot()
        if record_dir is not None:
            app.stop_recording()
        if field_shot:
            # The skinning field (argmax handle colours) with x-ray splats, so the handle markers show.
            app.set_xray(True)
            app.gui["field"].value = "all handles (argmax)"
            shots["skinning"] = wait_changed(browser, shots["released"], region, timeout)
            time.sleep(settle_s)
            shots["skinning"] = browser.screenshot()
    finally:
        if ws is not None:
            ws.close()
        browser.close()
    if out_dir is not None:
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        for key, img in shots.items():
            if img.ndim == 3:
                imageio.imwrite(out_dir / f"viewer_{key}.png", img)
    return shots


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Screenshots of the live viewer before/during/after a drag.")
    ap.add_argument("path", help="scene file (e.g. data/spot_mesh2splat_10k.splat)")
    ap.add_argument("--out", default="docs/screenshots")
    ap.add_argument("--record", default=None, help="also record the drag into this (new) folder")
    ap.add_argument("--skinning", default="eigen")
    ap.add_argument("--pin", default="below:0.1", help="pin region (default: the bottom 10%%); 'none' for no pin")
    ap.add_argument("--pull", type=float, default=0.35, help="drag distance as a fraction of the scene extent")
    ap.add_argument("--direction", default="side", choices=["side", "up"])
    ap.add_argument("--width", type=int, default=1400)
    ap.add_argument("--height", type=int, default=720)
    args = ap.parse_args(argv)

    from physskin_gs.pipeline import AnimationConfig  # type: ignore[attr-defined]

    from .app import ViewerApp

    pin = None if args.pin in ("", "none") else args.pin
    app = ViewerApp(args.path, AnimationConfig(skinning=args.skinning, pin=pin), port=0)
    app.start()
    try:
        if not app.wait_ready(900):
            print(f"viewer failed: {app.failed}", file=sys.stderr)
            return 1
        shots = drag_session(app, Path(args.out), width=args.width, height=args.height, pull=args.pull,
                             direction=args.direction, record_dir=Path(args.record) if args.record else None,
                             field_shot=True)
        for k, img in shots.items():
            print(f"{k}: {img.shape}" + (f", object pixels {object_mask(img).sum()}" if img.ndim == 3 else f" {img}"))
    finally:
        app.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
