"""Several objects of one capture (issue 24): the finite support (FloorRegion) in the simulator, the scene analysis
finding every object on a table, and physskin_gs.bodies / `animate --headless` moving them together: they rest on
the table, and the one pushed past the table's edge falls to the floor below."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from physskin_gs.errors import OptionError
from physskin_gs.model.field import RBFSkinningField
from physskin_gs.physics.floor_region import FloorRegion, floor_region_from_points
from physskin_gs.physics.simulator import SubspaceSimulator

REPO = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------------------------ floor region
def _square_region(half=0.5, cell=0.1, depth=0.05, ground=None) -> FloorRegion:
    """The square |x|, |y| <= half (z up) as a region."""
    n = int(round(2 * half / cell))
    return FloorRegion(origin=(-half, -half, 0.0), e1=(1, 0, 0), e2=(0, 1, 0), cell=cell, mask=np.ones((n, n), bool),
                       depth=depth, ground=ground)


def test_region_inside_and_heights():
    r = _square_region(ground=-1.0)
    x = np.array([[0.0, 0.0, 0.0], [0.45, -0.45, 0.3], [0.55, 0.0, 0.0], [0.0, 0.0, -0.2]]).T  # [3, 4]
    assert r.inside(x).tolist() == [True, True, False, True]
    h = r.heights(x, np.array([0.0, 0.0, 1.0]), 0.0)
    # held by the support / held (above it) / off its edge: the ground / under the top (deeper than depth): ground
    assert h.tolist() == [0.0, 0.0, -1.0, -1.0]
    assert np.isneginf(_square_region().heights(x, np.array([0.0, 0.0, 1.0]), 0.0)[2])  # no ground: nothing


def test_region_from_points_fills_the_hole_under_an_object():
    g = np.linspace(-1, 1, 81)
    P = np.stack(np.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2)
    P = P[np.linalg.norm(P, axis=1) > 0.3]  # a table seen around an object's footprint (radius 0.3)
    pts = np.concatenate([P, np.zeros((P.shape[0], 1))], 1)
    r = floor_region_from_points(pts, (0, 0, 1), cell=0.05, depth=0.1)
    probe = np.array([[0.0, 0.0, 0.0], [0.95, 0.95, 0.0], [1.3, 0.0, 0.0]]).T
    assert r.inside(probe).tolist() == [True, True, False]
    with pytest.raises(OptionError):
        floor_region_from_points(np.zeros((0, 3)), (0, 0, 1), cell=0.05, depth=0.1)


def _cube_sim(center, size=0.2, n=5, **kw) -> SubspaceSimulator:
    g = (np.arange(n) + 0.5) * size / n - size / 2
    X = torch.as_tensor(np.stack(np.meshgrid(g, g, g, indexing="ij"), -1).reshape(-1, 3) + np.asarray(center),
                        dtype=torch.float32)
    cen = X.mean(0) + 0.3 * size * (torch.rand(4, 3, generator=torch.Generator().manual_seed(1)) - 0.5)
    W, dW = RBFSkinningField(cen, 0.6 * size).weights_and_grads(X)
    args = dict(E=1e5, nu=0.3, density=500.0, dt=0.02, up=(0, 0, 1), floor_height=0.0, damping=0.05)
    args.update(kw)
    return SubspaceSimulator(X, W, dW, size ** 3, **args)


def _lowest(sim) -> float:
    return float(sim.positions()[:, 2].min())


def test_cube_rests_on_the_region_and_falls_past_its_edge_to_the_ground():
    """A cube whose cubature points rest on the support stays there; the same cube beside the square falls
    (backward-Euler free fall: g h^2 n (n + 1) / 2 after n steps) and comes to rest on the ground 1 m below."""
    r = _square_region(half=0.5, ground=-1.0)
    on = _cube_sim((0.0, 0.0, 0.1))  # lowest points at 0.02 above the support
    on.set_floor(0.0, r)
    off = _cube_sim((0.8, 0.0, 0.1))
    off.set_floor(0.0, r)
    on.step(10)
    off.step(10)
    h = 0.02
    assert _lowest(on) == pytest.approx(0.0, abs=0.005)
    assert 0.02 - _lowest(off) == pytest.approx(0.5 * 9.8 * h * h * 10 * 11, rel=1e-3)
    off.step(100)
    assert _lowest(off) == pytest.approx(-1.0, abs=0.01)
    assert float(off.positions()[:, 0].mean()) == pytest.approx(0.8, abs=0.01)  # it fell straight down


def test_objective_with_a_region_matches_autograd():
    """The floor term's gradient with a region (points on and off the support, some penetrating the ground) is that
    of the reference energy (autograd through the same per-point heights)."""
    from tests.test_physics import _assert_objective_matches_autograd  # noqa: F401 - the shared checker

    sim = _cube_sim((0.45, 0.0, 0.05), size=0.2, floor_height=0.0)  # straddles the support's edge, sunk 3 cm
    sim.set_floor(0.0, _square_region(half=0.5, ground=0.02))
    sim.project_psd = False
    x = sim._Xt_np
    h = sim._floor_heights(x)
    assert (h == 0.0).any() and (h == 0.02).any() and (x[2] - h < 0).sum() > 10  # both planes press on points
    _assert_objective_matches_autograd(sim, 0.01, 0)


# ------------------------------------------------------------------------------------------------ a table capture
def _table_module():
    spec = importlib.util.spec_from_file_location("make_table_capture", REPO / "scripts" / "make_table_capture.py")
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(REPO / "scripts"))
    return mod


@pytest.fixture(scope="module")
def table_capture():
    return _table_module().make_table_capture(seed=0)


def _rows(truth, role, n) -> np.ndarray:
    m = np.zeros(n, bool)
    for a, b in truth["rows"][role]:
        m[a:b] = True
    return m


def test_analysis_finds_every_object_on_the_table(table_capture):
    """The table top (not the floor under it) is the support, exactly level; each of the three objects is one body
    holding at least 99.9 % of its rows and nothing of the table, the floor or the other objects (the base of each
    in the table's own slab, 16-23 rows, a visible ring under the ball, stayed on the table before the base claim:
    99.5-99.8 %; now none stays)."""
    from physskin_gs.bodies import body_masks
    from physskin_gs.pipeline import analyze_for_animation

    scene, truth = table_capture
    a = analyze_for_animation(scene)
    assert float(np.degrees(np.arccos(np.clip(a.up @ np.asarray(truth["up"]), -1, 1)))) < 1.0
    assert a.plane is not None and abs(a.plane.offset) < 0.01  # the table top (y = 0), not the floor (y = 1)
    masks = [m.numpy() for m in body_masks(scene, a)]
    assert len(masks) == 3 and a.other_objects == 2
    n = scene.num_gaussians
    static = _rows(truth, "table", n) | _rows(truth, "floor", n)
    objects = [_rows(truth, f"object{i}", n) for i in range(3)]
    for m in masks:
        hit = [float((m & o).sum()) / o.sum() for o in objects]
        k = int(np.argmax(hit))
        assert hit[k] >= 0.999, hit
        assert (m & ~objects[k]).sum() <= 0.02 * m.sum()
        assert not (m & static).any()


def test_bodies_rest_on_the_table_and_a_pushed_one_falls_past_its_edge(table_capture):
    """prepare_bodies: three bodies in one frame. Untouched they rest on the table (lowest 0.5 % of each within 2 %
    of its height of the support after 60 frames, centres within 2 %); the ball near the +x edge, pushed past it,
    falls to the floor one table height below (lowest point within 3 % of the floor), the others stay on the table."""
    from physskin_gs.bodies import SceneBodies, prepare_bodies
    from physskin_gs.pipeline import AnimationConfig

    scene, truth = table_capture
    anim = prepare_bodies(scene, AnimationConfig(num_cubature=512))
    assert isinstance(anim, SceneBodies) and anim.num_bodies == 3
    assert len({round(float(b.sim_scale), 9) for b in anim.bodies}) == 1  # one frame
    up = anim.up_vector.double()
    sup = anim.support_height

    def low(b) -> float:  # the 0.5 % quantile of a body's Gaussians along up, minus the support, / its height
        h = anim.deformed_gaussians(False).means[b.moving_index].double() @ up
        return (float(torch.quantile(h, 0.005)) - sup) / b.height_scene

    c0 = anim.body_centres()
    ball = int(np.argmax(c0[:, 0]))  # the object nearest the +x edge (x = 1.5)
    assert c0[ball, 0] == pytest.approx(truth["objects"][2]["x"], abs=0.1)
    d = anim.start_drag(c0[ball], radius=0.3, body=ball)
    for f in range(60):
        if f < 30:
            anim.update_drag(d, c0[ball] + np.array([0.04 * f, 0.0, 0.0]))
        elif f == 30:
            anim.end_drag(d)
        st = anim.step(1)
        assert np.isfinite(st["ms"])
    for f in range(60):
        st = anim.step(1)
    c = anim.body_centres()
    floor = truth["floor_height_along_up"]  # -1: the floor, in scene units along up (y up before the flip)
    b = anim.bodies[ball]
    lowest = float(torch.quantile(anim.deformed_gaussians(False).means[b.moving_index].double() @ up, 0.005))
    assert c[ball, 0] > truth["table_x"][1]  # past the edge
    # on the floor, not through it (the docstring's 3 %; measured +2.6 %, steady from 30 frames after landing, since
    # floor friction follows the carried weight; within 2 % before)
    assert (lowest - floor) / b.height_scene == pytest.approx(0.0, abs=0.03)
    for k in range(3):
        if k == ball:
            continue
        assert abs(low(anim.bodies[k])) <= 0.02
        assert np.linalg.norm(c[k] - c0[k]) <= 0.02 * anim.bodies[k].height_scene + 0.02 * b.height_scene
    assert st["max_overlap_m"] <= 0.01 * min(x.height_scene for x in anim.bodies) * anim.sim_scale


def test_largest_moves_one_object_only(table_capture):
    from physskin_gs.bodies import prepare_bodies
    from physskin_gs.pipeline import AnimatedScene, AnimationConfig

    scene, truth = table_capture
    anim = prepare_bodies(scene, AnimationConfig(select="largest", num_cubature=256))
    assert isinstance(anim, AnimatedScene)
    spot = _rows(truth, "object0", scene.num_gaussians)  # the heaviest: Spot
    assert anim.moving.numpy()[spot].mean() > 0.9 and (anim.moving.numpy() & ~spot).sum() < 0.02 * spot.sum()


def test_a_region_moves_the_largest_object_with_its_region_and_says_so(table_capture):
    """--region with several objects on the support: the regions are one object's, so the largest object moves
    with them (not silently all three without them) and a note says the others stay static."""
    from physskin_gs.bodies import prepare_bodies
    from physskin_gs.cli.animate import parse_regions
    from physskin_gs.pipeline import AnimatedScene, AnimationConfig

    scene, truth = table_capture
    notes = []
    anim = prepare_bodies(scene, AnimationConfig(num_cubature=256, regions=parse_regions(["base=wood"])),
                          progress=lambda stage, frac: notes.append(stage))
    assert isinstance(anim, AnimatedScene) and [r["material"] for r in anim.regions] == ["wood"]
    spot = _rows(truth, "object0", scene.num_gaussians)
    assert anim.moving.numpy()[spot].mean() > 0.9 and (anim.moving.numpy() & ~spot).sum() < 0.02 * spot.sum()
    assert any(n.startswith("note: --region applies to one object") for n in notes)


def test_an_up_that_agrees_with_the_support_keeps_every_body(table_capture):
    """--up given as the capture's true up (-y) keeps the three bodies, resting on the table top as with --up auto;
    an --up 90 degrees off (+z) is not the support's normal: one object moves, as with any explicit up before
    several bodies existed."""
    from physskin_gs.bodies import SceneBodies, prepare_bodies
    from physskin_gs.pipeline import AnimatedScene, AnimationConfig

    scene, truth = table_capture
    assert truth["up"] == [0.0, -1.0, 0.0]
    anim = prepare_bodies(scene, AnimationConfig(up="-y", num_cubature=128))
    assert isinstance(anim, SceneBodies) and anim.num_bodies == 3
    up = anim.up_vector.double()
    assert torch.allclose(up, torch.tensor([0.0, -1.0, 0.0], dtype=torch.float64))
    # the support holds them as with --up auto: after 20 frames every body's bottom is on the table top (height 0
    # along up), not sunk to a floor under the lowest object (a fresh user's find)
    anim.step(20)
    g = anim.deformed_gaussians(False).means.double()
    for b in anim.bodies:
        low = float(torch.quantile(g[b.moving_index] @ up, 0.005))
        assert abs(low - truth["table_top_height_along_up"]) <= 0.02 * b.height_scene, low
    one = prepare_bodies(scene, AnimationConfig(up="z", num_cubature=128))
    assert isinstance(one, AnimatedScene)


def test_animate_headless_writes_every_body(table_capture, tmp_path, capsys):
    """`animate --headless` with no options on the capture: every body listed in the log and in sequence.json
    (handles, contact statistics per frame), a script drag naming a body; a drag naming a body that does not exist
    is refused once the scene analysis has counted the bodies, before any is prepared (a fresh user waited 7.8 s
    for the refusal) and before anything is written."""
    from physskin_gs.bodies import SceneBodies
    from physskin_gs.cli import main
    from physskin_gs.io import load_scene, save_scene

    scene, _ = table_capture
    src = tmp_path / "table.ply"
    save_scene(scene, str(src))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"drags": [{"body": 7, "point": [0, 0, 0], "keyframes": [{"frame": 2,
                                                                                         "offset": [0, 0, 0]}]}]}))
    out = tmp_path / "seq"
    built = []
    orig = SceneBodies.build.__func__

    def spy(cls, *a, **k):
        built.append(1)
        return orig(cls, *a, **k)

    SceneBodies.build = classmethod(spy)
    try:
        assert main(["animate", str(src), "--headless", "--frames", "3", "--export", str(out), "--script",
                     str(bad)]) == 2
    finally:
        SceneBodies.build = classmethod(orig)
    err = capsys.readouterr().err
    assert "drags[0].body 7: the scene has 3 bodies (0..2; numbered as the log lists them once prepared" in err
    assert built == [] and "body 2:" not in err  # refused before any body was prepared
    assert not any(out.glob("frame*"))
    motion = tmp_path / "push.json"
    motion.write_text(json.dumps({"drags": [{"body": 1, "handle": 0, "keyframes": [
        {"frame": 2, "offset": [0, 0, 0]}, {"frame": 4, "offset": [0.1, 0, 0]}]}]}))
    rc = main(["animate", str(src), "--headless", "--frames", "4", "--export", str(out), "--script", str(motion),
               "--cubature", "256", "--force"])
    assert rc == 0
    log = capsys.readouterr().err
    sel = next(line for line in log.splitlines() if "selection auto (3 bodies)" in line)
    nums = {k: int(v) for k, v in re.findall(r"(moving|static|support|background|floaters|transparent|invalid) (\d+)",
                                             sel)}
    assert nums["moving"] + nums["static"] == scene.num_gaussians
    assert nums["support"] + nums["background"] + nums["floaters"] + nums["transparent"] + nums["invalid"] \
        == nums["static"]
    assert "body 2:" in log and "3 bodies" in log
    meta = json.loads((out / "sequence.json").read_text())
    assert len(meta["bodies"]) == 3 and all(b["handles"] >= 2 for b in meta["bodies"])
    assert meta["num_moving"] == sum(b["rows"] for b in meta["bodies"])
    assert {"contacts_body", "contacts_static", "max_overlap_m"} <= set(meta["step_stats"][-1])
    assert meta["step_stats"][-1]["contacts_support"] > 10  # the bodies stand on the table
    last = load_scene(str(out / "frame0004.ply"))
    assert last.num_gaussians == scene.num_gaussians and torch.isfinite(last.means).all()
    # one object moving (--select largest): a point drag of body 1 is refused as a missing body, not as a point
    # "too far from the object" (a fresh user's find)
    far = tmp_path / "far.json"
    far.write_text(json.dumps({"drags": [{"body": 1, "point": [9, 9, 9], "keyframes": [{"frame": 2,
                                                                                        "offset": [0, 0, 0]}]}]}))
    assert main(["animate", str(src), "--headless", "--frames", "3", "--select", "largest", "--export",
                 str(tmp_path / "one"), "--script", str(far)]) == 2
    err = capsys.readouterr().err
    assert "drags[0].body 1: the scene has 1 body" in err and "scene units from" not in err, err
    assert "cubature points: contact is resolved at their spacing" not in log  # 256 a body: no note
    # too few cubature points for contact (bodies sank into the table or fell through it, silently): a note
    # and a handle drag with no "body" (global numbering) says whose handle it grabbed
    glob = tmp_path / "global.json"
    glob.write_text(json.dumps({"drags": [{"handle": 40, "keyframes": [{"frame": 2, "offset": [0, 0, 0]}]}]}))
    assert main(["animate", str(src), "--headless", "--frames", "2", "--cubature", "48", "--export",
                 str(tmp_path / "few"), "--script", str(glob)]) == 0
    err = capsys.readouterr().err
    k, local = map(int, re.search(r"drag 0 grabs handle 40 \(body (\d)'s handle (\d+)\)", err).groups())
    learned = [int(h) - 1 for h in re.findall(r"body \d: \d+ Gaussians, (\d+) handles", err)]
    assert sum(learned[:k]) + local == 40 and 0 <= local < learned[k], (k, local, learned)
    note = next(line for line in err.splitlines() if "contact is resolved at their spacing" in line)
    assert re.search(r"body 1 has [45]\d, body 2 has [45]\d cubature points", note) and "--cubature 128" in note, note


def test_viewer_drags_any_body_and_shows_every_body(table_capture):
    """The browser viewer on several bodies: a gizmo per learned handle of every body; a websocket drag of a handle
    of the last body moves that body and leaves the others at rest; the display thread's deformation of the
    published state equals SceneBodies.deformed_gaussians() (every body's rows, in the scene's order)."""
    pytest.importorskip("websockets")
    from physskin_gs.bodies import prepare_bodies
    from physskin_gs.pipeline import AnimationConfig
    from physskin_gs_viewer.app import ViewerApp
    from physskin_gs_viewer.testing import ViserWsClient, wait_until

    scene, _ = table_capture
    anim = prepare_bodies(scene, AnimationConfig(num_cubature=256))
    state = anim.handle_transforms_scene()
    src = anim.display_deformer()
    F = torch.empty(anim.moving_index.numel(), 3, 3)
    means, covars = src.deform(state, gradients=F)
    ref = anim.deformed_gaussians(False)
    assert torch.allclose(means, ref.means[anim.moving_index], atol=1e-5)
    assert torch.allclose(covars, ref.covars[anim.moving_index], atol=1e-6)
    rows, ds = anim.deformed_rows(), anim.deformed_scene()  # what exports and recordings write
    assert torch.equal(rows["index"], anim.moving_index)
    assert torch.allclose(rows["means"], ref.means[anim.moving_index], atol=1e-5)
    assert torch.equal(ds.means[anim.moving_index], rows["means"])
    static = ~anim.moving
    assert torch.equal(ds.means[static], scene.means[static])
    app = ViewerApp(anim, None, host="127.0.0.1", port=0)
    app.start()
    c = None
    try:
        assert app.wait_ready(90), app.failed
        assert len(app.live.handle_gizmos) == anim.num_handles - 1 == sum(anim.body_handles) - 3
        c = ViserWsClient(app.port)
        c.send_camera((4.0, -2.0, 4.0), (0.0, 0.0, 0.0), up=tuple(app.live.up))
        assert wait_until(lambda: len(app.server.get_clients()) == 1, 10, interval=0.05)
        k = anim.num_handles - 2  # the last body's last handle
        hp0 = np.asarray(anim.handle_positions(), dtype=np.float64)
        target = hp0[k] + 0.3 * anim.bodies[-1].height_scene * app.live.up
        c0 = anim.body_centres()
        name = f"/handles/h{k}"
        c.drag_start(name)
        c.drag_to(name, target)

        def moved():
            return np.linalg.norm(app.live.worker.slot.get().handle_positions[k] - hp0[k])

        assert wait_until(lambda: moved() > 0.1 * anim.bodies[-1].height_scene, 60, interval=0.05)
        c.drag_end(name)
        assert wait_until(lambda: app.live.worker.active_anim_drags() == 0, 10, interval=0.05)
        c1 = anim.body_centres()
        d = np.linalg.norm(c1 - c0, axis=1)
        assert d[-1] > 3 * max(d[:-1].max(), 1e-4)  # the dragged body moved, the others hardly
        # the panel's stats show the contact counts (the three bodies stand on the table)
        stats = lambda: app.gui["stats"].content  # noqa: E731

        def on_support() -> int:  # the count of the latest stats line (-1 before there is one)
            m = re.search(r"\*\*(\d+)\*\* on the support", stats())
            return int(m.group(1)) if m else -1

        # (waited for: on a fresh install the first step compiles the native kernels, 0.2 s, and the line can still
        # be the first frame's, before the bodies have settled onto the table)
        assert wait_until(lambda: on_support() > 10, 30, interval=0.05), stats()
        assert app.error_log == []
    finally:
        if c is not None:
            c.close()
        app.stop()


def test_select_all_on_the_table_puts_the_floor_under_what_moves(table_capture, tmp_path, capsys):
    """``--select all`` on the table capture (a fresh user's find): the floor was the support plane, the table top,
    above its legs and the captured floor that moved too, and the penalty floor threw the whole scene into the sky
    (3.5 units up by frame 5). What moves reaches below the support, so the floor goes a quarter of its height under
    it, as without a support, and a note says so: after 10 frames nothing has risen."""
    from physskin_gs.cli import main
    from physskin_gs.io import load_scene, save_scene

    scene, _ = table_capture
    src = tmp_path / "table.ply"
    save_scene(scene, str(src))
    out = tmp_path / "all"
    assert main(["animate", str(src), "--headless", "--frames", "10", "--skinning", "rbf", "--select", "all",
                 "--cubature", "256", "--export", str(out)]) == 0
    err = capsys.readouterr().err
    assert "floor = support plane" not in err and "what moves reaches below the support" in err, err
    frame = load_scene(str(out / "frame0010.ply"))
    up = torch.as_tensor(frame.up_hint, dtype=torch.float64)  # (every exported frame records its up axis)
    rest = scene.means.double() @ up
    last = frame.means.double() @ up
    span = float(rest.max() - rest.min())
    assert float(last.max()) < float(rest.max()) + 0.01 * span  # nothing thrown up


def test_a_body_released_mid_drag_flies_on(table_capture):
    """Throwing: the ball (body 1) lifted by a drag spring toward a point above it and released while it rises keeps
    rising for the next frames (its velocity survives the release: only the spring goes), slowing down every frame;
    the other bodies stay where they stood."""
    from physskin_gs.bodies import prepare_bodies
    from physskin_gs.pipeline import AnimationConfig

    scene, _ = table_capture
    anim = prepare_bodies(scene, AnimationConfig(num_cubature=256))
    anim.step(10)
    c0 = anim.body_centres()
    h = anim.bodies[1].height_scene
    did = anim.start_drag(c0[1], body=1)
    # the table capture's up is -y in the file (the bodies stand at y < 0 above the table top at y = 0)
    lift = np.array([0.0, -3.0 * h, 0.0])
    anim.update_drag(did, c0[1] + lift)
    heights = []
    for _ in range(8):
        anim.step(1)
        heights.append(-float(anim.body_centres()[1][1]))
    anim.end_drag(did)
    after = []
    for _ in range(30):
        anim.step(1)
        after.append(-float(anim.body_centres()[1][1]))
    assert heights[-1] > heights[-2] > -float(c0[1][1])  # rising when released
    assert after[1] > heights[-1]  # still rising after the release: it flies on
    # and, in the air, slows down every frame under gravity alone until it is back where it was let go (the drag's
    # pull is capped at 50 g per grabbed point, SubspaceSimulator.DRAG_MAX_G: it is thrown a little way up and falls
    # back within 30 frames; uncapped it flew 5 of its heights up)
    back = next((k for k, y in enumerate(after) if y < heights[-1]), len(after))
    assert back >= 4, after
    assert np.all(np.diff([heights[-1]] + after[:back], 2) < 0), after[:back]
    c1 = anim.body_centres()
    others = np.linalg.norm((c1 - c0)[[0, 2]], axis=1)
    assert others.max() < 0.05 * h, others


def test_viewer_pins_and_freezes_each_body(table_capture):
    """The viewer's "Bodies" folder on the table capture's three bodies, driven over the websocket as a browser
    would: body 1 frozen holds its pose exactly while one of its handles is dragged (and moves again once unfrozen);
    body 2's base pinned pins that body only; the table lists the state; the stats line gives each body's step
    time."""
    pytest.importorskip("websockets")
    from physskin_gs.bodies import prepare_bodies
    from physskin_gs.pipeline import AnimationConfig
    from physskin_gs_viewer.app import ViewerApp
    from physskin_gs_viewer.constants import DEFAULT_PIN
    from physskin_gs_viewer.testing import ViserWsClient, wait_until

    scene, _ = table_capture
    anim = prepare_bodies(scene, AnimationConfig(num_cubature=256))
    app = ViewerApp(anim, None, host="127.0.0.1", port=0)
    app.start()
    c = None
    try:
        assert app.wait_ready(90), app.failed
        g = app.gui
        assert g["bodies_folder"].visible
        labels = [f"body {k} ({int(b.moving_index.numel()):,} Gaussians)" for k, b in enumerate(anim.bodies)]
        assert list(g["body"].options) == labels
        nl = sum(b.num_handles - 1 for b in anim.bodies)
        assert f"{nl} + 3 handles (learned + constant, 3 bodies)" in g["status"].content, g["status"].content
        assert "regions act on one object" in g["regions"].content and g["region_add"].disabled
        c = ViserWsClient(app.port)
        c.send_camera((4.0, -2.0, 4.0), (0.0, 0.0, 0.0), up=tuple(app.live.up))
        assert wait_until(lambda: len(app.server.get_clients()) == 1, 10, interval=0.05)
        stats = lambda: g["stats"].content  # noqa: E731
        assert wait_until(lambda: "per body, ms/step" in stats(), 20, interval=0.05), stats()
        c.gui_set(g["body"], labels[1])
        assert wait_until(lambda: app.bodies.chosen() == 1, 10, interval=0.05)
        c.gui_set(g["body_freeze"], True)
        assert wait_until(lambda: anim.frozen == [False, True, False], 10, interval=0.05), anim.frozen
        assert wait_until(lambda: "| 1 |" in g["bodies_table"].content
                          and "| yes |" in g["bodies_table"].content, 10, interval=0.05)
        q1 = anim.bodies[1].sim.q.clone()
        k = anim.bodies[0].num_handles - 1  # body 1's first learned handle (global numbering)
        assert anim.handle_owner(k) == (1, 0)
        hp0 = np.asarray(anim.handle_positions(), dtype=np.float64)
        name = f"/handles/h{k}"
        c.drag_start(name)
        c.drag_to(name, hp0[k] + 0.5 * anim.bodies[1].height_scene * app.live.up)
        f0 = anim.frame
        assert wait_until(lambda: anim.frame > f0 + 30, 60, interval=0.05)
        assert torch.equal(anim.bodies[1].sim.q, q1)  # frozen: the drag does not move it
        c.gui_set(g["body_freeze"], False)
        assert wait_until(lambda: anim.frozen == [False, False, False], 10, interval=0.05)

        def lifted():
            return float(np.linalg.norm(app.live.worker.slot.get().handle_positions[k] - hp0[k]))

        assert wait_until(lambda: lifted() > 0.1 * anim.bodies[1].height_scene, 60, interval=0.05), lifted()
        c.drag_end(name)
        c.gui_set(g["body"], labels[2])
        assert wait_until(lambda: app.bodies.chosen() == 2, 10, interval=0.05)
        assert g["body_freeze"].value is False and g["body_pin"].value is False
        c.gui_set(g["body_pin"], True)
        assert wait_until(lambda: anim.pins == [None, None, DEFAULT_PIN], 10, interval=0.05), anim.pins
        assert wait_until(lambda: DEFAULT_PIN in g["bodies_table"].content, 10, interval=0.05)
        # a recording's sequence.json describes the bodies as the headless export's does (it had none of it)
        meta = app.recording.sequence_meta()
        assert meta["bodies"] == anim.info["bodies"] and len(meta["bodies"]) == 3
        assert meta["collider"] == anim.info["collider"] and meta["num_handles"] == anim.num_handles
        assert app.error_log == []
    finally:
        if c is not None:
            c.close()
        app.stop()


def _object_box(scene, truth, i, pad=0.05):
    """'xmin,...,zmax' around object i's rows (grown by ``pad`` of its size), as a user would draw it."""
    n = scene.num_gaussians
    p = scene.means.numpy()[_rows(truth, f"object{i}", n)]
    lo, hi = p.min(0), p.max(0)
    g = pad * (hi - lo).max()
    return ",".join(f"{v:.4f}" for v in np.concatenate([lo - g, hi + g]))


def test_a_list_of_boxes_makes_one_body_per_box(table_capture):
    """``--select BOX;BOX`` (``--select`` given once per box): one body per box, in the boxes' order, each holding
    its object's rows and nothing of the table (the boxes reach into it); they rest on the table; a box over bare
    table top is refused by number; a list mixing a box with another form is refused before any work."""
    from physskin_gs.bodies import SceneBodies, prepare_bodies
    from physskin_gs.errors import OptionError
    from physskin_gs.pipeline import AnimationConfig, parse_selection_spec

    scene, truth = table_capture
    n = scene.num_gaussians
    boxes = [_object_box(scene, truth, i) for i in (2, 0)]
    assert parse_selection_spec(boxes[0] + ";")[0] == "box"
    with pytest.raises(OptionError, match="value 2 is 'auto'"):
        parse_selection_spec(boxes[0] + ";auto")
    anim = prepare_bodies(scene, AnimationConfig(num_cubature=256, select=";".join(boxes)))
    assert isinstance(anim, SceneBodies) and anim.num_bodies == 2 and anim.info["selection"] == "2 boxes"
    # the heaviest body (the cow, the second box) sets the shared frame whatever the order (a fresh user's find: the
    # first box did, so the scale and the stiffening changed with the order)
    swapped = prepare_bodies(scene, AnimationConfig(num_cubature=256, select=";".join(boxes[::-1])))
    assert swapped.sim_scale == pytest.approx(anim.sim_scale, rel=1e-9)
    assert swapped.bodies[1].sim.E == pytest.approx(anim.bodies[0].sim.E, rel=1e-6)
    table = _rows(truth, "table", n) | _rows(truth, "floor", n)
    for b, i in zip(anim.bodies, (2, 0)):
        m = b.moving.numpy()
        obj = _rows(truth, f"object{i}", n)
        assert (m & obj).sum() >= 0.95 * obj.sum() and not (m & table).any()
    c0 = anim.body_centres()
    st = anim.step(60)
    up = anim.up_vector.double()
    for b in anim.bodies:  # resting on the table: lowest 0.5 % within 2 % of its height of the support (as auto)
        h = anim.deformed_gaussians(False).means[b.moving_index].double() @ up
        assert abs(float(torch.quantile(h, 0.005)) - anim.support_height) <= 0.02 * b.height_scene
    # settled where they stood (measured 0.011 and 0.014 units, 2.5 % and 2.3 % of their heights, as with auto)
    moved = np.linalg.norm(anim.body_centres() - c0, axis=1)
    assert np.all(moved < 0.04 * np.array([b.height_scene for b in anim.bodies])), moved
    assert st["contacts_support"] > 10
    # a box over bare table top: its rows are all support
    p = scene.means.numpy()[_rows(truth, "table", n)]
    p = p[np.abs(p[:, 1]) < 0.005]  # the top's surface (y = 0 in the file, up -y), not its edge or legs
    far = p[np.argmin(np.linalg.norm(p - [p[:, 0].min() + 0.3, 0.0, np.median(p[:, 2])], axis=1))]  # off the edge
    bare = ",".join(f"{v:.4f}" for v in np.concatenate([far - 0.02, far + 0.02]))
    with pytest.raises(OptionError, match=r"--select box 2 \("):
        prepare_bodies(scene, AnimationConfig(num_cubature=256, select=f"{boxes[0]};{bare}"))


def test_viewer_add_component_makes_several_bodies(table_capture, tmp_path, capsys):
    """In the viewer (the table capture as a file, ``--select largest``: one body), "pick component" on the ball
    and "add component" on the cow, as a browser clicks them, list two boxes; "apply selection" re-prepares two
    bodies, each its object's rows, lists them on the console and shows the Bodies folder."""
    pytest.importorskip("websockets")
    import gc
    import weakref

    from physskin_gs.bodies import SceneBodies
    from physskin_gs.io import save_scene
    from physskin_gs.pipeline import AnimationConfig
    from physskin_gs_viewer.app import ViewerApp
    from physskin_gs_viewer.constants import DEFAULT_PIN
    from physskin_gs_viewer.testing import ViserWsClient, wait_until

    scene, truth = table_capture
    n = scene.num_gaussians
    src = tmp_path / "table.ply"
    save_scene(scene, str(src))
    centre = {i: scene.means.numpy()[_rows(truth, f"object{i}", n)].mean(0) for i in (0, 2)}
    app = ViewerApp(src, AnimationConfig(num_cubature=256, select="largest"), host="127.0.0.1", port=0)
    app.start()
    c = None
    try:
        assert app.wait_ready(120), app.failed
        assert not isinstance(app.live.anim, SceneBodies) and not app.gui["bodies_folder"].visible
        first = weakref.ref(app.live.anim)
        c = ViserWsClient(app.port)
        c.send_camera((0.0, -4.0, 0.5), (0.0, 0.0, 0.0), up=tuple(app.live.up))
        assert wait_until(lambda: len(app.server.get_clients()) == 1, 10, interval=0.05)
        g = app.gui

        def click_down(i, button):  # straight down (+y in the file: up is -y) onto object i's middle
            c.gui_set(g[button], True)
            assert wait_until(lambda: app.interaction.pick_armed, 5)
            c.click(origin=[centre[i][0], -3.0, centre[i][2]], direction=[0.0, 1.0, 0.0])
            assert wait_until(lambda: "component of" in g["scene_note"].content, 10), (g["scene_note"].content,
                                                                                     app.error_log)

        click_down(2, "pick")
        assert app.selection.others == [] and g["select"].value == "box"
        g["scene_note"].content = ""
        click_down(0, "add_pick")
        assert len(app.selection.others) == 1 and g["box_list"].visible and "2 boxes" in g["box_list"].content
        spec = app.selection.spec()
        assert spec.count(";") == 1
        gen = app.switcher.generation
        c.gui_set(g["apply_select"], True)
        assert wait_until(lambda: app.switcher.generation > gen and not app.switcher.busy, 180, 0.05), app.error_log
        anim = app.live.anim
        assert isinstance(anim, SceneBodies) and anim.num_bodies == 2, app.switcher.last_error
        assert app.config.select == spec and anim.info["selection"] == "2 boxes"
        for b, i in zip(anim.bodies, (2, 0)):
            obj = _rows(truth, f"object{i}", n)
            m = b.moving.numpy()
            assert (m & obj).sum() >= 0.9 * obj.sum() and (m & ~obj).sum() <= 0.02 * m.sum()
        assert wait_until(lambda: g["bodies_folder"].visible, 10, interval=0.05)
        # numbered as the console lists them (box order here: the ball's box first), with their sizes, not "heaviest"
        assert list(g["body"].options) == [f"body {k} ({int(b.moving_index.numel()):,} Gaussians)"
                                           for k, b in enumerate(anim.bodies)]
        err = capsys.readouterr().err  # the console lists the bodies, as animate --headless does
        assert "[physskin-gs] body 0:" in err and "[physskin-gs] body 1:" in err, err[-2000:]
        # replaced scenes are freed: the removed handle gizmos' callbacks held every one (a fresh user's ten
        # re-preparations of this capture grew the process by 100 MB each)
        # a pin on body 1 and a freeze of body 0, from the Bodies folder, survive "apply selection" with the same
        # boxes (they were dropped while the folder had shown them)
        labels = list(g["body"].options)
        c.gui_set(g["body"], labels[1])
        assert wait_until(lambda: app.bodies.chosen() == 1, 10, interval=0.05)
        c.gui_set(g["body_pin"], True)
        assert wait_until(lambda: anim.pins == [None, DEFAULT_PIN], 10, interval=0.05), anim.pins
        c.gui_set(g["body"], labels[0])
        assert wait_until(lambda: app.bodies.chosen() == 0, 10, interval=0.05)
        c.gui_set(g["body_freeze"], True)
        assert wait_until(lambda: anim.frozen == [True, False], 10, interval=0.05), anim.frozen
        second = weakref.ref(anim)
        del anim, b, m
        gen = app.switcher.generation
        c.gui_set(g["apply_select"], True)  # the same two boxes again
        assert wait_until(lambda: app.switcher.generation > gen and not app.switcher.busy, 180, 0.05), app.error_log
        assert app.live.anim.pins == [None, DEFAULT_PIN] and app.live.anim.frozen == [True, False]
        assert wait_until(lambda: (gc.collect() or True) and first() is None and second() is None, 10), \
            "a replaced scene is still alive"
        assert app.error_log == []
    finally:
        if c is not None:
            c.close()
        app.stop()


def test_animate_select_given_per_box(table_capture, tmp_path, capsys):
    """``animate --select BOX --select BOX``: argparse would keep the last; each box is a body (the log and
    sequence.json say so). ``--select auto --select BOX`` is refused before any work."""
    from physskin_gs.cli import main
    from physskin_gs.io import save_scene

    scene, truth = table_capture
    src = tmp_path / "table.ply"
    save_scene(scene, str(src))
    b2, b0 = _object_box(scene, truth, 2), _object_box(scene, truth, 0)
    out = tmp_path / "boxes"
    assert main(["animate", str(src), "--headless", "--frames", "3", "--cubature", "256", "--select", b2,
                 "--select", b0, "--export", str(out)]) == 0
    err = capsys.readouterr().err
    assert "selection 2 boxes" in err and "body 1:" in err and "body 2:" not in err, err
    meta = json.loads((out / "sequence.json").read_text())
    assert len(meta["bodies"]) == 2 and meta["select"] == f"{b2};{b0}"
    mixed = tmp_path / "mixed"
    assert main(["animate", str(src), "--headless", "--select", "auto", "--select", b0, "--export", str(mixed)]) == 2
    err = capsys.readouterr().err
    assert "several selections must all be boxes" in err and "analysing" not in err, err
    assert not mixed.exists()


def test_pins_of_several_bodies_change_all_or_nothing(table_capture):
    """``SceneBodies.set_pin`` with no body: a malformed spec is said as such and a region no body holds is refused,
    and either way every body keeps its pin (a fresh user's find: both unpinned every body); a sphere on one body
    pins that body only; ``body`` must be an integer (True is not body 1)."""
    from physskin_gs.bodies import prepare_bodies
    from physskin_gs.errors import OptionError
    from physskin_gs.pipeline import AnimationConfig

    scene, _ = table_capture
    anim = prepare_bodies(scene, AnimationConfig(num_cubature=128))
    anim.set_pin("base", body=0)
    anim.set_pin("below:0.1", body=2)
    before = anim.pins
    with pytest.raises(OptionError, match="expected 'base'"):
        anim.set_pin("nonsense")
    with pytest.raises(OptionError, match="holds none of the 3 bodies"):
        anim.set_pin("sphere:9,9,9,0.1")
    assert anim.pins == before == ["base", None, "below:0.1"]
    c = anim.body_centres()[1]
    anim.set_pin(f"sphere:{c[0]},{c[1]},{c[2]},0.1")
    assert [p is not None for p in anim.pins] == [False, True, False]
    with pytest.raises(OptionError, match="body True"):
        anim.set_frozen(True, True)


def test_one_box_and_box_notes(table_capture, tmp_path, capsys):
    """One box takes its object as a box of a list does (the rows under it down to the support: a box whose top
    stops short of the table still takes the cow's hooves, and none of the table); a box that takes only part of an
    object says so; an empty box says what is in it; ``--pin`` with a sphere on one body pins that body (it was
    checked against body 0 alone and refused)."""
    from physskin_gs.bodies import prepare_bodies
    from physskin_gs.cli import main
    from physskin_gs.errors import OptionError
    from physskin_gs.io import save_scene
    from physskin_gs.pipeline import AnimatedScene, AnimationConfig

    scene, truth = table_capture
    n = scene.num_gaussians
    cow = _rows(truth, "object0", n)
    p = scene.means.numpy()[cow]
    lo, hi = p.min(0) - 0.02, p.max(0) + 0.02
    hi[1] = p[:, 1].max() - 0.05  # up is -y: the box stops 0.05 above the table (its hooves are under it)
    box = ",".join(f"{v:.4f}" for v in np.concatenate([lo, hi]))
    anim = prepare_bodies(scene, AnimationConfig(num_cubature=128, select=box))
    assert isinstance(anim, AnimatedScene) and anim.info["selection"] == box
    m = anim.moving.numpy()
    table = _rows(truth, "table", n) | _rows(truth, "floor", n)
    assert (m & cow).sum() >= 0.97 * cow.sum() and not (m & table).any()
    half = ",".join(f"{v:.4f}" for v in np.concatenate([lo, [0.5 * (lo[0] + hi[0]), hi[1], hi[2]]]))
    notes = []
    prepare_bodies(scene, AnimationConfig(num_cubature=128, select=f"{half};{_object_box(scene, truth, 2)}"),
                   progress=lambda stage, frac: notes.append(stage))
    assert any("box 1 takes" in s and "cut in two" in s for s in notes), notes
    with pytest.raises(OptionError, match=r"box 2 \(.*keeps no Gaussian.*no row inside it"):
        prepare_bodies(scene, AnimationConfig(num_cubature=128, select=f"{box};5,5,5,6,6,6"))
    src = tmp_path / "table.ply"
    save_scene(scene, str(src))
    ball = scene.means.numpy()[_rows(truth, "object2", n)].mean(0)
    sphere = f"sphere:{ball[0]:.4f},{ball[1]:.4f},{ball[2]:.4f},0.15"
    assert main(["animate", str(src), "--headless", "--frames", "2", "--cubature", "128", "--pin", sphere,
                 "--export", str(tmp_path / "pinned")]) == 0
    err = capsys.readouterr().err
    pinned = [line for line in err.splitlines() if "pinned sphere:" in line]
    assert len(pinned) == 1 and "body 1:" in pinned[0], err
    meta = json.loads((tmp_path / "pinned" / "sequence.json").read_text())
    assert [b.get("pin") for b in meta["bodies"]] == [None, sphere, None]


def test_a_script_freezes_a_body(table_capture, tmp_path, capsys):
    """``--script`` with a ``freezes`` list: the ball (body 1) frozen at frame 2 until frame 6 does not move while a
    drag lifts it (its rows in frames 2 and 6 identical), moves once let go; a freeze with one object moving, or of a
    body that does not exist, is refused before anything is written; sequence.json's step stats carry per-body
    times."""
    from physskin_gs.cli import main
    from physskin_gs.io import load_scene, save_scene

    scene, truth = table_capture
    n = scene.num_gaussians
    src = tmp_path / "table.ply"
    save_scene(scene, str(src))
    ball = _rows(truth, "object2", n)
    script = tmp_path / "freeze.json"
    script.write_text(json.dumps({
        "freezes": [{"body": 1, "frame": 2, "until": 6}],
        "drags": [{"body": 1, "handle": 0, "keyframes": [{"frame": 2, "offset": [0, 0, 0]},
                                                         {"frame": 10, "offset": [0, -0.6, 0]}]}]}))
    out = tmp_path / "seq"
    assert main(["animate", str(src), "--headless", "--frames", "12", "--cubature", "128", "--script", str(script),
                 "--export", str(out)]) == 0
    err = capsys.readouterr().err
    assert "frame 2: body 1 frozen until frame 6" in err and "frame 7: body 1 unfrozen" in err, err
    assert "moves nothing" not in err  # the drag outlasts the freeze
    f = {k: load_scene(str(out / f"frame{k:04d}.ply")).means.numpy()[ball] for k in (2, 6, 12)}
    assert np.array_equal(f[2], f[6])  # frozen: not a row moved under the drag
    assert -(f[12][:, 1].mean() - f[6][:, 1].mean()) > 0.05  # let go: the drag lifts it (up is -y)
    meta = json.loads((out / "sequence.json").read_text())
    assert len(meta["step_stats"][-1]["body_ms"]) == 3
    for bad, msg in (({"body": 5, "frame": 2}, "freezes[0].body 5: the scene has 3 bodies"),
                     ({"body": 1, "frame": 4, "until": 2}, "freezes[0].until must be an integer >= its frame")):
        script.write_text(json.dumps({"freezes": [bad]}))
        assert main(["animate", str(src), "--headless", "--frames", "3", "--cubature", "128", "--script",
                     str(script), "--export", str(tmp_path / "bad")]) == 2
        assert msg in capsys.readouterr().err
    # a point drag (no body named: the nearest, the ball) frozen for all its frames (to the end): a warning, it runs
    script.write_text(json.dumps({"freezes": [{"body": 1, "frame": 2}], "drags": [
        {"point": scene.means[ball].mean(0).tolist(), "keyframes": [{"frame": 2, "offset": [0, -0.6, 0]}]}]}))
    assert main(["animate", str(src), "--headless", "--frames", "3", "--cubature", "128", "--script", str(script),
                 "--export", str(tmp_path / "held")]) == 0
    assert "drags[0] pulls body 1, which freezes[0] holds still for all of its frames (frames 2-end): the drag " \
           "moves nothing" in capsys.readouterr().err
    script.write_text(json.dumps({"freezes": [{"body": 0, "frame": 2}]}))
    assert main(["animate", str(src), "--headless", "--frames", "3", "--cubature", "128", "--select", "largest",
                 "--script", str(script), "--export", str(tmp_path / "one")]) == 2
    assert "freezing holds one body still among several" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists() and not (tmp_path / "one").exists()


def test_overlapping_freezes_of_one_body_are_refused(tmp_path, capsys):
    """Two freezes of one body that overlap ended at the first one's end (a fresh user's body 1 moved during frames
    7-12 while the log said it was frozen until 12): refused before any work, with the one freeze to give instead;
    freezes of different bodies, or one after the other, are fine."""
    from physskin_gs.cli.animate import MotionScript
    from physskin_gs.errors import OptionError

    def load(freezes):
        f = tmp_path / "s.json"
        f.write_text(json.dumps({"freezes": freezes}))
        return MotionScript.load(str(f))

    with pytest.raises(OptionError, match=r"freezes\[1\] \(body 1, frames 5-12\) overlaps freezes\[0\] \(frames 3-6\); "
                                          r"give that body one freeze from frame 3 until 12"):
        load([{"body": 1, "frame": 3, "until": 6}, {"body": 1, "frame": 5, "until": 12}])
    with pytest.raises(OptionError, match=r"frames 9-end\) overlaps freezes\[0\] \(frames 3-10\).* until -1"):
        load([{"body": 1, "frame": 3, "until": 10}, {"body": 1, "frame": 9}])
    assert len(load([{"body": 1, "frame": 3, "until": 6}, {"body": 1, "frame": 7, "until": 9},
                     {"body": 2, "frame": 4, "until": 8}]).freezes) == 3


def test_skin_counts_every_body_animate_moves(table_capture, tmp_path, capsys):
    """``skin``'s note said animate moves "only the object ... (10000 of them)" on the table capture, where animate
    moves its three objects (21609 rows): the note now counts every body."""
    from physskin_gs.cli import main
    from physskin_gs.io import save_scene

    scene, truth = table_capture
    src = tmp_path / "table.ply"
    save_scene(scene, str(src))
    assert main(["skin", str(src), "-o", str(tmp_path / "w.npz")]) == 0
    note = next(x for x in capsys.readouterr().err.splitlines() if "animate moves only" in x)
    n = sum(b - a for a, b in truth["rows"]["object"])
    assert "the 3 objects its scene analysis finds on the support" in note and f"({n} of them" in note, note


def test_viewer_shows_the_raised_e_the_bodies_run_at(table_capture, tmp_path):
    """The table capture's three bodies in the default material, raised until each stands (animate's config): the
    Material folder's E field shows the E every body runs at, as for one object (it showed the unraised 100000
    while the bodies ran at 240000, and a user who nudged it halved their stiffness: a fresh user's report)."""
    pytest.importorskip("websockets")
    from physskin_gs.bodies import SceneBodies
    from physskin_gs.io import save_scene
    from physskin_gs.materials import MATERIALS
    from physskin_gs.pipeline import STAND_SAG, AnimationConfig
    from physskin_gs_viewer.app import ViewerApp

    scene, _ = table_capture
    src = tmp_path / "table.ply"
    save_scene(scene, str(src))
    soft = MATERIALS["soft"]
    cfg = AnimationConfig(material="soft", E=soft.E, nu=soft.nu, density=soft.density, stand_sag=STAND_SAG,
                          num_cubature=256)
    app = ViewerApp(src, cfg, host="127.0.0.1", port=0, play=False)
    app.start()
    try:
        assert app.wait_ready(180), app.failed
        anim = app.live.anim
        assert isinstance(anim, SceneBodies) and anim.num_bodies == 3
        stand = anim.info["stand"]
        assert stand["E_to"] > soft.E
        assert {float(b.sim.E) for b in anim.bodies} == {stand["E_to"]}
        g = app.gui
        assert g["material"].value == "soft, raised to stand"
        assert float(g["E"].value) == pytest.approx(stand["E_to"])
    finally:
        app.stop()


# ------------------------------------------------------------------------- one box, no support: the captured base
def test_captured_base_cover_known_answers():
    """The fraction of a selection's base footprint with static rows captured under it (z up, height 1, cells of
    1/16): a full static slab just under it covers all of it, a slab under half of it about half, a slab deeper than
    a tenth of its height or only floaters none; an empty selection gives nan."""
    from physskin_gs.bodies import captured_base_cover

    g = np.linspace(-0.5, 0.5, 41)
    xy = np.stack(np.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2)
    column = np.column_stack([xy * 0.4, np.zeros(len(xy))])  # a base layer at z = 0 ...
    column = np.concatenate([column, column + [0.0, 0.0, 1.0]])  # ... and a top at z = 1: height 1
    slab = np.column_stack([xy * 0.6, np.full(len(xy), -0.03)])  # under the whole base, 0.03 below it
    up = np.array([0.0, 0.0, 2.0])  # need not be unit

    def cover(static_pts):
        P = np.concatenate([column, static_pts])
        moving = np.arange(len(P)) < len(column)
        return captured_base_cover(P, moving, ~moving, up)

    c, lowest, height = cover(slab)
    assert c == 1.0 and lowest == pytest.approx(0.0) and height == pytest.approx(1.0)
    half = cover(slab[slab[:, 0] < 0.0])[0]
    assert 0.45 <= half <= 0.65  # the base's cells at x < 0, and one column of neighbours
    assert cover(slab - [0.0, 0.0, 0.2])[0] == 0.0  # 0.23 below: not under it (band 0.1)
    assert cover(slab + [2.0, 0.0, 0.0])[0] == 0.0  # beside it, not under it
    c, lowest, height = captured_base_cover(column, np.zeros(len(column), bool), np.ones(len(column), bool), up)
    assert c == 0.0 and np.isnan(lowest) and np.isnan(height)


def _freestanding_block(n=3000, seed=0):
    """A block (0.6 x 0.6 across, 0.85 up along +z) of Gaussians with nothing under it: no support plane."""
    from physskin_gs.scene import GaussianScene

    rng = np.random.default_rng(seed)
    means = rng.uniform([-0.3, -0.3, 0.05], [0.3, 0.3, 0.9], (n, 3))
    return GaussianScene(means=torch.as_tensor(means, dtype=torch.float32),
                         quats=torch.tensor([[1.0, 0.0, 0.0, 0.0]]).repeat(n, 1),
                         log_scales=torch.full((n, 3), -4.0), opacity_logits=torch.full((n,), 3.0),
                         sh_dc=torch.full((n, 3), 0.5), sh_rest=torch.zeros(n, 0, 3), source="block",
                         format="synthetic")


def test_one_box_without_a_support_rests_on_the_rows_captured_under_it():
    """A box that cuts an object from what it stood on, with no support plane found (a photo frame picked above the
    table patch it stood on, narrower than its own footprint), rests on them: the floor at the selection's lowest
    point (it fell through them onto the default floor a quarter of its height below); a box around the whole
    freestanding object keeps the default floor, and ``--floor HEIGHT`` wins."""
    from physskin_gs.bodies import prepare_bodies
    from physskin_gs.pipeline import AnimationConfig

    scene = _freestanding_block()
    z = scene.means.numpy()[:, 2]
    notes = []
    cut = prepare_bodies(scene, AnimationConfig(num_cubature=96, up="z", select="-1,-1,0.3,1,1,2"),
                         progress=lambda stage, frac: notes.append(stage))
    assert cut.info["scene_analysis"] is None or cut.support_height is None
    lowest_cut = float(z[z >= 0.3].min())
    assert cut.floor_scene == pytest.approx(lowest_cut, abs=1e-4)
    assert any("rests on them" in s and re.search(r"under 9\d% of the selection's base", s) for s in notes), notes
    whole = prepare_bodies(scene, AnimationConfig(num_cubature=96, up="z", select="-1,-1,-1,1,1,2"))
    assert whole.floor_scene == pytest.approx(z.min() - 0.25 * np.ptp(z), abs=0.01)
    given = prepare_bodies(scene, AnimationConfig(num_cubature=96, up="z", select="-1,-1,0.3,1,1,2",
                                                  floor_height=-0.5))
    assert given.floor_scene == pytest.approx(-0.5, abs=1e-6)
    cut.step(30)  # it rests: its base (1 % height quantile) and its top stay within 2 % of its height
    zz = cut.deformed_gaussians().means.numpy()[cut.moving.numpy(), 2]
    tall = z.max() - lowest_cut
    assert abs(np.quantile(zz, 0.01) - np.quantile(z[z >= 0.3], 0.01)) <= 0.02 * tall
    assert abs(zz.max() - z.max()) <= 0.02 * tall


def test_several_bodies_report_their_energy(table_capture):
    """With several bodies a step reports the energy as one body does (the viewer's stats line showed "-"): every
    body's kinetic, elastic, gravity, ... summed by kind, plus the contact penalty, and their total; kinetic energy
    is 1/2 qdot^T M qdot of each body (checked against the bodies' own), and it grows as they fall from rest."""
    from physskin_gs.bodies import SceneBodies, prepare_bodies
    from physskin_gs.pipeline import AnimationConfig

    scene, _ = table_capture
    anim = prepare_bodies(scene, AnimationConfig(num_cubature=128))
    assert isinstance(anim, SceneBodies) and anim.num_bodies >= 2
    e0 = anim.step(1)["energy"]
    st = anim.step(3)
    e = st["energy"]
    own = [b.sim.energies() for b in anim.bodies]
    assert e["kinetic"] == pytest.approx(sum(o["kinetic"] for o in own), rel=1e-9)
    assert e["elastic"] == pytest.approx(sum(o["elastic"] for o in own), rel=1e-9)
    assert e["contact"] >= 0.0
    assert e["total"] == pytest.approx(sum(v for k, v in e.items() if k != "total"), rel=1e-12)
    assert e["total"] == pytest.approx(sum(o["total"] for o in own) + e["contact"], rel=1e-9, abs=1e-12)
    assert e0["kinetic"] > 0.0 and all(np.isfinite(v) for v in e.values())


def test_an_object_held_above_the_support_is_named_with_the_boxes_that_drop_it(table_capture):
    """A fresh user's drop set-up: the ball lifted 0.3 units above the table (not touching it) stayed in the air
    with no word while the cow and the crate moved. The scene analysis lists it as a part hovering over the support
    and the summary names one --select box per body and one for it; with those boxes it falls onto the table. The
    table capture as made (everything standing) lists none."""
    from physskin_gs.bodies import prepare_bodies
    from physskin_gs.cli._common import scene_summary
    from physskin_gs.pipeline import AnimationConfig, analyze_for_animation, parse_selection_spec
    from physskin_gs.scene import GaussianScene

    scene, truth = table_capture
    n = scene.num_gaussians
    assert analyze_for_animation(scene).hovering_parts == []
    ball = _rows(truth, "object2", n)
    means = scene.means.clone()
    means[torch.from_numpy(ball), 1] -= 0.3  # up is -y
    high = GaussianScene(means=means, quats=scene.quats, log_scales=scene.log_scales,
                         opacity_logits=scene.opacity_logits, sh_dc=scene.sh_dc, sh_rest=scene.sh_rest,
                         format=scene.format)
    a = analyze_for_animation(high)
    assert len(a.hovering_parts) == 1
    ratio, lo, hi = a.hovering_parts[0]
    bp = means.numpy()[ball]
    assert np.allclose(lo, bp.min(0), atol=0.02) and np.allclose(hi, bp.max(0), atol=0.02) and ratio > 0.25
    anim = prepare_bodies(high, AnimationConfig(num_cubature=128))
    assert not anim.moving.numpy()[ball].any()  # it stays static ...
    notes = [x for x in scene_summary(anim, AnimationConfig()) if "above the support without standing on it" in x]
    assert len(notes) == 1, notes  # ... and is said, with the boxes
    given = [t.split("=", 1)[1] for t in notes[0].split() if t.startswith("--select=")]
    kind, boxes = parse_selection_spec(";".join(given))
    assert kind == "boxes" and len(boxes) == anim.num_bodies + 1
    dropped = prepare_bodies(high, AnimationConfig(num_cubature=128, select=";".join(given)))
    m = dropped.bodies[-1].moving.numpy()
    assert m[ball].mean() > 0.97
    dropped.step(25)
    y = dropped.deformed_gaussians().means.numpy()[ball, 1]
    top = float(scene.means.numpy()[_rows(truth, "table", n), 1].min())  # the table top's y (up is -y)
    assert abs(float(y.max()) - float(scene.means.numpy()[ball, 1].max())) < 0.03  # back where it stood
    assert float(y.max()) <= top + 0.03


def test_a_box_reaching_under_the_table_top_takes_none_of_the_table(table_capture):
    """A fresh user's box around the ball at the table's edge reached 0.1 units under the table top: it took 212
    rows of the table's rim (under the support's plane, within its slab, not support rows), and the ball sank
    through the table with them. Rows under the plane move only when the analysis gave them to an object."""
    from physskin_gs.bodies import box_masks, prepare_bodies
    from physskin_gs.pipeline import AnimationConfig, analyze_for_animation

    scene, truth = table_capture
    n = scene.num_gaussians
    box = (np.array([0.85, -0.5, -0.6]), np.array([1.6, 0.1, 0.1]))
    (mask,), _ = box_masks(scene, [box], analyze_for_animation(scene))
    m = mask.numpy()
    table, ball = _rows(truth, "table", n), _rows(truth, "object2", n)
    assert not (m & table).any() and m[ball].all()
    anim = prepare_bodies(scene, AnimationConfig(num_cubature=128, select=",".join(map(str, [*box[0], *box[1]]))))
    assert anim.support_height is not None  # the floor is the support, not a quarter of the height under it


def test_each_body_has_its_own_support_depth(table_capture):
    """The support holds a point no deeper than a tenth of its own body's height: a box that caught only the crate's
    lid (a body 1e-4 m tall) set one depth of 1e-5 m for every body, and the ball dropped next to it fell through
    the table. A body that thin is named as a sheet."""
    from physskin_gs.bodies import SUPPORT_DEPTH, body_lines, prepare_bodies
    from physskin_gs.pipeline import AnimationConfig

    scene, truth = table_capture
    n = scene.num_gaussians
    crate = scene.means.numpy()[_rows(truth, "object1", n)]
    top = crate[:, 1].min()  # up is -y: the lid
    lid = [crate[:, 0].min() + 0.03, top - 0.01, crate[:, 2].min() + 0.03,  # inside its walls: the lid alone
           crate[:, 0].max() - 0.03, top + 0.004, crate[:, 2].max() - 0.03]
    ball = _object_box(scene, truth, 2)
    anim = prepare_bodies(scene, AnimationConfig(num_cubature=128, select=f"{ball};{','.join(map(str, lid))}"))
    info = anim.info["collider"]["support_region"]
    heights = [b["height_m"] for b in anim.info["bodies"]]
    assert info["depth_m_per_body"] == pytest.approx([SUPPORT_DEPTH * h for h in heights])
    assert [b.sim.floor_region.depth for b in anim.bodies] == pytest.approx(info["depth_m_per_body"])
    assert "a sheet" in body_lines(anim)[1] and "a sheet" not in body_lines(anim)[0]


def test_the_headless_video_draws_the_floor_of_bodies_without_a_support(table_capture):
    """Several bodies with no support plane share an endless floor at the lowest body's base: the headless video
    draws it as the checker, as for one object (a fresh user's two boxes on a capture without a support showed the
    bodies over nothing); on a captured support, which is finite, no endless checker is drawn."""
    from physskin_gs.bodies import SceneBodies, prepare_bodies
    from physskin_gs.cli.animate import OrbitVideo
    from physskin_gs.pipeline import AnimationConfig

    two = prepare_bodies(_freestanding_block(), AnimationConfig(num_cubature=64, up="z",
                                                                 select="-1,-1,0,0,1,2;0,-1,0,1,1,2"))
    assert isinstance(two, SceneBodies) and two.support_height is None
    assert OrbitVideo(two, 64, 64, 2, 0.0).floor is not None
    scene, _ = table_capture
    on_table = prepare_bodies(scene, AnimationConfig(num_cubature=64))
    assert isinstance(on_table, SceneBodies) and OrbitVideo(on_table, 64, 64, 2, 0.0).floor is None
