"""Sanitising report and drop_invalid (formats.md section 7, items 7-11, 14 and 17) on injections into a real file
(the shared LoD tile; without the shared data, the licence-clean SH-3 stand-in of ``conftest.inria_sh3``)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from plyfile import PlyData, PlyElement

from physskin_gs.errors import SceneFormatError
from physskin_gs.io import drop_invalid, finite_bbox, invalid_mask, load_scene, save_scene, validate
from physskin_gs.scene import GaussianScene


def _vertex(path):
    return PlyData.read(str(path))["vertex"].data.copy()


def _write(arr, path):
    PlyData([PlyElement.describe(arr, "vertex")]).write(str(path))
    return path


@pytest.fixture()
def tile(inria_sh3):
    return inria_sh3("scene_tile_lod5_sh3.ply")


@pytest.fixture()
def tile_vertex(tile):
    return _vertex(tile.path)


def test_clean_real_files_report_nothing_invalid(splats_dir):
    for name, below in (("lego_gsplat_sh3.ply", 0), ("scene_tile_lod3_sh3.ply", 26), ("scene_tile_lod4_sh3.ply", 1)):
        s = load_scene(splats_dir / name)
        rep = validate(s)
        assert rep["num_invalid"] == 0 and rep["nan_inf_means"] == 0 and rep["zero_norm_quats"] == 0
        assert rep["log_scale_below_min"] == below  # extreme but legal: reported, kept
        assert not rep["opacities_look_activated"] and not rep["scales_look_exponentiated"]
        # independent count of rows with a log-scale below -20
        assert int((s.log_scales < -20).any(dim=1).sum()) == below
        assert drop_invalid(s) == (s, 0)


def test_injected_nan_inf_zero_quat(tile, tile_vertex, tmp_path):
    v = tile_vertex
    v["x"][3] = np.nan
    v["y"][5] = np.inf
    v["scale_1"][7] = -np.inf  # exp -> zero scale
    v["scale_0"][9] = np.nan
    v["rot_0"][11] = v["rot_1"][11] = v["rot_2"][11] = v["rot_3"][11] = 0.0
    v["opacity"][13] = np.nan
    v["f_rest_20"][15] = np.inf
    v["x"][17] = np.nan
    v["scale_2"][17] = np.nan  # two problems, one row
    s = load_scene(_write(v, tmp_path / "bad.ply"))
    rep = validate(s)
    assert rep["nan_inf_means"] == 3
    assert rep["nan_inf_scales"] == 3
    assert rep["zero_norm_quats"] == 1
    assert rep["nan_inf_opacities"] == 1
    assert rep["nan_inf_sh"] == 1
    assert rep["nan_inf_quats"] == 0  # the zeroed quaternion is finite: counted as zero-norm only
    bad_rows = [3, 5, 7, 9, 13, 15, 17]  # row 11 (zero quaternion) is the identity rotation: counted, kept
    assert rep["num_invalid"] == len(bad_rows)
    assert torch.nonzero(invalid_mask(s))[:, 0].tolist() == bad_rows
    assert any("NaN/Inf positions" in w for w in rep["warnings"])
    # bounds ignore the bad rows
    lo, hi = finite_bbox(s)
    assert all(math.isfinite(x) for x in lo + hi)
    clean, n = drop_invalid(s)
    assert n == len(bad_rows) and clean.num_gaussians == tile.count - n
    keep = [i for i in range(tile.count) if i not in bad_rows]
    assert torch.equal(clean.means, s.means[keep]) and torch.equal(clean.sh_rest, s.sh_rest[keep])
    assert validate(clean)["num_invalid"] == 0
    # no NaN spreads through batch computations on the clean scene
    assert torch.isfinite(clean.covariances()).all()
    # raw extremes kept for export: save -> load of the cleaned scene is exact
    again = load_scene(save_scene(clean, tmp_path / "clean.ply"))
    assert torch.equal(again.log_scales, clean.log_scales)


def test_no_gaussians_left_is_an_error(tile_vertex, tmp_path):
    v = tile_vertex
    v["x"][:] = np.nan
    s = load_scene(_write(v, tmp_path / "allbad.ply"))
    with pytest.raises(SceneFormatError, match=r"allbad\.ply: no Gaussians left"):
        drop_invalid(s)


def test_already_activated_values_warned(tile_vertex, tmp_path):
    v = tile_vertex
    v["opacity"] = 1 / (1 + np.exp(-v["opacity"]))  # sigmoid applied by a faulty exporter
    for k in range(3):
        v[f"scale_{k}"] = np.exp(v[f"scale_{k}"])
    s = load_scene(_write(v, tmp_path / "activated.ply"))
    rep = validate(s)
    assert rep["opacities_look_activated"] and rep["scales_look_exponentiated"]
    assert any("already activated" in w for w in rep["warnings"])
    assert any("already exponentiated" in w for w in rep["warnings"])
    # never re-activated silently: the raw values are what the file holds
    np.testing.assert_array_equal(s.opacity_logits.numpy(), v["opacity"].astype(np.float32))
    assert rep["num_invalid"] == 0


def test_unnormalised_quats_give_same_covariances(inria_sh3):
    s = load_scene(inria_sh3("lego_gsplat_sh3.ply").path)  # raw quaternion norms 0.29-2.11 (stand-in 0.3-2.1)
    qn = s.quats.norm(dim=1)
    assert float(qn.min()) < 0.5 and float(qn.max()) > 2.0
    scaled = GaussianScene(**{**s.__dict__, "quats": s.quats * 3})
    cov = s.covariances()
    atol = 1e-6 * float(cov.abs().max())  # float32 cancellation in off-diagonal terms
    torch.testing.assert_close(scaled.covariances(), cov, rtol=1e-4, atol=atol)


def test_splat_files_validate_clean(splat_file):
    for name in ("plant_capture.splat", "spot_mesh2splat_10k.splat"):
        rep = validate(load_scene(splat_file(name)))
        assert rep["num_invalid"] == 0 and not rep["scales_look_exponentiated"], name
