"""INRIA 3DGS PLY reading and writing (formats.md sections 1, 4 and 7) on the real files in ../shared/data/splats
and on variants derived from them at test time with plyfile. Without the shared data, the variant tests run on the
licence-clean SH-3 stand-in of ``conftest.inria_sh3`` (zero normals, raw quaternions); the tests of facts of the
real files skip."""

from __future__ import annotations

import os

import warnings

import numpy as np
import pytest
import torch
from plyfile import PlyData, PlyElement

from physskin_gs.errors import OptionError, PhysSkinError, SceneFormatError
from physskin_gs.io import SceneWarning, detect_format, load_scene, save_scene
from physskin_gs.io.inria_ply import sh_degree_from_rest_count
from physskin_gs.scene import GaussianScene

INRIA_FILES = {
    "lego_gsplat_sh3.ply": 12828,
    "rubber_toy_cloud_sh3_NC.ply": 14364,
    "scene_tile_lod3_sh3.ply": 1971,
    "scene_tile_lod4_sh3.ply": 489,
    "scene_tile_lod5_sh3.ply": 111,
}
FIELDS = ("means", "quats", "log_scales", "opacity_logits", "sh_dc", "sh_rest")


def _bits(t: torch.Tensor) -> np.ndarray:
    return t.numpy().view(np.uint32)


def assert_bit_identical(a: GaussianScene, b: GaussianScene) -> None:
    for f in FIELDS:
        x, y = getattr(a, f), getattr(b, f)
        assert x.dtype == y.dtype == torch.float32, f
        assert x.shape == y.shape, f
        np.testing.assert_array_equal(_bits(x), _bits(y), err_msg=f)
    assert list(a.extra) == list(b.extra)
    for k in a.extra:
        np.testing.assert_array_equal(_bits(a.extra[k]), _bits(b.extra[k]), err_msg=k)


def _vertex(path) -> np.ndarray:
    return PlyData.read(str(path))["vertex"].data


def _write(arr: np.ndarray, path, *, text=False, byte_order="<", extra_elements=()) -> str:
    els = [PlyElement.describe(arr, "vertex")] + list(extra_elements)
    PlyData(els, text=text, byte_order=byte_order).write(str(path))
    return str(path)


def _drop_fields(arr: np.ndarray, drop) -> np.ndarray:
    keep = [n for n in arr.dtype.names if n not in set(drop)]
    out = np.empty(len(arr), dtype=[(n, arr.dtype[n]) for n in keep])
    for n in keep:
        out[n] = arr[n]
    return out


def _raw_columns(arr: np.ndarray, names) -> np.ndarray:
    return np.stack([np.asarray(arr[n], dtype=np.float32) for n in names], axis=1)


# ---------------------------------------------------------------- real files


@pytest.mark.parametrize("name,count", sorted(INRIA_FILES.items()))
def test_real_inria_files_load(splats_dir, name, count):
    s = load_scene(splats_dir / name)
    assert s.format == "inria-ply" and detect_format(splats_dir / name) == "inria-ply"
    assert s.num_gaussians == count
    assert s.sh_degree == 3 and tuple(s.sh_rest.shape) == (count, 15, 3)
    assert s.extra == {}  # nx, ny, nz are not kept
    assert s.source == os.path.abspath(splats_dir / name)
    # values are the raw stored ones, by name, with channel-major f_rest
    v = _vertex(splats_dir / name)
    np.testing.assert_array_equal(s.means.numpy(), _raw_columns(v, ["x", "y", "z"]))
    np.testing.assert_array_equal(s.quats.numpy(), _raw_columns(v, ["rot_0", "rot_1", "rot_2", "rot_3"]))
    np.testing.assert_array_equal(s.opacity_logits.numpy(), np.asarray(v["opacity"]))
    # channel c, coefficient k lives in f_rest_{c*15+k}
    for c in range(3):
        for k in (0, 7, 14):
            np.testing.assert_array_equal(s.sh_rest[:, k, c].numpy(), np.asarray(v[f"f_rest_{c * 15 + k}"]))


def test_lego_ranges_match_sources_md(splats_dir):
    s = load_scene(splats_dir / "lego_gsplat_sh3.ply")
    qn = s.quats.norm(dim=1)
    assert 0.29 < float(qn.min()) < 0.30 and 2.11 < float(qn.max()) < 2.12  # raw, not normalised
    assert -9.7 < float(s.log_scales.min()) < -9.6


@pytest.mark.parametrize("name", sorted(INRIA_FILES))
def test_roundtrip_bit_identical(splats_dir, tmp_path, name):
    a = load_scene(splats_dir / name)
    out = save_scene(a, tmp_path / "out.ply")
    b = load_scene(out)
    assert_bit_identical(a, b)
    # our writer emits the fixed 62-float INRIA record with zero normals
    v = _vertex(out)
    assert len(v.dtype.names) == 62 and v.dtype.names[:6] == ("x", "y", "z", "nx", "ny", "nz")
    assert not np.any(_raw_columns(v, ["nx", "ny", "nz"]))
    assert os.path.getsize(out) == os.path.getsize(splats_dir / name)  # same layout as INRIA's own files
    assert [p for p in os.listdir(tmp_path) if p != "out.ply"] == []  # no temp file left behind


def test_roundtrip_is_byte_identical_for_inria_layout(splats_dir, tmp_path):
    """The samples are written by INRIA-layout writers with zero normals, so bytes match exactly."""
    src = splats_dir / "scene_tile_lod5_sh3.ply"
    out = save_scene(load_scene(src), tmp_path / "o.ply")
    assert open(out, "rb").read() == open(src, "rb").read()


# ------------------------------------------------------- layout variants


@pytest.fixture(scope="module")
def lego_sample(inria_sh3):
    """The real lego when the shared data is present, else the SH-3 stand-in (an SH-3 file with raw quats)."""
    return inria_sh3("lego_gsplat_sh3.ply")


@pytest.fixture(scope="module")
def lego_vertex(lego_sample):
    return _vertex(lego_sample.path)


@pytest.fixture(scope="module")
def lego(lego_sample):
    return load_scene(lego_sample.path)


@pytest.fixture(scope="module")
def tile(inria_sh3):
    """Path of the real 111-Gaussian LoD tile when the shared data is present, else of the SH-3 stand-in."""
    return inria_sh3("scene_tile_lod5_sh3.ply").path


@pytest.mark.parametrize("degree", [0, 1, 2])
def test_lower_sh_degree_cut_per_channel(lego_sample, lego_vertex, lego, tmp_path, degree):
    """Keeping the first (d+1)^2-1 coefficients of *each channel* gives a degree-d file."""
    k = (degree + 1) ** 2 - 1
    keep = {f"f_rest_{c * 15 + j}" for c in range(3) for j in range(k)}
    drop = [n for n in lego_vertex.dtype.names if n.startswith("f_rest_") and n not in keep]
    arr = _drop_fields(lego_vertex, drop)
    # renumber the kept ones to f_rest_0..3k-1, channel-major
    names = list(arr.dtype.names)
    for c in range(3):
        for j in range(k):
            names[names.index(f"f_rest_{c * 15 + j}")] = f"tmp_{c * k + j}"
    names = [n.replace("tmp_", "f_rest_") for n in names]
    arr.dtype.names = tuple(names)
    s = load_scene(_write(arr, tmp_path / f"sh{degree}.ply"))
    assert s.sh_degree == degree and tuple(s.sh_rest.shape) == (lego_sample.count, k, 3)
    assert torch.equal(s.sh_rest, lego.sh_rest[:, :k])
    assert torch.equal(s.sh_rest, lego.with_sh_degree(degree).sh_rest)
    assert torch.equal(s.means, lego.means)


def test_fields_read_by_name_in_any_order(lego_vertex, lego, tmp_path):
    """Shuffled property order, f_rest in lexicographic order (f_rest_10 before f_rest_2), no normals."""
    names = [n for n in lego_vertex.dtype.names if n not in ("nx", "ny", "nz")]
    rng = np.random.default_rng(0)
    names = list(rng.permutation(names))
    rest = sorted([n for n in names if n.startswith("f_rest_")])  # lexicographic
    names = [n for n in names if not n.startswith("f_rest_")] + rest
    arr = np.empty(len(lego_vertex), dtype=[(n, "<f4") for n in names])
    for n in names:
        arr[n] = lego_vertex[n]
    s = load_scene(_write(arr, tmp_path / "shuffled.ply"))
    assert_bit_identical(s, lego)


def test_big_endian_and_ascii_give_identical_arrays(tile, tmp_path):
    src = tile
    ref = load_scene(src)
    v = _vertex(src)
    be = load_scene(_write(v.astype(v.dtype.newbyteorder(">")), tmp_path / "be.ply", byte_order=">"))
    assert "binary_big_endian" in open(tmp_path / "be.ply", "rb").read(60).decode("ascii", "replace")
    asc = load_scene(_write(v, tmp_path / "ascii.ply", text=True))
    assert "format ascii" in open(tmp_path / "ascii.ply", "rb").read(60).decode()
    assert_bit_identical(ref, be)
    for f in FIELDS:  # plyfile writes ascii floats with repr-style precision: exact for float32
        assert getattr(asc, f).dtype == torch.float32
        assert torch.equal(getattr(asc, f), getattr(ref, f)), f


def test_double_properties_and_type_aliases(tile, tmp_path):
    src = tile
    ref = load_scene(src)
    v = _vertex(src)
    arr = v.astype([(n, "<f8") for n in v.dtype.names])
    path = _write(arr, tmp_path / "double.ply")
    s = load_scene(path)
    assert s.means.dtype == torch.float32
    assert_bit_identical(ref, s)  # float32 -> double -> float32 is exact
    # the sized alias 'float32' instead of 'float'
    hdr, body = open(src, "rb").read().split(b"end_header\n", 1)
    alias = tmp_path / "alias.ply"
    alias.write_bytes(hdr.replace(b"property float ", b"property float32 ") + b"end_header\n" + body)
    assert_bit_identical(ref, load_scene(alias))


def test_extra_vertex_properties_kept_and_written_back(lego_vertex, lego, tmp_path):
    n = len(lego_vertex)
    names = list(lego_vertex.dtype.names)
    arr = np.empty(n, dtype=[(nm, "<f4") for nm in names[:6]] + [("filter_3D", "<f4")]
                   + [(nm, "<f4") for nm in names[6:]] + [("semantic", "u1")])
    for nm in names:
        arr[nm] = lego_vertex[nm]
    arr["filter_3D"] = np.linspace(0, 1, n, dtype=np.float32)
    arr["semantic"] = np.arange(n) % 7
    s = load_scene(_write(arr, tmp_path / "extra.ply"))
    assert list(s.extra) == ["filter_3D", "semantic"]
    assert torch.equal(s.extra["filter_3D"], torch.from_numpy(np.linspace(0, 1, n, dtype=np.float32)))
    assert torch.equal(s.extra["semantic"], torch.from_numpy((np.arange(n) % 7).astype(np.float32)))
    for f in FIELDS:
        assert torch.equal(getattr(s, f), getattr(lego, f))
    out = save_scene(s, tmp_path / "extra_out.ply")
    names_out = _vertex(out).dtype.names
    assert names_out[-2:] == ("filter_3D", "semantic") and names_out[-3] == "rot_3"
    assert_bit_identical(s, load_scene(out))


def test_extra_element_ignored_with_warning(tile, tmp_path):
    src = tile
    v = _vertex(src)
    cam = np.zeros(1, dtype=[(f"m{i}", "<f4") for i in range(16)])
    cam_el = PlyElement.describe(cam, "extrinsic")
    path = _write(v, tmp_path / "extra_el.ply", extra_elements=[cam_el])
    with pytest.warns(SceneWarning, match="extrinsic"):
        s = load_scene(path)
    assert_bit_identical(load_scene(src), s)


def test_rot0_is_read_as_w_and_quat_order_option(tile, tmp_path):
    src = tile
    v = _vertex(src).copy()
    v["rot_0"], v["rot_1"], v["rot_2"], v["rot_3"] = 2.0, 0.0, 0.0, 0.0  # w = 2: identity rotation
    s = load_scene(_write(v, tmp_path / "w.ply"))
    assert torch.equal(s.quats[0], torch.tensor([2.0, 0, 0, 0]))
    assert torch.allclose(s.rotations(), torch.eye(3).expand(len(v), 3, 3))
    # an xyzw writer stores (x, y, z, w): same file content read with quat_order="xyzw" gives w last -> first
    ref = load_scene(src)
    v2 = _vertex(src).copy()
    q = _raw_columns(v2, ["rot_0", "rot_1", "rot_2", "rot_3"])
    for i, j in enumerate([1, 2, 3, 0]):  # write x y z w
        v2[f"rot_{i}"] = q[:, j]
    path = _write(v2, tmp_path / "xyzw.ply")
    wrong = load_scene(path)
    assert not torch.allclose(wrong.covariances(), ref.covariances(), atol=1e-6)
    fixed = load_scene(path, quat_order="xyzw")
    assert torch.equal(fixed.quats, ref.quats)
    assert torch.allclose(fixed.covariances(), ref.covariances())
    with pytest.raises(OptionError):
        load_scene(path, quat_order="zyxw")


def test_sh_degree_from_count():
    assert [sh_degree_from_rest_count(n) for n in (0, 9, 24, 45, 72)] == [0, 1, 2, 3, 4]
    assert all(sh_degree_from_rest_count(n) is None for n in (3, 8, 15, 27, 44, 46))


# ------------------------------------------------------------- bad input


def test_mesh_ply_names_missing_fields(mesh_file):
    ant = mesh_file("pyvista_ant.ply")
    with pytest.raises(SceneFormatError) as e:
        load_scene(ant)
    msg = str(e.value)
    assert "pyvista_ant.ply" in msg and "not a 3DGS PLY" in msg
    assert "missing f_dc_0..2, opacity, scale_0..2, rot_0..3" in msg
    assert detect_format(ant) == "mesh-ply"


def test_point_cloud_ply_names_missing_fields(tmp_path):
    pts = np.zeros(5, dtype=[("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("nx", "<f4"), ("ny", "<f4"), ("nz", "<f4"),
                             ("red", "u1"), ("green", "u1"), ("blue", "u1")])
    with pytest.raises(SceneFormatError, match=r"point cloud.*missing f_dc_0..2, opacity, scale_0..2, rot_0..3"):
        load_scene(_write(pts, tmp_path / "points3D.ply"))


def test_partially_missing_fields_listed(lego_vertex, tmp_path):
    arr = _drop_fields(lego_vertex, ["rot_3", "opacity"])
    with pytest.raises(SceneFormatError, match=r"missing opacity, rot_3"):
        load_scene(_write(arr, tmp_path / "partial.ply"))


def test_2dgs_rejected(lego_vertex, tmp_path):
    arr = _drop_fields(lego_vertex, ["scale_2"])
    path = _write(arr, tmp_path / "surfels.ply")
    assert detect_format(path) == "2dgs-ply"
    with pytest.raises(SceneFormatError, match=r"surfels\.ply.*2D Gaussian \(surfel\) PLY is not supported"):
        load_scene(path)


@pytest.mark.parametrize("keep", [1, 44])
def test_bad_f_rest_count(lego_vertex, tmp_path, keep):
    drop = [f"f_rest_{i}" for i in range(keep, 45)]
    path = _write(_drop_fields(lego_vertex, drop), tmp_path / "badrest.ply")
    with pytest.raises(SceneFormatError, match=rf"badrest\.ply: bad f_rest count {keep}"):
        load_scene(path)


def test_truncated_binary(tile, tmp_path):
    data = tile.read_bytes()
    path = tmp_path / "cut.ply"
    path.write_bytes(data[: len(data) - 1000])
    with pytest.raises(SceneFormatError, match=r"cut\.ply: truncated file"):
        load_scene(path)
    path.write_bytes(data[:200])  # header itself cut
    with pytest.raises(SceneFormatError, match=r"cut\.ply.*end_header"):
        load_scene(path)


def test_truncated_ascii(tile, tmp_path):
    v = _vertex(tile)
    path = _write(v, tmp_path / "a.ply", text=True)
    data = open(path, "rb").read()
    cut = tmp_path / "a_cut.ply"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(SceneFormatError, match=r"a_cut\.ply"):
        load_scene(cut)


def test_empty_and_missing_files(tmp_path):
    (tmp_path / "empty.ply").write_bytes(b"")
    with pytest.raises(SceneFormatError, match=r"empty\.ply: empty file"):
        load_scene(tmp_path / "empty.ply")
    with pytest.raises(FileNotFoundError):
        load_scene(tmp_path / "nope.ply")


@pytest.mark.parametrize("ext", ["ksplat", "spz", "sog", "lcc"])
def test_unsupported_containers_rejected_with_hint(tmp_path, ext):
    p = tmp_path / f"scene.{ext}"
    p.write_bytes(b"\x00\x01\x02\x03" * 64)
    with pytest.raises(SceneFormatError, match=rf"scene\.{ext}.*not supported.*convert it to an INRIA"):
        load_scene(p)


def test_garbage_rejected(tmp_path):
    p = tmp_path / "junk.ply"
    p.write_bytes(b"hello world, not a splat\n" * 3)
    with pytest.raises(SceneFormatError, match=r"junk\.ply: unrecognised"):
        load_scene(p)


def test_save_refuses_input_path_and_is_atomic(tile, tmp_path):
    src = tmp_path / "in.ply"
    src.write_bytes(tile.read_bytes())
    s = load_scene(src)
    before = src.read_bytes()
    with pytest.raises(OptionError, match="refusing to overwrite the input"):
        save_scene(s, src)
    with pytest.raises(PhysSkinError):
        save_scene(s, str(tmp_path / "." / "in.ply"))
    assert src.read_bytes() == before
    # overwriting another existing file is fine and atomic (replaced, not appended)
    other = tmp_path / "other.ply"
    other.write_bytes(b"old content")
    save_scene(s, other)
    assert_bit_identical(s, load_scene(other))
    assert sorted(os.listdir(tmp_path)) == ["in.ply", "other.ply"]


def test_fast_column_gather_matches_reference_path(lego_vertex, tmp_path):
    """The single-gather fast path equals the per-column reference path (LE, BE, double, mixed types)."""
    from physskin_gs.io.inria_ply import load_inria_ply

    v = lego_vertex
    variants = {
        "le.ply": (v, "<"),
        "be.ply": (v.astype(v.dtype.newbyteorder(">")), ">"),
        "f8.ply": (v.astype([(n, "<f8") for n in v.dtype.names]), "<"),
        "mixed.ply": (v.astype([(n, "<f8" if n == "opacity" else "<f4") for n in v.dtype.names]), "<"),
    }
    for name, (arr, bo) in variants.items():
        path = _write(arr, tmp_path / name, byte_order=bo)
        assert_bit_identical(load_inria_ply(path, fast=True), load_inria_ply(path, fast=False))


def test_zero_gaussians_and_utf8_comment(inria_sh3, tmp_path):
    tile = inria_sh3("scene_tile_lod5_sh3.ply")
    hdr, body = tile.path.read_bytes().split(b"end_header\n", 1)
    p = tmp_path / "zero.ply"
    count_line = f"element vertex {tile.count}\n".encode()
    assert count_line in hdr
    p.write_bytes(hdr.replace(count_line, b"element vertex 0\n") + b"end_header\n")
    with pytest.raises(SceneFormatError, match=r"zero\.ply: the PLY holds no Gaussians"):
        load_scene(p)
    q = tmp_path / "comment.ply"
    q.write_bytes(hdr.replace(b"ply\n", "ply\ncomment made by caf\u00e9 \u00a9\n".encode("utf-8"), 1)
                  + b"end_header\n" + body)
    assert_bit_identical(load_scene(q), load_scene(tile.path))


def test_an_empty_scene_writes_a_header_only_ply(tmp_path):
    """Zero rows: the writer skips empty arrays (a memoryview of a zero-size array cannot be cast) and writes a valid
    header-only INRIA PLY (plyfile reads 0 vertices with every property); our loader refuses it clearly."""
    empty = GaussianScene(means=torch.zeros(0, 3), quats=torch.zeros(0, 4), log_scales=torch.zeros(0, 3),
                          opacity_logits=torch.zeros(0), sh_dc=torch.zeros(0, 3), sh_rest=torch.zeros(0, 15, 3))
    path = tmp_path / "empty.ply"
    save_scene(empty, path)
    assert path.read_bytes().endswith(b"end_header\n")
    ply = PlyData.read(str(path))
    assert ply["vertex"].count == 0
    names = [p.name for p in ply["vertex"].properties]
    assert names[:3] == ["x", "y", "z"] and "f_rest_44" in names and "rot_3" in names
    with pytest.raises(SceneFormatError, match="no Gaussians"):
        load_scene(path)


def test_double_positions_that_float32_moves_are_said(lego_vertex, tmp_path):
    """x / y / z stored as double 1e5 units out (a georeferenced capture): float32 moves them by up to 0.004
    units, which was silent; now a warning gives the error against the extent. The same file near the origin, or
    with float positions, warns nothing."""
    names = list(lego_vertex.dtype.names)
    for shift, warned in ((1.0e5, True), (0.0, False)):
        arr = np.empty(len(lego_vertex), dtype=[(nm, "<f8" if nm in ("x", "y", "z") else "<f4") for nm in names])
        for nm in names:
            arr[nm] = lego_vertex[nm]
        arr["x"] = lego_vertex["x"].astype(np.float64) + shift
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            s = load_scene(_write(arr, tmp_path / f"double_{int(shift)}.ply"))
        said = [str(w.message) for w in got if "stored as double" in str(w.message)]
        assert bool(said) == warned, said
        if warned:
            err = float(np.abs(arr["x"] - s.means[:, 0].double().numpy()).max())
            assert 1e-3 < err < 1e-2 and f"{err:.3g}" in said[0]
