"""The up direction from the trainer's cameras (``cameras.json``): :func:`physskin_gs.geometry.camera_up.camera_up`
against cameras built around a known up, and through the product's loading path on an INRIA output folder."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from physskin_gs.geometry.camera_up import camera_up

ROOT = Path(__file__).resolve().parents[1]


def _turn_z_to(u: np.ndarray) -> np.ndarray:
    """(3, 3) rotation taking +z to the unit vector ``u`` (Rodrigues)."""
    z = np.array([0.0, 0.0, 1.0])
    v, c = np.cross(z, u), float(z @ u)
    if np.linalg.norm(v) < 1e-12:
        return np.eye(3) if c > 0 else np.diag([1.0, -1.0, -1.0])
    K = np.array([[0, -v[2], v[1]], [v[2], 0, -v[0]], [-v[1], v[0], 0]])
    return np.eye(3) + K + K @ K / (1 + c)


def cameras_looking_at(up, azimuths_deg, pitch_deg=-25.0, roll_deg=0.0, seed=0, centre=(0.0, 0.0, 0.0), dist=3.0):
    """(C, 3, 3) camera-to-world rotations (COLMAP: x right, y down, z forward) and (C, 3) centres of cameras on a
    circle about the axis ``up`` through ``centre``, looking at it from ``pitch_deg`` (negative: from above), each
    rolled by a random angle of rms ``roll_deg``."""
    up = np.asarray(up, float) / np.linalg.norm(up)
    Q = _turn_z_to(up)
    rng = np.random.default_rng(seed)
    rots, pos = [], []
    for a in np.radians(azimuths_deg):
        p = math.radians(pitch_deg)
        f = Q @ np.array([-math.cos(p) * math.cos(a), -math.cos(p) * math.sin(a), math.sin(p)])  # toward the centre
        x = np.cross(f, up)
        x /= np.linalg.norm(x)
        y = np.cross(f, x)
        r = math.radians(roll_deg) * rng.standard_normal()
        x, y = math.cos(r) * x + math.sin(r) * y, -math.sin(r) * x + math.cos(r) * y  # roll about the view axis
        rots.append(np.stack([x, y, f], axis=1))
        pos.append(np.asarray(centre) - dist * f)
    return np.array(rots), np.array(pos)


def _angle(a, b) -> float:
    return math.degrees(math.acos(np.clip(float(np.dot(a, b)) / np.linalg.norm(a) / np.linalg.norm(b), -1, 1)))


@pytest.mark.parametrize("up", [(0, -1, 0), (0, 0, 1), (0.3, -0.8, 0.5)])
def test_cameras_around_the_object_give_the_up_exactly(up):
    rots, _ = cameras_looking_at(up, np.linspace(0, 360, 40, endpoint=False))
    est = camera_up(rots)
    assert est.up is not None and _angle(est.up, up) < 1e-6, est.reason
    assert est.num_cameras == 40 and est.roll_deg < 1e-6 and "around the object" in est.reason


def test_a_partial_arc_and_a_little_roll_stay_within_a_degree():
    """Cameras over a quarter of a circle, each rolled by a couple of degrees (a hand-held phone): the plane of the
    right vectors still gives up within a degree, where the cameras' mean image up leans toward the object
    (pitched 25 degrees down, it is off by about 14 degrees on this arc)."""
    up = np.array([0.0, -1.0, 0.0])
    rots, _ = cameras_looking_at(up, np.linspace(0, 90, 25), roll_deg=2.0, seed=3)
    est = camera_up(rots)
    assert est.up is not None and _angle(est.up, up) < 1.0, est.reason
    assert _angle(-rots[:, :, 1].mean(0), up) > 10.0  # the naive mean would be far off


def test_cameras_facing_one_way_use_their_mean_image_up():
    up = np.array([0.0, 0.0, 1.0])
    rots, _ = cameras_looking_at(up, np.full(12, 30.0), pitch_deg=0.0, roll_deg=1.0, seed=1)
    est = camera_up(rots)
    assert est.up is not None and _angle(est.up, up) < 2.0 and "facing one way" in est.reason, est.reason


def test_cameras_not_held_level_or_sideways_do_not_say():
    up = np.array([0.0, 1.0, 0.0])
    az = np.linspace(0, 360, 30, endpoint=False)
    rolled, _ = cameras_looking_at(up, az, roll_deg=40.0, seed=2)
    est = camera_up(rolled)
    assert est.up is None and "not held level" in est.reason
    level, _ = cameras_looking_at(up, az)
    sideways = level[:, :, [1, 0, 2]] * np.array([-1.0, 1.0, 1.0])  # portrait images stored on their side
    est = camera_up(sideways)  # looking down: the right vectors (the old image downs) do not share a plane
    assert est.up is None and "not held level" in est.reason, est.reason
    flat, _ = cameras_looking_at(up, az, pitch_deg=0.0)
    est = camera_up(flat[:, :, [1, 0, 2]] * np.array([-1.0, 1.0, 1.0]))  # level: right vectors all vertical
    assert est.up is None and ("not upright" in est.reason or "cancel" in est.reason), est.reason
    assert camera_up(level[:2]).up is None and "at least 3" in camera_up(level[:2]).reason
    assert camera_up(np.full((5, 3, 3), np.nan)).up is None
    assert camera_up(np.zeros((4, 3))).up is None


def _write_inria_output(tmp_path, scene, rots, pos) -> Path:
    """A graphdeco-inria output folder: MODEL/point_cloud/iteration_7000/point_cloud.ply and MODEL/cameras.json."""
    from physskin_gs.io import save_scene

    ply = tmp_path / "model" / "point_cloud" / "iteration_7000" / "point_cloud.ply"
    ply.parent.mkdir(parents=True)
    save_scene(scene, str(ply))
    cams = [{"id": i, "img_name": f"{i:05d}", "width": 800, "height": 600, "position": p.tolist(),
             "rotation": r.tolist(), "fx": 700.0, "fy": 700.0} for i, (r, p) in enumerate(zip(rots, pos))]
    (tmp_path / "model" / "cameras.json").write_text(json.dumps(cams))
    return ply


def test_an_inria_output_folder_gets_its_up_from_the_cameras(tmp_path, capsys):
    """The demo cow, no floor, turned so that its up is an odd direction, saved as an INRIA PLY in the trainer's
    layout with cameras circling it: the analysis takes the cameras' up (within a degree) and says so; without the
    cameras.json the same file comes out otherwise (the INRIA +z convention or the stable base: the file's axes
    only); cameras that do not say give a warning and change nothing."""
    from physskin_gs.cli import main
    from physskin_gs.io import load_scene
    from physskin_gs.pipeline import analyze_for_animation, load_for_animation
    from physskin_gs.scene import rotmat_to_quat, quat_to_rotmat

    spot = load_scene(ROOT / "data" / "spot_mesh2splat_10k.splat")  # -y up
    true_up = np.array([0.48, 0.6, -0.64])
    true_up /= np.linalg.norm(true_up)
    M = _turn_z_to(true_up) @ _turn_z_to(np.array([0.0, -1.0, 0.0])).T  # takes -y to true_up
    Mt = torch.from_numpy(M).float()
    R = quat_to_rotmat(torch.nn.functional.normalize(spot.quats, dim=1))
    from dataclasses import replace

    turned = replace(spot, means=spot.means @ Mt.T, quats=rotmat_to_quat(Mt @ R), sh_rest=spot.sh_rest[:, :0],
                     format="inria-ply")
    centre = turned.means.mean(0).numpy()
    rots, pos = cameras_looking_at(true_up, np.linspace(0, 360, 36, endpoint=False), centre=centre, seed=5,
                                   roll_deg=1.5)
    ply = _write_inria_output(tmp_path, turned, rots, pos)
    scene = load_for_animation(ply)
    assert scene.up_hint_source.startswith("the capture's cameras, cameras.json: the normal of the plane")
    a = analyze_for_animation(scene)
    assert a.up_source == "cameras" and _angle(a.up, true_up) < 1.0 and not a.unsure
    assert main(["render", str(ply), "-o", str(tmp_path / "r.png"), "--width", "32", "--height", "32"]) == 0
    note = next(x for x in capsys.readouterr().err.splitlines() if x.startswith("note: up "))
    assert note.startswith("note: up ") and ", from the capture's cameras: " in note, note
    assert main(["info", str(ply), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert _angle(info["up_known"], true_up) < 1.0 and info["up_known_source"].startswith("the capture's cameras")
    (tmp_path / "model" / "cameras.json").rename(tmp_path / "model" / "other.json")
    b = analyze_for_animation(load_for_animation(ply))
    assert _angle(b.up, true_up) > 20.0  # the file's axes alone cannot give an odd direction
    sideways = rots[:, :, [1, 0, 2]] * np.array([-1.0, 1.0, 1.0])
    (tmp_path / "b").mkdir()
    ply2 = _write_inria_output(tmp_path / "b", turned, sideways, pos)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        s2 = load_for_animation(ply2)
    assert s2.up_hint is None and any("not used for the up axis" in str(w.message) for w in caught)


def test_a_real_trainer_cameras_json():
    """The trainer's cameras.json of a real hand-held capture (a plush toy on a table, 97 cameras over about 286
    degrees; tests/data, MIT): read, held level (roll a few degrees), and the answer turns with the cameras (any
    rotation of the world turns it the same way). It is the table's normal (the scene analysis finds the table on
    that capture's own SfM points 2.6 degrees from it: docs/captures.md), not the normal of the orbit through the
    camera centres (23 degrees off: the photographer's height varies) nor the cameras' mean image up (19 degrees
    off: it leans toward the toy they look down at)."""
    from physskin_gs.io.cameras import read_camera_rotations
    from physskin_gs.scene import quat_to_rotmat

    path = ROOT / "tests" / "data" / "snowmiku_plush_cameras.json"
    rots = read_camera_rotations(path)
    assert rots.shape == (97, 3, 3)
    est = camera_up(rots)
    assert est.up is not None and est.num_cameras == 97 and est.roll_deg < 5.0, est.reason
    centres = np.array([c["position"] for c in json.loads(path.read_text())])
    _, _, vt = np.linalg.svd(centres - centres.mean(0))
    # neither naive cue: the orbit is not level (23 degrees) and the mean image up leans toward the toy (19)
    assert min(_angle(vt[2], est.up), _angle(-vt[2], est.up)) > 15.0
    assert _angle(-rots[:, :, 1].mean(0), est.up) > 15.0
    Q = quat_to_rotmat(torch.nn.functional.normalize(torch.tensor([[0.3, -0.5, 0.7, 0.2]]), dim=1))[0].double().numpy()
    turned = camera_up(np.einsum("ij,cjk->cik", Q, rots))
    assert _angle(turned.up, Q @ est.up) < 1e-3  # (Q from a float32 quaternion)


def test_cameras_json_is_found_where_the_trainer_writes_it_and_bad_ones_are_named(tmp_path):
    from physskin_gs.io.cameras import find_cameras_json, read_camera_rotations
    from physskin_gs.io.ply_header import SceneFormatError

    ply = tmp_path / "m" / "point_cloud" / "iteration_30000" / "point_cloud.ply"
    ply.parent.mkdir(parents=True)
    ply.write_bytes(b"")
    assert find_cameras_json(ply) is None
    (tmp_path / "m" / "cameras.json").write_text("[]")
    assert find_cameras_json(ply) == str(tmp_path / "m" / "cameras.json")
    (ply.parent / "cameras.json").write_text("[]")  # the trainer's own place wins over one beside the PLY
    assert find_cameras_json(ply) == str(tmp_path / "m" / "cameras.json")
    other = tmp_path / "x" / "scene.ply"
    other.parent.mkdir()
    (other.parent / "cameras.json").write_text("[]")
    assert find_cameras_json(other) == str(other.parent / "cameras.json")
    for text, msg in (("[]", "non-empty list"), ("{", "not a readable cameras.json"),
                      ('[{"rotation": [[1, 0], [0, 1]]}]', "camera 0 has no 3 x 3 'rotation'"),
                      ('[{"id": 0}]', "camera 0 has no 3 x 3 'rotation'")):
        (other.parent / "cameras.json").write_text(text)
        with pytest.raises(SceneFormatError, match=msg):
            read_camera_rotations(other.parent / "cameras.json")
