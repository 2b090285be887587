"""Browser test: the live page in Debian's headless Chromium shows the object, and a drag changes the picture.

Opt-in: marked ``browser`` and skipped when no Chromium is found ($PHYSSKIN_CHROMIUM or `chromium` on the PATH) (``apt-get install -y chromium``).
WebGL runs on SwiftShader, so a tiny scene and a small window are used and every wait is bounded (generous,
because the first frame can take a minute on a busy 2-core machine).
"""

from __future__ import annotations

import shutil
import time

import numpy as np
import pytest

from physskin_gs_viewer.testing import CHROMIUM

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(shutil.which(CHROMIUM) is None, reason=f"{CHROMIUM} not installed (apt-get install chromium)"),
]


def test_screenshot_changes_where_object_is_after_scripted_drag(tmp_path):
    from physskin_gs_viewer.app import ViewerApp
    from physskin_gs_viewer.screenshots import drag_session, object_mask, panel_free_region
    from physskin_gs_viewer.testing import FakeAnimatedScene, make_blob_scene

    anim = FakeAnimatedScene(make_blob_scene(1500, log_scale=-4.0), num_handles=4)
    app = ViewerApp(anim, None, host="127.0.0.1", port=0)
    app.start()
    try:
        assert app.wait_ready(30), app.failed
        app.gui["handles"].value = False  # keep gizmos out of the picture
        for g in app.live.handle_gizmos:
            g.visible = False
        w, h = 900, 400
        shots = drag_session(app, tmp_path, width=w, height=h, pull=0.3, timeout=150.0, settle_s=1.5)
    finally:
        app.stop()
    rest, dragged, released = shots["rest"], shots["dragged"], shots["released"]
    region = panel_free_region(w, h)
    obj = object_mask(rest[region])
    assert obj.sum() > 300, "the object is not visible in the page"
    # The panel is docked right, so the canvas ends at it and the initial camera centres the object left of it
    # (a floating panel lay over the canvas, whose centre, w / 2, it partly covered).
    # (A floating panel lay over the canvas's right part, and the object, centred in the page, partly under it.)
    canvas = int(shots["canvas_width"].max())
    assert canvas <= w - 250
    # The blob is saturated blue to orange; the floor grid and the page are grey or white (the axes corner out).
    saturated = np.ptp(rest[: h - 80, :canvas].astype(int), axis=2) > 80
    xs_rest = np.nonzero(saturated)[1]
    assert xs_rest.size > 300 and abs(0.5 * (xs_rest.min() + xs_rest.max()) - canvas / 2) < 0.1 * canvas
    changed = np.abs(dragged[region].astype(int) - rest[region].astype(int)).max(axis=2) > 40
    assert changed.sum() > 100, "the drag did not change the picture"
    # The change is where the object is (or where it moved to): near the object's bounding box.
    ys, xs = np.nonzero(obj)
    pad = 40
    box = np.zeros_like(obj)
    box[max(ys.min() - pad, 0) : ys.max() + pad, max(xs.min() - pad, 0) : xs.max() + pad] = True
    assert (changed & box).sum() > 0.9 * changed.sum()
    # Released: the object springs back toward the rest picture.
    back = np.abs(released[region].astype(int) - rest[region].astype(int)).max(axis=2) > 40
    assert back.sum() < 0.5 * changed.sum()
    # Click-to-grab in the page picked a point on the object (inside its bounding box, with slack).
    assert "grab_point" in shots, "clicking the object did not create a grab gizmo"
    lo, hi = anim.x0.min(0) - 0.05, anim.x0.max(0) + 0.05
    assert np.all(shots["grab_point"] >= lo) and np.all(shots["grab_point"] <= hi)
    assert app.error_log == []


def test_sh3_capture_in_the_browser_drags_and_the_view_colour_toggle_changes_pixels(tmp_path, splat_file):
    """A real SH-3 capture (the gsplat-trained Lego, 12.8k Gaussians) in the page: not blank, a handle drag moves
    it, and switching view-dependent colour off changes the object's pixels (the SH bands are no longer applied)."""
    import warnings

    from physskin_gs.pipeline import AnimationConfig
    from physskin_gs_viewer.app import ViewerApp
    from physskin_gs_viewer.screenshots import drag_session, object_mask, panel_free_region

    path = splat_file("lego_gsplat_sh3.ply")
    cfg = AnimationConfig(skinning="rbf", num_cubature=256, num_handles=8, gravity=0.0, fit_seconds=2.0)
    quiet = open("/dev/null", "w")  # open until the app stops: it prepares in the background
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        app = ViewerApp(path, cfg, host="127.0.0.1", port=0, progress_stream=quiet)
        app.start()
    try:
        assert app.wait_ready(120), app.failed
        assert app.live.sh_degree == 3 and app.display.view_colour
        app.gui["handles"].value = False
        for g in app.live.handle_gizmos:
            g.visible = False
        w, h = 900, 400
        region = panel_free_region(w, h)
        shots = drag_session(app, tmp_path, width=w, height=h, pull=0.3, timeout=150.0, settle_s=1.5, click=False)
        rest, dragged = shots["rest"][region], shots["dragged"][region]
        assert object_mask(rest).sum() > 300, "the capture is not visible in the page"
        moved = np.abs(dragged.astype(int) - rest.astype(int)).max(axis=2) > 40
        assert moved.sum() > 100, "the drag did not change the picture"

        from physskin_gs_viewer.testing import HeadlessChromium

        browser = HeadlessChromium(app.url, w, h, timeout=60.0)
        try:
            from physskin_gs_viewer.screenshots import wait_stable

            on = wait_stable(browser, region, 150.0)
            app.gui["view_colour"].value = False
            time.sleep(2.0)
            off = wait_stable(browser, region, 150.0)
        finally:
            browser.close()
        obj = object_mask(on[region]) | object_mask(off[region])
        diff = np.abs(on[region].astype(int) - off[region].astype(int)).max(axis=2)
        assert (diff[obj] > 8).mean() > 0.05, "the view-dependent colour toggle did not change the object's colours"
        assert app.error_log == []
    finally:
        app.stop()
        quiet.close()
