"""The skinning-field interface that the simulator, the deformer and the viewer consume.

A :class:`SkinningField` gives, for query points in the object's *normalised* frame (about [-1, 1]^3),
the signed skinning weights W (N, H) with H = m + 1 handles (the m learned handles first, the constant
handle last) and their spatial gradients dW/dX (N, H, 3) in the same frame.

Units (method.md section 5, protocol step 4): the learned columns are divided by fixed column norms
computed once on a reference point set and multiplied by sqrt(N_ref), so each learned column has RMS 1
over the reference set, and the constant column is exactly 1. The same scale is used for every later
query (cubature points, Gaussian centres, finite-difference neighbours), so simulation and rendering agree.
"""

from __future__ import annotations

from typing import Tuple

import torch


class SkinningField:
    """Abstract skinning field W: R^3 -> R^H in an object's normalised frame."""

    #: Number of handles H = m + 1, constant handle included (last column).
    num_handles: int

    def weights(self, x: torch.Tensor) -> torch.Tensor:
        """x: (N, 3) float32 normalised coordinates -> W: (N, H) float32."""
        return self.weights_and_grads(x)[0]

    def weights_and_grads(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """x: (N, 3) -> (W (N, H), dW/dX (N, H, 3)), both float32, in the normalised frame."""
        raise NotImplementedError


class RBFSkinningField(SkinningField):
    """Analytic field of m Gaussian radial basis functions plus the constant handle (tests and fallbacks).

    ``W_i(x) = exp(-|x - c_i|^2 / (2 r^2))`` for centres c (m, 3) and radius r; gradients are exact.
    """

    def __init__(self, centers: torch.Tensor, radius: float) -> None:
        self.centers = centers.float()
        self.radius = float(radius)
        self.num_handles = int(centers.shape[0]) + 1

    def weights_and_grads(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        d = x[:, None, :] - self.centers[None]  # [N, m, 3]
        w = torch.exp(-(d * d).sum(-1) / (2 * self.radius**2))  # [N, m]
        g = -w[..., None] * d / self.radius**2  # [N, m, 3]
        W = torch.cat([w, torch.ones_like(w[:, :1])], dim=1)
        G = torch.cat([g, torch.zeros_like(g[:, :1])], dim=1)
        return W, G
