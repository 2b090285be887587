"""Tests for `physskin-gs animate --headless` (export, video, motion scripts, errors) on a real splat."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
import torch

from physskin_gs.cli import main
from physskin_gs.cli.animate import _stiffer_materials


def _run(argv):
    return main([str(a) for a in argv])


FAST = ["--cubature", "64", "--newton-iters", "3", "--skinning", "fit", "--fit-seconds", "1"]


def test_headless_export_video_and_reload(splat_file, tmp_path, capsys):
    from physskin_gs.io import load_scene

    src = tmp_path / "spot.splat"
    shutil.copy(splat_file("spot_mesh2splat_10k.splat"), src)
    before = src.read_bytes()
    out = tmp_path / "seq"
    video = tmp_path / "clip.mp4"
    script = tmp_path / "motion.json"
    script.write_text(json.dumps({"drags": [
        {"handle": 0, "keyframes": [{"frame": 2, "offset": [0, 0, 0]}, {"frame": 4, "offset": [0.1, 0.0, 0.0]}]},
        {"point": [0.0, 0.0, 0.3], "radius": 0.2, "start_frame": 2, "end_frame": 3,
         "keyframes": [{"frame": 2, "target": [0.0, 0.0, 0.4]}]},
    ]}))
    rc = _run(["animate", src, "--headless", "--frames", 4, "--export", out, "--video", video, "--png", tmp_path / "png",
               "--width", 64, "--height", 48, "--script", script, *FAST])
    assert rc == 0
    assert src.read_bytes() == before  # the input is never written
    frames = sorted(out.glob("frame*.ply"))
    assert [f.name for f in frames] == ["frame0001.ply", "frame0002.ply", "frame0003.ply", "frame0004.ply"]
    meta = json.loads((out / "sequence.json").read_text())
    assert meta["frames"] == 4 and meta["dt"] == pytest.approx(0.03) and meta["fps"] == pytest.approx(1 / 0.03)
    assert meta["up_axis"] == [0.0, -1.0, 0.0]
    # the inputs are named relative to the sequence's folder: no absolute path of this machine in the file
    assert meta["source"] == "../spot.splat" and meta["script"] == "../motion.json"
    assert (out / meta["source"]).resolve() == src.resolve() and str(tmp_path) not in json.dumps(meta)
    assert "DC only" in meta["sh"]
    assert meta["cubature"]["rule"] == "samples" and 16 <= meta["cubature"]["points"] <= 64  # --cubature 64 given
    first, last = load_scene(frames[0]), load_scene(frames[-1])
    orig = load_scene(src)
    assert first.num_gaussians == last.num_gaussians == orig.num_gaussians
    for sc in (first, last):
        for t in (sc.means, sc.quats, sc.log_scales, sc.opacity_logits, sc.sh_dc):
            assert torch.isfinite(t).all()
    assert torch.allclose(first.means, orig.means, atol=1e-5)  # frame 1 is the rest state
    assert (last.means - orig.means).norm(dim=1).max() > 1e-3  # later frames moved
    assert video.is_file() and video.stat().st_size > 0
    import imageio.v2 as iio

    img = iio.imread(tmp_path / "png" / "frame0002.png")
    assert img.shape == (48, 64, 3) and img.std() > 1.0  # something was drawn


def test_headless_sh_ply_rotates_sh(inria_sh3, tmp_path):
    from physskin_gs.io import load_scene

    out = tmp_path / "seq"
    sample = inria_sh3("scene_tile_lod5_sh3.ply")
    rc = _run(["animate", sample.path, "--headless", "--frames", 2, "--export", out,
               "--select", "opacity>0.0", *FAST, "--cubature", "32"])
    assert rc == 0
    meta = json.loads((out / "sequence.json").read_text())
    assert "rotated" in meta["sh"]
    if sample.real:  # the shared tile stands on +z (the stand-in's own analysis finds its own axis)
        assert meta["up_axis"] == [0.0, 0.0, 1.0]
    else:
        assert sorted(abs(v) for v in meta["up_axis"]) == [0.0, 0.0, 1.0]  # a unit axis
    back = load_scene(out / "frame0002.ply")
    assert back.sh_rest.shape[1] == 15 and torch.isfinite(back.sh_rest).all()


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--select", "1,2"], "--select"),
        (["--pin", "left:1"], "--pin"),
        (["--floor", "low"], "--floor"),
        (["--up", "w"], "up axis"),
        (["--up", "0,0,0"], "'ux,uy,uz'"),
        (["--up", "0,1"], "'ux,uy,uz'"),
        (["--frames", "0"], "--frames"),
        (["--nu", "0.7"], "Poisson"),
        (["--width", "50"], "multiples of 16"),
    ],
)
def test_bad_options_exit_2(splat_file, tmp_path, capsys, extra, message):
    argv = ["animate", splat_file("spot_mesh2splat_10k.splat"), "--headless", "--frames", 2, *FAST, *extra,
            "--export", tmp_path / "seq"]
    if "--width" in extra:
        argv += ["--video", tmp_path / "v.mp4"]
    assert _run(argv) == 2
    assert message in capsys.readouterr().err


def test_an_export_folder_named_like_a_file_is_refused(splat_file, tmp_path, capsys):
    """`--export out/seq.ply` made a folder named 'seq.ply' full of frames without a word; a name with a scene or
    image file's extension is refused before any work (nothing is made), unless such a folder already exists."""
    src = splat_file("spot_mesh2splat_10k.splat")
    for option, name in (("--export", "seq.ply"), ("--export", "anim.usdc"), ("--png", "frames.png")):
        assert _run(["animate", src, "--headless", "--frames", 1, *FAST, option, tmp_path / name]) == 2
        assert "takes a folder" in capsys.readouterr().err and not (tmp_path / name).exists()
    (tmp_path / "old.ply").mkdir()  # an existing folder of that name is the user's choice
    assert _run(["animate", src, "--headless", "--frames", 1, *FAST, "--cubature", 32,
                 "--export", tmp_path / "old.ply"]) == 0
    assert (tmp_path / "old.ply" / "frame0001.ply").is_file()


def test_up_as_a_vector_and_material_warnings(splat_file, tmp_path, capsys):
    """--up takes 'ux,uy,uz' as the unsure note says (normalised: spot is -y up); a material whose E is far from
    the default (plastic, 2 GPa) warns about nothing the user did not pass, an explicit --E 2e9 does."""
    argv = ["animate", splat_file("spot_mesh2splat_10k.splat"), "--headless", "--frames", 1, *FAST, "--cubature", 32]
    assert _run([*argv, "--up", "0,-2,0", "--material", "plastic", "--export", tmp_path / "a"]) == 0
    assert json.loads((tmp_path / "a" / "sequence.json").read_text())["up_axis"] == [0.0, -1.0, 0.0]
    assert "extremely stiff" not in capsys.readouterr().err
    assert _run([*argv, "--E", "2e9", "--export", tmp_path / "b"]) == 0
    assert "--E 2e+09 Pa is extremely stiff" in capsys.readouterr().err


def test_missing_file_and_refuse_overwrite(splat_file, inria_sh3, tmp_path, capsys):
    assert _run(["animate", tmp_path / "nope.ply", "--headless"]) == 2
    assert "nope.ply" in capsys.readouterr().err
    src = tmp_path / "in.splat"
    shutil.copy(splat_file("spot_mesh2splat_10k.splat"), src)
    assert _run(["animate", src, "--headless", "--video", src]) == 2
    assert "refusing to overwrite" in capsys.readouterr().err
    bad = tmp_path / "motion.json"
    bad.write_text('{"drags": [{"keyframes": []}]}')
    assert _run(["animate", src, "--headless", "--script", bad, *FAST]) == 2
    assert "motion.json" in capsys.readouterr().err
    assert _run(["animate", src, "--headless", "--script", tmp_path / "missing.json", *FAST]) == 2
    assert "--script" in capsys.readouterr().err
    # an input that a frame of the export would overwrite is refused before anything is simulated or written
    framed = tmp_path / "frame0002.ply"
    shutil.copy(inria_sh3("lego_gsplat_sh3.ply").path, framed)
    before = framed.read_bytes()
    assert _run(["animate", framed, "--headless", "--frames", 3, "--export", tmp_path, *FAST]) == 2
    assert "would overwrite the input" in capsys.readouterr().err
    assert framed.read_bytes() == before and not (tmp_path / "frame0001.ply").exists()
    # a handle index the scene does not have is refused after preparation, before the first frame
    bad_handle = tmp_path / "handles.json"
    bad_handle.write_text('{"drags": [{"handle": 99, "keyframes": [{"frame": 1, "offset": [0, 0.1, 0]}]}]}')
    out = tmp_path / "out"
    assert _run(["animate", src, "--headless", "--frames", 3, "--export", out, "--script", bad_handle, *FAST]) == 2
    err = capsys.readouterr().err
    assert "handles.json" in err and "drags[0].handle 99" in err
    assert not (out / "frame0001.ply").exists()


def test_viewer_mode_calls_run_viewer(monkeypatch, splat_file):
    import sys
    import types

    seen = {}
    fake = types.ModuleType("physskin_gs_viewer.app")
    fake.run_viewer = lambda args: seen.setdefault("args", args) and 0
    monkeypatch.setitem(sys.modules, "physskin_gs_viewer.app", fake)
    rc = _run(["animate", splat_file("spot_mesh2splat_10k.splat"), "--port", "9123", "--E", "3e4"])
    assert rc == 0
    args = seen["args"]
    assert args.host == "127.0.0.1" and args.port == 9123
    assert args.config.E == 3e4 and args.config.floor is True


def test_headless_mesh_exports_mesh_sequence(mesh_file, tmp_path):
    import trimesh

    from physskin_gs.io import load_mesh

    src = mesh_file("c3d_spot.obj")
    out = tmp_path / "mesh_seq"
    rc = _run(["animate", src, "--headless", "--frames", 3, "--export", out, "--mesh-gaussians", 2000, *FAST])
    assert rc == 0
    files = sorted(out.glob("frame*.obj"))
    assert [f.name for f in files] == ["frame0001.obj", "frame0002.obj", "frame0003.obj"]
    ref = load_mesh(str(src), weld=True)
    m1 = trimesh.load(files[0], process=False)
    m3 = trimesh.load(files[-1], process=False)
    vertex, faces = ref.export_layout()  # the file's own layout (spot's UV seams split 2930 positions into 3225)
    assert m1.vertices.shape == m3.vertices.shape == (vertex.shape[0], 3) and vertex.shape[0] > ref.num_vertices
    assert abs(m1.vertices - ref.vertices[vertex]).max() < 1e-5
    assert np.array_equal(np.asarray(m1.faces), faces)
    assert abs(m3.vertices - m1.vertices).max() > 1e-3
    meta = json.loads((out / "sequence.json").read_text())
    assert meta["pattern"] == "frame%04d.obj" and meta["up_axis"] == [0.0, 1.0, 0.0]


def test_a_log_gets_one_line_per_stage(splat_file, tmp_path, capsys):
    """stderr that is not a terminal (a log file, a pipe, pytest's capture) gets no progress-bar updates: one line
    when the frame loop starts, and the video line says how much of the loop the CPU video rendering took."""
    rc = _run(["animate", splat_file("spot_mesh2splat_10k.splat"), "--headless", "--frames", 5, "--video",
               tmp_path / "v.mp4", "--width", 64, "--height", 48, *FAST])
    assert rc == 0
    err = capsys.readouterr().err
    assert "\r" not in err and "animate:  " not in err  # no tqdm bar
    assert "[physskin-gs] animate: 5 frames\n" in err
    line = next(x for x in err.splitlines() if x.startswith(f"[physskin-gs] wrote {tmp_path / 'v.mp4'}"))
    assert "rendering the video's frames on the CPU took" in line and "(--width / --height 64x48 set its size" in line
    # the simulation's speed, said once at the end (no bar shows the per-frame ms in a log)
    sim = [x for x in err.splitlines()
           if x.startswith("[physskin-gs] simulation: 4 frames after the rest frame, median ")]
    assert len(sim) == 1 and "Newton iteration" in sim[0] and "Hessian factors a frame" in sim[0], err
    ms = float(sim[0].split("median ")[1].split(" ms")[0])
    assert 0.0 < ms < 5000.0


def test_the_log_says_what_a_pin_holds_and_where_png_frames_went(splat_file, tmp_path, capsys):
    """--pin prints how many cubature points it holds (the same count the simulator pins); a --png run ends with
    the folder its frames went to."""
    argv = ["animate", splat_file("spot_mesh2splat_10k.splat"), "--headless", "--frames", 2, *FAST, "--pin",
            "below:0.2", "--png", tmp_path / "png", "--width", 32, "--height", 32]
    assert _run(argv) == 0
    err = capsys.readouterr().err.strip().splitlines()
    pin = [ln for ln in err if ln.startswith("[physskin-gs] pin below:0.2: ")]
    assert len(pin) == 1 and pin[0].endswith("of 64 cubature points held at their rest positions"), err
    held = int(pin[0].split(": ")[1].split(" of ")[0])
    assert 0 < held < 64
    assert err[-1] == f"[physskin-gs] wrote 2 PNG frames to {tmp_path / 'png'}/"


def _random_box(path, n: int, size, seed: int):
    """Write n opaque 1 cm Gaussians uniform in a box of ``size`` (m) centred on the origin as an INRIA PLY at
    ``path``; returns (path, means (n, 3))."""
    from physskin_gs.io import save_scene
    from physskin_gs.scene import GaussianScene

    g = torch.Generator().manual_seed(seed)
    means = (torch.rand(n, 3, generator=g) - 0.5) * torch.tensor(size)
    save_scene(GaussianScene(means=means, quats=torch.tensor([[1.0, 0.0, 0.0, 0.0]]).repeat(n, 1),
                             log_scales=torch.full((n, 3), math.log(0.01)), opacity_logits=torch.full((n,), 4.0),
                             sh_dc=torch.zeros(n, 3), sh_rest=torch.zeros(n, 0, 3), source=None, format="inria-ply"),
               path)
    return path, means


def test_closing_notes_say_when_the_object_bent_or_tipped_over(splat_file, tmp_path, capsys):
    """A 1 m beam 0.1 m thick, pinned at one end, sags far in the default soft material (Euler-Bernoulli: a tip
    deflection of about 1.5 m at E 1e5, 100 kg/m^3, so its shape leaves any rigid motion): the run ends with a note
    naming the stiffer materials; in wood it holds (no note); a soft E the user gave is not second-guessed. Spot
    stood upside down (--up y) rolls over as a rigid body: a note says it tipped over and names --up."""
    beam, _ = _random_box(tmp_path / "beam.ply", 4000, (1.0, 0.1, 0.1), seed=0)
    argv = ["animate", beam, "--headless", "--frames", 30, "--up", "z", "--floor", "off", "--cubature", 128,
            "--pin", "box:-1,-1,-1,-0.45,1,1"]
    assert _run([*argv, "--export", tmp_path / "a"]) == 0
    err = capsys.readouterr().err
    assert "note: the object bent" in err and "--material rubber, plastic or wood" in err, err  # (E not raised: pinned)
    assert "tipped over" not in err  # pinned, and bent rather than turned
    assert _run([*argv, "--export", tmp_path / "b", "--material", "wood"]) == 0
    assert "note:" not in capsys.readouterr().err
    assert _run([*argv, "--export", tmp_path / "c", "--E", "1e5"]) == 0  # the same soft E, given: no note
    assert "note: the object bent" not in capsys.readouterr().err
    assert _run(["animate", splat_file("spot_mesh2splat_10k.splat"), "--headless", "--frames", 60, "--up", "y",
                 "--cubature", 128, "--export", tmp_path / "d"]) == 0
    err = capsys.readouterr().err
    assert "(it tipped over); if it should stand, check the up axis (--up)" in err and "bent" not in err, err
    E = float(err.split("material soft (E ")[1].split(" Pa")[0])  # (raised so that it stands)
    assert _stiffer_materials(E, 100.0) in err  # (the default material: stiffening may be the answer)
    assert "--region base=wood (a stiff base) or --material" in err, err  # (a stiff base first: the bouquet)


def test_the_advice_names_only_materials_stiffer_than_the_one_used():
    """The stiffer materials a closing note names are those that sag at most 2/3 as much under their own weight
    (density / E): a fresh user was told "--material rubber" for a chair whose soft default had been raised to
    E 230 kPa at 100 kg/m^3, and bent more in rubber (2 MPa, 1150 kg/m^3: 1.3x the sag)."""
    assert _stiffer_materials(1e5, 100.0) == "--material rubber, plastic or wood"
    assert _stiffer_materials(2.3e5, 100.0) == "--material plastic, wood or stone"  # the three least stiff
    assert _stiffer_materials(2e10, 2700.0) == "--material stone, glass or aluminium"
    assert _stiffer_materials(1e11, 7850.0) == "--material steel"
    assert _stiffer_materials(1e10, 100.0) == "--E 1e+11"  # stiffer than every named material


def test_a_pin_above_the_floor_is_said_and_the_advice_gives_the_floor(tmp_path, capsys):
    """A pin holds its points where they are: an object that starts above its floor (no support: a quarter of its
    height below it) hangs there when pinned (a fresh user followed "--pin below:0.1" and got a bouquet held in
    mid-air). A note says so with the --floor value at the object's lowest point; with that floor the note goes,
    and the object starts on it."""
    src, means = _random_box(tmp_path / "post.ply", 3000, (0.2, 0.2, 1.0), seed=1)
    argv = ["animate", src, "--headless", "--frames", 2, "--up", "z", "--cubature", 128, "--skinning", "rbf",
            "--pin", "below:0.1"]
    assert _run([*argv, "--export", tmp_path / "a"]) == 0
    err = capsys.readouterr().err
    assert "the pinned points are held where they are, and the object starts" in err, err
    assert 20 <= int(err.split("and the object starts ")[1].split("%")[0]) <= 30  # (the floor: a quarter below)
    floor = err.split("put the floor at its lowest point: --floor ")[1].split()[0]
    assert abs(float(floor) - float(torch.quantile(means[:, 2], 0.005))) < 1e-3
    assert _run([*argv, "--export", tmp_path / "b", "--floor=" + floor]) == 0
    assert "pinned points are held" not in capsys.readouterr().err


def test_closing_notes_name_the_body_and_never_the_option_given(capsys):
    """The closing notes of a headless run (cli.animate._note_motion): per body ("body K" with several), the
    region hint only for one body and when no --region was given (a fresh user was told to pass the --region they
    had passed, and a three-body scene got one note for "the object")."""
    from types import SimpleNamespace

    from physskin_gs.cli.animate import _moving_sample, _note_motion

    g = torch.Generator().manual_seed(0)
    rest = torch.rand(300, 3, generator=g)
    bent = rest.clone()
    bent[:100, 0] += 0.5 * rest[:100, 1] ** 2  # rows 0-99 bend (a shear growing with height); the rest stay
    moving = torch.zeros(300, dtype=torch.bool)
    moving[:200] = True

    def anim(bodies=None):
        a = SimpleNamespace(scene=SimpleNamespace(means=rest), moving=moving,
                            deformed_gaussians=lambda view_rotations=False: SimpleNamespace(means=bent))
        if bodies:
            a.bodies = [SimpleNamespace(moving_index=torch.arange(*r)) for r in bodies]
        return a

    args = SimpleNamespace(material_chosen=False, E=1e5, pin=None, regions=None)
    one = anim()
    _note_motion(one, args, _moving_sample(one))
    err = capsys.readouterr().err
    assert "note: the object bent" in err and "--region base=wood" in err, err
    _note_motion(one, SimpleNamespace(**{**vars(args), "regions": ["base=wood"]}), _moving_sample(one))
    err = capsys.readouterr().err
    assert "note: the object bent" in err and "--region" not in err, err
    two = anim(bodies=[(100, 200), (0, 100)])  # body 1 holds the bent rows
    _note_motion(two, args, _moving_sample(two))
    err = capsys.readouterr().err
    assert "note: body 1 bent" in err and "body 0" not in err and "--region" not in err, err
    up = torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64)
    turned = SimpleNamespace(scene=SimpleNamespace(means=rest), moving=moving, up_vector=up,  # a quarter turn about x
                             deformed_gaussians=lambda view_rotations=False: SimpleNamespace(
                                 means=torch.stack([rest[:, 0], -rest[:, 2], rest[:, 1]], 1)))
    _note_motion(turned, args, _moving_sample(turned))
    assert "tilted 90 degrees (it tipped over)" in capsys.readouterr().err
    spun = SimpleNamespace(scene=SimpleNamespace(means=rest), moving=moving, up_vector=up,  # a quarter turn about up
                           deformed_gaussians=lambda view_rotations=False: SimpleNamespace(
                               means=torch.stack([-rest[:, 1], rest[:, 0], rest[:, 2]], 1)))
    _note_motion(spun, args, _moving_sample(spun))
    assert "tipped over" not in capsys.readouterr().err  # it turned on its floor, it did not tip
    # a thin line along up that stands (its spin about itself undefined; a fresh user's line got "turned 86
    # degrees (it tipped over)" and scipy's raw warning)
    g = torch.Generator().manual_seed(3)
    line = torch.cat([torch.randn(300, 2, generator=g, dtype=torch.float64) * 1e-6,
                      torch.rand(300, 1, generator=g, dtype=torch.float64)], 1)
    jiggle = line + torch.randn(300, 3, generator=g, dtype=torch.float64) * 1e-4
    stood = SimpleNamespace(scene=SimpleNamespace(means=line), moving=moving, up_vector=up,
                            deformed_gaussians=lambda view_rotations=False: SimpleNamespace(means=jiggle))
    _note_motion(stood, args, _moving_sample(stood))
    err = capsys.readouterr().err
    assert "tipped over" not in err and "warning" not in err, err
    _note_motion(turned, SimpleNamespace(**{**vars(args), "script": "push.json"}), _moving_sample(turned))
    assert "tipped over" not in capsys.readouterr().err  # scripted drags may turn it on purpose


def test_a_tall_object_on_its_floor_keeps_its_top_in_the_frame(tmp_path, capsys):
    """The headless camera looks a quarter of the object's height lower, to keep the floor contact in view; its
    distance now counts that shift, so a pole five times as tall as it is wide, standing on a captured floor disc,
    has its top inside a square frame (before: its top row of pixels was the pole's, a fresh user's headpiece)."""
    import sys

    import imageio.v2 as imageio
    import trimesh

    from conftest import REPO_ROOT
    from physskin_gs.io import save_scene

    sys.path.insert(0, str(REPO_ROOT / "scripts"))
    try:
        import make_hard_captures as gen
    finally:
        sys.path.remove(str(REPO_ROOT / "scripts"))
    rng = np.random.default_rng(0)
    pole = trimesh.creation.box(extents=(0.4, 2.0, 0.4))
    pole.apply_translation((0.0, 1.0, 0.0))
    parts = [("object0", gen._surface(pole, 6000, rng, (0.8, 0.7, 0.2))),
             ("support", gen._rect(-1.2, 1.2, -1.2, 1.2, 0.0, 8000, rng, (0.5, 0.5, 0.5), noise=0.002))]
    scene, _ = gen.parts_to_scene(parts, np.diag([1.0, -1.0, -1.0]))
    src = tmp_path / "pole.ply"
    save_scene(scene, str(src))
    assert _run(["animate", src, "--headless", "--frames", "1", "--png", tmp_path / "png", "--width", "64",
                 "--height", "64", *FAST]) == 0
    img = imageio.imread(tmp_path / "png" / "frame0001.png").astype(int)  # [64, 64, 3]
    background = np.array([33, 36, 43])  # (0.13, 0.14, 0.17)
    drawn = np.abs(img - background).max(axis=2) > 12  # [64, 64]
    rows = np.flatnonzero(drawn.any(axis=1))
    assert rows.min() >= 2, rows.min()  # the top is inside the frame
    assert rows.min() <= 16, rows.min()  # and the frame is not far off: the pole fills most of its height


def test_a_floor_inside_the_object_is_refused(splat_file, tmp_path, capsys):
    """``--floor`` above the object's lowest point started it inside the floor: at 0.3 (up -y) Spot sank and was
    gone by frame 5, at 99 every frame was empty, and both runs said they wrote their frames. Now refused with the
    object's lowest point to pass instead, and no output folder is left; at that point it runs."""
    src = splat_file("spot_mesh2splat_10k.splat")
    for floor in ("0.3", "99"):
        assert _run(["animate", src, "--headless", "--frames", 2, "--png", tmp_path / f"f{floor}", "--floor", floor,
                     *FAST]) == 2
        err = capsys.readouterr().err
        assert f"--floor {floor}: that floor lies" in err and "above the object's lowest point" in err, err
        assert not (tmp_path / f"f{floor}").exists()
    lowest = err.split("pass --floor ")[1].split(" ")[0]
    assert -0.6 < float(lowest) < -0.4  # (Spot's hooves, along up -y)
    assert _run(["animate", src, "--headless", "--frames", 2, "--png", tmp_path / "ok", "--floor", lowest,
                 *FAST]) == 0
    assert (tmp_path / "ok" / "frame0002.png").is_file()


def test_a_region_says_the_rest_is_not_raised_to_stand(splat_file, tmp_path, capsys):
    """With ``--region`` and no ``--material`` / ``--E`` the soft default is not raised until the object stands (it
    is without ``--region``); a fresh user's guitar, given ``--region base=wood`` to stand better, bent instead,
    24x softer and with no word of it. The log now says so and names the options; with ``--material`` it does not."""
    src = splat_file("spot_mesh2splat_10k.splat")
    assert _run(["animate", src, "--headless", "--frames", 2, "--png", tmp_path / "a", "--region", "base=wood",
                 *FAST]) == 0
    err = capsys.readouterr().err
    assert "note: with --region, the rest of the object keeps the soft material as it is (E 100000 Pa)" in err, err
    assert "--material or --E" in err
    assert _run(["animate", src, "--headless", "--frames", 2, "--png", tmp_path / "b", "--region", "base=wood",
                 "--material", "rubber", *FAST]) == 0
    assert "note: with --region" not in capsys.readouterr().err


def test_png_frames_take_any_size_a_video_multiples_of_16(splat_file, tmp_path, capsys):
    """PNG frames render at any size, as ``render`` does (a fresh user's --width 250 was refused for PNGs that need no
    macroblocks); a video still needs multiples of 16, and says it is for the video."""
    import imageio.v2 as imageio

    src = splat_file("spot_mesh2splat_10k.splat")
    assert _run(["animate", src, "--headless", "--frames", 2, "--png", tmp_path / "p", "--width", 250, "--height",
                 130, *FAST]) == 0
    assert imageio.imread(tmp_path / "p" / "frame0002.png").shape == (130, 250, 3)
    assert _run(["animate", src, "--headless", "--frames", 2, "--video", tmp_path / "v.mp4", "--width", 250,
                 *FAST]) == 2
    assert "multiples of 16 up to 8192 for a video, got 250x" in capsys.readouterr().err


def test_the_headless_camera_keeps_where_a_script_drags_in_view(tmp_path):
    """MotionScript.framing_points: the box of what moves, moved by each keyframe's offset (its 8 corners), and each
    keyframe's target: the headless camera frames them too (a fresh user's pushed bust fell out of the frame, and
    the README's pushed ball was a sliver by frame 80)."""
    from physskin_gs.cli.animate import MotionScript

    f = tmp_path / "m.json"
    f.write_text(json.dumps({"drags": [
        {"handle": 0, "keyframes": [{"frame": 2, "offset": [0, 0, 0]}, {"frame": 9, "offset": [2.0, 0, 0]}]},
        {"handle": 1, "keyframes": [{"frame": 3, "target": [5.0, 6.0, 7.0]}]}]}))
    pts = np.array(MotionScript.load(str(f)).framing_points(([0.0, 0.0, 0.0], [1.0, 1.0, 1.0])))
    assert pts.shape == (17, 3)
    assert np.allclose(pts[:16].min(0), [0, 0, 0]) and np.allclose(pts[:16].max(0), [3.0, 1.0, 1.0])
    assert np.allclose(pts[8:16].min(0), [2.0, 0, 0])  # the box moved by the last offset
    assert np.allclose(pts[16], [5.0, 6.0, 7.0])


def test_a_stiff_region_that_is_pinned_changes_nothing(splat_file, tmp_path):
    """A fresh user's check: the cow pinned at its base and its head dragged sideways; making the pinned base wood
    (`--region base=wood`, the same cubature points as the pin) must not change the motion, yet the head moved 3x
    less (0.0727 -> 0.0245 units): the skinning basis was one material's, whose smooth fields strain the base too, so
    the stiff base locked the whole body. The basis is now the modes of the body with its wooden base: within 5 %."""
    from plyfile import PlyData

    script = tmp_path / "drag.json"
    script.write_text(json.dumps({"drags": [{"point": [0.1, -0.45, -0.27], "radius": 0.12, "end_frame": 35,
                                             "keyframes": [{"frame": 5, "offset": [0, 0, 0]},
                                                           {"frame": 25, "offset": [0.3, 0, 0]}]}]}))
    src = splat_file("spot_mesh2splat_10k.splat")
    dx = []
    for name, extra in (("plain", []), ("wood", ["--region", "base=wood"])):
        out = tmp_path / name
        assert _run(["animate", src, "--headless", "--frames", 30, "--material", "rubber", "--gravity", "0",
                     "--pin", "base", "--script", script, "--export", out, *extra]) == 0
        xyz = [np.stack([PlyData.read(str(out / f"frame{k:04d}.ply"))["vertex"][c] for c in "xyz"], 1)
               for k in (1, 30)]
        head = np.linalg.norm(xyz[0] - [0.1, -0.45, -0.27], axis=1) < 0.12
        dx.append(float((xyz[1][head, 0] - xyz[0][head, 0]).mean()))
    assert dx[0] > 0.05 and dx[1] == pytest.approx(dx[0], rel=0.05), dx


def test_a_chosen_material_that_will_slump_is_said(splat_file, tmp_path, capsys):
    """A named material is used as given (the default's raise does not apply), but a cow in jelly or an armadillo
    in foam collapsed without a word: the same linear estimate the default's raise uses now gives a note (jelly:
    about 93 % of its height, with stiffer materials named); rubber, which stands, gets none."""
    src = splat_file("spot_mesh2splat_10k.splat")
    notes = {}
    for mat in ("jelly", "rubber"):
        capsys.readouterr()
        assert _run(["animate", src, "--headless", "--frames", 1, *FAST, "--material", mat,
                     "--export", tmp_path / mat]) == 0
        notes[mat] = [ln for ln in capsys.readouterr().err.splitlines() if "so it will slump" in ln]
    assert len(notes["jelly"]) == 1 and "--material" in notes["jelly"][0] and "rubber" in notes["jelly"][0]
    pct = float(notes["jelly"][0].split("about ")[1].split("%")[0])
    assert pct > 50
    assert notes["rubber"] == []


def test_a_script_with_a_key_twice_is_refused_and_an_empty_one_is_said(splat_file, tmp_path, capsys):
    """json keeps the last of a duplicated key: a script with a drag list and then "drags": [] ran no drag and
    said nothing. A key given twice is refused before any work; a script with nothing in it is said."""
    src = splat_file("spot_mesh2splat_10k.splat")
    dup = tmp_path / "dup.json"
    dup.write_text('{"drags": [{"handle": 1, "keyframes": [{"frame": 2, "offset": [0, 0, 0.1]}]}], "drags": []}')
    assert _run(["animate", src, "--headless", "--frames", 2, *FAST, "--script", dup, "--export", tmp_path / "a"]) == 2
    assert "the key 'drags' is given twice" in capsys.readouterr().err and not (tmp_path / "a").exists()
    empty = tmp_path / "empty.json"
    empty.write_text('{"drags": []}')
    assert _run(["animate", src, "--headless", "--frames", 1, *FAST, "--script", empty,
                 "--export", tmp_path / "b"]) == 0
    assert "the script has no drags and no freezes: nothing is scripted" in capsys.readouterr().err
