"""The C kernels of the simulator's evaluation products (physics/_lbs_native.py) held to the GEMM with the stored
[Phi; G] rows, and a whole simulation with the kernels held to one without them."""

import numpy as np
import pytest
import torch

from physskin_gs.physics import _lbs_native
from physskin_gs.physics.simulator import SubspaceSimulator

pytestmark = pytest.mark.skipif(not _lbs_native.available(),
                                reason=f"C kernel not available here: {_lbs_native.unavailable_reason()}")


def _body(n: int, H: int, seed: int):
    """n points in a 0.4 x 0.2 x 0.2 m box away from the origin, H - 1 Gaussian bumps plus the constant weight."""
    g = torch.Generator().manual_seed(seed)
    X = (torch.rand(n, 3, generator=g, dtype=torch.float64) * torch.tensor([0.4, 0.2, 0.2], dtype=torch.float64)
         + torch.tensor([1.5, -0.7, 0.3], dtype=torch.float64))
    C = X[torch.randperm(n, generator=g)[: H - 1]]
    d = X[:, None, :] - C[None]  # [n, H-1, 3]
    B = torch.exp(-(d * d).sum(-1) / (2 * 0.08 ** 2))  # [n, H-1]
    W = torch.cat([B, torch.ones(n, 1, dtype=torch.float64)], 1)
    dW = torch.cat([-B[..., None] * d / 0.08 ** 2, torch.zeros(n, 1, 3, dtype=torch.float64)], 1)  # [n, H, 3]
    return X, W, dW


@pytest.mark.parametrize("n", [1, 7, 8, 64, 65, 1000])
@pytest.mark.parametrize("weights", ["float32 values", "float64"])
def test_deform_and_project_match_the_gemm_with_the_stored_rows(n, weights):
    """Through the simulator (whitened handles, T applied to q and to the result): the kernels give the GEMM's
    values to round-off, with weights that are float32 values (kept as float32) or not (kept as float64)."""
    X, W, dW = _body(n, 17, seed=n)
    if weights == "float32 values":
        W, dW = W.float(), dW.float()
    sim = SubspaceSimulator(X.float(), W, dW, 1e-3, E=1e5, nu=0.3)
    if n > 1:  # (one point's weights, exp(0) and 1, are float32 values either way)
        assert sim._Wt_np.dtype == (np.float32 if weights == "float32 values" else np.float64)
    rng = np.random.default_rng(n)
    q = rng.normal(size=(3, sim.K4)) * 0.3
    ref = q @ sim._PhiG_T_np  # [3, 4n]
    got = sim._deform_rows(q)
    assert got.shape == ref.shape
    assert np.abs(got - ref).max() <= 1e-11 * max(1.0, np.abs(ref).max())
    rhs = rng.normal(size=(3, 4 * n)) * 100.0
    ref_g = (sim._PhiG_T_np @ rhs.T).T  # [3, 4H']
    got_g = sim._project_rows(rhs)
    assert got_g.shape == ref_g.shape
    assert np.abs(got_g - ref_g).max() <= 1e-11 * np.abs(ref_g).max()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_deform_gives_the_lbs_map_of_known_transforms(dtype):
    """A rigid rotation plus translation on the constant handle: x = R X + t exactly and F = R at every point (the
    bumps' weights carry no motion); and the transposed product of a uniform force is its resultant on that handle."""
    X, W, dW = _body(50, 5, seed=3)
    Wt = W.T.contiguous().numpy().astype(dtype)  # [H, n]
    dWt = dW.permute(1, 2, 0).contiguous().numpy().astype(dtype)  # [H, 3, n]
    Xt = X.T.contiguous().numpy()
    c, s = np.cos(0.4), np.sin(0.4)
    R = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
    t = np.array([0.2, -0.1, 0.5])
    q = np.zeros((3, 5, 4))
    q[:, -1, :3] = R - np.eye(3)
    q[:, -1, 3] = t
    out = _lbs_native.deform(q.reshape(3, -1).copy(), Wt, dWt, Xt)
    n = X.shape[0]
    assert np.allclose(out[:, :n], (R - np.eye(3)) @ Xt + t[:, None], atol=1e-12)
    assert np.allclose(out[:, n:].reshape(3, 3, n), (R - np.eye(3))[:, :, None], atol=1e-12)
    rhs = np.zeros((3, 4 * n))
    rhs[:, :n] = np.array([1.0, 2.0, 3.0])[:, None]  # 1, 2, 3 N on every point, no stress
    g = _lbs_native.project(rhs, Wt, dWt, Xt).reshape(3, 5, 4)
    assert np.allclose(g[:, -1, 3], n * np.array([1.0, 2.0, 3.0]), rtol=1e-12)  # the resultant
    assert np.allclose(g[:, -1, :3], np.array([1.0, 2.0, 3.0])[:, None] * Xt.sum(1)[None, :], rtol=1e-12)


def test_kernels_refuse_arrays_of_the_wrong_layout():
    X, W, dW = _body(20, 4, seed=1)
    Wt, dWt = W.T.contiguous().numpy(), dW.permute(1, 2, 0).contiguous().numpy()
    Xt = X.T.contiguous().numpy()
    with pytest.raises(ValueError, match="q must be"):
        _lbs_native.deform(np.zeros((3, 12)), Wt, dWt, Xt)
    with pytest.raises(ValueError, match="C-contiguous float64"):
        _lbs_native.deform(np.asfortranarray(np.ones((3, 16))), Wt, dWt, Xt)
    with pytest.raises(ValueError, match="rhs must be"):
        _lbs_native.project(np.zeros((3, 4 * 20), np.float32), Wt, dWt, Xt)
    with pytest.raises(ValueError, match="float32 or both float64"):
        _lbs_native.project(np.zeros((3, 4 * 20)), Wt.astype(np.float32), dWt, Xt)


def test_a_simulation_with_the_kernels_follows_the_one_without(monkeypatch):
    """A beam dropped on a floor, 40 steps, once through the kernels and once through the GEMM (the kernels made
    unavailable): the same trajectory, within the solver's tolerance. The two paths agree to 1e-14 m until the
    landing, where the Newton steps end on their iteration budget with a residual: there the round-off of the two
    sums is amplified (with the same iterations, factors and contacts in both runs, 4e-6 m on one 2-core machine
    in the full suite, 1e-15 run alone), so the bound is 1e-5 m; one handle's gradient rows 1 % off move it 5e-5 m
    (the kernels' own values are held to the GEMM's at round-off by the tests above)."""
    X, W, dW = _body(300, 9, seed=5)
    runs = []
    for native in (True, False):
        if not native:
            monkeypatch.setattr(_lbs_native, "deform", lambda *a, **k: None)
            monkeypatch.setattr(_lbs_native, "project", lambda *a, **k: None)
        sim = SubspaceSimulator(X.float(), W, dW, 0.016 / 300, E=5e4, nu=0.4, density=300, dt=0.02, up=(0, 0, 1),
                                floor_height=0.25, damping=0.02)
        for _ in range(40):
            sim.step()
        runs.append(sim.positions().numpy())
    assert np.abs(runs[0] - runs[1]).max() <= 1e-5
    assert runs[0][:, 2].min() > 0.25 - 0.01  # it landed on the floor (and rests on it)
