"""Nothing lost, nothing silent (issue 12, defects 1-8): failed writes are errors, options are checked before any
loading, JSON is strict, user mistakes give one-line errors, outputs are never replaced silently, typed fields keep
their type and a busy viewer port is reported.

Every test builds its own small synthetic files (no shared data); the few animate runs simulate a 300-Gaussian
blob for 2-3 frames with a cheap basis.
"""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

import numpy as np
import pytest
import torch

from physskin_gs.cli import main
from physskin_gs.errors import OptionError, PhysSkinError, SceneFormatError

FAST = ["--cubature", "32", "--newton-iters", "2", "--skinning", "rbf", "--select", "all"]
SIZE = 32


from tests.conftest import blob_scene as _blob  # noqa: E402
from tests.conftest import save_scene_file as _save  # noqa: E402


@pytest.fixture
def blob(tmp_path) -> Path:
    return _save(_blob(), tmp_path / "blob.ply")


@pytest.fixture
def garbage(tmp_path) -> Path:
    """An existing file that is not a scene: an error about it means the options were accepted."""
    p = tmp_path / "garbage.ply"
    p.write_bytes(b"not a splat at all\n" * 4)
    return p


def _run(capsys, argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def _last_error(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("error: ")]
    assert lines, err
    return lines[-1]


def _write_ply(path: Path, props, rows: np.ndarray, element: str = "vertex", header_extra: str = "") -> Path:
    """Binary little-endian PLY with the given ``(ply type, name)`` properties; ``rows`` is a structured array."""
    head = f"ply\nformat binary_little_endian 1.0\n{header_extra}element {element} {len(rows)}\n"
    head += "".join(f"property {t} {n}\n" for t, n in props) + "end_header\n"
    path.write_bytes(head.encode("ascii") + rows.tobytes())
    return path


_CORE = ["x", "y", "z", "f_dc_0", "f_dc_1", "f_dc_2", "opacity", "scale_0", "scale_1", "scale_2",
         "rot_0", "rot_1", "rot_2", "rot_3"]


def _core_rows(n: int = 40, types=None):
    types = types or {}
    dt = [(name, types.get(name, "<f4")) for name in _CORE]
    rows = np.zeros(n, dtype=dt)
    rng = np.random.default_rng(0)
    for k in ("x", "y", "z"):
        rows[k] = rng.random(n)
    for k in ("scale_0", "scale_1", "scale_2"):
        rows[k] = -3.0 if rows.dtype[k].kind == "f" else 3
    rows["rot_0"] = 1
    rows["opacity"] = 2 if rows.dtype["opacity"].kind == "f" else 200
    return rows


_PLY_NAMES = {"u1": "uchar", "u2": "ushort", "u4": "uint", "i4": "int", "f4": "float"}


def _props(rows):
    """``(ply type, name)`` of each field of a structured array."""
    return [(_PLY_NAMES[rows.dtype[n].str[1:]], n) for n in rows.dtype.names]


# ================================================================ 1. a failed write is an error, never "wrote"
def test_write_video_into_a_path_below_a_file_is_an_error(tmp_path):
    from physskin_gs.render import write_video

    blocker = tmp_path / "not_a_folder"
    blocker.write_text("x")
    frames = [np.zeros((16, 16, 3), np.uint8)] * 2
    with pytest.raises(PhysSkinError, match="not_a_folder is not a folder"):
        write_video(frames, blocker / "v.mp4", fps=5)


def test_write_video_checks_the_file_ffmpeg_leaves(tmp_path, monkeypatch):
    pytest.importorskip("imageio_ffmpeg")
    from physskin_gs.render import video as video_mod

    folder = tmp_path / "clips"
    folder.mkdir()
    out = folder / "v.mp4"

    def frames():  # the folder goes away while ffmpeg writes: ffmpeg prints an error, the writer returns normally
        for i in range(3):
            if i == 2:
                folder.rename(tmp_path / "moved")
            yield np.full((16, 16, 3), 40 * i, np.uint8)

    with pytest.raises(PhysSkinError, match=r"could not write video .*v\.mp4: ffmpeg produced no file"):
        video_mod.write_video(frames(), out, fps=5)
    (tmp_path / "moved").rename(folder)
    assert not out.exists()
    for p in folder.iterdir():
        p.unlink()
    # a file that holds fewer frames than were given is incomplete: an error, and no file at the path
    monkeypatch.setattr(video_mod, "video_frame_count", lambda p: 2)
    with pytest.raises(PhysSkinError, match="held 2 of 3 frames"):
        video_mod.write_video([np.zeros((16, 16, 3), np.uint8)] * 3, out, fps=5)
    assert not out.exists() and list(folder.iterdir()) == []
    monkeypatch.undo()
    written = video_mod.write_video([np.zeros((16, 16, 3), np.uint8)] * 3, out, fps=5)
    assert written == out and video_mod.video_frame_count(out) == 3
    assert sorted(p.name for p in folder.iterdir()) == ["v.mp4"]  # no temporary file left beside it


def test_animate_video_below_a_file_fails_before_simulating(capsys, blob, tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    code, _, err = _run(capsys, ["animate", blob, "--headless", "--frames", 2, "--export", tmp_path / "seq",
                                 "--video", blocker / "v.mp4", "--width", SIZE, "--height", SIZE, *FAST])
    assert code == 2
    assert _last_error(err) == f"error: --video {blocker / 'v.mp4'}: cannot be written: {blocker} is a file, not a folder"
    assert "analysing" not in err and not (tmp_path / "seq").exists()  # refused before anything was loaded


def test_animate_video_that_is_not_written_keeps_the_frames(capsys, blob, tmp_path, monkeypatch):
    import physskin_gs.render as render_pkg

    calls = []

    def silent_failure(frames, path, fps=30.0, quality=8):  # what ffmpeg did: print, write nothing, return
        calls.append(len(list(frames)))
        return Path(path)

    monkeypatch.setattr(render_pkg, "write_video", silent_failure)
    seq, video = tmp_path / "seq", tmp_path / "v.mp4"
    code, _, err = _run(capsys, ["animate", blob, "--headless", "--frames", 3, "--export", seq, "--video", video,
                                 "--width", SIZE, "--height", SIZE, *FAST])
    assert code == 2 and calls == [3]
    assert _last_error(err) == (f"error: could not write video {video}: the file does not exist after writing; "
                                f"the 3 simulated frames are in {seq}/")
    assert "wrote v.mp4" not in err and f"wrote {video}" not in err
    assert sorted(p.name for p in seq.iterdir()) == ["frame0001.ply", "frame0002.ply", "frame0003.ply",
                                                     "sequence.json"]
    assert json.loads((seq / "sequence.json").read_text())["frames"] == 3


def test_render_turntable_and_image_write_failures_are_errors(capsys, blob, tmp_path, monkeypatch):
    import physskin_gs.render as render_pkg

    monkeypatch.setattr(render_pkg, "write_video", lambda frames, path, fps=30.0: (list(frames), Path(path))[1])
    out = tmp_path / "turn.mp4"
    code, outp, err = _run(capsys, ["render", blob, "-o", out, "--turntable", 2, "--width", SIZE, "--height", SIZE,
                                    "--up", "z"])
    assert code == 2 and "wrote" not in outp
    assert _last_error(err) == f"error: could not write video {out}: the file does not exist after writing"
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    code, outp, err = _run(capsys, ["render", blob, "-o", blocker / "x.png", "--up", "z"])
    assert code == 2 and "wrote" not in outp and "is a file, not a folder" in _last_error(err)


# ================================================================ 2. options are checked before loading
@pytest.mark.parametrize("extra, message", [
    (["--gravity", "nan"], "--gravity must be a finite number in [-1000, 1000] m/s^2, got nan"),
    (["--gravity", "inf"], "--gravity must be a finite number in [-1000, 1000] m/s^2, got inf"),
    (["--floor", "nan"], "--floor 'nan': the height must be a finite number"),
    (["--newton-iters", "0"], "--newton-iters must be an integer in [1, 100], got 0"),
    (["--newton-iters", "-3"], "--newton-iters must be an integer in [1, 100], got -3"),
    (["--damping", "-1"], "--damping must be a finite number in [0, 100], got -1"),
    (["--friction", "-1"], "--friction must be a finite number in [0, 1000] 1/s, got -1"),
    (["--dt", "10"], "--dt must be a finite number in [1e-06, 1] s, got 10"),
    (["--dt", "1e-9"], "--dt must be a finite number in [1e-06, 1] s, got 1e-09"),
    (["--E", "nan"], "--E (Young's modulus) must be a finite number in (0, 1e+12] Pa, got nan"),
    (["--nu", "inf"], "--nu (Poisson ratio) must be a finite number in (-1, 0.5), got inf"),
    (["--density", "0"], "--density must be a finite number in (0, 100000] kg/m^3, got 0"),
    (["--cubature", "8"], "--cubature must be an integer in [16, 100000], got 8"),
    (["--frames", "0"], "--frames must be an integer in [1, 100000], got 0"),
    (["--steps-per-frame", "0"], "--steps-per-frame must be an integer in [1, 1000], got 0"),
    (["--scale", "-2"], "--scale must be a finite number in (0, 1e+09] m per scene unit, got -2"),
    (["--fit-seconds", "nan"], "--fit-seconds must be a finite number in (0, 86400] s, got nan"),
    (["--seed", "-1"], "--seed must be an integer in [0, 4294967295], got -1"),
    (["--up", "w"], "unknown up axis 'w'"),
    (["--select", "1,2,3"], "--select '1,2,3': expected auto, largest, all, 'xmin,ymin,zmin,xmax,ymax,zmax'"),
    (["--select", "opacity>"], "--select 'opacity>': expected auto, largest, all"),
    (["--select", "0,0,0,-1,1,1"], "--select '0,0,0,-1,1,1': box max must exceed min on every axis"),
    (["--video", "v.mp4", "--width", "40"], "--width/--height must be positive multiples of 16 up to 8192 for a video, got 40x384"),
])
def test_animate_options_are_checked_before_loading(capsys, garbage, tmp_path, extra, message):
    extra = [str(tmp_path / e) if e == "v.mp4" else e for e in extra]
    code, _, err = _run(capsys, ["animate", garbage, "--headless", "--export", tmp_path / "seq", *extra])
    assert code == 2
    assert _last_error(err).startswith("error: " + message)
    assert not (tmp_path / "seq").exists()


def test_animate_viewer_mode_checks_options_too(capsys, garbage, monkeypatch):
    import sys
    import types

    started = []
    fake = types.ModuleType("physskin_gs_viewer.app")
    fake.run_viewer = lambda args: started.append(args) or 0
    monkeypatch.setitem(sys.modules, "physskin_gs_viewer.app", fake)
    code, _, err = _run(capsys, ["animate", garbage, "--gravity", "nan"])
    assert code == 2 and "--gravity must be a finite number" in err and started == []
    code, _, err = _run(capsys, ["animate", garbage, "--port", "70000"])
    assert code == 2 and "--port must be an integer in [0, 65535], got 70000" in err and started == []


def test_odd_but_legal_values_warn_before_loading(capsys, garbage, tmp_path):
    code, _, err = _run(capsys, ["animate", garbage, "--headless", "--export", tmp_path / "s", "--dt", "0.0005",
                                 "--gravity", "-9.8"])
    assert code == 2  # the garbage file, after the options were accepted
    lines = err.strip().splitlines()
    assert lines[0] == ("[physskin-gs] warning: --dt 0.0005 s is a very small time step: each frame advances "
                        "0.0005 s, so the motion will look nearly frozen (raise --steps-per-frame or --dt)")
    assert lines[1] == "[physskin-gs] warning: --gravity -9.8 is negative: gravity pulls along +up"
    assert "garbage.ply" in lines[-1]


@pytest.mark.parametrize("extra, message", [
    (["--fps", "inf"], "--fps must be a finite number in (0, 1000], got inf"),
    (["--elevation", "nan"], "--elevation must be a finite number in (-90, 90) degrees, got nan"),
    (["--azimuth", "inf"], "--azimuth must be a finite number in [-3600, 3600] degrees, got inf"),
    (["--distance", "nan"], "--distance must be a finite number > 0 scene units, got nan"),
    (["--sh-degree", "7"], "--sh-degree must be an integer in [0, 4], got 7"),
    (["--turntable", "-1"], "--turntable must be an integer in [0, 100000] frames, got -1"),
    (["--fov", "0"], "--fov must be a finite number in (0, 180) degrees, got 0"),
])
def test_render_options_are_checked_before_loading(capsys, garbage, tmp_path, extra, message):
    code, _, err = _run(capsys, ["render", garbage, "-o", tmp_path / "x.png", *extra])
    assert code == 2 and _last_error(err) == "error: " + message


# ================================================================ 3. sequence.json is strict JSON
def _strict_loads(text: str):
    def no_constants(name):
        raise AssertionError(f"non-JSON constant {name} in the file")

    return json.loads(text, parse_constant=no_constants)


def test_sequence_json_text_writes_non_finite_values_as_null():
    from physskin_gs.cli.animate import sequence_json_text

    meta = {"fps": 30.0, "floor": float("-inf"), "scene_analysis": {"extent": [1.0, float("nan")]},
            "step_stats": [{"frame": 2, "ms": float("inf")}], "frames": 2}
    back = _strict_loads(sequence_json_text(meta))
    assert back["floor"] is None and back["scene_analysis"]["extent"] == [1.0, None]
    assert back["step_stats"] == [{"frame": 2, "ms": None}] and back["fps"] == 30.0 and back["frames"] == 2
    assert back["null_values"]["keys"] == ["floor", "scene_analysis.extent[1]", "step_stats[0].ms"]
    assert "not finite" in back["null_values"]["note"]
    assert "null_values" not in _strict_loads(sequence_json_text({"fps": 30.0}))


def test_animate_sequence_json_is_strict_end_to_end(capsys, blob, tmp_path, monkeypatch):
    import physskin_gs.bodies as bodies

    real = bodies.prepare_bodies

    def with_a_nan(*a, **k):  # a non-finite fact in the scene analysis, as real captures produce
        anim = real(*a, **k)
        anim.info["scene_analysis"]["probe_extent"] = float("nan")
        return anim

    monkeypatch.setattr(bodies, "prepare_bodies", with_a_nan)
    seq = tmp_path / "seq"
    code, _, err = _run(capsys, ["animate", blob, "--headless", "--frames", 2, "--export", seq, *FAST])
    assert code == 0, err
    meta = _strict_loads((seq / "sequence.json").read_text())
    assert meta["scene_analysis"]["probe_extent"] is None
    assert meta["null_values"]["keys"] == ["scene_analysis.probe_extent"]


# ================================================================ 4. user mistakes give one-line errors
@pytest.mark.parametrize("drag, message", [
    ({"handle": 0, "keyframes": [{"frame": "abc", "offset": [0, 0, 0]}]},
     "drags[0].keyframes[0].frame must be an integer >= 1 (frame 1 is the rest state), got 'abc'"),
    ({"point": [0, 0, 0], "radius": "big", "keyframes": [{"frame": 2, "target": [0, 0, 0]}]},
     "drags[0].radius must be a positive number (scene units), got 'big'"),
    ({"handle": 0, "start_frame": None, "keyframes": [{"frame": 2, "offset": [0, 0, 0]}]},
     "drags[0].start_frame must be an integer >= 1 (leave it out for the first keyframe), got None"),
    ({"handle": 0, "keyframes": [{"frame": 2, "offset": [0, 0, 0]}], "speed": 3},
     "drags[0]: unknown key 'speed' (known keys: handle, point, body, radius, keyframes, start_frame, end_frame, comment)"),
    ({"handle": 0, "keyframes": [{"frame": 2, "ofset": [0, 0, 0]}]},
     "drags[0].keyframes[0]: unknown key 'ofset'; did you mean 'offset'? (known keys: frame, target, offset, comment)"),
    ({"handle": "3", "keyframes": [{"frame": 2, "offset": [0, 0, 0]}]},
     "drags[0].handle must be an integer >= 0, got '3'"),
    ({"handle": 0, "keyframes": [{"frame": True, "offset": [0, 0, 0]}]},
     "drags[0].keyframes[0].frame must be an integer >= 1 (frame 1 is the rest state), got True"),
    ({"handle": 0, "keyframes": [{"frame": 2, "offset": [0, "up", 0]}]},
     "drags[0].keyframes[0].offset must be a list of 3 numbers, got [0, 'up', 0]"),
    ({"handle": 0, "end_frame": 3, "start_frame": 5, "keyframes": [{"frame": 2, "offset": [0, 0, 0]}]},
     "drags[0]: end_frame 3 is before start_frame 5; the drag would never run"),
    ({"handle": 0, "end_frame": -2, "keyframes": [{"frame": 2, "offset": [0, 0, 0]}]},
     "drags[0].end_frame must be an integer >= 1, or -1 (never released), got -2"),
    ({"handle": 0, "radius": 0.1, "keyframes": [{"frame": 2, "offset": [0, 0, 0]}]},
     "drags[0].radius applies to a 'point' drag only"),
    ({"handle": 0, "keyframes": {"frame": 2}}, "drags[0].keyframes must be a non-empty list"),
])
def test_motion_script_schema_names_the_key_path(tmp_path, drag, message):
    from physskin_gs.cli.animate import MotionScript

    p = tmp_path / "motion.json"
    p.write_text(json.dumps({"drags": [drag]}))
    with pytest.raises(OptionError) as info:
        MotionScript.load(str(p))
    assert str(info.value).startswith(f"{p}: {message}")


@pytest.mark.parametrize("doc, message", [
    ({"drag": [{"handle": 0, "keyframes": [{"frame": 2, "offset": [0, 0, 0]}]}]},
     "the script: unknown key 'drag'; did you mean 'drags'? (known keys: drags, freezes, comment)"),
    ({"drags": [], "freeze": []}, "the script: unknown key 'freeze'; did you mean 'freezes'?"),
    ({"drags": [{"handle": 0, "keyframe": [{"frame": 2, "offset": [0, 0, 0]}]}]},
     "drags[0]: unknown key 'keyframe'; did you mean 'keyframes'?"),
    ({"motion": 1}, "the script: unknown key 'motion' (known keys: drags, freezes, comment)"),
])
def test_motion_script_names_a_misspelt_key(tmp_path, doc, message):
    """A misspelt key, even the top-level 'drags' itself, is named with the closest known key (a misspelt
    'drags' used to get the generic "a motion script is an object with a 'drags' list")."""
    from physskin_gs.cli.animate import MotionScript

    p = tmp_path / "motion.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(OptionError) as info:
        MotionScript.load(str(p))
    assert str(info.value).startswith(f"{p}: {message}")


def test_motion_script_accepts_the_documented_forms(tmp_path):
    from physskin_gs.cli.animate import MotionScript

    p = tmp_path / "motion.json"
    p.write_text(json.dumps({"comment": "two drags", "drags": [
        {"handle": 3, "keyframes": [{"frame": 40, "offset": [0, 0.5, 0.2]}, {"frame": 10.0, "offset": [0, 0.3, 0]}],
         "end_frame": 50},
        {"point": [0.1, 0.2, 0.0], "radius": 0.1, "start_frame": 5, "end_frame": -1,
         "keyframes": [{"frame": 5, "target": [0.1, 0.2, 0.0]}]}]}))
    s = MotionScript.load(str(p))
    assert [d["_kf"][0][0] for d in s.drags] == [10, 5] and s.drags[0]["handle"] == 3
    assert (s.drags[0]["_start"], s.drags[0]["_end"]) == (10, 50) and (s.drags[1]["_start"], s.drags[1]["_end"]) == (5, -1)
    assert s.drags[1]["radius"] == 0.1 and s.drags[1]["point"] == [0.1, 0.2, 0.0]


def test_motion_script_error_through_the_cli(capsys, garbage, tmp_path):
    p = tmp_path / "motion.json"
    p.write_text('{"drags": [{"handle": 0, "keyframes": [{"frame": "abc", "offset": [0, 0, 0]}]}]}')
    code, _, err = _run(capsys, ["animate", garbage, "--headless", "--export", tmp_path / "s", "--script", p])
    assert code == 2 and "drags[0].keyframes[0].frame must be an integer" in _last_error(err)


def test_ply_with_a_duplicated_property_is_a_scene_format_error(capsys, tmp_path):
    from physskin_gs.io import load_scene

    rows = _core_rows(10)
    props = _props(rows)
    dup = np.zeros(10, dtype=rows.dtype.descr + [("opacity_again", "<f4")])
    for n in rows.dtype.names:
        dup[n] = rows[n]
    path = _write_ply(tmp_path / "dup.ply", props + [("float", "opacity")], dup)
    with pytest.raises(SceneFormatError, match=r"dup\.ply: PLY property 'opacity' occurs more than once in element "
                                               r"'vertex' \(header line \d+\)"):
        load_scene(path)
    for cmd in (["info", path], ["convert", path, tmp_path / "o.ply"], ["render", path, "-o", tmp_path / "o.png"]):
        code, _, err = _run(capsys, cmd)
        assert code == 2 and "'opacity' occurs more than once" in _last_error(err)


# ================================================================ 5. messages that name the real problem
def test_gaussians_in_an_element_not_called_vertex(capsys, tmp_path):
    rows = _core_rows(30)
    path = _write_ply(tmp_path / "g.ply", _props(rows), rows, element="gaussian")
    want = "the Gaussians are in element 'gaussian', but a 3DGS PLY stores them in element 'vertex'"
    for cmd in (["info", path], ["convert", path, tmp_path / "o.ply"], ["skin", path, "-o", tmp_path / "o.npz"],
                ["animate", path, "--headless", "--export", tmp_path / "seq", *FAST]):
        code, _, err = _run(capsys, cmd)
        assert code == 2 and want in _last_error(err), (cmd[0], err)
        assert "point cloud" not in err


def test_gaussians_beside_a_position_only_vertex_element(tmp_path):
    from physskin_gs.io import load_scene

    rows = _core_rows(8)
    pos = np.zeros(8, dtype=[("x", "<f4"), ("y", "<f4"), ("z", "<f4")])
    head = "ply\nformat binary_little_endian 1.0\nelement vertex 8\nproperty float x\nproperty float y\n" \
           "property float z\nelement splat 8\n" + "".join(f"property {t} {n}\n" for t, n in _props(rows)) + \
           "end_header\n"
    p = tmp_path / "two.ply"
    p.write_bytes(head.encode() + pos.tobytes() + rows.tobytes())
    with pytest.raises(SceneFormatError, match="the Gaussians are in element 'splat'"):
        load_scene(p)


def test_header_over_one_mib(tmp_path):
    from physskin_gs.io import detect_format

    rows = _core_rows(5)
    comments = "comment " + "x" * 100 + "\n"
    long_head = comments * 11000  # 1.2 MiB of comments
    p = _write_ply(tmp_path / "big.ply", _props(rows), rows, header_extra=long_head)
    with pytest.raises(SceneFormatError, match=r"big\.ply: PLY header is larger than 1 MiB"):
        detect_format(p)
    q = tmp_path / "endless.ply"
    q.write_bytes(b"ply\nformat binary_little_endian 1.0\n" + long_head.encode())
    with pytest.raises(SceneFormatError, match="larger than 1 MiB"):
        detect_format(q)


def _tetra_obj(path: Path) -> Path:
    path.write_text("v 0 0 0\nv 1 0 0\nv 0 1 0\nv 0 0 1\nf 1 3 2\nf 1 2 4\nf 1 4 3\nf 2 3 4\n")
    return path


def test_render_and_convert_on_a_mesh_sample_it_as_animate_does(capsys, tmp_path):
    """An OBJ and a mesh PLY (a tetrahedron) given to render and convert are drawn and converted as the Gaussians
    animate samples on their surface, with a note saying so (they used to be refused, pointing at animate)."""
    from physskin_gs.io import load_scene

    obj = _tetra_obj(tmp_path / "tet.obj")
    rows = np.zeros(4, dtype=[("x", "<f4"), ("y", "<f4"), ("z", "<f4")])
    rows["x"][1] = rows["y"][2] = rows["z"][3] = 1.0
    head = ("ply\nformat ascii 1.0\nelement vertex 4\nproperty float x\nproperty float y\nproperty float z\n"
            "element face 4\nproperty list uchar int vertex_indices\nend_header\n")
    ply = tmp_path / "tet.ply"
    ply.write_text(head + "0 0 0\n1 0 0\n0 1 0\n0 0 1\n3 0 2 1\n3 0 1 3\n3 0 3 2\n3 1 2 3\n")
    for k, mesh in enumerate((obj, ply)):
        out_png, out_ply = tmp_path / f"o{k}.png", tmp_path / f"o{k}.ply"
        for cmd in (["render", mesh, "-o", out_png, "--width", "32", "--height", "32", "--mesh-gaussians", "200"],
                    ["convert", mesh, out_ply, "--mesh-gaussians", "200"]):
            code, _, err = _run(capsys, cmd)
            assert code == 0 and "is a mesh: 200 Gaussians sampled on its surface" in err, err
        assert out_png.stat().st_size > 0 and load_scene(out_ply).num_gaussians == 200


def test_one_wording_for_a_missing_input_file(capsys, tmp_path, monkeypatch):
    import sys
    import types

    fake = types.ModuleType("physskin_gs_viewer.app")
    fake.run_viewer = lambda args: 0
    monkeypatch.setitem(sys.modules, "physskin_gs_viewer.app", fake)
    missing = tmp_path / "nope.ply"
    want = f"error: {missing}: input file not found"
    for cmd in (["info", missing], ["convert", missing, tmp_path / "o.ply"], ["render", missing, "-o", tmp_path / "o.png"],
                ["skin", missing, "-o", tmp_path / "o.npz"], ["animate", missing],
                ["animate", missing, "--headless", "--export", tmp_path / "seq"]):
        code, _, err = _run(capsys, cmd)
        assert code == 2 and err.strip().splitlines()[-1] == want, (cmd[0], err)
    script = tmp_path / "motion.json"
    code, _, err = _run(capsys, ["animate", _save(_blob(), tmp_path / "b.ply"), "--headless", "--export",
                                 tmp_path / "s", "--script", script])
    assert code == 2 and _last_error(err) == f"error: --script {script}: input file not found"


def test_skin_of_three_usable_gaussians_uses_two_handles(capsys, tmp_path):
    """Few usable Gaussians are no error (issue "small and degenerate inputs"): fewer handles, said in one line."""
    sc = _blob(300)
    sc.opacity_logits[3:] = -10.0  # only 3 Gaussians are opaque enough to define the object
    path = _save(sc, tmp_path / "three.ply")
    code, out, err = _run(capsys, ["skin", path, "-o", tmp_path / "w.npz", "--skinning", "rbf"])
    assert code == 0, err
    assert [ln for ln in err.splitlines() if "note:" in ln] == [
        f"[physskin-gs] note: {path}: 3 usable Gaussians: 2 handles instead of 16"]
    z = np.load(tmp_path / "w.npz")
    assert z["weights"].shape == (300, 3) and np.isfinite(z["weights"]).all() and np.isfinite(z["grads"]).all()


def test_few_points_build_a_field_not_an_error(capsys, tmp_path):
    path = _save(_blob(17), tmp_path / "few.ply")
    code, _, err = _run(capsys, ["animate", path, "--headless", "--frames", 2, "--export", tmp_path / "seq",
                                 "--cubature", "32", "--select", "all"])
    assert code == 0, err
    assert "handles instead of" not in err and "17 handles (16 + constant; modes (voxel, " in err  # 17 usable carry 16
    # a sparse splat (fewer than 64 usable Gaussians) is the solid hull of its Gaussians' ellipsoids: enough
    # distinct volume points for 16 eigenmodes + the constant from 40 and from 17 Gaussians alike
    for n in (40, 17):
        path = _save(_blob(n), tmp_path / f"b{n}.ply")
        code, _, err = _run(capsys, ["skin", path, "-o", tmp_path / f"w{n}.npz"])
        assert code == 0, err
        z = np.load(tmp_path / f"w{n}.npz")
        assert z["weights"].shape == (n, 17) and np.isfinite(z["weights"]).all() and np.isfinite(z["grads"]).all()
        assert np.all(z["weights"][:, -1] == 1.0)


def test_info_json_is_strict(capsys, tmp_path, monkeypatch):
    import physskin_gs.io as pio

    sc = _blob(50)
    path = _save(sc, tmp_path / "b.ply")
    monkeypatch.setattr(pio, "finite_bbox", lambda scene: ([float("nan"), 0.0, 0.0], [1.0, float("inf"), 1.0]))
    code, out, _ = _run(capsys, ["info", path, "--json"])
    info = _strict_loads(out)
    assert code == 0 and info["bbox_min"] == [None, 0.0, 0.0] and info["bbox_max"] == [1.0, None, 1.0]
    assert info["null_values"]["keys"] == ["bbox_min[0]", "bbox_max[1]"]


def test_zero_quaternions_follow_one_rule_everywhere(capsys, tmp_path):
    sc = _blob(300)
    sc.quats.zero_()  # every row: the identity rotation for every command
    path = _save(sc, tmp_path / "zq.ply")
    code, out, _ = _run(capsys, ["info", path, "--json"])
    info = json.loads(out)
    assert code == 0 and info["zero_norm_quats"] == 300 and info["num_invalid"] == 0
    assert "300 Gaussians with zero-norm quaternions (read as the identity rotation; kept)" in info["warnings"]
    code, _, err = _run(capsys, ["convert", path, tmp_path / "c.ply", "--drop-invalid"])
    assert code == 0 and "dropped 0 invalid Gaussians" in err
    from physskin_gs.io import load_scene

    assert load_scene(tmp_path / "c.ply").num_gaussians == 300
    code, _, err = _run(capsys, ["render", path, "-o", tmp_path / "r.png", "--width", SIZE, "--height", SIZE,
                                 "--up", "z"])
    assert code == 0, err
    import imageio.v2 as iio

    assert iio.imread(tmp_path / "r.png").std() > 1.0  # drawn as identity-rotated Gaussians
    code, _, err = _run(capsys, ["animate", path, "--headless", "--frames", 2, "--export", tmp_path / "seq", *FAST])
    assert code == 0, err
    assert load_scene(tmp_path / "seq" / "frame0002.ply").num_gaussians == 300


# ================================================================ 6. outputs are never replaced silently
def test_export_folder_of_another_run_needs_overwrite(capsys, blob, tmp_path):
    seq = tmp_path / "seq"
    assert _run(capsys, ["animate", blob, "--headless", "--frames", 3, "--export", seq, *FAST])[0] == 0
    before = {p.name: p.read_bytes() for p in seq.iterdir()}
    code, _, err = _run(capsys, ["animate", blob, "--headless", "--frames", 2, "--export", seq, *FAST])
    assert code == 2 and _last_error(err) == (
        f"error: --export {seq} already holds the files of another run (frame0001.ply, frame0002.ply, "
        "frame0003.ply ... (4 files)); use --overwrite to replace them, or choose an empty folder")
    assert {p.name: p.read_bytes() for p in seq.iterdir()} == before
    code, _, err = _run(capsys, ["animate", blob, "--headless", "--frames", 2, "--export", seq, "--overwrite", *FAST])
    assert code == 0, err
    assert sorted(p.name for p in seq.iterdir()) == ["frame0001.ply", "frame0002.ply", "sequence.json"]
    assert json.loads((seq / "sequence.json").read_text())["frames"] == 2


def test_frame_files_no_run_describes_are_not_called_another_runs(capsys, blob, tmp_path):
    """A user's own frame0002.ply in the export folder (no sequence.json): the refusal said "the files of another
    run", and --overwrite "the earlier run's 1 file gave way"; both now say what is known, and other files stay."""
    seq = tmp_path / "user"
    seq.mkdir()
    (seq / "frame0002.ply").write_bytes(b"my scan")
    (seq / "notes.txt").write_text("mine")
    code, _, err = _run(capsys, ["animate", blob, "--headless", "--frames", 2, "--export", seq, *FAST])
    assert code == 2 and "frame files that no sequence.json describes (a killed run's, or files of your own) " \
        "(frame0002.ply)" in _last_error(err)
    code, _, err = _run(capsys, ["animate", blob, "--headless", "--frames", 2, "--export", seq, "--overwrite", *FAST])
    assert code == 0 and "1 earlier frame file in" in err and "other files there were kept" in err
    assert (seq / "notes.txt").read_text() == "mine"


def test_existing_video_and_png_frames_need_overwrite(capsys, blob, tmp_path):
    video = tmp_path / "v.mp4"
    video.write_bytes(b"an older video")
    code, _, err = _run(capsys, ["animate", blob, "--headless", "--video", video, "--width", SIZE, "--height", SIZE,
                                 *FAST])
    assert code == 2 and _last_error(err) == f"error: {video}: exists; refusing to replace it (use --overwrite to overwrite)"
    assert video.read_bytes() == b"an older video"
    png = tmp_path / "png"
    png.mkdir()
    (png / "frame0009.png").write_bytes(b"old")
    code, _, err = _run(capsys, ["animate", blob, "--headless", "--png", png, "--width", SIZE, "--height", SIZE, *FAST])
    assert code == 2 and "already holds the files of another run (frame0009.png)" in _last_error(err)


def test_convert_and_render_refuse_to_replace_without_force(capsys, blob, tmp_path):
    for cmd, out in ((["convert", blob], tmp_path / "o.ply"), (["render", blob, "--up", "z", "--width", SIZE,
                                                               "--height", SIZE, "-o"], tmp_path / "o.png")):
        out.write_bytes(b"keep me")
        code, _, err = _run(capsys, cmd + [out])
        assert code == 2 and _last_error(err) == f"error: {out}: exists; refusing to replace it (use --force to overwrite)"
        assert out.read_bytes() == b"keep me"
        code, _, err = _run(capsys, cmd + [out, "--force"])
        assert code == 0, err
        assert out.read_bytes() != b"keep me" and out.stat().st_size > 100


def test_headless_without_an_output_is_refused_before_any_work(capsys, garbage):
    code, _, err = _run(capsys, ["animate", garbage, "--headless"])
    assert code == 2 and _last_error(err) == ("error: --headless writes nothing without --export DIR, --video "
                                              "OUT.mp4 or --png DIR; add one of them")


# ================================================================ 7. typed fields
@pytest.mark.parametrize("field, ptype, np_type", [("f_dc_0", "ushort", "<u2"), ("opacity", "uchar", "u1")])
def test_integer_typed_core_fields_are_refused(capsys, tmp_path, field, ptype, np_type):
    from physskin_gs.io import load_scene

    rows = _core_rows(20, {field: np_type})
    path = _write_ply(tmp_path / "int.ply", _props(rows), rows)
    with pytest.raises(SceneFormatError, match=f"found integer-typed {ptype} {field}: their values would be read "
                                               "as raw integers"):
        load_scene(path)
    code, _, err = _run(capsys, ["info", path])
    assert code == 2 and f"integer-typed {ptype} {field}" in _last_error(err)


def test_extra_properties_keep_their_type_through_convert(capsys, tmp_path):
    from physskin_gs.io import load_scene
    from physskin_gs.io.ply_header import read_ply_header

    base = _core_rows(50)
    dt = base.dtype.descr + [("label", "u1"), ("part", "<u2"), ("id", "<u4"), ("weight", "<f4")]
    rows = np.zeros(50, dtype=dt)
    for n in base.dtype.names:
        rows[n] = base[n]
    rows["label"] = np.arange(50) % 7 + 200
    rows["part"] = np.arange(50) * 1000
    rows["id"] = np.arange(50, dtype=np.uint32) + 4_000_000_000
    rows["weight"] = 0.25
    rows["x"][3] = np.nan  # dropped below: the subset keeps the types too
    src = _write_ply(tmp_path / "typed.ply", _props(rows), rows)
    s = load_scene(src)
    assert {k: v.dtype for k, v in s.extra.items()} == {"label": torch.uint8, "part": torch.uint16,
                                                        "id": torch.uint32, "weight": torch.float32}
    out = tmp_path / "out.ply"
    code, _, err = _run(capsys, ["convert", src, out, "--drop-invalid"])
    assert code == 0, err
    types = {p.name: p.type for p in read_ply_header(str(out)).element("vertex").properties}
    assert (types["label"], types["part"], types["id"], types["weight"], types["opacity"]) == ("u1", "u2", "u4", "f4", "f4")
    assert b"property uchar label\nproperty ushort part\nproperty uint id\nproperty float weight\n" in out.read_bytes()[:4000]
    back = load_scene(out)
    keep = np.arange(50) != 3
    assert back.num_gaussians == 49
    np.testing.assert_array_equal(back.extra["label"].numpy(), rows["label"][keep])
    np.testing.assert_array_equal(back.extra["id"].numpy(), rows["id"][keep])  # exact beyond float32's 2^24
    np.testing.assert_array_equal(back.extra["part"].numpy(), rows["part"][keep])
    assert back.extra["label"].dtype == torch.uint8
    assert torch.equal(back.means, s.means[torch.from_numpy(keep)])


# ================================================================ 8. a busy viewer port is reported
def test_busy_port_is_reported(capsys):
    from physskin_gs_viewer.app import ViewerApp
    from physskin_gs_viewer.testing import FakeAnimatedScene

    blocker = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    blocker.bind(("127.0.0.1", 0))
    blocker.listen(1)
    busy = blocker.getsockname()[1]
    app = ViewerApp(FakeAnimatedScene(_blob(200), num_handles=4), None, host="127.0.0.1", port=busy, play=False)
    try:
        app.start()
        assert app.wait_ready(30), app.failed
        err = capsys.readouterr().err
        assert app.port != busy
        assert f"[physskin-gs] port {busy} is in use; serving on port {app.port} instead" in err
    finally:
        app.stop()
        blocker.close()


def test_motion_script_far_points_late_drags_and_a_truthful_grab_line(capsys, tmp_path):
    """A point drag whose point lies more than the object's height off it is refused before any frame (a fresh
    user's [5, 5, 5] on Spot was logged as grabbing 'the points within 0.01' and sprang the nearest 8 toward it); a
    drag starting after the last frame warns; a drag whose radius holds no point says it grabs the nearest 8."""
    spot = Path(__file__).resolve().parents[1] / "data" / "spot_mesh2splat_10k.splat"
    base = ["animate", spot, "--headless", "--frames", 6, "--skinning", "rbf", "--export"]

    def script(name, drag):
        p = tmp_path / f"{name}.json"
        p.write_text(json.dumps({"drags": [drag]}))
        return p

    far = script("far", {"point": [5, 5, 5], "radius": 0.01, "keyframes": [{"frame": 2, "offset": [0, 0, 0]}]})
    code, _, err = _run(capsys, [*base, tmp_path / "a", "--script", far])
    msg = _last_error(err)
    assert code == 2 and re.search(r"drags\[0\]\.point \[5, 5, 5\] is 8\.\d+ scene units from the object", msg), err
    assert not (tmp_path / "a" / "frame0001.ply").exists()
    late = script("late", {"point": [0, 0, 0], "keyframes": [{"frame": 100, "offset": [0, 0.1, 0]}]})
    code, _, err = _run(capsys, [*base, tmp_path / "b", "--script", late])
    assert code == 0 and "drags[0] starts at frame 100, after the last frame (6; --frames): it never runs" in err
    near = script("near", {"point": [0, 0, 0], "radius": 0.001,
                           "keyframes": [{"frame": 2, "offset": [0, 0, 0]}, {"frame": 4, "offset": [0, 0.1, 0]}]})
    code, _, err = _run(capsys, [*base, tmp_path / "c", "--script", near])
    assert code == 0 and "drag 0 grabs the 8 cubature points nearest [0, 0, 0] (none within 0.001; the nearest" in err
