"""Tests for physskin_gs.pipeline (selection, frames, static parts, drags, export) on synthetic and real scenes."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from physskin_gs.errors import OptionError
from physskin_gs.pipeline import (
    AnimationConfig,
    PipelineWarning,
    load_for_animation,
    parse_selection,
    parse_selection_spec,
    prepare_animation,
    resolve_up,
)
from physskin_gs.scene import GaussianScene


def _blob_scene(n=1500, seed=0, offset=(0.0, 0.0, 0.0), size=1.0, sh_k=3):
    """A solid box of Gaussians (filled, so the interior fill is trivial) plus a few far 'background' ones."""
    g = torch.Generator().manual_seed(seed)
    means = (torch.rand(n, 3, generator=g) - 0.5) * torch.tensor([size, 0.6 * size, 0.4 * size]) + torch.tensor(offset)
    bg = torch.tensor([[5.0, 5.0, 5.0], [5.2, 5.0, 5.0], [5.0, 5.3, 5.0], [5.0, 5.0, 5.4], [5.1, 5.1, 5.1]])
    means = torch.cat([means, bg])
    N = means.shape[0]
    return GaussianScene(
        means=means, quats=torch.randn(N, 4, generator=g), log_scales=torch.full((N, 3), math.log(0.02 * size)),
        opacity_logits=torch.full((N,), 3.0), sh_dc=torch.randn(N, 3, generator=g) * 0.5,
        sh_rest=torch.randn(N, sh_k, 3, generator=g) * 0.1, format="inria-ply", source="synthetic",
    )


def _cfg(**kw):
    base = dict(skinning="fit", num_cubature=96, newton_iters=4, fit_seconds=1.0,
                select="-2,-2,-2,2,2,2", up="z")
    base.update(kw)
    return AnimationConfig(**base)


def _prepare(scene, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PipelineWarning)
        return prepare_animation(scene, _cfg(**kw))


def test_selection_rules():
    sc = _blob_scene()
    assert int(parse_selection(None, sc).sum()) == sc.num_gaussians
    box = parse_selection("-2,-2,-2,2,2,2", sc)
    assert int(box.sum()) == sc.num_gaussians - 5
    sc.opacity_logits[:100] = -5.0
    assert int(parse_selection("opacity>0.1", sc).sum()) == sc.num_gaussians - 100
    assert int(parse_selection("opacity <= 0.1", sc).sum()) == 100
    sc.means[0, 0] = float("nan")
    assert not bool(parse_selection(None, sc)[0])  # non-finite rows never move
    for bad in ("1,2,3", "0,0,0,-1,1,1", "opacity>>1", "9,9,9,10,10,10", "opacity>", "opacity>nan", "auto"):
        with pytest.raises(OptionError):
            parse_selection(bad, sc)
    # the syntax alone, without a scene (what the CLI checks before loading a file)
    assert parse_selection_spec(" Auto ")[0] == "auto" and parse_selection_spec(None) == ("all", None)
    assert parse_selection_spec("opacity >= 0.25") == ("rule", (">=", 0.25))
    assert parse_selection_spec("-1,-2,-3,1,2,3") == ("box", ([-1.0, -2.0, -3.0], [1.0, 2.0, 3.0]))
    for bad in ("1,2,3", "0,0,0,-1,1,1", "opacity>", "opacity>inf", "x,1,2,3,4,5"):
        with pytest.raises(OptionError):
            parse_selection_spec(bad)
    with pytest.raises(OptionError):
        resolve_up("w")
    assert resolve_up("auto", sc).tolist() == [0.0, 0.0, 1.0]


def test_static_part_unchanged_and_moving_part_falls():
    sc = _blob_scene()
    anim = _prepare(sc)
    assert anim.moving.sum() == sc.num_gaussians - 5
    floor_scene = anim.floor_scene
    lowest = float(sc.means[anim.moving, 2].min())
    assert floor_scene == pytest.approx(lowest - 0.25 * anim.height_scene, rel=1e-6)
    for _ in range(25):
        st = anim.step()
    assert st["frame"] == 25 and math.isfinite(st["energy"]["total"])
    dg = anim.deformed_gaussians()
    static = ~anim.moving
    assert torch.equal(dg.means[static], sc.means[static])
    assert torch.allclose(dg.covars[static], sc.covariances()[static])
    assert torch.isfinite(dg.means).all() and torch.isfinite(dg.covars).all()
    assert dg.view_rotations.shape == (sc.num_gaussians, 3, 3) and dg.sh.shape == sc.sh.shape
    # the moving part fell onto the floor (scene units; simulated as 1 m across)
    low = float(dg.means[anim.moving, 2].min())
    assert low < lowest - 0.15 * anim.height_scene
    assert low > floor_scene - 0.05 * anim.height_scene
    ds = anim.deformed_scene()
    assert torch.equal(ds.means[static], sc.means[static]) and torch.equal(ds.quats[static], sc.quats[static])
    assert torch.equal(ds.sh_rest[static], sc.sh_rest[static])
    L = ds.rotations() * ds.scales[:, None, :]
    assert torch.allclose(L @ L.transpose(1, 2), dg.covars, rtol=1e-3, atol=1e-7)
    anim.reset()
    assert anim.frame == 0
    assert torch.allclose(anim.deformed_gaussians().means, sc.means)


def test_frame_scaling_and_scene_transforms():
    """Handle transforms in the simulation frame map to the scene frame (Z_scene = [A | b/s - A c]) and
    the weight gradients follow grad_sim W = grad_norm W / (s s_n)."""
    sc = _blob_scene(offset=(3.0, -1.0, 2.0), size=4.0)
    # a deterministic analytic field: a time-budgeted fit varies from run to run, and with it how exactly the
    # simulator's whitened basis keeps the constant handle
    anim = _prepare(sc, select="-10,-10,-10,10,10,10", scale=0.25, skinning="rbf")
    assert anim.sim_scale == 0.25
    sim = anim.sim
    # a pure stretch diag(2, 1, 1) of the simulation frame about its origin doubles the x-extent in the scene
    Z = torch.zeros(anim.num_handles, 3, 4, dtype=torch.float64)
    Z[-1, 0, 0] = 1.0
    sim.q = torch.linalg.lstsq(sim.T, Z.reshape(anim.num_handles, 12)).solution.reshape(sim.H, 3, 4).permute(1, 0, 2).reshape(3, sim.K4)
    anim._cache_key = None
    m = anim.deformed_gaussians().means[anim.moving]
    m0 = sc.means[anim.moving]
    ext0 = m0.max(0).values - m0.min(0).values
    ext1 = m.max(0).values - m.min(0).values
    assert torch.allclose(ext1, ext0 * torch.tensor([2.0, 1.0, 1.0]), rtol=1e-4)
    assert torch.allclose(m.mean(0)[0], m0.mean(0)[0] + (m0.mean(0)[0] - float(anim.center[0])), atol=1e-3)
    # chain rule: the simulator's F equals the finite-difference Jacobian of the simulated map in metres
    from physskin_gs.lbs import deformation_gradient

    g = torch.Generator().manual_seed(1)
    sim.q = 0.05 * torch.randn(3, sim.K4, generator=g, dtype=torch.float64)
    F_sim = sim.deformation_gradients()[:4]
    Zs = anim.handle_transforms_scene()
    Xs = anim._cub_rest_scene[:4]
    W, dW = anim.field.weights_and_grads(anim.norm.to_normalized(Xs).float())
    F_scene = deformation_gradient(Xs, W.double(), dW.double() / anim.norm.scale, Zs)
    assert torch.allclose(F_sim, F_scene, atol=2e-4)


def test_drag_pulls_points_toward_target():
    sc = _blob_scene()
    anim = _prepare(sc, gravity=0.0, floor=False)
    p = sc.means[anim.moving][0].double()
    did = anim.start_drag(p, radius=0.2)
    target = p + torch.tensor([0.0, 0.0, 0.3], dtype=torch.float64)
    anim.update_drag(did, target)
    for _ in range(20):
        anim.step()
    x = anim.cubature_positions().double()
    idx = anim.sim.drags[did].idx
    moved = (x[idx] - anim._cub_rest_scene[idx]).mean(0)
    assert moved[2] > 0.15 and abs(float(moved[0])) < 0.1
    anim.end_drag(did)
    assert did not in anim.sim.drags
    h = anim.start_handle_drag(0)
    assert anim.sim.drags[h].idx.numel() > 0
    with pytest.raises(OptionError):
        anim.start_handle_drag(anim.num_handles - 1)
    assert anim.handle_positions().shape == (anim.num_handles - 1, 3)
    assert anim.skinning_weights().shape == (int(anim.moving.sum()), anim.num_handles)


def test_pins_and_material_changes():
    sc = _blob_scene()
    anim = _prepare(sc, pin="below:0.2", floor=False)
    pinned = anim.sim.pin.idx
    for _ in range(10):
        anim.step()
    x = anim.cubature_positions().double()
    assert (x[pinned] - anim._cub_rest_scene[pinned]).norm(dim=1).max() < 0.02
    anim.set_material(E=5e4, nu=0.3, density=200)
    assert anim.sim.mu == pytest.approx(5e4 / 2.6) and anim.sim.lam == pytest.approx(5e4 * 0.3 / (1.3 * 0.4))
    anim.set_damping(0.1)
    anim.set_gravity(9.8, direction=(1.0, 0.0, 0.0))
    anim.set_floor(True, height=-1.0)
    anim.dt = 0.02
    free = torch.ones(x.shape[0], dtype=torch.bool)
    free[pinned] = False
    x_before = anim.cubature_positions().double()
    anim.step(2)
    x_after = anim.cubature_positions().double()
    assert torch.isfinite(x_after).all()
    assert float((x_after[free, 0] - x_before[free, 0]).mean()) > 0  # gravity now pulls along +x
    anim.set_pin("box:-2,-2,-2,0,2,2")
    assert anim.sim.pin is not None and anim.sim.pin.idx.numel() > 0
    anim.set_pin(None)
    assert anim.sim.pin is None
    for bad in ("below:2", "box:1,2", "left:0.1"):
        with pytest.raises(OptionError):
            anim.set_pin(bad)
    with pytest.raises(OptionError):
        anim.set_material(nu=0.6)


def test_real_splat_drop_export_and_reload(splat_file, tmp_path):
    from physskin_gs.io import load_scene, save_scene

    scene = load_for_animation(splat_file("spot_mesh2splat_10k.splat"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PipelineWarning)
        anim = prepare_animation(scene, AnimationConfig(skinning="fit", fit_seconds=2.0, num_cubature=128, newton_iters=3))
    assert anim.up_vector.tolist() == [0.0, -1.0, 0.0]  # .splat: -y up
    for _ in range(6):
        anim.step()
    ds = anim.deformed_scene()
    out = save_scene(ds, tmp_path / "frame0001.ply")
    back = load_scene(out)
    assert back.num_gaussians == scene.num_gaussians
    assert torch.isfinite(back.means).all() and torch.isfinite(back.log_scales).all()
    assert torch.isfinite(back.quats).all()
    # it is falling along -up
    assert float((back.means.double() @ anim.up_vector).mean()) < float((scene.means.double() @ anim.up_vector).mean()) - 0.02


def test_mesh_input_animates(mesh_file):
    scene = load_for_animation(mesh_file("c3d_spot.obj"), num_mesh_gaussians=3000)
    assert scene.format == "mesh" and scene.num_gaussians == 3000
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PipelineWarning)
        anim = prepare_animation(scene, AnimationConfig(skinning="fit", fit_seconds=2.0, num_cubature=96, newton_iters=3))
    V0 = anim.deformed_mesh_vertices()
    assert V0.shape == scene.mesh.vertices.shape
    assert abs(V0 - scene.mesh.vertices).max() < 1e-5
    anim.step(4)
    V1 = anim.deformed_mesh_vertices()
    assert ((V1 - V0) @ anim.up_vector.float().numpy()).mean() < -0.01


def test_degenerate_gaussians_never_poison_the_run(tmp_path):
    """NaN rows, needle and vanishing scales and zero quaternions: the run stays finite and exports."""
    from physskin_gs.io import load_scene, save_scene

    sc = _blob_scene(800, seed=4)
    sc.means[:3] = float("nan")
    sc.log_scales[3:40, 0] = -30.0  # vanishing axis
    sc.log_scales[40:80] = torch.tensor([2.0, -25.0, -25.0])  # needles
    sc.quats[80:90] = 0.0
    sc.log_scales[90, 1] = float("nan")
    sc.opacity_logits[91] = float("inf")
    anim = _prepare(sc, select=None)
    assert not bool(anim.moving[:3].any()) and not bool(anim.moving[90])
    anim.step(6)
    dg = anim.deformed_gaussians()
    ok = torch.ones(sc.num_gaussians, dtype=torch.bool)
    ok[:3] = False
    assert torch.isfinite(dg.means[ok]).all() and torch.isfinite(dg.covars[anim.moving]).all()
    ds = anim.deformed_scene()
    assert torch.isfinite(ds.quats[anim.moving]).all() and torch.isfinite(ds.log_scales[anim.moving]).all()
    # invalid rows stay static and are written as invisible finite points (no NaN in an exported frame)
    assert torch.isfinite(ds.means[:3]).all() and (torch.sigmoid(ds.opacity_logits[:3]) < 1e-8).all()
    back = load_scene(save_scene(ds, tmp_path / "frame0001.ply"))
    assert back.num_gaussians == sc.num_gaussians


def test_analysis_names_where_the_fallback_up_axis_comes_from():
    """Without a support plane the up axis falls back to the file's recorded axis or its format's convention,
    and the reason says which (a physskin_gs export records its up axis; an INRIA PLY follows COLMAP's -y)."""
    from dataclasses import replace

    from physskin_gs.pipeline import analyze_for_animation

    sc = _blob_scene(n=1200, seed=3)
    a = analyze_for_animation(sc)
    assert a.up_source == "format-prior" and "using the up-axis convention of inria-ply files" in a.reason
    assert a.up.tolist() == [0.0, 0.0, 1.0]
    b = analyze_for_animation(replace(sc, up_hint=(0.0, -1.0, 0.0)))
    assert b.up_source == "format-prior" and b.reason.endswith("using the up axis recorded in the file")  # (no
    # stable-base evidence against a recorded axis)
    assert b.up.tolist() == [0.0, -1.0, 0.0]


def test_the_bottom_surface_rests_on_the_floor():
    """The floor acts on the interior cubature points; each point of the lowest layer meets it ``floor_lift`` above
    it, its height over the object's bottom surface in its column, so a hollow box (Gaussians on its six faces
    only: the cubature points are centroids of the filled cells, above the bottom face) dropped on the floor comes
    to rest with its bottom face on the floor (within 2 % of its height), not that gap below it (without lifts:
    7.5 %: the gap 6.3 % plus the sag)."""
    g = torch.Generator().manual_seed(4)
    n = 6000
    face = torch.randint(0, 6, (n,), generator=g)
    means = torch.rand(n, 3, generator=g) * torch.tensor([1.0, 0.6, 0.5])
    axis, side = face // 2, (face % 2).float()
    means[torch.arange(n), axis] = side * torch.tensor([1.0, 0.6, 0.5])[axis]
    sc = GaussianScene(means=means, quats=torch.tensor([[1.0, 0.0, 0.0, 0.0]]).repeat(n, 1),
                       log_scales=torch.full((n, 3), math.log(0.01)), opacity_logits=torch.full((n,), 4.0),
                       sh_dc=torch.zeros(n, 3), sh_rest=torch.zeros(n, 0, 3), source=None, format="synthetic")
    anim = _prepare(sc, select="all", skinning="eigen")
    up = anim.up_vector.double()
    h = anim.cubature_positions().double() @ up - float(torch.quantile(means.double() @ up, 0.005))  # [n]
    lowest = h < h.min() + 0.02 * anim.height_scene  # the lowest layer of cubature points
    assert float(h.min()) > 0.01 * anim.height_scene  # the cubature points lie inside, above the bottom face
    # their lifts: their heights above the bottom face (the face is flat: within its Gaussians' 2 % quantile)
    lift = torch.from_numpy(anim.floor_lift) / anim.sim_scale
    assert torch.allclose(lift[lowest], h[lowest], atol=0.005 * anim.height_scene)
    assert float(lift[h > 0.5 * anim.height_scene].abs().max()) == 0.0  # high points: none
    assert anim.floor_scene == pytest.approx(-0.25 * anim.height_scene, abs=1e-6)  # 25 % below the bottom face
    anim.step(60)
    now = anim.deformed_scene().means.double() @ up
    assert abs(float(torch.quantile(now, 0.005)) - anim.floor_scene) < 0.02 * anim.height_scene
