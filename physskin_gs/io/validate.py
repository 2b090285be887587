"""Sanitising report for Gaussian scenes (formats.md section 7, items 7-11 and 17).

:func:`validate` counts bad or suspicious rows without changing anything; :func:`drop_invalid` removes the rows
that cannot be used (non-finite values). Extreme but legal values (tiny or huge Gaussians, logits of 17) are
reported, never altered.

Scales are judged relative to the scene: against its robust extent (:func:`robust_extent`, the largest side of the
opacity-weighted 1-99 % quantile box of the centres), never in absolute scene units. A valid capture scaled
uniformly (means times s, log-scales plus log s) therefore gets the same warnings at every s; only the raw counts
``log_scale_below_min`` / ``log_scale_above_max`` describe the stored numbers themselves.

Zero-norm quaternions follow one rule everywhere: a zero quaternion is the identity rotation (the .splat decoder,
the rotation maths of :func:`physskin_gs.scene.quat_to_rotmat`, rendering, animation and export all read it so).
Such rows are counted (``zero_norm_quats``) and warned about, but they are not invalid: every command renders,
converts and animates them, and ``drop_invalid`` keeps them.
"""

from __future__ import annotations

import math
from typing import Dict, List, Tuple

import numpy as np
import torch

from physskin_gs.errors import SceneFormatError
from physskin_gs.scene import GaussianScene

#: Raw log-scale bounds of the counts ``log_scale_below_min`` / ``log_scale_above_max`` (stored values, scene
#: units; counted, not warned about: whether a size is extreme depends on the scene's extent).
LOG_SCALE_LOW = -20.0
LOG_SCALE_HIGH = 5.0
#: Bounds of log(scale / extent) (natural log of an axis' std over :func:`robust_extent`) outside which a visible
#: Gaussian is reported as tiny (an axis below e^-20 ~ 2.1e-9 of the extent) or huge (above e^5 ~ 148 extents).
REL_LOG_SCALE_LOW = -20.0
REL_LOG_SCALE_HIGH = 5.0
#: The largest std of a typical Gaussian as a fraction of the extent: the reference the "already exponentiated"
#: test compares both readings of the scale fields with (real captures: medians of 0.5-23 %, most near 1 %).
TYPICAL_REL_SCALE = 0.01
#: Activated opacity below which a Gaussian cannot show in an 8-bit image; such rows' sizes are not judged
#: (the invisible placeholder rows of exported frames, log-scale -20 and logit -20, among them).
VISIBLE_OPACITY = 1.0 / 255.0
#: Opacity from which a centre counts towards the extent (as the scene analysis' opaque rows).
EXTENT_OPACITY = 0.05
#: Quantiles of the robust extent, and the most centres it looks at (a fixed-seed subsample beyond that).
EXTENT_QUANTILES = (0.01, 0.99)
EXTENT_MAX_POINTS = 200_000
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


def robust_extent(scene: GaussianScene) -> float:
    """The scene's robust extent: the largest side, in scene units, of the opacity-weighted 1-99 % quantile box of
    the centres of the rows with a finite mean and an opacity >= 0.05 (:data:`EXTENT_OPACITY`; at most
    :data:`EXTENT_MAX_POINTS` of them, a fixed-seed subsample, so equal scenes give equal extents).

    Falls back to every finite centre with equal weights when fewer than 2 rows are opaque, and to the min/max box
    when the quantile box is flat. Scales with the scene: ``means * s`` gives ``s`` times the extent. Returns 0.0
    when there is no extent to measure (fewer than 2 finite centres, or all at one point). Raises nothing.
    """
    from physskin_gs.geometry.scene_analysis import weighted_quantiles

    means = scene.means.detach().cpu()
    if means.ndim != 2 or means.shape[0] < 2:
        return 0.0
    fin = torch.isfinite(means).all(dim=1)
    op = scene.opacity_logits.detach().cpu()
    opaque = fin & torch.isfinite(op) & (torch.sigmoid(op.double()) >= EXTENT_OPACITY)
    weighted = int(opaque.sum()) >= 2
    idx = np.flatnonzero((opaque if weighted else fin).numpy())
    if idx.shape[0] < 2:
        return 0.0
    if idx.shape[0] > EXTENT_MAX_POINTS:
        idx = np.sort(np.random.default_rng(0).choice(idx, EXTENT_MAX_POINTS, replace=False))
    pts = means.numpy()[idx].astype(np.float64)
    w = torch.sigmoid(op.double()).numpy()[idx] if weighted else np.ones(idx.shape[0])
    q = weighted_quantiles(pts, w, EXTENT_QUANTILES)  # (2, 3)
    size = float((q[1] - q[0]).max())
    if not (size > 0.0 and math.isfinite(size)):
        size = float((pts.max(0) - pts.min(0)).max())
    return size if size > 0.0 and math.isfinite(size) else 0.0


def _ratio(log_ratio: float) -> str:
    """exp(log_ratio) for a message: ``'0.012'``, ``'3.5e+05'``; ``'e^1000'`` where exp would overflow."""
    return f"{math.exp(log_ratio):.2g}" if log_ratio < 700.0 else f"e^{log_ratio:.0f}"


def validate(scene: GaussianScene) -> Dict:
    """Counts of problematic Gaussians and warnings about values that look already activated.

    Returns a JSON-serialisable dict with the integer counts
    ``num_gaussians``, ``nan_inf_means``, ``nan_inf_scales``, ``nan_inf_quats``, ``zero_norm_quats``,
    ``nan_inf_opacities``, ``nan_inf_sh``, ``log_scale_below_min`` / ``log_scale_above_max`` (rows with a raw
    stored log-scale < -20 / > 5 on some axis: facts of the numbers, not warned about),
    ``log_rel_scale_below_min`` / ``log_rel_scale_above_max`` (visible rows, opacity >= 1/255, with some axis'
    log(scale / extent) < -20 / > 5: tiny or huge for this scene, warned about), ``num_invalid`` (rows
    :func:`drop_invalid` would remove); ``extent`` (float, scene units: :func:`robust_extent`, 0.0 when it cannot
    be measured, and then no scale is judged); the booleans ``opacities_look_activated`` (every opacity in
    [0, 1]) and ``scales_look_exponentiated`` (see below); and ``warnings``: a list of human-readable strings.

    The scales look already exponentiated (linear sizes stored in the log-scale fields) when every Gaussian,
    read as log-scales, is wider than the extent, or when every finite value is positive and the Gaussians' median
    largest axis is closer to a typical size (:data:`TYPICAL_REL_SCALE` of the extent, in log ratio) read as a
    linear size than read as a log-scale. Every judgement of a scale is relative to the extent, so a scene
    scaled uniformly (means times s, log-scales plus log s) gets the same warnings.

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
        "log_rel_scale_below_min": 0,
        "log_rel_scale_above_max": 0,
        "num_invalid": int(invalid.sum()),
        "extent": 0.0,
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
        warnings.append(f"{rep['num_invalid']} invalid Gaussians in total (render drops them, animate keeps them as "
                        "invisible static rows; `physskin-gs convert IN OUT --drop-invalid` writes a copy without "
                        "them)")
    extent = robust_extent(scene)
    rep["extent"] = extent
    log_extent = math.log(extent) if extent > 0.0 else 0.0
    if extent > 0.0:
        visible = fin_means & fin_ls & fin_op & (torch.sigmoid(op.double()) >= VISIBLE_OPACITY)
        rel = ls[visible].double() - log_extent  # (M, 3) log(std / extent)
        rep["log_rel_scale_below_min"] = int((rel < REL_LOG_SCALE_LOW).any(dim=1).sum())
        rep["log_rel_scale_above_max"] = int((rel > REL_LOG_SCALE_HIGH).any(dim=1).sum())
    if rep["log_rel_scale_below_min"]:
        warnings.append(f"{rep['log_rel_scale_below_min']} Gaussians with an axis below "
                        f"{math.exp(REL_LOG_SCALE_LOW):.1e} of the scene's extent "
                        f"(log(scale / extent) < {REL_LOG_SCALE_LOW:g}; kept)")
    if rep["log_rel_scale_above_max"]:
        warnings.append(f"{rep['log_rel_scale_above_max']} Gaussians with an axis above "
                        f"{math.exp(REL_LOG_SCALE_HIGH):.0f} times the scene's extent "
                        f"(log(scale / extent) > {REL_LOG_SCALE_HIGH:g}; kept)")

    fop = op[fin_op]
    if fop.numel() >= 2 and bool(((fop >= 0) & (fop <= 1)).all()):
        rep["opacities_look_activated"] = True
        warnings.append(
            "every opacity lies in [0, 1]: they look already activated (sigmoid), but are treated as logits"
        )
    fls = ls[fin_ls].double()
    if fls.numel() and extent > 0.0:
        lmax = fls.max(dim=1).values  # (M,) largest axis, read as a log-scale
        rel_a = lmax - log_extent  # log(std / extent) read as log-scales
        why = None
        if bool((rel_a > 0).all()):
            why = "every Gaussian, read as log-scales, is wider than the scene extent"
        elif bool((fls > 0).all()):
            ref = math.log(TYPICAL_REL_SCALE)
            med_a = float(rel_a.median())
            med_b = math.log(float(lmax.median())) - log_extent  # the same values read as linear sizes
            if abs(med_b - ref) < abs(med_a - ref):
                why = (f"every scale_* is positive and, read as linear sizes, the median Gaussian is "
                       f"{_ratio(med_b)} of the scene extent, against {_ratio(med_a)} read as log-scales")
        if why is not None:
            rep["scales_look_exponentiated"] = True
            warnings.append(f"{why}: the scales look already exponentiated, but are treated as log-scales")
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
