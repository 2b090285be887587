"""The one skinning-basis interface (physskin_gs.model.bases): names, building, save/load, and `skin --points`."""

import json

import numpy as np
import pytest
import torch

from physskin_gs.cli import main
from physskin_gs.cli._skinning import SKINNING_CHOICES
from physskin_gs.errors import CheckpointError, OptionError
from physskin_gs.model import NetConfig, PhysSkinNet, save_checkpoint
from physskin_gs.model.bases import (
    DEFAULT_SKINNING,
    SKINNING_BASES,
    SkinningOptions,
    SkinningReducedWarning,
    build_skinning,
    load_field,
    resolve_skinning,
    save_field,
    skinning_names,
)
from physskin_gs.model.data import synthetic_shape


def _tiny_ckpt(path):
    torch.manual_seed(0)
    net = PhysSkinNet(NetConfig(num_handles=6, width=32, heads=2, latents=8, enc_layers=1, handle_tokens=8,
                                head_hidden=32, ff_mult=1))
    return save_checkpoint(net, path, {"train": {"combine": "sum"}})


def test_names_are_one_list():
    assert tuple(skinning_names()) == SKINNING_CHOICES  # the CLI's static list is the registry's
    assert resolve_skinning("pretrained") == "network" and resolve_skinning(None) == DEFAULT_SKINNING
    assert resolve_skinning("EIGEN") == "eigen"
    with pytest.raises(OptionError, match="eigen, network"):
        resolve_skinning("bogus")
    assert set(SKINNING_BASES) == {"eigen", "network", "fit", "rbf", "tet", "voxel", "modes", "auto"}


def test_build_checks_inputs():
    shape = synthetic_shape("box", n_surface=64, n_volume=10)
    # 10 distinct volume points support 9 learned handles (W at 10 points has rank <= 10): fewer, with a warning
    with pytest.warns(SkinningReducedWarning) as rec:
        field, _ = build_skinning("rbf", shape.surface, shape.volume[:10])
    assert field.num_handles == 10 and (rec[0].message.requested, rec[0].message.used) == (16, 9)
    for bad in (shape.volume[:0], shape.volume[:, :2]):
        with pytest.raises(OptionError, match=r"volume points \(N, 3\) with N >= 1"):
            build_skinning("rbf", shape.surface, bad)
    with pytest.raises(CheckpointError, match="not found"):
        build_skinning("network", shape.surface, shape.volume, SkinningOptions(checkpoint="/nonexistent/x.safetensors"))


def _assert_same_field(a, b, x):
    Wa, Ga = a.weights_and_grads(x)
    Wb, Gb = b.weights_and_grads(x)
    assert a.num_handles == b.num_handles
    assert torch.equal(Wa, Wb) and torch.equal(Ga, Gb)


@pytest.mark.parametrize("name", ["rbf", "network", "fit", "voxel", "modes"])
def test_save_load_round_trip(tmp_path, name):
    shape = synthetic_shape("ellipsoid", n_surface=256, n_volume=400)
    opts = SkinningOptions(num_handles=6, checkpoint=str(_tiny_ckpt(tmp_path / "t.safetensors")), fit_seconds=0.5)
    field, source = build_skinning(name, shape.surface, shape.volume, opts)
    assert field.num_handles == 7 and source.split(":")[0].split(" ")[0] == name
    W = field.weights(shape.volume)
    assert torch.allclose(W[:, -1], torch.ones(W.shape[0]))  # the constant handle is exactly 1, last
    path = save_field(field, tmp_path / f"{name}.safetensors")
    x = torch.rand(50, 3) * 2 - 1
    _assert_same_field(field, load_field(path), x)


def test_load_field_rejects_foreign_files(tmp_path):
    ck = _tiny_ckpt(tmp_path / "t.safetensors")  # a checkpoint, not a field
    with pytest.raises(CheckpointError, match="not a physskin_gs skinning field"):
        load_field(ck)
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"junk")
    with pytest.raises(CheckpointError):
        load_field(junk)


def test_skin_points_equal_the_objects_own_rows(tmp_path, splat_file):
    """`skin --points` at the scene's own Gaussian centres reproduces the scene's own weights and gradients."""
    from physskin_gs.io import load_scene

    src = splat_file("spot_mesh2splat_10k.splat")
    full = tmp_path / "full.npz"
    assert main(["skin", str(src), "-o", str(full), "--skinning", "rbf"]) == 0
    means = load_scene(str(src)).means.numpy().astype(np.float64)
    pick = np.random.default_rng(0).choice(means.shape[0], 200, replace=False)
    np.save(tmp_path / "pts.npy", means[pick])
    part = tmp_path / "part.npz"
    assert main(["skin", str(src), "-o", str(part), "--skinning", "rbf", "--points", str(tmp_path / "pts.npy")]) == 0
    a, b = np.load(full), np.load(part)
    assert b["weights"].shape == (200, 17)
    np.testing.assert_allclose(b["weights"], a["weights"][pick], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b["grads"], a["grads"][pick], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(b["grads_scene"], b["grads"] / float(b["scale"]), rtol=1e-6)
    assert json.loads(str(b["metrics"]))["query"] == "points"
    # each row's position is in the file: the splat's rows in file order, the query points as given
    np.testing.assert_array_equal(a["points"], means)
    np.testing.assert_array_equal(b["points"], means[pick])


def test_skin_mesh_rows_carry_their_positions(tmp_path, mesh_file):
    """A mesh's rows are its welded vertices (an OBJ with texture coordinates has more or fewer than its ``v``
    lines, in another order): the .npz gives each row's position, and ``--points`` at those positions gives the
    same rows (a fresh user mapped rows to ``v`` lines by index and got wrong weights, with no way to tell)."""
    from physskin_gs.io.mesh import load_mesh

    src = mesh_file("c3d_spot.obj")
    out = tmp_path / "w.npz"
    assert main(["skin", str(src), "-o", str(out), "--skinning", "rbf"]) == 0
    a = np.load(out)
    verts = np.asarray(load_mesh(str(src)).vertices, np.float64)
    np.testing.assert_array_equal(a["points"], verts)
    v_lines = np.array([[float(t) for t in ln.split()[1:4]] for ln in src.read_text().splitlines()
                        if ln.startswith("v ")])
    assert len(v_lines) != len(verts) or not np.array_equal(v_lines, verts)  # not the file's rows one for one
    pick = np.random.default_rng(1).choice(len(verts), 100, replace=False)
    np.save(tmp_path / "v.npy", a["points"][pick])
    assert main(["skin", str(src), "-o", str(tmp_path / "p.npz"), "--skinning", "rbf", "--points",
                 str(tmp_path / "v.npy")]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "p.npz")["weights"], a["weights"][pick], rtol=1e-5, atol=1e-6)


def test_skin_points_bad_files(tmp_path, splat_file, capsys):
    src = splat_file("spot_mesh2splat_10k.splat")
    np.save(tmp_path / "bad.npy", np.zeros((5, 2)))
    assert main(["skin", str(src), "-o", str(tmp_path / "o.npz"), "--points", str(tmp_path / "bad.npy")]) == 2
    assert "(N, 3)" in capsys.readouterr().err
    nan = np.zeros((3, 3))
    nan[1, 1] = np.nan
    np.save(tmp_path / "nan.npy", nan)
    assert main(["skin", str(src), "-o", str(tmp_path / "o.npz"), "--points", str(tmp_path / "nan.npy")]) == 2
    assert "not finite" in capsys.readouterr().err
    assert main(["skin", str(src), "-o", str(tmp_path / "o.npz"), "--points", str(tmp_path / "missing.npy")]) == 2
    assert not (tmp_path / "o.npz").exists()


def test_voxel_basis_follows_the_solid_not_its_samples():
    """The voxel basis of random (not mirror-symmetric) samples of a box is the Laplacian basis of the box's cells:
    its tet mesh's nodes are mirror-symmetric about the box's mid-planes (the grid is fitted to the box, so no sliver
    cells along its faces are occupied by chance), and the lowest mode is the box's first Neumann mode along its long
    axis, cos(pi x / L) (correlation > 0.99; the sign is free)."""
    from physskin_gs.model.bases import voxel_tetmesh_of_points

    rng = np.random.default_rng(0)
    pts = rng.uniform([-1.0, -0.2, -0.2], [1.0, 0.2, 0.2], (20000, 3))
    tm = voxel_tetmesh_of_points(pts, 1024)
    assert 900 <= tm.info["occupied_voxels"] <= 1150 and tm.method == "voxel"
    nodes = np.asarray(tm.nodes)
    mid = 0.5 * (pts.min(0) + pts.max(0))
    from scipy.spatial import cKDTree

    tree = cKDTree(nodes)
    for a in range(3):
        m = nodes.copy()
        m[:, a] = 2 * mid[a] - m[:, a]
        assert (tree.query(m)[0] < 1e-9).all()  # the mirrored nodes are nodes
    field, source = build_skinning("voxel", torch.from_numpy(pts[:500]).float(), torch.from_numpy(pts).float(),
                                   SkinningOptions(num_handles=4))
    assert field.num_handles == 5 and source.startswith("voxel (")
    x = torch.from_numpy(pts[:4000]).float()
    W = field.weights(x).numpy()
    assert np.allclose(W[:, -1], 1.0)
    c = np.corrcoef(W[:, 0], np.cos(np.pi * (pts[:4000, 0] + 1.0) / 2.0))[0, 1]
    assert abs(c) > 0.99


def test_modes_basis_of_a_splat_is_the_elastic_modes_of_its_voxels():
    """For points without a mesh, ``modes`` meshes the occupied voxels (voxel's mesh) and takes the fields of its
    lowest elastic modes: on a 2 x 0.5 x 0.4 box of random samples its 9 fields hold the first three modes of that
    voxel mesh exactly (Rayleigh-Ritz frequency ratio 1 on it), which the voxel Laplacian basis does not."""
    from physskin_gs.model.bases import VOXEL_CELLS, voxel_tetmesh_of_points
    from physskin_gs.physics.subspace_eval import evaluate_basis, fem_reference

    rng = np.random.default_rng(1)
    pts = rng.uniform([-1.0, -0.25, -0.2], [1.0, 0.25, 0.2], (20000, 3))
    field, source = build_skinning("modes", torch.from_numpy(pts[:500]).float(), torch.from_numpy(pts).float(),
                                   SkinningOptions(num_handles=9))
    assert field.num_handles == 10 and source.startswith("modes (voxel, ")
    tm = voxel_tetmesh_of_points(pts, VOXEL_CELLS, (pts[:500].min(0), pts[:500].max(0)))  # the surface's box
    assert source == f"modes (voxel, {tm.num_nodes} nodes)"
    ref = fem_reference(tm, nu=0.45, k=6)
    W = field.weights(torch.from_numpy(tm.nodes).float()).double().numpy()
    r = evaluate_basis(ref, W)
    np.testing.assert_allclose(r["freq_ratios"][:3], 1.0, atol=1e-4)  # float32 weights at the nodes
    voxel, _ = build_skinning("voxel", torch.from_numpy(pts[:500]).float(), torch.from_numpy(pts).float(),
                              SkinningOptions(num_handles=9))
    rv = evaluate_basis(ref, voxel.weights(torch.from_numpy(tm.nodes).float()).double().numpy())
    assert rv["freq_ratios"][0] > 1.001 and rv["freq_ratio_geomean"] > r["freq_ratio_geomean"]


def test_default_above_32_handles_is_the_laplacian_of_the_same_mesh():
    """The modes' finest fields tear an object between cubature points above MODES_MAX_HANDLES (a koala at 64): the
    default takes the Laplacian eigenmodes of the same mesh there (voxel for points), and says so."""
    from physskin_gs.model.bases import MODES_MAX_HANDLES, SkinningFallbackWarning

    rng = np.random.default_rng(2)
    pts = torch.from_numpy(rng.uniform([-1.0, -0.3, -0.3], [1.0, 0.3, 0.3], (6000, 3))).float()
    with pytest.warns(SkinningFallbackWarning, match="Laplacian eigenmodes of the same mesh"):
        field, source = build_skinning("auto", pts[:300], pts, SkinningOptions(num_handles=MODES_MAX_HANDLES + 8))
    assert source.startswith("voxel (") and field.num_handles == MODES_MAX_HANDLES + 9
    with pytest.warns(SkinningFallbackWarning, match="can tear"):
        _, source = build_skinning("modes", pts[:300], pts, SkinningOptions(num_handles=MODES_MAX_HANDLES + 1))
    assert source.startswith("modes (voxel, ")
    _, source = build_skinning("auto", pts[:300], pts, SkinningOptions(num_handles=MODES_MAX_HANDLES))
    assert source.startswith("modes (voxel, ")


def test_skinning_option_ignores_case():
    import argparse

    from physskin_gs.cli._skinning import add_skinning_arguments

    p = argparse.ArgumentParser()
    add_skinning_arguments(p)
    assert p.parse_args(["--skinning", "Modes"]).skinning == "modes"
    assert p.parse_args([]).skinning == "auto"
    with pytest.raises(SystemExit):
        p.parse_args(["--skinning", "bogus"])


def test_tetgen_reasons_read_as_words():
    """The skin / animate summary named TetGen's raw exception ("TetGen failed: RuntimeError: The input surface
    mesh contain self-intersections."): it says what happened in words."""
    from physskin_gs.model.bases import plain_tetgen_reason

    raw = "TetGen failed: RuntimeError: The input surface mesh contain self-intersections."
    assert plain_tetgen_reason(raw) == "its surface intersects itself, so TetGen could not mesh it"
    assert plain_tetgen_reason("TetGen failed: RuntimeError: boom") == "TetGen could not mesh its surface"
    assert plain_tetgen_reason("TetGen crashed (exit code -6)") == "TetGen crashed on its surface"
    assert plain_tetgen_reason("TetGen mesh has 3 pieces, the largest holds 80.0% (x)") == (
        "TetGen mesh has 3 pieces, the largest holds 80.0%")
