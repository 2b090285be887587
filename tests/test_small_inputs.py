"""Small and degenerate inputs (issue "small and degenerate inputs").

A scene or selection with fewer than 17 usable Gaussians (finite, opacity >= 0.05) animates with fewer handles,
down to one rigid body, and says so in one ``note:`` line; a sparse splat is the solid hull of its Gaussians'
2-sigma ellipsoids, so it has a volume, a mass and a height above the floor. ``skin`` builds a mesh's field from
sampled volume points whatever its vertex count (a cube, an open cube, a single-triangle fin), as ``animate``
and ``evaluate`` do. A face-less mesh file and a mesh whose faces all have zero area are one-line errors in
animate, skin and evaluate alike.

Every test writes its own small files under tmp_path; the animate runs simulate 6 frames with 32 cubature points
and 2 Newton iterations.
"""

from __future__ import annotations

import io
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from physskin_gs.cli import main

FAST = ["--cubature", "32", "--newton-iters", "2"]
FRAMES = 6
#: Backward-Euler free fall over FRAMES - 1 steps of dt = 0.03 s from rest: sum_k k dt^2 g (m); nothing falls faster
FREE_FALL = sum(range(1, FRAMES)) * 0.03 ** 2 * 9.8


from tests.conftest import blob_scene as _blob  # noqa: E402
from tests.conftest import save_scene_file as _save  # noqa: E402


def _run(capsys, argv):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. the fill's fallback notes on a few hundred scattered rows
        code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def _notes(err: str):
    """The notes on stderr but the scene analysis' up-axis one (a cloud of a few Gaussians has no support)."""
    return [ln for ln in err.splitlines() if "note:" in ln and "which way is up" not in ln]


def _errors(err: str):
    return [ln for ln in err.splitlines() if ln.startswith("error: ")]


def _frames(folder: Path):
    """(sequence.json, [(N, 3) means of every frame]) of an exported PLY sequence."""
    from physskin_gs.io import load_scene

    meta = json.loads((folder / "sequence.json").read_text())
    means = []
    for f in range(1, meta["frames"] + 1):
        sc = load_scene(str(folder / (meta["pattern"] % f)))
        for t in (sc.means, sc.quats, sc.log_scales):
            assert torch.isfinite(t).all()
        means.append(sc.means.double().numpy())
    return meta, means


def _animate(capsys, path: Path, out: Path, *extra):
    code, _, err = _run(capsys, ["animate", path, "--headless", "--frames", FRAMES, "--export", out, *FAST, *extra])
    assert code == 0, err
    meta, means = _frames(out)
    return err, meta, means


def _fell(meta, means, rows=None) -> float:
    """Metres the mean height (along the recorded up axis) of ``rows`` dropped from frame 1 to the last frame."""
    up = np.asarray(meta["up_axis"])
    sel = slice(None) if rows is None else rows
    h0, h1 = float((means[0][sel] @ up).mean()), float((means[-1][sel] @ up).mean())
    return (h0 - h1) * meta["scale_m_per_unit"]


# ------------------------------------------------------------------------------------- few usable Gaussians
@pytest.mark.parametrize("skinning", ["eigen", "network"])
def test_nine_gaussian_compressed_ply_animates_with_eight_handles(capsys, tmp_path, skinning):
    from physskin_gs.io.compressed_ply import save_compressed_ply

    path = tmp_path / "nine.compressed.ply"
    save_compressed_ply(_blob(9), path)
    err, meta, means = _animate(capsys, path, tmp_path / "seq", "--skinning", skinning)
    assert _notes(err) == ["[physskin-gs] note: 9 usable Gaussians: 8 handles instead of 16"]
    assert "9 handles (8 + constant; " in err
    assert meta["skinning"].endswith("[9 usable Gaussians: 8 handles instead of 16]")
    assert meta["skinning"].startswith("eigen" if skinning == "eigen" else "network:physskin_m16")
    assert meta["num_moving"] == 9 and len(means) == FRAMES
    assert 0.05 < _fell(meta, means) <= FREE_FALL + 1e-3  # falling, at most as fast as free fall


def test_four_gaussian_box_selection_moves_only_the_box(capsys, tmp_path):
    scene = _blob(300, seed=3)
    m = scene.means.numpy().astype(np.float64)
    near = np.argsort(np.linalg.norm(m - m[0], axis=1))[:4]
    lo, hi = m[near].min(0) - 1e-4, m[near].max(0) + 1e-4
    inside = ((m >= lo) & (m <= hi)).all(1)
    assert inside.sum() == 4
    box = ",".join(f"{v:.6f}" for v in [*lo, *hi])
    path = _save(scene, tmp_path / "scene.ply")
    err, meta, means = _animate(capsys, path, tmp_path / "seq", "--select", box)
    assert _notes(err) == ["[physskin-gs] note: 4 usable Gaussians: 3 handles instead of 16"]
    assert meta["num_moving"] == 4 and "3 handles instead of 16" in meta["skinning"]
    assert _fell(meta, means, inside) > 0.05
    assert np.abs(means[-1][~inside] - means[0][~inside]).max() < 1e-6  # the rest of the scene stays


@pytest.mark.parametrize("n, note, handles", [
    (1, "1 usable Gaussian: one rigid body (no skinning handles)", "1 handle (0 + constant; "),
    (2, "2 usable Gaussians: 1 handle instead of 16", "2 handles (1 + constant; "),
])
def test_one_and_two_gaussian_scenes_fall(capsys, tmp_path, n, note, handles):
    path = _save(_blob(n, seed=1), tmp_path / f"g{n}.ply")
    err, meta, means = _animate(capsys, path, tmp_path / "seq")
    assert _notes(err) == [f"[physskin-gs] note: {note}"]
    assert handles + "modes" in err and meta["skinning"].startswith("modes") and meta["skinning"].endswith(f" [{note}]")
    assert meta["num_moving"] == n
    assert _fell(meta, means) == pytest.approx(FREE_FALL, rel=1e-3)  # a rigid body in free fall


def test_lod_tile_with_twelve_opaque_rows(capsys, tmp_path):
    tile = _blob(212, seed=5)
    tile.opacity_logits[12:] = -6.0  # 200 near-transparent rows (opacity 0.0025) around 12 opaque ones
    path = _save(tile, tmp_path / "tile.ply")
    err, meta, means = _animate(capsys, path, tmp_path / "seq", "--select", "all")
    assert _notes(err) == ["[physskin-gs] note: 12 usable Gaussians: 11 handles instead of 16"]
    assert meta["num_moving"] == 212 and "11 handles instead of 16" in meta["skinning"]
    assert _fell(meta, means, np.arange(12)) > 0.05
    # the default selection (the scene analysis) of so small a scene: the 12 opaque rows are the object
    err, meta, means = _animate(capsys, path, tmp_path / "auto")
    assert _notes(err) == ["[physskin-gs] note: 12 usable Gaussians: 11 handles instead of 16"]
    assert "floaters 0" in err and _fell(meta, means, np.arange(12)) > 0.05


def test_seventeen_usable_gaussians_keep_sixteen_handles(capsys, tmp_path):
    path = _save(_blob(17), tmp_path / "g17.ply")
    err, meta, _ = _animate(capsys, path, tmp_path / "seq")
    assert _notes(err) == [] and meta["skinning"].startswith("modes (voxel, ")
    assert "17 handles (16 + constant; modes (voxel, " in err


def test_a_rigid_body_lands_on_the_floor_and_rests():
    """H = 1 (the constant handle only): the simulator and the deformer move one affine body; it falls, stops on
    the floor (the body's bottom under its lowest cubature points at the floor) and the Gaussian keeps its shape."""
    from physskin_gs.pipeline import AnimationConfig, prepare_animation

    scene = _blob(1, seed=1)
    anim = prepare_animation(scene, AnimationConfig(num_cubature=64, newton_iters=3))
    assert anim.num_handles == 1 and anim.sim.handle_transforms().shape == (1, 3, 4)
    assert anim.info["handles"] == {"requested": 16, "learned": 0, "usable": 1,
                                    "note": "1 usable Gaussian: one rigid body (no skinning handles)"}
    up = anim.up_vector
    floor = anim.sim.floor_height / anim.sim_scale + float(anim.center @ up)  # scene units along up
    # the floor is 25 % of the body's height (4 sigma = 0.2 units) below its lowest point, not of the centre's
    assert anim.height_scene == pytest.approx(0.2, rel=0.1)
    h0 = float(anim.deformed_gaussians().means[0].double() @ up)
    for _ in range(60):
        anim.step()
    z = anim.handle_transforms_scene()
    assert torch.isfinite(z).all()
    # where the floor meets the body: each cubature point less its lift (the body's extent below it in its column)
    low = float((anim.cubature_positions().double() @ up - torch.from_numpy(anim.floor_lift) / anim.sim_scale).min())
    h1 = float(anim.deformed_gaussians().means[0].double() @ up)
    assert h1 < h0 - 0.04 and abs(low - floor) < 0.01 * 0.2 + 0.005
    F = torch.eye(3, dtype=z.dtype) + z[0, :, :3]  # x' = x + Z [x; 1]: the body's deformation gradient
    assert torch.allclose(torch.linalg.svdvals(F), torch.ones(3, dtype=F.dtype), atol=0.03)  # rigid (E = 1e5 Pa)
    before = float(anim.deformed_gaussians().means[0].double() @ up)
    anim.step(5)
    assert abs(float(anim.deformed_gaussians().means[0].double() @ up) - before) < 1e-3  # at rest on the floor


def test_viewer_progress_prints_the_note_once_without_a_percentage():
    from physskin_gs.pipeline import AnimationConfig, prepare_animation
    from physskin_gs_viewer.app import TerminalProgress

    buf = io.StringIO()
    seen = []
    progress = TerminalProgress(buf, gui_sink=lambda msg, pct: seen.append(msg))
    anim = prepare_animation(_blob(9), AnimationConfig(num_cubature=32, skinning="rbf"), progress=progress)
    assert anim.num_handles == 9 and anim.info["handles"]["note"] == "9 usable Gaussians: 8 handles instead of 16"
    lines = [ln for ln in buf.getvalue().splitlines() if "note" in ln]
    assert lines == ["[physskin-gs] note: 9 usable Gaussians: 8 handles instead of 16"]
    assert "note: 9 usable Gaussians: 8 handles instead of 16" in seen  # the page's status line shows it too


@pytest.mark.parametrize("skinning", ["eigen", "network", "rbf", "fit"])
def test_skin_of_nine_gaussians_for_every_basis(capsys, tmp_path, skinning):
    path = _save(_blob(9), tmp_path / "nine.ply")
    out = tmp_path / "w.npz"
    code, stdout, err = _run(capsys, ["skin", path, "-o", out, "--skinning", skinning, "--fit-seconds", "1"])
    assert code == 0, err
    assert _notes(err) == [f"[physskin-gs] note: {path}: 9 usable Gaussians: 8 handles instead of 16"]
    z = np.load(out)
    assert z["weights"].shape == (9, 9) and z["grads"].shape == (9, 9, 3)
    assert np.isfinite(z["weights"]).all() and np.isfinite(z["grads"]).all()
    assert np.all(z["weights"][:, -1] == 1.0)
    assert np.linalg.matrix_rank(z["weights"].astype(np.float64), tol=1e-4) == 9  # 9 independent columns
    assert "H = 9 handles" in stdout


def test_skin_of_one_gaussian_is_one_rigid_body(capsys, tmp_path):
    path = _save(_blob(1), tmp_path / "one.ply")
    code, stdout, err = _run(capsys, ["skin", path, "-o", tmp_path / "w.npz"])
    assert code == 0, err
    assert _notes(err) == [f"[physskin-gs] note: {path}: 1 usable Gaussian: one rigid body (no skinning handles)"]
    z = np.load(tmp_path / "w.npz")
    assert z["weights"].shape == (1, 1) and z["weights"][0, 0] == 1.0 and not z["grads"].any()
    assert json.loads(str(z["metrics"]))["excluding_constant"]["omega_orth_x1e2"] is None  # undefined: null


# ------------------------------------------------------------------------------------------------ meshes
def _meshes(tmp_path: Path):
    import trimesh

    cube = trimesh.creation.box(extents=(1.0, 1.0, 1.0))
    paths = {"cube": tmp_path / "cube.obj", "open_cube": tmp_path / "open_cube.obj", "fin": tmp_path / "fin.obj"}
    cube.export(paths["cube"])
    trimesh.Trimesh(cube.vertices, cube.faces[2:], process=False).export(paths["open_cube"])  # one face missing
    trimesh.Trimesh([[0, 0, 0], [1, 0, 0], [0, 1, 0]], [[0, 1, 2]], process=False).export(paths["fin"])
    return paths


@pytest.mark.parametrize("name, vertices", [("cube", 8), ("open_cube", 8), ("fin", 3)])
def test_skin_of_a_mesh_with_few_vertices(capsys, tmp_path, name, vertices):
    path = _meshes(tmp_path)[name]
    code, stdout, err = _run(capsys, ["skin", path, "-o", tmp_path / "w.npz", "--skinning", "rbf"])
    assert code == 0, err
    assert _notes(err) == []  # the field is built from sampled volume points: 16 handles
    z = np.load(tmp_path / "w.npz")
    assert z["weights"].shape == (vertices, 17) and np.isfinite(z["weights"]).all() and np.isfinite(z["grads"]).all()
    assert f"{vertices} vertices, H = 17 handles" in stdout


@pytest.mark.parametrize("name", ["cube", "fin"])
def test_animate_and_evaluate_accept_the_same_meshes(capsys, tmp_path, name):
    import trimesh

    path = _meshes(tmp_path)[name]
    code, _, err = _run(capsys, ["animate", path, "--headless", "--frames", FRAMES, "--export", tmp_path / "seq",
                                 "--mesh-gaussians", "2000", *FAST])
    assert code == 0, err
    meta = json.loads((tmp_path / "seq" / "sequence.json").read_text())
    v = [trimesh.load(tmp_path / "seq" / (meta["pattern"] % f), process=False).vertices for f in (1, FRAMES)]
    up = np.asarray(meta["up_axis"])
    assert np.isfinite(v[1]).all() and ((v[0] - v[1]) @ up).mean() * meta["scale_m_per_unit"] > 0.05
    code, out, err = _run(capsys, ["evaluate", "--data", path, "--fit-seconds", "0", "--points", "200",
                                   "--transforms", "2"])
    assert code == 0, err
    assert path.name in out


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_a_mesh_file_with_vertices_and_no_faces(capsys, tmp_path):
    rng = np.random.default_rng(0)
    path = _write(tmp_path / "cloud.obj", "".join(f"v {x:.4f} {y:.4f} {z:.4f}\n" for x, y, z in rng.random((50, 3))))
    want = f"error: {path}: mesh has 50 vertices but no faces (a point cloud, not a triangle mesh)"
    for argv in (["animate", path, "--headless", "--frames", 2, "--export", tmp_path / "seq"],
                 ["skin", path, "-o", tmp_path / "w.npz"],
                 ["evaluate", "--data", path, "--fit-seconds", "0"]):
        code, _, err = _run(capsys, argv)
        assert code == 2 and _errors(err) == [want], (argv[0], err)


def test_a_mesh_whose_faces_all_have_zero_area(capsys, tmp_path):
    path = _write(tmp_path / "line.obj", "v 0 0 0\nv 1 0 0\nv 2 0 0\nv 3 0 0\nf 1 2 3\nf 2 3 4\n")
    want = (f"error: {path}: all 2 faces have zero area (their corners are collinear); there is no surface to "
            "sample")
    for argv in (["animate", path, "--headless", "--frames", 2, "--export", tmp_path / "seq"],
                 ["skin", path, "-o", tmp_path / "w.npz"],
                 ["evaluate", "--data", path, "--fit-seconds", "0"]):
        code, _, err = _run(capsys, argv)
        assert code == 2 and _errors(err) == [want], (argv[0], err)
    assert not (tmp_path / "w.npz").exists() and not (tmp_path / "seq" / "sequence.json").exists()


def test_one_positive_face_among_zero_area_faces_is_a_mesh(tmp_path):
    from physskin_gs.io.mesh import has_positive_area, load_mesh

    path = _write(tmp_path / "mixed.obj", "v 0 0 0\nv 1 0 0\nv 2 0 0\nv 0 1 0\nf 1 2 3\nf 1 2 4\n")
    mesh = load_mesh(str(path))
    assert mesh.num_faces == 2 and has_positive_area(mesh.vertices, mesh.faces)
    assert not has_positive_area(mesh.vertices, mesh.faces[:1])


# ------------------------------------------------------------------------------------- the layers below
def test_bases_bound_the_handles_by_the_points():
    from physskin_gs.model.bases import (ColumnSubsetField, ConstantSkinningField, SkinningOptions,
                                         SkinningReducedWarning, build_skinning, handle_capacity)
    from physskin_gs.model.data import synthetic_shape

    shape = synthetic_shape("box", n_surface=256, n_volume=600)
    assert handle_capacity("eigen", shape.volume[:9]) == 7 and handle_capacity("rbf", shape.volume[:9]) == 8
    assert handle_capacity("eigen", shape.volume[:4]) == 0  # RKPM needs 5 nodes
    assert handle_capacity("rbf", shape.volume[:1].repeat(30, 1)) == 0  # 30 copies of one point
    for name, kind in (("eigen", "eigen"), ("rbf", None), ("network", ColumnSubsetField)):
        with pytest.warns(SkinningReducedWarning) as rec:
            field, _ = build_skinning(name, shape.surface, shape.volume, SkinningOptions(max_handles=5))
        assert field.num_handles == 6 and (rec[0].message.requested, rec[0].message.used) == (16, 5), name
        if isinstance(kind, type):
            assert isinstance(field, kind)
        W, G = field.weights_and_grads(shape.volume)
        assert W.shape == (shape.volume.shape[0], 6) and torch.all(W[:, -1] == 1.0)
        assert torch.isfinite(G).all()
        with pytest.warns(SkinningReducedWarning):
            rigid, _ = build_skinning(name, shape.surface, shape.volume, SkinningOptions(max_handles=0))
        assert isinstance(rigid, ConstantSkinningField) and rigid.num_handles == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no bound reached: no warning
        field, _ = build_skinning("rbf", shape.surface, shape.volume, SkinningOptions(num_handles=6, max_handles=6))
    assert field.num_handles == 7


def test_reduced_fields_save_and_load(tmp_path):
    from physskin_gs.model.bases import (ColumnSubsetField, ConstantSkinningField, SkinningOptions, build_skinning,
                                         load_field, save_field)
    from physskin_gs.model.data import synthetic_shape

    shape = synthetic_shape("ellipsoid", n_surface=256, n_volume=400)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sub, _ = build_skinning("network", shape.surface, shape.volume, SkinningOptions(max_handles=3))
    x = torch.rand(20, 3) * 2 - 1
    for field in (ConstantSkinningField(), sub):
        back = load_field(save_field(field, tmp_path / f"{field.kind}.safetensors"))
        assert type(back) is type(field) and back.num_handles == field.num_handles
        Wa, Ga = field.weights_and_grads(x)
        Wb, Gb = back.weights_and_grads(x)
        assert torch.equal(Wa, Wb) and torch.equal(Ga, Gb)
    assert isinstance(sub, ColumnSubsetField) and len(sub.columns) == 3


def test_sparse_splat_body_is_one_solid():
    from physskin_gs.geometry.interior import sparse_splat_body

    body = sparse_splat_body(torch.zeros(1, 3), torch.full((1, 3), np.log(0.1)), torch.tensor([[1.0, 0, 0, 0]]))
    r = body.volume.double().norm(dim=1)
    assert body.num_gaussians == 1 and r.max() <= 0.2 + 1e-6  # inside the 2-sigma sphere
    assert body.measure == pytest.approx(4 / 3 * np.pi * 0.2 ** 3, rel=0.1)  # hull of 64 points on it
    assert (body.surface.double().norm(dim=1) > 0.18).all()
    # two far-apart Gaussians: one body spanning both (a capsule), not two blobs
    two = sparse_splat_body(torch.tensor([[0.0, 0, 0], [1.0, 0, 0]]), torch.full((2, 3), np.log(0.05)))
    x = two.volume[:, 0].numpy()
    assert ((x > 0.4) & (x < 0.6)).mean() > 0.15  # the middle holds a share of the volume
    # a flat Gaussian (log-scale -20 on one axis) still gives a solid body
    flat = sparse_splat_body(torch.zeros(1, 3), torch.tensor([[np.log(0.1), np.log(0.1), -20.0]]))
    assert flat.measure > 0 and float(flat.volume[:, 2].std()) > 0


def test_small_scene_analysis_has_no_floaters():
    from physskin_gs.geometry.scene_analysis import analyze_scene

    pts = _blob(9).means.numpy()
    a = analyze_scene(pts, np.full(9, 0.9, np.float32))
    assert a.counts["floater"] == 0 and a.object.all()
    # a flat fin is no support plane: nothing stands on it, it is the object
    rng = np.random.default_rng(0)
    fin = np.concatenate([rng.random((3000, 2)), np.zeros((3000, 1))], axis=1)
    fin = fin[fin.sum(1) <= 1.0]
    b = analyze_scene(fin, np.full(len(fin), 0.9, np.float32), format_prior_up=(0.0, 1.0, 0.0))
    assert b.plane is None and b.object.mean() > 0.99


def test_evaluate_of_nine_gaussians_uses_eight_handles_and_says_so(capsys, tmp_path):
    """evaluate --reference fem treats a small splat as animate and skin do: 8 handles, one note per basis."""
    path = _save(_blob(9), tmp_path / "nine.ply")
    js = tmp_path / "r.json"
    code, out, err = _run(capsys, ["evaluate", "--reference", "fem", "--data", path, "--bases", "eigen,rbf",
                                   "--fit-seconds", "0", "--nodes", "200", "--modes", "3", "--json", js])
    assert code == 0, err
    assert out.count("9 usable Gaussians: 8 handles instead of 16") == 2
    row = json.loads(js.read_text())["shapes"][0]
    for b in ("eigen", "rbf"):
        assert row["bases"][b]["near_zero"] == 6 and min(row["bases"][b]["freq_ratios"]) >= 1 - 1e-9
