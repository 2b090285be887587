"""Tests for Gaussian deformation, export conversion and SH rotation (method.md 10)."""

from __future__ import annotations

import math

import torch

from physskin_gs.deform import (
    GaussianDeformer,
    clamp_singular_values,
    covariance_factor_svd,
    deform_reference,
    eval_sh,
    polar_rotation,
    rotate_sh,
)
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
