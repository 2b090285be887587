"""The viewer's scene panel on the real pipeline: counts and up vector shown, dim static, re-preparation on a new
selection (box, from the inputs, the gizmo or a picked component) or up axis, without restarting the server.

The scene is a tiny synthetic capture (physskin_gs_viewer.testing.make_capture_scene: a block on a wide slab and
a far clump of floaters) saved as a PLY, so the app runs the path flow the CLI runs (load, prepare_animation with
the scene analysis). RBF skinning and 128 cubature points keep a preparation well under a second. The browser is
the websocket stand-in of tests/test_viewer.py; every wait is bounded; servers bind 127.0.0.1 on a free port.
"""

from __future__ import annotations

import contextlib
import warnings

import numpy as np
import pytest

viser = pytest.importorskip("viser")
pytest.importorskip("websockets")
pytest.importorskip("msgspec")
pipeline = pytest.importorskip("physskin_gs.pipeline")

from physskin_gs import io as pio  # noqa: E402
from physskin_gs.errors import OptionError  # noqa: E402
from physskin_gs_viewer.constants import DIM_OPACITY  # noqa: E402
from physskin_gs_viewer.app import ViewerApp  # noqa: E402
from physskin_gs_viewer.selection import box_spec, component_bounds, parse_box, scene_facts  # noqa: E402
from physskin_gs_viewer.testing import (  # noqa: E402
    FakeAnimatedScene,
    ViserWsClient,
    make_blob_scene,
    make_capture_scene,
    wait_until,
)

N_SUPPORT, N_OBJECT, N_FLOATERS = 1500, 2000, 30
BLOCK = slice(N_SUPPORT, N_SUPPORT + N_OBJECT)


@pytest.fixture(scope="module")
def capture_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("capture") / "capture.ply"
    pio.save_scene(make_capture_scene(N_OBJECT, N_SUPPORT, N_FLOATERS), path)
    return path


@contextlib.contextmanager
def running_app(path, cfg, ready: float = 60.0):
    """A ViewerApp on ``path`` with ``cfg`` on a free loopback port, ready, and one websocket client connected:
    ``(app, client)``; both are closed on exit."""
    with open("/dev/null", "w") as quiet, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fallbacks of the tiny scene are reported as warnings
        app = ViewerApp(path, cfg, host="127.0.0.1", port=0, progress_stream=quiet)
        app.start()
        c = None
        try:
            assert app.wait_ready(ready), app.failed
            c = ViserWsClient(app.port)
            c.send_camera((3.0, 3.0, 2.0), (0.0, 0.0, 0.4))
            assert wait_until(lambda: len(app.server.get_clients()) == 1, 10)
            yield app, c
        finally:
            if c is not None:
                c.close()
            app.stop()


@pytest.fixture
def app_and_client(capture_path):
    cfg = pipeline.AnimationConfig(num_cubature=128, skinning="rbf", num_handles=6, gravity=0.0, fit_seconds=2.0)
    with running_app(capture_path, cfg) as (app, c):
        yield app, c


def reprepared(app, gen: int, timeout: float = 60.0) -> bool:
    """Wait for the re-preparation after generation ``gen`` to finish (and the new scene to be live)."""
    return wait_until(lambda: app.switcher.generation > gen and not app.switcher.busy, timeout, 0.05)


def rows_in_box(app, spec) -> int:
    lo, hi = parse_box(spec)
    m = app.source_scene.means.numpy().astype(np.float64)
    return int(np.all((m >= lo) & (m <= hi), axis=1).sum())


def wire_rows(c, name) -> int:
    """Splats in the last splat node ``name`` the tab was sent (-1: none)."""
    msg = c.get("GaussianSplatsMessage", name)
    buf = None if msg is None else msg["props"].get("buffer")
    return -1 if buf is None else np.asarray(buf).view(np.uint32).reshape(-1, 8).shape[0]


# ------------------------------------------------------------------------------------------- panel facts
def test_panel_shows_counts_and_up_of_the_scene_analysis(app_and_client):
    app, _ = app_and_client
    anim = app.live.anim
    info = anim.info
    sa = info["scene_analysis"]
    n = anim.scene.num_gaussians
    # the analysis found the slab (up +z from its normal), the block moves, the slab and the floaters do not
    assert sa["up_source"] == "support-plane" and np.allclose(sa["up"], [0, 0, 1], atol=1e-2)
    mv = anim.moving.numpy()
    assert mv[BLOCK].mean() > 0.95 and not mv[:N_SUPPORT].any() and not mv[-N_FLOATERS:].any()
    facts = scene_facts(anim)
    assert facts["moving"] == info["num_moving"] == int(mv.sum())
    assert facts["static"] == n - info["num_moving"]
    assert facts["floaters"] == sa["counts"]["floater"] == N_FLOATERS
    assert facts["support"] == sa["counts"]["support"]
    assert facts["up"] == pytest.approx(info["up"]) and facts["up_source"] == "support-plane"
    text = app.gui["scene_facts"].content
    assert f"moving **{info['num_moving']:,}**" in text
    assert f"static **{n - info['num_moving']:,}**" in text
    assert f"floaters **{sa['counts']['floater']:,}**" in text
    up = ", ".join(f"{v:+.3f}" for v in info["up"])
    assert f"up [{up}] (support-plane)" in text
    assert app.gui["up"].value == "auto" and app.gui["select"].value == "auto"


def test_dim_static_greys_only_the_static_splats(app_and_client):
    app, c = app_and_client
    live = app.live
    st = live.static_shown
    n_static = live.anim.scene.num_gaussians - live.anim.info["num_moving"]
    assert st is not None and len(st) == len(live.static_idx) == n_static

    def static_rgba():
        msg = c.get("SceneNodeUpdateMessage", "/scene/static")
        buf = None if msg is None else msg["updates"].get("buffer")
        if buf is None:
            return None
        return np.asarray(buf).view(np.uint32).reshape(-1, 8)[:, 7].copy().view(np.uint8).reshape(-1, 4)

    app.gui["dim_static"].value = True
    expected_a = np.clip(live.opac[st] * DIM_OPACITY * 255, 0, 255).astype(np.uint8)
    assert wait_until(lambda: static_rgba() is not None and np.array_equal(static_rgba()[:, 3], expected_a), 10)
    rgba = static_rgba()
    floaters = np.isin(st, np.arange(N_SUPPORT + N_OBJECT, N_SUPPORT + N_OBJECT + N_FLOATERS))
    green = rgba[floaters].astype(int)
    assert (green[:, 1] - green[:, 0]).max() < 0.5 * (0.8 - 0.1) * 255  # pulled toward grey
    # server-rendered colours follow; moving rows keep theirs
    rgb, opac = app.display.colors()
    np.testing.assert_allclose(opac[live.live_idx], live.opac[live.live_idx])
    np.testing.assert_allclose(opac[live.static_idx], live.opac[live.static_idx] * DIM_OPACITY, rtol=1e-6)
    app.gui["dim_static"].value = False
    full_a = np.clip(live.opac[st] * 255, 0, 255).astype(np.uint8)
    assert wait_until(lambda: np.array_equal(static_rgba()[:, 3], full_a), 10)
    assert app.error_log == []


# ------------------------------------------------------------------------------------------- re-preparation
def test_box_selection_reprepares_and_the_moving_count_follows(app_and_client):
    app, c = app_and_client
    first = app.live.anim
    port = app.port
    # the box mode shows the inputs and the gizmo, initialised to the moving rows' bounds
    c.gui_set(app.gui["select"], "box")
    assert wait_until(lambda: app.gui["box_min"].visible and app.selection.gizmo.visible, 5)
    lo, hi = app.selection.box()
    assert lo[2] < 0.06 and hi[2] > 0.89  # around the block
    # lower half of the block, typed in as a browser would
    c.gui_set(app.gui["box_min"], [-0.35, -0.35, 0.04])
    c.gui_set(app.gui["box_max"], [0.35, 0.35, 0.5])
    assert wait_until(lambda: np.allclose(app.selection.gizmo.hi, [0.35, 0.35, 0.5]), 5)  # the gizmo follows
    gen = app.switcher.generation
    c.gui_set(app.gui["apply_select"], True)  # a click
    assert reprepared(app, gen), app.error_log
    anim = app.live.anim
    assert anim is not first and app.switcher.last_error is None
    spec = app.config.select
    assert parse_box(spec) is not None and np.allclose(parse_box(spec)[1], [0.35, 0.35, 0.5])
    expected = rows_in_box(app, spec)
    assert anim.info["num_moving"] == expected == int(anim.moving.sum())
    assert 0.4 * N_OBJECT < expected < 0.6 * N_OBJECT  # about half of the block, none of the slab
    assert not anim.moving.numpy()[:N_SUPPORT].any()
    # the server kept running: same port, same tab, which got the new splat nodes
    assert app.port == port and len(app.server.get_clients()) == 1
    assert wait_until(lambda: wire_rows(c, "/scene/moving") == expected, 10)
    assert wire_rows(c, "/scene/static") == anim.scene.num_gaussians - expected
    assert f"moving **{expected:,}**" in app.gui["scene_facts"].content
    assert app.gui["select"].value == "box"
    # and back to the analysis' object
    gen = app.switcher.generation
    c.gui_set(app.gui["select"], "auto")
    c.gui_set(app.gui["apply_select"], True)
    assert reprepared(app, gen), app.error_log
    assert app.live.anim.info["num_moving"] == first.info["num_moving"] and app.config.select == "auto"
    assert app.error_log == []


def test_box_gizmo_drag_sets_the_box(app_and_client):
    app, c = app_and_client
    app.gui["select"].value = "box"
    name = "/selection/max"
    assert wait_until(lambda: c.get("TransformControlsMessage", name) is not None, 5)
    target = np.array([0.2, 0.35, 0.6])
    c.drag_start(name)
    c.drag_to(name, target)
    c.drag_end(name)
    assert wait_until(lambda: np.allclose(app.gui["box_max"].value, target, atol=1e-6), 5)
    lo, hi = app.selection.box()
    assert np.allclose(hi, target) and np.allclose(app.selection.gizmo.box.dimensions, hi - lo)
    assert app.selection.spec() == box_spec(lo, hi)
    gen = app.switcher.generation
    app.selection.apply()
    assert reprepared(app, gen), app.error_log
    assert app.live.anim.info["num_moving"] == rows_in_box(app, app.config.select)


def test_box_fields_show_the_box_that_is_used(app_and_client):
    """A fresh user's reversed min (1, 1, 1) / max (-1, -1, -1) was used as -1..1 while the fields kept it as typed;
    a NaN corner reached --select's parser and was named as the command line's option. The fields now show the box
    used, and a NaN corner leaves the box as it was; the note under the scene facts says which."""
    app, c = app_and_client
    g = app.gui
    g["select"].value = "box"
    assert wait_until(lambda: app.selection.gizmo is not None, 5)
    c.gui_set(g["box_min"], (1.0, 1.0, 1.0))
    c.gui_set(g["box_max"], (-1.0, -1.0, -1.0))
    assert wait_until(lambda: np.allclose(g["box_min"].value, -1.0) and np.allclose(g["box_max"].value, 1.0), 5)
    assert np.allclose(app.selection.gizmo.lo, -1.0) and "swapped" in g["scene_note"].content
    app.gui["box_min"].value = (float("nan"), 0.0, 0.0)
    assert np.allclose(g["box_min"].value, -1.0) and "not a number" in g["scene_note"].content
    assert "nan" not in app.selection.spec()


@pytest.mark.parametrize("choice, up, moving", [("-y", [0.0, -1.0, 0.0], N_OBJECT + N_SUPPORT),
                                                ("+z", [0.0, 0.0, 1.0], N_OBJECT)])
def test_up_axis_dropdown_reprepares_with_that_up_vector(app_and_client, choice, up, moving):
    """An up chosen in the viewer is taken as known, as --up is: the analysis looks for a support only near it, so
    with the support's own up (+z) the block moves alone, and with -y, 90 degrees off it, there is no support for
    that up and the support moves with the block (the same rule as the CLI: a drone's propeller "support" kept
    against the up a user gave tore the drone in two)."""
    app, c = app_and_client
    first = app.live.anim
    gen = app.switcher.generation
    c.gui_set(app.gui["up"], choice)
    assert reprepared(app, gen), app.error_log
    anim = app.live.anim
    assert anim is not first
    assert np.allclose(anim.up_vector.numpy(), up) and np.allclose(app.live.up, up)
    assert app.config.up == choice.lstrip("+")
    assert first.info["num_moving"] == N_OBJECT and anim.info["num_moving"] == moving
    facts = scene_facts(anim)
    assert facts["up"] == pytest.approx(up) and facts["up_source"] == "set"
    assert f"up [{', '.join(f'{v:+.3f}' for v in up)}] (set)" in app.gui["scene_facts"].content
    assert wait_until(lambda: app.gui["status"].content.startswith(f"{anim.scene.num_gaussians:,} Gaussians"), 5)
    assert app.error_log == []


def test_up_by_name_and_no_op_for_the_current_axis(app_and_client):
    app, _ = app_and_client
    # a long session: the worker has published a million frames (the display remembered that count across a
    # re-preparation and waited for the new scene's frames to pass it: the view froze after any switch)
    worker = app.live.worker
    worker._version = 10 ** 6
    assert wait_until(lambda: worker.slot.get() is not None and worker.slot.get().version > 10 ** 6, 10)
    gen = app.switcher.generation
    assert app.set_up("z")  # the config's spelling works too; the dropdown shows it with its sign
    assert reprepared(app, gen), app.error_log
    seen = app.display_updates
    assert wait_until(lambda: app.display_updates >= seen + 3, 10), "the display froze after the re-preparation"
    assert np.allclose(app.live.anim.up_vector.numpy(), [0, 0, 1]) and app.gui["up"].value == "+z"
    assert not app.set_up("+z") and not app.switcher.busy  # already that axis
    # a second choice made while the first is prepared wins (the first's dropdown refresh queued it again)
    gen = app.switcher.generation
    assert app.set_up("-y") and app.set_up("x")
    assert wait_until(lambda: app.switcher.generation > gen and not app.switcher.busy, 60, 0.05), app.error_log
    assert app.config.up == "x" and app.gui["up"].value == "+x", (app.config.up, app.gui["up"].value)
    assert np.allclose(app.live.anim.up_vector.numpy(), [1, 0, 0])


def test_a_refused_skinning_source_leaves_the_dropdown_on_what_runs(app_and_client):
    """A splat is offered no `tet` (it meshes a mesh input's own surface), and a source that fails to prepare
    leaves the dropdown on the source that runs (it kept naming the refused one, over the old scene running)."""
    app, c = app_and_client
    g = app.gui
    assert "tet" not in g["skinning"].options and "modes" in g["skinning"].options
    assert g["skinning"].value == "rbf"
    gen = app.switcher.generation
    g["skinning"].value = "voxel"  # as the dropdown sets it; then a refused one, asked directly
    assert reprepared(app, gen), app.error_log
    gen = app.switcher.generation
    real = app._prepare

    def refuse(cfg):
        if cfg.skinning == "modes":
            raise OptionError("no modes today")
        return real(cfg)

    app._prepare = refuse
    try:
        g["skinning"].value = "modes"
        assert reprepared(app, gen), app.error_log
    finally:
        app._prepare = real
    assert "no modes today" in str(app.switcher.last_error)
    assert g["skinning"].value == "voxel" and app.live.anim.skinning_source.startswith("voxel")
    app.error_log.clear()


def test_pick_component_sets_the_box_to_the_clicked_part(app_and_client):
    app, c = app_and_client
    c.gui_set(app.gui["pick"], True)
    assert wait_until(lambda: app.interaction.pick_armed, 5)
    c.click(origin=[0.05, 0.02, 3.0], direction=[0.0, 0.0, -1.0])  # straight down onto the block's top
    assert wait_until(lambda: "component" in app.gui["scene_note"].content, 10), app.error_log
    assert not app.interaction.pick_armed and app.gui["select"].value == "box"
    lo, hi = app.selection.box()
    assert np.all(lo[:2] > -0.32) and np.all(hi[:2] < 0.32)  # the block, not the slab around it
    assert 0.02 < lo[2] < 0.06 and 0.89 < hi[2] < 0.92
    gen = app.switcher.generation
    app.selection.apply()
    assert reprepared(app, gen), app.error_log
    mv = app.live.anim.moving.numpy()
    assert mv[BLOCK].mean() > 0.95 and not mv[:N_SUPPORT].any() and not mv[-N_FLOATERS:].any()
    assert app.error_log == []


def test_a_failed_selection_keeps_the_running_animation(app_and_client, capsys):
    """An empty box: the running animation goes on, the page and the terminal say why in one line (a refused
    choice prints no traceback: a fresh user's terminal got one), and a later selection that works clears the
    error line (it stayed, stale)."""
    app, _ = app_and_client
    first = app.live.anim
    gen = app.switcher.generation
    capsys.readouterr()
    app.selection.set_box((2.0, -2.0, -1.0), (2.1, -1.9, -0.9))  # empty
    app.selection.apply()
    assert reprepared(app, gen)
    assert app.live.anim is first and app.config.select == "auto"
    assert "keeps no Gaussian" in (app.switcher.last_error or "")
    assert app.gui["error"].visible and "re-preparation" in app.gui["error"].content
    assert app.live.worker.alive
    err = capsys.readouterr().err
    assert "error in re-preparation" in err and "Traceback" not in err, err
    gen = app.switcher.generation
    app.selection.set_box((-0.35, -0.35, 0.04), (0.35, 0.35, 0.5))  # the block's lower half
    app.selection.apply()
    assert reprepared(app, gen), app.error_log
    assert app.live.anim is not first and not app.gui["error"].visible


def test_a_failed_first_preparation_can_be_fixed_from_the_page(capture_path):
    cfg = pipeline.AnimationConfig(num_cubature=128, skinning="rbf", num_handles=6, gravity=0.0,
                                   select="5,5,5,6,6,6")  # an empty box: the first preparation fails
    with open("/dev/null", "w") as quiet, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        app = ViewerApp(capture_path, cfg, host="127.0.0.1", port=0, progress_stream=quiet)
        app.start()
        try:
            assert not app.wait_ready(30) and "keeps no Gaussian" in app.failed
            assert wait_until(lambda: "select" in app.gui, 5)  # the Scene folder alone
            assert app.gui["select"].value == "box" and np.allclose(app.selection.box()[0], [5, 5, 5])
            assert "play" not in app.gui and app.gui["pick"].disabled
            gen = app.switcher.generation
            app.gui["select"].value = "auto"
            app.gui["apply_select"].value = True  # a click
            assert reprepared(app, gen) and app.wait_ready(1), app.error_log
            assert app.failed is None and app.config.select == "auto"
            assert app.live.anim.info["num_moving"] > 0.95 * N_OBJECT
            assert "play" in app.gui and not app.gui["pick"].disabled
            assert f"moving **{app.live.anim.info['num_moving']:,}**" in app.gui["scene_facts"].content
        finally:
            app.stop()


# ------------------------------------------------------------------------------------------- without a scene file
def test_given_an_animated_scene_the_panel_shows_facts_and_cannot_reprepare():
    anim = FakeAnimatedScene(make_blob_scene(600), num_handles=2)
    app = ViewerApp(anim, None, host="127.0.0.1", port=0, play=False)
    app.start()
    try:
        assert app.wait_ready(20), app.failed
        assert "moving **600**" in app.gui["scene_facts"].content
        assert "static **0**" in app.gui["scene_facts"].content
        assert all(app.gui[k].disabled for k in ("select", "up", "apply_select", "skinning"))
        assert not app.set_up("-y") and not app.switcher.busy
        app.gui["dim_static"].value = True  # nothing static: a no-op
        assert app.live.static_node is None and app.error_log == []
    finally:
        app.stop()


# ------------------------------------------------------------------------------------------- helpers
def test_box_spec_round_trip_and_component_bounds():
    lo, hi = np.array([-0.5, 0.0, 1.25]), np.array([0.5, 2.0, 3.0])
    back = parse_box(box_spec(lo, hi))
    assert back is not None and np.allclose(back[0], lo) and np.allclose(back[1], hi)
    assert parse_box("auto") is None and parse_box("1,2,3") is None and parse_box("1,2,3,4,5,nan") is None
    pts = make_capture_scene(N_OBJECT, N_SUPPORT, N_FLOATERS).means.numpy()
    plane = {"normal": [0.0, 0.0, 1.0], "offset": 0.01}
    rows, blo, bhi = component_bounds(pts, N_SUPPORT + 10, plane=plane)  # a block row
    assert set(rows) <= set(range(N_SUPPORT, N_SUPPORT + N_OBJECT)) and len(rows) > 0.95 * N_OBJECT
    assert blo[2] > 0.02 and bhi[2] < 0.92
    rows, _, _ = component_bounds(pts, len(pts) - 1, plane=plane)  # a floater: its own clump
    assert set(rows) == set(range(N_SUPPORT + N_OBJECT, len(pts)))
    # on the support: the support's own slab, not the block on it and the floaters (it took every row: a fresh
    # user's pick on a table top made one body of the table, its three objects, its legs and the floor)
    rows, _, _ = component_bounds(pts, 0, plane=plane)
    assert 0 in rows and set(rows) <= set(range(N_SUPPORT)) and len(rows) > 0.95 * N_SUPPORT


# ------------------------------------------------------------------------------------------- per-region materials
def test_material_regions_from_the_panel(app_and_client):
    """The Material folder adds a region (a stiff base) to the live simulation and clears it again; a malformed
    region is said under the region list and changes nothing, and the simulation goes on (it paused with an error
    and a traceback, naming the command line's --region)."""
    app, c = app_and_client
    anim = app.live.anim
    g = app.gui
    assert not g["region_add"].disabled
    c.gui_set(g["region_spec"], "base")
    c.gui_set(g["region_material"], "wood")
    assert wait_until(lambda: g["region_spec"].value == "base" and g["region_material"].value == "wood", 5)
    c.gui_set(g["region_add"], True)
    assert wait_until(lambda: len(anim.regions) == 1 and anim.sim.point_materials[0] is not None, 10)
    assert anim.regions[0]["material"] == "wood" and "wood" in g["regions"].content
    c.gui_set(g["region_spec"], "box:9,9,9,10,10,10")  # holds no part of the object
    assert wait_until(lambda: g["region_spec"].value.startswith("box:9"), 5)
    playing = app.live.worker.playing
    c.gui_set(g["region_add"], True)
    assert wait_until(lambda: "region not added" in g["regions"].content
                      and "holds none of the object's" in g["regions"].content, 10)
    assert len(anim.regions) == 1 and app.error_log == [] and app.live.worker.playing == playing  # unchanged
    assert "--region" not in g["regions"].content and "wood" in g["regions"].content
    c.gui_set(g["region_clear"], True)
    assert wait_until(lambda: anim.regions == [] and all(p is None for p in anim.sim.point_materials), 10)
    # "pick region": a click on the block's +x face makes a sphere region around the point hit, which can be added
    spec = app.panel.pick_region(None, np.array([3.0, 0.0, 0.5]), np.array([-1.0, 0.0, 0.0]))
    assert spec is not None and spec.startswith("sphere:") and g["region_spec"].value == spec
    x, y, z, r = (float(v) for v in spec[7:].split(","))
    assert 0.15 < x <= 0.31 and abs(y) < 0.05 and abs(z - 0.5) < 0.05 and r > 0  # on the block, near its +x face
    assert app.panel.pick_region(None, np.array([3.0, 0.0, 5.0]), np.array([1.0, 0.0, 0.0])) is None  # a miss
    c.gui_set(g["region_material"], "rubber")
    assert wait_until(lambda: g["region_material"].value == "rubber", 5)
    c.gui_set(g["region_add"], True)
    assert wait_until(lambda: len(anim.regions) == 1 and anim.regions[0]["spec"] == spec, 10)
    assert 0 < anim.regions[0]["cubature_points"] < 128
    assert app.error_log == []


def test_regions_rebuild_the_default_basis_and_survive_a_switch(capture_path):
    """With the default basis (the elastic modes, built for the body's materials as ``animate --region`` builds
    it), a region added in the panel acts at once and re-prepares the basis for it in the background; clearing
    the regions re-prepares it for one material again; a later re-preparation (a new skinning source) keeps the
    panel's regions (they were dropped: the config's were used)."""
    cfg = pipeline.AnimationConfig(num_cubature=128, skinning="modes", num_handles=6, gravity=0.0)
    with running_app(capture_path, cfg, ready=120) as (app, c):
        g = app.gui
        first = app.live.anim
        assert first.skinning_source.startswith("modes") and "materials" not in first.skinning_source
        gen = app.switcher.generation
        c.gui_set(g["region_spec"], "base")
        c.gui_set(g["region_material"], "wood")
        assert wait_until(lambda: g["region_spec"].value == "base" and g["region_material"].value == "wood", 5)
        c.gui_set(g["region_add"], True)
        assert reprepared(app, gen, 120), app.error_log
        anim = app.live.anim
        assert anim is not first and app.config.regions == (("base", "wood"),)
        assert "of its parts' materials" in anim.skinning_source, anim.skinning_source
        assert [r["material"] for r in anim.regions] == ["wood"] and anim.sim.point_materials[0] is not None
        # a switch of the skinning source keeps the region
        gen = app.switcher.generation
        assert app.switcher.switch_skinning("rbf")
        assert reprepared(app, gen, 120), app.error_log
        assert [(r["spec"], r["material"]) for r in app.live.anim.regions] == [("base", "wood")]
        assert app.live.anim.skinning_source.startswith("rbf")
        gen = app.switcher.generation
        assert app.switcher.switch_skinning("modes")
        assert reprepared(app, gen, 120), app.error_log
        assert "of its parts' materials" in app.live.anim.skinning_source
        # cleared: the basis of one material again
        gen = app.switcher.generation
        c.gui_set(g["region_clear"], True)
        assert reprepared(app, gen, 120), app.error_log
        assert app.live.anim.regions == [] and app.config.regions == ()
        assert "materials" not in app.live.anim.skinning_source
        assert app.error_log == []


def test_the_viewer_prints_what_the_analysis_found(capture_path):
    """The browser viewer's terminal gets the scene lines ``animate --headless`` prints (the up and where it came
    from, the selection's counts): a fresh user's viewer run printed only the progress stages."""
    import io

    cfg = pipeline.AnimationConfig(num_cubature=128, skinning="rbf", num_handles=6, gravity=0.0, fit_seconds=2.0)
    log = io.StringIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        app = ViewerApp(capture_path, cfg, host="127.0.0.1", port=0, progress_stream=log)
        app.start()
        try:
            assert app.wait_ready(60), app.failed
        finally:
            app.stop()
    text = log.getvalue()
    scene_line = next(x for x in text.splitlines() if x.startswith("[physskin-gs] scene: up "))
    assert "from the normal of the support it stands on: support plane with" in scene_line, text
    sel = next(x for x in text.splitlines() if x.startswith("[physskin-gs] selection auto: moving "))
    import re

    assert re.search(r"moving \d+, static \d+ \(support \d+, background \d+, floaters \d+", sel), sel


def test_a_replaced_scene_is_freed(app_and_client):
    """"apply selection" replaces the live scene; the old one (its simulator, deformer and worker) must be freed.
    The handle gizmos' callbacks, kept by viser after the gizmos were removed, held every replaced scene: a fresh
    user's ten re-preparations of a three-body capture grew the process by 100 MB each."""
    import gc
    import weakref

    app, c = app_and_client
    first = weakref.ref(app.live.anim)
    first_live = weakref.ref(app.live)
    gizmos = list(app.live.handle_gizmos)
    assert gizmos and all(g._impl_aux.update_cb for g in gizmos)
    name = "/handles/h0"
    assert wait_until(lambda: c.get("TransformControlsMessage", name) is not None, 5)
    c.drag_start(name)  # a gesture on a gizmo of the first scene: its callback runs
    c.drag_to(name, np.asarray(app.live.anim.handle_positions()[0], dtype=np.float64) + 0.05)
    c.drag_end(name)
    for _ in range(2):
        gen = app.switcher.generation
        c.gui_set(app.gui["apply_select"], True)
        assert reprepared(app, gen), app.error_log
    # the removed gizmos keep no callback (viser may keep a removed gizmo's state; its callback held the scene)
    assert not any(g._impl_aux.update_cb for g in gizmos)
    del gizmos
    assert wait_until(lambda: (gc.collect() or True) and first() is None and first_live() is None, 10), \
        [type(r).__name__ for r in gc.get_referrers(first_live())] if first_live() is not None else "scene alive"
