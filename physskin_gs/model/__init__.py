"""PhysSkin neural skinning: network, losses, training step, per-object fit, checkpoints and fields.

Public API (method.md 4-6, 11): :class:`PhysSkinNet`, :class:`NeuralSkinningField`, :func:`load_checkpoint`,
:func:`save_checkpoint`, :func:`default_checkpoint_path`, :func:`skinning_from_model`, :func:`fit_skinning`,
:func:`skinning_metrics`.
"""

from physskin_gs.model.checkpoint import default_checkpoint_path, load_checkpoint, save_checkpoint
from physskin_gs.model.field import RBFSkinningField, SkinningField
from physskin_gs.model.network import NetConfig, PhysSkinNet, SimplicitsMLP
from physskin_gs.model.neural_field import NeuralSkinningField, skinning_from_model
from physskin_gs.model.fit import fit_skinning
from physskin_gs.model.losses import skinning_metrics as _metrics


def skinning_metrics(W, include_constant: bool = False) -> dict:
    """Omega_orth (x1e-2), kappa_log and H_spec (method.md 11) of weights W (N, m+1) with the constant column last.

    By default the constant column is excluded (``W[:, :-1]``); ``include_constant=True`` uses all columns.
    Returns dict with keys ``omega_orth_x1e2``, ``kappa_log``, ``h_spec``.
    """
    return _metrics(W if include_constant else W[:, :-1])


__all__ = [
    "PhysSkinNet",
    "NetConfig",
    "SimplicitsMLP",
    "NeuralSkinningField",
    "SkinningField",
    "RBFSkinningField",
    "load_checkpoint",
    "save_checkpoint",
    "default_checkpoint_path",
    "skinning_from_model",
    "fit_skinning",
    "skinning_metrics",
]
