"""Tests for Gaussian deformation, export conversion and SH rotation (method.md 10)."""

from __future__ import annotations

import math

import pytest
import torch

from physskin_gs.deform import (
    GaussianDeformer,
    clamp_singular_values,
    covariance_factor_svd,
    deform_reference,
    eval_sh,
    native_available,
    polar_rotation,
    rotate_sh,
)
from physskin_gs.errors import OptionError
from physskin_gs.lbs import lbs_points
from physskin_gs.model.field import RBFSkinningField
from physskin_gs.scene import quat_to_rotmat


def _gaussians(n=500, seed=0, sh_k=15):
    g = torch.Generator().manual_seed(seed)
    means = torch.rand(n, 3, generator=g) * 2 - 1
    quats = torch.randn(n, 4, generator=g) * 1.7  # not normalised on purpose
    log_scales = torch.rand(n, 3, generator=g) * 3 - 5
    sh = torch.randn(n, sh_k + 1, 3, generator=g) * 0.3
    return means, quats, log_scales, sh


def _field(seed=0, m=5):
    g = torch.Generator().manual_seed(100 + seed)
    return RBFSkinningField(torch.rand(m, 3, generator=g) * 2 - 1, 0.6)


def _random_Z(H, seed=0, scale=0.2):
    g = torch.Generator().manual_seed(200 + seed)
    return torch.randn(H, 3, 4, generator=g) * scale


def _rot(axis, angle):
    a = torch.tensor(axis, dtype=torch.float64)
    a = a / a.norm()
    K = torch.tensor([[0, -a[2], a[1]], [a[2], 0, -a[0]], [-a[1], a[0], 0]], dtype=torch.float64)
    return torch.eye(3, dtype=torch.float64) + math.sin(angle) * K + (1 - math.cos(angle)) * K @ K


def test_fast_path_matches_reference_and_chunking():
    means, quats, ls, _ = _gaussians()
    f = _field()
    W, dW = f.weights_and_grads(means)
    Z = _random_Z(f.num_handles)
    L = quat_to_rotmat(quats) * torch.exp(ls)[:, None, :]
    cov = L @ L.transpose(1, 2)
    x_ref, c_ref, F_ref = deform_reference(means.double(), cov.double(), W.double(), dW.double(), Z.double())
    d = GaussianDeformer(means, quats, ls, W, dW)
    x, c = d.deform(Z)
    assert (x.double() - x_ref).abs().max() < 1e-5
    assert ((c.double() - c_ref).abs().amax((1, 2)) / c_ref.abs().amax((1, 2))).max() < 1e-4
    assert (d.deformation_gradients().double() - F_ref).abs().max() < 1e-4
    d2 = GaussianDeformer(means, quats, ls, W, dW, chunk_size=37)
    x2, c2 = d2.deform(Z)
    assert torch.allclose(x2, x) and torch.allclose(c2, c)
    # quaternions scaled by 3 give the same output (normalised first)
    d3 = GaussianDeformer(means, quats * 3.0, ls, W, dW)
    x3, c3 = d3.deform(Z)
    assert torch.allclose(x3, x, atol=1e-6) and torch.allclose(c3, c, rtol=1e-4, atol=1e-8)


def test_covariance_matches_finite_difference_push_forward():
    means, quats, ls, _ = _gaussians(20, seed=1)
    ls = ls - 2.0  # small Gaussians: the push-forward is close to linear
    f = _field(1)
    W, dW = f.weights_and_grads(means)
    Z = _random_Z(f.num_handles, seed=1, scale=0.3).double()
    d = GaussianDeformer(means, quats, ls, W, dW)
    _, cov = d.deform(Z)
    h = 1e-4
    mu = means.double()
    cols = []
    for j in range(3):
        e = torch.zeros(3, dtype=torch.float64)
        e[j] = h
        xp = lbs_points(mu + e, f.weights_and_grads((mu + e).float())[0].double(), Z)
        xm = lbs_points(mu - e, f.weights_and_grads((mu - e).float())[0].double(), Z)
        cols.append((xp - xm) / (2 * h))
    F_fd = torch.stack(cols, dim=-1)
    L = quat_to_rotmat(quats.double()) * torch.exp(ls.double())[:, None, :]
    cov_fd = F_fd @ L @ L.transpose(1, 2) @ F_fd.transpose(1, 2)
    assert ((cov.double() - cov_fd).abs().amax((1, 2)) / cov_fd.abs().amax((1, 2))).max() < 2e-3
    # Monte-Carlo push-forward of samples of one Gaussian through the exact LBS map
    g = torch.Generator().manual_seed(7)
    eps = torch.randn(40000, 3, generator=g, dtype=torch.float64)
    pts = mu[0] + eps @ L[0].T
    y = lbs_points(pts, f.weights_and_grads(pts.float())[0].double(), Z)
    emp = torch.cov(y.T)
    assert (emp - cov[0].double()).abs().max() < 0.05 * cov[0].double().abs().max()


def test_pure_stretch_doubles_x_extent():
    means, quats, ls, _ = _gaussians(300, seed=2)
    f = _field(2)
    W, dW = f.weights_and_grads(means)
    Z = torch.zeros(f.num_handles, 3, 4)
    Z[-1, 0, 0] = 1.0  # constant handle: F = diag(2, 1, 1)
    d = GaussianDeformer(means, quats, ls, W, dW)
    x, cov = d.deform(Z)
    ext0 = means.max(0).values - means.min(0).values
    ext1 = x.max(0).values - x.min(0).values
    assert torch.allclose(ext1, ext0 * torch.tensor([2.0, 1.0, 1.0]), rtol=1e-5)
    S = torch.diag(torch.tensor([2.0, 1.0, 1.0]))
    L = quat_to_rotmat(quats) * torch.exp(ls)[:, None, :]
    assert torch.allclose(cov, S @ L @ L.transpose(1, 2) @ S, rtol=1e-4, atol=1e-10)


def test_rigid_motion_is_rigid_and_colours_co_rotate():
    means, quats, ls, sh = _gaussians(400, seed=3)
    f = _field(3)
    W, dW = f.weights_and_grads(means)
    R = _rot((1.0, 2.0, 0.5), 0.9).float()
    t = torch.tensor([0.3, -0.2, 1.0])
    Z = torch.zeros(f.num_handles, 3, 4)
    Z[-1, :, :3] = R - torch.eye(3)
    Z[-1, :, 3] = t
    d = GaussianDeformer(means, quats, ls, W, dW)
    x, cov = d.deform(Z)
    assert torch.allclose(x, means @ R.T + t, atol=1e-5)
    L = quat_to_rotmat(quats) * torch.exp(ls)[:, None, :]
    assert torch.allclose(cov, R @ L @ L.transpose(1, 2) @ R.T, rtol=1e-4, atol=1e-9)
    RF = d.view_rotations()
    assert torch.allclose(RF, R.expand_as(RF), atol=1e-5)
    # colours along co-rotated views are unchanged: view direction R d at the deformed Gaussian
    g = torch.Generator().manual_seed(9)
    dirs = torch.nn.functional.normalize(torch.randn(400, 3, generator=g), dim=1)
    seen_rest = eval_sh(sh, dirs)
    seen_moved = eval_sh(sh, (RF.transpose(1, 2) @ (dirs @ R.T)[:, :, None])[:, :, 0])
    assert (seen_rest - seen_moved).abs().max() < 1e-5


def test_rotated_sh_seen_from_d_equals_original_from_rotated_direction():
    _, _, _, sh = _gaussians(300, seed=4, sh_k=15)
    g = torch.Generator().manual_seed(11)
    Rs = torch.stack([_rot(tuple(torch.randn(3, generator=g).tolist()), float(a))
                      for a in torch.rand(300, generator=g) * 6]).float()
    d = torch.nn.functional.normalize(torch.randn(300, 3, generator=g), dim=1)
    sh_rot = rotate_sh(sh, Rs)
    lhs = eval_sh(sh_rot, d)
    rhs = eval_sh(sh, (Rs.transpose(1, 2) @ d[:, :, None])[:, :, 0])
    assert (lhs - rhs).abs().max() < 1e-4
    assert torch.equal(sh_rot[:, 0], sh[:, 0])  # DC untouched
    # degree 1 and degree 0 inputs
    assert (eval_sh(rotate_sh(sh[:, :4], Rs), d) - eval_sh(sh[:, :4], (Rs.transpose(1, 2) @ d[:, :, None])[:, :, 0])).abs().max() < 1e-4
    assert torch.equal(rotate_sh(sh[:, :1], Rs), sh[:, :1])


def test_export_round_trip_including_thin_surfels():
    means, quats, ls, _ = _gaussians(300, seed=5)
    ls[:50, 2] = -23.0  # flat surfels as in real scene tiles
    f = _field(5)
    W, dW = f.weights_and_grads(means)
    d = GaussianDeformer(means, quats, ls, W, dW)
    d.deform(torch.zeros(f.num_handles, 3, 4))
    q, ls2 = d.export_quats_scales()
    # identity motion: same covariance and the very same log-scales
    assert torch.allclose(ls2, ls, atol=1e-4)
    R2 = quat_to_rotmat(q)
    assert torch.linalg.det(R2).min() > 0.999
    L1 = quat_to_rotmat(quats) * torch.exp(ls)[:, None, :]
    L2 = R2 * torch.exp(ls2)[:, None, :]
    assert torch.allclose(L2 @ L2.transpose(1, 2), L1 @ L1.transpose(1, 2), rtol=1e-4, atol=1e-9)
    # after a deformation the exported quaternion/scales reproduce Sigma'
    Z = _random_Z(f.num_handles, seed=5, scale=0.3)
    _, cov = d.deform(Z)
    q, ls3 = d.export_quats_scales()
    L3 = quat_to_rotmat(q) * torch.exp(ls3)[:, None, :]
    rel = ((L3 @ L3.transpose(1, 2)) - cov).abs().amax((1, 2)) / cov.abs().amax((1, 2))
    assert rel.max() < 1e-4
    assert torch.isfinite(q).all() and torch.isfinite(ls3).all()


def test_covariance_factor_svd_and_polar_rotation():
    g = torch.Generator().manual_seed(6)
    M = torch.randn(200, 3, 3, generator=g, dtype=torch.float64) * torch.tensor([1.0, 1e-3, 1e-9], dtype=torch.float64)
    U, s = covariance_factor_svd(M)
    assert torch.linalg.det(U).min() > 0.999999
    assert torch.allclose(s.sort(dim=1).values, torch.linalg.svdvals(M).sort(dim=1).values, rtol=1e-8, atol=1e-20)
    assert torch.allclose(U * s[:, None, :] ** 2 @ U.transpose(1, 2), M @ M.transpose(1, 2), rtol=1e-9, atol=1e-18)
    F = torch.eye(3, dtype=torch.float64) + 0.5 * torch.randn(100, 3, 3, generator=g, dtype=torch.float64)
    R = polar_rotation(F)
    assert torch.allclose(R @ R.transpose(1, 2), torch.eye(3, dtype=torch.float64).expand(100, 3, 3), atol=1e-10)
    assert torch.linalg.det(R).min() > 0.999
    S = R.transpose(1, 2) @ F  # symmetric stretch where det F > 0
    pos = torch.linalg.det(F) > 0
    assert torch.allclose(S[pos], S[pos].transpose(1, 2), atol=1e-9)


def test_anisotropy_clamp_bounds_needles():
    means, quats, ls, _ = _gaussians(400, seed=7)
    f = _field(7)
    W, dW = f.weights_and_grads(means)
    Z = torch.zeros(f.num_handles, 3, 4)
    Z[-1, 0, 1] = 12.0  # violent shear
    Z[-1, 2, 2] = -0.95  # and a squash

    def ratio(cov):
        ev = torch.linalg.eigvalsh(cov.double()).clamp_min(1e-30)
        return (ev[:, -1] / ev[:, 0]).sqrt()

    L = quat_to_rotmat(quats) * torch.exp(ls)[:, None, :]
    r0 = ratio(L @ L.transpose(1, 2))
    _, c_free = GaussianDeformer(means, quats, ls, W, dW).deform(Z)
    _, c_clamp = GaussianDeformer(means, quats, ls, W, dW, singular_clamp=(0.2, 5.0)).deform(Z)
    grew_free = int((ratio(c_free) > 10 * r0).sum())
    grew_clamp = int((ratio(c_clamp) > 25.0 * r0 * 1.001).sum())  # bound: rest ratio x hi/lo
    assert grew_free > 100
    assert grew_clamp == 0
    F = torch.diag(torch.tensor([10.0, 1.0, 0.01])).expand(3, 3, 3).clone()
    Fc = clamp_singular_values(F)
    assert torch.allclose(torch.linalg.svdvals(Fc), torch.tensor([5.0, 1.0, 0.2]).expand(3, 3), atol=1e-5)


# ------------------------------------------------------------------------------------------------ fast kernels
KERNELS = ["torch", "native"]


def _native_flag(kernel):
    """GaussianDeformer's ``native`` argument for a kernel name; skips when the C kernel cannot be built here."""
    if kernel == "native" and not native_available():
        pytest.skip("no C compiler: native deformation kernel unavailable")
    return kernel == "native"


def _random_skinning(n, H, seed, constant=True, grad_scale=1.0):
    """Random (not smooth) weights and gradients, with the field's constant handle last when ``constant``."""
    g = torch.Generator().manual_seed(300 + seed)
    W = torch.randn(n, H, generator=g) * 0.5
    dW = torch.randn(n, H, 3, generator=g) * grad_scale
    if constant:
        W[:, -1] = 1.0
        dW[:, -1] = 0.0
    return W, dW


def _reference(means, quats, ls, W, dW, Z, clamp=None):
    """float64 reference means, covariances and F (clamped like the deformer when ``clamp`` is given)."""
    L = quat_to_rotmat(quats.double()) * torch.exp(ls.double())[:, None, :]
    cov = L @ L.transpose(1, 2)
    x, c, F = deform_reference(means.double(), cov, W.double(), dW.double(), Z.double())
    if clamp is not None:
        F = clamp_singular_values(F, *clamp)
        c = F @ cov @ F.transpose(1, 2)
    return x, c, F, L


def _rel(a, b):
    return ((a.double() - b).abs().amax((1, 2)) / b.abs().amax((1, 2))).max().item()


@pytest.mark.parametrize("kernel", KERNELS)
def test_fast_kernels_match_reference_with_grad_term_and_ragged_blocks(kernel):
    native = _native_flag(kernel)
    n, H = 1003, 9  # not a multiple of the native tile (8) either
    means, quats, ls, _ = _gaussians(n, seed=11)
    Z = _random_Z(H, seed=11, scale=0.15)
    for constant in (True, False):
        W, dW = _random_skinning(n, H, seed=11, constant=constant)
        x_ref, c_ref, F_ref, L_ref = _reference(means, quats, ls, W, dW, Z)
        # the grad-W term matters on this data (F without it is far off)
        F_nograd = deform_reference(means.double(), c_ref, W.double(), torch.zeros_like(dW).double(), Z.double())[2]
        assert (F_nograd - F_ref).abs().max() > 0.1
        for block, chunk in ((37, 1 << 17), (128, 101), (1003, 8), (4096, 1 << 17)):  # ragged blocks, chunks
            d = GaussianDeformer(means, quats, ls, W, dW, block_size=block, chunk_size=chunk, native=native)
            assert d.native == native
            assert d.K == (H - 1 if constant else H)  # the constant handle is folded into the bias
            x, c = d.deform(Z)
            assert (x.double() - x_ref).abs().max() < 2e-6
            assert _rel(c, c_ref) < 2e-5
            assert (d.deformation_gradients().double() - F_ref).abs().max() < 2e-6
            assert _rel(d.FL, F_ref @ L_ref) < 1e-5
            assert torch.allclose(d.rest_means, means) and torch.allclose(d.L.double(), L_ref, atol=1e-6)
    # a handle that looks constant in the first rows only (W = 1, dW = 0 there) is kept as a handle
    W, dW = _random_skinning(n, H, seed=12, constant=True)
    W[:500, 0], dW[:500, 0] = 1.0, 0.0
    W[0, 1], dW[:, 1] = 1.0, 0.0  # dW = 0 everywhere and W = 1 in the first row, but W varies
    d = GaussianDeformer(means, quats, ls, W, dW, native=native)
    assert d._const.tolist() == [H - 1] and d.K == H - 1
    x_ref, c_ref, _, _ = _reference(means, quats, ls, W, dW, Z)
    x, c = d.deform(Z)
    assert (x.double() - x_ref).abs().max() < 2e-6 and _rel(c, c_ref) < 2e-5


@pytest.mark.parametrize("kernel", KERNELS)
def test_worker_threads_give_the_same_result(kernel):
    native = _native_flag(kernel)
    n, H = 2000, 6
    means, quats, ls, _ = _gaussians(n, seed=12)
    W, dW = _random_skinning(n, H, seed=12)
    Z = _random_Z(H, seed=12, scale=0.3)
    d = GaussianDeformer(means, quats, ls, W, dW, block_size=300, singular_clamp=(0.2, 5.0), native=native)
    prev = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        x1, c1 = (t.clone() for t in d.deform(Z))
        F1 = d.deformation_gradients()
        torch.set_num_threads(3)  # more workers than cores is fine
        x3, c3 = d.deform(Z)
        assert torch.get_num_threads() == 3  # restored after the parallel section
        assert torch.equal(x3, x1) and torch.equal(c3, c1)
        assert torch.equal(d.deformation_gradients(), F1)
    finally:
        torch.set_num_threads(prev)


@pytest.mark.parametrize("kernel", KERNELS)
def test_clamp_path_matches_clamped_reference(kernel):
    native = _native_flag(kernel)
    n, H = 1500, 7
    means, quats, ls, _ = _gaussians(n, seed=13)
    W, dW = _random_skinning(n, H, seed=13, grad_scale=2.0)
    Z = _random_Z(H, seed=13, scale=0.4)
    clamp = (0.2, 5.0)
    x_ref, c_ref, Fc_ref, L_ref = _reference(means, quats, ls, W, dW, Z, clamp=clamp)
    F_raw = _reference(means, quats, ls, W, dW, Z)[2]
    sv = torch.linalg.svdvals(F_raw)
    violating = ((sv[:, 0] > clamp[1]) | (sv[:, 2] < clamp[0])).float().mean()
    assert 0.05 < violating < 0.95  # both branches exercised
    # an upper bound only (lo = 0 keeps small singular values but still catches inversions)
    x0_ref, c0_ref = _reference(means, quats, ls, W, dW, Z, clamp=(0.0, 1.5))[:2]
    d0 = GaussianDeformer(means, quats, ls, W, dW, singular_clamp=(0.0, 1.5), native=native)
    x0, c0 = d0.deform(Z)
    assert (x0.double() - x0_ref).abs().max() < 2e-6 and _rel(c0, c0_ref) < 1e-4
    assert torch.linalg.svdvals(d0.deformation_gradients()).max() < 1.5 * (1 + 1e-5)
    for block in (64, 1500):
        d = GaussianDeformer(means, quats, ls, W, dW, block_size=block, singular_clamp=clamp, native=native)
        x, c = d.deform(Z)
        assert (x.double() - x_ref).abs().max() < 2e-6
        assert _rel(c, c_ref) < 1e-4
        Fc = d.deformation_gradients().double()
        assert (Fc - Fc_ref).abs().max() < 1e-4
        s = torch.linalg.svdvals(Fc)
        assert s.max() < clamp[1] * (1 + 1e-5) and s.min() > clamp[0] * (1 - 1e-5)
        assert _rel(d.FL, Fc_ref @ L_ref) < 1e-4
    # switching the clamp off gives the raw F again (and FL follows the switch)
    d.singular_clamp = None
    d.deform(Z)
    assert (d.deformation_gradients().double() - F_raw).abs().max() < 2e-6
    assert _rel(d.FL, F_raw @ L_ref) < 1e-5


@pytest.mark.parametrize("kernel", KERNELS)
def test_deformer_rejects_bad_shapes_and_counts_bytes(kernel):
    native = _native_flag(kernel)
    means, quats, ls, _ = _gaussians(50, seed=14)
    W, dW = _random_skinning(50, 5, seed=14)
    try:
        GaussianDeformer(means, quats, ls, W, dW[:, :4])
        raise AssertionError("expected ValueError")
    except ValueError as e:
        assert "weight_grads" in str(e)
    d = GaussianDeformer(means, quats, ls, W, dW, block_size=16, native=native)
    try:
        d.deform(torch.zeros(4, 3, 4))
        raise AssertionError("expected ValueError")
    except ValueError as e:
        assert "(5, 3, 4)" in str(e)
    read, written = d.nbytes_per_frame()
    # K = 4 non-constant handles: 4K + 12 floats per Gaussian, padded to 4 blocks of 16 (torch) or 7 tiles of 8
    assert read == 4 * (56 if native else 64) * (4 * 4 + 3 + 9)
    assert written == 4 * 50 * 12
    x, c = d.deform(torch.zeros(5, 3, 4))  # identity motion: rest state
    assert torch.allclose(x, means) and torch.allclose(c, d.L @ d.L.transpose(1, 2))


def test_native_and_torch_kernels_agree():
    if not native_available():
        pytest.skip("no C compiler: native deformation kernel unavailable")
    means, quats, ls, _ = _gaussians(777, seed=15)
    W, dW = _random_skinning(777, 11, seed=15, grad_scale=1.5)
    Z = _random_Z(11, seed=15, scale=0.3)
    dn = GaussianDeformer(means, quats, ls, W, dW, singular_clamp=(0.2, 5.0), native=True)
    dt = GaussianDeformer(means, quats, ls, W, dW, singular_clamp=(0.2, 5.0), native=False)
    xn, cn = dn.deform(Z)
    xt, ct = dt.deform(Z)
    assert (xn - xt).abs().max() < 1e-6
    assert _rel(cn, ct.double()) < 1e-5
    assert (dn.deformation_gradients() - dt.deformation_gradients()).abs().max() < 1e-5
    assert _rel(dn.FL, dt.FL.double()) < 1e-5
    assert torch.equal(dn.rest_means, dt.rest_means)
    # L = R S: the C packing's exp and rotation round differently from torch's in the last bits
    assert ((dn.L - dt.L).abs() <= 1e-6 * dt.L.abs().amax((1, 2), keepdim=True)).all()


def test_kernel_choice_and_fallback(monkeypatch):
    import physskin_gs.deform as deform_mod

    means, quats, ls, _ = _gaussians(40, seed=16)
    W, dW = _random_skinning(40, 4, seed=16)
    assert GaussianDeformer(means, quats, ls, W, dW, native=False).native is False
    monkeypatch.setattr(deform_mod, "_native_kernel", lambda: (None, "no compiler here"))
    d = GaussianDeformer(means, quats, ls, W, dW)  # default: falls back to the torch kernel
    assert d.native is False
    with pytest.raises(RuntimeError, match="no compiler here"):
        GaussianDeformer(means, quats, ls, W, dW, native=True)


def test_native_loader_caches_and_reports_failures(tmp_path, monkeypatch):
    from physskin_gs import _native

    monkeypatch.setenv("PHYSSKIN_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PHYSSKIN_NATIVE", "0")
    lib, why = _native.load("t_add", "int add(int a, int b) { return a + b; }")
    assert lib is None and "PHYSSKIN_NATIVE=0" in why
    monkeypatch.setenv("PHYSSKIN_NATIVE", "1")
    monkeypatch.setenv("CC", "physskin-no-such-compiler")
    lib, why = _native.load("t_add", "int add(int a, int b) { return a + b; }")
    assert lib is None and "physskin-no-such-compiler" in why
    assert not list(tmp_path.glob("*.so"))
    if not native_available():
        return
    monkeypatch.delenv("CC")
    lib, why = _native.load("t_add", "int add(int a, int b) { return a + b; }")
    assert why == "" and lib.add(2, 3) == 5
    assert len(list(tmp_path.glob("t_add_*.so"))) == 1  # compiled once into the cache folder
    lib, why = _native.load("t_bad", "this is not C")
    assert lib is None and "failed" in why
    # bound functions by key; a missing symbol makes the whole set unavailable, with the reason
    src = "int add(int a, int b) { return a + b; }\nint mul(int a, int b) { return a * b; }\n"
    fns, why = _native.functions("t_addmul", src, {"add": ("add", "ii", "i"), "mul": ("mul", "ii", "i")})
    assert why == "" and fns["add"](2, 3) == 5 and fns["mul"](2, 3) == 6
    assert _native.functions("t_addmul", "", {})[0] is fns  # memoised per name
    fns, why = _native.functions("t_missing", src, {"sub": ("sub", "ii", "i")})
    assert fns is None and "sub" in why


@pytest.mark.parametrize("native", [False, None])
def test_fork_shares_data_and_has_its_own_buffers(native):
    g = torch.Generator().manual_seed(21)
    N, H = 1003, 5
    means = torch.randn(N, 3, generator=g)
    quats = torch.randn(N, 4, generator=g)
    ls = torch.rand(N, 3, generator=g) * 2 - 5
    W = torch.rand(N, H, generator=g)
    dW = torch.randn(N, H, 3, generator=g) * 0.3
    d = GaussianDeformer(means, quats, ls, W, dW, block_size=256, native=native)
    f = d.fork()
    Z1 = torch.randn(H, 3, 4, generator=g) * 0.1
    Z2 = torch.randn(H, 3, 4, generator=g) * 0.1
    m1, c1 = d.deform(Z1)
    m1, c1 = m1.clone(), c1.clone()
    m2, c2 = f.deform(Z2)
    assert f.means.data_ptr() != d.means.data_ptr()
    torch.testing.assert_close(d.means, m1)  # the fork did not write into the parent's buffers
    ref = GaussianDeformer(means, quats, ls, W, dW, block_size=256, native=native)
    ref_m, ref_c = ref.deform(Z2)
    torch.testing.assert_close(m2, ref_m)
    torch.testing.assert_close(c2, ref_c)
    torch.testing.assert_close(f.deformation_gradients(), ref.deformation_gradients())
    ref.deform(Z1)
    torch.testing.assert_close(d.deformation_gradients(), ref.deformation_gradients())  # each keeps its own Z


def test_native_cache_refuses_a_folder_others_can_write(tmp_path, monkeypatch):
    from physskin_gs import _native

    monkeypatch.delenv("PHYSSKIN_NATIVE", raising=False)  # the refusal is what is tested, not the opt-out
    shared = tmp_path / "shared_cache"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("PHYSSKIN_CACHE_DIR", str(shared))
    lib, why = _native.load("physskin_test_perm", "int physskin_test_perm(void) { return 7; }\n")
    assert lib is None and "writable by group or others" in why
    private = tmp_path / "private_cache"
    monkeypatch.setenv("PHYSSKIN_CACHE_DIR", str(private))
    lib, why = _native.load("physskin_test_perm", "int physskin_test_perm(void) { return 7; }\n")
    if lib is None:
        pytest.skip(f"no C compiler here: {why}")
    assert lib.physskin_test_perm() == 7
    assert oct(private.stat().st_mode & 0o777) == "0o700"


def test_native_sh_rotation_matches_the_reference():
    """The compiled SH rotation (bands 1-3) against the torch reference, for degrees 0-3, on several threads, and
    the defining property eval_sh(out, d) = eval_sh(sh, R^T d); the kernel is skipped for float64 / grad input."""
    import physskin_gs.sh as shm

    if shm._rotate_kernel() is None:
        pytest.skip("no C compiler: native SH rotation unavailable")
    g = torch.Generator().manual_seed(9)
    n = 40001
    R = torch.linalg.qr(torch.randn(n, 3, 3, generator=g, dtype=torch.float64))[0]
    R = (R * torch.sign(torch.det(R))[:, None, None]).float()  # proper rotations
    prev = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        for K1 in (1, 4, 9, 16):
            sh = torch.randn(n, K1, 3, generator=g)
            fast = shm.rotate_sh(sh, R, native=True)
            ref = shm.rotate_sh_serial(sh, R)
            assert fast.shape == sh.shape and torch.equal(fast[:, 0], sh[:, 0])
            assert (fast - ref).abs().max() < 1e-5 * ref.abs().max()  # float32 rounding (measured 5e-9)
    finally:
        torch.set_num_threads(prev)
    d = torch.randn(n, 3, generator=g)
    got = shm.eval_sh(fast, d)
    want = shm.eval_sh(sh, torch.einsum("nba,nb->na", R, d))
    assert (got - want).abs().max() < 1e-4
    assert torch.equal(shm.rotate_sh(sh.double(), R.double()), shm.rotate_sh_serial(sh.double(), R.double()))
    with pytest.raises(RuntimeError, match="native SH rotation"):
        shm.rotate_sh(sh.double(), R.double(), native=True)


def test_rotate_sh_parallel_equals_serial(monkeypatch):
    """The multi-threaded SH rotation gives the serial reference's values bit for bit (and its errors)."""
    import physskin_gs._threads as threads
    import physskin_gs.sh as shm

    g = torch.Generator().manual_seed(5)
    n = 5000
    sh = torch.randn(n, 16, 3, generator=g)
    R = torch.linalg.qr(torch.randn(n, 3, 3, generator=g, dtype=torch.float64))[0].float()
    monkeypatch.setattr(shm, "ROTATE_PARALLEL_MIN", 1000)
    # spies on what the parallel path calls: the shared dispatch, and the worker pool it takes threads from
    runs, pools = [], []
    real_run, real_pool = shm.run_on_workers, threads.worker_pool

    def run_spy(name, fn, items, workers, *args, **kwargs):
        runs.append((name, len(items), workers))
        return real_run(name, fn, items, workers, *args, **kwargs)

    def pool_spy(name, size):
        pools.append((name, size))
        return real_pool(name, size)

    monkeypatch.setattr(shm, "run_on_workers", run_spy)
    monkeypatch.setattr(threads, "worker_pool", pool_spy)
    bad_count = r"SH coefficient count 5 per channel is not \(d\+1\)\^2"
    prev = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        par = shm.rotate_sh(sh, R, native=False)  # the torch path's threads (the compiled one: next test)
        assert torch.get_num_threads() == 2  # restored
        assert runs == [("sh", 2, 2)] and pools == [("sh", 1)]  # two parts: the caller and one pool worker
        # the serial reference's errors, raised before any thread starts
        with pytest.raises(OptionError, match=bad_count):
            shm.rotate_sh(torch.zeros(n, 5, 3), R)  # 5 coefficients: not (d+1)^2
        with pytest.raises(ValueError, match="SH degree 4 > 3 is not supported for rotation"):
            shm.rotate_sh(torch.zeros(n, 25, 3), R)
        assert len(runs) == 1 and len(pools) == 1
    finally:
        torch.set_num_threads(prev)
    assert torch.equal(par, shm.rotate_sh_serial(sh, R))
    with pytest.raises(OptionError, match=bad_count):
        shm.rotate_sh_serial(torch.zeros(n, 5, 3), R)


def test_native_packing_matches_the_torch_packing(monkeypatch):
    """The C packing of the tile storage (one pass) against the torch packing it replaced: same tiles, rest
    means and covariances, also for NaN / inf / zero quaternions, NaN and extreme log-scales, non-finite W and
    a size that is not a multiple of the tile."""
    from physskin_gs import deform as deform_mod

    if not native_available():
        pytest.skip("no C compiler: native deformation kernel unavailable")
    n, H = 40013, 9
    means, quats, ls, _ = _gaussians(n, seed=21)
    W, dW = _random_skinning(n, H, seed=21)
    quats[:5] = 0.0
    quats[5, 1] = float("nan")
    quats[6, 2] = float("inf")
    ls[7] = float("nan")
    ls[8] = torch.tensor([-80.0, 40.0, float("inf")])
    means[9, 0] = float("nan")
    means[10, 1] = float("-inf")
    W[11, 2] = float("nan")
    dW[12, 3, 1] = float("inf")
    packed = GaussianDeformer(means, quats, ls, W, dW, native=True, chunk_size=10007)
    monkeypatch.setattr(deform_mod, "_PACK_NATIVE", False)
    ref = GaussianDeformer(means, quats, ls, W, dW, native=True, chunk_size=10007)
    assert packed._D.shape == ref._D.shape and torch.equal(packed._keep, ref._keep)
    K = packed.K
    assert torch.equal(packed._D[:, :4 * K + 3], ref._D[:, :4 * K + 3])  # W, grad W, means: copied
    La, Lb = packed.L, ref.L  # [n, 3, 3] rotation times scales: rounding of R's cancelling entries differs
    scale = Lb.abs().amax((1, 2), keepdim=True)
    assert ((La - Lb).abs() <= 1e-6 * scale).all()  # measured 2.4e-7 of the largest entry
    assert torch.equal(packed.means, ref.means)
    cs = ref.covars.abs().amax((1, 2), keepdim=True)
    assert ((packed.covars - ref.covars).abs() <= 2e-6 * cs).all()
    assert (packed._D[-1, :, n % 8:] == 0).all()  # the unused lanes of the last tile
    Z = _random_Z(H, seed=21, scale=0.3)
    xp, cp = packed.deform(Z)
    xr, cr = ref.deform(Z)
    assert torch.equal(torch.isfinite(xp), torch.isfinite(xr))
    ok = torch.isfinite(xr).all(1)
    assert (xp[ok] - xr[ok]).abs().max() < 1e-5


def test_rest_covariances_match_the_scene_reference(monkeypatch):
    """The compiled rest covariances against GaussianScene.covariances() (and the torch fallback), with zero,
    NaN and huge quaternions and NaN / extreme log-scales (whose rows stay NaN / inf as in the reference)."""
    from physskin_gs import deform as deform_mod
    from physskin_gs.deform import rest_covariances
    from physskin_gs.scene import GaussianScene

    n = 70001
    means, quats, ls, _ = _gaussians(n, seed=31)
    quats[:3] = 0.0
    quats[3, 0] = float("nan")
    quats[4, 1] = 1e30
    ls[5, 2] = float("nan")
    ls[6] = torch.tensor([-40.0, 5.0, 0.0])
    sc = GaussianScene(means=means, quats=quats, log_scales=ls, opacity_logits=torch.zeros(n),
                       sh_dc=torch.zeros(n, 3), sh_rest=torch.zeros(n, 0, 3))
    ref = sc.covariances()
    fast = rest_covariances(quats, ls)
    assert fast.shape == (n, 3, 3) and fast.dtype == torch.float32
    fin = torch.isfinite(ref).all(2).all(1)
    assert torch.equal(torch.isfinite(fast).all(2).all(1), fin) and int((~fin).sum()) == 1  # the NaN scale row
    scale = ref[fin].abs().amax((1, 2), keepdim=True)
    assert ((fast[fin] - ref[fin]).abs() <= 2e-6 * scale).all()  # float rounding of exp and the rotation
    assert torch.allclose(fast[:3], torch.diag_embed(torch.exp(2 * ls[:3])), rtol=1e-6)  # identity rotation
    monkeypatch.setattr(deform_mod, "_native_kernels", lambda: (None, "no compiler here"))
    assert torch.equal(rest_covariances(quats, ls)[fin], ref[fin])
    with pytest.raises(ValueError):
        rest_covariances(quats[:, :3], ls)


def test_native_export_factors_match_the_reference_svd():
    """The compiled SVD export (quats, log-scales of F L) against covariance_factor_svd + rotmat_to_quat: random
    factors, thin ones (1e-10 columns), zero columns anywhere (whose frame the reference once completed wrongly
    when the zero column was not the last), repeated columns, rank 1, the identity, 180-degree rotations
    (w = 0) and a reflection; and the reconstructed covariance."""
    from physskin_gs.deform import factor_quats_scales

    if not native_available():
        pytest.skip("no C compiler: native deformation kernel unavailable")
    g = torch.Generator().manual_seed(5)
    FL = torch.randn(20000, 3, 3, generator=g)
    FL[:500] *= torch.tensor([1.0, 1.0, 1e-10])  # thin: one column at 1e-10 of the others
    FL[500:510, :, 1] = 0.0  # a zero column
    FL[510:520] = 0.0  # nothing at all
    FL[520:530, :, 2] = FL[520:530, :, 0]  # repeated column
    FL[530:540] = torch.randn(10, 3, 1, generator=g) * torch.randn(10, 1, 3, generator=g)  # rank 1
    FL[540] = torch.eye(3)
    FL[541] = torch.diag(torch.tensor([-1.0, -1.0, 1.0]))  # 180 degrees about z: w = 0
    FL[542] = torch.diag(torch.tensor([1.0, 1.0, -1.0]))  # a reflection (det < 0)
    FL[543:553, :, 0] = 0.0  # the first column zero (the frame starts at the next one)
    FL[553:563, :, :2] = 0.0  # only the last column
    qn, ln = factor_quats_scales(FL, native=True)
    qr, lr = factor_quats_scales(FL, native=False)
    assert (ln - lr).abs().max() < 1e-5  # measured bit-identical
    # the same frame (q ~ -q), except where a singular value is rounding noise (repeated columns, rank 1: s ~ 1e-17),
    # whose direction is arbitrary in both; the covariance below holds for every row
    sv = torch.linalg.svdvals(FL.double())
    defined = (sv[:, 2] > 1e-12 * sv[:, 0]) | (sv[:, 2] == 0)
    assert 10 <= int((~defined).sum()) <= 20  # the repeated-column and rank-1 rows only
    dq = torch.minimum((qn - qr).abs().amax(1), (qn + qr).abs().amax(1))
    assert dq[defined].max() < 1e-6
    assert torch.allclose(qn.norm(dim=1), torch.ones(len(FL)), atol=1e-6) and (qn[:, 0] >= 0).all()
    R = quat_to_rotmat(qn.double())
    S = torch.exp(2 * ln.double())
    cov = R @ torch.diag_embed(S) @ R.transpose(1, 2)
    ref = FL.double() @ FL.double().transpose(1, 2)
    big = ref.abs().amax((1, 2)) > 0
    assert ((cov - ref).abs().amax((1, 2))[big] <= 1e-5 * ref.abs().amax((1, 2))[big]).all()
    with pytest.raises(ValueError):
        factor_quats_scales(FL[:, :2])


@pytest.mark.parametrize("kernel", KERNELS)
def test_gaussians_far_from_the_origin_keep_their_float32_precision(kernel):
    """A capture 1e5 units from its origin (a georeferenced one) holds its positions to float32's 2^-7 there; the
    deformer works about a local origin, so a frame's positions are the exact ones rounded once (within half of
    that), F and the covariances are those of the same Gaussians near the origin, and the rest state is the input
    bit for bit. In absolute coordinates the handle translations cancelled most digits: a resting capture
    shimmered by 0.028 units a frame (a fresh user's report)."""
    native = _native_flag(kernel)
    n, H = 1003, 9
    means, quats, ls, _ = _gaussians(n, seed=21)
    W, dW = _random_skinning(n, H, seed=21)
    off = torch.tensor([1.0e5, -1.1e5, 0.9e5], dtype=torch.float64)
    far = (means.double() + off).float()  # float32 there: 2^-7 apart
    Zl = _random_Z(H, seed=21, scale=0.15).double()  # transforms about the capture ...
    Z = Zl.clone()
    Z[..., 3] -= Zl[..., :3] @ off  # ... in the scene's frame: X~ = [X; 1] with X 1e5 out
    x_ref, c_ref, F_ref, _ = _reference(far, quats, ls, W, dW, Z)
    d = GaussianDeformer(far, quats, ls, W, dW, native=native)
    assert torch.equal(d.means, far) and torch.equal(d.rest_means, far)  # rest: exact
    x, c = d.deform(Z)
    ulp = 2.0 ** -7
    assert (x.double() - x_ref).abs().max() <= 0.5 * ulp + 1e-4
    assert _rel(c, c_ref) < 2e-5 and (d.deformation_gradients().double() - F_ref).abs().max() < 2e-6
    zero = torch.zeros(H, 3, 4, dtype=torch.float64)
    assert torch.equal(d.deform(zero)[0], far)
    near = GaussianDeformer(means, quats, ls, W, dW, native=native)  # near the origin: nothing shifted
    assert torch.equal(near.origin, torch.zeros(3, dtype=torch.float64))
