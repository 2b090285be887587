"""One self-supervised training step and the learning-rate / material-blend schedules (method.md 6).

Shared by ``physskin-gs train`` (many shapes) and the per-object fit (one shape).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, fields
from typing import Dict, List

import torch

from physskin_gs.model import losses as L
from physskin_gs.model.data import TrainShape


@dataclass
class TrainConfig:
    """Training hyper-parameters (method.md 6; defaults for 2 CPU cores)."""

    steps: int = 4000
    lr: float = 5e-4
    lr_min: float = 5e-5
    warmup_frac: float = 0.01
    cubature: int = 500  # points per step (method.md 6.1: 1000; 500 on 2 busy cores)
    transforms: int = 64  # B
    sigma: float = 0.02  # Z ~ sigma N(0,1), weights in RMS-1 units
    surface_points: int = 2048  # encoder input
    smooth: bool = True
    orth_only_frac: float = 0.02  # first fraction of steps with the orthogonality loss only (fit: 0.1)
    combine: str = "sum"  # 'sum' (weighted, shipped recipe) or 'config' (ConFIG, conflictfree)
    w_pot: float = 1.0  # loss weights, used only by combine='sum' (ConFIG ignores scales)
    w_orth: float = 1e6
    w_smooth: float = 100.0
    c_pot: float = 1.0  # ConFIG target-cosine weights (equal = the paper's ConFIG)
    c_orth: float = 1.0
    c_smooth: float = 1.0
    fd_scheme: str = "forward"  # 'forward' (4 points per centre) or 'central' (7)
    w_sub: float = 0.0  # weight of the subspace loss toward the shape's target basis (0 = off; needs targets)
    c_sub: float = 1.0  # its ConFIG cosine weight
    augment: bool = True
    seed: int = 0

    @classmethod
    def from_dict(cls, d: Dict) -> "TrainConfig":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def to_dict(self) -> Dict:
        return asdict(self)


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up over warmup_frac * T, then cosine from lr to lr_min (method.md 6.7)."""
    T = max(cfg.steps, 1)
    Tw = max(int(cfg.warmup_frac * T), 1)
    if step < Tw:
        return cfg.lr * (step + 1) / Tw
    t = min((step - Tw) / max(T - Tw, 1), 1.0)
    r = cfg.lr_min / cfg.lr
    return cfg.lr * (r + (1 - r) * 0.5 * (1 + math.cos(math.pi * t)))


def blend_at(step: int, cfg: TrainConfig) -> float:
    """Linear -> Neo-Hookean blend factor s = step / T (method.md 6.2)."""
    return min(step / max(cfg.steps, 1), 1.0)


def compute_losses(
    model, shape: TrainShape, cfg: TrainConfig, step: int, g: torch.Generator
) -> Dict[str, torch.Tensor]:
    """The losses on one shape: ``pot`` (Eq. 8), ``orth`` (6.3), ``smooth`` (Eq. 9), ``sub`` (the subspace loss
    toward the shape's target basis, when ``cfg.w_sub > 0``; :func:`losses.subspace_loss`), plus ``W`` (N, H)."""
    S = shape.surface.shape[0]
    if S > cfg.surface_points:
        surf = shape.surface[torch.randperm(S, generator=g)[: cfg.surface_points]]
    else:
        surf = shape.surface
    idx = torch.randint(0, shape.volume.shape[0], (cfg.cubature,), generator=g)
    X = shape.volume[idx]  # [N, 3]
    cache = model.encode(surf)
    W, G = L.network_fields(model, cache, X, scheme=cfg.fd_scheme)  # [N, H], [N, H, 3]
    Z = L.sample_transforms(cfg.transforms, W.shape[1], cfg.sigma, g).to(X.device)  # drawn on the CPU generator
    out = {
        "pot": L.elastic_loss(X, W, G, Z, blend=blend_at(step, cfg)),
        "orth": L.orthogonality_loss(W[:, :-1]),
        "smooth": L.smoothness_loss(G[:, :-1]),
        "W": W,
    }
    if cfg.w_sub > 0:
        if shape.target is None:
            raise ValueError(f"shape {shape.name!r} has no subspace target (w_sub > 0)")
        out["sub"] = L.subspace_loss(W, shape.target[idx])
    return out


def active_losses(cfg: TrainConfig, step: int) -> List[str]:
    """Names of the losses optimised at ``step``: ["orth"] during the orthogonality-only warm-up
    (``orth_only_frac`` of the steps, method.md 4.3.1), then ["pot", "orth"] ("pot" only when ``w_pot > 0``), plus
    "smooth" when ``cfg.smooth`` and "sub" when ``w_sub > 0``."""
    if step < int(cfg.orth_only_frac * cfg.steps):
        return ["orth"]
    names = (["pot"] if cfg.w_pot > 0 else []) + ["orth"]
    if cfg.smooth:
        names.append("smooth")
    if cfg.w_sub > 0:
        names.append("sub")
    return names


def train_step(
    model,
    optimizer: torch.optim.Optimizer,
    shape: TrainShape,
    cfg: TrainConfig,
    step: int,
    g: torch.Generator,
    world_size: int = 1,
) -> Dict[str, float]:
    """One training step (method.md 6.6): losses on one shape, gradient combination, Adam step.

    combine='config': per-loss gradients, averaged across ranks, combined by ConFIG (conflictfree);
    combine='sum': one backward pass of ``w_pot pot + w_orth orth + w_smooth smooth`` (gradients averaged across
    ranks). An orthogonality-only phase (``orth_only_frac``) uses the orthogonality gradient alone.

    Returns floats: losses, lr, blend, the cosine of the update with each loss gradient, H_spec of the batch.
    """
    t0 = time.perf_counter()
    lr = lr_at(step, cfg)
    for grp in optimizer.param_groups:
        grp["lr"] = lr
    params = [p for p in model.parameters() if p.requires_grad]
    out = compute_losses(model, shape, cfg, step, g)
    names = active_losses(cfg, step)
    weights = {"pot": cfg.w_pot, "orth": cfg.w_orth, "smooth": cfg.w_smooth, "sub": cfg.w_sub}
    if cfg.combine == "sum" or len(names) == 1:
        # one backward pass of the weighted sum (no per-loss gradients needed)
        total = sum((weights[n] if len(names) > 1 else 1.0) * out[n] for n in names)
        optimizer.zero_grad(set_to_none=True)
        total.backward()
        if world_size > 1:
            import torch.distributed as dist

            for p in params:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                dist.all_reduce(p.grad)
                p.grad /= world_size
        optimizer.step()
        grads = d = None
    else:
        grads = L.per_loss_gradients([out[n] for n in names], params)  # [k, P]
        if world_size > 1:
            import torch.distributed as dist

            dist.all_reduce(grads)
            grads /= world_size
        d = L.config_direction(grads, [{"pot": cfg.c_pot, "orth": cfg.c_orth, "smooth": cfg.c_smooth, "sub": cfg.c_sub}[n] for n in names])
        L.write_gradient(params, d)
        optimizer.step()
    rec = {n: float(out[n].detach()) for n in ("pot", "orth", "smooth", "sub") if n in out}
    if grads is not None:
        gn = grads.norm(dim=1).clamp_min(1e-30)
        cos = (grads @ d) / (gn * d.norm().clamp_min(1e-30))
        for n, c in zip(names, cos.tolist()):
            rec[f"cos_{n}"] = c
    rec.update(lr=lr, blend=blend_at(step, cfg), step_s=time.perf_counter() - t0)
    rec["h_spec"] = L.skinning_metrics(out["W"][:, :-1])["h_spec"]
    return rec
