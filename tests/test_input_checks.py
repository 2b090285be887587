"""Careless inputs give one clear line, not a traceback or a silent guess:

1. ``skin --points``: every kind of bad ``.npy`` (an ``.npz`` archive, values outside float32, complex, object,
   pickled, bool, structured, empty, 1-D, not NumPy at all, ...) is ``error: PATH: <reason>`` with exit 2, before
   the skinning field is built.
2. ``info`` / the load warnings of every command judge Gaussian scales relative to the scene's robust extent: a
   valid capture scaled uniformly by 1e6 or 1e-6 gets exactly the warnings of the unscaled one, while scales stored
   already exponentiated and absurdly tiny or huge Gaussians still warn at every scale.
3. ``--select ''`` (an explicitly empty value) is an error listing the accepted values; None keeps meaning "all".

Synthetic scenes of a few hundred Gaussians throughout; the real captures of ``../shared/data/scenes`` are checked
too when that folder exists (skipped with the reason otherwise).
"""

from __future__ import annotations

import json
import math
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from physskin_gs.cli import main
from physskin_gs.errors import OptionError
from physskin_gs.scene import C0, GaussianScene

#: the shared test data, as conftest finds it (``PHYSSKIN_SHARED_DATA`` overrides)
SHARED_DATA = Path(os.environ.get("PHYSSKIN_SHARED_DATA",
                                  Path(__file__).resolve().parents[2] / "shared" / "data")).resolve()


def _run(capsys, argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def _single_error(err: str) -> str:
    """The one line of stderr, which must be an ``error:`` line."""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    return lines[0]


def _scene(n: int = 300, seed: int = 0, log_scale_mean: float = -5.0) -> GaussianScene:
    """A clean capture-like blob: centres in a 1 x 0.6 x 0.4 box, log-scales N(mean, 0.6) per axis with the third
    axis 4 lower (flat discs, as trained captures have), opacity logits uniform in [-1, 6], SH degree 0."""
    g = torch.Generator().manual_seed(seed)
    means = (torch.rand(n, 3, generator=g) - 0.5) * torch.tensor([1.0, 0.6, 0.4])
    return GaussianScene(
        means=means.float(),
        quats=torch.tensor([[1.0, 0.0, 0.0, 0.0]]).repeat(n, 1),
        log_scales=(log_scale_mean + 0.6 * torch.randn(n, 3, generator=g)
                    - torch.tensor([0.0, 0.0, 4.0])).float(),
        opacity_logits=(torch.rand(n, generator=g) * 7.0 - 1.0).float(),
        sh_dc=((torch.rand(n, 3, generator=g) - 0.5) / C0).float(),
        sh_rest=torch.zeros(n, 0, 3),
        source=None,
        format="synthetic",
    )


def _scaled(scene: GaussianScene, s: float) -> GaussianScene:
    """The same capture in other units: means times s, log-scales plus log s (float64 arithmetic, then float32)."""
    return GaussianScene(**{**scene.__dict__,
                            "means": (scene.means.double() * s).float(),
                            "log_scales": (scene.log_scales.double() + math.log(s)).float()})


def _save(scene: GaussianScene, path: Path) -> Path:
    from physskin_gs.io import save_scene

    save_scene(scene, path)
    return path


# ==================================================================================== 1. skin --points
@pytest.fixture(scope="module")
def blob(tmp_path_factory) -> Path:
    return _save(_scene(300), tmp_path_factory.mktemp("blob") / "blob.ply")


def _structured():
    a = np.zeros(4, dtype=[("x", "<f4"), ("y", "<f4"), ("z", "<f4")])
    a["x"] = np.arange(4)
    return a


def _write_npz(p):
    np.savez(p, pts=np.zeros((4, 3)))
    return p


# (file name, writer of the file, expected reason after "error: PATH: ")
BAD_POINTS = [
    ("pts.npz", _write_npz, "a .npz archive (zip), not a .npy array; --points needs one (N, 3) array of real "
                            "numbers saved with numpy.save"),
    ("big.npy", lambda p: np.save(p, np.array([[0.0, 0.0, 0.0], [1e300, 0.0, 0.0]])),
     "1 query points have a coordinate beyond the float32 range (|x| > 3.403e+38 scene units; first: row 1 = "
     "[1e+300, 0, 0])"),
    ("neg.npy", lambda p: np.save(p, np.array([[0.1, -1e39, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, -1e39]])),
     "2 query points have a coordinate beyond the float32 range (|x| > 3.403e+38 scene units; first: row 0 = "
     "[0.1, -1e+39, 0])"),
    ("complex.npy", lambda p: np.save(p, np.zeros((4, 3), dtype=np.complex128) + 1j),
     "complex values (complex128); --points needs one (N, 3) array of real numbers saved with numpy.save"),
    ("object.npy", lambda p: np.save(p, np.array([[1, 2, 3], [4, 5, 6]], dtype=object), allow_pickle=True),
     "an array of Python objects (dtype object; such data is never loaded)"),
    ("pickled.npy", lambda p: p.write_bytes(pickle.dumps([[0.0, 0.0, 0.0]])),
     "serialised Python objects (never loaded); --points needs"),
    ("bool.npy", lambda p: np.save(p, np.ones((4, 3), dtype=bool)), "a boolean array; --points needs"),
    ("struct.npy", lambda p: np.save(p, _structured()),
     "a structured array (fields x, y, z); --points needs one (N, 3) array of real numbers saved with numpy.save, "
     "e.g. numpy.stack([a['x'], a['y'], a['z']], axis=1)"),
    ("strings.npy", lambda p: np.save(p, np.array([["1", "2", "3"]])), "dtype <U1 is not a real number type"),
    ("dates.npy", lambda p: np.save(p, np.zeros((2, 3), dtype="datetime64[s]")),
     "dtype datetime64[s] is not a real number type"),
    ("zero_rows.npy", lambda p: np.save(p, np.zeros((0, 3))), "no query points (shape (0, 3)); --points needs"),
    ("one_d.npy", lambda p: np.save(p, np.array([0.1, 0.2, 0.3])),
     "a 1-D array of 3 values; --points needs one (N, 3) array of real numbers saved with numpy.save (one point "
     "is shape (1, 3): numpy.save(path, p.reshape(1, 3)))"),
    ("two_cols.npy", lambda p: np.save(p, np.zeros((5, 2))), "shape (5, 2); --points needs"),
    ("scalar.npy", lambda p: np.save(p, np.float64(1.0)), "shape (); --points needs"),
    ("text.npy", lambda p: p.write_text("0 0 0\n1 1 1\n"), "not a .npy file (no NumPy header); --points needs"),
    ("empty.npy", lambda p: p.write_bytes(b""), "empty file; --points needs"),
    ("truncated.npy", lambda p: (np.save(p, np.zeros((10, 3))), p.write_bytes(p.read_bytes()[:-20])),
     "truncated or corrupt .npy file (Failed to read all data for array. Expected (10, 3) = 30 elements, could "
     "only read 27 elements."),
    ("nan.npy", lambda p: np.save(p, np.array([[0.0, 0.0, 0.0], [0.0, np.nan, 0.0]])),
     "1 query points are not finite (NaN or Inf; first: row 1 = [0, nan, 0])"),
    ("far.npy", lambda p: np.save(p, np.array([[0.0, 0.0, 0.0], [0.0, 0.0, 1e30]])),
     "1 query points lie more than 1e+18 object scales ("),
]


@pytest.mark.parametrize("name, write, reason", BAD_POINTS, ids=[b[0] for b in BAD_POINTS])
def test_bad_points_file_is_one_line_before_the_field_is_built(capsys, blob, tmp_path, monkeypatch, name, write,
                                                                reason):
    import physskin_gs.cli.skin as skin

    def no_field(*a, **k):
        raise AssertionError("the skinning field was built before the points file was checked")

    monkeypatch.setattr(skin, "field_for_object", no_field)
    pts = tmp_path / name
    write(pts)
    out = tmp_path / "w.npz"
    code, stdout, err = _run(capsys, ["skin", blob, "-o", out, "--skinning", "rbf", "--points", pts])
    assert code == 2
    line = _single_error(err)
    assert line.startswith(f"error: {pts}: {reason}"), line
    assert stdout == "" and not out.exists()


def test_far_points_message_gives_the_object_scale(capsys, blob, tmp_path):
    pts = tmp_path / "far.npy"
    np.save(pts, np.array([[0.0, 0.0, 1e30]]))
    code, _, err = _run(capsys, ["skin", blob, "-o", tmp_path / "w.npz", "--skinning", "rbf", "--points", pts])
    line = _single_error(err)
    import re

    m = re.search(r"object scales \(([0-9.e+-]+) scene units each\)", line)
    assert code == 2 and m, line
    assert 0.4 < float(m.group(1)) < 0.6  # half the blob's 1-unit length: centres normalised into about [-1, 1]
    assert line.endswith("where the float32 field evaluation overflows (first: row 0 = [0, 0, 1e+30])")


def test_points_far_outside_the_object_are_named(capsys, blob, tmp_path):
    """Query points well outside the object get weights all the same (extrapolated) and one note saying how many;
    points on the object none."""
    pts = tmp_path / "q.npy"
    np.save(pts, np.array([[0.0, 0.0, 0.0], [0.2, 0.0, 0.0], [0.0, 0.0, 5.0]]))
    code, _, err = _run(capsys, ["skin", blob, "-o", tmp_path / "w.npz", "--skinning", "rbf", "--points", pts])
    assert code == 0
    assert "1 of 3 query points lie outside the object's box" in err and "row 2 = [0, 0, 5]" in err
    np.save(pts, np.array([[0.0, 0.0, 0.0], [0.2, 0.0, 0.0]]))
    code, _, err = _run(capsys, ["skin", blob, "-o", tmp_path / "w2.npz", "--skinning", "rbf", "--points", pts])
    assert code == 0 and "outside the object" not in err


def test_good_points_of_any_real_dtype_give_the_same_weights(capsys, blob, tmp_path):
    """Integer, float16, float32 and float64 arrays of the same points are accepted and give identical rows."""
    grid = np.array([[0, 0, 0], [0, 0, 0], [1, 0, 0], [-1, 0, 0]])  # inside, and two points off the blob's ends
    results = {}
    for dt in (np.int64, np.uint8, np.float16, np.float32, np.float64):
        arr = np.abs(grid).astype(dt) if dt is np.uint8 else grid.astype(dt)
        p = tmp_path / f"pts_{np.dtype(dt).name}.npy"
        np.save(p, arr)
        out = tmp_path / f"w_{np.dtype(dt).name}.npz"
        code, stdout, err = _run(capsys, ["skin", blob, "-o", out, "--skinning", "rbf", "--points", p])
        assert code == 0, err
        assert "4 query points, H = 17 handles" in stdout
        z = np.load(out, allow_pickle=False)
        assert z["weights"].shape == (4, 17) and z["valid"].all()
        results[np.dtype(dt).name] = z["weights"]
    ref = results["float64"]
    assert np.isfinite(ref).all() and np.all(ref[:, -1] == 1.0)
    np.testing.assert_array_equal(ref[0], ref[1])  # the same point twice: the same row
    for name in ("int64", "float16", "float32"):
        np.testing.assert_array_equal(results[name], ref)
    np.testing.assert_array_equal(results["uint8"][:3], ref[:3])  # |x|: rows 0-2 are the same points


# ==================================================================================== 2. scales vs extent
SCALES = (1.0, 1e6, 1e-6)


def _warnings(scene):
    from physskin_gs.cli._common import scene_load_warnings
    from physskin_gs.io import validate

    rep = validate(scene)
    return rep, scene_load_warnings(scene)


def test_clean_capture_warns_nothing_at_any_scale():
    base = _scene(400, seed=1)
    reps = []
    for s in SCALES:
        rep, load = _warnings(_scaled(base, s))
        assert rep["warnings"] == [] and load == [], (s, rep["warnings"], load)
        assert not rep["scales_look_exponentiated"]
        assert rep["log_rel_scale_below_min"] == 0 and rep["log_rel_scale_above_max"] == 0
        reps.append(rep)
    # the extent scales with the scene (the opacity-weighted 1-99 % box's longest side, about 0.98 of the 1-unit x)
    assert 0.9 < reps[0]["extent"] < 1.0
    for s, rep in zip(SCALES, reps):
        assert rep["extent"] == pytest.approx(s * reps[0]["extent"], rel=1e-5)
    # the raw counts still say what the stored numbers are (not warned about)
    for s, rep in zip(SCALES, reps):
        raw = _scaled(base, s).log_scales
        assert rep["log_scale_below_min"] == int((raw < -20).any(dim=1).sum())
        assert rep["log_scale_above_max"] == int((raw > 5).any(dim=1).sum())
    assert reps[0]["log_scale_below_min"] == reps[0]["log_scale_above_max"] == 0
    assert reps[1]["log_scale_above_max"] == 400  # at 1e6 every row holds about -5 + 13.8 > 5 on some axis
    assert reps[2]["log_scale_below_min"] > 300  # at 1e-6 the flat axes (about -9 - 13.8) fall below -20


def test_the_reported_old_false_alarms_are_gone():
    """The issue: a valid capture scaled by 1e6 was 'already exponentiated', by 1e-6 'log-scale below -20'."""
    base = _scene(300, seed=2)
    big, small = _scaled(base, 1e6), _scaled(base, 1e-6)
    assert bool((big.log_scales > 0).all())  # every stored value positive: what used to trigger the warning
    assert float((small.log_scales < -20).any(dim=1).float().mean()) > 0.9  # rows below -20: used to be warned
    for sc in (big, small):
        rep, load = _warnings(sc)
        assert rep["warnings"] == [] and load == []


@pytest.mark.parametrize("extent", [1e-6, 1e-3, 1.0, 100.0, 1e4, 1e6])
def test_scales_stored_exponentiated_warn_at_every_extent(extent):
    base = _scene(300, seed=3)
    wrong = GaussianScene(**{**base.__dict__, "means": base.means * extent,
                             "log_scales": torch.exp(base.log_scales.double()).float() * extent})
    rep = _warnings(wrong)[0]
    assert rep["scales_look_exponentiated"]
    [msg] = [w for w in rep["warnings"] if "already exponentiated" in w]
    assert msg.endswith(": the scales look already exponentiated, but are treated as log-scales")
    if extent in (1e-6, 1e-3, 1.0, 1e4, 1e6):  # exp(linear size) >= 1 (or huge) is wider than these extents
        assert msg.startswith("every Gaussian, read as log-scales, is wider than the scene extent")
    else:  # 100: exp(v) ~ 3 units is no wider than the extent; the linear reading fits a typical size better
        import re

        m = re.match(r"every scale_\* is positive and, read as linear sizes, the median Gaussian is ([0-9.e+-]+) of "
                     r"the scene extent, against ([0-9.e+-]+) read as log-scales", msg)
        assert m, msg
        med_std = float(torch.exp(base.log_scales.max(dim=1).values.double()).median())  # in extents of about 1
        unit_extent = rep["extent"] / 100.0  # the extent of the unscaled blob
        assert float(m.group(1)) == pytest.approx(med_std / unit_extent, rel=0.02)
        assert 0.02 < float(m.group(2)) < 0.05
    # the same scene stored correctly is clean at that extent
    right = GaussianScene(**{**base.__dict__, "means": base.means * extent,
                             "log_scales": base.log_scales + math.log(extent)})
    assert _warnings(right)[0]["warnings"] == []


def test_exponentiated_message_survives_overflow():
    """Linear sizes of ~1e4 scene units (a 1e6-unit scene) read as log-scales overflow exp; one small Gaussian keeps
    the scene out of the 'every Gaussian wider' rule, so the comparison message is written."""
    base = _scene(300, seed=3)
    ls = torch.exp(base.log_scales.double()).float() * 1e6
    ls[0] = 1.0
    wrong = GaussianScene(**{**base.__dict__, "means": base.means * 1e6, "log_scales": ls})
    rep = _warnings(wrong)[0]
    assert rep["scales_look_exponentiated"]
    [msg] = [w for w in rep["warnings"] if "already exponentiated" in w]
    assert msg.startswith("every scale_* is positive and, read as linear sizes, the median Gaussian is 0.0096 of "
                          "the scene extent, against e^94")  # e^(median linear size ~9.4e3 - log extent)
    assert msg.endswith(" read as log-scales: the scales look already exponentiated, but are treated as "
                        "log-scales")


def test_every_gaussian_wider_than_the_scene_warns():
    base = _scene(200, seed=4, log_scale_mean=0.5)  # std e^0.5 ~ 1.6 extents on average...
    base.log_scales[:, 0] = 0.1  # ...and every Gaussian at least e^0.1 = 1.1 extents along x
    for s in SCALES:
        rep = _warnings(_scaled(base, s))[0]
        assert rep["scales_look_exponentiated"]
        assert rep["warnings"][-1] == ("every Gaussian, read as log-scales, is wider than the scene extent: the "
                                       "scales look already exponentiated, but are treated as log-scales")


def test_tiny_and_huge_gaussians_are_judged_against_the_extent():
    base = _scene(300, seed=5)
    base.log_scales[:7, 2] = -25.0  # 7 needles of e^-25 (extent ~1): below 2e-9 of the extent
    base.log_scales[7:10] = 6.0  # 3 blobs e^6 ~ 400 times the extent
    base.log_scales[10:14] = -20.0  # placeholder rows of exported frames: invisible, never judged
    base.opacity_logits[10:14] = -20.0
    expect = ["7 Gaussians with an axis below 2.1e-09 of the scene's extent (log(scale / extent) < -20; kept)",
              "3 Gaussians with an axis above 148 times the scene's extent (log(scale / extent) > 5; kept)"]
    for s in SCALES:
        rep = _warnings(_scaled(base, s))[0]
        assert rep["log_rel_scale_below_min"] == 7 and rep["log_rel_scale_above_max"] == 3
        assert rep["warnings"] == expect, s
        assert not rep["scales_look_exponentiated"]


def test_info_gives_identical_warnings_for_scaled_files(capsys, tmp_path):
    base = _scene(300, seed=6)
    base.log_scales[:5, 1] = -24.0
    infos = []
    for s in SCALES:
        path = _save(_scaled(base, s), tmp_path / f"scene_{s:g}.ply")
        code, out, err = _run(capsys, ["info", path, "--json"])
        assert code == 0, err
        infos.append(json.loads(out))
    assert infos[0]["warnings"] == [
        "5 Gaussians with an axis below 2.1e-09 of the scene's extent (log(scale / extent) < -20; kept)"]
    assert infos[1]["warnings"] == infos[0]["warnings"] and infos[2]["warnings"] == infos[0]["warnings"]
    assert not any(i["scales_look_exponentiated"] for i in infos)
    assert infos[1]["extent"] == pytest.approx(1e6 * infos[0]["extent"], rel=1e-5)
    # text mode: the same single warning line
    code, out, _ = _run(capsys, ["info", tmp_path / "scene_1e+06.ply"])
    assert code == 0 and [ln for ln in out.splitlines() if ln.startswith("warning:")] == [
        "warning:       5 Gaussians with an axis below 2.1e-09 of the scene's extent (log(scale / extent) < -20; "
        "kept)"]


def test_extent_of_degenerate_scenes_is_zero_and_judges_nothing():
    from physskin_gs.io import validate
    from physskin_gs.io.validate import robust_extent

    one = _scene(1, seed=7)
    one.log_scales[:] = -30.0
    assert robust_extent(one) == 0.0
    rep = validate(one)
    assert rep["extent"] == 0.0 and rep["warnings"] == [] and rep["log_scale_below_min"] == 1
    same = _scene(10, seed=7)
    same.means[:] = torch.tensor([1.0, 2.0, 3.0])
    assert robust_extent(same) == 0.0
    nan = _scene(50, seed=8)
    nan.means[:48] = float("nan")  # two finite centres left
    assert robust_extent(nan) > 0.0 and math.isfinite(robust_extent(nan))


SCENES_DIR = SHARED_DATA / "scenes"
REAL_CAPTURES = sorted(SCENES_DIR.glob("*.ply")) if SCENES_DIR.is_dir() else []


@pytest.mark.skipif(not REAL_CAPTURES, reason=f"no real captures at {SCENES_DIR} (shared test data absent; set "
                                              "PHYSSKIN_SHARED_DATA)")
@pytest.mark.parametrize("path", REAL_CAPTURES, ids=[p.name for p in REAL_CAPTURES])
def test_real_capture_warnings_do_not_depend_on_units(path):
    import warnings

    from physskin_gs.io import load_scene

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scene = load_scene(path)
    results = [_warnings(scene if s == 1.0 else _scaled(scene, s)) for s in SCALES]
    (rep1, load1) = results[0]
    for s, (rep, load) in zip(SCALES[1:], results[1:]):
        assert rep["warnings"] == rep1["warnings"], s
        assert load == load1, s
        assert rep["scales_look_exponentiated"] == rep1["scales_look_exponentiated"] is False
        assert rep["log_rel_scale_below_min"] == rep1["log_rel_scale_below_min"]
        assert rep["extent"] == pytest.approx(s * rep1["extent"], rel=1e-5)
    assert 1.0 < rep1["extent"] < 10.0  # the Relightable Dressing captures: people of about 2-5 units
    # the same capture stored with exponentiated scales is caught
    wrong = GaussianScene(**{**scene.__dict__, "log_scales": torch.exp(scene.log_scales)})
    assert _warnings(wrong)[0]["scales_look_exponentiated"]


# ==================================================================================== 3. --select ''
@pytest.mark.parametrize("value", ["", "  ", "\t"])
def test_empty_select_value_is_an_error(value):
    from physskin_gs.pipeline import parse_selection, parse_selection_spec

    with pytest.raises(OptionError) as exc:
        parse_selection_spec(value)
    assert str(exc.value) == (f"--select {value!r}: empty value; use auto (the objects the scene analysis finds), "
                              "largest (the heaviest of them), all (every finite row), a box 'xmin,ymin,zmin,xmax,ymax,zmax' (scene units) or a "
                              "rule like 'opacity>0.1'")
    with pytest.raises(OptionError, match="empty value"):
        parse_selection(value, _scene(50))


def test_none_still_means_every_finite_row():
    from physskin_gs.pipeline import parse_selection, parse_selection_spec

    assert parse_selection_spec(None) == ("all", None)
    assert parse_selection_spec(" ALL ") == ("all", None)
    sc = _scene(50)
    sc.means[3, 1] = float("nan")
    mask = parse_selection(None, sc)
    assert int(mask.sum()) == 49 and not bool(mask[3])


def test_empty_select_on_the_command_line_fails_before_loading(capsys, tmp_path):
    garbage = tmp_path / "garbage.ply"
    garbage.write_bytes(b"not a splat at all\n")
    code, _, err = _run(capsys, ["animate", garbage, "--headless", "--export", tmp_path / "seq", "--select", ""])
    assert code == 2
    line = [ln for ln in err.strip().splitlines() if ln.startswith("error: ")][-1]
    assert line == "error: --select: empty value; give a value or leave the option out"  # the rule for every option
    assert "garbage" not in err and not (tmp_path / "seq").exists()


def test_empty_select_in_the_api_is_an_error_before_any_work():
    from physskin_gs.pipeline import AnimationConfig, prepare_animation

    with pytest.raises(OptionError, match=r"--select '': empty value"):
        prepare_animation(_scene(300), AnimationConfig(select="", up="z", skinning="rbf"))


def test_a_one_value_option_given_twice_is_refused(capsys, tmp_path):
    """``--pin`` takes one region: given twice it is refused before any work (argparse kept the last one silently,
    so ``--pin below:0.1 --pin below:0.2`` pinned only the second); once, it is taken."""
    spot = Path(__file__).resolve().parents[1] / "data" / "spot_mesh2splat_10k.splat"
    try:
        rc = main(["animate", str(spot), "--headless", "--png", str(tmp_path / "p"), "--pin", "below:0.1",
                   "--pin", "below:0.2"])
    except SystemExit as e:
        rc = e.code
    assert rc == 2
    assert "--pin given twice ('below:0.1' and 'below:0.2')" in capsys.readouterr().err
    assert not (tmp_path / "p").exists()
    from physskin_gs.cli import build_parser

    args = build_parser().parse_args(["animate", str(spot), "--pin", "below:0.1"])
    assert args.pin == "below:0.1"


def test_options_of_the_other_mode_are_named_or_refused(capsys, tmp_path):
    """The viewer refuses the headless run's outputs and ``--script`` before starting (they would be ignored);
    a headless run names the viewer's options it was given, and the viewer the headless video's."""
    from physskin_gs.cli import build_parser
    from physskin_gs.cli.animate import other_mode_notes

    spot = Path(__file__).resolve().parents[1] / "data" / "spot_mesh2splat_10k.splat"
    script = tmp_path / "m.json"
    script.write_text('{"drags": []}')
    for extra in (["--script", str(script)], ["--export", str(tmp_path / "e")]):
        assert main(["animate", str(spot), *extra]) == 2
        assert "for --headless runs only" in capsys.readouterr().err
    parse = build_parser().parse_args
    assert other_mode_notes(parse(["animate", str(spot), "--headless", "--png", "p"])) == []
    notes = other_mode_notes(parse(["animate", str(spot), "--headless", "--png", "p", "--host", "0.0.0.0",
                                    "--record-dir", "r"]))
    assert len(notes) == 1 and notes[0].startswith("--host, --record-dir: options of the browser viewer's")
    assert other_mode_notes(parse(["animate", str(spot)])) == []
    notes = other_mode_notes(parse(["animate", str(spot), "--frames", "30"]))
    assert len(notes) == 1 and notes[0].startswith("--frames: an option of a --headless run's")


def test_a_checkpoint_a_named_basis_does_not_read_is_named(capsys, blob, tmp_path):
    """``--checkpoint`` with a basis that reads none is named (it was ignored without a word); ``--fit-seconds``
    is not (the per-object fit is also the fallback of other bases)."""
    code, _, err = _run(capsys, ["skin", blob, "-o", tmp_path / "w.npz", "--skinning", "rbf", "--checkpoint",
                                 tmp_path / "none.safetensors", "--fit-seconds", "3"])
    assert code == 0 and "note: --checkpoint: not used by --skinning rbf" in err and "--fit-seconds" not in err
    code, _, err = _run(capsys, ["skin", blob, "-o", tmp_path / "w2.npz", "--skinning", "rbf"])
    assert code == 0 and "not used by" not in err
