"""Per-object skinning fit (Simplicits-style): the PhysSkin losses optimised for one shape only.

Both the baseline the feed-forward network must beat (method.md 4.3 "Risk", 12 Table 2 "Simplicits per object")
and a user option (``--skinning fit``). A fresh :class:`SimplicitsMLP` (xyz -> ELU MLP -> m weights), or a copy of
a trained :class:`PhysSkinNet` to fine-tune, is trained with the same losses and gradient combination as the
network (method.md 6). The first 10 % of the budget optimises the orthogonality loss alone, which avoids the
collapse of all columns into one field under column normalisation (method.md 4.3.1).
"""

from __future__ import annotations

import copy
import time
from dataclasses import replace
from typing import Callable, Optional

import torch

from physskin_gs.errors import OptionError
from physskin_gs.model.data import TrainShape
from physskin_gs.model.network import SimplicitsMLP
from physskin_gs.model.neural_field import NeuralSkinningField, skinning_from_model
from physskin_gs.model.trainer import TrainConfig, train_step

#: Defaults of the per-object fit: the network's losses, Adam at 1e-3 (Simplicits) decaying to 1e-4.
FIT_CONFIG = TrainConfig(
    steps=2000, lr=1e-3, lr_min=1e-4, warmup_frac=0.0, cubature=1000, transforms=64, augment=False,
    orth_only_frac=0.1, smooth=False,
)


#: Loss settings copied from a network's training configuration so that the fit optimises the same objective.
LOSS_FIELDS = ("sigma", "smooth", "combine", "w_pot", "w_orth", "w_smooth", "c_pot", "c_orth", "c_smooth", "fd_scheme")


def fit_config_like(train_config: Optional[dict]) -> TrainConfig:
    """:data:`FIT_CONFIG` with the loss settings (combination, weights, sigma, smoothness, FD scheme) of a
    network's training configuration (the ``train`` dict stored in its checkpoint), so the per-object fit
    optimises the same objective as the network. ``None`` or an empty dict gives FIT_CONFIG."""
    if not train_config:
        return FIT_CONFIG
    return replace(FIT_CONFIG, **{k: train_config[k] for k in LOSS_FIELDS if k in train_config})


def fit_skinning(
    surface_points: torch.Tensor,
    volume_points: torch.Tensor,
    time_budget_s: Optional[float] = 60.0,
    steps: Optional[int] = None,
    seed: int = 0,
    progress: Optional[Callable[[int, dict], None]] = None,
    init_model=None,
    config: Optional[TrainConfig] = None,
    num_handles: int = 16,
) -> NeuralSkinningField:
    """Fit a skinning field to one object (per-object optimisation, Simplicits style).

    Args:
        surface_points: (S, 3) float32 surface points in the normalised frame (encoder input when fine-tuning).
        volume_points: (V, 3) float32 cubature pool (surface + interior) in the normalised frame; also the
            reference set of the returned field's fixed column norms.
        time_budget_s: wall-clock budget in seconds (None: steps only). The schedule (orthogonality-only phase
            for the first 10 %, cosine learning rate, linear -> Neo-Hookean blend) follows elapsed time when a
            budget is given, else the step count.
        steps: step budget (None: time only). At least one of the two budgets is required.
        seed: seeds the initialisation and the sampling (deterministic for a step budget).
        progress: optional callback ``progress(step, record)`` after every step.
        init_model: a trained :class:`PhysSkinNet` to fine-tune (copied; the original is not modified), or None
            for a fresh :class:`SimplicitsMLP` with ``num_handles`` outputs.
        config: :class:`TrainConfig` overrides (default :data:`FIT_CONFIG`).
    Returns:
        :class:`NeuralSkinningField` (H = m + 1) with column norms fixed on ``volume_points``.
    Raises:
        OptionError if neither budget is given or a budget is not positive.
    """
    if time_budget_s is None and steps is None:
        raise OptionError("fit_skinning needs a time budget or a step budget")
    if (time_budget_s is not None and time_budget_s <= 0) or (steps is not None and steps < 1):
        raise OptionError("fit_skinning budgets must be positive")
    cfg = config or FIT_CONFIG
    # the schedule runs over a nominal horizon; with a time budget the progress fraction is elapsed/budget
    horizon = steps if steps is not None else 100000
    cfg = replace(cfg, steps=horizon, seed=seed)
    torch.manual_seed(seed)
    model = copy.deepcopy(init_model) if init_model is not None else SimplicitsMLP(num_handles)
    model.train()
    for p in model.parameters():
        p.requires_grad_(True)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    g = torch.Generator().manual_seed(seed)
    shape = TrainShape("fit", surface_points.float(), volume_points.float())
    t0 = time.perf_counter()
    step = 0
    while True:
        if steps is not None and step >= steps:
            break
        elapsed = time.perf_counter() - t0
        if time_budget_s is not None and elapsed >= time_budget_s:
            break
        if time_budget_s is not None:
            frac = elapsed / time_budget_s
            if steps is not None:
                frac = max(frac, step / steps)
            virt = int(frac * horizon)  # schedule position
        else:
            virt = step
        rec = train_step(model, opt, shape, cfg, virt, g)
        step += 1
        if progress is not None:
            rec["step"] = step
            progress(step, rec)
    model.eval()
    return skinning_from_model(model, surface_points.float(), volume_points.float())
