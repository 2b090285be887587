"""Tests for physskin_gs.io.mesh.load_mesh: formats, welding, and clear errors for bad input."""

from __future__ import annotations

import numpy as np
import pytest
import trimesh

from physskin_gs.errors import SceneFormatError
from physskin_gs.io.mesh import Mesh, load_mesh

# Welded vertex / face counts from ../shared/data/SOURCES.md (V welded, F).
WELDED = {
    "c3d_spot.obj": (2930, 5856),
    "pybullet_duck.obj": (2108, 4212),  # UV seams
    "pybullet_torus.obj": (501, 1002),  # UV seams
    "robosuite_lemon.stl": (266, 528),  # STL soup
    "robosuite_bread.stl": (54, 104),
    "pyvista_ant.ply": (486, 912),
    "kaolin_simple_muscle.obj": (4624, 9112),
}


@pytest.mark.parametrize("name", sorted(WELDED))
def test_shared_meshes_weld_to_documented_counts(mesh_file, name):
    m = load_mesh(mesh_file(name))
    assert (m.num_vertices, m.num_faces) == WELDED[name]
    assert m.vertices.dtype == np.float32 and m.faces.dtype == np.int64
    assert m.name == name


def test_every_shared_mesh_loads(meshes_dir):
    for path in sorted(meshes_dir.iterdir()):
        m = load_mesh(path)
        assert m.num_faces > 0 and np.isfinite(m.vertices).all(), path.name


def test_welded_closed_meshes_are_watertight(meshes_dir):
    for name in ["c3d_spot.obj", "pybullet_duck.obj", "robosuite_lemon.stl", "pybullet_soccerball.obj"]:
        assert load_mesh(meshes_dir / name).to_trimesh().is_watertight, name


def test_formats_round_trip(tmp_path):
    box = trimesh.creation.box(extents=(1.0, 2.0, 3.0))
    for ext in ["stl", "glb", "off", "ply", "obj"]:
        path = tmp_path / f"box.{ext}"
        box.export(path)
        m = load_mesh(path)
        assert m.num_faces == 12 and m.num_vertices == 8, ext
        np.testing.assert_allclose(m.vertices.max(axis=0) - m.vertices.min(axis=0), [1, 2, 3], atol=1e-6)
        assert abs(m.to_trimesh().volume - 6.0) < 1e-5, ext


def test_obj_with_missing_mtl_loads(tmp_path):
    path = tmp_path / "tri.obj"
    path.write_text("mtllib not_there.mtl\nusemtl stuff\nv 0 0 0\nv 1 0 0\nv 0 1 0\nv 0 0 1\n"
                    "f 1 3 2\nf 1 2 4\nf 1 4 3\nf 2 3 4\n")
    m = load_mesh(path)
    assert (m.num_vertices, m.num_faces) == (4, 4)


def test_non_finite_vertices_are_dropped(tmp_path):
    path = tmp_path / "nan.obj"
    path.write_text("v 0 0 0\nv 1 0 0\nv 0 1 0\nv nan 0 0\nv 0 0 1\nf 1 2 3\nf 1 2 4\nf 1 2 5\n")
    m = load_mesh(path)
    assert np.isfinite(m.vertices).all()
    assert m.num_faces == 2 and m.num_vertices == 4


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.obj"):
        load_mesh(tmp_path / "nope.obj")


def test_empty_file(tmp_path):
    path = tmp_path / "empty.obj"
    path.write_bytes(b"")
    with pytest.raises(SceneFormatError, match="empty.obj.*empty"):
        load_mesh(path)


@pytest.mark.parametrize("name,text", [
    ("garbage.obj", "this is not\na mesh at all\n"),
    ("cloud.obj", "v 0 0 0\nv 1 0 0\nv 0 1 0\n"),  # vertices but no faces: a point cloud
])
def test_unreadable_obj_is_rejected(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(SceneFormatError, match=name.replace(".", r"\.")):
        load_mesh(path)


def test_point_cloud_ply_is_rejected(tmp_path):
    path = tmp_path / "cloud.ply"
    pts = np.random.default_rng(0).random((10, 3)).astype(np.float32)
    trimesh.PointCloud(pts).export(path)
    with pytest.raises(SceneFormatError, match="cloud.ply.*point cloud"):
        load_mesh(path)


def test_gaussian_files_point_to_load_scene(inria_sh3, splat_file):
    """An INRIA PLY, a .splat and a compressed PLY (shared lego / guitar, else the licence-clean ones)."""
    inria = inria_sh3("lego_gsplat_sh3.ply").path
    compressed = splat_file("guitar_playcanvas.compressed.ply", fallback="playcanvas_test_sh.compressed.ply")
    for path in [inria, splat_file("spot_mesh2splat_10k.splat"), compressed]:
        with pytest.raises(SceneFormatError, match=f"{path.name}.*load_scene"):
            load_mesh(path)


def test_unknown_extension(tmp_path):
    path = tmp_path / "x.xyz"
    path.write_text("1 2 3\n")
    with pytest.raises(SceneFormatError, match="x.xyz.*unsupported"):
        load_mesh(path)


def test_mesh_validates_shapes():
    with pytest.raises(ValueError):
        Mesh(np.zeros((3, 2)), np.zeros((1, 3)))
    with pytest.raises(ValueError):
        Mesh(np.zeros((3, 3)), np.array([[0, 1, 5]]))


def _reclining_chair():
    """An L-shaped chair standing along +y (a seat slab on four legs and a tall back): it rests more stably lying on
    its back (+z up) than on its legs."""
    import trimesh

    seat = trimesh.creation.box(extents=(1.0, 0.15, 1.0))
    seat.apply_translation((0.0, 0.4, 0.0))
    back = trimesh.creation.box(extents=(1.0, 1.6, 0.15))
    back.apply_translation((0.0, 0.8, -0.45))
    legs = [trimesh.creation.box(extents=(0.08, 0.4, 0.08)) for _ in range(4)]
    for leg, (x, z) in zip(legs, [(-0.45, -0.45), (0.45, -0.45), (-0.45, 0.45), (0.45, 0.45)]):
        leg.apply_translation((x, 0.2, z))
    return trimesh.util.concatenate([seat, back, *legs])


def test_a_gltf_mesh_is_up_along_y_by_its_specification(tmp_path):
    """glTF fixes +y as up; the stable-base evidence (which lays a reclining or tall object on its back: a Kenney
    desk chair came out +z up, a fresh user's find) must not override it. The same shape as OBJ (no convention)
    may still be judged by its stable base; the glTF one is +y, and the log says why."""
    from physskin_gs.pipeline import analyze_for_animation, load_for_animation

    chair = _reclining_chair()
    glb = tmp_path / "chair.glb"
    chair.export(glb)
    scene = load_for_animation(glb, num_mesh_gaussians=4000)
    assert scene.up_hint == (0.0, 1.0, 0.0)
    a = analyze_for_animation(scene)
    assert np.allclose(np.asarray(a.up, dtype=float), [0.0, 1.0, 0.0], atol=1e-6)
    obj = tmp_path / "chair.obj"
    chair.export(obj)
    assert load_for_animation(obj, num_mesh_gaussians=4000).up_hint is None


def test_triangle_strips_keep_their_winding_and_restart_at_minus_one():
    from physskin_gs.io.mesh import strips_to_triangles

    # a ribbon: top vertices 0, 2, 4, ... at y = 1, bottom 1, 3, 5, ... at y = 0, x = k // 2
    n = 10
    v = np.array([[k // 2, 1 - k % 2, 0.0] for k in range(n)])
    t = strips_to_triangles([np.arange(n)])
    assert t.shape == (n - 2, 3)
    normals = np.cross(v[t[:, 1]] - v[t[:, 0]], v[t[:, 2]] - v[t[:, 0]])
    assert np.all(normals[:, 2] == normals[0, 2]) and normals[0, 2] != 0  # one winding throughout
    # -1 starts a new strip; a repeated index (a stripper's join) gives no triangle
    t2 = strips_to_triangles([np.array([0, 1, 2, 3, -1, 4, 5, 6, 6, 7])])
    assert [tuple(x) for x in t2] == [(0, 1, 2), (2, 1, 3), (4, 5, 6)]
    assert strips_to_triangles([np.array([0, 1, -1])]).shape == (0, 3)


def test_a_tristrips_ply_loads_as_its_closed_surface(tmp_path):
    """A PLY with a ``tristrips`` element (Stanford-style scans such as igea; trimesh reads no faces from it, and
    the load said "a point cloud") gives the same closed, outward surface as its faces."""
    import trimesh
    from plyfile import PlyData, PlyElement

    from physskin_gs.io.mesh import load_mesh

    box = trimesh.creation.box(extents=(1.0, 2.0, 3.0))
    f = np.asarray(box.faces)
    # one strip list: every triangle of the box, each its own strip, separated by -1
    strips = np.empty(1, dtype=[("vertex_indices", "O")])
    strips["vertex_indices"][0] = np.array([int(i) for tri in f for i in list(tri) + [-1]], np.int32)
    verts = np.array([tuple(p) for p in box.vertices], dtype=[("x", "f4"), ("y", "f4"), ("z", "f4")])
    path = tmp_path / "box_strips.ply"
    PlyData([PlyElement.describe(verts, "vertex"),
             PlyElement.describe(strips, "tristrips", val_types={"vertex_indices": "i4"})]).write(str(path))
    m = load_mesh(str(path))
    assert m.faces.shape == (12, 3)
    back = trimesh.Trimesh(m.vertices, m.faces, process=False)
    assert back.is_watertight and back.volume == pytest.approx(6.0, rel=1e-5)  # outward: positive volume


def test_a_mesh_keeps_its_plus_y_when_it_can_stand_that_way(tmp_path):
    """Meshes are modelled standing in their +y convention: a chair rests more stably on its back, yet is kept +y up
    because its centre of mass lies over its legs (and marked unsure, naming --up, since the more stable pose is on
    another axis; a cup more stable only upside down is sure: test_scene_analysis); a z-up file seen +y up that cannot stand that way (a cone on its side touches along a line) gets
    the axis it stands on (+z), as before. On the gathered meshes: the cups, bowls, plates and tables of the corpus
    came out upside down, the PartNet chair on its back and a figure lying down."""
    import trimesh

    from physskin_gs.pipeline import analyze_for_animation, load_for_animation

    # the reclining chair as an OBJ: it rests more stably on its back (+z), stands on its legs (+y)
    path = tmp_path / "chair.obj"
    _reclining_chair().export(path)
    a = analyze_for_animation(load_for_animation(path, num_mesh_gaussians=4000))
    assert np.allclose(np.asarray(a.up, float), [0, 1, 0], atol=1e-6), (a.up, a.reason)
    assert a.unsure and "can stand that way" in a.reason and "+z up" in a.reason
    # a cone standing on its base along +z: seen +y up it lies on its side
    cone = trimesh.creation.cone(radius=0.5, height=1.5, sections=48)
    path = tmp_path / "cone.obj"
    cone.export(path)
    a = analyze_for_animation(load_for_animation(path, num_mesh_gaussians=4000))
    assert np.allclose(np.asarray(a.up, float), [0, 0, 1], atol=1e-6), (a.up, a.reason)


def test_a_mesh_is_the_object_no_part_of_it_is_a_support(tmp_path):
    """A mesh is one object: a flat part of it is not a floor to keep static (a chair's base, a scorpion's feet and
    a hand's palm were, and half of each mesh stood still). A post on a wide base plate: every row moves."""
    import trimesh

    from physskin_gs.pipeline import analyze_for_animation, load_for_animation

    plate = trimesh.creation.box(extents=(2.0, 0.05, 2.0))
    post = trimesh.creation.box(extents=(0.3, 1.0, 0.3))
    post.apply_translation((0.0, 0.525, 0.0))
    path = tmp_path / "post_on_plate.obj"
    trimesh.util.concatenate([plate, post]).export(path)
    scene = load_for_animation(path, num_mesh_gaussians=4000)
    a = analyze_for_animation(scene)
    assert a.up_source != "support-plane" and not np.asarray(a.support).any()
    assert np.asarray(a.object).all(), int(np.asarray(a.object).sum())
    assert np.allclose(np.asarray(a.up, float), [0, 1, 0], atol=1e-6)


# ------------------------------------------------------------------------------------------ colour
def _box_with_vertex_colours(inverted: bool = False, uniform: bool = False) -> trimesh.Trimesh:
    box = trimesh.creation.box(extents=(1.0, 1.0, 1.0))
    if inverted:
        box.invert()
    # corners on +x red, on -x blue (an exact, checkable colour field), or every corner red
    vc = np.where((box.vertices[:, :1] > 0) | uniform, [255, 0, 0, 255], [0, 0, 255, 255]).astype(np.uint8)
    box.visual = trimesh.visual.ColorVisuals(box, vertex_colors=vc)
    return box


def test_vertex_colours_survive_welding_and_cleaning(tmp_path):
    """A PLY with vertex colours keeps them per face through the weld (a degenerate face added first is dropped,
    so the colours must follow the kept faces); interpolated at barycentric points they are exact."""
    box = _box_with_vertex_colours()
    faces = np.concatenate([[[0, 0, 1]], box.faces])  # a degenerate face first: dropped by the cleaning
    m0 = trimesh.Trimesh(box.vertices, faces, vertex_colors=box.visual.vertex_colors, process=False)
    path = tmp_path / "box.ply"
    m0.export(path)
    m = load_mesh(path)
    assert m.num_faces == 12 and m.colours is not None and m.colours.corner_rgb.shape == (12, 3, 3)
    x = m.vertices[m.faces].mean(axis=1)[:, 0]  # [F] face centre's x
    rgb = m.colours.at(np.arange(12), np.full((12, 3), 1.0 / 3.0))
    corners_x = m.vertices[m.faces][:, :, 0]  # [F, 3]
    expect_red = (corners_x > 0).mean(axis=1)  # the share of red corners
    np.testing.assert_allclose(rgb[:, 0], expect_red, atol=1e-6)
    np.testing.assert_allclose(rgb[:, 2], 1.0 - expect_red, atol=1e-6)
    assert np.all(rgb[x > 0.49, 0] == 1.0)  # the +x face is all red


def test_texture_colours_of_a_gltf(tmp_path):
    """A glTF quad textured with a 2 x 1 image (left texel red, right blue) and a base colour factor of 0.5: points
    on the left half of the UV square are half red, on the right half blue (the factor multiplies the texture,
    as glTF specifies)."""
    from PIL import Image

    img = Image.fromarray(np.array([[[255, 0, 0], [0, 0, 255]]], dtype=np.uint8))
    v = np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]], dtype=np.float64)
    f = np.array([[0, 1, 2], [0, 2, 3]])
    uv = v[:, :2].copy()
    mat = trimesh.visual.material.PBRMaterial(baseColorTexture=img, baseColorFactor=[0.5, 0.5, 0.5, 1.0])
    quad = trimesh.Trimesh(v, f, visual=trimesh.visual.TextureVisuals(uv=uv, material=mat), process=False)
    path = tmp_path / "quad.glb"
    quad.export(path)
    m = load_mesh(path)
    assert m.colours is not None and m.colours.corner_uv is not None
    np.testing.assert_allclose(m.colours.factor, 0.5, atol=1e-2)
    # sample points at known x: x < 0.5 reads the red texel, x > 0.5 the blue one
    from physskin_gs.geometry.sampling import sample_surface_faces

    pts, _, face, bary = sample_surface_faces(m.vertices, m.faces, 400, seed=1)
    rgb = m.colours.at(face, bary)
    left, right = pts[:, 0] < 0.45, pts[:, 0] > 0.55
    assert left.sum() > 100 and right.sum() > 100
    assert np.abs(rgb[left] - [0.5, 0.0, 0.0]).max() < 1e-2 and np.abs(rgb[right] - [0.0, 0.0, 0.5]).max() < 1e-2


def test_an_obj_whose_material_file_is_missing_has_no_colour(tmp_path):
    """trimesh stands in a default grey for a missing .mtl: that is not the model's colour (the animation then
    uses its own clay colour)."""
    path = tmp_path / "tri.obj"
    path.write_text("mtllib gone.mtl\nv 0 0 0\nv 1 0 0\nv 0 1 0\nusemtl skin\nf 1 2 3\n")
    assert load_mesh(path).colours is None


def test_an_obj_with_texture_coordinates_and_no_material_library_has_no_colour(tmp_path):
    """An OBJ with ``vt`` lines and no ``mtllib`` (the shared Spot mesh) got trimesh's default grey material, 0.39:
    the cow rendered near-black and its exported frames carried grey vertex colours. It has no colour now (the
    clay); an OBJ with ``v x y z r g b`` colours and no ``vt`` keeps them."""
    path = tmp_path / "uv.obj"
    path.write_text("v 0 0 0\nv 1 0 0\nv 0 1 0\nvt 0 0\nvt 1 0\nvt 0 1\nf 1/1 2/2 3/3\n")
    assert load_mesh(path).colours is None
    coloured = tmp_path / "rgb.obj"
    coloured.write_text("v 0 0 0 1 0 0\nv 1 0 0 1 0 0\nv 0 1 0 1 0 0\nf 1 2 3\n")
    c = load_mesh(coloured).colours
    assert c is not None and np.allclose(c.at(np.array([0]), np.array([[1 / 3, 1 / 3, 1 / 3]])), [[1.0, 0.0, 0.0]])


def test_a_ply_with_texture_coordinates_but_no_texture_has_no_colour(tmp_path):
    """A PLY with UVs and no ``comment TextureFile`` (or one naming a missing image) gets trimesh's stand-in grey
    image: no colour (the clay); with the named image beside it, the texture's colour is read."""
    import trimesh
    from PIL import Image

    box = trimesh.creation.box()
    box.visual = trimesh.visual.TextureVisuals(uv=np.full((len(box.vertices), 2), 0.5))
    plain = tmp_path / "uv.ply"
    box.export(plain)
    assert load_mesh(plain).colours is None
    data = plain.read_bytes()
    head = data.index(b"element vertex")
    named = tmp_path / "named.ply"
    named.write_bytes(data[:head] + b"comment TextureFile tex.png\n" + data[head:])
    assert load_mesh(named).colours is None  # the image is not there
    Image.new("RGB", (4, 4), (200, 20, 20)).save(tmp_path / "tex.png")
    m = load_mesh(named)
    rgb = m.colours.at(np.zeros(5, np.int64), np.full((5, 3), 1 / 3))
    np.testing.assert_allclose(rgb, np.tile([200 / 255, 20 / 255, 20 / 255], (5, 1)), atol=1e-2)


@pytest.mark.parametrize("inverted", [False, True], ids=["outward", "inward"])
def test_mesh_gaussians_carry_the_colour_shaded_from_above(tmp_path, inverted):
    """load_for_animation colours a mesh's Gaussians with the file's colour times the Lambert factor of a light
    from above (MESH_LIGHT, +y mostly): on the colour box, the top face's Gaussians are brighter than the
    bottom's (ambient only), exactly by the formula; a box wound inward is shaded the same (its normals are
    turned outward first)."""
    from physskin_gs.pipeline import MESH_LIGHT, load_for_animation

    path = tmp_path / "box.ply"
    _box_with_vertex_colours(inverted, uniform=True).export(path)
    scene = load_for_animation(path, num_mesh_gaussians=3000)
    rgb = (scene.sh_dc * 0.28209479177387814 + 0.5).numpy()  # [N, 3] SH degree 0 -> RGB
    from physskin_gs.scene import quat_to_rotmat

    ny = np.abs(quat_to_rotmat(scene.quats)[:, 1, 2].numpy())  # [N] |y| of each flat Gaussian's normal (its z)
    y = scene.means[:, 1].numpy()
    light = np.asarray(MESH_LIGHT) / np.linalg.norm(MESH_LIGHT)
    top, bottom = (y > 0.499) & (ny > 0.99), (y < -0.499) & (ny > 0.99)  # on the top / bottom faces
    assert top.sum() > 100 and bottom.sum() > 100
    np.testing.assert_allclose(rgb[bottom, 0], 0.4, atol=1e-4)  # ambient alone
    np.testing.assert_allclose(rgb[top, 0], 0.4 + 0.6 * light[1], atol=1e-4)
    assert np.all(rgb[top | bottom, 1] < 1e-4)  # pure red stays red


def test_obj_frames_carry_vertex_colours_and_outward_normals(tmp_path):
    """write_obj writes the file's colours as ``v x y z r g b`` (read back by trimesh) and unit vertex normals
    pointing out of a closed, outward-wound box; Mesh.vertex_rgb gives a vertex the colour of its corners."""
    from physskin_gs.cli.animate import write_obj

    path = tmp_path / "box.ply"
    _box_with_vertex_colours().export(path)
    m = load_mesh(path)
    rgb = m.vertex_rgb()
    np.testing.assert_allclose(rgb, np.where(m.vertices[:, :1] > 0, [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]), atol=1e-6)
    out = tmp_path / "frame0001.obj"
    write_obj(out, m.vertices, m.faces, rgb)
    back = trimesh.load(str(out), process=False)
    assert back.visual.kind == "vertex"
    np.testing.assert_array_equal(np.asarray(back.visual.vertex_colors)[:, :3], np.round(rgb * 255).astype(np.uint8))
    vn = np.array([[float(t) for t in ln.split()[1:]] for ln in out.read_text().splitlines() if ln.startswith("vn ")])
    assert vn.shape == (8, 3)
    np.testing.assert_allclose(np.linalg.norm(vn, axis=1), 1.0, atol=1e-5)
    assert np.all(np.einsum("ij,ij->i", vn, m.vertices) > 0)  # outward at every corner


def test_exported_frames_keep_the_files_vertices_colours_and_hard_edges(tmp_path, capsys):
    """A flat-shaded box whose top is red (36 vertices, three per face, as low-poly exports are): loading welds
    it to 8 vertices for the physics, but the exported frames keep the file's 36 vertices in file order, so no
    colour bleeds across the top's edges (the red top and grey sides meet at shared positions) and every normal
    is its face's (flat, not averaged): a fresh user's find on glTF models."""
    from physskin_gs.cli import main

    box = trimesh.creation.box(extents=(1.0, 1.0, 1.0))
    tri = box.vertices[box.faces]  # [12, 3, 3]
    V = tri.reshape(-1, 3)
    F = np.arange(36).reshape(12, 3)
    top = box.face_normals[:, 1] > 0.5  # [12]
    vc = np.repeat(np.where(top[:, None], [230, 20, 20, 255], [128, 128, 128, 255]), 3, axis=0).astype(np.uint8)
    src = tmp_path / "box.ply"
    trimesh.Trimesh(V, F, vertex_colors=vc, process=False).export(src)
    m = load_mesh(src)
    assert m.num_vertices == 8 and m.export_layout()[0].shape == (36,)
    np.testing.assert_array_equal(m.vertices[m.export_layout()[0]], V.astype(np.float32))  # file order
    out = tmp_path / "frames"
    assert main(["animate", str(src), "--headless", "--frames", "1", "--export", str(out), "--cubature", "64",
                 "--mesh-gaussians", "2000"]) == 0
    capsys.readouterr()
    lines = (out / "frame0001.obj").read_text().splitlines()
    v = np.array([[float(t) for t in ln.split()[1:]] for ln in lines if ln.startswith("v ")])
    vn = np.array([[float(t) for t in ln.split()[1:]] for ln in lines if ln.startswith("vn ")])
    assert v.shape == (36, 6) and vn.shape == (36, 3)
    np.testing.assert_allclose(v[:, 3:], vc[:, :3] / 255.0, atol=1e-4)  # no colour bleeds across the edges
    frame = v[:, :3][F]  # [12, 3, 3] the frame's faces
    fn = np.cross(frame[:, 1] - frame[:, 0], frame[:, 2] - frame[:, 0])
    fn /= np.linalg.norm(fn, axis=1, keepdims=True)
    np.testing.assert_allclose(vn.reshape(12, 3, 3), np.repeat(fn[:, None], 3, axis=1), atol=1e-5)  # flat


def test_exported_normals_stay_smooth_across_uv_seams(tmp_path):
    """A smooth sphere cut along a UV seam (its file vertices doubled on the seam): the exported normals are the
    welded mesh's smooth ones on both sides of the seam (within a degree of the radial direction), not the hard
    edge a normal from each side's faces alone would draw there."""
    sphere = trimesh.creation.uv_sphere(radius=1.0, count=[24, 24])
    V, F = sphere.vertices.copy(), sphere.faces.copy()
    seam = np.flatnonzero((np.abs(V[:, 1]) < 1e-9) & (V[:, 0] > 0))  # the meridian at +x
    dup = np.arange(V.shape[0], V.shape[0] + seam.shape[0])
    V = np.concatenate([V, V[seam]])
    cent = V[F].mean(axis=1)  # faces on the -y side of the seam take the duplicated copies
    side = cent[:, 1] < 0
    lookup = dict(zip(seam.tolist(), dup.tolist()))
    F = np.where(side[:, None], np.vectorize(lambda i: lookup.get(i, i))(F), F)
    path = tmp_path / "sphere.ply"
    trimesh.Trimesh(V, F, process=False).export(path)
    m = load_mesh(path)
    vertex, faces = m.export_layout()
    assert vertex.shape[0] == V.shape[0] > m.num_vertices
    n = m.export_normals(m.vertices)  # [S, 3] in file order (every file vertex is used)
    np.testing.assert_allclose(n[seam], n[dup], atol=1e-9)  # one normal on both sides of the seam
    from physskin_gs.io.mesh import area_weighted_normals

    one_sided = area_weighted_normals(m.vertices[vertex], faces)  # each side's own faces: a crease at the seam
    angle = lambda a, b: np.degrees(np.arccos(np.clip(np.einsum("sc,sc->s", a, b), -1.0, 1.0)))  # noqa: E731
    ring = seam[np.abs(V[seam, 2]) < 0.9]  # away from the poles
    radial = V[ring] / np.linalg.norm(V[ring], axis=1, keepdims=True)
    assert angle(n[ring], radial).max() < 0.5 and angle(one_sided[ring], radial).mean() > 3.0


def test_a_mesh_with_no_seams_keeps_its_vertex_order_in_exported_frames(tmp_path):
    """Welding sorts the vertices by position even where it merges none; the file's layout was kept only when the
    count changed, so a seamless OBJ's frames came out sorted by x, its faces renumbered (a fresh user's cat: frame
    1's vertex 1 was another vertex), useless as a morph target of the original. Now the layout is the file's
    whenever the welded order differs: vertex k of a frame is the file's vertex k."""
    sphere = trimesh.creation.icosphere(subdivisions=2)  # no duplicated positions
    rng = np.random.default_rng(0)
    perm = rng.permutation(sphere.vertices.shape[0])  # a file order that is not sorted
    inv = np.argsort(perm)
    V, F = sphere.vertices[perm], inv[sphere.faces]
    path = tmp_path / "ball.obj"
    trimesh.Trimesh(V, F, process=False).export(path)
    m = load_mesh(path)
    assert m.num_vertices == V.shape[0]  # nothing welded
    vertex, faces = m.export_layout()
    np.testing.assert_allclose(m.vertices[vertex], V, atol=1e-6)  # the file's order
    np.testing.assert_array_equal(faces, F)


def test_non_finite_vertices_are_dropped_with_a_warning(tmp_path):
    """A vertex with a NaN coordinate, and the faces that use it, are dropped (a surface cannot hold them); a fresh
    user's tetrahedron came back as one triangle with no word of it. Now a SceneWarning counts both."""
    from physskin_gs.io.ply_header import SceneWarning

    path = tmp_path / "nan.obj"
    path.write_text("v 0 0 0\nv 1 0 0\nv 0 1 0\nv nan 0 1\nf 1 2 3\nf 1 2 4\nf 2 3 4\nf 1 3 4\n")
    with pytest.warns(SceneWarning, match="1 vertices with non-finite coordinates dropped, and the 3 faces"):
        m = load_mesh(path)
    assert m.num_vertices == 3 and m.faces.shape[0] == 1
