"""The viewer on the real pipeline (physskin_gs.pipeline): a websocket drag moves the simulated object.

A 2,000-Gaussian subset of the demo cow with 256 cubature points keeps preparation and steps short; gravity and
the floor are off so that the drag is the only force. Every wait is bounded; the server binds 127.0.0.1 on a
free port.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

pipeline = pytest.importorskip("physskin_gs.pipeline")
pytest.importorskip("websockets")

from physskin_gs_viewer.app import ViewerApp  # noqa: E402
from physskin_gs_viewer.testing import ViserWsClient  # noqa: E402
from physskin_gs_viewer.testing import wait_until as _wait_until  # noqa: E402


def wait_until(pred, timeout=10.0) -> bool:
    return _wait_until(pred, timeout, interval=0.05)


@pytest.fixture(scope="module")
def small_anim(splat_file):
    scene = pipeline.load_for_animation(splat_file("spot_mesh2splat_10k.splat"))
    idx = torch.randperm(scene.num_gaussians, generator=torch.Generator().manual_seed(0))[:2000]
    scene = scene.subset(idx)
    cfg = pipeline.AnimationConfig(gravity=0.0, floor=False, num_cubature=256, fit_seconds=5.0, E=5e3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no checkpoint / fit fallbacks are reported as warnings
        return pipeline.prepare_animation(scene, cfg)


def test_drag_over_websocket_moves_real_simulation_and_release_removes_spring(small_anim):
    anim = small_anim
    anim.reset()
    app = ViewerApp(anim, None, host="127.0.0.1", port=0)
    app.start()
    c = None
    try:
        assert app.wait_ready(60), app.failed
        assert len(app.live.handle_gizmos) == anim.num_handles - 1
        assert app.live.worker.source is not None  # deformation runs on the display thread
        c = ViserWsClient(app.port)
        c.send_camera((2.0, 0.0, 0.0), (0.0, 0.0, 0.0), up=tuple(app.live.up))
        assert wait_until(lambda: len(app.server.get_clients()) == 1, 10)
        hp0 = np.asarray(anim.handle_positions(), dtype=np.float64)
        k = int(np.argmax(np.linalg.norm(hp0 - app.live.center, axis=1)))
        target = hp0[k] + 0.3 * app.live.extent * app.live.up
        name = f"/handles/h{k}"
        c.drag_start(name)
        c.drag_to(name, target)
        d0 = np.linalg.norm(hp0[k] - target)

        def handle_dist():
            return np.linalg.norm(app.live.worker.slot.get().handle_positions[k] - target)

        assert wait_until(lambda: len(anim._drag_info) == 1, 10)
        assert wait_until(lambda: handle_dist() < 0.6 * d0, 60), f"handle stayed at {handle_dist():.3f} of {d0:.3f}"
        # The client was sent the moved splats.
        assert wait_until(lambda: c.count("SceneNodeUpdateMessage") > 0, 10)
        c.drag_end(name)
        assert wait_until(lambda: len(anim._drag_info) == 0 and app.live.worker.active_anim_drags() == 0, 10)
        assert app.error_log == []
    finally:
        if c is not None:
            c.close()
        app.stop()


def test_split_deformation_matches_pipeline_and_keeps_its_cache_coherent(small_anim):
    """The display-side deformation of a published state equals AnimatedScene.deformed_gaussians() at that state,
    and deforming for the display never leaves the AnimatedScene's cached deformation stale."""
    from physskin_gs_viewer.sim import SimWorker, SplitDeformSource

    anim = small_anim
    anim.reset()
    assert SplitDeformSource.supported(anim)
    w = SimWorker(anim, realtime=False)  # not started: driven from this thread
    assert w.source is not None
    hp = np.asarray(anim.handle_positions(), dtype=np.float64)
    did = anim.start_handle_drag(0)
    try:
        anim.update_drag(did, hp[0] + 0.3)
        anim.step(3)
        w._publish()
        frame = w.slot.get()
        ref = anim.deformed_gaussians()
        ref_m, ref_c = ref.means.clone(), ref.covars.clone()
        anim.step(3)
        with w._sim_side():
            now = anim.deformed_gaussians()
            now_m = now.means.clone()
        assert (now_m - ref_m).abs().max() > 1e-6  # the state moved on
        # display side: the frame's own (older) state, on every row and on the moving rows
        torch.testing.assert_close(frame.means_t, ref_m, rtol=0, atol=0)
        torch.testing.assert_close(frame.covars_t, ref_c, rtol=0, atol=0)
        mov = anim.moving
        m_only = w.slot.get().with_moving(lambda m, c: m.clone())
        torch.testing.assert_close(m_only, ref_m[mov], rtol=0, atol=0)
        frame2 = type(frame)(frame.version, frame.sim_frame, None, None, frame.handle_positions,
                             state=frame.state, source=frame.source)  # not yet deformed: deforms in with_moving
        torch.testing.assert_close(frame2.with_moving(lambda m, c: c.clone()), ref_c[mov], rtol=0, atol=0)
        # the display overwrote the shared deformer with the older state: the simulation side still sees now
        with w._sim_side():
            torch.testing.assert_close(anim.deformed_gaussians().means, now_m, rtol=0, atol=0)
    finally:
        anim.end_drag(did)
        anim.reset()
