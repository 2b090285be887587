"""Tests for physskin_gs.model.grid_field (sparse-grid interpolant of a skinning field) and its use in the
pipeline (``AnimationConfig.field_eval``), issue #13."""

from __future__ import annotations

import warnings

import pytest
import torch

from physskin_gs.errors import OptionError
from physskin_gs.model.field import RBFSkinningField
from physskin_gs.model.grid_field import (
    GridSkinningField,
    choose_cell,
    deformation_difference,
    field_length_scale,
    grid_error_report,
    grid_interpolate_reference,
    plan_grid,
)


def _rbf(m=6, radius=0.4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return RBFSkinningField(torch.rand(m, 3, generator=g) * 1.6 - 0.8, radius)


def _shell(n=4000, seed=0, axes=(1.0, 0.6, 0.4)):
    """n points on an ellipsoid surface (a surface-only 'capture' in the normalised frame)."""
    g = torch.Generator().manual_seed(seed)
    d = torch.randn(n, 3, generator=g)
    return d / d.norm(dim=1, keepdim=True) * torch.tensor(axes)


def _fd_grad(grid, x, eps=1e-6):
    """Central differences of the grid interpolant (float64) at x (N, 3): (N, H, 3)."""
    cols = []
    for k in range(3):
        e = torch.zeros(3, dtype=torch.float64)
        e[k] = eps
        wp = grid.interpolate(x + e, torch.float64)[0]
        wm = grid.interpolate(x - e, torch.float64)[0]
        cols.append((wp - wm) / (2 * eps))
    return torch.stack(cols, -1)


@pytest.mark.parametrize("scheme", ["hermite", "catmull-rom", "trilinear"])
def test_vectorised_matches_plain_reference(scheme):
    f = _rbf()
    x = _shell(1500)
    grid = GridSkinningField(f, x, cell=0.12, scheme=scheme, check_tol=None)
    q = x[:25].double() * 0.99 + 0.003
    W, G, inside = grid.interpolate(q, torch.float64)
    Wr, Gr, inside_r = grid_interpolate_reference(grid, q)
    assert torch.equal(inside, inside_r) and bool(inside.all())
    assert (W - Wr).abs().max() < 1e-12 and (G - Gr).abs().max() < 1e-11


def test_analytic_gradient_equals_finite_difference_of_the_interpolant():
    f = _rbf()
    x = _shell(2000)
    grid = GridSkinningField(f, x, cell=0.1, check_tol=None)  # hermite
    g = torch.Generator().manual_seed(3)
    q = x[torch.randperm(x.shape[0], generator=g)[:300]].double() + 0.01 * torch.randn(300, 3, generator=g).double()
    W, G, inside = grid.interpolate(q, torch.float64)
    q, G = q[inside], G[inside]
    fd = _fd_grad(grid, q)  # C1: differences across cell faces are fine too
    assert (fd - G).abs().max() < 1e-6 * max(1.0, float(G.abs().max()))
    # trilinear: its gradient is the derivative of its interpolant inside a cell (away from the faces)
    tri = GridSkinningField(f, x, cell=0.1, scheme="trilinear", check_tol=None)
    idx, t = tri.locate(q)
    away = (idx >= 0) & ((t > 0.05) & (t < 0.95)).all(1)
    Wt, Gt, _ = tri.interpolate(q[away], torch.float64)
    assert (_fd_grad(tri, q[away]) - Gt).abs().max() < 1e-6 * max(1.0, float(Gt.abs().max()))


def test_hermite_is_c1_across_cell_faces_and_trilinear_is_not():
    f = _rbf(radius=0.3)
    x = _shell(2000)
    for scheme, c1 in (("hermite", True), ("trilinear", False)):
        grid = GridSkinningField(f, x, cell=0.1, scheme=scheme, check_tol=None)
        idx, t = grid.locate(x[:400])
        # the x-face of each point's cell, approached from both sides
        u = (x[:400].double() - grid.origin) / grid.cell
        face = torch.floor(u[:, 0])
        qa, qb = x[:400].double().clone(), x[:400].double().clone()
        qa[:, 0] = grid.origin[0] + (face - 1e-9) * grid.cell
        qb[:, 0] = grid.origin[0] + (face + 1e-9) * grid.cell
        Wa, Ga, ia = grid.interpolate(qa, torch.float64)
        Wb, Gb, ib = grid.interpolate(qb, torch.float64)
        both = ia & ib
        assert int(both.sum()) > 300
        assert (Wa - Wb)[both].abs().max() < 1e-6  # values are continuous for both schemes
        jump = float((Ga - Gb)[both].abs().max())
        if c1:
            assert jump < 1e-5
        else:
            assert jump > 1e-2


def test_error_bounds_on_an_analytic_field():
    """RBF field (exact gradients): hermite at h = 0.05 (radius 0.4, 8 cells per radius)."""
    f = _rbf(m=8, radius=0.4)
    x = _shell(3000)
    grid = GridSkinningField(f, x, cell=0.05, check_tol=None)
    rep = grid_error_report(f, grid, x)
    assert rep["inside_fraction"] == 1.0 and rep["num_points"] == 3000
    assert rep["w_max_rel"] < 2e-4 and rep["w_mean_rel"] < 1e-5
    assert rep["g_max_rel"] < 2e-3 and rep["g_mean_rel"] < 2e-4
    # trilinear at the same nodes is at least 10x worse on the gradient (piecewise constant derivative)
    tri = GridSkinningField(f, x, cell=0.05, scheme="trilinear", check_tol=None)
    rt = grid_error_report(f, tri, x)
    assert rt["g_mean_rel"] > 10 * rep["g_mean_rel"] and rt["w_mean_rel"] > 10 * rep["w_mean_rel"]
    # hermite converges about like h^3 in the gradient (h^4 in W)
    coarse = grid_error_report(f, GridSkinningField(f, x, cell=0.1, check_tol=None), x)
    assert coarse["g_mean_rel"] > 5 * rep["g_mean_rel"] and coarse["w_mean_rel"] > 10 * rep["w_mean_rel"]


@pytest.fixture(scope="module")
def eigen_case():
    from physskin_gs.model.eigen import build_eigen_field

    g = torch.Generator().manual_seed(0)
    p = torch.rand(16000, 3, generator=g) * 2 - 1
    vol = p[(p / torch.tensor([1.0, 0.6, 0.4])).pow(2).sum(1) < 1][:4000]
    field = build_eigen_field(vol, num_handles=9, num_nodes=300, seed=0)
    x = _shell(6000, seed=1) * 0.97
    W, G = field.weights_and_grads(x)
    return field, x, W, G


def test_error_bounds_on_the_eigen_field_with_the_resolution_rule(eigen_case):
    field, x, W, G = eigen_case
    grid = GridSkinningField(field, x, max_nodes=15000)  # the rule: 8 cells per length scale, capped
    assert grid.length_scale == pytest.approx(field_length_scale(W, G), rel=0.2)
    assert grid.num_nodes <= 15000
    rep = grid_error_report(field, grid, x, reference=(W, G))
    # measured: W max 9e-3 mean 7e-5, grad max 0.2 mean 3e-3 (the rejected cells take the rough fringe)
    assert rep["w_max_rel"] < 0.03 and rep["w_mean_rel"] < 5e-4
    assert rep["g_max_rel"] < 0.5 and rep["g_mean_rel"] < 1e-2
    assert rep["inside_fraction"] > 0.7
    # without the centre check the few rough cells dominate the maximum
    raw = grid_error_report(field, GridSkinningField(field, x, cell=grid.cell, check_tol=None), x, reference=(W, G))
    assert raw["g_max_rel"] >= rep["g_max_rel"]


def test_points_outside_the_grid_and_in_rejected_cells_are_exact(eigen_case):
    field, x, W, G = eigen_case
    grid = GridSkinningField(field, x, cell=0.05, check_tol=(0.002, 0.02), refine=0)
    assert grid.num_rejected > 0 and grid.child is None
    far = torch.tensor([[3.0, 0.0, 0.0], [0.0, -2.5, 1.0], [0.0, 0.0, 0.0]])  # the centre is inside the shell
    Wg, Gg = grid.weights_and_grads(far)
    Wb, Gb = field.weights_and_grads(far)
    assert torch.equal(Wg, Wb) and torch.equal(Gg, Gb)
    assert grid.last_fallback == 3
    idx, _ = grid.locate(x)
    out = idx < 0  # points of the rejected cells
    assert int(out.sum()) > 0
    Wg, Gg = grid.weights_and_grads(x)
    assert torch.equal(Wg[out], W[out]) and torch.equal(Gg[out], G[out])
    assert grid.last_fallback == int(out.sum())
    assert (grid.locate(torch.tensor([[float("nan"), 0.0, 0.0]]))[0] == -1).all()


def test_rejected_cells_are_refined_when_it_pays(eigen_case, monkeypatch):
    from physskin_gs.model import grid_field

    field, x, W, G = eigen_case
    tol = (0.002, 0.02)
    flat = GridSkinningField(field, x, cell=0.06, check_tol=tol, refine=0)
    monkeypatch.setattr(grid_field, "REFINE_GAIN", 0.0)  # always refine
    grid = GridSkinningField(field, x, cell=0.06, check_tol=tol, refine=1)
    assert grid.child is not None and grid.child.cell == pytest.approx(0.03) and grid.child.child is None
    assert grid.num_rejected == flat.num_rejected > 0
    Wg, Gg = grid.weights_and_grads(x)
    flat.weights_and_grads(x)
    assert grid.last_refined > 0 and grid.last_refined + grid.last_fallback == flat.last_fallback
    assert grid.last_fallback < flat.last_fallback
    # rows that neither grid interpolates are the base field's; the others are at most as wrong as the tolerance
    # allows at the refined level
    idx, _ = grid.locate(x)
    idx2, _ = grid.child.locate(x)
    direct = (idx < 0) & (idx2 < 0)
    assert torch.equal(Wg[direct], W[direct]) and torch.equal(Gg[direct], G[direct])
    rep = grid_error_report(field, grid, x, reference=(W, G))
    assert rep["g_max_rel"] < 0.5 and rep["w_max_rel"] < 0.03
    monkeypatch.setattr(grid_field, "REFINE_GAIN", 1e9)  # never worth it: direct, as with refine=0
    assert GridSkinningField(field, x, cell=0.06, check_tol=tol).child is None


def test_constant_handle_is_exact_and_outputs_are_float32(eigen_case):
    field, x, W, G = eigen_case
    grid = GridSkinningField(field, x, cell=0.06)
    Wg, Gg = grid.weights_and_grads(x.double())
    assert Wg.dtype == torch.float32 and Gg.dtype == torch.float32
    assert Wg.shape == W.shape and Gg.shape == G.shape
    assert bool((Wg[:, -1] == 1).all()) and bool((Gg[:, -1] == 0).all())


def test_grid_is_sparse_and_the_rule_respects_the_node_budget():
    f = _rbf(radius=0.2)
    x = _shell(8000)
    cell, nodes = choose_cell(x, 0.05, max_nodes=5000)
    assert nodes <= 5000 and cell > 0.05 / 8
    assert GridSkinningField(f, x, cell=cell, check_tol=None).num_nodes == nodes
    grid = GridSkinningField(f, x, cell=0.03, check_tol=None)
    dense = float(torch.prod((x.max(0).values - x.min(0).values) / grid.cell + 3))
    assert grid.num_nodes < 0.4 * dense  # only the cells around the shell exist (the ratio falls like h)
    assert grid.facts()["memory_mib"] < dense * 8 * 7 * 4 / 2 ** 20  # below a dense array of the node data
    plan = plan_grid(f, x, max_nodes=5000, pilot=500)
    assert plan.num_nodes <= 5000 and plan.pilot_points.shape == (500, 3) and plan.pilot_W.shape == (500, 7)
    with pytest.raises(ValueError):
        GridSkinningField(f, x, cell=0.1, scheme="quintic")
    with pytest.raises(ValueError):
        GridSkinningField(f, torch.full((4, 3), float("nan")), cell=0.1)


# ------------------------------------------------------------------------------------------------ pipeline
def _scene(n=2500, seed=0):
    """A surface-only 'capture': flat Gaussians on an ellipsoid (about 1 x 0.6 x 0.4 scene units)."""
    from physskin_gs.scene import GaussianScene

    g = torch.Generator().manual_seed(seed)
    means = _shell(n, seed) * 0.5
    return GaussianScene(
        means=means, quats=torch.randn(n, 4, generator=g),
        log_scales=torch.log(torch.tensor([0.02, 0.02, 0.002])).expand(n, 3).clone(),
        opacity_logits=torch.full((n,), 3.0), sh_dc=torch.randn(n, 3, generator=g) * 0.5,
        sh_rest=torch.zeros(n, 0, 3), format="inria-ply", source="synthetic")


def _prepare(scene, **kw):
    from physskin_gs.pipeline import AnimationConfig, PipelineWarning, prepare_animation

    base = dict(skinning="eigen", num_cubature=96, newton_iters=4, select="all", up="z", num_handles=8)
    base.update(kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PipelineWarning)
        return prepare_animation(scene, AnimationConfig(**base))


def test_pipeline_grid_vs_direct_deformations_agree(monkeypatch):
    from physskin_gs import pipeline

    # the default rule (8 cells per length scale) needs more nodes than this small scene has centres
    monkeypatch.setattr(pipeline, "GRID_NODE_FLOOR", 40000)
    sc = _scene()
    direct = _prepare(sc, field_eval="direct")
    grid = _prepare(sc, field_eval="grid")
    fe = grid.info["field_eval"]
    assert fe["mode"] == "grid" and fe["requested"] == "grid" and fe["num_nodes"] > 0
    assert fe["error"]["num_points"] == min(2000, sc.num_gaussians) and fe["build_seconds"] > 0
    assert direct.info["field_eval"]["mode"] == "direct"
    for key in ("scene_analysis", "interior_fill", "normalisation", "field_build", "cubature", "cubature_weights",
                "gaussian_weights", "deformer_setup"):
        assert key in grid.info["timings"]
    # the same simulation (cubature points are evaluated directly in both), then the same handle transforms
    for anim in (direct, grid):
        did = anim.start_drag(anim.center + torch.tensor([0.45, 0.0, 0.0], dtype=torch.float64))
        anim.update_drag(did, anim.center + torch.tensor([0.45, 0.0, 0.25], dtype=torch.float64))
        anim.step(12)
    Z = direct.handle_transforms_scene()
    assert torch.allclose(Z, grid.handle_transforms_scene(), atol=1e-9)
    dd, dg = direct.deformed_gaussians(), grid.deformed_gaussians()
    moved = float((dd.means - sc.means).norm(dim=1).max())
    assert moved > 0.02  # the drag really deforms the object
    size = float((sc.means.max(0).values - sc.means.min(0).values).max())
    diff = deformation_difference(dd.means, dd.covars, dg.means, dg.covars, size)
    assert fe["error"]["inside_fraction"] > 0.5  # most centres really are interpolated
    # measured (drag moving the object by 24 % of its size): |d mean| max 8e-6 of the size, |d Sigma| / |Sigma|
    # max 1.5e-3, mean 1.1e-4
    assert diff["mean_max_rel"] < 2e-4 and diff["cov_max_rel"] < 0.02 and diff["cov_mean_rel"] < 1e-3


def test_auto_threshold_and_bad_mode(monkeypatch):
    from physskin_gs import pipeline

    f = _rbf(radius=0.6)
    x = _shell(1500)
    W, G, facts = pipeline._gaussian_weights(f, x, "auto")
    assert facts["mode"] == "direct" and str(pipeline.GRID_AUTO_MIN_GAUSSIANS) in facts["reason"]
    Wd, Gd = f.weights_and_grads(x)
    assert torch.equal(W, Wd) and torch.equal(G, Gd)
    monkeypatch.setattr(pipeline, "GRID_AUTO_MIN_GAUSSIANS", 1000)
    # above the threshold, but the cost model says a grid with more nodes than centres does not pay: direct
    W, G, facts = pipeline._gaussian_weights(f, x, "auto")
    assert facts["mode"] == "direct" and "estimated" in facts["reason"]
    est = facts["estimate_seconds"]
    assert est["grid"] >= pipeline.GRID_AUTO_MARGIN * est["direct"] > 0
    # a costly field (the network's finite differences, here the interpolation made free): the grid pays
    monkeypatch.setattr(pipeline, "GRID_INTERP_SECONDS", 0.0)
    monkeypatch.setattr(pipeline, "GRID_NODE_OVERHEAD_SECONDS", 0.0)
    monkeypatch.setattr(pipeline, "GRID_FALLBACK_SHARE", -100.0)
    W, G, facts = pipeline._gaussian_weights(f, x, "auto")
    assert facts["mode"] == "grid" and facts["error"]["g_max_rel"] < 0.05 and facts["num_nodes"] > 0
    W, G, facts = pipeline._gaussian_weights(f, x, "grid")  # asked for: built anyway
    assert facts["mode"] == "grid"
    with pytest.raises(OptionError, match="field-eval"):
        _prepare(_scene(300), field_eval="sparse")
