"""The viewer at scale: the static part is sent once, only the moving part per frame, and the rest scene is shown
with a progress bar while the preparation runs (issue 13, "viewer at 1M+").

- The static rows (support, background, floaters) go to the browser once, as ``/scene/static``; across many
  display updates only ``/scene/moving`` is updated (counted on the server, at the handle, and on the wire).
- ``/scene/moving`` holds exactly the packed deformed moving rows; static + moving together are the whole
  deformed scene, every row once (fake scene, and one small real AnimatedScene).
- Given a file (or a loaded scene), the page gets ``/scene/preview`` (the rest scene) and the progress of the
  preparation stages before the animation is ready, then the live nodes replace the preview; a tab whose camera
  nobody moved follows to the object.
- In headless Chromium (marked ``browser``), the two nodes composite in depth order: viser sorts all splat nodes
  together (a moving layer between two static ones shows correctly).

Small scenes; every wait is bounded; servers bind 127.0.0.1 on a free port.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import sys
import threading
import types
import warnings

import numpy as np
import pytest
import torch

pytest.importorskip("viser")
pytest.importorskip("websockets")
pytest.importorskip("msgspec")

from physskin_gs_viewer.app import ViewerApp  # noqa: E402
from physskin_gs_viewer.constants import DIM_OPACITY  # noqa: E402
from physskin_gs_viewer.splats import pack_splat_buffer, rest_wire, rgba_u32, sh_dc_to_rgb  # noqa: E402
from physskin_gs_viewer.testing import FakeAnimatedScene, FakeAnimationConfig, ViserWsClient  # noqa: E402
from physskin_gs_viewer.testing import make_capture_scene  # noqa: E402
from physskin_gs_viewer.testing import wait_until  # noqa: E402

GEOMETRY = [0, 1, 2, 4, 5, 6]  # words of a splat record: centre (3 x f32), covariance triangle (6 x f16)


def _object_mask(scene) -> torch.Tensor:
    """The block of :func:`make_capture_scene` (above the slab, near the origin) moves; slab and floaters do not."""
    m = scene.means
    return (m[:, 2] > 0.04) & (m[:, :2].abs() < 0.5).all(1)


def to_bool(x) -> np.ndarray:
    """(N,) bool numpy array of a torch mask or array-like."""
    return np.asarray(x.numpy() if hasattr(x, "numpy") else x, dtype=bool)


@contextlib.contextmanager
def _running_app(target, config=None, *, ready: float | None = 20.0, **kwargs):
    """A started :class:`ViewerApp` of ``target`` on 127.0.0.1 (free port, ``play=False``), ready within ``ready``
    seconds (None: not waited for). Yields ``(app, stack)``: what the test registers on the ExitStack (clients,
    browsers, events to release) is closed first, in reverse order, then the app is stopped."""
    app = ViewerApp(target, config, host="127.0.0.1", port=0, play=False, **kwargs)
    with contextlib.ExitStack() as stack:
        app.start()
        stack.callback(app.stop)
        if ready is not None:
            assert app.wait_ready(ready), app.failed
        yield app, stack


def _connect(app, stack: contextlib.ExitStack) -> ViserWsClient:
    """A websocket client of ``app`` (closed with ``stack``), its camera sent, once the server counts it."""
    c = ViserWsClient(app.port)
    stack.callback(c.close)
    c.send_camera((3.0, 3.0, 2.0), (0.0, 0.0, 0.3))
    assert wait_until(lambda: len(app.server.get_clients()) >= 1, 10)
    return c


def _scene_rgba(scene) -> np.ndarray:
    """(N,) uint32 RGBA words of the scene's own colours (degree-0 SH) and opacities, not the app's copies."""
    return rgba_u32(sh_dc_to_rgb(scene.sh_dc.numpy()), scene.opacities.numpy())


def _expected_full(g, scene, s: float) -> np.ndarray:
    """The whole deformed scene ``g`` (means (N, 3), covars (N, 3, 3)) packed with the wire scale ``s`` and the
    colours of the rest ``scene``: (N, 8) uint32."""
    return pack_splat_buffer(np.asarray(g.means, np.float32), np.asarray(g.covars, np.float32), s,
                             _scene_rgba(scene))


def _check_union(c, live, full) -> None:
    """Static + moving records on the wire are ``full`` (N, 8), every row exactly once."""
    st, mv = live.static_shown, live.live_idx
    n = full.shape[0]
    rows = np.concatenate([st, mv])
    assert len(rows) == n and np.array_equal(np.sort(rows), np.arange(n))  # disjoint, and together every row
    got_static = c.splat_buffer("/scene/static")
    got_moving = c.splat_buffer("/scene/moving")
    assert got_static.shape == (len(st), 8) and got_moving.shape == (len(mv), 8)
    np.testing.assert_array_equal(got_static, full[st])  # colours included: the scene's own
    np.testing.assert_array_equal(got_moving[:, GEOMETRY], full[mv][:, GEOMETRY])


def test_static_node_sent_once_moving_node_is_the_deformed_moving_rows(monkeypatch):
    scene = make_capture_scene(n_object=1500, n_support=2500, n_floaters=40)
    moving = _object_mask(scene)
    anim = FakeAnimatedScene(scene, num_handles=3, moving=moving)
    with _running_app(anim, realtime=False) as (app, stack):
        live = app.live
        assert live.static_node is not None and len(live.static_shown) == int((~moving).sum())
        # count buffer assignments to the static handle on the server
        static, sets = live.static_node, []
        cls = type(static)
        orig = cls.__setattr__

        def spy(self, name, value):
            if self is static and name == "buffer":
                sets.append(1)
            orig(self, name, value)

        monkeypatch.setattr(cls, "__setattr__", spy)
        c = _connect(app, stack)
        assert wait_until(lambda: c.splat_buffer("/scene/static") is not None and c.splat_buffer("/scene/moving")
                          is not None, 10)
        w = live.worker
        w.begin_handle_drag(("test", "/handles/h1"), 1, target=anim.handle_positions()[1] + 0.3)
        m0 = c.count("SceneNodeUpdateMessage", "/scene/moving")
        for k in range(1, 9):  # eight display updates, one after the other (the display shows the newest frame)
            u = app.display_updates
            w.step_once(5)
            assert wait_until(lambda: anim.frame == 5 * k and app.display_updates > u, 10)
        assert wait_until(lambda: w.slot.get().sim_frame == 40, 10)
        assert wait_until(lambda: c.count("SceneNodeUpdateMessage", "/scene/moving") - m0 >= 5, 10)
        # the static node: one add message, never updated, no buffer assignment
        assert c.count("GaussianSplatsMessage", "/scene/static") == 1
        assert c.count("SceneNodeUpdateMessage", "/scene/static") == 0
        assert sets == []
        # the moving node is the deformed moving rows (the current state), static + moving the whole scene
        g = anim.deformed_gaussians()
        assert not torch.allclose(g.means[moving], scene.means[moving])  # it did move
        full = _expected_full(g, scene, live.s)
        mov = moving.numpy()
        rgba = _scene_rgba(scene)
        expected_moving = pack_splat_buffer(g.means[moving].numpy(), g.covars[moving].numpy(), live.s, rgba[mov])
        assert wait_until(lambda: np.array_equal(c.splat_buffer("/scene/moving"), expected_moving), 10)
        # the static node is the rest rows with the scene's colours, as first sent
        assert np.array_equal(live.static_shown, np.flatnonzero(~mov))
        expected_static = pack_splat_buffer(scene.means[~moving].numpy(), scene.covariances()[~moving].numpy(),
                                            live.s, rgba[~mov])
        np.testing.assert_array_equal(c.splat_buffer("/scene/static"), expected_static)
        _check_union(c, live, full)
        # "dim static": one update of the colour words, the geometry as first sent
        app.display.set_dim_static(True)
        assert wait_until(lambda: c.count("SceneNodeUpdateMessage", "/scene/static") == 1, 10)
        dimmed = c.splat_buffer("/scene/static")
        np.testing.assert_array_equal(dimmed[:, GEOMETRY], full[live.static_shown][:, GEOMETRY])
        alpha = dimmed[:, 7] >> 24
        assert np.all(alpha <= np.ceil(255 * DIM_OPACITY))
        assert sets == [1] and app.error_log == []


def test_real_animated_scene_static_and_moving_nodes_make_up_the_deformed_scene():
    pipeline = pytest.importorskip("physskin_gs.pipeline")
    scene = make_capture_scene(n_object=1200, n_support=1500, n_floaters=30)
    cfg = pipeline.AnimationConfig(select="-0.35,-0.35,0.04,0.35,0.35,0.95", up="z", num_cubature=128,
                                   gravity=0.0, floor=False, E=5e3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        anim = pipeline.prepare_animation(scene, cfg)
    with _running_app(anim, ready=60, realtime=False) as (app, stack):
        live = app.live
        c = _connect(app, stack)
        w = live.worker
        hp = np.asarray(anim.handle_positions())
        w.begin_handle_drag(("test", "/handles/h0"), 0, target=hp[0] + 0.3 * live.extent * live.up)
        w.step_once(10)
        assert wait_until(lambda: anim.frame == 10 and w.slot.get().sim_frame == 10, 30)
        g = anim.deformed_gaussians(view_rotations=False)
        full = _expected_full(g, scene, live.s)
        mov = to_bool(anim.moving)
        expected_moving = pack_splat_buffer(g.means[anim.moving].numpy(), g.covars[anim.moving].numpy(), live.s,
                                            _scene_rgba(scene)[mov])
        assert wait_until(lambda: (c.splat_buffer("/scene/moving") is not None
                                   and np.array_equal(c.splat_buffer("/scene/moving"), expected_moving)), 10)
        assert mov.sum() < len(mov) and c.count("SceneNodeUpdateMessage", "/scene/static") == 0
        _check_union(c, live, full)
        assert app.error_log == []


@pytest.fixture
def slow_pipeline(monkeypatch):
    """A stand-in ``physskin_gs.pipeline`` whose prepare_animation reports two stages, then waits for ``go``."""
    go = threading.Event()
    reached = threading.Event()

    @dataclasses.dataclass
    class AnimationConfig(FakeAnimationConfig):
        up: str = "z"

    def prepare_animation(scene, config, progress=None):
        progress("analysing the scene", 0.0)
        progress("filling the interior", 0.5)
        reached.set()
        assert go.wait(20), "the test never released the preparation"
        progress("ready", 1.0)
        return FakeAnimatedScene(scene, num_handles=3, moving=_object_mask(scene))

    mod = types.ModuleType("physskin_gs.pipeline")
    mod.AnimationConfig = AnimationConfig
    mod.prepare_animation = prepare_animation
    monkeypatch.setitem(sys.modules, "physskin_gs.pipeline", mod)
    return mod, go, reached


def test_rest_scene_and_progress_reach_the_page_before_the_animation_is_ready(slow_pipeline):
    mod, go, reached = slow_pipeline
    scene = make_capture_scene(n_object=800, n_support=1200, n_floaters=20)
    with _running_app(scene, mod.AnimationConfig(), ready=None, progress_stream=io.StringIO()) as (app, stack):
        stack.callback(go.set)  # a failing test must not leave the preparation waiting
        c = _connect(app, stack)
        assert reached.wait(20)
        # while the preparation runs: the rest scene, every row, in one node, and the stage with its fraction
        assert wait_until(lambda: c.splat_buffer("/scene/preview") is not None, 10)
        prev = c.splat_buffer("/scene/preview")
        n = scene.num_gaussians
        assert prev.shape == (n, 8) and not app.ready.is_set()
        s = 1.0 / float(c.get("GaussianSplatsMessage", "/scene/preview")["props"]["scale"])
        cen, cov = rest_wire(scene, None, s)
        ref = pack_splat_buffer(cen / s, cov / (s * s), s, _scene_rgba(scene))
        np.testing.assert_allclose(prev[:, 0:3].view(np.float32), ref[:, 0:3].view(np.float32), rtol=1e-5)
        np.testing.assert_array_equal(prev[:, 7], ref[:, 7])
        bar = app.gui["progress"]._impl.uuid
        assert wait_until(lambda: any(u.get("value") == 50.0 for u in c.gui_updates.get(bar, [])), 10)
        assert "filling the interior" in app.gui["status"].content and app.gui["progress"].visible
        assert c.count("GaussianSplatsMessage", "/scene/moving") == 0 and "preview" in app.timings
        # the tab's camera sits where the preview put it (as a browser reports it): it follows to the object
        pos, look = app._preview_camera
        c.send_camera(tuple(pos), tuple(look), up=(0.0, 0.0, 1.0))
        client = next(iter(app.server.get_clients().values()))
        assert wait_until(lambda: np.allclose(client.camera.position, pos, atol=1e-4), 10)
        # then the live nodes replace it
        go.set()
        assert app.wait_ready(20), app.failed
        assert wait_until(lambda: c.count("RemoveSceneNodeMessage", "/scene/preview") == 1, 10)
        assert wait_until(lambda: c.splat_buffer("/scene/moving") is not None
                          and c.splat_buffer("/scene/static") is not None, 10)
        assert c.first_seen[("GaussianSplatsMessage", "/scene/preview")] < \
            c.first_seen[("GaussianSplatsMessage", "/scene/moving")]
        assert app.display.preview_node is None and not app.gui["progress"].visible
        assert wait_until(lambda: c.gui_updates.get(bar, [{}])[-1].get("visible") is False, 10)
        assert 0 <= app.timings["preview"] <= app.timings["live"]
        # sent to that tab, not only to new ones (it may arrive after the live nodes: wait for it)
        assert wait_until(lambda: not (c.get("SetCameraLookAtMessage") or {"initial": True})["initial"], 10)
        look_msg = c.get("SetCameraLookAtMessage")
        np.testing.assert_allclose(look_msg["look_at"], app.live.center, atol=1e-4)
        pos_msg = c.get("SetCameraPositionMessage")
        np.testing.assert_allclose(pos_msg["position"], app.server.initial_camera.position, atol=1e-4)
        assert np.linalg.norm(np.asarray(app.server.initial_camera.look_at) - look) > 0.05  # moved: object != scene
        assert app.error_log == []


def _layers_scene():
    """Three opaque square layers seen from above: blue floor (z 0, static), green (z 0.3, moving), red (z 0.6,
    static, smallest). Rows: blue, red, green."""
    from physskin_gs.scene import C0, GaussianScene

    g = torch.Generator().manual_seed(0)
    parts = []
    for n, half, z, rgb in ((1500, 1.0, 0.0, (0.1, 0.2, 0.9)), (400, 0.25, 0.6, (0.9, 0.1, 0.1)),
                            (800, 0.5, 0.3, (0.1, 0.8, 0.1))):
        xy = (torch.rand(n, 2, generator=g) * 2 - 1) * half
        parts.append((torch.cat([xy, torch.full((n, 1), z)], 1), torch.tensor(rgb).repeat(n, 1)))
    means = torch.cat([p[0] for p in parts])
    rgb = torch.cat([p[1] for p in parts])
    n = means.shape[0]
    scene = GaussianScene(means=means, quats=torch.tensor([[1.0, 0, 0, 0]]).repeat(n, 1),
                          log_scales=torch.full((n, 3), float(np.log(0.05))), opacity_logits=torch.full((n,), 6.0),
                          sh_dc=(rgb - 0.5) / C0, sh_rest=torch.zeros(n, 0, 3), source="layers", format="synthetic")
    moving = torch.zeros(n, dtype=torch.bool)
    moving[1900:] = True
    return scene, moving


@pytest.mark.browser
def test_two_nodes_composite_in_depth_order_in_the_browser():
    """viser merges the splat nodes and sorts them together: the moving green layer lies between the two static
    layers, so per-node sorting could not show red on green on blue (whichever node were drawn last would cover
    the other). The page shows red in the centre, green around it, blue outside."""
    import shutil

    from physskin_gs_viewer.screenshots import _HIDE_NOTIFICATIONS_JS, panel_free_region, wait_stable
    from physskin_gs_viewer.testing import CHROMIUM, HeadlessChromium

    if shutil.which(CHROMIUM) is None:
        pytest.skip(f"{CHROMIUM} not installed")
    scene, moving = _layers_scene()
    with _running_app(FakeAnimatedScene(scene, num_handles=2, moving=moving)) as (app, stack):
        assert app.live.static_node is not None and app.live.moving_node is not None
        app.gui["handles"].value = False
        for g in app.live.handle_gizmos:
            g.visible = False
        app.gui["floor"].value = False
        ic = app.server.initial_camera  # from above, the layers left of the panel
        ic.up, ic.look_at, ic.position = (0.0, 0.0, 1.0), (1.0, 0.0, 0.3), (1.0, -0.01, 4.0)
        w, h = 800, 400
        b = HeadlessChromium(app.url, width=w, height=h)
        stack.callback(b.close)
        region = panel_free_region(w, h)
        wait_stable(b, region, timeout=120, min_object_px=2000)
        b.call("Runtime.evaluate", expression=_HIDE_NOTIFICATIONS_JS)  # the software-WebGL notice, top left
        img = wait_stable(b, region, timeout=60, min_object_px=2000)[region].astype(int)  # repainted without it
        r, g, bl = img[..., 0], img[..., 1], img[..., 2]
        red, green, blue = (r > 150) & (g < 100), (g > 150) & (r < 100), (bl > 150) & (r < 100) & (g < 120)
        assert red.sum() > 300 and green.sum() > 300 and blue.sum() > 300

        def centre(mask):
            ys, xs = np.nonzero(mask)
            return np.array([ys.mean(), xs.mean()])

        c = centre(red)
        # the red square is in the middle of the green one, the green in the middle of the blue
        assert np.linalg.norm(centre(green) - c) < 20 and np.linalg.norm(centre(blue) - c) < 30
        size = {k: np.sqrt(m.sum()) for k, m in (("red", red), ("green", green), ("blue", blue))}
        assert size["red"] < size["green"] < size["blue"]
        assert red[int(c[0]), int(c[1])] and not green[int(c[0]), int(c[1])]  # red over green at the centre
