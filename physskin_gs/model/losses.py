"""Self-supervised PhysSkin losses, column normalisation, metrics and the ConFIG update (pure math).

Sources: method.md 5 (normalisation), 6.1-6.6 (sampling, potential energy, orthogonality, smoothness,
finite-difference F, ConFIG) and 11 (metrics). Units: weights are in the "RMS-1" frame of
:class:`physskin_gs.model.field.SkinningField` (each learned column divided by its L2 norm over the
normalisation set and multiplied by sqrt(N_set); constant handle exactly 1, last).
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from physskin_gs.elastic import lame_parameters

#: Central-difference step (method.md 6.5: sqrt(1e-7)).
FD_DELTA = math.sqrt(1e-7)
#: Training material (method.md 6.2, [C]): E = 5e5 Pa, nu = 0.45, approximate volume 0.5.
TRAIN_E = 5e5
TRAIN_NU = 0.45
TRAIN_VOLUME = 0.5


# ----------------------------------------------------------------------------------------------------------------
# Normalisation (method.md 5)


def column_norms(W_raw: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """L2 norms c (m,) of the columns of W_raw (N, m), plus eps (method.md 5)."""
    return W_raw.norm(dim=0) + eps


def normalize_with_norms(W_raw: torch.Tensor, norms: torch.Tensor, n_ref: int) -> torch.Tensor:
    """RMS-1 learned columns with FIXED norms: ``W_raw / c * sqrt(n_ref)``, then the constant column 1 appended.

    Args:
        W_raw: (N, m) raw network outputs at any query points.
        norms: (m,) column norms c computed once on a reference set of ``n_ref`` points.
    Returns:
        (N, m + 1) weights; learned columns have RMS 1 over the reference set, the last column is exactly 1.
    """
    W = W_raw / norms * math.sqrt(n_ref)
    return torch.cat([W, torch.ones_like(W[:, :1])], dim=1)


def normalize_columns(W_raw: torch.Tensor) -> torch.Tensor:
    """On-the-fly normalisation over the given points: (N, m) -> (N, m + 1), learned columns RMS 1."""
    return normalize_with_norms(W_raw, column_norms(W_raw), W_raw.shape[0])


# ----------------------------------------------------------------------------------------------------------------
# Finite differences (method.md 6.5)


#: Forward-difference step (training default: 4 network points per centre instead of 7).
FD_DELTA_FORWARD = 1e-3


def fd_stencil(X: torch.Tensor, delta: float = FD_DELTA, scheme: str = "central") -> torch.Tensor:
    """Query points for finite differences (method.md 6.5).

    central: (N, 3) -> (7N, 3) = [X; X+d e0; X-d e0; X+d e1; X-d e1; X+d e2; X-d e2].
    forward: (N, 3) -> (4N, 3) = [X; X+d e0; X+d e1; X+d e2].
    Same dtype/device as X; ``delta`` in normalised-frame units. Raises ValueError for another ``scheme``.
    """
    eye = torch.eye(3, dtype=X.dtype, device=X.device) * delta
    if scheme == "central":
        offs = torch.stack([eye[0], -eye[0], eye[1], -eye[1], eye[2], -eye[2]])  # [6, 3]
    elif scheme == "forward":
        offs = eye
    else:
        raise ValueError(f"unknown finite-difference scheme {scheme!r}")
    return torch.cat([X, (X[None] + offs[:, None]).reshape(-1, 3)], dim=0)


def fields_from_stencil(
    W_all: torch.Tensor, n: int, delta: float = FD_DELTA, scheme: str = "central"
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Split stencil outputs ((7 or 4) N, H) into W (N, H) at X and the finite-difference dW/dX (N, H, 3).

    Inverse layout of :func:`fd_stencil` with the same ``delta`` and ``scheme`` (method.md 6.5); any float dtype.
    """
    W = W_all[:n]
    if scheme == "central":
        P = W_all[n:].reshape(6, n, -1)  # [6, N, H]
        grad = torch.stack([P[0] - P[1], P[2] - P[3], P[4] - P[5]], dim=-1) / (2.0 * delta)  # [N, H, 3]
    else:
        P = W_all[n:].reshape(3, n, -1)
        grad = (P - W[None]).permute(1, 2, 0) / delta
    return W, grad


def network_fields(
    model, cache, X: torch.Tensor, delta: Optional[float] = None, scheme: str = "central"
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Normalised training fields at points X (N, 3): W (N, m+1) and dW/dX (N, m+1, 3) by finite differences.

    One network call on the stencil points; the column norms come from the N unperturbed points and are
    reused for the neighbours (method.md 5 protocol, applied to training), so the FD gradient is the gradient
    of exactly the normalised field. ``delta`` defaults to FD_DELTA (central) or FD_DELTA_FORWARD (forward).
    """
    if delta is None:
        delta = FD_DELTA if scheme == "central" else FD_DELTA_FORWARD
    n = X.shape[0]
    raw = model.decode(fd_stencil(X, delta, scheme), cache)  # [(7|4)N, m]
    c = column_norms(raw[:n])
    W_all = normalize_with_norms(raw, c, n)
    return fields_from_stencil(W_all, n, delta, scheme)


# ----------------------------------------------------------------------------------------------------------------
# Losses (method.md 6)


def sample_transforms(
    batch: int, num_handles: int, sigma: float, generator: Optional[torch.Generator] = None, dtype=torch.float32
) -> torch.Tensor:
    """Random rest-relative handle transforms Z = sigma * N(0, 1), shape (B, H, 3, 4), ``dtype`` (method.md 6.1).

    ``sigma`` is in normalised-frame units; Z[..., :3] is the linear part A, Z[..., 3] the translation.
    """
    return sigma * torch.randn(batch, num_handles, 3, 4, generator=generator, dtype=dtype)


def batched_deformation_gradient(X: torch.Tensor, W: torch.Tensor, gradW: torch.Tensor, Z: torch.Tensor) -> torch.Tensor:
    """Fast path of :func:`physskin_gs.lbs.deformation_gradient` for B transforms, written as two GEMMs.

    ``F_b(X_n) = I + sum_h W_nh A_bh + sum_h (Z_bh X~_n) gradW_nh^T`` (method.md 3). X (N, 3), W (N, H),
    gradW (N, H, 3), Z (B, H, 3, 4) -> F (B, N, 3, 3). Held to the reference by tests/test_losses.py.
    """
    N, H = W.shape
    B = Z.shape[0]
    Xh = torch.cat([X, torch.ones_like(X[:, :1])], dim=1)  # [N, 4]
    A = Z[..., :3].permute(1, 0, 2, 3).reshape(H, B * 9)  # [H, B*9]
    T1 = (W @ A).reshape(N, B, 3, 3)
    M = (Xh[:, None, :, None] * gradW[:, :, None, :]).reshape(N, H * 4, 3)  # [N, (h c), c']
    Zr = Z.permute(1, 3, 0, 2).reshape(H * 4, B * 3)  # [(h c), (b a)]
    T2 = (M.transpose(1, 2).reshape(N * 3, H * 4) @ Zr).reshape(N, 3, B, 3)  # [n, c', b, a]
    F = T1 + T2.permute(0, 2, 3, 1)  # [N, B, a, c']
    F = F + torch.eye(3, dtype=F.dtype, device=F.device)
    return F.transpose(0, 1)  # [B, N, 3, 3]


def det3(F: torch.Tensor) -> torch.Tensor:
    """Determinant of (..., 3, 3) matrices by the cofactor expansion (cheaper than LU for 3x3 batches)."""
    a, b, c = F[..., 0, 0], F[..., 0, 1], F[..., 0, 2]
    d, e, f = F[..., 1, 0], F[..., 1, 1], F[..., 1, 2]
    g, h, i = F[..., 2, 0], F[..., 2, 1], F[..., 2, 2]
    return a * (e * i - f * h) - b * (d * i - f * g) + c * (d * h - e * g)


def blended_energy_density_fast(F: torch.Tensor, mu: float, lam: float, s: float) -> torch.Tensor:
    """Same value as :func:`physskin_gs.elastic.blended_energy_density` (method.md 6.2), with det3.

    F (..., 3, 3) -> psi (...) in Pa (mu, lam in Pa); ``s`` in [0, 1] blends linear (0) to Neo-Hookean (1).
    Held to the reference by tests/test_losses.py.
    """
    tr_e = F[..., 0, 0] + F[..., 1, 1] + F[..., 2, 2] - 3.0
    out = 0.0
    if s < 1.0:
        eps = 0.5 * (F + F.transpose(-1, -2)) - torch.eye(3, dtype=F.dtype, device=F.device)
        out = (1.0 - s) * (mu * (eps * eps).sum((-2, -1)) + 0.5 * lam * tr_e * tr_e)
    if s > 0.0:
        J = det3(F)
        I1 = (F * F).sum((-2, -1))
        out = out + s * (0.5 * mu * (I1 - 3.0) + 0.5 * lam * (J - 1.0) ** 2 - mu * (J - 1.0))
    return out


def elastic_loss(
    X: torch.Tensor,
    W: torch.Tensor,
    gradW: torch.Tensor,
    Z: torch.Tensor,
    blend: float = 1.0,
    E: float = TRAIN_E,
    nu: float = TRAIN_NU,
    volume: float = TRAIN_VOLUME,
) -> torch.Tensor:
    """Potential-energy loss (PhysSkin Eq. 8, method.md 6.2): ``volume * mean_{b, p} psi(F_bp)``.

    F is the exact LBS deformation gradient (method.md 3) from W (N, H) and dW/dX (N, H, 3) for the B transforms
    Z (B, H, 3, 4); psi = (1 - blend) psi_lin + blend psi_NH with Lame parameters from (E, nu). Returns a scalar
    (energy density units x volume). Zero at Z = 0 and (for blend = 1) for rigid motions.
    """
    mu, lam = lame_parameters(E, nu)
    F = batched_deformation_gradient(X, W, gradW, Z)  # [B, N, 3, 3]
    return volume * blended_energy_density_fast(F, mu, lam, float(blend)).mean()


def orthogonality_loss(W_learned: torch.Tensor) -> torch.Tensor:
    """``MSE(What^T What, I)`` over the learned columns (N, m), each scaled to unit L2 norm (method.md 6.3)."""
    Wh = W_learned / (W_learned.norm(dim=0, keepdim=True) + 1e-8)
    G = Wh.t() @ Wh
    I = torch.eye(G.shape[0], dtype=G.dtype, device=G.device)
    return ((G - I) ** 2).mean()


def smoothness_loss(grad_learned: torch.Tensor) -> torch.Tensor:
    """``mean_X sum_i |grad W_i(X)|^2`` over the learned fields, gradients (N, m, 3) (PhysSkin Eq. 9)."""
    return (grad_learned**2).sum((-1, -2)).mean()


def subspace_loss(W: torch.Tensor, target: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Projection residual of a target subspace onto the span of the predicted weights, in [0, 1].

    ``1 - ||Q_W^T Q_U||_F^2 / K``: Q_W an orthonormal basis of span(W) (N, H) and Q_U one of span(target) (N, K),
    both under the point-sample inner product; 0 when span(W) contains the target span, 1 when they are
    orthogonal. Only the spans matter (any invertible mix of the columns of either gives the same value), so
    the network is free to choose its columns (the orthogonality loss picks well-conditioned ones). Q_W comes
    from a Cholesky whitening of W^T W / N + eps tr/H I (differentiable, stable for nearly dependent columns);
    the target is detached. Label-free: the target is the eigen basis of the same shape (physics-derived).
    """
    N, H = W.shape
    Wd = W.double()
    U = target.detach().double()
    Qu, _ = torch.linalg.qr(U)  # [N, K]
    G = Wd.t() @ Wd / N
    G = G + eps * (torch.diagonal(G).mean().detach() + 1e-30) * torch.eye(H, dtype=G.dtype, device=G.device)
    L = torch.linalg.cholesky(G)
    C = torch.linalg.solve_triangular(L, Wd.t() @ Qu, upper=False) / math.sqrt(N)  # [H, K] = Q_W^T Q_U
    return (1.0 - (C * C).sum() / Qu.shape[1]).to(W.dtype)


# ----------------------------------------------------------------------------------------------------------------
# Metrics (method.md 11)


def skinning_metrics(W: torch.Tensor) -> Dict[str, float]:
    """Omega_orth (x1e-2), kappa_log and H_spec of a weight matrix (method.md 11).

    Args:
        W: (N, K) weights, any float dtype (computed in float64). Every given column is used, each
            L2-normalised over the N points; to leave out the constant handle pass ``W[:, :-1]`` (or use
            :func:`physskin_gs.model.skinning_metrics`, which does that by default). K >= 2 (K = 0, a rigid body's
            field without learned columns: every metric is NaN, undefined).
    Returns:
        dict ``omega_orth_x1e2`` = 100 ||What^T What - I||_F^2 / (K (K - 1)); ``kappa_log`` = log2(1 + lmax/lmin);
        ``h_spec`` = -sum p ln p / ln K with p = lambda / sum lambda (0 ln 0 = 0). lmin <= 0 gives kappa inf.
    """
    W = W.detach().double()
    K = W.shape[1]
    if K == 0:
        return {"omega_orth_x1e2": float("nan"), "kappa_log": float("nan"), "h_spec": float("nan")}
    Wh = W / (W.norm(dim=0, keepdim=True) + 1e-12)
    G = Wh.t() @ Wh
    I = torch.eye(K, dtype=G.dtype)
    omega = float(((G - I) ** 2).sum() / (K * (K - 1))) * 100.0
    lam = torch.linalg.eigvalsh(G).clamp_min(0.0)
    lmax, lmin = float(lam.max()), float(lam.min())
    kappa = math.log2(1.0 + lmax / lmin) if lmin > 0 else float("inf")
    p = lam / lam.sum()
    ent = -(torch.where(p > 0, p * torch.log(p.clamp_min(1e-300)), torch.zeros_like(p))).sum()
    h = float(ent / math.log(K))
    return {"omega_orth_x1e2": omega, "kappa_log": kappa, "h_spec": h}


# ----------------------------------------------------------------------------------------------------------------
# ConFIG (method.md 6.6)


def per_loss_gradients(losses: Sequence[torch.Tensor], params: List[torch.nn.Parameter]) -> torch.Tensor:
    """Flattened gradient of each loss w.r.t. ``params`` (zeros where a parameter is unused): (k, P)."""
    rows = []
    for i, loss in enumerate(losses):
        gs = torch.autograd.grad(loss, params, retain_graph=i < len(losses) - 1, allow_unused=True)
        rows.append(torch.cat([(torch.zeros_like(p) if g is None else g).reshape(-1) for p, g in zip(params, gs)]))
    return torch.stack(rows)


def config_direction(grads: torch.Tensor, weights: Optional[Sequence[float]] = None) -> torch.Tensor:
    """ConFIG conflict-free update (k, P) -> (P,) via ``conflictfree.grad_operator.ConFIG_update`` (least squares,
    projection length). With equal ``weights`` (default) every loss gradient has the same positive cosine with the
    result; otherwise the cosines are proportional to the (positive) weights, still all positive."""
    from conflictfree.grad_operator import ConFIG_update
    from conflictfree.weight_model import EqualWeight

    class _EqualWeightLike(EqualWeight):  # same weights, in the gradients' dtype (float64 here)
        def get_weights(self, gradients, losses=None, device=None):
            if weights is None:
                return torch.ones(gradients.shape[0], dtype=gradients.dtype, device=gradients.device)
            return torch.tensor(list(weights), dtype=gradients.dtype, device=gradients.device)

    # float64: nearly opposite loss gradients are common and float32 least squares loses the small direction
    return ConFIG_update(grads.double(), weight_model=_EqualWeightLike()).to(grads.dtype)


def write_gradient(params: List[torch.nn.Parameter], vec: torch.Tensor) -> None:
    """Write a flat gradient vector (P,) into ``p.grad`` for each parameter, in order."""
    i = 0
    for p in params:
        n = p.numel()
        p.grad = vec[i : i + n].view_as(p).clone()
        i += n
