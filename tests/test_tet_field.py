"""The ``tet`` skinning basis (issue 23): P1 fields on the input mesh's own tet mesh, the Laplacian eigenbasis of
that mesh, through ``build_skinning``, save / load, ``evaluate --reference fem`` and ``animate``."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from physskin_gs.errors import OptionError
from physskin_gs.geometry.tetmesh import box_tetmesh
from physskin_gs.model.bases import SkinningOptions, build_skinning, load_field, save_field
from physskin_gs.model.tet_field import TetSkinningField


def _cube_mesh(h=0.5):
    corners = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)], float) * h
    faces = np.array([[0, 1, 3], [0, 3, 2], [4, 6, 7], [4, 7, 5], [0, 4, 5], [0, 5, 1],
                      [2, 3, 7], [2, 7, 6], [0, 2, 6], [0, 6, 4], [1, 5, 7], [1, 7, 3]])
    return corners, faces


def test_p1_field_reproduces_linear_functions_and_their_gradients():
    """Node values of linear functions give exactly those functions inside (P1 exactness) with constant gradients,
    and outside too (the linear extension of the nearest tet)."""
    tm = box_tetmesh((1.0, 0.6, 0.4), (5, 3, 2), origin=(-0.5, -0.3, -0.2))
    A = np.array([[1.0, -2.0, 0.5], [0.0, 3.0, 1.0]])  # two linear fields + a constant
    W = np.column_stack([tm.nodes @ A.T + np.array([0.2, -0.1]), np.ones(tm.num_nodes)])
    f = TetSkinningField(tm.nodes, tm.tets, W)
    g = np.random.default_rng(0)
    x = g.uniform([-0.5, -0.3, -0.2], [0.5, 0.3, 0.2], (500, 3))
    Wx, dW = f.weights_and_grads(torch.from_numpy(x).float())
    want = x @ A.T + np.array([0.2, -0.1])
    np.testing.assert_allclose(Wx[:, :2].numpy(), want, atol=1e-5)
    np.testing.assert_allclose(Wx[:, 2].numpy(), 1.0, atol=1e-6)
    np.testing.assert_allclose(dW[:, :2].numpy(), np.broadcast_to(A, (500, 2, 3)), atol=1e-4)
    np.testing.assert_allclose(dW[:, 2].numpy(), 0.0, atol=1e-5)
    out = np.array([[0.55, 0.0, 0.0], [0.0, 0.1, -0.23]])  # a little beyond the +x face, below the -z face
    Wo, dWo = f.weights_and_grads(torch.from_numpy(out).float())
    np.testing.assert_allclose(Wo[:, :2].numpy(), out @ A.T + np.array([0.2, -0.1]), atol=1e-5)
    np.testing.assert_allclose(Wo[:, 2].numpy(), 1.0, atol=1e-6)
    np.testing.assert_allclose(dWo[:, :2].numpy(), np.broadcast_to(A, (2, 2, 3)), atol=1e-4)


def test_tet_basis_is_the_laplacian_eigenbasis_of_the_mesh_and_round_trips(tmp_path):
    from physskin_gs.geometry.tetmesh import tetmesh_for_shape
    from physskin_gs.physics.fem import laplacian_eigenbasis

    v, f = _cube_mesh()
    g = torch.Generator().manual_seed(0)
    vol = torch.rand(2000, 3, generator=g) - 0.5
    field, source = build_skinning("tet", vol[:500], vol, SkinningOptions(num_handles=8, mesh=(v, f)))
    assert source.startswith("tet (") and field.num_handles == 9
    tm = tetmesh_for_shape(v, f, target_nodes=3000)
    W_ref = laplacian_eigenbasis(tm, m=8)
    Wn = field.weights(torch.from_numpy(tm.nodes).float()).numpy()
    assert np.abs(Wn[:, -1] - 1).max() < 1e-6
    # the same mesh and modes: equal up to the sign of each mode (and rotations inside repeated eigenvalues,
    # which the cube has): the spans agree
    Q1, _ = np.linalg.qr(Wn)
    Q2, _ = np.linalg.qr(W_ref)
    assert np.linalg.svd(Q1.T @ Q2, compute_uv=False).min() > 0.999
    path = save_field(field, tmp_path / "tet.safetensors")
    back = load_field(path)
    x = torch.rand(300, 3, generator=g) - 0.5
    torch.testing.assert_close(back.weights_and_grads(x)[1], field.weights_and_grads(x)[1])
    with pytest.raises(OptionError, match="needs a mesh input"):
        build_skinning("tet", vol[:500], vol, SkinningOptions(num_handles=8))


def test_evaluate_and_animate_take_the_tet_basis(tmp_path, capsys):
    """``evaluate --reference fem --bases tet`` scores as the tet-mesh Laplacian row (the same surface meshed at the
    basis' 3000 nodes against the reference's 600: within 3 %), and
    ``animate --skinning tet`` on a mesh records its source; on a splat it is refused with the reason."""
    import trimesh

    from physskin_gs.cli import main

    box = trimesh.creation.box(extents=(1.0, 0.3, 0.2))
    obj = tmp_path / "bar.obj"
    box.export(obj)
    out = tmp_path / "fem.json"
    assert main(["evaluate", "--reference", "fem", "--bases", "tet", "--data", str(obj), "--nodes", "600",
                 "--modes", "6", "--json", str(out)]) == 0
    row = json.loads(out.read_text())["shapes"][0]["bases"]
    assert row["tet"]["freq_ratio_geomean"] == pytest.approx(row["laplacian-fem"]["freq_ratio_geomean"], rel=0.03)
    seq = tmp_path / "seq"
    assert main(["animate", str(obj), "--headless", "--frames", "2", "--skinning", "tet", "--export", str(seq),
                 "--mesh-gaussians", "2000", "--cubature", "256"]) == 0
    assert json.loads((seq / "sequence.json").read_text())["skinning"].startswith("tet (")
    capsys.readouterr()
    from conftest import blob_scene, save_scene_file

    src = save_scene_file(blob_scene(400, seed=1), tmp_path / "blob.ply")
    assert main(["animate", str(src), "--headless", "--frames", "2", "--skinning", "tet",
                 "--export", str(tmp_path / "x")]) == 2
    assert "needs a mesh input" in capsys.readouterr().err


def test_a_detailed_surface_is_simplified_before_tetgen_for_the_tet_basis(monkeypatch):
    """TetGen keeps every surface vertex (a 52k-face statue became 126k nodes and a 29 s build): past
    ``max_surface_faces`` the surface is simplified (QSlim) first, so the mesh has far fewer nodes and the same
    solid; the tet basis sets the limit (``TET_MAX_SURFACE_FACES`` above ``TET_SIMPLIFY_ABOVE`` faces), the FEM
    reference does not."""
    import trimesh

    import physskin_gs.model.bases as bases
    from physskin_gs.geometry.tetmesh import tetmesh_for_shape

    s = trimesh.creation.icosphere(subdivisions=4)  # 2562 vertices, 5120 faces
    v, f = np.asarray(s.vertices), np.asarray(s.faces)

    def volume(tm):
        a, b, c, d = (tm.nodes[tm.tets[:, k]] for k in range(4))
        return np.abs(np.einsum("ti,ti->t", b - a, np.cross(c - a, d - a))).sum() / 6

    exact = tetmesh_for_shape(v, f, target_nodes=600)
    assert exact.info["path"] == "tetgen" and exact.num_nodes > 2562  # every surface vertex, plus the interior
    tm = tetmesh_for_shape(v, f, target_nodes=600, max_surface_faces=1000)
    assert tm.info["path"] == "qslim+tetgen", tm.info["path_reason"]
    assert tm.info["qslim"]["faces_in"] == 5120 and tm.info["qslim"]["faces_out"] <= 1000
    assert "simplified from 5120 to" in tm.info["path_reason"]
    assert tm.num_nodes < 0.5 * exact.num_nodes
    assert abs(volume(tm) / volume(exact) - 1) < 0.02  # the same solid
    monkeypatch.setattr(bases, "TET_NODES", 600)
    monkeypatch.setattr(bases, "TET_MAX_SURFACE_FACES", 1000)
    monkeypatch.setattr(bases, "TET_SIMPLIFY_ABOVE", 1000)
    pts = torch.from_numpy(s.sample(500, seed=0)).float()
    field, source = build_skinning("tet", pts, pts, SkinningOptions(num_handles=8, mesh=(v, f)))
    assert source.startswith("tet (qslim+tetgen, "), source
    assert field.weights(pts).shape == (500, 9)


def test_tetgen_failing_on_the_simplified_surface_meshes_the_exact_one(monkeypatch):
    """TetGen can fail or stall on a simplified surface (a simplified union of two overlapping boxes stalled; a
    normalised PartNet chair at 6000 faces self-intersected): then the surface simplified to twice as many faces,
    then the exact surface is meshed as without the limit, and the info says why."""
    import trimesh

    import physskin_gs.geometry.tetmesh as tetmesh

    s = trimesh.creation.icosphere(subdivisions=4)  # 5120 faces
    real = tetmesh.tetrahedralize_surface
    seen = []

    def failing_when_simplified(v, f, **kw):
        seen.append((len(f), kw.get("timeout")))
        if len(f) < 5120:
            raise tetmesh.TetrahedralizationError("TetGen did not finish within 20 s")
        return real(v, f, **kw)

    monkeypatch.setattr(tetmesh, "tetrahedralize_surface", failing_when_simplified)
    tm = tetmesh.tetmesh_for_shape(np.asarray(s.vertices), np.asarray(s.faces), target_nodes=600,
                                   max_surface_faces=1000)
    assert tm.info["path"] == "tetgen" and tm.num_nodes > 2562  # the exact surface's every vertex
    q = tm.info["qslim"]
    assert q["tetgen_error"] == q["retry"]["tetgen_error"] == "TetGen did not finish within 20 s"
    # 1000 faces, then twice as many, then the exact 5120
    assert [n <= 1000 for n, _ in seen] == [True, False, False] and seen[1][0] <= 2000 and seen[2][0] == 5120
    assert seen[0][1] == seen[1][1] == tetmesh.SIMPLIFIED_TETGEN_TIMEOUT
    # and where only the first simplification fails, the second is meshed
    seen.clear()
    monkeypatch.setattr(tetmesh, "tetrahedralize_surface",
                        lambda v, f, **kw: (_ for _ in ()).throw(tetmesh.TetrahedralizationError("self-intersections"))
                        if len(f) <= 1000 else real(v, f, **kw))
    tm = tetmesh.tetmesh_for_shape(np.asarray(s.vertices), np.asarray(s.faces), target_nodes=600,
                                   max_surface_faces=1000)
    assert tm.info["path"] == "qslim+tetgen" and "to 2000 faces" in tm.info["path_reason"]


def test_evaluate_says_when_the_fem_reference_covers_part_of_the_shape(tmp_path, capsys):
    """Two boxes 0.5 m apart (the PartNet armchair of the corpus is two side frames 0.85 m apart, no seat): the FEM
    mesh holds the larger one only, and the scores are of that part: evaluate says so and records the share."""
    import trimesh

    from physskin_gs.cli import main

    a = trimesh.creation.box(extents=(1.0, 0.3, 0.2))
    b = trimesh.creation.box(extents=(0.8, 0.3, 0.2))
    b.apply_translation((0.0, 0.8, 0.0))
    obj = tmp_path / "two.obj"
    trimesh.util.concatenate([a, b]).export(obj)
    out = tmp_path / "fem.json"
    assert main(["evaluate", "--reference", "fem", "--bases", "rbf", "--data", str(obj), "--nodes", "600",
                 "--modes", "4", "--json", str(out)]) == 0
    shape = json.loads(out.read_text())["shapes"][0]
    assert shape["fem_covers"] == pytest.approx(1.0 / 1.8, abs=0.08)  # the larger box's share of the volume
    assert f"the FEM reference covers {shape['fem_covers']:.0%} of the shape's volume" in capsys.readouterr().out


@pytest.mark.slow
def test_ctrl_c_stops_the_surface_simplification_at_once(tmp_path):
    """QSlim of a 328k-face surface takes about 12 s in C++; in this process Ctrl-C waited for it (a fresh user's
    find). It runs in a child process: the interrupt ends the wait (and the child) within a second or two."""
    import signal
    import subprocess
    import sys
    import time

    code = ("import sys, numpy as np, trimesh\n"
            "from physskin_gs.geometry.tetmesh import _simplified\n"
            "s = trimesh.creation.icosphere(subdivisions=7)\n"
            "print('start', flush=True)\n"
            "try:\n"
            "    _simplified(s, 6000)\n"
            "except KeyboardInterrupt:\n"
            "    print('interrupted', flush=True); sys.exit(130)\n"
            "print('finished', flush=True)\n")
    import os

    # in its own process group, interrupted as a terminal's Ctrl-C does: the signal reaches the child process too
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    assert p.stdout.readline().strip() == "start"
    time.sleep(1.5)
    t0 = time.monotonic()
    os.killpg(p.pid, signal.SIGINT)
    out, err = p.communicate(timeout=60)
    waited = time.monotonic() - t0
    assert p.returncode == 130 and out.strip() == "interrupted", out + err
    assert waited < 4.0, waited
    assert "Traceback" not in err, err  # the child ignores the Ctrl-C (the parent ends it) and prints nothing


@pytest.mark.parametrize("mirrored", [False, True])
def test_lattice_point_location_matches_the_nearest_centres_path(mirrored):
    """On a voxel mesh (Kuhn tets of one grid, plain or mirrored per cube) points are located by arithmetic
    (Freudenthal's rule from the cube's start corner); the tet found holds the point, W equals the nearest-centres
    path's (the plain reference) everywhere, grad W wherever both pick the same tet (all but points on shared
    faces), and points outside every voxel fall back to it."""
    from physskin_gs.geometry.tetmesh import voxel_tetmesh

    g = np.random.default_rng(3)
    occ = g.random((7, 5, 6)) < 0.6
    occ[:, 2, :] = True  # one face-connected body through the middle
    tm = voxel_tetmesh(occ, origin=(-0.4, -0.3, 0.1), voxel=0.13, mirrored=mirrored)
    W = np.column_stack([g.standard_normal((tm.num_nodes, 4)), np.ones(tm.num_nodes)])
    f = TetSkinningField(tm.nodes, tm.tets, W)
    assert f._lattice is not None and f._lattice[1] == pytest.approx(0.13)
    assert TetSkinningField(tm.nodes + 1e-3 * g.standard_normal(tm.nodes.shape), tm.tets, W)._lattice is None
    lo, hi = tm.nodes.min(0), tm.nodes.max(0)
    x = g.uniform(lo - 0.05, hi + 0.05, (20000, 3))
    tet, b, inside = f.locate(x)
    tet_r, b_r, inside_r = f._locate_by_centres(x)
    np.testing.assert_array_equal(inside, inside_r)
    assert 0.3 < inside.mean() < 0.9  # both paths exercised (voxels and the empty space around them)
    lat = f._locate_on_lattice(x)[2]
    assert lat[inside].all() and not lat[~inside].any()  # the lattice finds every point inside, and only those
    Wx = np.einsum("nk,nkh->nh", b, W[tm.tets[tet]])
    Wr = np.einsum("nk,nkh->nh", b_r, W[tm.tets[tet_r]])
    np.testing.assert_allclose(Wx, Wr, atol=1e-10)
    assert np.all(b[inside] >= -1e-9)
    same = tet == tet_r
    assert same[inside].mean() > 0.999  # the same tet (so the same grad W) but for points on a shared face:
    assert np.all(b_r[inside & ~same].min(-1) >= -1e-9)  # those lie in both


def test_mirrored_voxel_mesh_is_conforming_and_mirror_symmetric():
    """The mirrored Kuhn split is conforming (every interior triangle shared by exactly two tets, the rest on the
    boundary of the voxels) and, with an even number of cells along an axis, maps onto itself under the mirror
    across the grid's mid-plane; the plain split does not (its diagonals all point along (1, 1, 1))."""
    from physskin_gs.geometry.tetmesh import voxel_tetmesh

    occ = np.ones((6, 4, 4), bool)

    def faces_and_tets(tm, M):
        x = np.rint((tm.nodes - tm.nodes.min(0)) / 0.1).astype(np.int64)  # integer grid corners
        top = x.max(0)
        xm = np.where(np.diag(M) < 0, top - x, x)
        tets = {tuple(sorted(map(tuple, x[t]))) for t in tm.tets}
        mirrored = {tuple(sorted(map(tuple, xm[t]))) for t in tm.tets}
        return tets, mirrored

    for mirrored in (False, True):
        tm = voxel_tetmesh(occ, origin=(0, 0, 0), voxel=0.1, mirrored=mirrored)
        tri = np.sort(tm.tets[:, [[0, 1, 2], [0, 1, 3], [0, 2, 3], [1, 2, 3]]].reshape(-1, 3), axis=1)
        _, counts = np.unique(tri, axis=0, return_counts=True)
        assert counts.max() == 2  # conforming: no triangle in three tets, no hanging faces
        assert (counts == 1).sum() == 2 * 2 * (6 * 4 + 6 * 4 + 4 * 4)  # boundary: 2 triangles per outer square
        for M in (np.diag([1, -1, 1]), np.diag([1, 1, -1]), np.diag([-1, 1, 1])):
            tets, image = faces_and_tets(tm, M)
            assert (tets == image) == mirrored


def test_voxel_cells_are_a_one_point_quadrature_of_the_cubes():
    """``voxel_cells``: one point per occupied cube at its centre, the cube's volume, W there and the mean of its 6
    P1 gradients; for node values of a linear field these are the field's value and gradient exactly. A mesh that is
    not a voxel lattice has none."""
    from physskin_gs.geometry.tetmesh import voxel_tetmesh

    g = np.random.default_rng(5)
    occ = g.random((5, 4, 3)) < 0.7
    occ[:, 1, :] = True
    tm = voxel_tetmesh(occ, origin=(0.1, -0.2, 0.3), voxel=0.05, mirrored=True)
    A = np.array([[1.0, -2.0, 0.5], [0.3, 3.0, 1.0]])
    W = np.column_stack([tm.nodes @ A.T + np.array([0.2, -0.1]), np.ones(tm.num_nodes)])
    centres, vol, Wc, Gc = TetSkinningField(tm.nodes, tm.tets, W).voxel_cells()
    assert centres.shape == (tm.tets.shape[0] // 6, 3) and vol == pytest.approx(0.05 ** 3)
    assert np.abs((centres - np.array([0.1, -0.2, 0.3])) / 0.05 % 1 - 0.5).max() < 1e-9  # cube centres
    np.testing.assert_allclose(Wc.numpy()[:, :2], centres @ A.T + np.array([0.2, -0.1]), atol=1e-6)
    np.testing.assert_allclose(Gc.numpy()[:, :2], np.broadcast_to(A, (len(centres), 2, 3)), atol=1e-5)
    np.testing.assert_allclose(Gc.numpy()[:, 2], 0.0, atol=1e-6)
    assert TetSkinningField(*_tetra_box(), np.ones((8, 1))).voxel_cells() is None


def _tetra_box():
    """A unit cube split into 5 tets (not a Kuhn lattice): nodes (8, 3), tets (5, 4)."""
    n = np.array([[x, y, z] for z in (0, 1) for y in (0, 1) for x in (0, 1)], float)
    return n, np.array([[0, 1, 2, 4], [1, 3, 2, 7], [1, 4, 5, 7], [2, 4, 6, 7], [1, 2, 4, 7]])


def test_voxel_mesh_of_random_samples_of_a_box_is_the_box():
    """Uniform random samples of a box give the box's own cells (the grid fitted to the samples' bounding box: no
    sliver cells along its faces occupied by chance), so the mesh is mirror-symmetric although the samples are not."""
    from physskin_gs.model.bases import voxel_tetmesh_of_points

    for seed in range(3):
        pts = np.random.default_rng(seed).uniform((-1.0, -0.2, -0.2), (1.0, 0.2, 0.2), (20000, 3))
        tm = voxel_tetmesh_of_points(pts, 1024)
        lo, hi = tm.nodes.min(0), tm.nodes.max(0)
        np.testing.assert_allclose(hi, (1.0, 0.2, 0.2), atol=0.01)  # the box, up to its samples' reach
        np.testing.assert_allclose(lo, (-1.0, -0.2, -0.2), atol=0.01)
        h = tm.info["voxel"]
        n = np.rint((hi - lo) / h).astype(int)
        assert np.all(n % 2 == 0) and tm.info["occupied_voxels"] == np.prod(n)  # every cell of the box, no other
        key = {tuple(np.rint((p - 0.5 * (lo + hi)) / (h / 2)).astype(int)) for p in tm.nodes}
        for M in (np.array([1, -1, 1]), np.array([1, 1, -1]), np.array([-1, 1, 1])):
            assert {tuple(np.array(k) * M) for k in key} == key


def test_a_random_splat_beam_keeps_its_symmetry_through_animate():
    """Kaolin's cantilever as random Gaussians (issue 23): the default basis's voxel cells are the cubature, so the
    reduced model is mirror-symmetric and gravity bends the beam straight down. With cubature points sampled from
    the random Gaussians (``num_cubature`` given) the two equal bendings split and the tip swings sideways."""
    from physskin_gs.pipeline import AnimationConfig, prepare_animation
    from physskin_gs.scene import GaussianScene

    g = np.random.default_rng(0)
    n = 20000  # every boundary cell of the voxel mesh holds a sample (8000 can leave one empty)
    means = torch.from_numpy(g.uniform((0.0, -0.1, -0.1), (1.0, 0.1, 0.1), (n, 3))).float()
    scene = GaussianScene(means=means, quats=torch.tensor([[1.0, 0, 0, 0]]).repeat(n, 1),
                          log_scales=torch.full((n, 3), float(np.log(0.005))), opacity_logits=torch.full((n,), 5.0),
                          sh_dc=torch.full((n, 3), 0.2), sh_rest=torch.zeros(n, 0, 3))
    tip = scene.means[:, 0] >= 0.98

    def swing(**kw):
        cfg = AnimationConfig(dt=0.05, E=1e5, nu=0.45, density=500, damping=0, friction=0, floor=False, up="z",
                              scale=1.0, pin="box:-1,-1,-1,0.02,1,1", select="all", **kw)
        anim = prepare_animation(scene, cfg)
        y, z = [], []
        for _ in range(25):
            anim.step()
            d = anim.deformed_rows()["means"].double()[tip].mean(0) - scene.means.double()[tip].mean(0)
            y.append(abs(float(d[1])))
            z.append(float(d[2]))
        return anim.info["cubature"], max(y), min(z)

    rule, y, z = swing()
    assert rule == "voxel cells" and z < -0.5 and y < 2e-4  # sags 0.5+ m, sideways < 0.2 mm
    rule, y_s, z_s = swing(num_cubature=1024)
    assert rule == "samples" and z_s < -0.5 and y_s > 10 * y


def test_fill_notches_fills_sampling_holes_not_gaps():
    """An empty voxel with 4 or more occupied face neighbours (a notch in a face or an edge of a sampled solid) is
    filled; a corner (3) and a one-voxel gap between two slabs (2) are not."""
    from physskin_gs.model.bases import fill_notches

    occ = np.zeros((8, 8, 8), bool)
    occ[1:7, 1:7, 1:7] = True
    holes = [(3, 3, 1), (4, 1, 3), (1, 1, 4)]  # a face notch (5 neighbours), another, an edge notch (4)
    for h in holes:
        occ[h] = False
    occ[1, 1, 1] = occ[6, 6, 6] = False  # corners (3)
    out = fill_notches(occ)
    assert all(out[h] for h in holes) and not out[1, 1, 1] and not out[6, 6, 6]
    assert (out & ~occ).sum() == len(holes)
    slabs = np.zeros((7, 7, 7), bool)
    slabs[1:6, 1:6, 1:3] = slabs[1:6, 1:6, 4:6] = True  # two slabs one empty layer apart
    np.testing.assert_array_equal(fill_notches(slabs), slabs)


@pytest.mark.parametrize("seed", range(6))
def test_bridging_on_the_voxel_graph_is_the_dilation_reference(seed):
    """The bridges that join an occupancy's fragments (glue_occupancy), searched on the graph of the allowed voxels,
    are the full-grid dilation reference's, voxel for voxel and count for count: random scattered occupancies
    with holes in what the bridges may cross (a cloud of 500 scattered Gaussians took 82 s in the reference's
    searches, 5 s now)."""
    from scipy import ndimage

    from physskin_gs.geometry.tetmesh import _bridge_components, _bridge_components_reference

    rng = np.random.default_rng(seed)
    shape = tuple(int(v) for v in rng.integers(10, 36, size=3))
    x = rng.random(shape) < rng.uniform(0.02, 0.12)
    allowed = (ndimage.binary_dilation(x, iterations=int(rng.integers(1, 4))) & (rng.random(shape) < 0.9)) | x
    ref, n_ref = _bridge_components_reference(x, allowed)
    got, n_got = _bridge_components(x, allowed)
    assert n_ref > 0 and n_got == n_ref
    np.testing.assert_array_equal(got, ref)
