"""The simulator's Hessian from a cubature subset (issue 23, more handles in real time): an inexact Newton model
whose solution is the exact one's, and the pipeline's rule for when to use it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from physskin_gs.errors import OptionError
from physskin_gs.model.field import RBFSkinningField
from physskin_gs.physics.simulator import SubspaceSimulator, _StepContext
from physskin_gs.pipeline import hessian_points_for


def _sim(hessian_points=None, m=32, n=1024, **kw):
    g = torch.Generator().manual_seed(0)
    X = (torch.rand(n, 3, generator=g) - 0.5) * torch.tensor([1.0, 0.4, 0.3])
    centres = (torch.rand(m, 3, generator=g) - 0.5) * torch.tensor([1.0, 0.4, 0.3])
    W, dW = RBFSkinningField(centres, 0.25).weights_and_grads(X)
    args = dict(E=2e4, nu=0.45, density=100, dt=0.03, up=(0, 0, 1), floor_height=-0.3, damping=0.02,
                hessian_points=hessian_points)
    args.update(kw)
    sim = SubspaceSimulator(X, W, dW, volume=0.12, **args)
    idx = torch.nonzero(X[:, 0] > 0.4).flatten()
    sim.update_drag(sim.add_drag(idx), sim.X[idx] + torch.tensor([0.0, 0.15, 0.25], dtype=torch.float64))
    return sim


def test_subset_hessian_is_close_to_the_full_one_and_psd():
    full, sub = _sim(), _sim(hessian_points=256)
    assert sub.hessian_points == 256 and full.hessian_points is None
    for s in (full, sub):
        s.step(3)
    sub.q, sub.qdot = full.q.clone(), full.qdot.clone()
    ctx = _StepContext(h=full.dt, q_pred=full.q.clone(), q_prev=full.q.clone(), D=None)
    Hf, Hs = full._hessian(full._eval(full.q, ctx), ctx), sub._hessian(sub._eval(full.q, ctx), ctx)
    rel = float((Hs - Hf).norm() / Hf.norm())
    assert 1e-6 < rel < 0.4, rel  # a different model (measured 0.25), of the same size
    # PSD as the full one is (mass + PSD-projected elastic terms, float32 products: up to 1e-8 of the largest)
    for H in (Hf, Hs):
        ev = torch.linalg.eigvalsh(0.5 * (H + H.T))
        assert float(ev.min()) > -1e-8 * float(ev.max())


def test_subset_hessian_steps_to_the_same_solution():
    """Newton with the subset Hessian converges to the exact Hessian's solution (same objective and gradient;
    tight tolerances, 40 iterations): cubature positions within 0.2 mm of each other after 8 steps of a 0.29 m
    drag (measured 0.075 mm; both solves stall where the energy's float64 rounding stops the line search, the
    subset one a little earlier)."""
    kw = dict(newton_iters=40, tol=1e-12, grad_tol=1e-9, solver="newton")
    full, sub = _sim(**kw), _sim(hessian_points=200, **kw)
    sf = [full.step() for _ in range(8)]
    ss = [sub.step() for _ in range(8)]
    assert float((full.positions() - sub.positions()).abs().max()) < 2e-4
    assert sum(s.newton_iters for s in ss) >= sum(s.newton_iters for s in sf)  # it may take more iterations


@pytest.mark.parametrize("far, extra, holds", [(10.0, 4, True), (float("inf"), 1, False)])
def test_a_step_far_from_balance_iterates_on_with_the_exact_hessian(far, extra, holds, monkeypatch):
    """A poor Newton model (a 16-point Hessian subset, 2 iterations a step) on a body dragged onto the floor: past
    its budget a step still far from balance (a residual force of 10 weights) iterates on with the exact Hessian,
    up to 4x the budget, else it is halved; so every step ends below that residual and the body stays on the floor
    (measured: 3.4 mm in at worst). Accepting such steps as they were (far = inf, no extra iterations) ends in residual
    forces of 1e5-1e7 weights and a wrecked body; which wreck depends on round-off: it sank 0.4-0.6 m through the
    floor, or (evaluated by the C kernels) stretched to 5x its starting height (the drag alone: 2.3x)."""
    monkeypatch.setattr(SubspaceSimulator, "FAR_RESIDUAL", far)
    monkeypatch.setattr(SubspaceSimulator, "NEWTON_EXTRA", extra)
    sim = _sim(hessian_points=16, newton_iters=2)
    z0 = sim.positions()[:, 2]
    height0 = float(z0.max() - z0.min())
    worst, lowest, tallest = 0.0, 0.0, 0.0
    for _ in range(40):
        st = sim.step()
        worst = max(worst, st.grad_norm / (sim.dt ** 2 * sim.total_mass * 9.8))  # residual force / weight
        z = sim.positions()[:, 2]
        lowest = min(lowest, float(z.min()) + 0.3)  # the floor is at z = -0.3
        tallest = max(tallest, float(z.max() - z.min()) / height0)
    if holds:
        assert worst <= 10.0 and lowest > -0.01 and tallest < 3.0  # (the drag stretches it 2.3x)
    else:
        assert worst > 1e3 and (lowest < -0.1 or tallest > 4.0)


def test_a_subset_that_backtracks_hands_over_to_the_exact_hessian(mesh_file):
    """A fresh user's `animate pybullet_duck.obj --handles 32 --cubature 2048`: the 568-point Hessian subset was a
    poor model of the duck's modes basis, so every step's line search backtracked and refreshed it, 5 iterations and
    3 factors a step even at rest (52 ms against 7 with the exact Hessian). Now a refresh after a backtrack sums
    every point: the duck settles to 1-2 iterations and reused factors like the exact Hessian, and rests where the
    exact Hessian's duck rests."""
    from physskin_gs.pipeline import AnimationConfig, load_for_animation, prepare_animation

    scene = load_for_animation(str(mesh_file("pybullet_duck.obj")))
    runs = {}
    for label in ("subset", "exact"):
        anim = prepare_animation(scene, AnimationConfig(num_handles=32, num_cubature=2048))
        sim = anim.sim
        if label == "subset":
            assert sim.hessian_points == hessian_points_for(sim.n, sim.H)  # the pipeline's subset
        else:
            sim.set_hessian_points(None)
        stats = [sim.step() for _ in range(30)]
        runs[label] = (sim.positions(), stats[-10:])
    (x_sub, last_sub), (x_ex, last_ex) = runs["subset"], runs["exact"]
    assert np.median([s.newton_iters for s in last_sub]) <= 2 and sum(s.hessians for s in last_sub) <= 3
    assert sum(s.newton_iters for s in last_sub) <= sum(s.newton_iters for s in last_ex) + 5
    size = float((x_ex.max(0).values - x_ex.min(0).values).norm())
    assert float((x_sub - x_ex).norm(dim=1).max()) < 0.01 * size


def test_hessian_points_rule_and_errors():
    assert hessian_points_for(1024, 17) is None and hessian_points_for(2048, 9) is None
    assert hessian_points_for(2048, 33) == 544
    assert hessian_points_for(300, 33) == 256  # never fewer than 256
    assert hessian_points_for(200, 33) is None  # the subset would be all of them
    assert hessian_points_for(10_000, 65) == max(256, round(10_000 * (17 / 65) ** 2))
    with pytest.raises(OptionError, match="hessian_points"):
        _sim(hessian_points=8)
    sim = _sim(hessian_points=100)
    sim.set_hessian_points(None)
    assert sim.hessian_points is None
    sim.set_hessian_points(5000)  # more than there are: all
    assert sim.hessian_points is None


# ------------------------------------------------------------------------------------------------ --handles
REPO_DEMO = __import__("pathlib").Path(__file__).resolve().parents[1] / "data" / "spot_mesh2splat_10k.splat"


@pytest.mark.parametrize("argv, msg", [
    (["--handles", "0"], "--handles must be an integer in [1, 64], got 0"),
    (["--handles", "65"], "--handles must be an integer in [1, 64], got 65"),
    (["--handles", "32", "--skinning", "network"], "the shipped network has 16 handles (its training fixed them)"),
])
def test_bad_handles_are_refused_before_any_work(capsys, tmp_path, argv, msg):
    from physskin_gs.cli import main

    out = tmp_path / "seq"
    code = main(["animate", str(REPO_DEMO), "--headless", "--frames", "2", "--export", str(out)] + argv)
    err = capsys.readouterr().err
    assert code == 2 and msg in err and "Traceback" not in err
    assert not out.exists()


def test_skin_with_more_handles_writes_that_many_columns(capsys, tmp_path):
    """`skin --handles 24` on the demo capture: W has the learned handles asked for (the eigen basis may take
    one or two fewer so as not to split a cluster of equal eigenvalues) plus the constant one, and their gradients."""
    from physskin_gs.cli import main

    out = tmp_path / "w.npz"
    assert main(["skin", str(REPO_DEMO), "-o", str(out), "--handles", "24"]) == 0
    z = np.load(out)
    W, G = z["weights"], z["grads"]
    assert 23 <= W.shape[1] - 1 <= 24 and G.shape == W.shape + (3,)
    assert np.allclose(W[:, -1], 1.0)  # the constant handle, last
