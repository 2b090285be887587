"""Tests for physskin_gs.render: torch rasteriser vs brute force, chunking, projection and SH vs gsplat's
pure-torch oracles, rigid-motion SH invariance, cameras, errors, real files, video."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest
import torch

from physskin_gs.errors import OptionError
from physskin_gs.render import (
    Camera,
    auto_frame,
    camera_from_viser,
    eval_sh,
    look_at,
    orbit_camera,
    project_gaussians,
    rasterize,
    rasterize_pairs_reference,
    rasterize_tiles,
    robust_bounds,
    to_uint8,
    write_video,
)
from physskin_gs.render import rasterizer as rast_mod
from physskin_gs.render.rasterizer import ALPHA_MAX, ALPHA_MIN, T_STOP
from physskin_gs.scene import quat_to_rotmat, rotmat_to_quat


def random_scene(n=400, smax=0.15, seed=0, center=(0.0, 0.0, 0.0), sh_degree=None, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    means = torch.randn(n, 3, generator=g, dtype=dtype) * 0.5 + torch.tensor(center, dtype=dtype)
    R = quat_to_rotmat(torch.randn(n, 4, generator=g, dtype=dtype))
    s = torch.rand(n, 3, generator=g, dtype=dtype) * smax + 1e-3
    L = R * s[:, None, :]
    cov = L @ L.transpose(1, 2)
    op = torch.rand(n, generator=g, dtype=dtype)
    op[: n // 10] = 0.999  # saturate some pixels so the early stop matters
    if sh_degree is None:
        col = torch.rand(n, 3, generator=g, dtype=dtype)
    else:
        col = torch.randn(n, (sh_degree + 1) ** 2, 3, generator=g, dtype=dtype) * 0.4
    return means, cov, op, col


def brute_force(proj, opac, feats, W, H):
    """Per-pixel reference: loop over depth-sorted Gaussians with gsplat's thresholds, float64."""
    ids = torch.nonzero((proj.radii > 0).all(-1)).squeeze(1)
    ids = ids[torch.sort(proj.depths[ids], stable=True).indices]
    ys, xs = torch.meshgrid(torch.arange(H), torch.arange(W), indexing="ij")
    px, py = xs.double() + 0.5, ys.double() + 0.5
    out = torch.zeros(H, W, feats.shape[1] + 1, dtype=torch.float64)
    T = torch.ones(H, W, dtype=torch.float64)
    done = torch.zeros(H, W, dtype=torch.bool)
    for i in ids.tolist():
        m, c = proj.means2d[i].double(), proj.conics[i].double()
        dx, dy = m[0] - px, m[1] - py
        sig = 0.5 * (c[0] * dx * dx + c[2] * dy * dy) + c[1] * dx * dy
        a = (float(opac[i]) * torch.exp(-sig)).clamp(max=ALPHA_MAX)
        ok = (sig >= 0) & (a >= ALPHA_MIN) & ~done
        nT = T * (1 - a)
        stop = ok & (nT <= T_STOP)
        done |= stop
        ok &= ~stop
        w = torch.where(ok, a * T, torch.zeros((), dtype=torch.float64))
        out[..., :-1] += w[..., None] * feats[i].double()
        out[..., -1] += w
        T = torch.where(ok, nT, T)
    return out


# --------------------------------------------------------------------------------------- rasteriser


@pytest.fixture(scope="module")
def tiny():
    means, cov, op, col = random_scene()
    cam = orbit_camera(30.0, 20.0, 3.0, up="z", width=40, height=32)
    proj = project_gaussians(means, cov, cam.viewmat, cam.K, 40, 32)
    feats = torch.cat([col, proj.depths[:, None]], 1)
    ref = brute_force(proj, op, feats, 40, 32)
    return proj, op, feats, ref


def test_tiles_match_brute_force(tiny):
    proj, op, feats, ref = tiny
    assert (ref[..., -1] > 0.99).any() and (ref[..., -1] == 0).any()  # saturated and empty pixels exist
    for ts in (2, 4, 8):
        img = rasterize_tiles(proj.means2d, proj.conics, op, proj.radii, proj.depths, feats, 40, 32, tile_size=ts)
        assert img.shape == (32, 40, 5)
        assert (img.double() - ref).abs().max() < 1e-5, ts


def test_pairs_reference_matches_brute_force(tiny):
    proj, op, feats, ref = tiny
    img = rasterize_pairs_reference(proj.means2d, proj.conics, op, proj.radii, proj.depths, feats, 40, 32)
    assert (img.double() - ref).abs().max() < 1e-5


def test_chunked_equals_unchunked(tiny):
    proj, op, feats, _ = tiny
    args = (proj.means2d, proj.conics, op, proj.radii, proj.depths, feats, 40, 32)
    big = rasterize_tiles(*args, max_evals=1 << 30)
    for me in (1500, 6000):  # 5 and 23 blocks of 16 rows x 16 pixels per chunk
        assert torch.equal(rasterize_tiles(*args, max_evals=me), big)
    for mi in (1, 300):  # bands of tile rows (1: one row per band)
        assert torch.equal(rasterize_tiles(*args, max_isect=mi), big)
    for blk in (1, 4, 32):  # block size changes float32 summation order only
        assert (rasterize_tiles(*args, block=blk) - big).abs().max() < 2e-6
    pbig = rasterize_pairs_reference(*args, max_pairs=1 << 30)
    assert torch.equal(rasterize_pairs_reference(*args, max_pairs=300), pbig)
    assert (pbig - big).abs().max() < 1e-5


def test_rasterize_outputs_and_background():
    means, cov, op, col = random_scene(seed=1)
    cam = orbit_camera(10.0, 10.0, 3.0, width=48, height=32)
    out = rasterize(means, cov, op, col, cam.viewmat, cam.K, 48, 32)
    assert out.rgb.shape == (32, 48, 3) and out.alpha.shape == (32, 48, 1) and out.depth.shape == (32, 48, 1)
    assert out.alpha.min() >= 0 and out.alpha.max() <= 1
    bg = torch.tensor([0.2, 0.4, 1.0])
    out_bg = rasterize(means, cov, op, col, cam.viewmat, cam.K, 48, 32, background=bg)
    assert torch.allclose(out_bg.rgb, out.rgb + (1 - out.alpha) * bg, atol=1e-6)
    # expected depth lies within the camera-space depth range of the Gaussians where covered
    proj = project_gaussians(means, cov, cam.viewmat, cam.K, 48, 32)
    d = out.depth[out.alpha > 0.5]
    assert d.min() >= proj.depths.min() - 1e-4 and d.max() <= proj.depths.max() + 1e-4


def test_single_gaussian_analytic():
    """One isotropic Gaussian at the optical axis: alpha(px) = o exp(-r^2 / (2 (s^2 f^2 / z^2 + 0.3)))."""
    z, s, o, f = 2.0, 0.05, 0.8, 50.0
    means = torch.tensor([[0.0, 0.0, z]])
    cov = torch.eye(3)[None] * s * s
    K = torch.tensor([[f, 0, 16.0], [0, f, 16.0], [0, 0, 1]])
    out = rasterize(means, cov, torch.tensor([o]), torch.ones(1, 3), torch.eye(4), K, 32, 32)
    var = (s * f / z) ** 2 + 0.3
    ys, xs = torch.meshgrid(torch.arange(32) + 0.5, torch.arange(32) + 0.5, indexing="ij")
    expect = o * torch.exp(-((xs - 16) ** 2 + (ys - 16) ** 2) / (2 * var))
    expect = torch.where(expect >= 1 / 255, expect, torch.zeros(()))
    assert (out.alpha[..., 0] - expect).abs().max() < 1e-5
    assert torch.allclose(out.depth[out.alpha > 0], torch.tensor(z))


# ------------------------------------------------------------------------------ gsplat torch oracles


def test_projection_matches_gsplat_torch_impl():
    impl = pytest.importorskip("gsplat.cuda._torch_impl")
    means, cov, _, _ = random_scene(n=2000, smax=0.1, seed=3, center=(0.0, 0.0, 0.5))
    cam = orbit_camera(40.0, 25.0, 2.0, width=64, height=48)
    K = cam.K.clone()
    K[0, 2] += 3.0  # off-centre principal point
    radii, m2, depths, conics, _ = impl._fully_fused_projection(
        means, cov, cam.viewmat[None], K[None], 64, 48, eps2d=0.3
    )
    p = project_gaussians(means, cov, cam.viewmat, K, 64, 48)
    assert torch.equal(p.radii, radii[0])
    vis = (p.radii > 0).all(-1)
    assert vis.sum() > 500
    assert (p.means2d[vis] - m2[0][vis]).abs().max() < 1e-3
    assert torch.allclose(p.depths, depths[0], atol=1e-5)
    assert torch.allclose(p.conics[vis], conics[0][vis], rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("degree", [0, 1, 2, 3, 4])
def test_sh_matches_gsplat_torch_impl(degree):
    impl = pytest.importorskip("gsplat.cuda._torch_impl")
    g = torch.Generator().manual_seed(degree)
    sh = torch.randn(500, (degree + 1) ** 2, 3, generator=g, dtype=torch.float64)
    dirs = torch.randn(500, 3, generator=g, dtype=torch.float64)
    ref = impl._spherical_harmonics(degree, dirs, sh)
    assert (eval_sh(sh, dirs) - ref).abs().max() < 1e-12


def test_sh_degree_truncation_and_errors():
    g = torch.Generator().manual_seed(0)
    sh = torch.randn(10, 16, 3, generator=g)
    dirs = torch.randn(10, 3, generator=g)
    assert torch.allclose(eval_sh(sh, dirs, degree=1), eval_sh(sh[:, :4], dirs))
    assert torch.allclose(eval_sh(sh[:, :1], dirs), sh[:, 0] * 0.28209479177387814)
    with pytest.raises(OptionError):
        eval_sh(sh[:, :5], dirs)
    with pytest.raises(OptionError):
        eval_sh(sh, dirs, degree=4)


def test_rigid_motion_with_view_rotations_is_invariant():
    """method.md 10: move object and camera rigidly together, pass R as view_rotations -> same image."""
    means, cov, op, sh = random_scene(n=600, seed=5, sh_degree=3)
    cam = orbit_camera(20.0, 15.0, 3.5, width=48, height=40)
    base = rasterize(means, cov, op, sh, cam.viewmat, cam.K, 48, 40)
    Rq = quat_to_rotmat(torch.tensor([0.8, 0.3, -0.4, 0.33]))
    t = torch.tensor([0.7, -1.2, 2.0])
    means2 = means @ Rq.T + t
    cov2 = Rq @ cov @ Rq.T
    M = torch.eye(4)
    M[:3, :3], M[:3, 3] = Rq, t
    view2 = cam.viewmat @ torch.linalg.inv(M)
    rots = Rq.expand(means.shape[0], 3, 3)
    moved = rasterize(means2, cov2, op, sh, view2, cam.K, 48, 40, view_rotations=rots)
    assert base.alpha.max() > 0.5
    assert (moved.rgb - base.rgb).abs().max() < 1e-4
    assert (moved.alpha - base.alpha).abs().max() < 1e-4
    # without the rotation the view-dependent colours differ
    wrong = rasterize(means2, cov2, op, sh, view2, cam.K, 48, 40)
    assert (wrong.rgb - base.rgb).abs().max() > 1e-2


# --------------------------------------------------------------------------------------- backends


def test_cpu_path_never_touches_gsplat(monkeypatch):
    monkeypatch.setitem(sys.modules, "gsplat", None)  # any `import gsplat` now raises ImportError

    def boom(*a, **k):
        raise AssertionError("gsplat backend reached on CPU")

    monkeypatch.setattr(rast_mod, "_rasterize_gsplat", boom)
    means, cov, op, col = random_scene(n=50)
    cam = orbit_camera(0.0, 0.0, 3.0, width=16, height=16)
    out = rasterize(means, cov, op, col, cam.viewmat, cam.K, 16, 16, backend="auto")
    assert out.alpha.max() > 0
    rasterize(means, cov, op, col, cam.viewmat, cam.K, 16, 16, backend="torch")
    if not torch.cuda.is_available():
        with pytest.raises(OptionError, match="CUDA"):
            rasterize(means, cov, op, col, cam.viewmat, cam.K, 16, 16, backend="gsplat")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gsplat_matches_torch_backend_on_gpu():
    means, cov, op, sh = random_scene(n=3000, smax=0.05, seed=7, sh_degree=3)
    cam = orbit_camera(30.0, 20.0, 3.0, width=128, height=96)
    a = rasterize(means, cov, op, sh, cam.viewmat, cam.K, 128, 96, backend="torch")
    dev = torch.device("cuda")
    b = rasterize(means.to(dev), cov.to(dev), op.to(dev), sh.to(dev), cam.viewmat.to(dev), cam.K.to(dev), 128, 96,
                  backend="gsplat")
    assert (a.rgb - b.rgb.cpu()).abs().max() < 2e-2
    assert (a.alpha - b.alpha.cpu()).abs().max() < 2e-2


def test_bad_inputs_raise_clear_errors():
    means, cov, op, col = random_scene(n=10)
    cam = orbit_camera(0.0, 0.0, 3.0, width=16, height=16)
    vm, K = cam.viewmat, cam.K
    with pytest.raises(OptionError, match="viewmat"):
        rasterize(means, cov, op, col, vm[:3], K, 16, 16)
    bad = vm.clone()
    bad[:3, :3] *= 2.0
    with pytest.raises(OptionError, match="rotation"):
        rasterize(means, cov, op, col, bad, K, 16, 16)
    badK = K.clone()
    badK[0, 0] = -1.0
    with pytest.raises(OptionError, match="focal"):
        rasterize(means, cov, op, col, vm, badK, 16, 16)
    nanK = K.clone()
    nanK[1, 2] = float("nan")
    with pytest.raises(OptionError, match="NaN"):
        rasterize(means, cov, op, col, vm, nanK, 16, 16)
    with pytest.raises(OptionError, match="image size"):
        rasterize(means, cov, op, col, vm, K, 0, 16)
    with pytest.raises(OptionError, match="covars"):
        rasterize(means, cov[:5], op, col, vm, K, 16, 16)
    with pytest.raises(OptionError, match="SH|coefficient"):
        rasterize(means, cov, op, torch.zeros(10, 5, 3), vm, K, 16, 16)
    with pytest.raises(OptionError, match="backend"):
        rasterize(means, cov, op, col, vm, K, 16, 16, backend="vulkan")
    with pytest.raises(OptionError, match="background"):
        rasterize(means, cov, op, col, vm, K, 16, 16, background=torch.zeros(4))
    with pytest.raises(OptionError, match="distance"):
        orbit_camera(0.0, 0.0, -1.0)
    with pytest.raises(OptionError, match="elevation"):
        orbit_camera(0.0, 90.0, 1.0)
    with pytest.raises(OptionError, match="up axis"):
        orbit_camera(0.0, 0.0, 1.0, up="w")
    with pytest.raises(OptionError, match="field of view"):
        orbit_camera(0.0, 0.0, 1.0, fov_y=4.0)


def test_empty_and_behind_camera():
    means, cov, op, col = random_scene(n=20)
    out = rasterize(means[:0], cov[:0], op[:0], col[:0], torch.eye(4), torch.tensor([[10.0, 0, 8], [0, 10.0, 8], [0, 0, 1]]), 16, 16)
    assert out.alpha.abs().max() == 0
    behind = means - torch.tensor([0.0, 0.0, 10.0])
    out = rasterize(behind, cov, op, col, torch.eye(4), torch.tensor([[10.0, 0, 8], [0, 10.0, 8], [0, 0, 1]]), 16, 16)
    assert out.alpha.abs().max() == 0


# ------------------------------------------------------------------------------------------ cameras


def _project_point(cam: Camera, p):
    ph = cam.viewmat @ torch.cat([torch.as_tensor(p, dtype=torch.float32), torch.ones(1)])
    uv = cam.K @ ph[:3]
    return uv[:2] / uv[2], ph[2]


@pytest.mark.parametrize("up", ["y", "-y", "z", "-z", (1.0, 1.0, 0.0)])
def test_orbit_camera_looks_at_target_with_up_up(up):
    target = torch.tensor([0.3, -0.2, 1.0])
    cam = orbit_camera(35.0, 20.0, 4.0, target=target, up=up, width=64, height=48)
    uv, z = _project_point(cam, target)
    assert torch.allclose(uv, torch.tensor([32.0, 24.0]), atol=1e-4) and z > 0
    assert torch.allclose(cam.center.double().sub(target.double()).norm(), torch.tensor(4.0, dtype=torch.float64), atol=1e-4)
    from physskin_gs.render import up_vector

    above = target + 0.5 * up_vector(up).float()
    uv_up, _ = _project_point(cam, above)
    assert uv_up[1] < 24.0 - 1.0  # "up" is towards the top of the image (smaller v)
    # elevation: the camera sits above the target along up
    assert float((cam.center - target) @ up_vector(up).float()) == pytest.approx(4.0 * math.sin(math.radians(20)), abs=1e-4)


def test_look_at_is_rigid_and_orbit_turntable_is_consistent():
    vm = look_at([1.0, 2.0, 3.0], [0.0, 0.0, 0.0], up="z")
    R = vm[:3, :3]
    assert torch.allclose(R @ R.T, torch.eye(3), atol=1e-6) and torch.det(R) > 0
    with pytest.raises(OptionError):
        look_at([0, 0, 1.0], [0, 0, 0.0], up="z")  # looking straight down the up axis
    c0 = orbit_camera(0.0, 10.0, 2.0, up="z").center
    c90 = orbit_camera(90.0, 10.0, 2.0, up="z").center
    assert abs(float(c0[:2] @ c90[:2])) < 1e-5  # 90 degrees apart around z


def test_camera_from_viser_matches_formats_md():
    R = quat_to_rotmat(torch.tensor([0.9, 0.1, -0.3, 0.2]))  # camera-to-world
    q = rotmat_to_quat(R)
    pos = torch.tensor([1.0, -2.0, 0.5])
    cam = camera_from_viser(q.tolist(), pos.tolist(), math.radians(60.0), 320, 240)
    c2w = torch.eye(4)
    c2w[:3, :3], c2w[:3, 3] = R, pos
    assert torch.allclose(cam.viewmat, torch.linalg.inv(c2w), atol=1e-5)
    fy = 240 / (2 * math.tan(math.radians(30.0)))
    assert torch.allclose(cam.K, torch.tensor([[fy, 0, 160.0], [0, fy, 120.0], [0, 0, 1]]), atol=1e-4)
    assert torch.allclose(cam.center, pos, atol=1e-5)
    # a point straight ahead (+z of the camera) lands at the image centre
    uv, z = _project_point(cam, pos + R[:, 2] * 3.0)
    assert torch.allclose(uv, torch.tensor([160.0, 120.0]), atol=1e-3) and z > 0


def test_auto_frame_ignores_outliers_and_fits_scene():
    g = torch.Generator().manual_seed(0)
    pts = torch.rand(5000, 3, generator=g) * torch.tensor([2.0, 1.0, 0.5]) + torch.tensor([10.0, 0.0, 0.0])
    pts[:10] = 1e4  # outliers
    lo, hi = robust_bounds(pts)
    assert (hi < 20).all() and lo[0] > 9.5 and hi[0] < 12.5
    cam = auto_frame(pts, up="z", width=64, height=48)
    inl = pts[10:]
    ph = inl @ cam.viewmat[:3, :3].T + cam.viewmat[:3, 3]
    uv = ph @ cam.K.T
    uv = uv[:, :2] / uv[:, 2:]
    assert (ph[:, 2] > 0).all()
    assert (uv[:, 0] > 0).all() and (uv[:, 0] < 64).all() and (uv[:, 1] > 0).all() and (uv[:, 1] < 48).all()
    # and it is not absurdly far: the box spans a good part of the image
    assert float(uv[:, 0].max() - uv[:, 0].min()) > 20


# ----------------------------------------------------------------------------------- video helpers


def test_to_uint8_and_write_video_png_fallback(tmp_path, monkeypatch):
    frames = [to_uint8(torch.full((32, 48, 3), v)) for v in (0.0, 0.5, 1.2)]
    assert frames[1][0, 0, 0] == 128 and frames[2].max() == 255
    from physskin_gs.render import video

    monkeypatch.setattr(video, "_has_ffmpeg", lambda: False)
    with pytest.warns(UserWarning, match="imageio-ffmpeg"):
        out = write_video(iter(frames), tmp_path / "clip.mp4", fps=10)
    import imageio.v2 as imageio

    files = sorted(out.iterdir())
    assert [f.name for f in files] == ["frame0001.png", "frame0002.png", "frame0003.png"]
    assert np.array_equal(imageio.imread(files[1]), frames[1])
    with pytest.raises(OptionError, match="size"), pytest.warns(UserWarning, match="imageio-ffmpeg"):
        write_video([frames[0], frames[0][:16]], tmp_path / "bad.mp4")
    with pytest.raises(OptionError, match="no frames"), pytest.warns(UserWarning, match="imageio-ffmpeg"):
        write_video([], tmp_path / "none.mp4")


def test_write_video_mp4(tmp_path):
    pytest.importorskip("imageio_ffmpeg")
    frames = [to_uint8(torch.rand(40, 50, 3, generator=torch.Generator().manual_seed(i))) for i in range(4)]
    out = write_video(frames, tmp_path / "clip.mp4", fps=8)
    assert out == tmp_path / "clip.mp4" and out.stat().st_size > 500
    import imageio.v2 as imageio

    r = imageio.get_reader(str(out))
    first = r.get_data(0)
    r.close()
    assert first.shape == (48, 64, 3)  # padded to multiples of 16, never resized


def test_an_interrupt_while_ffmpeg_starts_leaves_no_ffmpeg_and_no_partial_file(tmp_path, monkeypatch):
    """Ctrl-C right after the first frame's fork of ffmpeg (before imageio holds the process): the interrupt is
    raised once the writer holds it, ffmpeg is closed and waited for, and neither the video nor its partial file
    is left (before: an orphaned ffmpeg wrote an empty ``.v.partial.mp4`` after the command had exited)."""
    import os
    import signal
    import subprocess

    pytest.importorskip("imageio_ffmpeg")
    from physskin_gs import interrupts
    from physskin_gs.render.video import write_video

    started = []
    real_popen = subprocess.Popen

    class InterruptedPopen(real_popen):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            started.append(self)
            if len(started) == 1:
                os.kill(os.getpid(), signal.SIGINT)  # arrives as soon as the fork returns

    monkeypatch.setattr(subprocess, "Popen", InterruptedPopen)
    restore = interrupts.install()
    try:
        frames = (np.full((32, 32, 3), 40 * k, np.uint8) for k in range(5))
        with pytest.raises(KeyboardInterrupt):
            write_video(frames, tmp_path / "v.mp4", fps=10)
    finally:
        restore()
        interrupts.reset()
    assert started and all(p.poll() is not None for p in started)  # ffmpeg has exited, none left running
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_scene_far_from_the_origin_renders_as_it_does_near_it():
    """A scene 1e5 units out (float32's 2^-7 apart there) renders as the same rounded Gaussians near the origin:
    the rasteriser works about a local origin. In float32, ``R x + t`` with x and t both 1e5 cancelled most digits
    and drew a capture blocky (a fresh user's report)."""
    means, cov, op, col = random_scene(seed=3)
    cam = orbit_camera(10.0, 10.0, 3.0, width=64, height=48)
    off = torch.tensor([1.0e5, -1.2e5, 0.8e5], dtype=torch.float64)
    far = (means.double() + off).float()
    near = (far.double() - off).float()  # the same rounded positions, near the origin (exact)
    vm = cam.viewmat.double().clone()
    vm[:3, 3] -= vm[:3, :3] @ off  # the same camera in the far frame
    out = rasterize(far, cov, op, col, vm, cam.K, 64, 48)
    ref = rasterize(near, cov, op, col, cam.viewmat, cam.K, 64, 48)
    assert ref.alpha.mean() > 0.2
    assert (out.rgb - ref.rgb).abs().max() < 1e-3 and (out.alpha - ref.alpha).abs().max() < 1e-3


def test_a_scene_smaller_than_the_near_plane_renders_as_its_enlargement():
    """The near plane is a fraction of the Gaussians' extent under 1 unit: a scene in kilometres (a 1 m object
    0.001 units across, the camera 0.003 away) was culled whole by a fixed 0.01 and rendered empty."""
    means, cov, op, col = random_scene(seed=4)
    cam = orbit_camera(10.0, 10.0, 3.0, width=64, height=48)
    ref = rasterize(means, cov, op, col, cam.viewmat, cam.K, 64, 48)
    for s in (1e-3, 1e-5):
        vm = cam.viewmat.double().clone()
        vm[:3, 3] *= s
        out = rasterize(means * s, cov * s * s, op, col, vm, cam.K, 64, 48)
        assert ref.alpha.mean() > 0.2 and (out.rgb - ref.rgb).abs().max() < 1e-3, s


def test_write_video_webm_is_vp9(tmp_path):
    """``.webm`` holds no H.264: ffmpeg refused every frame and the run ended with "held 0 of 4 frames (a full
    disk?)". It is written as VP9 now, with every frame."""
    pytest.importorskip("imageio_ffmpeg")
    from physskin_gs.render.video import video_frame_count

    frames = [np.full((32, 48, 3), 40 * i, np.uint8) for i in range(5)]
    out = write_video(frames, tmp_path / "v.webm", fps=10)
    assert out == tmp_path / "v.webm" and video_frame_count(out) == 5
    import imageio.v2 as iio

    assert iio.get_reader(str(out)).get_meta_data().get("codec") == "vp9"


def test_animate_gif_plays_at_its_frame_rate(tmp_path, capsys):
    """A GIF's delays are whole centiseconds: imageio takes milliseconds, and 1 / fps gave 0 ms delays (played at
    about 10 fps); 33.3 fps is 30 ms now, and the GIF loops."""
    from PIL import Image

    from physskin_gs.cli import main

    demo = __import__("pathlib").Path(__file__).resolve().parents[1] / "data" / "spot_mesh2splat_10k.splat"
    out = tmp_path / "v.gif"
    assert main(["animate", str(demo), "--headless", "--frames", "3", "--cubature", "64", "--width", "64",
                 "--height", "64", "--video", str(out)]) == 0
    im = Image.open(out)
    assert im.n_frames == 3 and im.info["duration"] == 30 and im.info["loop"] == 0


def test_render_turntable_writes_a_gif(tmp_path):
    """``render --turntable -o x.gif`` was refused although ``animate --video x.gif`` wrote one: both go through
    write_video now (a looping GIF at whole centiseconds per frame)."""
    from PIL import Image

    from physskin_gs.cli import main

    demo = __import__("pathlib").Path(__file__).resolve().parents[1] / "data" / "spot_mesh2splat_10k.splat"
    out = tmp_path / "t.gif"
    assert main(["render", str(demo), "--turntable", "4", "--fps", "25", "--width", "32", "--height", "32",
                 "-o", str(out)]) == 0
    im = Image.open(out)
    assert im.n_frames == 4 and im.info["duration"] == 40 and im.info["loop"] == 0
    assert not [p for p in tmp_path.iterdir() if p.name != "t.gif"]  # no temporary file left
