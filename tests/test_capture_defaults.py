"""Real captures with no options: up axis and floor from the support plane, only the object moves, robust scale,
negative option values in both spellings (issue: real captures on first contact)."""

import json
import math
import warnings

import numpy as np
import pytest
import torch

from physskin_gs.cli import join_negative_values, main
from physskin_gs.pipeline import AnimationConfig, load_for_animation, prepare_animation
from physskin_gs.scene import GaussianScene


def _prepare(scene, **kw):
    base = dict(num_cubature=256, newton_iters=3)
    base.update(kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return prepare_animation(scene, AnimationConfig(**base))


def _angle_deg(a, b):
    a, b = np.asarray(a, float), np.asarray(b, float)
    return math.degrees(math.acos(np.clip(a @ b / np.linalg.norm(a) / np.linalg.norm(b), -1, 1)))


@pytest.fixture(scope="module")
def headpiece(request):
    from tests.conftest import SHARED_DATA

    path = SHARED_DATA / "scenes" / "rgd_longheadpiece.compressed.ply"
    if not path.is_file():
        pytest.skip(f"scene capture not found at {path} (set PHYSSKIN_SHARED_DATA)")
    return load_for_animation(str(path))


@pytest.mark.slow
def test_capture_is_upright_isolated_and_rests_on_its_support(headpiece):
    anim = _prepare(headpiece)
    sa = anim.info["scene_analysis"]
    assert sa["up_source"] == "support-plane"
    assert _angle_deg(anim.up_vector.numpy(), [0, -1, 0]) < 10  # COLMAP capture: -y up
    moving = anim.moving.numpy()
    # the floor patch and the background stay static; the object (above the floor along up) moves
    assert 0.5 * headpiece.num_gaussians < moving.sum() < 0.95 * headpiece.num_gaussians
    up = anim.up_vector.numpy()
    d = float(sa["support_plane"]["offset"])
    h = headpiece.means.double().numpy() @ up - d  # height above the support plane, scene units
    assert np.median(h[moving]) > 0.2  # the object is well above the floor
    assert np.mean(np.abs(h[~moving]) < 0.05) > 0.8  # most static rows are floor
    # the floor of the simulation is the support plane: the object rests on it (no drop through the air)
    assert anim.support_height == pytest.approx(d)
    rest_low = float(np.quantile(h[moving], 0.001))
    for _ in range(30):
        anim.step()
    dm = anim.deformed_gaussians(view_rotations=False).means.double().numpy()
    hm = dm @ up - d
    assert float(np.quantile(hm[moving], 0.001)) > -0.02 * float(np.ptp(h[moving]))  # not sunk through the floor
    assert rest_low < 0.05 * float(np.ptp(h[moving]))  # it started ON the support, not in the air
    assert np.array_equal(dm[~moving], headpiece.means.double().numpy()[~moving])  # static rows untouched


@pytest.mark.slow
def test_up_axis_rotates_with_the_capture(headpiece):
    g = torch.Generator().manual_seed(3)
    q, _ = torch.linalg.qr(torch.randn(3, 3, generator=g, dtype=torch.float64))
    R = (q * torch.sign(torch.linalg.det(q))).float()  # a proper rotation
    from physskin_gs.pipeline import analyze_for_animation

    rot = GaussianScene(means=headpiece.means @ R.T + torch.tensor([0.3, -2.0, 1.0]), quats=headpiece.quats,
                        log_scales=headpiece.log_scales, opacity_logits=headpiece.opacity_logits,
                        sh_dc=headpiece.sh_dc, sh_rest=headpiece.sh_rest, format=headpiece.format)
    a0, a1 = analyze_for_animation(headpiece), analyze_for_animation(rot)
    assert _angle_deg(a1.up, R.double().numpy() @ a0.up) < 2
    assert (a0.object == a1.object).mean() > 0.99


def test_a_far_floater_changes_neither_scale_nor_selection(spot_scene):
    a = _prepare(spot_scene, skinning="rbf")
    n = spot_scene.num_gaussians
    pad = lambda t, v: torch.cat([t, v.expand(1, *t.shape[1:]).to(t.dtype)])  # noqa: E731
    far = GaussianScene(means=pad(spot_scene.means, torch.tensor([[1e6, 0.0, 0.0]])),
                        quats=pad(spot_scene.quats, spot_scene.quats[:1]),
                        log_scales=pad(spot_scene.log_scales, spot_scene.log_scales[:1]),
                        opacity_logits=pad(spot_scene.opacity_logits, spot_scene.opacity_logits[:1]),
                        sh_dc=pad(spot_scene.sh_dc, spot_scene.sh_dc[:1]),
                        sh_rest=pad(spot_scene.sh_rest, spot_scene.sh_rest[:1]), format=spot_scene.format)
    b = _prepare(far, skinning="rbf")
    assert not bool(b.moving[n])  # the floater stays static
    assert torch.equal(b.moving[:n], a.moving)
    assert b.sim_scale == pytest.approx(a.sim_scale, rel=1e-6)
    # with --select all the floater joins the object, but the robust scale still ignores it
    c = _prepare(far, skinning="rbf", select="all")
    assert bool(c.moving[n]) and c.sim_scale == pytest.approx(a.sim_scale, rel=0.02)


@pytest.fixture(scope="module")
def spot_scene():
    from pathlib import Path

    return load_for_animation(str(Path(__file__).resolve().parents[1] / "data" / "spot_mesh2splat_10k.splat"))


def test_negative_option_values_in_both_spellings(tmp_path, spot_scene):
    assert join_negative_values(["animate", "x", "--up", "-y", "--floor", "-0.6", "--select", "-1,-1,-1,1,1,1"]) == \
        ["animate", "x", "--up=-y", "--floor=-0.6", "--select=-1,-1,-1,1,1,1"]
    assert join_negative_values(["animate", "--up", "--help"]) == ["animate", "--up", "--help"]
    from pathlib import Path

    spot = str(Path(__file__).resolve().parents[1] / "data" / "spot_mesh2splat_10k.splat")
    outs = []
    for spelling in (["--up", "-y", "--floor", "-0.6"], ["--up=-y", "--floor=-0.6"]):
        out = tmp_path / f"run{len(outs)}"
        assert main(["animate", spot, "--headless", "--frames", "2", "--export", str(out), "--skinning", "rbf",
                     "--cubature", "128", *spelling]) == 0
        outs.append(json.loads((out / "sequence.json").read_text()))
    for meta in outs:
        assert meta["up_axis"] == [0.0, -1.0, 0.0] and meta["floor"] == pytest.approx(-0.6)


def test_invalid_rows_are_static_and_exported_without_nan(tmp_path, spot_scene):
    """NaN rows never move, every frame keeps every row, and no exported value is NaN (the invalid rows are written
    as invisible points at the object's centre)."""
    from physskin_gs.io import load_scene, save_scene

    means = spot_scene.means.clone()
    means[:5, 0] = float("nan")
    op = spot_scene.opacity_logits.clone()
    op[5] = float("inf")
    bad = GaussianScene(means=means, quats=spot_scene.quats, log_scales=spot_scene.log_scales, opacity_logits=op,
                        sh_dc=spot_scene.sh_dc, sh_rest=spot_scene.sh_rest, format="inria-ply")
    src = tmp_path / "bad.ply"
    save_scene(bad, str(src))
    out = tmp_path / "frames"
    assert main(["animate", str(src), "--headless", "--frames", "3", "--export", str(out), "--skinning", "rbf",
                 "--cubature", "128", "--up", "-y"]) == 0
    meta = json.loads((out / "sequence.json").read_text())
    assert meta["invalid_rows"]["count"] == 6
    last = load_scene(str(out / "frame0003.ply"))
    assert last.num_gaussians == bad.num_gaussians
    for t in (last.means, last.quats, last.log_scales, last.opacity_logits, last.sh_dc):
        assert torch.isfinite(t).all()
    assert (torch.sigmoid(last.opacity_logits[:6]) < 1e-8).all()


def test_the_selection_line_counts_every_invalid_row(tmp_path, spot_scene, capsys):
    """Rows with a NaN scale, quaternion or SH value are invalid as much as a NaN mean: the static ones are counted
    as invalid in the selection line, whose classes add up to the static count (the analysis counted only
    non-finite means and opacities: "static 5 (... invalid 2)", a fresh user's report)."""
    import re

    from physskin_gs.io import save_scene

    ls, q, dc = spot_scene.log_scales.clone(), spot_scene.quats.clone(), spot_scene.sh_dc.clone()
    means = spot_scene.means.clone()
    means[0, 1] = float("nan")
    ls[1, 0], q[2, 3], dc[3, 2] = float("nan"), float("inf"), float("nan")
    bad = GaussianScene(means=means, quats=q, log_scales=ls, opacity_logits=spot_scene.opacity_logits,
                        sh_dc=dc, sh_rest=spot_scene.sh_rest, format="inria-ply")
    src = tmp_path / "bad.ply"
    save_scene(bad, str(src))
    capsys.readouterr()
    assert main(["animate", str(src), "--headless", "--frames", "2", "--export", str(tmp_path / "f"),
                 "--skinning", "rbf", "--cubature", "128"]) == 0
    err = capsys.readouterr().err
    m = re.search(r"static (\d+) \(support (\d+), background (\d+), floaters (\d+), transparent (\d+), "
                  r"invalid (\d+)\)", err)
    assert m, err
    static, *parts = (int(v) for v in m.groups())
    # every invalid row is counted as invalid and static, the cow's too (they never move: written sanitised; the
    # line counted the selection's invalid rows as moving)
    assert static == sum(parts) and parts[-1] == 4, m.group(0)
    moving = int(re.search(r"moving (\d+), static", err).group(1))
    assert moving + static == bad.num_gaussians


def _demo_capture(rotate_seed):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "make_demo_capture.py"
    spec = importlib.util.spec_from_file_location("make_demo_capture", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.make_capture(rotate_seed=rotate_seed)


@pytest.mark.parametrize("rotate_seed", [7, 11])
def test_licence_clean_rotated_capture(rotate_seed):
    """Spot (CC0) on a floor disc with floaters, rotated at random (runs on a fresh clone): the up vector is found
    from the floor, the cow moves, the floor and the floaters stay static, the floor is the support plane."""
    from physskin_gs.pipeline import analyze_for_animation

    scene, up_true = _demo_capture(rotate_seed)
    a = analyze_for_animation(scene)
    assert a.up_source == "support-plane" and _angle_deg(a.up, up_true) < 1.0
    n_spot, n_floor = 10000, 6000
    assert a.object[:n_spot].mean() > 0.95 and not a.object[n_spot:].any()
    assert a.floater[n_spot + n_floor:].mean() > 0.9
    anim = _prepare(scene, skinning="rbf")
    assert anim.support_height == pytest.approx(float(a.plane.offset))
    assert int(anim.moving[:n_spot].sum()) == int(a.object[:n_spot].sum())


def test_every_loading_command_warns_about_activated_values_and_floaters(tmp_path, spot_scene, capsys):
    """render, animate, skin and convert (not only info) say when opacities look already activated and when a
    floater dominates the bounding box (convert wrote such a file into a .glb without a word)."""
    from dataclasses import replace

    from physskin_gs.io import save_scene

    m = spot_scene.means.clone()
    m[0] = torch.tensor([1e6, 0.0, 0.0])
    bad = replace(spot_scene, means=m, opacity_logits=torch.sigmoid(spot_scene.opacity_logits), format="inria-ply")
    src = tmp_path / "activated.ply"
    save_scene(bad, str(src))
    runs = [["render", str(src), "-o", str(tmp_path / "r.png"), "--width", "32", "--height", "32"],
            ["skin", str(src), "-o", str(tmp_path / "w.npz"), "--skinning", "rbf"],
            ["animate", str(src), "--headless", "--frames", "1", "--export", str(tmp_path / "a"), "--skinning", "rbf",
             "--cubature", "64", "--up", "-y"],
            ["convert", str(src), str(tmp_path / "c.glb"), "--up", "-y"]]
    for argv in runs:
        assert main(argv) == 0, argv
        err = capsys.readouterr().err
        assert "look already activated" in err and "floaters dominate it" in err, argv[0]


def test_a_second_object_left_as_floaters_is_named_with_the_boxes_that_move_it(spot_scene):
    """Two cows side by side, 1.5 of their lengths apart, no support: the heavier moves and its twin is left as
    floaters (a component that far from the main one); a note says so and gives one --select box per part, which
    the parser takes and which hold each cow's rows (a fresh user's two equal columns: one fell, the other hung in
    the air with no word)."""
    from physskin_gs.cli._common import scene_summary
    from physskin_gs.pipeline import parse_selection_spec

    s = spot_scene
    span = float((s.means.max(0).values - s.means.min(0).values).max())
    shift = torch.tensor([2.5 * span, 0.0, 0.0])
    two = GaussianScene(means=torch.cat([s.means, s.means + shift]), quats=s.quats.repeat(2, 1),
                        log_scales=s.log_scales.repeat(2, 1), opacity_logits=s.opacity_logits.repeat(2),
                        sh_dc=s.sh_dc.repeat(2, 1), sh_rest=s.sh_rest.repeat(2, 1, 1), format=s.format)
    a = _prepare(two, skinning="rbf")
    n = s.num_gaussians
    moved = [int(a.moving[:n].sum()), int(a.moving[n:].sum())]
    assert sorted(moved)[0] == 0 and sorted(moved)[1] > 0.95 * n  # one cow moves, its twin stays
    far = a.info["scene_analysis"]["far_parts"]
    assert len(far) == 1 and 0.8 < far[0]["mass_ratio"] <= 1.0
    notes = [x for x in scene_summary(a, AnimationConfig()) if "static as floaters" in x]
    assert len(notes) == 1 and ("100% as heavy as it" in notes[0] or "99% as heavy as it" in notes[0]), notes
    given = [t.split("=", 1)[1] for t in notes[0].split() if t.startswith("--select=")]
    kind, boxes = parse_selection_spec(";".join(given))
    assert kind == "boxes" and len(boxes) == 2
    for lo, hi in boxes:  # each box holds one cow whole and none of the other
        inside = ((two.means >= torch.tensor(lo)) & (two.means <= torch.tensor(hi))).all(1)
        counts = sorted([int(inside[:n].sum()), int(inside[n:].sum())])
        assert counts[0] == 0 and counts[1] >= 0.99 * n, counts
    one = _prepare(s, skinning="rbf")  # one cow: no such note
    assert not [x for x in scene_summary(one, AnimationConfig()) if "static as floaters" in x]
