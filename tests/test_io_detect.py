"""Content-based format detection: every shared sample, meshes, renamed files and mis-sized inputs."""

from __future__ import annotations

import shutil
import struct

import pytest

from physskin_gs.errors import SceneFormatError
from physskin_gs.io import detect_format, load_scene

EXPECTED = {
    "guitar_playcanvas.compressed.ply": "compressed-ply",
    "lego_gsplat_sh3.ply": "inria-ply",
    "plant_capture.splat": "splat",
    "playcanvas_test_sh.compressed.ply": "compressed-ply",
    "rubber_toy_cloud_sh3_NC.ply": "inria-ply",
    "scene_tile_lod3_sh3.ply": "inria-ply",
    "scene_tile_lod4_sh3.ply": "inria-ply",
    "scene_tile_lod5_sh3.ply": "inria-ply",
    "spot_mesh2splat_10k.splat": "splat",
}


def test_every_shared_splat_detected(splats_dir):
    found = {p.name: detect_format(p) for p in sorted(splats_dir.iterdir()) if p.is_file()}
    for name, fmt in EXPECTED.items():
        assert found.get(name) == fmt, name


@pytest.mark.parametrize("name,fmt", [
    ("pyvista_ant.ply", "mesh-ply"), ("pymeshlab_bone.ply", "mesh-ply"), ("pyvista_airplane.ply", "mesh-ply"),
    ("c3d_spot.obj", "mesh"), ("robosuite_bread.stl", "mesh"),
])
def test_meshes_detected(mesh_file, name, fmt):
    assert detect_format(mesh_file(name)) == fmt
    with pytest.raises(SceneFormatError, match=name.replace(".", r"\.")):
        load_scene(mesh_file(name))


def test_extension_does_not_decide(splat_file, inria_sh3, tmp_path):
    """A compressed PLY named .ply, an INRIA PLY named .splat and a .splat named .ply load by content."""
    a = tmp_path / "plain_name.ply"
    shutil.copy(splat_file("playcanvas_test_sh.compressed.ply"), a)
    assert detect_format(a) == "compressed-ply" and load_scene(a).num_gaussians == 64
    b = tmp_path / "really_ply.splat"
    inria = inria_sh3("scene_tile_lod5_sh3.ply")
    shutil.copy(inria.path, b)
    assert detect_format(b) == "inria-ply" and load_scene(b).num_gaussians == inria.count
    c = tmp_path / "really_splat.ply"
    shutil.copy(splat_file("spot_mesh2splat_10k.splat"), c)
    assert detect_format(c) == "splat" and load_scene(c).num_gaussians == 10000


def test_binary_stl_and_glb_magic(tmp_path):
    stl = tmp_path / "tri.dat"
    tri = struct.pack("<12fH", 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0)
    stl.write_bytes(b"\0" * 80 + struct.pack("<I", 1) + tri)
    assert detect_format(stl) == "mesh"
    glb = tmp_path / "x.bin"
    glb.write_bytes(b"glTF" + b"\0" * 60)
    assert detect_format(glb) == "mesh"


def test_spz_detected_by_content(tmp_path):
    import gzip

    p = tmp_path / "scene.bin"
    p.write_bytes(gzip.compress(b"NGSP" + b"\0" * 28))
    assert detect_format(p) == "spz"
    with pytest.raises(SceneFormatError, match=r"\.spz files are not supported"):
        load_scene(p)
