"""The viewer's fast display path: torch wire packing and deformation off the simulation thread.

- :class:`SplatPacker` is held bit for bit to the numpy reference :func:`pack_splat_buffer` (itself held to
  viser's ``set_gaussians`` in test_viewer.py).
- Split frames (the simulation thread publishes only the handle transforms; the display deforms) give exactly
  the Gaussians the AnimatedScene's own ``deformed_gaussians()`` gives, static rows included.
- Over the websocket, the splat buffer a client receives is the packed deformation of the displayed state, on
  the split and on the eager path.
Every wait is bounded; servers bind 127.0.0.1 on a free port.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

viser = pytest.importorskip("viser")
pytest.importorskip("websockets")
pytest.importorskip("msgspec")

from physskin_gs_viewer.app import ViewerApp  # noqa: E402
from physskin_gs_viewer.sim import SimWorker, SplitDeformSource, default_threads  # noqa: E402
from physskin_gs_viewer.splats import SplatPacker, pack_splat_buffer, rgba_u32  # noqa: E402
from physskin_gs_viewer.testing import FakeAnimatedScene, FakeDeformer, ViserWsClient, make_blob_scene  # noqa: E402
from physskin_gs_viewer.testing import wait_until  # noqa: E402


def _random_frame(rng, n, scale=0.01):
    means = rng.normal(size=(n, 3)).astype(np.float32)
    A = rng.normal(size=(n, 3, 3)).astype(np.float32) * scale
    return means, (A @ A.transpose(0, 2, 1)).astype(np.float32)


def test_splat_packer_is_bit_identical_to_reference_pack():
    rng = np.random.default_rng(1)
    n, s = 1000, 37.0
    rgba = rgba_u32(rng.random((n, 3)).astype(np.float32), rng.random(n).astype(np.float32))
    packer = SplatPacker(n, rgba)
    for k in range(3):  # the buffer is reused across frames
        means, covars = _random_frame(rng, n, scale=0.01 * (k + 1))
        # non-finite and out-of-float16-range entries: NaN -> 0, +-inf and huge -> +-F16_COV_MAX, inf centre -> 0
        covars[0, 0, 0] = np.nan
        covars[1, 1, 2] = np.inf
        covars[2, 2, 2] = -np.inf
        covars[3, 0, 1] = 1e9
        means[4, 1] = np.inf
        means[5, 2] = np.nan
        ref = pack_splat_buffer(means, covars, s, rgba)
        fast = packer.pack(torch.from_numpy(means), torch.from_numpy(covars), s)
        assert fast.dtype == np.uint32 and fast.shape == (n, 8)
        np.testing.assert_array_equal(fast, ref)
    # New colours take effect in the next frame; numpy input is accepted as well.
    rgba2 = rgba_u32(rng.random((n, 3)).astype(np.float32), rng.random(n).astype(np.float32))
    packer.set_rgba(rgba2)
    means, covars = _random_frame(rng, n)
    np.testing.assert_array_equal(packer.pack(means, covars, 2.5), pack_splat_buffer(means, covars, 2.5, rgba2))
    with pytest.raises(ValueError):
        packer.pack(means[:10], covars[:10], s)
    with pytest.raises(ValueError):
        packer.set_rgba(rgba2[:10])


def test_default_threads_leave_one_core_to_the_simulation():
    sim, disp = default_threads()
    assert sim == 1 and 1 <= disp <= 8


class _PartlyMoving(FakeAnimatedScene):
    """The fake scene where only the first half of the Gaussians moves (the deformer covers those rows only)."""

    def __init__(self, scene, **kw) -> None:
        super().__init__(scene, **kw)
        n = scene.num_gaussians
        self.moving = torch.zeros(n, dtype=torch.bool)
        self.moving[: n // 2] = True
        m = self.moving
        self.deformer = FakeDeformer(self._x0_t[m], self._W_t[m], self.cov0[m])

    def deformed_gaussians(self):
        g = super().deformed_gaussians()
        means = g.means.clone()
        means[~self.moving] = self._x0_t[~self.moving]  # static rows stay at rest
        g.means = means
        return g


def test_split_frames_equal_the_animated_scenes_own_deformation():
    anim = _PartlyMoving(make_blob_scene(400), num_handles=3)
    assert SplitDeformSource.supported(anim)
    w = SimWorker(anim, realtime=False)  # not started: this test drives it on its own thread
    assert w.source is not None
    did = anim.start_handle_drag(1)
    anim.update_drag(did, anim.handle_positions()[1] + 0.3)
    anim.step(10)
    w._publish()
    frame = w.slot.get()
    assert frame.split and frame.state.shape == (3, 3, 4)
    ref = anim.deformed_gaussians()
    anim.step(10)  # the scene moves on; the frame keeps its own state
    assert not torch.allclose(anim.deformed_gaussians().means, ref.means)
    torch.testing.assert_close(frame.means_t, ref.means, rtol=0, atol=1e-6)
    torch.testing.assert_close(frame.covars_t, ref.covars, rtol=0, atol=0)
    moving = anim.moving
    got = frame.with_moving(lambda m, c: (m.clone(), c.clone()))
    torch.testing.assert_close(got[0], ref.means[moving], rtol=0, atol=1e-6)
    # The eager path publishes the same arrays.
    we = SimWorker(anim, realtime=False, split=False)
    assert we.source is None
    we._publish()
    fe = we.slot.get()
    assert not fe.split
    torch.testing.assert_close(fe.means_t, anim.deformed_gaussians().means)
    rows = torch.nonzero(moving).flatten()
    torch.testing.assert_close(fe.with_moving(lambda m, c: m.clone(), rows), anim.deformed_gaussians().means[moving])


def test_sim_side_excludes_display_deformation():
    anim = FakeAnimatedScene(make_blob_scene(300), num_handles=2)
    w = SimWorker(anim, realtime=False)
    w._publish()
    frame = w.slot.get()
    inside = threading.Event()
    release = threading.Event()
    done = []

    def display():
        def fn(m, c):
            inside.set()
            release.wait(5)
            return m.clone()

        done.append(frame.with_moving(fn))

    t = threading.Thread(target=display)
    t.start()
    assert inside.wait(5)
    got = []

    def sim_side():
        with w._sim_side():
            got.append(bool(done))  # the display had finished when the simulation side got in

    sim = threading.Thread(target=sim_side)
    sim.start()
    sim.join(0.2)
    assert sim.is_alive() and not got  # the simulation side waits while the display uses the shared deformer
    release.set()
    t.join(5)
    sim.join(5)
    assert got == [True]
    assert not w.source.lock.locked()


@pytest.mark.parametrize("split", [True, False])
def test_client_receives_packed_deformation_of_the_current_state(split):
    anim = FakeAnimatedScene(make_blob_scene(800), num_handles=3)
    app = ViewerApp(anim, None, host="127.0.0.1", port=0, play=False, split=split)
    app.start()
    c = None
    try:
        assert app.wait_ready(20), app.failed
        assert (app.live.worker.source is not None) == split
        c = ViserWsClient(app.port)
        c.send_camera((2.0, 2.0, 1.0), (0.0, 0.0, 0.0))
        assert wait_until(lambda: len(app.server.get_clients()) == 1, 10)
        w = app.live.worker
        key = ("test", "/handles/h1")
        w.begin_handle_drag(key, 1, target=anim.handle_positions()[1] + 0.4)
        w.step_once(25)
        assert wait_until(lambda: anim.frame == 25 and w.slot.get().sim_frame == 25, 10)
        g = anim.deformed_gaussians()
        live = app.live
        expected = pack_splat_buffer(g.means.numpy(), g.covars.numpy(), live.s, live.live_rgba[1])

        def wire():
            m = c.get("SceneNodeUpdateMessage", "/scene/moving")
            if m is None or "buffer" not in m["updates"]:
                return None
            return np.asarray(m["updates"]["buffer"]).view(np.uint32).reshape(-1, 8)

        assert wait_until(lambda: wire() is not None and np.array_equal(wire(), expected), 10)
        assert app.error_log == []
    finally:
        if c is not None:
            c.close()
        app.stop()


def test_fast_solver_switch_maps_to_the_simulators_options():
    from types import SimpleNamespace

    from physskin_gs_viewer.app import _set_fast_solver

    class Sim:  # the current simulator: named solvers
        SOLVERS = ("newton", "chord", "adaptive")
        solver = "newton"

    a = SimpleNamespace(sim=Sim())
    _set_fast_solver(a, True)
    assert a.sim.solver == "adaptive"
    _set_fast_solver(a, False)
    assert a.sim.solver == "newton"
    _set_fast_solver(SimpleNamespace(), True)  # no simulator: no-op


def test_viser_copies_the_packers_buffer_on_assignment():
    """The display thread hands viser a view of the packer's reused buffer; viser must keep its own copy."""
    rng = np.random.default_rng(3)
    n, s = 200, 5.0
    rgba = rgba_u32(rng.random((n, 3)).astype(np.float32), rng.random(n).astype(np.float32))
    packer = SplatPacker(n, rgba)
    server = viser.ViserServer(host="127.0.0.1", port=0, verbose=False)
    try:
        m0, c0 = _random_frame(rng, n)
        node = server.scene.add_gaussian_splats("/x", m0, c0, np.ones((n, 3)), np.ones((n, 1)))
        a = packer.pack(m0, c0, s)
        node.buffer = a
        expected = a.copy()
        m1, c1 = _random_frame(rng, n)
        b = packer.pack(m1, c1, s)  # overwrites the packer's buffer (same memory as a)
        assert np.shares_memory(a, b) and not np.array_equal(b, expected)
        np.testing.assert_array_equal(node.buffer, expected)
    finally:
        server.stop()
