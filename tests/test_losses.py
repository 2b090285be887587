"""Losses, normalisation, metrics and ConFIG (method.md 5, 6, 11)."""

import math

import pytest
import torch

from physskin_gs.elastic import lame_parameters
from physskin_gs.lbs import deformation_gradient
from physskin_gs.model.field import RBFSkinningField
from physskin_gs.model.losses import (
    FD_DELTA,
    column_norms,
    config_direction,
    elastic_loss,
    fd_stencil,
    fields_from_stencil,
    network_fields,
    normalize_columns,
    normalize_with_norms,
    orthogonality_loss,
    sample_transforms,
    skinning_metrics,
    smoothness_loss,
    batched_deformation_gradient,
    blended_energy_density_fast,
    det3,
)
from physskin_gs.elastic import blended_energy_density
from physskin_gs.model.network import NetConfig, PhysSkinNet


pytestmark = pytest.mark.usefixtures("one_torch_thread")

E, NU = 5e5, 0.45


def _rbf_points(n=200, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, 3, generator=g) * 2 - 1
    field = RBFSkinningField(torch.rand(4, 3, generator=g) * 2 - 1, 0.5)
    W, G = field.weights_and_grads(X)
    return X, W, G


def tiny_net(seed=0, **kw):
    torch.manual_seed(seed)
    cfg = dict(num_handles=6, width=32, heads=2, latents=8, enc_layers=1, handle_tokens=8, head_hidden=32, ff_mult=1)
    cfg.update(kw)
    return PhysSkinNet(NetConfig(**cfg))


@pytest.mark.parametrize("blend", [0.0, 0.5, 1.0])
def test_energy_zero_at_rest(blend):
    X, W, G = _rbf_points()
    Z = torch.zeros(3, W.shape[1], 3, 4)
    assert float(elastic_loss(X, W, G, Z, blend=blend)) == 0.0


def test_energy_zero_for_rigid_motion():
    X, W, G = _rbf_points()
    H = W.shape[1]
    angle = 0.7
    c, s = math.cos(angle), math.sin(angle)
    R = torch.tensor([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
    Z = torch.zeros(1, H, 3, 4)
    Z[0, -1, :, :3] = R - torch.eye(3)  # constant handle carries the rigid motion (method.md 2)
    Z[0, -1, :, 3] = torch.tensor([0.3, -0.2, 0.5])
    e = float(elastic_loss(X.double(), W.double(), G.double(), Z.double(), blend=1.0))
    mu, _ = lame_parameters(E, NU)
    assert abs(e) < 1e-9 * mu
    # the linear energy is not rotation invariant: a sanity check that the test can fail
    assert float(elastic_loss(X, W, G, Z, blend=0.0)) > 1e-3 * mu


def test_energy_matches_hand_computed_stretch():
    X, W, G = _rbf_points()
    H = W.shape[1]
    e = 0.1
    Z = torch.zeros(1, H, 3, 4, dtype=torch.float64)
    Z[0, -1, 0, 0] = e  # F = diag(1 + e, 1, 1) everywhere
    mu, lam = lame_parameters(E, NU)
    psi_nh = 0.5 * mu * ((1 + e) ** 2 - 1) + 0.5 * lam * e**2 - mu * e
    psi_lin = mu * e**2 + 0.5 * lam * e**2
    got_nh = float(elastic_loss(X.double(), W.double(), G.double(), Z, blend=1.0, volume=1.0))
    got_lin = float(elastic_loss(X.double(), W.double(), G.double(), Z, blend=0.0, volume=1.0))
    assert got_nh == pytest.approx(psi_nh, rel=1e-9)
    assert got_lin == pytest.approx(psi_lin, rel=1e-9)
    got_mix = float(elastic_loss(X.double(), W.double(), G.double(), Z, blend=0.25, volume=0.5))
    assert got_mix == pytest.approx(0.5 * (0.75 * psi_lin + 0.25 * psi_nh), rel=1e-9)


def test_config_update_positive_with_every_gradient():
    g = torch.Generator().manual_seed(0)
    base = torch.randn(200, generator=g)
    grads = torch.stack([base + 0.05 * torch.randn(200, generator=g),
                         -base + 0.05 * torch.randn(200, generator=g),  # nearly opposite
                         torch.randn(200, generator=g)])
    d = config_direction(grads)
    dots = grads @ d
    assert (dots > 0).all()
    cos = dots / (grads.norm(dim=1) * d.norm())
    assert torch.allclose(cos, cos.mean().expand(3), rtol=1e-3)  # equal cosines
    dw = config_direction(grads, [1.0, 4.0, 1.0])
    cw = (grads @ dw) / (grads.norm(dim=1) * dw.norm())
    assert (cw > 0).all() and float(cw[1] / cw[0]) == pytest.approx(4.0, rel=1e-3)


def test_normalisation_unit_columns_and_fixed_norm_reuse():
    g = torch.Generator().manual_seed(1)
    raw = torch.randn(500, 6, generator=g) * torch.tensor([0.1, 1, 10, 3, 0.5, 2])
    W = normalize_columns(raw)
    assert W.shape == (500, 7)
    assert torch.allclose(W[:, -1], torch.ones(500))
    unit = W[:, :-1] / math.sqrt(500)
    assert torch.allclose(unit.norm(dim=0), torch.ones(6), atol=1e-5)
    # fixed norms: a subset is scaled exactly like the reference rows, not re-normalised
    c = column_norms(raw)
    sub = normalize_with_norms(raw[:37], c, 500)
    assert torch.allclose(sub, W[:37], atol=1e-6)
    assert not torch.allclose(normalize_columns(raw[:37]), W[:37], atol=1e-3)


def test_fd_stencil_gradient_of_linear_field_is_exact():
    X = torch.rand(10, 3, dtype=torch.float64)
    A = torch.randn(3, 4, dtype=torch.float64)
    for scheme in ("central", "forward"):
        P = fd_stencil(X, 1e-3, scheme)
        W, G = fields_from_stencil(P @ A, 10, 1e-3, scheme)
        assert torch.allclose(W, X @ A)
        assert torch.allclose(G, A.t().expand(10, 4, 3), atol=1e-8)


def test_finite_difference_F_matches_autograd_F():
    net = tiny_net().double()
    g = torch.Generator().manual_seed(2)
    surf = torch.rand(64, 3, generator=g, dtype=torch.float64) * 2 - 1
    X = torch.rand(50, 3, generator=g, dtype=torch.float64) * 2 - 1
    cache = net.encode(surf)
    Wfd, Gfd = network_fields(net, cache, X, scheme="central")
    # analytic: autograd dW/dX of the same normalised field (norms fixed from the unperturbed points)
    c = column_norms(net.decode(X, cache)).detach()
    Xr = X.clone().requires_grad_(True)
    Wa = normalize_with_norms(net.decode(Xr, cache), c, X.shape[0])
    Ga = torch.stack([torch.autograd.grad(Wa[:, j].sum(), Xr, retain_graph=True)[0] for j in range(Wa.shape[1] - 1)]
                     + [torch.zeros_like(X)], dim=1)
    Z = sample_transforms(4, Wa.shape[1], 0.05, g, dtype=torch.float64)
    Ffd = deformation_gradient(X, Wfd.detach(), Gfd.detach(), Z)
    Fan = deformation_gradient(X, Wa.detach(), Ga, Z)
    eye = torch.eye(3, dtype=torch.float64)
    rel = (Ffd - Fan).norm() / (Fan - eye).norm()
    assert rel < 1e-3
    # forward differences (training default) are first-order but still close
    Wf, Gf = network_fields(net, cache, X, scheme="forward")
    rel_f = (deformation_gradient(X, Wf.detach(), Gf.detach(), Z) - Fan).norm() / (Fan - eye).norm()
    assert rel_f < 2e-2


def test_orthogonality_and_smoothness_losses():
    Q, _ = torch.linalg.qr(torch.randn(300, 5, dtype=torch.float64))
    assert float(orthogonality_loss(Q * 7.0)) < 1e-12
    collapsed = torch.ones(300, 5, dtype=torch.float64)
    assert float(orthogonality_loss(collapsed)) == pytest.approx((25 - 5) / 25)
    G = torch.zeros(10, 5, 3)
    G[:, 0, 1] = 2.0
    assert float(smoothness_loss(G)) == pytest.approx(4.0)


def test_skinning_metrics_reference_values():
    Q, _ = torch.linalg.qr(torch.randn(400, 16, dtype=torch.float64))
    m = skinning_metrics(Q)
    assert m["omega_orth_x1e2"] == pytest.approx(0.0, abs=1e-10)
    assert m["kappa_log"] == pytest.approx(1.0, abs=1e-8)
    assert m["h_spec"] == pytest.approx(1.0, abs=1e-8)
    col = torch.rand(400, 1, dtype=torch.float64)
    c = skinning_metrics(col.expand(400, 16))
    assert c["omega_orth_x1e2"] == pytest.approx(100.0, rel=1e-9)  # method.md 11: collapsed basis
    assert c["h_spec"] == pytest.approx(0.0, abs=1e-6)
    assert c["kappa_log"] > 20


def test_fast_F_and_energy_match_reference():
    X, W, G = _rbf_points(120)
    g = torch.Generator().manual_seed(5)
    X, W, G = X.double(), W.double(), G.double()
    Z = sample_transforms(7, W.shape[1], 0.2, g, dtype=torch.float64)
    F_fast = batched_deformation_gradient(X, W, G, Z)
    F_ref = deformation_gradient(X, W, G, Z)
    assert torch.allclose(F_fast, F_ref, atol=1e-12)
    assert torch.allclose(det3(F_ref), torch.linalg.det(F_ref), atol=1e-12)
    mu, lam = lame_parameters(E, NU)
    for s in (0.0, 0.3, 1.0):
        assert torch.allclose(blended_energy_density_fast(F_ref, mu, lam, s),
                              blended_energy_density(F_ref, mu, lam, s), rtol=1e-10)


def test_subspace_loss_depends_on_spans_only():
    """0 when span(W) contains the target span (any mix of the columns), about 1 - k/K when only k of the K target
    directions are in it, and invariant to mixing the target's columns."""
    from physskin_gs.model.losses import subspace_loss

    g = torch.Generator().manual_seed(0)
    U = torch.randn(400, 6, generator=g, dtype=torch.float64)
    mix = torch.randn(6, 6, generator=g, dtype=torch.float64)
    assert float(subspace_loss(U @ mix, U)) < 1e-6
    assert float(subspace_loss(U, U @ mix)) < 1e-6
    half = torch.cat([U[:, :3], torch.randn(400, 3, generator=g, dtype=torch.float64)], 1)
    Qu, _ = torch.linalg.qr(U)
    # exact value from the projector onto span(half)
    Qh, _ = torch.linalg.qr(half)
    expect = 1 - float((Qh.T @ Qu).pow(2).sum()) / 6
    assert float(subspace_loss(half, U)) == pytest.approx(expect, abs=1e-6)
    assert 0.4 < expect < 0.55
    W = torch.randn(400, 6, generator=g, dtype=torch.float64, requires_grad=True)
    loss = subspace_loss(W, U)
    loss.backward()
    assert torch.isfinite(W.grad).all() and float(W.grad.norm()) > 0
