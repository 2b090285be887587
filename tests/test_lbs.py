"""Rest-relative LBS (PhysSkin Eq. 2): matrix forms against the direct formulas and finite differences."""

import torch

from physskin_gs.lbs import deformation_gradient, deformation_jacobian, lbs_matrix, lbs_points
from physskin_gs.model.field import RBFSkinningField


def _setup(seed=0, n=50, m=4):
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, 3, generator=g, dtype=torch.float64) * 2 - 1
    field = RBFSkinningField(torch.rand(m, 3, generator=g) * 2 - 1, radius=0.6)
    W, G = field.weights_and_grads(X.float())
    Z = 0.2 * torch.randn(m + 1, 3, 4, generator=g, dtype=torch.float64)
    return X, W.double(), G.double(), Z, field


def test_lbs_matrix_times_z_is_the_displacement():
    X, W, _, Z, _ = _setup()
    B = lbs_matrix(X, W)  # [N, 3, 12 H]
    x = X + torch.einsum("nak,k->na", B, Z.reshape(-1))
    assert torch.allclose(x, lbs_points(X, W, Z), atol=1e-12)


def test_deformation_jacobian_times_z_is_F():
    X, W, G, Z, _ = _setup(1)
    J = deformation_jacobian(X, W, G)  # [N, 9, 12 H]
    F = torch.eye(3, dtype=X.dtype).reshape(9) + torch.einsum("nfk,k->nf", J, Z.reshape(-1))
    assert torch.allclose(F.reshape(-1, 3, 3), deformation_gradient(X, W, G, Z), atol=1e-12)


def test_deformation_gradient_matches_central_differences():
    X, _, _, Z, field = _setup(2)
    W, G = (t.double() for t in field.weights_and_grads(X.float()))
    F = deformation_gradient(X, W, G, Z)
    h = 1e-4
    cols = []
    for k in range(3):
        e = torch.zeros(3, dtype=X.dtype)
        e[k] = h
        xp = lbs_points(X + e, field.weights(X + e).double(), Z)
        xm = lbs_points(X - e, field.weights(X - e).double(), Z)
        cols.append((xp - xm) / (2 * h))
    F_fd = torch.stack(cols, dim=-1)  # [N, 3, 3], column k = d phi / d X_k
    assert torch.allclose(F, F_fd, atol=2e-3)


def test_constant_handle_represents_a_rigid_motion_exactly():
    X, W, G, _, _ = _setup(3)
    c = 0.7  # the constant column value
    W = W.clone()
    W[:, -1] = c
    G = G.clone()
    G[:, -1] = 0.0
    th = 0.4
    R = torch.tensor([[1, 0, 0], [0, torch.cos(torch.tensor(th)), -torch.sin(torch.tensor(th))],
                      [0, torch.sin(torch.tensor(th)), torch.cos(torch.tensor(th))]], dtype=X.dtype)
    t = torch.tensor([0.1, -0.2, 0.3], dtype=X.dtype)
    Z = torch.zeros(W.shape[1], 3, 4, dtype=X.dtype)
    Z[-1, :, :3] = (R - torch.eye(3, dtype=X.dtype)) / c
    Z[-1, :, 3] = t / c
    assert torch.allclose(lbs_points(X, W, Z), X @ R.T + t, atol=1e-12)
    assert torch.allclose(deformation_gradient(X, W, G, Z), R.expand(X.shape[0], 3, 3), atol=1e-12)
