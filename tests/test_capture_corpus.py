"""The scene analysis on captures nobody tuned it for: real captures and generated hard ones (issue 22).

* The committed real capture (``data/captures/tarot_box_on_paper_padilla.splat``, CC-BY-4.0): support, up, the object
  moving and resting on its paper, the paper static.
* The local corpus of real captures (``docs/captures.md``; not committed: most are unlicensed or not clearly
  licensed). Its folder is ``$PHYSSKIN_CAPTURES`` or ``corpus/captures`` in the checkout, with the ``manifest.json``
  the survey wrote; the tests skip without it. Every capture with a known up axis must come out within 5 degrees
  of it, or say it is unsure: never silently wrong (the known misses are listed with their reason).
* Generated hard captures (``scripts/make_hard_captures.py``: supports 1.1-1.5x the footprint, cut off, layered,
  noisy, tilted, walls, two objects, fused bases, random frames).
* :mod:`physskin_gs.geometry.upright` against analytic stability margins.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import sys

import numpy as np
import pytest
import torch

from conftest import DATA_DIR, REPO_ROOT

TAROT = DATA_DIR / "captures" / "tarot_box_on_paper_padilla.splat"
CORPUS = __import__("pathlib").Path(os.environ.get("PHYSSKIN_CAPTURES", REPO_ROOT / "corpus" / "captures"))
MANIFEST = CORPUS / "manifest.json"

#: Captures of the corpus the analysis still gets wrong without saying so, and why (the synthetic chair with no
#: floor still lies on its back, but says it is unsure: its back turns it upside down against the .splat
#: convention).
KNOWN_SILENT_MISSES: dict = {}  # (the owl photo relief, lying flat, is now said to be unsure: upright.FLAT_SLAB)


def _angle(a, b) -> float:
    a, b = np.asarray(a, float), np.asarray(b, float)
    return math.degrees(math.acos(float(np.clip(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)), -1.0, 1.0))))


def _axis(text) -> np.ndarray:
    """The manifest's up axis: an axis name ("-y", "+z (...)") or a list of 3 numbers (a tilted capture)."""
    if isinstance(text, (list, tuple)):
        v = np.asarray(text, dtype=float)
        return v / np.linalg.norm(v)
    t = text.strip().lower().split()[0]
    v = np.zeros(3)
    v["xyz".index(t.lstrip("+-"))] = -1.0 if t.startswith("-") else 1.0
    return v


def _generator():
    """scripts/make_hard_captures.py as a module (imported by name so its dataclasses find their module)."""
    if str(REPO_ROOT / "scripts") not in sys.path:
        sys.path.insert(0, str(REPO_ROOT / "scripts"))
    return importlib.import_module("make_hard_captures")


# ------------------------------------------------------------------------------------------ committed capture
def test_tarot_box_stands_on_its_paper_and_rests_there():
    """A real phone capture (card box on a round paper mat cut to about 4x its footprint, -y up): the mat is the
    support (up within 1 degree of -y), the box moves, the mat stays; after 30 frames of the defaults the box's
    lowest point is within 2 % of its height of the mat and no static row has moved."""
    from physskin_gs.io import load_scene
    from physskin_gs.pipeline import AnimationConfig, prepare_animation

    scene = load_scene(TAROT)
    anim = prepare_animation(scene, AnimationConfig())
    sa = anim.info["scene_analysis"]
    assert sa["up_source"] == "support-plane" and not sa["unsure"], sa["summary"]
    up = anim.up_vector.double()
    assert _angle(up.numpy(), [0.0, -1.0, 0.0]) < 1.0
    means = scene.means.double()
    h = means @ up
    support = float(anim.support_height)
    mat = (h - support).abs() < 0.005 * float(h.max() - h.min())  # the mat's own layer
    assert mat.sum() > 10_000 and float(anim.moving[mat].float().mean()) < 0.05  # (the box's own bottom rim)
    box_h = h[anim.moving]
    height = float(torch.quantile(box_h, 0.995) - torch.quantile(box_h, 0.005))
    assert 0.5 * (h.max() - h.min()) < height  # the box is most of the capture's height
    anim.step(29)
    now = anim.deformed_scene().means.double()
    low = float(torch.quantile(now[anim.moving] @ up, 0.005))
    assert abs(low - support) < 0.02 * height, (low - support) / height
    assert torch.equal(now[~anim.moving], means[~anim.moving])
    # the headless video draws the captured mat as it is: no checker floor over it (a checker at a support's top
    # hid a captured pavement; a fresh user's find); a scene with no support keeps the checker
    from physskin_gs.cli.animate import OrbitVideo

    assert OrbitVideo(anim, 64, 64, 2, 0.0).floor is None
    spot = prepare_animation(load_scene(DATA_DIR / "spot_mesh2splat_10k.splat"), AnimationConfig(num_cubature=64))
    assert spot.info["scene_analysis"]["counts"]["support"] == 0 and OrbitVideo(spot, 64, 64, 2, 0.0).floor is not None


# ------------------------------------------------------------------------------------------ local corpus
def _corpus_entries():
    if not MANIFEST.is_file():
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"no capture corpus at {CORPUS} (set "
                                                                 "PHYSSKIN_CAPTURES; docs/captures.md lists it)"))]
    out = []
    for e in json.loads(MANIFEST.read_text()):
        if str(e.get("up_axis", "unsure")).startswith("unsure"):
            continue
        marks = []
        if e["file"] in KNOWN_SILENT_MISSES:
            marks.append(pytest.mark.xfail(reason=KNOWN_SILENT_MISSES[e["file"]], strict=True))
        out.append(pytest.param(e, id=e["file"].split(".")[0], marks=marks))
    return out


@pytest.mark.parametrize("entry", _corpus_entries())
def test_corpus_capture_is_upright_or_says_it_is_unsure(entry):
    from physskin_gs.io import load_scene
    from physskin_gs.pipeline import analyze_for_animation

    path = CORPUS / entry["file"]
    if not path.is_file():
        pytest.skip(f"{path} not in the local corpus")
    a = analyze_for_animation(load_scene(path))
    err = _angle(a.up, _axis(entry["up_axis"]))
    assert err <= 5.0 or a.unsure, f"{err:.1f} degrees off and sure: {a.summary()}"
    if entry.get("on_support") and a.plane is not None:  # the object moves, its support stays
        assert a.support.sum() > 0 and a.object.sum() > 0
        assert a.object.sum() < 0.95 * (a.object.sum() + a.support.sum() + a.background.sum())


# ------------------------------------------------------------------------------------------ generated captures
@pytest.fixture(scope="module")
def generator():
    return _generator()


def test_generated_hard_captures(generator):
    """Twenty generated captures (seeds 0-19): the up axis within 5 degrees on at least 19 and never wrong without
    saying so; of the rows called object, 94 % truly are (mean), 94 % of the support and background rows stay
    static, and 98 % of the objects' rows move with their body (measured: 20 / 20, 0.963, 0.974 and 0.9935; the
    last was 0.948 before the base in the support's slab was told apart by its look)."""
    from physskin_gs.pipeline import analyze_for_animation

    ok, silent, precision, static, recall = 0, 0, [], [], []
    for seed in range(20):
        cap = generator.make_hard_capture(seed)
        a = analyze_for_animation(cap.scene)
        good = _angle(a.up, cap.up) <= 5.0
        ok += good
        silent += (not good) and not a.unsure
        obj = np.asarray(a.object)
        truth = cap.mask("object")
        rest = cap.mask("support") | cap.mask("background")
        precision.append(float(truth[obj].mean()) if obj.any() else 0.0)
        static.append(float((~obj[rest]).mean()))
        moving = obj.copy()
        for rows, _ in a.other_bodies:
            moving[rows] = True
        recall.append(float(moving[truth].mean()))
    assert ok >= 19 and silent == 0, (ok, silent)
    assert np.mean(precision) >= 0.94 and np.mean(static) >= 0.94, (np.mean(precision), np.mean(static))
    assert np.mean(recall) >= 0.98, np.mean(recall)


def _on_a_table(generator, kind: str, rgb, table_rgb, noise: float):
    """(scene, object rows (N,) bool) of one object standing on a square table top at y = 0 (-y up in the file): a
    sphere (radius 0.5, 8000 rows) or a crate (0.8 x 0.6 x 0.7, 8000 rows less its bottom face, which no camera
    sees), on 12000 rows of table (3 x 3, height noise ``noise``), each of one colour (with the generator's
    noise)."""
    import trimesh

    rng = np.random.default_rng(0)
    if kind == "sphere":
        mesh = trimesh.creation.icosphere(subdivisions=4, radius=0.5)
        mesh.apply_translation((0.0, 0.5, 0.0))
    else:
        mesh = trimesh.creation.box(extents=(0.8, 0.6, 0.7))
        mesh.apply_translation((0.0, 0.3, 0.0))
    obj = generator._surface(mesh, 8000, rng, rgb)
    if kind == "crate":
        seen = obj.normals[:, 1] > -0.9
        obj.means, obj.normals, obj.size, obj.rgb, obj.opacity = (obj.means[seen], obj.normals[seen],
                                                                  obj.size[seen], obj.rgb[seen], obj.opacity[seen])
    table = generator._rect(-1.5, 1.5, -1.5, 1.5, 0.0, 12000, rng, table_rgb, noise=noise)
    scene, _ = generator.parts_to_scene([("object0", obj), ("support", table)], np.diag([1.0, -1.0, -1.0]))
    truth = np.zeros(scene.num_gaussians, dtype=bool)
    truth[: obj.means.shape[0]] = True
    return scene, truth


def _analyses_with_and_without_looks(scene):
    """The analysis ``animate`` runs, and the same without the colours and quats (positions, opacities and scales
    only, as before the base claim)."""
    from physskin_gs.geometry import scene_analysis
    from physskin_gs.pipeline import analyze_for_animation

    a = analyze_for_animation(scene)
    b = scene_analysis.analyze_scene(scene.means, scene.opacities, scene.log_scales,
                                     format_prior_up=np.array([0.0, -1.0, 0.0]), stable_base=True, seed=0)
    return a, b


@pytest.mark.parametrize("kind, rgb, table_rgb, noise, left_before", [
    ("sphere", (0.8, 0.2, 0.2), (0.5, 0.5, 0.5), 0.002, 46),  # told by its colour
    ("crate", (0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 0.004, 92),  # the table's colour: told by its sides' normals
])
def test_the_base_inside_the_supports_slab_moves_with_the_object(generator, kind, rgb, table_rgb, noise,
                                                                  left_before):
    """A sphere's lowest cap and a crate's lowest edge lie within the table top's own slab: by position they are
    the support's, and they stayed on the table when the object moved (46 and 92 rows, a visible ring). Told apart by
    how they look against this capture's own rows on each side, every row of the object moves, and no more of the
    table than before (its rows in the contact layer next to the object)."""
    scene, truth = _on_a_table(generator, kind, rgb, table_rgb, noise)
    a, b = _analyses_with_and_without_looks(scene)
    assert a.up_source == "support-plane" and _angle(a.up, [0.0, -1.0, 0.0]) < 1.0
    assert int((~b.object[truth]).sum()) == left_before  # (the analysis without the looks: the ring stays)
    assert a.object[truth].all()
    assert int(a.object[~truth].sum()) == int(b.object[~truth].sum()) <= 4


def test_a_base_that_looks_like_its_support_is_left_to_position(generator):
    """A grey sphere on a grey table: its cap and the table look alike in colour and in the flat normal, so the
    examples of the two are not separable and nothing is claimed: the analysis is the one without the looks (a claim
    would be a coin toss tearing rows out of the table; a grey cap left on a grey table is not seen)."""
    scene, truth = _on_a_table(generator, "sphere", (0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 0.002)
    a, b = _analyses_with_and_without_looks(scene)
    assert np.array_equal(a.object, b.object) and np.array_equal(a.support, b.support)
    assert int((~a.object[truth]).sum()) > 0  # (its cap is still in the slab: the case is the one above)


def test_a_generated_vase_takes_its_bottom_off_the_table(generator):
    """Seed 1: a vase on a noisy, slightly curved table with a wall behind. 623 of its 6000 rows (its bottom and
    lowest side, within the table's slab) stayed static; now every row moves and no table or wall row does."""
    from physskin_gs.pipeline import analyze_for_animation

    cap = generator.make_hard_capture(1)
    assert cap.draws["kinds"] == ["vase"]
    a = analyze_for_animation(cap.scene)
    truth = cap.mask("object")
    assert a.object[truth].all()
    assert not a.object[cap.mask("support") | cap.mask("background")].any()


def test_wall_touching_the_object_stays_static(generator):
    """Seed 1000: a crate against a wall that stands beside a table cut off at the crate. At the analysis grid the
    wall and the crate are one component; the standing test's finer parts tell them apart: the wall stays (it
    moved with the crate before: precision 0.49, static 0.52)."""
    from physskin_gs.pipeline import analyze_for_animation

    cap = generator.make_hard_capture(1000)
    assert cap.draws["kinds"] == ["crate"]
    a = analyze_for_animation(cap.scene)
    obj = np.asarray(a.object)
    wall = cap.mask("background")
    assert _angle(a.up, cap.up) < 3.0
    assert cap.mask("object")[obj].mean() > 0.95 and not obj[wall].mean() > 0.05
    assert obj[cap.mask("object")].mean() > 0.8


def test_a_wall_joined_to_the_object_even_at_the_fine_voxel_is_split_off(generator):
    """Seed 11: Spot against a wall so close that the standing test's own voxels join them, so the wall "stood" on
    the table with the cow and moved with it (precision 0.73, static 0.80). The object's contact points over
    something that continues below the table form a line past the hooves' hull (the wall's foot): the object's rows
    are shared geodesically between the wall (its foot and its plane past the hooves) and the cow (the hooves and
    everything two voxels off the wall's plane): the wall stays, the cow moves (measured: precision 0.995, static
    0.997, the cow's recall unchanged at 0.978)."""
    from physskin_gs.pipeline import analyze_for_animation

    cap = generator.make_hard_capture(11)
    assert cap.draws["kinds"] == ["spot"] and cap.draws.get("wall")
    a = analyze_for_animation(cap.scene)
    obj = np.asarray(a.object)
    assert cap.mask("object")[obj].mean() > 0.97
    assert obj[cap.mask("background")].mean() < 0.03
    assert obj[cap.mask("object")].mean() > 0.95


@pytest.mark.parametrize("seed, kind, before", [(2021, "figure", (0.653, 0.568)), (3039, "vase", (0.549, 0.626))])
def test_a_wall_ending_at_the_table_behind_its_edge_is_split_off(generator, seed, kind, before):
    """Seeds 2021 and 3039 (held out: first looked at in the tenth session): a wall behind the table's back edge
    that ends just under the table's level, touched by the object. Nothing of it continues far enough below the
    plane for the foot test, so it moved with the object (precision / static ``before``). Its foot lies past the
    support's top instead (the table's cells, a wall's line through them eroded away), on a line running on past
    the object, with the object wholly in front of it: split off as a wall (measured 0.984 / 0.987 and 1.000 /
    1.000), the object's recall 0.97 / 0.87 as before."""
    from physskin_gs.pipeline import analyze_for_animation

    cap = generator.make_hard_capture(seed)
    assert cap.draws["kinds"] == [kind] and cap.draws.get("wall")
    a = analyze_for_animation(cap.scene)
    obj = np.asarray(a.object)
    assert cap.mask("object")[obj].mean() > 0.97
    assert obj[cap.mask("background")].mean() < 0.03
    assert obj[cap.mask("object")].mean() > 0.85


def test_a_crate_over_a_cut_edge_keeps_its_face(generator):
    """Negative control of the wall split past the support (seed 2000): a crate at the cut edge of its table has its
    face's bottom past the table's top along a line, and the rest of it on one side: that face is not a wall, since
    it ends where the crate does (with the wall test alone its recall fell from 0.82 to 0.63)."""
    from physskin_gs.pipeline import analyze_for_animation

    cap = generator.make_hard_capture(2000)
    assert cap.draws["kinds"] == ["crate"]
    obj = np.asarray(analyze_for_animation(cap.scene).object)
    assert obj[cap.mask("object")].mean() > 0.8 and cap.mask("object")[obj].mean() > 0.97


def test_an_object_joined_to_a_larger_wall_through_the_support_still_moves(generator):
    """Seed 3045 (held out): a vase against a wall that passes through the support, joined to it at the standing
    test's voxel, the wall holding a little more of the pass-through rows than the vase holds standing rows: the
    whole joined part was dropped and nothing moved (recall 0). A part with both is now shared geodesically unless
    its standing rows are a stray tenth: the vase moves (measured recall 0.878, precision 0.991), the wall stays."""
    from physskin_gs.pipeline import analyze_for_animation

    cap = generator.make_hard_capture(3045)
    assert cap.draws["kinds"] == ["vase"] and cap.draws.get("wall")
    obj = np.asarray(analyze_for_animation(cap.scene).object)
    assert obj[cap.mask("object")].mean() > 0.8
    assert cap.mask("object")[obj].mean() > 0.97
    assert obj[cap.mask("background")].mean() < 0.03


def test_a_given_up_is_taken_as_known(generator, tmp_path, capsys):
    """``--up`` is taken as known, like an up recorded in the file: the analysis examines only support planes within
    30 degrees of it, so the support and the object follow it (a fresh user's drone: its propeller discs were taken
    for a support upside down; the advice "--up -y" kept that support and its selection, and the drone came apart,
    its lower half falling away from the frozen arms). Seed 1000 (a crate on a table): with its true up the support
    and the object are the automatic ones; with a horizontal up no plane within 30 degrees carries it, so there is
    no support, the up is the one given, sure, and the crate is not split by a plane 90 degrees off. Through the
    CLI, the scene line says the up is as given, and a note says the support found without it disagrees."""
    from physskin_gs.cli import main
    from physskin_gs.io import save_scene
    from physskin_gs.pipeline import analyze_for_animation

    cap = generator.make_hard_capture(1000)
    up = np.asarray(cap.up, float) / np.linalg.norm(cap.up)
    auto = analyze_for_animation(cap.scene)
    known = analyze_for_animation(cap.scene, up=up)
    assert known.plane is not None and _angle(known.up, up) < 3.0 and not known.unsure
    assert np.array_equal(np.asarray(known.object), np.asarray(auto.object))
    side = np.cross(up, [1.0, 0.0, 0.0] if abs(up[0]) < 0.9 else [0.0, 1.0, 0.0])
    side /= np.linalg.norm(side)
    other = analyze_for_animation(cap.scene, up=side)
    assert other.plane is None or _angle(other.plane.normal, side) <= 30.0
    assert _angle(other.up, side) < 1e-6 and not other.unsure and other.up_source == "given"
    assert np.asarray(other.object)[cap.mask("object")].mean() > 0.9  # the crate whole
    src = tmp_path / "crate.ply"
    save_scene(cap.scene, str(src))
    axis = "xyz"[int(np.argmax(np.abs(side)))]
    sign = "-" if side[int(np.argmax(np.abs(side)))] < 0 else ""
    if np.max(np.abs(side)) > 0.999:  # an axis name when the side is one (else a vector)
        given = sign + axis
    else:
        given = ",".join(f"{v:.6f}" for v in side)
    assert main(["animate", str(src), "--headless", "--frames", "2", "--skinning", "rbf", "--up=" + given,
                 "--export", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert f"scene: up {given} as given (--up)" in err, err
    assert "note: without --up, a support plane carries the object with up" in err  # (90 degrees off the given)


def test_line_inliers_and_the_support_top():
    """The two pieces of the wall test past the support, on known answers: the RANSAC line finds the 60 points of a
    line among 40 scattered ones (and only those); the support's top is the table's square (its cells' holes
    filled, eroded by two cells), not the line a wall leaves where it crosses the slab, so of four contact points
    only the two beyond the square by more than 1.5 cells are past it (one on the wall's line, one in the open), the
    one inside the object's footprint hole and the one on the square's rim are not."""
    from physskin_gs.geometry.scene_analysis import _line_inliers, _past_support

    rng = np.random.default_rng(0)
    t = rng.uniform(-1, 1, 60)
    line = np.stack([t, 0.3 * t + 0.1], 1)
    scatter = rng.uniform(-1, 1, (40, 2))
    scatter = scatter[np.abs(scatter[:, 1] - 0.3 * scatter[:, 0] - 0.1) > 0.2]
    got = _line_inliers(np.concatenate([line, scatter]), 0.02, np.random.default_rng(1))
    assert got[:60].all() and not got[60:].any()

    h = 0.1
    g = np.arange(0.05, 2.0, 0.05)
    top = np.stack(np.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2)
    top = top[np.hypot(top[:, 0] - 1.0, top[:, 1] - 1.0) > 0.3]  # the object's footprint: no support seen there
    wall = np.stack([np.full(80, -1.0), np.linspace(-1.0, 3.0, 80)], 1)  # a wall's line through the slab
    slab = np.concatenate([top, wall])
    pts = np.concatenate([np.c_[slab, np.zeros(len(slab))], np.zeros((4, 3))])  # plane z = 0, normal +z
    contact = np.array([[-1.0, 1.0], [3.0, 1.0], [1.0, 1.0], [1.85, 1.0]])  # wall, open, footprint, rim
    pts[-4:, :2] = contact
    obj = np.zeros(len(pts), dtype=bool)
    obj[-4:] = True
    B = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    past = _past_support(contact, pts, pts[:, 2].copy(), obj, 0.01, h, B, np.random.default_rng(0))
    assert past.tolist() == [True, True, False, False]


def test_geodesic_split_gives_each_voxel_to_its_nearest_seeds():
    """Against breadth-first distances from each seed set on a random occupancy: a voxel strictly nearer to one
    set's seeds (through occupied voxels) goes to that set, every reachable voxel gets a label, and the reference
    growth agrees wherever the two distances differ."""
    from scipy import ndimage

    from physskin_gs.geometry.support import _geodesic_split_reference, geodesic_split

    full = np.ones((3, 3, 3), dtype=bool)

    def bfs(occ, seeds):
        d = np.full(occ.shape, np.inf)
        cur = occ & seeds
        seen = cur.copy()
        d[cur] = 0
        k = 0
        while cur.any():
            k += 1
            cur = ndimage.binary_dilation(cur, structure=full) & occ & ~seen
            d[cur] = k
            seen |= cur
        return d

    rng = np.random.default_rng(0)
    for _ in range(3):
        occ = rng.random((24, 20, 16)) < 0.6
        a, b = np.zeros_like(occ), np.zeros_like(occ)
        a[tuple(rng.integers(0, 16, (3, 4)))] = True
        b[tuple(rng.integers(0, 16, (3, 4)))] = True
        got, ref = geodesic_split(occ, a, b), _geodesic_split_reference(occ, a, b)
        da, db = bfs(occ, a), bfs(occ, b & ~a)
        assert not ((got == 1) & (da > db)).any() and not ((got == 2) & (db > da)).any()
        assert not ((got == 0) & occ & (np.isfinite(da) | np.isfinite(db))).any()
        strict = np.isfinite(da) & np.isfinite(db) & (da != db)
        assert (got[strict] == ref[strict]).all() and (got[strict] == np.where(da < db, 1, 2)[strict]).all()


# ------------------------------------------------------------------------------------------ upright
def _box_points(rng, n, lo, hi):
    """(n, 3) points uniformly on the surface of the box [lo, hi] (area-weighted faces)."""
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    d = hi - lo
    areas = np.array([d[1] * d[2]] * 2 + [d[0] * d[2]] * 2 + [d[0] * d[1]] * 2)
    f = rng.choice(6, size=n, p=areas / areas.sum())
    p = lo + rng.random((n, 3)) * d
    ax = f // 2
    p[np.arange(n), ax] = np.where(f % 2 == 0, lo[ax], hi[ax])
    return p


def test_stability_margin_of_a_cube_is_half():
    """A cube stands equally on each face: its base is the face (a square of side a), the centre of mass projects
    to its middle, a/2 inside, and the outline is the same square: margin (a/2) / a = 0.5 for all six axes, so no
    axis is clear."""
    from physskin_gs.geometry.upright import AXES, stability_margin, stable_base_up

    rng = np.random.default_rng(0)
    p = _box_points(rng, 30_000, [-1, -1, -1], [1, 1, 1])
    w = np.ones(len(p))
    for name, u in AXES.items():
        assert stability_margin(p, w, u) == pytest.approx(0.5, abs=0.01), name
    assert stable_base_up(p, w).up is None


@pytest.mark.parametrize("perm", [(0, 1, 2), (2, 0, 1), (1, 2, 0)])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_lamp_stands_on_its_foot_in_any_axis_frame(perm, sign):
    """A lamp: a 2 x 2 x 0.2 foot, a 0.1 x 0.1 pole 2 high, a 0.6 x 0.6 x 0.3 shade on top. On its foot the base is
    the 2 x 2 square under the centre of mass: margin 1 / 2 = 0.5 (the outline is the same square). Upside down it
    stands on the shade's 0.6 x 0.6 top: margin 0.3 / 2 = 0.15. On a side its base is the foot's 2 x 0.2 edge with
    the centre of mass above it: negative. The answer is the foot's direction in every axis frame."""
    from physskin_gs.geometry.upright import stability_margin, stable_base_up

    rng = np.random.default_rng(1)
    foot = _box_points(rng, 20_000, [-1, -1, 0.0], [1, 1, 0.2])
    pole = _box_points(rng, 2_000, [-0.05, -0.05, 0.2], [0.05, 0.05, 2.2])
    shade = _box_points(rng, 4_000, [-0.3, -0.3, 2.2], [0.3, 0.3, 2.5])
    p = np.concatenate([foot, pole, shade])
    w = np.ones(len(p))
    up = np.array([0.0, 0.0, 1.0])
    assert stability_margin(p, w, up) == pytest.approx(0.5, abs=0.01)
    assert stability_margin(p, w, -up) == pytest.approx(0.15, abs=0.01)
    assert stability_margin(p, w, np.array([1.0, 0.0, 0.0])) < 0.0
    p = sign * p[:, list(perm)]  # the same lamp in another file frame
    up = sign * up[list(perm)]
    r = stable_base_up(p, w)
    assert r.up is not None and np.allclose(r.up, up), r.reason


def test_no_base_no_answer():
    """A sphere has no base (the lowest layer is a small cap under the centre on every axis): every margin is the
    same, so the evidence is not clear; fewer than 16 points give no answer either."""
    from physskin_gs.geometry.upright import stable_base_up

    rng = np.random.default_rng(2)
    v = rng.normal(size=(20_000, 3))
    p = v / np.linalg.norm(v, axis=1, keepdims=True)
    r = stable_base_up(p, np.ones(len(p)))
    assert r.up is None and "no axis it clearly stands on" in r.reason
    assert stable_base_up(p[:10], np.ones(10)).up is None


def test_other_objects_on_the_support_are_named(generator, tmp_path, capsys):
    """Seed 38: a crate and a vase of about equal mass on one table, apart. By default both move, each a body of its
    own (the log lists them); with --select largest the crate moves, the vase stays static, and animate says so in
    one line with the option to pass; a single object (seed 1000) has no other object."""
    from physskin_gs.cli import main
    from physskin_gs.io import save_scene
    from physskin_gs.pipeline import analyze_for_animation

    cap = generator.make_hard_capture(38)
    assert cap.draws["kinds"] == ["crate", "vase"]
    a = analyze_for_animation(cap.scene)
    assert a.other_objects == 1 and len(a.other_bodies) == 1
    assert analyze_for_animation(generator.make_hard_capture(1000).scene).other_objects == 0
    src = save_scene(cap.scene, tmp_path / "two.ply")
    assert main(["animate", str(src), "--headless", "--frames", "2", "--export", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert "2 bodies" in err and "body 1:" in err
    meta = json.loads((tmp_path / "out" / "sequence.json").read_text())
    assert len(meta["bodies"]) == 2
    assert main(["animate", str(src), "--headless", "--frames", "2", "--export", str(tmp_path / "one"),
                 "--select", "largest"]) == 0
    err = capsys.readouterr().err
    assert "note: 1 more object stands on the support and stays static (--select largest); pass --select auto " \
           "to move every object" in err


@pytest.mark.parametrize("gap_voxels, both", [(2.0, True), (4.5, False)])
def test_a_body_split_by_the_voxels_stands_on_all_its_contact(gap_voxels, both):
    """A toy whose leg the standing test's voxels cut off at the hip (a fresh capture's dinosaur on its base disc:
    the body stood on its tail and one foot, its centre of mass outside that contact, so the disc was no support).
    Here: a block whose wide contact lies left of its centre of mass, and a leg under the overhang, ``gap_voxels``
    voxels away. Within GROUP_VOXELS the two stand together (the block's centre of mass is inside their joint
    contact); further apart the block does not stand, the leg does."""
    from physskin_gs.geometry.support import GROUP_VOXELS, standing_parts

    rng = np.random.default_rng(0)
    vox = 0.05
    g = np.arange(-1.5, 1.5, 0.02)
    disc = np.stack(np.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2)
    disc = np.c_[disc, rng.normal(scale=0.002, size=len(disc))]
    foot = np.c_[rng.uniform(-1.0, -0.4, 3000), rng.uniform(-0.3, 0.3, 3000), rng.uniform(0.012, 0.4, 3000)]
    over = np.c_[rng.uniform(-1.0, 0.8, 9000), rng.uniform(-0.3, 0.3, 9000), rng.uniform(0.4, 0.8, 9000)]
    x0 = 0.5
    leg = np.c_[rng.uniform(x0, x0 + 0.2, 1500), rng.uniform(-0.1, 0.1, 1500),
                rng.uniform(0.012, 0.4 - gap_voxels * vox, 1500)]
    p = np.concatenate([disc, foot, over, leg])
    w = np.ones(len(p))
    parts, total, worst, through = standing_parts(p, w, np.array([0.0, 0.0, 1.0]), 0.0, 0.01, vox)
    n_disc, n_body = len(disc), len(foot) + len(over)
    body = set(range(n_disc, n_disc + n_body))
    stands = [set(idx.tolist()) for idx, _ in parts]
    assert GROUP_VOXELS >= 2
    assert any(s <= body and len(s) > 0.9 * n_body for s in stands) is both, (len(stands), worst)
    assert any(min(s) >= n_disc + n_body for s in stands)  # the leg stands either way, a part of its own



# ------------------------------------------------------------------------------------------ support: one piece
def _drone_points(rng, under: str) -> np.ndarray:
    """A drone-like object (a body, four arms, four motor hubs reaching down to z = 0) over ``under``: ``"pads"``
    (four separate propeller discs at the hubs, as an FPV drone's capture upside down shows them), ``"plate"`` (one
    wide surface) or ``"cut"`` (that surface cut off just past the body's middle, as a capture's edge cuts a table)."""
    def box(lo, hi, n):
        return rng.uniform(lo, hi, size=(n, 3))

    parts = [box([-0.1, -0.1, 0.06], [0.1, 0.1, 0.16], 6000)]
    for cx, cy in [(0.2, 0.2), (-0.2, 0.2), (0.2, -0.2), (-0.2, -0.2)]:
        t = rng.uniform(0, 1, 800)[:, None]
        parts.append(np.c_[t * cx, t * cy, np.full(800, 0.08)] + rng.normal(0, 0.01, (800, 3)))
        parts.append(box([cx - 0.015, cy - 0.015, 0.0], [cx + 0.015, cy + 0.015, 0.08], 400))
        if under == "pads":
            a, r = rng.uniform(0, 2 * np.pi, 2500), 0.12 * np.sqrt(rng.uniform(0, 1, 2500))
            parts.append(np.c_[cx + r * np.cos(a), cy + r * np.sin(a), rng.normal(0, 0.001, 2500)])
    if under != "pads":
        g = rng.uniform(-0.5, 0.5, (10000, 2))
        if under == "cut":
            g = g[g[:, 0] < 0.05]
        parts.append(np.c_[g, rng.normal(0, 0.001, g.shape[0])])
    return np.concatenate(parts)


@pytest.mark.parametrize("under", ["pads", "plate", "cut"])
def test_a_support_carries_on_one_piece_of_its_surface(under):
    """The plane of four propeller discs under a drone is not its support (the held-out FPV drone came out upside
    down on them): what stands on it, its centre of mass between the discs, is carried by no one piece of the plane
    (``support._on_one_piece``); one surface under it is, also cut off at the capture's edge past the middle.
    Measured on the corpus: every right support holds at least 99 % of the contact on one piece; the drone's 19 %."""
    from physskin_gs.geometry import support as S

    p = _drone_points(np.random.default_rng(0), under)
    scale = float(np.ptp(np.quantile(p, [0.01, 0.99], axis=0), axis=0).max())
    best, why, _, _ = S.find_support(p, np.ones(len(p)), np.random.default_rng(1), band=0.01 * scale,
                                     voxel=scale / 40)
    if under == "pads":
        assert best is None and "no one piece of it carries" in why, why
    else:
        assert best is not None and best.normal[2] > 0.99, why


def test_the_base_claim_grows_as_its_reference_classifies_all(generator, monkeypatch):
    """The base claim's growth from the object's base (classifying only the candidates it meets) claims exactly the
    rows its plain reference does (every candidate classified, the claimed ones kept whose connected component holds
    a row of the object's base), on generated captures where it claims hundreds of rows (seeds 1, 3, 10, 26)."""
    from physskin_gs.geometry import scene_analysis
    from physskin_gs.pipeline import analyze_for_animation

    grow = scene_analysis._claim_base
    claimed = []

    def both(obj, *args, **kwargs):
        ref = obj.copy()
        n_ref = grow(ref, *args[:-1], np.random.default_rng(7), reference=True)
        n = grow(obj, *args[:-1], np.random.default_rng(7))
        assert n == n_ref and np.array_equal(obj, ref)
        claimed.append(n)
        return n

    monkeypatch.setattr(scene_analysis, "_claim_base", both)
    for seed in (1, 3, 10, 26):
        analyze_for_animation(generator.make_hard_capture(seed).scene)
    assert sum(claimed) >= 1000, claimed


def test_what_lies_inside_the_card_box_moves_with_it():
    """The real card box (committed, CC-BY-4.0) holds 189 large blobs inside it, floaters of the analysis (sparse
    voxels away from its surface): hidden while it stands, they stayed where it had stood once a fresh user's drag
    tipped it over (a faint copy of the box on the paper). Inside the object (lines along all six axis directions
    meet its voxels or its support's), they now move with it; nothing of the paper does."""
    from physskin_gs.geometry.support import plane_axes
    from physskin_gs.io import load_scene
    from physskin_gs.pipeline import analyze_for_animation

    scene = load_scene(TAROT)
    a = analyze_for_animation(scene)
    obj = np.asarray(a.object) | np.asarray(a.transparent_in_object)
    pts = scene.means.numpy().astype(np.float64)
    frame = np.vstack([plane_axes(a.up), a.up])
    loc = pts @ frame.T
    lo, hi = np.quantile(loc[obj], 0.01, axis=0), np.quantile(loc[obj], 0.99, axis=0)
    in_box = (loc >= lo).all(axis=1) & (loc <= hi).all(axis=1)
    assert int((in_box & ~obj).sum()) <= 5  # (was 191: 189 floaters)
    assert not (obj & np.asarray(a.support)).any()


def test_the_inside_of_an_object_by_lines():
    """scene_analysis._interior on voxel shapes with known insides: a closed box whose walls have one-voxel gaps
    (a flood fill leaks through them) is all inside; a cup open at the top and the space under a table between its
    legs are not; the support's voxels close the box from below."""
    from physskin_gs.geometry.scene_analysis import _interior

    shape = (20, 20, 20)
    box = np.zeros(shape, bool)
    box[5:15, 5:15, 5:15] = True
    box[6:14, 6:14, 6:14] = False  # a hollow box, walls one voxel thin
    box[5, 9, 9] = box[14, 10, 7] = box[9, 14, 11] = False  # gaps
    inside = _interior(box, np.zeros(box.size, bool)).reshape(shape)
    assert inside[6:14, 6:14, 6:14].mean() > 0.95 and not inside[:5].any() and not inside[15:].any()
    no_bottom = box.copy()
    no_bottom[:, :, 5] = False  # open below (axis 2 up): closed by the support's voxels, or not inside
    lid = np.zeros(shape, bool)
    lid[:, :, 4:6] = True
    assert not _interior(no_bottom, np.zeros(box.size, bool)).any()
    assert _interior(no_bottom, lid.ravel()).reshape(shape)[6:14, 6:14, 6:14].mean() > 0.95
    cup = box.copy()
    cup[6:14, 6:14, 14] = False  # open at the top
    assert not _interior(cup, lid.ravel()).any()
    table = np.zeros(shape, bool)
    table[4:16, 4:16, 12] = True  # the top
    for i in (4, 15):
        for j in (4, 15):
            table[i, j, 5:12] = True  # the legs
    assert not _interior(table, lid.ravel()).any()


def test_a_large_flat_part_moving_with_the_object_gets_a_note():
    """With no support found, the best-populated plane turned down moves with the object; when it holds much of the
    capture (a photo frame's table patch, 55 % of the points) the log says so and names --select: a fresh user saw
    the table smear behind the frame with no word of it. Objects cut free of their support hold at most 21 % in
    such a plane (the houseplant): no note."""
    from types import SimpleNamespace

    from physskin_gs.cli._common import scene_summary
    from physskin_gs.pipeline import AnimationConfig

    def lines(flat, plane=None, select="auto"):
        sa = {"counts": {k: 0 for k in ("support", "background", "floater", "transparent", "invalid")},
              "up": [0.0, -1.0, 0.0], "up_source": "stable-base", "reason": "r", "unsure": False,
              "moving_transparent": 0, "flat_part": flat, "support_plane": plane}
        anim = SimpleNamespace(info={"scene_analysis": sa, "num_moving": 10, "selection": select},
                               scene=SimpleNamespace(num_gaussians=10), support_height=None)
        return [x for x in scene_summary(anim, AnimationConfig(select=select)) if "flat part" in x]

    assert len(lines(0.55)) == 1 and "55% of the capture's points" in lines(0.55)[0]
    assert "--select" in lines(0.55)[0]
    assert not lines(0.21) and not lines(0.55, plane={"normal": [0, 1, 0]}) and not lines(0.55, select="largest")
    path = CORPUS / "photo_frame_on_table_mearlviewer.splat"
    if path.is_file():  # the capture itself (local corpus, not committed)
        from physskin_gs.io import load_scene
        from physskin_gs.pipeline import analyze_for_animation

        assert analyze_for_animation(load_scene(path)).flat_part > 0.5


def test_the_base_claim_takes_non_finite_colours_and_scales(generator):
    """A row with a finite mean but a NaN colour or log-scale is valid (its mean places it); the base claim's
    nearest-example search needs finite features, so such rows vote as black and round instead of failing the
    analysis (scipy's k-d tree refuses NaN)."""
    from physskin_gs.pipeline import analyze_for_animation

    scene, truth = _on_a_table(generator, "sphere", (0.8, 0.2, 0.2), (0.5, 0.5, 0.5), 0.002)
    rows = np.flatnonzero(truth)[:: 400]
    scene.sh_dc[rows] = float("nan")
    scene.log_scales[rows[::2]] = float("nan")
    a = analyze_for_animation(scene)
    assert a.up_source == "support-plane" and a.object[truth].mean() > 0.99


# captures whose analysis is unsure and wrong, where the stable-base test's next axis is the truth: the note names it
UNSURE_WITH_THE_RIGHT_ALTERNATIVE = {
    "heart_anatomical_ct_render_songxinlei.splat": "z",
    "person_upper_body_juleelee.splat": "-x",
    "among_us_plush_mearlviewer.splat": "y",
    "owl_photo_relief_jfigbor_sog.ply": "-y",  # a photo relief lying on its face: its picture stands on an edge
}


@pytest.mark.parametrize("name", sorted(UNSURE_WITH_THE_RIGHT_ALTERNATIVE))
def test_an_unsure_note_names_the_axes_the_object_also_stands_on(name):
    """Unsure and off (a free-floating heart, a figure cut at the waist, a plush toy in a -y file that is +y up):
    the note names the other axes the object stands on, most stable first, and here the first is the truth (the
    note listed every axis alike: held-out captures on their side got no hint which to try)."""
    from physskin_gs.cli._common import UNSURE_UP, unsure_up_note
    from physskin_gs.io import load_scene
    from physskin_gs.pipeline import analyze_for_animation

    path = CORPUS / name
    if not path.is_file():
        pytest.skip(f"{path} not in the local corpus (set PHYSSKIN_CAPTURES; docs/captures.md lists it)")
    a = analyze_for_animation(load_scene(path))
    truth = UNSURE_WITH_THE_RIGHT_ALTERNATIVE[name]
    assert a.unsure and _angle(a.up, _axis(truth)) > 45.0, a.summary()
    assert a.up_candidates and a.up_candidates[0].lstrip("+") == truth, a.up_candidates
    note = unsure_up_note(a.up_candidates)
    assert note.startswith(UNSURE_UP) and f"it also stands with --up {truth}" in note, note


def test_the_unsure_note_without_and_with_alternatives():
    from physskin_gs.cli._common import UNSURE_UP, unsure_up_note

    assert unsure_up_note(None) == unsure_up_note([]) == UNSURE_UP
    assert unsure_up_note(["-z"]) == UNSURE_UP + "; it also stands with --up -z"
    assert unsure_up_note(["+y", "-x", "+z"]) == (UNSURE_UP + "; it also stands with --up y or --up -x (most stably "
                                                  "the first)")


def test_a_plane_through_a_body_is_not_its_support():
    """The yellow FPV drone (held out, local corpus): its frame plate was taken for a support carrying a part of
    its top (15 % of the mass above the plate), and only that part moved. A support carries at least a quarter of
    what lies above it (real supports 90-100 %, generated ones 45 % and more): the drone now stands on its own base,
    upright and sure, and moves whole."""
    path = CORPUS / "fpv_drone_yellow_freestanding_willeastcott.compressed.ply"
    if not path.is_file():
        pytest.skip(f"{path} not in the local corpus (docs/captures.md lists it)")
    from physskin_gs.io import load_scene
    from physskin_gs.pipeline import analyze_for_animation

    a = analyze_for_animation(load_scene(path))
    assert a.plane is None and a.up_source == "stable-base" and not a.unsure, a.summary()
    assert _angle(a.up, [0.0, -1.0, 0.0]) < 5.0
    c = a.counts
    assert c["object"] >= 0.99 * (c["total"] - c["transparent"] - c["invalid"])
