"""`physskin-gs info` and `physskin-gs convert` through the dispatcher (in-process: no subprocess start-up cost)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from plyfile import PlyData, PlyElement

from physskin_gs.cli import main
from physskin_gs.io import load_scene

INFO_KEYS = {"format", "num_gaussians", "sh_degree", "bbox_min", "bbox_max", "warnings", "num_invalid",
             "nan_inf_means", "nan_inf_scales", "zero_norm_quats", "log_scale_below_min", "log_scale_above_max",
             "opacities_look_activated", "scales_look_exponentiated"}


def _info(capsys, path, *extra):
    code = main(["info", str(path), "--json", *extra])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("name,fmt,count,deg", [
    ("lego_gsplat_sh3.ply", "inria-ply", 12828, 3),
    ("plant_capture.splat", "splat", 113648, 0),
    ("spot_mesh2splat_10k.splat", "splat", 10000, 0),
    ("guitar_playcanvas.compressed.ply", "compressed-ply", 90854, 0),
    ("playcanvas_test_sh.compressed.ply", "compressed-ply", 64, 3),
    ("scene_tile_lod3_sh3.ply", "inria-ply", 1971, 3),
])
def test_info_json(capsys, splat_file, name, fmt, count, deg):
    path = splat_file(name)
    info = _info(capsys, path)
    assert INFO_KEYS <= set(info)
    assert (info["format"], info["num_gaussians"], info["sh_degree"]) == (fmt, count, deg)
    s = load_scene(path)
    np.testing.assert_allclose(info["bbox_min"], s.means.min(0).values.numpy())
    np.testing.assert_allclose(info["bbox_max"], s.means.max(0).values.numpy())


def test_info_reports_problems_and_warnings(capsys, inria_sh3, tmp_path):
    sample = inria_sh3("scene_tile_lod3_sh3.ply")  # real: 26 rows with a log-scale below -20
    v = PlyData.read(str(sample.path))["vertex"].data.copy()
    v["x"][0] = np.nan
    cam = PlyElement.describe(np.zeros(1, dtype=[("k", "<f4")]), "camera")
    p = tmp_path / "t.ply"
    PlyData([PlyElement.describe(v, "vertex"), cam]).write(str(p))
    info = _info(capsys, p)
    assert info["nan_inf_means"] == 1 and info["num_invalid"] == 1
    assert info["log_scale_below_min"] == sample.log_scale_below_min > 0
    assert any("camera" in w for w in info["warnings"])
    assert all(np.isfinite(info["bbox_min"]))


def test_info_text(capsys, inria_sh3):
    sample = inria_sh3("lego_gsplat_sh3.ply")
    assert main(["info", str(sample.path)]) == 0
    out = capsys.readouterr().out
    assert f"gaussians:     {sample.count}\n" in out and "sh degree:     3" in out


def test_info_on_mesh(capsys, mesh_file):
    info = _info(capsys, mesh_file("pyvista_ant.ply"))
    assert info["format"] == "mesh-ply" and info["num_gaussians"] == 0 and info["num_faces"] == 912


def _error(capsys, argv):
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2
    assert err.startswith("error: ") and "Traceback" not in err
    return err


def test_bad_files_exit_2(capsys, inria_sh3, tmp_path):
    src = inria_sh3("scene_tile_lod5_sh3.ply").path
    empty = tmp_path / "empty.ply"
    empty.write_bytes(b"")
    assert "empty file" in _error(capsys, ["info", str(empty)])
    assert _error(capsys, ["info", str(tmp_path / "missing.ply")]) == f"error: {tmp_path / 'missing.ply'}: input file not found\n"
    cut = tmp_path / "cut.ply"
    cut.write_bytes(src.read_bytes()[:-7])
    assert "truncated" in _error(capsys, ["info", str(cut)])
    spz = tmp_path / "x.spz"
    spz.write_bytes(b"\x01" * 64)
    assert "not supported" in _error(capsys, ["info", str(spz)])
    v = PlyData.read(str(src))["vertex"].data
    arr = np.empty(len(v), dtype=[(n, "<f4") for n in v.dtype.names if n != "f_rest_44"])
    for n in arr.dtype.names:
        arr[n] = v[n]
    bad = tmp_path / "rest44.ply"
    PlyData([PlyElement.describe(arr, "vertex")]).write(str(bad))
    assert "bad f_rest count 44" in _error(capsys, ["info", str(bad)])


def test_convert_any_to_inria(capsys, splat_file, tmp_path):
    out = tmp_path / "plant.ply"
    src = splat_file("plant_capture.splat")
    assert main(["convert", str(src), str(out)]) == 0
    capsys.readouterr()
    a, b = load_scene(src), load_scene(out)
    assert b.format == "inria-ply" and b.num_gaussians == 113648
    for f in ("means", "quats", "log_scales", "opacity_logits", "sh_dc"):
        assert torch.equal(getattr(a, f), getattr(b, f))


def test_convert_drop_invalid_and_refusals(capsys, inria_sh3, mesh_file, tmp_path):
    sample = inria_sh3("scene_tile_lod5_sh3.ply")
    v = PlyData.read(str(sample.path))["vertex"].data.copy()
    v["scale_0"][[1, 2]] = -np.inf
    src = tmp_path / "in.ply"
    PlyData([PlyElement.describe(v, "vertex")]).write(str(src))
    out = tmp_path / "out.ply"
    assert main(["convert", str(src), str(out), "--drop-invalid"]) == 0
    assert "dropped 2 invalid Gaussians" in capsys.readouterr().err
    assert load_scene(out).num_gaussians == sample.count - 2
    before = src.read_bytes()
    assert "refusing to overwrite the input" in _error(capsys, ["convert", str(src), str(src)])
    assert src.read_bytes() == before
    splat = tmp_path / "copy.splat"  # an input format that is no output format: the same refusal, first
    splat.write_bytes(b"\0" * 64)
    assert "refusing to overwrite the input" in _error(capsys, ["convert", str(splat), str(splat)])
    assert splat.read_bytes() == b"\0" * 64
    assert ".ply" in _error(capsys, ["convert", str(src), str(tmp_path / "out.splat")])
    # a mesh PLY is no 3DGS PLY: it is converted as the Gaussians animate samples on its surface, and says so
    assert main(["convert", str(mesh_file("pyvista_ant.ply")), str(tmp_path / "ant.ply"), "--mesh-gaussians", "500"]) == 0
    assert "is a mesh: 500 Gaussians sampled on its surface" in capsys.readouterr().err
    assert load_scene(tmp_path / "ant.ply").num_gaussians == 500


def test_convert_names_extra_properties_a_format_cannot_keep(capsys, tmp_path):
    """A PLY with an extra per-Gaussian property (a segmentation label): a .ply output keeps it without a word; a
    compressed PLY, which has no place for it, drops it and says so."""
    from dataclasses import replace
    from pathlib import Path

    from physskin_gs.io import save_scene

    spot = load_scene(Path(__file__).resolve().parents[1] / "data" / "spot_mesh2splat_10k.splat")
    src = tmp_path / "labelled.ply"
    save_scene(replace(spot, extra={"semantic": torch.arange(spot.num_gaussians, dtype=torch.float32) % 7}), src)
    capsys.readouterr()
    assert main(["convert", str(src), str(tmp_path / "same.ply")]) == 0
    assert "not written" not in capsys.readouterr().err
    assert torch.equal(load_scene(tmp_path / "same.ply").extra["semantic"], load_scene(src).extra["semantic"])
    assert main(["convert", str(src), str(tmp_path / "c.compressed.ply")]) == 0
    assert "1 extra per-Gaussian property (semantic) not written" in capsys.readouterr().err


def test_option_names_are_whole_and_unknown_ones_get_the_subcommands_usage(capsys):
    """`animate --frame 10` was taken as `--frames 10` (argparse abbreviations; `--frame` is another option of
    render and convert), and a mistyped option was said with the top-level usage line: now both are refused with
    the subcommand's own usage."""
    from pathlib import Path

    splat = str(Path(__file__).resolve().parents[1] / "data" / "spot_mesh2splat_10k.splat")
    for words, unknown in ((["animate", splat, "--headless", "--frame", "3"], "--frame 3"),
                           (["animate", splat, "--materal", "rubber"], "--materal rubber"),
                           (["info", splat, "--jso"], "--jso")):
        with pytest.raises(SystemExit) as e:
            main(words)
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert f"physskin-gs {words[0]}: error: unrecognized arguments: {unknown}" in err, err
        assert err.startswith(f"usage: physskin-gs {words[0]} "), err


def test_output_piped_into_a_reader_that_stops_early_ends_without_a_traceback():
    """`physskin-gs info X | head -2`: the closed pipe raised BrokenPipeError with a traceback."""
    import subprocess
    import sys
    from pathlib import Path

    splat = str(Path(__file__).resolve().parents[1] / "data" / "spot_mesh2splat_10k.splat")
    code = ("import sys, os; from physskin_gs.cli import main; r, w = os.pipe(); os.close(r); os.dup2(w, 1); "
            f"sys.exit(main(['info', {splat!r}]))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr


def test_info_on_a_mesh_names_its_welded_and_its_file_vertex_counts(capsys, tmp_path):
    """A cube written with a vertex per face corner (24 in the file, as UV seams and flat normals split them):
    ``info`` gave 8 without a word and a user compared it with the file's 24. Both counts are given now."""
    import trimesh

    box = trimesh.creation.box(extents=(1.0, 1.0, 1.0))
    split = trimesh.Trimesh(box.vertices[box.faces].reshape(-1, 3), np.arange(36).reshape(12, 3), process=False)
    path = tmp_path / "cube.obj"
    split.export(str(path))
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "vertices:      8 (welded" in out and "the file lists 36" in out
    info = _info(capsys, path)
    assert info["num_vertices"] == 8 and info["num_vertices_in_file"] == 36
