"""View-dependent colour for the browser: the compiled kernel against the torch reference, the deformer's F in the
same pass, and the live viewer sending SH colours for the camera of the tab (moving and static rows) with the
Display toggle.

The reference is independent of the kernel: ``render``'s own ``sh_to_rgb`` with the SVD polar rotation in float64
(``physskin_gs.render.sh`` / ``physskin_gs.deform.polar_rotation``); the kernel uses a Newton iteration in float32.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from physskin_gs.deform import GaussianDeformer, polar_rotation
from physskin_gs.render.sh import sh_to_rgb
from physskin_gs.render.view_colour import native_available, view_rgb, view_rgb_reference


def _random_F(n, lo, hi, g, inverted=0):
    """(n, 3, 3) F = Q U diag(s) U^T with log-uniform singular values in [lo, hi]; the first ``inverted`` negated."""
    Q, _ = torch.linalg.qr(torch.randn(n, 3, 3, generator=g, dtype=torch.float64))
    Q = Q * torch.sign(torch.det(Q))[:, None, None]
    U, _ = torch.linalg.qr(torch.randn(n, 3, 3, generator=g, dtype=torch.float64))
    s = torch.exp(torch.empty(n, 3, dtype=torch.float64).uniform_(np.log(lo), np.log(hi), generator=g))
    F = Q @ U @ torch.diag_embed(s) @ U.transpose(1, 2)
    F[:inverted] = -F[:inverted]
    return F.float(), Q.float()


def test_reference_is_render_colour_clamped():
    """The reference is exactly render's colour (sh_to_rgb with R_F = polar(F)), clamped to [0, 1]."""
    g = torch.Generator().manual_seed(0)
    n = 500
    dc, rest = torch.randn(n, 3, generator=g), 0.4 * torch.randn(n, 8, 3, generator=g)
    means = torch.randn(n, 3, generator=g)
    F, _ = _random_F(n, 0.5, 2.0, g)
    cam = torch.tensor([0.2, -3.0, 1.0])
    want = sh_to_rgb(torch.cat([dc[:, None], rest], 1), means, cam, polar_rotation(F)).clamp(0, 1)
    got = view_rgb_reference(means, dc, rest, cam, F)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=0)
    # a rigid rotation of the Gaussian turns its colour with it: seen from R d it shows what it showed from d
    R = _random_F(1, 1.0, 1.0, g)[1][0]  # a random rotation
    c0 = torch.zeros(3)
    before = view_rgb_reference(means, dc, rest, c0)
    after = view_rgb_reference(means @ R.T, dc, rest, c0, R.expand(n, 3, 3).contiguous())
    torch.testing.assert_close(after, before, atol=2e-5, rtol=0)


@pytest.mark.skipif(not native_available(), reason="no C compiler: the kernel falls back to the reference")
@pytest.mark.parametrize("degree", [0, 1, 2, 3])
def test_kernel_matches_reference(degree):
    g = torch.Generator().manual_seed(degree)
    N, n = 3000, 2000
    k = (degree + 1) ** 2 - 1
    dc, rest = torch.randn(N, 3, generator=g), 0.5 * torch.randn(N, k, 3, generator=g)
    rows = torch.randperm(N, generator=g)[:n]
    means = 2.0 * torch.randn(n, 3, generator=g)
    cam = (0.3, 4.0, -1.0)
    for F in (None, _random_F(n, 0.2, 5.0, g, inverted=50)[0], _random_F(n, 0.02, 50.0, g)[0]):
        got = view_rgb(means, dc, rest, cam, F, rows, native=True)
        want = view_rgb_reference(means, dc, rest, cam, F, rows)
        assert float((got - want).abs().max()) < 2e-5
        assert float(got.min()) >= 0.0 and float(got.max()) <= 1.0
    # without a row index the SH rows are the centres' rows; several worker threads give the same result
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        big = torch.randn(40000, 3, generator=g)
        dcb, restb = torch.randn(40000, 3, generator=g), 0.5 * torch.randn(40000, k, 3, generator=g)
        Fb = _random_F(40000, 0.5, 2.0, g)[0]
        torch.testing.assert_close(view_rgb(big, dcb, restb, cam, Fb, native=True),
                                   view_rgb_reference(big, dcb, restb, cam, Fb), atol=2e-5, rtol=0)
    finally:
        torch.set_num_threads(old)


@pytest.mark.parametrize("native", [None, False])
def test_rgba_words_in_place_equal_rgba_u32_of_the_reference(native):
    """The words written into column 7 of viewer splat records equal rgba_u32 of the reference colours (within one
    step of 1/255 where float rounding sits on a boundary); the other columns are untouched."""
    from physskin_gs.render.view_colour import view_rgba_words
    from physskin_gs_viewer.splats import rgba_u32

    g = torch.Generator().manual_seed(7)
    n = 5000
    dc, rest = torch.randn(n, 3, generator=g), 0.5 * torch.randn(n, 15, 3, generator=g)
    means = torch.randn(n, 3, generator=g)
    F = _random_F(n, 0.3, 3.0, g, inverted=20)[0]
    opac = torch.rand(n, generator=g).numpy()
    alpha = np.clip(opac.astype(np.float32) * 255.0, 0, 255).astype(np.uint8)
    records = np.arange(n * 8, dtype=np.uint32).reshape(n, 8)
    before = records.copy()
    view_rgba_words(means, dc, rest, (1.0, 2.0, 3.0), alpha, records[:, 7:], F, native=native)
    want = rgba_u32(view_rgb_reference(means, dc, rest, (1.0, 2.0, 3.0), F).numpy(), opac)
    got_b, want_b = records[:, 7].copy().view(np.uint8).reshape(n, 4), want.view(np.uint8).reshape(n, 4)
    assert int(np.abs(got_b.astype(int) - want_b.astype(int)).max()) <= 1
    assert np.array_equal(got_b[:, 3], want_b[:, 3])
    assert np.array_equal(records[:, :7], before[:, :7])


def test_bad_shapes_are_refused():
    from physskin_gs.errors import OptionError

    dc, rest = torch.zeros(4, 3), torch.zeros(4, 3, 3)
    with pytest.raises(OptionError):
        view_rgb(torch.zeros(5, 3), dc, rest, (0, 0, 1))  # 5 centres, 4 SH rows, no index
    with pytest.raises(OptionError):
        view_rgb(torch.zeros(4, 3), dc, rest, (0, 0, 1), F=torch.zeros(3, 3, 3))


@pytest.mark.parametrize("native", [False, None])
def test_deform_writes_F_in_the_same_pass(native):
    """deform(Z, gradients=F) gives the same means / covariances as deform(Z) and F == deformation_gradients()."""
    g = torch.Generator().manual_seed(3)
    n, H = 3000, 5
    means = torch.randn(n, 3, generator=g)
    quats = torch.randn(n, 4, generator=g)
    log_scales = -3 + 0.3 * torch.randn(n, 3, generator=g)
    W = torch.softmax(torch.randn(n, H, generator=g), 1)
    dW = 0.3 * torch.randn(n, H, 3, generator=g)
    d = GaussianDeformer(means, quats, log_scales, W, dW, native=native, singular_clamp=(0.2, 5.0), block_size=512)
    Z = 0.3 * torch.randn(H, 3, 4, generator=g)
    m0, c0 = (t.clone() for t in d.deform(Z))
    F0 = d.deformation_gradients()
    F = torch.empty(n, 3, 3)
    m1, c1 = d.deform(Z, gradients=F)
    torch.testing.assert_close(m1, m0, atol=0, rtol=0)
    torch.testing.assert_close(c1, c0, atol=0, rtol=0)
    torch.testing.assert_close(F, F0, atol=1e-6, rtol=1e-6)
    with pytest.raises(ValueError):
        d.deform(Z, gradients=torch.empty(n, 9))


# ------------------------------------------------------------------------------------------- the live viewer
viser = pytest.importorskip("viser")
pytest.importorskip("websockets")
pipeline = pytest.importorskip("physskin_gs.pipeline")

N_SUPPORT, N_OBJECT, N_FLOATERS = 1500, 2000, 30


@pytest.fixture(scope="module")
def sh_capture_path(tmp_path_factory):
    """The viewer tests' small capture (a block on a slab) with an SH band 1 that makes every Gaussian red seen
    from a camera at -x (view direction +x) and blue seen from +x."""
    from physskin_gs import io as pio
    from physskin_gs.scene import GaussianScene
    from physskin_gs_viewer.testing import make_capture_scene

    sc = make_capture_scene(N_OBJECT, N_SUPPORT, N_FLOATERS)
    n = sc.num_gaussians
    rest = torch.zeros(n, 3, 3)
    rest[:, 2, 0] = -0.9  # Y_3 = -C1 x: red = 0.5 + 0.44 x, x the view direction's (camera to centre)
    rest[:, 2, 2] = 0.9  # blue = 0.5 - 0.44 x
    sc = GaussianScene(means=sc.means, quats=sc.quats, log_scales=sc.log_scales, opacity_logits=sc.opacity_logits,
                       sh_dc=torch.zeros(n, 3), sh_rest=rest, source="synthetic", format="synthetic")
    path = tmp_path_factory.mktemp("shcap") / "capture_sh1.ply"
    pio.save_scene(sc, path)
    return path


def _rgb_words(c, name):
    msg = c.get("SceneNodeUpdateMessage", name)
    buf = None if msg is None else msg["updates"].get("buffer")
    if buf is None:
        return None
    return np.asarray(buf).view(np.uint32).reshape(-1, 8)[:, 7].copy().view(np.uint8).reshape(-1, 4)[:, :3]


def test_viewer_sends_view_dependent_colour_and_the_toggle_turns_it_off(sh_capture_path):
    from physskin_gs_viewer.app import ViewerApp
    from physskin_gs_viewer.testing import ViserWsClient, wait_until

    cfg = pipeline.AnimationConfig(num_cubature=128, skinning="rbf", num_handles=6, gravity=0.0, fit_seconds=2.0)
    with open("/dev/null", "w") as quiet, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        app = ViewerApp(sh_capture_path, cfg, host="127.0.0.1", port=0, progress_stream=quiet)
        app.start()
        c = None
        try:
            assert app.wait_ready(60), app.failed
            live = app.live
            assert live.sh_degree == 1 and len(live.static_idx) > 0 and not app.gui["view_colour"].disabled
            sc = live.anim.scene
            rest_means = sc.means.float()

            def expected(rows, cam):  # at rest (no gravity, no drag): F = I, centres at rest
                r = torch.from_numpy(np.asarray(rows, dtype=np.int64))
                rgb = view_rgb_reference(rest_means[r], sc.sh_dc, sc.sh_rest, cam, None, r).numpy()
                return np.clip(rgb * 255.0, 0, 255).astype(np.uint8)

            def matches(name, rows, cam):
                got = _rgb_words(c, name)
                return got is not None and got.shape[0] == len(rows) and \
                    int(np.abs(got.astype(int) - expected(rows, cam).astype(int)).max()) <= 1

            c = ViserWsClient(app.port)
            centre = tuple(float(v) for v in live.center)
            for cam in ((3.0, 0.0, 0.5), (-3.0, 0.0, 0.5)):
                c.send_camera(cam, centre)
                assert wait_until(lambda: matches("/scene/moving", live.live_idx, cam), 15), "moving rows"
                assert wait_until(lambda: matches("/scene/static", live.static_shown, cam), 15), "static rows"
            # from the camera at -x the block is red, from +x blue: the two views really differ
            a, b = expected(live.live_idx, (3.0, 0.0, 0.5)), expected(live.live_idx, (-3.0, 0.0, 0.5))
            assert np.median(b[:, 0].astype(int) - a[:, 0].astype(int)) > 100
            # off: the degree-0 colour on both nodes (grey: dc = 0)
            app.gui["view_colour"].value = False
            grey = np.full(3, 127)

            def flat(name):
                got = _rgb_words(c, name)
                return got is not None and int(np.abs(got.astype(int) - grey).max()) <= 1

            assert wait_until(lambda: flat("/scene/moving") and flat("/scene/static"), 15)
            assert app.error_log == []
        finally:
            if c is not None:
                c.close()
            app.stop()
