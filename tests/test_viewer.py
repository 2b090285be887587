"""Viewer tests without a browser: helpers, the simulation worker, and the live app over viser's websocket.

The websocket client (physskin_gs_viewer.testing.ViserWsClient) speaks the same messages a browser sends
(rendering.md section 5). The AnimatedScene is the toy FakeAnimatedScene here; tests/test_viewer_pipeline.py
runs the real pipeline. Every wait is bounded; servers bind 127.0.0.1 on a free port.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

viser = pytest.importorskip("viser")
pytest.importorskip("websockets")
pytest.importorskip("msgspec")

from physskin_gs.errors import OptionError, SceneFormatError  # noqa: E402
from physskin_gs_viewer import app as appmod  # noqa: E402
from physskin_gs_viewer.app import DISPLAY_CLIENT, DISPLAY_TORCH, ViewerApp, run_viewer  # noqa: E402
from physskin_gs_viewer.camera import CameraState, look_at_wxyz, quat_wxyz_to_rotmat, viewmat_and_K  # noqa: E402
from physskin_gs_viewer.recorder import Recorder  # noqa: E402
from physskin_gs_viewer.sim import SimWorker  # noqa: E402
from physskin_gs_viewer.splats import pick_point, to_wire, weight_colors  # noqa: E402
from physskin_gs_viewer.testing import FakeAnimatedScene, ViserWsClient, make_blob_scene, wait_until  # noqa: E402


# ------------------------------------------------------------------------------------------- helpers
def test_pick_point_returns_front_surface_point_under_ray():
    # Two points on the ray at depths 2 and 5, one off-ray point nearer the camera.
    pts = np.array([[0.0, 0.0, 5.0], [0.001, 0.0, 2.0], [1.0, 0.0, 1.0]])
    pick = pick_point(pts, origin=[0, 0, 0], direction=[0, 0, 2.0], radius=0.01)
    assert pick is not None and pick.index == 1
    assert pick.depth == pytest.approx(2.0)
    # Behind the camera or too far from the ray: no pick.
    assert pick_point(pts, origin=[0, 0, 10], direction=[0, 0, 1], radius=0.01) is None
    assert pick_point(pts, origin=[0, 0, 0], direction=[0, 1, 0], radius=0.01) is None


def test_wire_scaling_keeps_small_covariances_through_float16():
    # A splat with sigma = 1e-4 (variance 1e-8, as in trained scenes) in a unit-size scene.
    var = 1e-8
    cov = np.diag([var, 4 * var, 9 * var])[None].astype(np.float32)
    naive = cov.astype(np.float16).astype(np.float32)
    assert abs(naive[0, 0, 0] - var) / var > 0.1  # float16 alone loses it (subnormal)
    s = appmod.display_scale(1.0)
    _, v = to_wire(np.zeros((1, 3)), cov, s)
    back = v.astype(np.float16).astype(np.float32) / (s * s)
    np.testing.assert_allclose(np.diagonal(back[0]), [var, 4 * var, 9 * var], rtol=2e-3)
    # Huge covariances are clipped to the float16 range instead of becoming inf.
    _, v = to_wire(np.zeros((1, 3)), np.eye(3)[None] * 1e6, s)
    assert np.isfinite(v.astype(np.float16)).all()


def test_camera_conversion_projects_look_at_to_image_centre():
    pos, target, up = np.array([2.0, -3.0, 1.5]), np.array([0.1, 0.2, 0.3]), np.array([0.0, 0.0, 1.0])
    wxyz = look_at_wxyz(pos, target, up)
    R = quat_wxyz_to_rotmat(wxyz)
    np.testing.assert_allclose(R @ R.T, np.eye(3), atol=1e-9)
    assert np.linalg.det(R) == pytest.approx(1.0)
    cam = CameraState(tuple(wxyz), tuple(pos), fov=0.8, aspect=4 / 3)
    viewmat, K = viewmat_and_K(cam, 320, 240)
    p = viewmat @ np.append(target, 1.0)
    assert p[2] == pytest.approx(np.linalg.norm(target - pos), rel=1e-5)  # +z forward
    uv = (K @ p[:3])[:2] / p[2]
    np.testing.assert_allclose(uv, [160.0, 120.0], atol=1e-3)
    # A point above the target (world up) lands above the centre (smaller v): OpenCV +y is down.
    q = viewmat @ np.append(target + 0.1 * up, 1.0)
    assert (K @ q[:3])[1] / q[2] < 120.0
    assert K[1, 1] == pytest.approx(240 / (2 * np.tan(0.4)))


def test_weight_colors_argmax_and_single_handle():
    w = np.array([[0.9, 0.1], [0.2, 0.8], [0.5, 0.5]], dtype=np.float32)
    allc = weight_colors(w, None)
    assert allc.shape == (3, 3)
    assert not np.allclose(allc[0], allc[1])  # different argmax handles get different colours
    one = weight_colors(w, 1)
    assert one[1].sum() > one[0].sum()  # bigger weight is brighter along viridis (dark purple -> yellow)


# ------------------------------------------------------------------------------------------- sim worker
def test_sim_worker_drag_moves_toward_target_and_release_springs_back():
    anim = FakeAnimatedScene(make_blob_scene(500), num_handles=3)
    w = SimWorker(anim, realtime=False).start()
    try:
        h0 = anim.handle_positions()[2].copy()
        target = h0 + np.array([0.0, 0.0, 0.3])
        w.begin_handle_drag(("c", "/handles/h2"), 2, target=h0)
        w.move_drag(("c", "/handles/h2"), target)
        w.set_playing(True)
        assert wait_until(lambda: anim.frame > 60, 10)
        h1 = anim.handle_positions()[2]
        assert np.linalg.norm(h1 - target) < 0.5 * np.linalg.norm(h0 - target)
        frame = w.slot.get()
        assert frame.means.shape == (500, 3) and frame.covars.shape == (500, 3, 3)
        w.end_drag(("c", "/handles/h2"))
        assert wait_until(lambda: anim.num_drags == 0, 5)
        f0 = anim.frame
        assert wait_until(lambda: anim.frame > f0 + 150, 10)
        assert np.linalg.norm(anim.handle_positions()[2] - h0) < 0.3 * np.linalg.norm(h1 - h0)
    finally:
        w.stop()


class _SlowDragScene(FakeAnimatedScene):
    """A FakeAnimatedScene whose steps take ``step_s`` wall seconds and which records each step's drag target."""

    def __init__(self, *a, step_s: float = 0.09, **kw) -> None:
        super().__init__(*a, **kw)
        self.step_s = step_s
        self.seen = []  # (frame, target x) per step while a drag is held
        self.ended_at = None

    def step(self, n: int = 1) -> dict:
        if self._drags:
            self.seen.append((self.frame, float(next(iter(self._drags.values()))["target"][0])))
        time.sleep(self.step_s)
        return super().step(n)

    def end_drag(self, drag_id: int) -> None:
        self.ended_at = self.frame
        super().end_drag(drag_id)


def test_a_slow_simulation_replays_the_drag_at_the_pointers_speed_and_completes_it():
    """Steps three times slower than real time (0.09 s for dt 0.03): each step sees the pointer's path advanced
    by about dt x (1 + lag / REPLAY_TAU) of wall time, not by the 0.09 s the step took (the wall-clock target made
    each slow step see a bigger jump, so a push into another body slowed every step further); after the release
    the replay finishes the gesture, reaching the pointer's last target, before the drag ends; the caller sees
    the drag closed at once."""
    anim = _SlowDragScene(make_blob_scene(200), num_handles=2)
    anim.dt = 0.03
    w = SimWorker(anim, realtime=True).start()
    key = ("c", "/handles/h1")
    try:
        w.set_playing(True)
        h0 = np.asarray(anim.handle_positions()[1], dtype=np.float64)
        w.begin_handle_drag(key, 1, target=h0)
        speed = 1.0  # units per wall second along x
        t0 = time.perf_counter()
        while (el := time.perf_counter() - t0) < 0.6:
            w.move_drag(key, h0 + np.array([speed * el, 0.0, 0.0]))
            time.sleep(0.01)
        w.move_drag(key, h0 + np.array([speed * 0.6, 0.0, 0.0]))
        w.end_drag(key)
        assert w.open_drags() == 0  # closed for the caller at once
        assert wait_until(lambda: anim.ended_at is not None, 10)
        xs = np.array([x for _, x in anim.seen]) - h0[0]
        steps = np.diff(xs)
        # each step's advance: dt (1 + lag / tau) of the path, the lag at most the 0.6 s gesture
        bound = speed * anim.dt * (1.0 + 0.6 / SimWorker.REPLAY_TAU)
        assert steps.max() <= bound + 1e-9, (steps, bound)
        assert steps[:3].max() <= speed * anim.dt * 1.6  # no lag yet: about dt of the path per step, not 0.09 s
        assert xs[-1] == pytest.approx(speed * 0.6, abs=1e-9)  # the gesture completed before the release
        assert (steps >= -1e-12).all()  # along the path, never back
    finally:
        w.stop()


def test_sim_worker_survives_step_exception_and_reports_it():
    anim = FakeAnimatedScene(make_blob_scene(200), num_handles=2)
    errors = []
    w = SimWorker(anim, realtime=False, on_error=lambda where, exc, tb: errors.append((where, str(exc)))).start()
    try:
        anim.fail_next_step = True
        w.set_playing(True)
        assert wait_until(lambda: errors, 5)
        assert errors[0][0] == "simulation step" and "fake solver failure" in errors[0][1]
        assert not w.playing and w.alive
        f = anim.frame
        w.set_playing(True)
        assert wait_until(lambda: anim.frame > f + 5, 5)
    finally:
        w.stop()


def test_sim_worker_restarts_from_rest_when_the_solver_is_stuck():
    """A fresh user's cow flattened at E 100 Pa and then given 240000 Pa stayed flat: every step failed (the state
    kept, the velocity zeroed) at 3-5 steps/s until a Reset. After STUCK_STEPS failed steps in a row the worker
    restarts from rest and says so; steps that fail now and then do not trigger it."""
    anim = FakeAnimatedScene(make_blob_scene(200), num_handles=2)
    pattern = []  # the next steps' "failed" flags (empty: 0)
    real_step = anim.step

    def step(n=1):
        st = real_step(n)
        st["failed"] = pattern.pop(0) if pattern else 0
        return st

    anim.step = step
    resets, notices = [], []
    real_reset = anim.reset
    anim.reset = lambda: (resets.append(anim.frame), real_reset())
    w = SimWorker(anim, realtime=False, on_notice=lambda title, text: notices.append((title, text))).start()
    try:
        pattern.extend([1] * (SimWorker.STUCK_STEPS - 1) + [0] + [1] * (SimWorker.STUCK_STEPS - 1) + [0])
        w.step_once(2 * SimWorker.STUCK_STEPS)
        assert wait_until(lambda: not pattern, 5)
        time.sleep(0.1)
        assert resets == [] and notices == []  # interrupted runs of failures: nothing
        pattern.extend([1] * SimWorker.STUCK_STEPS)
        w.step_once(SimWorker.STUCK_STEPS)
        assert wait_until(lambda: len(resets) == 1 and notices, 5)
        assert notices[0][0] == "restarted from rest" and "could not take" in notices[0][1]
    finally:
        w.stop()


# ------------------------------------------------------------------------------------------- live app over websocket
@pytest.fixture
def live_app():
    anim = FakeAnimatedScene(make_blob_scene(1500), num_handles=4)
    app = ViewerApp(anim, None, host="127.0.0.1", port=0)
    app.start()
    clients = []
    try:
        assert app.wait_ready(20), app.failed
        yield app, anim, clients
    finally:
        for c in clients:
            c.close()
        app.stop()


def connect(app, clients, position=(2.0, 2.0, 1.0)) -> ViserWsClient:
    c = ViserWsClient(app.port)
    clients.append(c)
    n = len(app.server.get_clients())
    c.send_camera(position, (0.0, 0.0, 0.0))
    assert wait_until(lambda: len(app.server.get_clients()) > n, 10)
    return c


def splat_centres(msg, s) -> np.ndarray:
    buf = np.asarray(msg["updates"]["buffer"]).view(np.uint32).reshape(-1, 8)
    return buf[:, 0:3].copy().view(np.float32) / s


def test_server_binds_localhost_and_serves_page(live_app):
    import urllib.request

    app, _, _ = live_app
    assert app.server.get_host() == "127.0.0.1"
    with urllib.request.urlopen(app.url, timeout=10) as r:
        assert r.status == 200 and b"<html" in r.read(2000).lower()


def test_websocket_drag_handle_moves_simulation_and_release_springs_back(live_app):
    app, anim, clients = live_app
    c = connect(app, clients)
    name = "/handles/h3"
    assert wait_until(lambda: c.get("TransformControlsMessage", name) is not None, 5)
    h0 = anim.handle_positions()[3].copy()
    target = h0 + np.array([0.0, 0.0, 0.4])
    c.drag_start(name)
    for k in range(1, 6):
        c.drag_to(name, h0 + k / 5 * (target - h0))
        time.sleep(0.02)
    assert wait_until(lambda: np.linalg.norm(anim.handle_positions()[3] - target) < 0.4 * 0.4, 10)
    assert anim.num_drags == 1
    # The client receives splat buffers whose centres moved toward the target.
    s = app.live.s
    rest_z = anim.x0[:, 2]

    def moved_on_wire():
        m = c.get("SceneNodeUpdateMessage", "/scene/moving")
        return m is not None and "buffer" in m["updates"] and (splat_centres(m, s)[:, 2] - rest_z).max() > 0.1

    assert wait_until(moved_on_wire, 10)
    c.drag_end(name)
    assert wait_until(lambda: anim.num_drags == 0 and app.live.worker.open_drags() == 0, 5)
    # Released: the handle springs back toward rest (the fake's spring + damping).
    assert wait_until(lambda: np.linalg.norm(anim.handle_positions()[3] - h0) < 0.05, 10)
    assert app.error_log == []


def test_closing_tab_mid_drag_leaves_no_spring(live_app):
    app, anim, clients = live_app
    c = connect(app, clients)
    name = "/handles/h0"
    assert wait_until(lambda: c.get("TransformControlsMessage", name) is not None, 5)
    h0 = anim.handle_positions()[0]
    c.drag_start(name)
    c.drag_to(name, h0 + np.array([0.0, 0.3, 0.0]))
    assert wait_until(lambda: anim.num_drags == 1, 5)
    c.close()  # the tab goes away mid-drag, no drag-end message
    assert wait_until(lambda: len(app.server.get_clients()) == 0, 10)
    assert wait_until(lambda: anim.num_drags == 0 and app.live.worker.open_drags() == 0, 5)


def test_several_tabs_get_updates_and_drag_independently(live_app):
    app, anim, clients = live_app
    a = connect(app, clients, (2.0, 2.0, 1.0))
    b = connect(app, clients, (-2.0, 1.0, 0.5))
    assert len(app.server.get_clients()) == 2
    for c, h in ((a, "/handles/h0"), (b, "/handles/h3")):
        c.drag_start(h)
        c.drag_to(h, np.array([0.0, 0.0, 0.3]))
    assert wait_until(lambda: anim.num_drags == 2, 5)
    # Both tabs see the object move (an unchanged buffer sends nothing, so updates mean motion).
    for c in (a, b):
        assert wait_until(lambda c=c: c.count("SceneNodeUpdateMessage") > 3, 10)
    b.close()
    assert wait_until(lambda: anim.num_drags == 1, 10)  # only b's drag went away
    a.drag_end("/handles/h0")
    assert wait_until(lambda: anim.num_drags == 0, 5)


def test_gui_messages_reach_the_simulation(live_app):
    app, anim, clients = live_app
    c = connect(app, clients)
    c.gui_set(app.gui["E"], 5e4)
    c.gui_set(app.gui["nu"], 0.3)
    c.gui_set(app.gui["dt"], 0.01)
    assert wait_until(lambda: anim.material["E"] == 5e4 and anim.material["nu"] == 0.3 and anim.dt == 0.01, 5)
    c.gui_set(app.gui["gravity_dir"], "+x")
    c.gui_set(app.gui["floor"], False)
    assert wait_until(lambda: anim.floor[0] is False, 5)
    assert wait_until(lambda: getattr(anim, "gravity_direction", None) is not None
                      and np.array_equal(anim.gravity_direction, [1.0, 0.0, 0.0]), 5)
    # Pause: frames stop advancing.
    app.gui["play"]._impl  # noqa: B018 - the handle exists
    app.live.worker.set_playing(False)
    time.sleep(0.1)
    f = anim.frame
    time.sleep(0.2)
    assert anim.frame == f
    # the stats line says it is paused (it kept the last running rates)
    assert wait_until(lambda: app.gui["stats"].content.startswith("**paused** · frame"), 5), app.gui["stats"].content
    app.live.worker.step_once()
    assert wait_until(lambda: anim.frame == f + 1, 5)


def test_step_exception_is_shown_in_page_and_server_keeps_running(live_app):
    app, anim, clients = live_app
    c = connect(app, clients)
    anim.fail_next_step = True
    assert wait_until(lambda: app.gui["error"].visible, 5)
    assert "fake solver failure" in app.gui["error"].content
    assert wait_until(lambda: c.count("NotificationShowMessage") >= 1, 5)
    # Still serving: a new tab connects, and play resumes the simulation.
    connect(app, clients)
    f = anim.frame
    app.live.worker.set_playing(True)
    assert wait_until(lambda: anim.frame > f + 3, 5)


def test_click_to_grab_places_gizmo_and_pulls(live_app):
    app, anim, clients = live_app
    c = connect(app, clients)
    cid = next(iter(app.server.get_clients()))
    # Ray from above straight down through the bar's right end.
    x_end = anim.x0[:, 0].max() - 0.05
    c.click(origin=[x_end, 0.0, 3.0], direction=[0.0, 0.0, -1.0])
    assert wait_until(lambda: cid in app._grabs, 5)
    g = app._grabs[cid]
    p = np.asarray(g.position)
    assert abs(p[0] - x_end) < 0.05 and p[2] > anim.x0[:, 2].max() - 0.05  # top surface under the ray
    owner = str(cid)
    c.drag_start("/grab", owner=owner)
    c.drag_to("/grab", p + np.array([0.0, 0.0, 0.5]), owner=owner)
    assert wait_until(lambda: anim.num_drags == 1, 5)
    assert wait_until(lambda: anim._positions()[:, 2].max() > anim.x0[:, 2].max() + 0.1, 10)
    c.drag_end("/grab", owner=owner)
    assert wait_until(lambda: anim.num_drags == 0 and cid not in app._grabs, 5)
    # A click that misses the object grabs nothing.
    c.click(origin=[0.0, 5.0, 3.0], direction=[0.0, 0.0, -1.0])
    time.sleep(0.3)
    assert cid not in app._grabs


def test_server_render_mode_sends_background_images(live_app, monkeypatch):
    app, anim, clients = live_app
    calls = []

    def fake_render(frame, cam, w, h, colors, opac, backend):
        calls.append((w, h, backend))
        return np.full((h, w, 3), 128, np.uint8)

    monkeypatch.setattr(appmod, "ClientRenderThread", _with_render(appmod.ClientRenderThread, fake_render))
    c = connect(app, clients)
    app.set_display_mode(DISPLAY_TORCH)
    assert wait_until(lambda: c.count("BackgroundImageMessage") >= 3, 10)
    assert calls and calls[0][2] == "torch"
    assert not app.live.moving_node.visible
    app.set_display_mode(DISPLAY_CLIENT)
    assert app.live.moving_node.visible and not app._renderers


def _with_render(cls, fn):
    def make(*args, **kwargs):
        kwargs["render_fn"] = fn
        return cls(*args, **kwargs)

    return make


def test_field_dropdown_recolours_splats(live_app):
    app, anim, clients = live_app
    before = app.live.live_rgb.copy()
    app._apply_field("all handles (argmax)")
    assert wait_until(lambda: not np.allclose(app.live.live_rgb, before), 5)
    argmax = np.argmax(anim.W, axis=1)
    rgb = app.live.live_rgb
    assert np.allclose(rgb[argmax == 0].std(0), rgb[argmax == 0].std(0))  # well-defined
    assert not np.allclose(rgb[argmax == 0].mean(0), rgb[argmax == 3].mean(0))
    app._apply_field("scene colours")
    assert wait_until(lambda: np.allclose(app.live.live_rgb, before), 5)


# ------------------------------------------------------------------------------------------- recording
def test_recorder_writes_sequence_and_refuses_to_overwrite(tmp_path):
    anim = FakeAnimatedScene(make_blob_scene(100), num_handles=2)
    saved = []
    rec = Recorder(tmp_path / "rec", dt=0.02, meta={"source": "x.ply", "up_axis": [0, 0, 1]},
                   save_fn=lambda s, p: (saved.append(p), p.write_bytes(b"ply")))
    for _ in range(3):
        anim.step()
        rec.add(anim)
    out = rec.stop()
    meta = json.loads((out / "sequence.json").read_text())
    assert [p.name for p in saved] == ["frame0001.ply", "frame0002.ply", "frame0003.ply"]
    assert meta["frames"] == 3 and meta["fps"] == pytest.approx(50.0) and meta["pattern"] == "frame%04d.ply"
    assert meta["format"] == "physskin_gs sequence 1" and meta["source"] == "x.ply" and meta["up_axis"] == [0, 0, 1]
    with pytest.raises(Exception, match="already holds a recording"):
        Recorder(tmp_path / "rec", dt=0.02)


def test_recorder_steps_per_frame_writes_one_step_in_n(tmp_path):
    """A recording of every third step writes steps 1, 4, 7 (the first step included) as frames 1-3, and says its
    rate in sequence.json (a fresh user's recordings wrote every step, about 50 MB a second, with no rate option)."""
    anim = FakeAnimatedScene(make_blob_scene(50), num_handles=2)
    saved = []
    rec = Recorder(tmp_path / "rec", dt=0.02, steps_per_frame=3,
                   save_fn=lambda s, p: (saved.append((p.name, s.frame_step)), p.write_bytes(b"ply")))
    orig = anim.deformed_scene

    def tagged():
        sc = orig()
        sc.frame_step = anim.frame  # the step this frame was taken after
        return sc

    anim.deformed_scene = tagged
    for _ in range(8):
        anim.step()
        rec.add(anim)
    meta = json.loads((rec.stop() / "sequence.json").read_text())
    assert saved == [("frame0001.ply", 1), ("frame0002.ply", 4), ("frame0003.ply", 7)]
    assert meta["frames"] == 3 and meta["steps_per_frame"] == 3
    assert meta["fps"] == pytest.approx(50.0 / 3) and meta["dt"] == pytest.approx(0.02)
    for bad in (0, -1, 2.5, 1001, True):
        with pytest.raises(OptionError, match="steps per frame"):
            Recorder(tmp_path / f"bad{bad}", dt=0.02, steps_per_frame=bad)
    assert not any(tmp_path.glob("bad*"))  # refused before any folder was made


def test_record_folder_steps_per_frame_field(live_app, tmp_path):
    """The Record folder's "steps per frame" reaches the recording; a typed value is rounded into 1 .. 1000."""
    app, anim, clients = live_app
    app.gui["record_every"].value = 4
    out = app.start_recording(out_dir=tmp_path / "rec4")
    assert "one step in 4" in app.gui["record_status"].content
    assert wait_until(lambda: app._recorder is not None and app._recorder.written >= 2, 10)
    rec = app._recorder
    app.stop_recording()
    meta = json.loads((out / "sequence.json").read_text())
    assert meta["steps_per_frame"] == 4 and meta["fps"] == pytest.approx(1.0 / (4 * anim.dt))
    assert meta["frames"] == len(list(out.glob("frame*.ply"))) == (rec.steps + 3) // 4
    for typed, got in ((0, 1), (3.0, 3), (5000, 1000), (-3, 1)):
        app.gui["record_every"].value = typed
        assert app.recording.steps_per_frame() == got, typed
        assert app.gui["record_every"].value == got  # the field shows what is used (it kept 0, -3, 1e9)
    assert "set to 1" in app.gui["record_status"].content


def test_record_button_flow_writes_reloadable_frames(live_app, tmp_path, monkeypatch):
    io = pytest.importorskip("physskin_gs.io")
    if not hasattr(io, "save_scene") or not hasattr(io, "load_scene"):
        pytest.skip("physskin_gs.io.save_scene/load_scene not available yet")
    app, anim, clients = live_app
    out = app.start_recording(out_dir=tmp_path / "rec")
    assert wait_until(lambda: app._recorder is not None and app._recorder.written >= 3, 10)
    app.stop_recording()
    frames = sorted(out.glob("frame*.ply"))
    meta = json.loads((out / "sequence.json").read_text())
    assert len(frames) == meta["frames"] >= 3
    back = io.load_scene(frames[-1])
    assert back.num_gaussians == anim.scene.num_gaussians
    # two time-stamped recordings within one second: two folders (the second was refused); the clock is held
    from datetime import datetime

    import physskin_gs_viewer.recording as recording_mod

    class _Frozen(datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime(2026, 12, 6, 12, 0, 0)

    monkeypatch.setattr(recording_mod, "datetime", _Frozen)
    app.gui["record_dir"].value = str(tmp_path / "recs")
    firsts = []
    for _ in range(2):
        firsts.append(app.start_recording())
        assert wait_until(lambda: app._recorder is not None and app._recorder.written >= 1, 10)
        app.stop_recording()
    assert firsts[0] != firsts[1] and all((f / "sequence.json").exists() for f in firsts), firsts
    # paused: nothing is recorded, and no folder of 0 frames is left (it held a 0-frame sequence.json)
    app.live.worker.set_playing(False)
    time.sleep(0.2)
    paused = app.start_recording(out_dir=tmp_path / "paused")
    assert app.stop_recording() is None and not paused.exists()
    assert "nothing recorded" in app.gui["record_status"].content


# ------------------------------------------------------------------------------------------- bad input
def test_bad_path_fails_before_any_server_starts(tmp_path, monkeypatch):
    started = []
    monkeypatch.setattr(viser, "ViserServer", lambda *a, **k: started.append(1))
    with pytest.raises(FileNotFoundError, match="missing.ply"):
        ViewerApp(tmp_path / "missing.ply")
    with pytest.raises(SceneFormatError, match="folder"):
        ViewerApp(tmp_path)
    bad = tmp_path / "bad.ply"
    bad.write_bytes(b"this is not a ply file\n")
    with pytest.raises(Exception) as info:
        ViewerApp(bad)
    assert "bad.ply" in str(info.value)

    class Args:
        path = str(tmp_path / "missing.ply")
        host = "127.0.0.1"
        port = 0

    with pytest.raises(FileNotFoundError):
        run_viewer(Args())
    assert started == []


def test_render_frame_torch_backend_shows_object_at_image_centre():
    render = pytest.importorskip("physskin_gs.render")
    if not callable(getattr(render, "rasterize", None)):
        pytest.skip("physskin_gs.render.rasterize not available")
    from physskin_gs_viewer.render_server import render_frame
    from physskin_gs_viewer.sim import Frame, snapshot_tensor, to_numpy

    scene = make_blob_scene(800, log_scale=-3.5)  # colour ramps from blue (x=-0.5) to red (x=+0.5)
    frame = Frame(1, 0, snapshot_tensor(scene.means), snapshot_tensor(scene.covariances()), np.zeros((0, 3), np.float32))
    pos, target = np.array([0.0, -2.0, 0.0]), np.zeros(3)
    cam = CameraState(tuple(look_at_wxyz(pos, target, (0, 0, 1))), tuple(pos), 0.8, 4 / 3)
    rgb = np.clip(0.5 + 0.28209479177387814 * to_numpy(scene.sh_dc), 0, 1)
    img = render_frame(frame, cam, 96, 72, rgb, to_numpy(scene.opacities), "torch", background=(1.0, 1.0, 1.0))
    assert img.shape == (72, 96, 3) and img.dtype == np.uint8
    assert (img[0, 0] == 255).all()  # corner: background
    centre = img[36, 48].astype(int)
    assert centre.sum() < 600  # covered by the object
    # Camera looks along +y with x to the right: the red end (+x) is on the right, blue on the left.
    left, right = img[36, 30].astype(int), img[36, 66].astype(int)
    assert right[0] > right[2] and left[2] > left[0]


# ------------------------------------------------------------------------------------------- path flow (fake pipeline)
@pytest.fixture
def fake_pipeline(monkeypatch):
    """A stand-in ``physskin_gs.pipeline`` module (same names) whose prepare_animation reports progress."""
    import sys
    import types

    from physskin_gs_viewer.testing import FakeAnimationConfig as AnimationConfig

    calls = []

    def load_for_animation(path):
        from physskin_gs.io import load_scene

        return load_scene(path)

    def prepare_animation(scene, config, progress=None):
        calls.append(config.skinning)
        for msg, f in (("interior fill", 0.0), ("interior fill", 1.0), ("skinning", 0.5), ("skinning", 1.0)):
            if progress is not None:
                progress(msg, f)
        return FakeAnimatedScene(scene, num_handles=3)

    mod = types.ModuleType("physskin_gs.pipeline")
    mod.AnimationConfig = AnimationConfig
    mod.load_for_animation = load_for_animation
    mod.prepare_animation = prepare_animation
    monkeypatch.setitem(sys.modules, "physskin_gs.pipeline", mod)
    return mod, calls


def test_path_flow_shows_progress_in_terminal_and_page_and_switches_skinning(splat_file, fake_pipeline, capsys):
    pytest.importorskip("physskin_gs.io")
    mod, calls = fake_pipeline
    path = splat_file("spot_mesh2splat_10k.splat")

    class Args:
        pass

    args = Args()
    args.path, args.E, args.skinning = str(path), 3e4, "pretrained"
    app = ViewerApp(path, appmod.config_from_args(args), port=0)
    assert app.config.E == 3e4 and app.config.nu == 0.45
    app.start()
    try:
        assert app.wait_ready(30), app.failed
        err = capsys.readouterr().err
        assert "interior fill" in err and "skinning: 100%" in err
        assert "10,000 Gaussians" in app.gui["status"].content
        assert not app.gui["progress"].visible
        first = app.live.anim
        app.gui["skinning"].value = "fit"  # server-side set fires on_update like a browser would
        assert wait_until(lambda: app.live is not None and app.live.anim is not first, 20)
        assert calls == ["pretrained", "fit"]
        assert not first.num_drags and app.live.worker.alive
    finally:
        app.stop()


def test_run_viewer_prints_url_serves_and_stops_cleanly_on_ctrl_c(splat_file, fake_pipeline, monkeypatch, capsys):
    import urllib.request

    pytest.importorskip("physskin_gs.io")
    seen = {}

    def serve(app):
        seen["host"] = app.server.get_host()
        assert app.wait_ready(30), app.failed
        with urllib.request.urlopen(app.url, timeout=10) as r:
            seen["status"] = r.status
        seen["app"] = app
        raise KeyboardInterrupt  # the user presses Ctrl-C

    monkeypatch.setattr(appmod, "_serve_until_interrupt", serve)

    class Args:
        path = str(splat_file("spot_mesh2splat_10k.splat"))
        host = None  # not given: 127.0.0.1
        port = 0
        E = 1e4

    assert run_viewer(Args()) == 0
    out = capsys.readouterr()
    assert f"viewer running at {seen['app'].url}" in out.out
    assert seen == {"host": "127.0.0.1", "status": 200, "app": seen["app"]}
    assert seen["app"].config.E == 1e4
    assert not seen["app"].live.worker.alive  # simulation thread stopped
    with pytest.raises(OSError):  # nothing listens any more
        urllib.request.urlopen(seen["app"].url, timeout=2)


def test_stop_ends_a_running_preparation_at_its_next_stage(splat_file, fake_pipeline):
    """Ctrl-C during a preparation: stop() makes the next progress report raise PreparationCancelled, waits for the
    thread, and the prepared scene is never activated (no simulation thread is started on a stopped server)."""
    import threading

    from physskin_gs_viewer.switching import PreparationCancelled

    pytest.importorskip("physskin_gs.io")
    mod, calls = fake_pipeline
    entered, release, outcome = threading.Event(), threading.Event(), {}

    def prepare_animation(scene, config, progress=None):
        progress("stage 1", 0.0)
        entered.set()
        release.wait(30)  # a long stage, inside numpy / torch in real life
        try:
            progress("stage 2", 0.5)
        except PreparationCancelled as exc:
            outcome["cancelled"] = exc
            raise
        return FakeAnimatedScene(scene, num_handles=3)

    mod.prepare_animation = prepare_animation
    app = ViewerApp(splat_file("spot_mesh2splat_10k.splat"), None, port=0)
    app.start()
    assert entered.wait(30)
    assert app.preparing
    stopper = threading.Thread(target=app.stop)
    stopper.start()
    assert wait_until(lambda: app._stop.is_set(), 10)
    release.set()  # the stage ends; the next report sees the stop
    stopper.join(30)
    assert not stopper.is_alive()
    assert isinstance(outcome.get("cancelled"), PreparationCancelled)
    assert not app.preparing
    assert app.live is None and not app.ready.is_set() and app.failed is None


def test_fast_splat_packing_matches_viser_set_gaussians():
    from physskin_gs_viewer.splats import pack_splat_buffer, rgba_u32

    rng = np.random.default_rng(0)
    n = 300
    means = rng.normal(size=(n, 3)).astype(np.float32)
    A = rng.normal(size=(n, 3, 3)).astype(np.float32) * 0.01
    covars = A @ A.transpose(0, 2, 1)
    covars[0, 0, 0] = np.nan  # non-finite -> 0 in both paths
    rgbs = rng.random((n, 3)).astype(np.float32)
    opac = rng.random(n).astype(np.float32)
    s = 37.0
    server = viser.ViserServer(host="127.0.0.1", port=0, verbose=False)
    try:
        c, v = to_wire(means, covars, s)
        ref = server.scene.add_gaussian_splats("/ref", c, v, rgbs, opac[:, None])
        ref.set_gaussians(c, v, rgbs, opac[:, None])
        fast = pack_splat_buffer(means, covars, s, rgba_u32(rgbs, opac))
        np.testing.assert_array_equal(fast, ref.buffer)
    finally:
        server.stop()
    # Decoding gives back the inputs (centres exactly, covariances to float16 precision).
    np.testing.assert_allclose(fast[:, :3].copy().view(np.float32) / s, means, rtol=1e-6)
    tri = fast[1:, 4:7].copy().view(np.float16).astype(np.float32) / s**2
    np.testing.assert_allclose(tri, covars[1:].reshape(-1, 9)[:, [0, 1, 2, 4, 5, 8]], rtol=2e-3, atol=1e-6)


# ------------------------------------------------------------------------------------------- frame dropping / adaptation
def test_latest_slot_keeps_only_newest_frame():
    from physskin_gs_viewer.sim import Frame, LatestSlot

    slot = LatestSlot()
    assert slot.wait_newer(0, timeout=0.05) is None  # bounded wait, nothing yet
    for v in (1, 2, 3):
        slot.put(Frame(v, v, None, None, np.zeros((0, 3))))
    f = slot.wait_newer(0, timeout=1.0)
    assert f.version == 3  # 1 and 2 were dropped, not queued
    assert slot.wait_newer(3, timeout=0.05) is None


def test_slow_display_drops_frames_and_does_not_slow_the_simulation(monkeypatch):
    anim = FakeAnimatedScene(make_blob_scene(300), num_handles=2)
    app = ViewerApp(anim, None, port=0, realtime=False)
    real_push = ViewerApp._push_splats

    def slow_push(self, live, frame):
        time.sleep(0.15)  # a slow client update
        real_push(self, live, frame)

    monkeypatch.setattr(ViewerApp, "_push_splats", slow_push)
    app.start()
    try:
        assert app.wait_ready(20)
        f0, d0 = anim.frame, app.display_updates
        time.sleep(1.5)
        steps, shown = anim.frame - f0, app.display_updates - d0
        assert shown <= 12  # about 1.5 s / 0.15 s
        assert steps > 5 * max(shown, 1)  # the simulation ran on; stale frames were skipped
    finally:
        app.stop()


def test_render_resolution_adapts_to_render_time():
    from physskin_gs_viewer.render_server import ClientRenderThread
    from physskin_gs_viewer.sim import LatestSlot

    class FakeClient:
        client_id = 7

    r = ClientRenderThread(FakeClient(), LatestSlot(), lambda: (None, None), target_fps=10.0,
                           initial_height=400, min_height=64, max_height=1080)
    r._adapt(0.4, viewport_h=720)  # 4x too slow: shrink (at most halve per step)
    assert r.height == 200
    for _ in range(20):
        r._adapt(0.01, viewport_h=720)  # very fast: grow, but never past the viewport
    assert r.height == 720
    for _ in range(20):
        r._adapt(10.0, viewport_h=720)
    assert r.height == 64


def test_xray_lowers_sent_opacity(live_app):
    app, anim, clients = live_app
    c = connect(app, clients)
    app.set_xray(True)

    def alpha_on_wire():
        m = c.get("SceneNodeUpdateMessage", "/scene/moving")
        if m is None or "buffer" not in m["updates"]:
            return None
        rgba = np.asarray(m["updates"]["buffer"]).view(np.uint32).reshape(-1, 8)[:, 7].copy().view(np.uint8)
        return rgba.reshape(-1, 4)[:, 3]

    expected = np.clip(anim.scene.opacities.numpy() * appmod.XRAY_OPACITY * 255, 0, 255).astype(np.uint8)
    assert wait_until(lambda: alpha_on_wire() is not None and np.array_equal(alpha_on_wire(), expected), 10)


def test_viewer_says_the_default_was_raised_and_offers_it_as_a_preset(splat_file):
    """The demo cow with the default material, raised until it stands (animate's config): the terminal gets
    animate's lines (the raise, the scale), and the Material dropdown starts at "soft, raised to stand", a preset
    that gives the raised E back after trying another material (a fresh user's cat lost it for good)."""
    import io

    from physskin_gs.materials import MATERIALS
    from physskin_gs.pipeline import STAND_SAG, AnimationConfig

    soft = MATERIALS["soft"]
    cfg = AnimationConfig(material="soft", E=soft.E, nu=soft.nu, density=soft.density, stand_sag=STAND_SAG,
                          num_cubature=256)
    log = io.StringIO()
    app = ViewerApp(splat_file("spot_mesh2splat_10k.splat"), cfg, port=0, progress_stream=log, play=False)
    app.start()
    try:
        assert app.wait_ready(90), app.failed
        stand = app.live.anim.info["stand"]
        assert stand["E_to"] > soft.E
        text = log.getvalue()
        assert f"material soft: E {soft.E:g} -> {stand['E_to']:g} Pa, so that its own weight bends it" in text, text
        assert "10000 moving Gaussians" in text and "m/unit, material soft (E " in text, text
        g = app.gui
        assert g["material"].value == "soft, raised to stand" and float(g["E"].value) == pytest.approx(stand["E_to"])
        g["material"].value = "rubber"
        assert wait_until(lambda: float(g["E"].value) == pytest.approx(MATERIALS["rubber"].E), 10)
        g["material"].value = "soft"
        assert wait_until(lambda: float(g["E"].value) == pytest.approx(soft.E), 10)
        g["material"].value = "soft, raised to stand"
        assert wait_until(lambda: float(g["E"].value) == pytest.approx(stand["E_to"]), 10)
        # typed by a user: a value outside a field's range is brought into it before it runs (dt 0.5 ran at 4
        # steps/s while the field showed 0.2; E -5 Pa paused the simulation with a traceback), and a typed E
        # makes the material "custom" (the dropdown kept claiming the preset)
        c = ViserWsClient(app.port)
        try:
            c.send_camera((2.0, 2.0, 1.0), (0.0, 0.0, 0.0))
            assert wait_until(lambda: len(app.server.get_clients()) == 1, 10)
            c.gui_set(g["dt"], 0.5)
            assert wait_until(lambda: float(g["dt"].value) == 0.2 and app.live.anim.dt == 0.2, 10)
            c.gui_set(g["E"], "-5")
            assert wait_until(lambda: float(g["E"].value) == 100.0 and app.live.anim.sim.E == 100.0, 10)
            assert g["material"].value == "custom" and "set to 100" in g["material_note"].content
            # typed as --E takes it: the browser's number field dropped the "e" of 2e9 (29 Pa, and a collapse)
            for typed, pa in (("2e9", 2e9), ("100kPa", 1e5), ("1.3 GPa", 1.3e9)):
                c.gui_set(g["E"], typed)
                assert wait_until(lambda pa=pa: app.live.anim.sim.E == pytest.approx(pa), 10), typed
            c.gui_set(g["E"], "stiff")  # unreadable: the last E stays and is shown again
            assert wait_until(lambda: g["E"].value == "1.3e+09" and "E stiff: not a number" in
                              g["material_note"].content, 10), (g["E"].value, g["material_note"].content)
            assert app.live.anim.sim.E == pytest.approx(1.3e9)
            # a material picked that cannot hold the cow up is said, with stiffer ones (it collapsed silently)
            c.gui_set(g["material"], "jelly")
            assert wait_until(lambda: g["material_note"].visible and "In jelly" in g["material_note"].content, 20)
            assert "In jelly its own weight bends it about" in g["material_note"].content
            assert "pick foam, soft, rubber" in g["material_note"].content, g["material_note"].content
            c.gui_set(g["material"], "wood")
            assert wait_until(lambda: app.live.anim.sim.E == MATERIALS["wood"].E, 10)
            time.sleep(0.5)
            assert not g["material_note"].visible
            assert app.error_log == []
        finally:
            c.close()
        # an up switch prepares the raised preset again from soft's own E (it raised the raised E again)
        g["material"].value = "soft, raised to stand"
        assert wait_until(lambda: float(g["E"].value) == pytest.approx(stand["E_to"]), 10)
        gen = app.switcher.generation
        assert app.set_up("z")
        assert wait_until(lambda: app.switcher.generation > gen and not app.switcher.busy, 90)
        assert app.switcher.last_error is None, app.switcher.last_error
        again = app.live.anim.info.get("stand")
        assert again is not None and again["E_from"] == pytest.approx(soft.E), again
        assert float(g["E"].value) == pytest.approx(again["E_to"]) and g["material"].value == "soft, raised to stand"
        assert app.live.anim.sim.E == pytest.approx(again["E_to"])
    finally:
        app.stop()


def test_record_folder_rules(tmp_path, monkeypatch):
    """The Record field: a file is refused with a clear message (it was a NotADirectoryError and a traceback), an
    empty field too; a viewer reachable from the network records under --record-dir only (anyone who can open the
    page can start a recording), a loopback one anywhere; two recordings started within one second get two
    folders (the second was refused as "already holds a recording")."""
    from types import SimpleNamespace

    from physskin_gs.errors import OptionError
    from physskin_gs_viewer.recording import RecordingControl, is_loopback

    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1") and is_loopback("[::1]")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.5") and not is_loopback("myhost")
    monkeypatch.chdir(tmp_path)
    afile = tmp_path / "afile"
    afile.write_text("x")
    app = SimpleNamespace(host="127.0.0.1", live=SimpleNamespace(anim=None), gui={"record_dir": SimpleNamespace(value=str(afile))})
    rc = RecordingControl(app, tmp_path / "recordings")
    with pytest.raises(OptionError, match="is a file, not a folder"):
        rc.start()
    app.gui["record_dir"].value = "  "
    with pytest.raises(OptionError, match="the Record folder is empty"):
        rc.start()
    assert rc._parent("/somewhere/else") == Path("/somewhere/else")  # loopback: the user's own machine
    app.host = "0.0.0.0"
    with pytest.raises(OptionError, match="recordings go under .*recordings only"):
        rc._parent("/somewhere/else")
    with pytest.raises(OptionError, match="recordings go under"):
        rc._parent("recordings/../elsewhere")
    assert rc._parent("recordings/mine") == (tmp_path / "recordings" / "mine").resolve()


def test_a_browser_that_leaves_during_the_handshake_prints_no_traceback():
    """websockets logs "opening handshake failed" with three chained tracebacks when a tab closes while it
    connects; the viewer drops that record (EOFError / InvalidMessage / a reset in the chain), keeps any other."""
    import logging

    from physskin_gs_viewer.app import quiet_dropped_handshakes

    quiet_dropped_handshakes()
    quiet_dropped_handshakes()  # once only
    log = logging.getLogger("websockets.server")
    assert sum(type(f).__name__ == "_DroppedHandshake" for f in log.filters) == 1

    class InvalidMessage(Exception):
        pass

    def record(exc):
        try:
            raise exc
        except Exception:  # noqa: BLE001
            import sys

            return logging.LogRecord("websockets.server", logging.ERROR, __file__, 1, "opening handshake failed",
                                     None, sys.exc_info())

    try:
        try:
            raise EOFError("stream ends after 0 bytes")
        except EOFError as e:
            raise InvalidMessage("did not receive a valid HTTP request") from e
    except InvalidMessage as chained:
        dropped = record(chained)
    f = next(f for f in log.filters if type(f).__name__ == "_DroppedHandshake")
    assert not f.filter(dropped)
    assert f.filter(record(ValueError("a real problem")))  # kept
    assert f.filter(logging.LogRecord("websockets.server", logging.ERROR, __file__, 1, "other", None, None))


def test_a_second_ctrl_c_while_stopping_does_not_cut_the_recording_short():
    """The viewer's stop finishes a running recording; a second Ctrl-C arriving in the middle used to interrupt
    it (a fresh user's folder lost its sequence.json). It is held until the stop is done, then dropped."""
    import os
    import signal
    from types import SimpleNamespace

    from physskin_gs_viewer.app import _stop_shielded

    done = []

    def stop():
        os.kill(os.getpid(), signal.SIGINT)  # the second Ctrl-C, in the middle of the stop
        time.sleep(0.05)
        done.append("sequence.json written")

    _stop_shielded(SimpleNamespace(stop=stop, recording=SimpleNamespace(active=False)))
    assert done == ["sequence.json written"]


def test_a_notice_reaches_the_status_line_and_is_no_error(live_app):
    """The worker's notices (a restart from rest) are said in the status line and kept apart from errors."""
    app, anim, clients = live_app
    app.report_notice("restarted from rest", "the solver could not take 6 steps in a row")
    assert app.notices == ["restarted from rest: the solver could not take 6 steps in a row"]
    assert app.error_log == [] and "Restarted from rest" in app.gui["status"].content
    assert app.live.worker.on_notice == app.report_notice


def test_the_floor_height_field_is_brought_into_its_range(live_app):
    """A fresh user's floor heights: 1e9 ran at 7 steps/s with energy 1.75e25 J, NaN gave energy nan, -1e9 let the
    object fall for ever and 0 afterwards catapulted it. The field now takes heights from ten object heights under
    the lowest point to 2 % of a height above it (and the scene's own default), says so, and applies the bound."""
    from types import SimpleNamespace

    from physskin_gs_viewer.panel import floor_range

    assert floor_range(SimpleNamespace(lowest_scene=1.0, height_scene=2.0)) == (-19.0, pytest.approx(1.04))
    assert floor_range(SimpleNamespace(lowest_scene=1.0, height_scene=2.0), default=1.5)[1] == 1.5
    assert floor_range(SimpleNamespace()) == (None, None)
    app, anim, clients = live_app
    anim.lowest_scene, anim.height_scene = 0.0, 1.0
    applied = []
    real = anim.set_floor
    anim.set_floor = lambda on, height=None: (applied.append(height), real(on, height=height))
    app.gui["floor_height"].value = 1e9
    assert app.gui["floor_height"].value == pytest.approx(0.02)
    assert "floor height 1000000000.0: outside" in app.gui["scene_note"].content
    app.gui["floor_height"].value = -1e9
    assert app.gui["floor_height"].value == pytest.approx(-10.0)
    assert wait_until(lambda: applied and applied[-1] == pytest.approx(-10.0), 5)
    assert not any(abs(h) > 10.0 + 1e-9 for h in applied if h is not None)


def test_a_recording_that_cannot_be_finished_leaves_the_button_to_start_one(live_app, tmp_path):
    """A fresh user removed a recording's folder while it ran: stopping raised in a thread (a traceback in the
    terminal), the button stayed "Stop recording", and the next click started a new recording. Now the problem is
    said and the button starts one again."""
    import shutil

    app, anim, clients = live_app
    out = app.start_recording(out_dir=tmp_path / "gone")
    assert wait_until(lambda: app._recorder is not None and app._recorder.written >= 2, 10)
    app.live.worker.set_playing(False)
    time.sleep(0.2)
    shutil.rmtree(out)
    assert app.stop_recording() is None
    assert app.gui["record"].label == "Start recording" and app.recording.recorder is None
    assert "stopped with a problem" in app.gui["record_status"].content
    assert any(e.startswith("stop recording:") for e in app.error_log)


def test_a_recording_writes_the_material_as_numbers(live_app, tmp_path):
    """sequence.json of a recording gave E as the field's text ("100kPa", "240000") and no material name; it gives
    numbers and the name, as the headless export does."""
    app, anim, clients = live_app
    app.gui["E"].value = "100kPa"
    meta = app.recording.sequence_meta(tmp_path)
    assert meta["material"]["E"] == pytest.approx(1e5) and isinstance(meta["material"]["nu"], float)
    assert meta["material"]["name"] == app.gui["material"].value


def test_the_stats_line_names_every_part_of_the_energy(live_app):
    """The total is the sum of its parts, so each non-zero part is named (gravity from the rest pose dominated a
    total shown with kinetic and elastic only: -53.1 J beside kinetic 2e-12 and elastic 0.19)."""
    from physskin_gs_viewer.sim import Frame

    app, anim, clients = live_app
    app.live.worker.set_playing(False)
    st = {"ms": 5.0, "newton_iters": 2, "energy": {"kinetic": 2.27e-12, "elastic": 0.194, "gravity": -53.96,
                                                   "drag": 0.0, "total": -53.77}}
    app.display.update_stats(app.live, Frame(1, 1, None, None, None, st), paused=True)
    md = app.gui["stats"].content
    assert "gravity -54" in md and "elastic 0.194" in md and "kinetic" in md and "drag" not in md


def test_a_fields_note_goes_when_a_good_value_is_typed(live_app):
    """"dt 1000000000.0: ... set to 0.2" stayed under the scene facts after dt was typed back to 0.03."""
    app, anim, clients = live_app
    c = connect(app, clients)
    g = app.gui
    c.gui_set(g["dt"], 1e9)
    assert wait_until(lambda: g["scene_note"].content.startswith("dt 1000000000"), 5)
    c.gui_set(g["dt"], 0.03)
    assert wait_until(lambda: g["scene_note"].content == "" and not g["scene_note"].visible, 5)
