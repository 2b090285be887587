"""A :class:`SkinningField` backed by a trained network, with fixed column norms (method.md 5, protocol).

``skinning_from_model(model, surface, reference)`` encodes the object once (latents cached), computes the
column norms c (m,) of the raw outputs over the reference set (N_ref points) once, and from then on every query
returns ``W = [W_raw / c * sqrt(N_ref), 1]``: learned columns with RMS 1 over the reference set, the constant
handle exactly 1 (last). Gradients dW/dX come from central differences (default) or forward-mode autodiff,
evaluated in chunks so that a million query points never build one large attention matrix.
"""

from __future__ import annotations

import warnings
from typing import Dict, Tuple

import torch

from physskin_gs.model.field import SkinningField
from physskin_gs.model.losses import FD_DELTA, column_norms, fd_stencil, fields_from_stencil, normalize_with_norms


class NeuralSkinningField(SkinningField):
    """Skinning field of a network (:class:`PhysSkinNet` or :class:`SimplicitsMLP`) for one object.

    Args:
        model: network with ``encode(surface)`` / ``decode(x, cache)`` (put in eval mode; no gradients kept).
        cache: the object's cached latents (``model.encode(surface)``).
        norms: (m,) fixed column norms c over the reference set; n_ref: its number of points.
        chunk: query points per network call (the FD stencil uses chunk // 7 centres per call); small chunks
            (about 2k points) stay in cache and were fastest on 2 cores.
        grad_mode: 'fd' (central differences, step ``FD_DELTA``) or 'jvp' (forward-mode autodiff, exact).
    """

    def __init__(self, model, cache: Dict, norms: torch.Tensor, n_ref: int, chunk: int = 2048, grad_mode: str = "fd"):
        if grad_mode not in ("fd", "jvp"):
            raise ValueError(f"grad_mode must be 'fd' or 'jvp', got {grad_mode!r}")
        self.model = model
        self.cache = cache
        self.norms = norms.detach()
        self.n_ref = int(n_ref)
        self.chunk = int(chunk)
        self.grad_mode = grad_mode
        self.num_handles = int(norms.shape[0]) + 1

    def _scale(self, raw: torch.Tensor) -> torch.Tensor:
        return normalize_with_norms(raw, self.norms, self.n_ref)

    def raw_weights(self, x: torch.Tensor) -> torch.Tensor:
        """(N, 3) -> raw network outputs (N, m), chunked."""
        with torch.no_grad():
            return self.model.decode_chunked(x.float(), self.cache, self.chunk)

    def weights(self, x: torch.Tensor) -> torch.Tensor:
        """W (N, m+1) float32 at query points x (N, 3) in the normalised frame (fixed norms)."""
        return self._scale(self.raw_weights(x))

    def weights_and_grads(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """(W (N, m+1), dW/dX (N, m+1, 3)), float32, normalised frame; the constant column has zero gradient."""
        x = x.float()
        Ws, Gs = [], []
        step = max(1, self.chunk // 7) if self.grad_mode == "fd" else max(1, self.chunk // 4)
        with torch.no_grad():
            for i in range(0, x.shape[0], step):
                xc = x[i : i + step]
                if self.grad_mode == "fd":
                    raw = self.model.decode(fd_stencil(xc), self.cache)
                    W, G = fields_from_stencil(self._scale(raw), xc.shape[0], FD_DELTA)
                    G[:, -1] = 0.0
                else:
                    W, G = self._jvp_chunk(xc)
                Ws.append(W)
                Gs.append(G)
        return torch.cat(Ws), torch.cat(Gs)

    def _jvp_chunk(self, xc: torch.Tensor):
        from torch.func import jvp

        f = lambda p: self._scale(self.model.decode(p, self.cache))  # noqa: E731
        cols = []
        W = None
        for k in range(3):
            t = torch.zeros_like(xc)
            t[:, k] = 1.0
            with warnings.catch_warnings():  # torch's first forward-mode call scripts its decompositions
                warnings.filterwarnings("ignore", message=r".*torch\.jit\.script.* is deprecated",
                                        category=DeprecationWarning)
                W, d = jvp(f, (xc,), (t,))
            cols.append(d)
        return W, torch.stack(cols, dim=-1)


def skinning_from_model(
    model, surface_points: torch.Tensor, reference_points: torch.Tensor, chunk: int = 2048, grad_mode: str = "fd"
) -> NeuralSkinningField:
    """Feed-forward skinning of one object (method.md 5 protocol).

    Args:
        model: :class:`PhysSkinNet` (or a per-object network with the same interface).
        surface_points: (S, 3) float32 encoder input in the normalised frame (about 2048 FPS points).
        reference_points: (R, 3) float32 fixed reference set for the column norms (e.g. the volume points, or the
            Gaussian centres); every later query reuses these norms.
    Returns:
        :class:`NeuralSkinningField` with H = m + 1 handles.
    """
    model.eval()
    with torch.no_grad():
        cache = model.encode(surface_points.float())
        raw = model.decode_chunked(reference_points.float(), cache, chunk)
        norms = column_norms(raw)
    return NeuralSkinningField(model, cache, norms, reference_points.shape[0], chunk=chunk, grad_mode=grad_mode)
