"""Sanitising report for Gaussian scenes (formats.md section 7, items 7-11 and 17).

:func:`validate` counts bad or suspicious rows without changing anything; :func:`drop_invalid` removes the rows
that cannot be used (non-finite values). Extreme but legal values (log-scales below -20, logits of 17) are
reported, never altered.

Zero-norm quaternions follow one rule everywhere: a zero quaternion is the identity rotation (the .splat decoder,
the rotation maths of :func:`physskin_gs.scene.quat_to_rotmat`, rendering, animation and export all read it so).
Such rows are counted (``zero_norm_quats``) and warned about, but they are not invalid: every command renders,
converts and animates them, and ``drop_invalid`` keeps them.
"""

from __future__ import annotations

from typing import Dict, List, Tuple

import torch

from physskin_gs.errors import SceneFormatError
from physskin_gs.scene import GaussianScene

#: Log-scale bounds outside which a value is reported as extreme (still kept).
LOG_SCALE_LOW = -20.0
LOG_SCALE_HIGH = 5.0
#: Quaternions with a norm at or below this count as zero.
QUAT_EPS = 1e-8


def invalid_mask(scene: GaussianScene) -> torch.Tensor:
    """(N,) bool: rows with a non-finite mean, log-scale, quaternion, opacity or SH value (formats.md 7). A
    zero-norm quaternion is the identity rotation, not invalid (module docstring). Raises nothing."""
    bad = ~torch.isfinite(scene.means).all(dim=1)
    bad |= ~torch.isfinite(scene.log_scales).all(dim=1)
    bad |= ~torch.isfinite(scene.quats).all(dim=1)
    bad |= ~torch.isfinite(scene.opacity_logits)
    bad |= ~torch.isfinite(scene.sh_dc).all(dim=1)
    if scene.sh_rest.shape[1]:
        bad |= ~torch.isfinite(scene.sh_rest).flatten(1).all(dim=1)
    return bad


def validate(scene: GaussianScene) -> Dict:
    """Counts of problematic Gaussians and warnings about values that look already activated.

    Returns a JSON-serialisable dict with the integer counts
    ``num_gaussians``, ``nan_inf_means``, ``nan_inf_scales``, ``nan_inf_quats``, ``zero_norm_quats``,
    ``nan_inf_opacities``, ``nan_inf_sh``, ``log_scale_below_min`` (< -20), ``log_scale_above_max`` (> 5),
    ``num_invalid`` (rows :func:`drop_invalid` would remove), the booleans ``opacities_look_activated``
    (every opacity in [0, 1]) and ``scales_look_exponentiated`` (every log-scale > 0, or exp(log-scale)
    larger than the scene extent), and ``warnings``: a list of human-readable strings.
    ``num_invalid`` counts the same rows as :func:`invalid_mask`. The scene is not modified; raises nothing.
    """
    n = scene.num_gaussians
    means, ls, q, op = scene.means, scene.log_scales, scene.quats, scene.opacity_logits
    fin_means = torch.isfinite(means).all(dim=1)
    fin_ls = torch.isfinite(ls).all(dim=1)
    fin_q = torch.isfinite(q).all(dim=1)
    qn = q.norm(dim=1)
    fin_sh = torch.isfinite(scene.sh_dc).all(dim=1)
    if scene.sh_rest.shape[1]:
        fin_sh &= torch.isfinite(scene.sh_rest).flatten(1).all(dim=1)
    fin_op = torch.isfinite(op)
    finite_ls = torch.where(torch.isfinite(ls), ls, torch.zeros_like(ls))
    # same rows as invalid_mask(scene), from the masks already computed here
    invalid = ~(fin_means & fin_ls & fin_q & fin_op & fin_sh)
    rep: Dict = {
        "num_gaussians": n,
        "nan_inf_means": int((~fin_means).sum()),
        "nan_inf_scales": int((~fin_ls).sum()),
        "nan_inf_quats": int((~fin_q).sum()),
        "zero_norm_quats": int((fin_q & ~(qn > QUAT_EPS)).sum()),
        "nan_inf_opacities": int((~fin_op).sum()),
        "nan_inf_sh": int((~fin_sh).sum()),
        "log_scale_below_min": int(((finite_ls < LOG_SCALE_LOW) & torch.isfinite(ls)).any(dim=1).sum()),
        "log_scale_above_max": int(((finite_ls > LOG_SCALE_HIGH) & torch.isfinite(ls)).any(dim=1).sum()),
        "num_invalid": int(invalid.sum()),
        "opacities_look_activated": False,
        "scales_look_exponentiated": False,
    }
    warnings: List[str] = []
    if n == 0:
        warnings.append("scene has no Gaussians")
        rep["warnings"] = warnings
        return rep
    for key, what in (
        ("nan_inf_means", "NaN/Inf positions"),
        ("nan_inf_scales", "NaN/Inf log-scales"),
        ("nan_inf_quats", "NaN/Inf quaternions"),
        ("nan_inf_opacities", "NaN/Inf opacities"),
        ("nan_inf_sh", "NaN/Inf SH coefficients"),
    ):
        if rep[key]:
            warnings.append(f"{rep[key]} Gaussians with {what}")
    if rep["zero_norm_quats"]:
        warnings.append(f"{rep['zero_norm_quats']} Gaussians with zero-norm quaternions (read as the identity "
                        "rotation; kept)")
    if rep["num_invalid"]:
        warnings.append(f"{rep['num_invalid']} invalid Gaussians in total (use --drop-invalid / drop_invalid to remove them)")
    if rep["log_scale_below_min"]:
        warnings.append(f"{rep['log_scale_below_min']} Gaussians with a log-scale below {LOG_SCALE_LOW:g} (kept)")
    if rep["log_scale_above_max"]:
        warnings.append(f"{rep['log_scale_above_max']} Gaussians with a log-scale above {LOG_SCALE_HIGH:g} (kept)")

    fop = op[fin_op]
    if fop.numel() >= 2 and bool(((fop >= 0) & (fop <= 1)).all()):
        rep["opacities_look_activated"] = True
        warnings.append(
            "every opacity lies in [0, 1]: they look already activated (sigmoid), but are treated as logits"
        )
    fls = ls[fin_ls]
    if fls.numel():
        fm = means[fin_means]
        extent = float((fm.max(0).values - fm.min(0).values).max()) if fm.shape[0] else 0.0
        all_pos = bool((fls > 0).all())
        too_big = extent > 0 and bool((torch.exp(fls.max(dim=1).values) > extent).all())
        if all_pos or too_big:
            rep["scales_look_exponentiated"] = True
            warnings.append(
                "every scale_* is positive or exp(scale) exceeds the scene extent: the scales look already "
                "exponentiated, but are treated as log-scales"
            )
    rep["warnings"] = warnings
    return rep


def drop_invalid(scene: GaussianScene) -> Tuple[GaussianScene, int]:
    """Remove Gaussians with non-finite values (see :func:`invalid_mask`; zero-norm quaternions are kept as the
    identity rotation).

    Returns:
        (scene without those rows, number removed). The input scene is not modified.

    Raises:
        SceneFormatError: no Gaussian would be left (formats.md 7, item 17).
    """
    bad = invalid_mask(scene)
    count = int(bad.sum())
    if count == 0:
        return scene, 0
    if count == scene.num_gaussians:
        raise SceneFormatError(
            f"{scene.source or 'scene'}: no Gaussians left after dropping {count} invalid ones (all rows are invalid)"
        )
    return scene.subset(~bad), count


def finite_bbox(scene: GaussianScene) -> Tuple[List[float], List[float]]:
    """(min, max) corners of the rows whose mean is finite, as lists of 3 floats in scene units
    (``[None] * 3`` each if there are none). Raises nothing."""
    m = scene.means[torch.isfinite(scene.means).all(dim=1)]
    if m.shape[0] == 0:
        return [None] * 3, [None] * 3
    return m.min(0).values.tolist(), m.max(0).values.tolist()
