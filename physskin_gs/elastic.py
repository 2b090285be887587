"""Hyperelastic energy densities (pure math, no I/O).

Shared by the self-supervised training losses (``physskin_gs.model``) and the simulator
(``physskin_gs.physics``). Source: method.md section 6.2 (PhysSkin Eq. 8, Simplicits).
"""

from __future__ import annotations

from typing import Tuple

import torch


def lame_parameters(E: float, nu: float) -> Tuple[float, float]:
    """Lame parameters (mu, lambda) in Pa from Young's modulus E (Pa) and Poisson ratio nu in (-1, 0.5).

    Raises ValueError if nu is outside (-1, 0.5) or E <= 0.
    """
    if not (-1.0 < nu < 0.5):
        raise ValueError(f"Poisson ratio nu must lie in (-1, 0.5), got {nu}")
    if not E > 0:
        raise ValueError(f"Young's modulus E must be > 0, got {E}")
    mu = E / (2.0 * (1.0 + nu))
    lam = E * nu / ((1.0 + nu) * (1.0 - 2.0 * nu))
    return mu, lam


def linear_elastic_energy_density(F: torch.Tensor, mu, lam) -> torch.Tensor:
    """Linear (small-strain) energy density psi_lin(F) for F (..., 3, 3); returns (...,) in J/m^3.

    ``eps = (F + F^T)/2 - I``, ``psi = mu tr(eps^T eps) + lam/2 tr(eps)^2``. Not rotation invariant.
    """
    eye = torch.eye(3, dtype=F.dtype, device=F.device)
    eps = 0.5 * (F + F.transpose(-1, -2)) - eye
    tr = eps.diagonal(dim1=-2, dim2=-1).sum(-1)
    return mu * (eps * eps).sum((-2, -1)) + 0.5 * lam * tr * tr


def neohookean_energy_density(F: torch.Tensor, mu, lam) -> torch.Tensor:
    """Stable Neo-Hookean energy density (no log) for F (..., 3, 3); returns (...,) in J/m^3.

    ``psi = mu/2 (tr(F^T F) - 3) + lam/2 (J - 1)^2 - mu (J - 1)``, J = det F (method.md 6.2).
    Zero at F = I and for every rotation.
    """
    J = torch.linalg.det(F)
    I1 = (F * F).sum((-2, -1))
    return 0.5 * mu * (I1 - 3.0) + 0.5 * lam * (J - 1.0) ** 2 - mu * (J - 1.0)


def blended_energy_density(F: torch.Tensor, mu, lam, s: float) -> torch.Tensor:
    """``(1 - s) psi_lin + s psi_NH`` with blend factor s in [0, 1] (training schedule, method.md 6.2)."""
    if s <= 0.0:
        return linear_elastic_energy_density(F, mu, lam)
    if s >= 1.0:
        return neohookean_energy_density(F, mu, lam)
    return (1.0 - s) * linear_elastic_energy_density(F, mu, lam) + s * neohookean_energy_density(F, mu, lam)
