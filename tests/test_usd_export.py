"""OpenUSD export (physskin_gs.io.usd): schema conventions read back with pxr directly, static and animated
round trips, atomic/refusing writes. Skipped without usd-core (optional extra ``[usd]``)."""

from __future__ import annotations

import math
import os
import sys
from dataclasses import replace

import numpy as np
import pytest
import torch

pxr = pytest.importorskip("pxr", reason="usd-core (optional extra physskin_gs[usd]) is not installed")
from pxr import Gf, Sdf, Usd, UsdGeom, UsdVol, Vt  # noqa: E402

from physskin_gs.errors import OptionError  # noqa: E402
from physskin_gs.io.usd import ROW_INDEX_ATTR, UsdSequenceWriter, load_usd, require_pxr, save_usd  # noqa: E402
from physskin_gs.scene import GaussianScene, normalize_quats, quat_to_rotmat  # noqa: E402

LOGIT_HIGH = math.log((1 - 2.0 ** -24) / 2.0 ** -24)  # 16.6355...
LOG_TINY = math.log(np.finfo(np.float32).tiny)  # -87.3365...


def random_scene(n: int, k: int = 15, seed: int = 0) -> GaussianScene:
    g = torch.Generator().manual_seed(seed)
    return GaussianScene(
        means=torch.randn(n, 3, generator=g) * 2,
        quats=torch.randn(n, 4, generator=g) * 1.7,
        log_scales=torch.rand(n, 3, generator=g) * 6 - 7,
        opacity_logits=torch.rand(n, generator=g) * 12 - 6,
        sh_dc=torch.randn(n, 3, generator=g),
        sh_rest=torch.randn(n, k, 3, generator=g) * 0.3,
    )


def one_gaussian() -> GaussianScene:
    return GaussianScene(
        means=torch.tensor([[1.0, 2.0, 3.0]]),
        quats=torch.tensor([[0.5, 0.5, 0.5, 0.5]]) * 2,  # unnormalised wxyz
        log_scales=torch.full((1, 3), math.log(0.5)),
        opacity_logits=torch.zeros(1),
        sh_dc=torch.tensor([[0.25, -0.5, 1.0]]),
        sh_rest=torch.zeros(1, 0, 3),
    )


def splat(stage, name):
    gs = UsdVol.ParticleField3DGaussianSplat.Get(stage, f"/Splats/{name}")
    assert gs, f"/Splats/{name} missing"
    return gs


def assert_scene_close(got: GaussianScene, want: GaussianScene, logit_atol: float = 2e-4) -> None:
    assert got.num_gaussians == want.num_gaussians and got.sh_rest.shape == want.sh_rest.shape
    torch.testing.assert_close(got.means, want.means, rtol=0, atol=1e-6)
    torch.testing.assert_close(got.quats, normalize_quats(want.quats), rtol=0, atol=1e-6)
    torch.testing.assert_close(got.log_scales, want.log_scales, rtol=0, atol=1e-5)
    torch.testing.assert_close(got.opacity_logits, want.opacity_logits, rtol=0, atol=logit_atol)
    torch.testing.assert_close(got.sh_dc, want.sh_dc, rtol=0, atol=0)
    torch.testing.assert_close(got.sh_rest, want.sh_rest, rtol=0, atol=0)


# ------------------------------------------------------------------------------------------ conventions
def test_vt_quatf_numpy_layout_is_xyzw():
    """Gf.Quatf's constructor is (real, i, j, k) but Vt.QuatfArray's numpy layout is (i, j, k, real)."""
    arr = Vt.QuatfArray([Gf.Quatf(1.0, 2.0, 3.0, 4.0)])
    np.testing.assert_array_equal(np.asarray(arr), [[2.0, 3.0, 4.0, 1.0]])
    back = Vt.QuatfArray.FromNumpy(np.array([[2.0, 3.0, 4.0, 1.0]], np.float32))[0]
    assert back.GetReal() == 1.0 and tuple(back.GetImaginary()) == (2.0, 3.0, 4.0)


def test_hand_computed_conventions_read_with_pxr(tmp_path):
    path = save_usd(one_gaussian(), tmp_path / "one.usda")
    stage = Usd.Stage.Open(path)
    assert UsdGeom.GetStageUpAxis(stage) == "Y" and UsdGeom.GetStageMetersPerUnit(stage) == 1.0
    assert stage.GetDefaultPrim().GetPath() == Sdf.Path("/Splats")
    gs = splat(stage, "Gaussians")
    assert [tuple(v) for v in gs.GetPositionsAttr().Get()] == [(1.0, 2.0, 3.0)]
    scale = tuple(gs.GetScalesAttr().Get()[0])
    assert scale == pytest.approx((0.5, 0.5, 0.5), abs=1e-7)  # linear std-dev, not log
    assert gs.GetOpacitiesAttr().Get()[0] == pytest.approx(0.5, abs=1e-7)  # post-sigmoid
    q = gs.GetOrientationsAttr().Get()[0]
    assert isinstance(q, Gf.Quatf)
    assert q.GetReal() == pytest.approx(0.5, abs=1e-7)  # normalised, real part = 3DGS w
    assert tuple(q.GetImaginary()) == pytest.approx((0.5, 0.5, 0.5), abs=1e-7)
    assert gs.GetRadianceSphericalHarmonicsDegreeAttr().Get() == 0
    coeffs = gs.GetRadianceSphericalHarmonicsCoefficientsAttr().Get()
    assert len(coeffs) == 1 and tuple(coeffs[0]) == (0.25, -0.5, 1.0)  # coefficient 0 is f_dc verbatim
    ext = [tuple(v) for v in gs.GetExtentAttr().Get()]  # 3-sigma bounds: centre -/+ 3 * 0.5
    assert ext[0] == pytest.approx((-0.5, 0.5, 1.5), abs=1e-6) and ext[1] == pytest.approx((2.5, 3.5, 4.5), abs=1e-6)
    text = open(path).read()
    assert "quatf[] orientations = [(0.5, 0.5, 0.5, 0.5)]" in text


def test_sh_coefficients_grouped_by_particle_in_3dgs_order(tmp_path):
    """Per particle: f_dc, then sh_rest[0..K-1] (coefficient-major float3), i.e. INRIA f_rest[c*K + j] is
    coefficient j+1, channel c."""
    n, k = 2, 3
    sc = random_scene(n, k)
    sc = replace(sc, sh_dc=torch.arange(n * 3, dtype=torch.float32).reshape(n, 3),
                 sh_rest=100 + torch.arange(n * k * 3, dtype=torch.float32).reshape(n, k, 3))
    path = save_usd(sc, tmp_path / "sh.usdc")
    stage = Usd.Stage.Open(path)  # keep the stage alive while its prims are used
    gs = splat(stage, "Gaussians")
    assert gs.GetRadianceSphericalHarmonicsDegreeAttr().Get() == 1
    got = np.asarray(gs.GetRadianceSphericalHarmonicsCoefficientsAttr().Get())
    assert got.shape == (n * (k + 1), 3)
    for i in range(n):
        np.testing.assert_array_equal(got[i * 4], sc.sh_dc[i].numpy())
        f_rest = sc.sh_rest[i].numpy().T.reshape(-1)  # INRIA channel-major f_rest_0..8
        for j in range(k):
            for c in range(3):
                assert got[i * 4 + 1 + j, c] == f_rest[c * k + j]


# ------------------------------------------------------------------------------------------- static
@pytest.mark.parametrize("ext", [".usdc", ".usd", ".usda"])
def test_static_round_trip_sh3(tmp_path, ext):
    sc = random_scene(300, 15)
    path = save_usd(sc, tmp_path / f"scene{ext}", up_axis="Z", meters_per_unit=0.25)
    assert path == str((tmp_path / f"scene{ext}").resolve())
    head = open(path, "rb").read(8)
    assert head.startswith(b"#usda") if ext == ".usda" else head == b"PXR-USDC"
    stage = Usd.Stage.Open(path)
    assert UsdGeom.GetStageUpAxis(stage) == "Z" and UsdGeom.GetStageMetersPerUnit(stage) == 0.25
    back = load_usd(path)
    assert back.format == "openusd" and back.source == path and back.sh_degree == 3
    assert_scene_close(back, sc)
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp.usdc") or f.endswith(".tmp.usda")]


def test_round_trip_clamps_documented(tmp_path):
    sc = random_scene(4, 0)
    sc = replace(sc,
                 quats=torch.tensor([[0.0, 0, 0, 0], [0.0, 0, 3, 0], [1.0, 0, 0, 0], [0.0, 0, 0, 2]]),
                 log_scales=torch.tensor([[-100.0, 0, 1], [0, 0, 0], [0, 0, 0], [0, 0, 0]]),
                 opacity_logits=torch.tensor([30.0, -100.0, 0.0, 16.0]))
    back = load_usd(save_usd(sc, tmp_path / "c.usdc"))
    torch.testing.assert_close(back.quats, torch.tensor([[1.0, 0, 0, 0], [0, 0, 1, 0], [1, 0, 0, 0], [0, 0, 0, 1]]))
    assert back.log_scales[0, 0].item() == pytest.approx(LOG_TINY, abs=1e-3)
    torch.testing.assert_close(back.log_scales[0, 1:], torch.tensor([0.0, 1.0]))
    assert back.opacity_logits[0].item() == pytest.approx(LOGIT_HIGH, abs=1e-3)
    assert back.opacity_logits[1].item() == pytest.approx(LOG_TINY, abs=1e-3)
    assert back.opacity_logits[2].item() == pytest.approx(0.0, abs=1e-6)
    assert back.opacity_logits[3].item() == pytest.approx(16.0, abs=0.1)  # near saturation: float32 limited


def test_load_usd_reads_foreign_minimal_prim(tmp_path):
    """A prim from another tool: only positions + opacities; schema defaults fill the rest."""
    path = str(tmp_path / "foreign.usda")
    stage = Usd.Stage.CreateNew(path)
    gs = UsdVol.ParticleField3DGaussianSplat.Define(stage, "/g")
    gs.CreatePositionsAttr(Vt.Vec3fArray([(0, 0, 0), (1, 1, 1)]))
    gs.CreateOpacitiesAttr(Vt.FloatArray([0.5, 0.5, 0.9]))  # too long: truncated
    gs.CreateScalesAttr(Vt.Vec3fArray([(2, 2, 2)]))  # too short: ignored
    stage.Save()
    back = load_usd(path)
    assert back.num_gaussians == 2 and back.sh_degree == 0
    torch.testing.assert_close(back.opacity_logits, torch.zeros(2))
    torch.testing.assert_close(back.log_scales, torch.zeros(2, 3))
    torch.testing.assert_close(back.quats, torch.tensor([[1.0, 0, 0, 0]] * 2))
    torch.testing.assert_close(back.sh_dc, torch.zeros(2, 3))


# ----------------------------------------------------------------------------------------- sequence
def quat_mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Hamilton product of wxyz quaternions (broadcasting)."""
    aw, ax, ay, az = a.unbind(-1)
    bw, bx, by, bz = b.unbind(-1)
    return torch.stack([aw * bw - ax * bx - ay * by - az * bz, aw * bx + ax * bw + ay * bz - az * by,
                        aw * by - ax * bz + ay * bw + az * bx, aw * bz + ax * by - ay * bx + az * bw], -1)


def make_frames(rest: GaussianScene, moving: torch.Tensor, num: int):
    frames = []
    for k in range(1, num + 1):
        ang = 0.3 * k
        axis = torch.nn.functional.normalize(torch.tensor([1.0, k, 0.5]), dim=0)
        rq = torch.cat([torch.tensor([math.cos(ang / 2)]), math.sin(ang / 2) * axis])
        R = quat_to_rotmat(rq)
        means, quats = rest.means.clone(), rest.quats.clone()
        means[moving] = rest.means[moving] @ R.T + torch.tensor([0.1 * k, -0.2 * k, 0.05 * k * k])
        quats[moving] = quat_mul(rq, rest.quats[moving])
        log_scales = rest.log_scales.clone()
        log_scales[moving] += 0.01 * k
        sh_rest = rest.sh_rest.clone()
        sh_rest[moving] *= 1.0 + 0.1 * k
        frames.append(replace(rest, means=means, quats=quats, log_scales=log_scales, sh_rest=sh_rest))
    return frames


@pytest.mark.parametrize("ext", [".usd", ".usda"])
def test_sequence_static_and_time_sampled_prims(tmp_path, ext):
    n, fps = 500, 30.0
    rest = random_scene(n, 15, seed=1)
    moving = torch.rand(n, generator=torch.Generator().manual_seed(2)) < 0.4
    frames = make_frames(rest, moving, 3)
    with UsdSequenceWriter(tmp_path / f"anim{ext}", rest, moving, fps=fps) as w:
        for k, fr in enumerate(frames, 1):
            w.write_frame(k, fr)
    path = w.close()  # repeated close returns the path
    assert path == str((tmp_path / f"anim{ext}").resolve())

    stage = Usd.Stage.Open(path)
    assert stage.GetTimeCodesPerSecond() == fps and stage.GetFramesPerSecond() == fps
    assert stage.GetStartTimeCode() == 1 and stage.GetEndTimeCode() == 3
    static, mov = splat(stage, "Static"), splat(stage, "Moving")
    s_idx = np.asarray(static.GetPrim().GetAttribute(ROW_INDEX_ATTR).Get())
    m_idx = np.asarray(mov.GetPrim().GetAttribute(ROW_INDEX_ATTR).Get())
    np.testing.assert_array_equal(s_idx, np.flatnonzero(~moving.numpy()))
    np.testing.assert_array_equal(m_idx, np.flatnonzero(moving.numpy()))
    for attr in static.GetPrim().GetAttributes():
        assert attr.GetNumTimeSamples() == 0, attr.GetName()
    for get in ("GetPositionsAttr", "GetOrientationsAttr", "GetScalesAttr", "GetExtentAttr",
                "GetRadianceSphericalHarmonicsCoefficientsAttr"):
        assert getattr(mov, get)().GetNumTimeSamples() == 3, get
    assert mov.GetOpacitiesAttr().GetNumTimeSamples() == 0
    assert static.GetPrim().GetCustomData()["physskin_gs"]["role"] == "static"
    assert mov.GetPrim().GetCustomData()["physskin_gs"] == {"role": "moving", "totalRows": n}

    for k, fr in enumerate(frames, 1):
        # raw pxr values of the moving prim at time k are frame k's moving rows
        pos = np.asarray(mov.GetPositionsAttr().Get(k))
        np.testing.assert_allclose(pos, fr.means[moving].numpy(), rtol=0, atol=1e-6)
        ext = np.asarray(mov.GetExtentAttr().Get(k))
        r = 3 * fr.scales[moving].max(1).values[:, None].numpy()
        np.testing.assert_allclose(ext, [(pos - r).min(0), (pos + r).max(0)], rtol=1e-6, atol=1e-6)
        assert_scene_close(load_usd(path, time=k), fr)
    assert_scene_close(load_usd(path), rest)  # default values: the rest state


def test_sequence_sh_false_writes_sh_once(tmp_path):
    rest = random_scene(50, 3, seed=3)
    moving = torch.arange(50) % 2 == 0
    frames = make_frames(rest, moving, 2)
    w = UsdSequenceWriter(tmp_path / "a.usdc", rest, moving, fps=24, sh=False, up_axis="z")
    for k, fr in enumerate(frames, 1):
        w.write_frame(k, fr)
    path = w.close()
    stage = Usd.Stage.Open(path)
    assert UsdGeom.GetStageUpAxis(stage) == "Z"
    mov = splat(stage, "Moving")
    assert mov.GetRadianceSphericalHarmonicsCoefficientsAttr().GetNumTimeSamples() == 0
    assert mov.GetPositionsAttr().GetNumTimeSamples() == 2
    back = load_usd(path, time=2)
    torch.testing.assert_close(back.sh_rest, rest.sh_rest)  # unrotated rest SH
    torch.testing.assert_close(back.means, frames[1].means, rtol=0, atol=1e-6)


def test_sequence_all_static_or_all_moving(tmp_path):
    rest = random_scene(20, 0, seed=4)
    for name, moving in (("none", torch.zeros(20, dtype=torch.bool)), ("all", torch.ones(20, dtype=torch.bool))):
        frames = make_frames(rest, moving, 2)
        w = UsdSequenceWriter(tmp_path / f"{name}.usdc", rest, moving, fps=12)
        for k, fr in enumerate(frames, 1):
            w.write_frame(k, fr)
        path = w.close()
        stage = Usd.Stage.Open(path)
        prims = [p.GetName() for p in stage.Traverse() if p.IsA(UsdVol.ParticleField3DGaussianSplat)]
        assert prims == (["Static"] if name == "none" else ["Moving"])
        assert_scene_close(load_usd(path, time=2), frames[1])


def test_write_rows_matches_write_frame(tmp_path):
    """The moving-rows-only entry point writes the same samples as whole scenes."""
    rest = random_scene(200, 8, seed=7)
    moving = torch.rand(200, generator=torch.Generator().manual_seed(8)) < 0.3
    frames = make_frames(rest, moving, 2)
    w = UsdSequenceWriter(tmp_path / "rows.usdc", rest, moving, fps=25)
    for k, fr in enumerate(frames, 1):
        w.write_rows(k, {"means": fr.means[moving], "quats": fr.quats[moving].numpy(),
                         "log_scales": fr.log_scales[moving], "sh_rest": fr.sh_rest[moving]})
    with pytest.raises(OptionError, match="rows need 'log_scales'"):
        w.write_rows(3, {"means": frames[0].means[moving], "quats": frames[0].quats[moving]})
    with pytest.raises(OptionError, match="shape"):
        w.write_rows(3, {"means": frames[0].means, "quats": frames[0].quats, "log_scales": frames[0].log_scales,
                         "sh_rest": frames[0].sh_rest})
    path = w.close()
    for k, fr in enumerate(frames, 1):
        assert_scene_close(load_usd(path, time=k), fr)


@pytest.mark.parametrize("up, axis", [((0.0, -1.0, 0.0), "Y"), ((0.2, 0.3, 0.9), "Y"), ((0.0, 1.0, 0.0), "Z"),
                                      ((0.0, 0.0, 1.0), "Z"), ((0.0, 2.0, 0.0), "Y")])
def test_up_vector_becomes_root_rotation(tmp_path, up, axis):
    sc = random_scene(10, 0)
    path = save_usd(sc, tmp_path / "up.usda", up_axis=axis, up=up)
    stage = Usd.Stage.Open(path)
    root = UsdGeom.Xformable(stage.GetPrimAtPath("/Splats"))
    ops = root.GetOrderedXformOps()
    target = Gf.Vec3d(0, 1, 0) if axis == "Y" else Gf.Vec3d(0, 0, 1)
    u = Gf.Vec3d(*up).GetNormalized()
    if Gf.Dot(u, target) > 1 - 1e-9:
        assert ops == []  # already upright: no transform
    else:
        assert [op.GetOpType() for op in ops] == [UsdGeom.XformOp.TypeOrient]
    m = UsdGeom.Xformable(stage.GetPrimAtPath("/Splats/Gaussians")).ComputeLocalToWorldTransform(0)
    got = m.TransformDir(u)
    assert tuple(got) == pytest.approx(tuple(target), abs=1e-9)
    assert abs(m.ExtractRotationMatrix().GetDeterminant() - 1) < 1e-9  # a proper rotation, no mirror
    assert_scene_close(load_usd(path), sc)  # particle values stay in scene space
    with pytest.raises(OptionError, match="up must be a non-zero 3-vector"):
        save_usd(sc, tmp_path / "bad.usda", up=(0, 0, 0))


def test_crate_sequence_is_saved_every_frame(tmp_path):
    """Crate output flushes each frame into the (temporary) file, which is what bounds the memory."""
    rest = random_scene(2000, 0, seed=5)
    moving = torch.ones(2000, dtype=torch.bool)
    w = UsdSequenceWriter(tmp_path / "grow.usdc", rest, moving, fps=24)
    sizes = [os.path.getsize(w._tmp)]
    for k, fr in enumerate(make_frames(rest, moving, 3), 1):
        w.write_frame(k, fr)
        sizes.append(os.path.getsize(w._tmp))
    assert all(b - a >= 2000 * 40 for a, b in zip(sizes, sizes[1:]))  # 40 bytes per Gaussian per frame
    assert not os.path.exists(tmp_path / "grow.usdc")  # nothing at the destination before close
    w.close()
    assert os.path.exists(tmp_path / "grow.usdc") and not os.path.exists(w._tmp)


def test_write_frame_errors(tmp_path):
    rest = random_scene(30, 3, seed=6)
    moving = torch.arange(30) < 10
    good = make_frames(rest, moving, 2)
    w = UsdSequenceWriter(tmp_path / "e.usdc", rest, moving, fps=24)
    with pytest.raises(OptionError, match="frame must be an int >= 1"):
        w.write_frame(0, good[0])
    moved_static = replace(good[0], means=good[0].means + 1.0)
    with pytest.raises(OptionError, match="marked static moved .first: row 10"):
        w.write_frame(1, moved_static)
    logits = rest.opacity_logits.clone()
    logits[3] += 1
    changed_opacity = replace(good[0], opacity_logits=logits)
    with pytest.raises(OptionError, match="opacity of row 3"):
        w.write_frame(1, changed_opacity)
    too_few = good[0].subset(torch.arange(29))
    with pytest.raises(OptionError, match="29 Gaussians"):
        w.write_frame(1, too_few)
    w.write_frame(2, good[0])
    with pytest.raises(OptionError, match="frames must increase"):
        w.write_frame(2, good[1])
    w.abort()
    assert not os.path.exists(w._tmp) and not os.path.exists(tmp_path / "e.usdc")
    with pytest.raises(OptionError, match="aborted"):
        w.write_frame(3, good[1])


def test_exception_in_with_block_leaves_destination_untouched(tmp_path):
    dest = tmp_path / "keep.usdc"
    dest.write_bytes(b"old")
    rest = random_scene(10, 0)
    with pytest.raises(RuntimeError):
        with UsdSequenceWriter(dest, rest, torch.ones(10, dtype=torch.bool), fps=24) as w:
            w.write_frame(1, rest)
            raise RuntimeError("boom")
    assert dest.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["keep.usdc"]


# ------------------------------------------------------------------------------------------ refusals
def test_refuses_other_extensions(tmp_path):
    sc = random_scene(5, 0)
    with pytest.raises(OptionError, match=r"\.usd, \.usdc .* or \.usda"):
        save_usd(sc, tmp_path / "x.txt")
    with pytest.raises(OptionError, match="extension"):
        UsdSequenceWriter(tmp_path / "x.usdz", sc, torch.ones(5, dtype=torch.bool), fps=24)
    assert os.listdir(tmp_path) == []


def test_refuses_overwriting_source(tmp_path):
    src = tmp_path / "in.usdc"
    save_usd(random_scene(5, 0), src)
    before = src.read_bytes()
    sc = load_usd(src)
    assert sc.source == str(src.resolve())
    with pytest.raises(OptionError, match="refusing to overwrite the input file"):
        save_usd(sc, src)
    with pytest.raises(OptionError, match="refusing to overwrite the input file"):
        UsdSequenceWriter(str(src), sc, torch.zeros(5, dtype=torch.bool), fps=24)
    assert src.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["in.usdc"]


def test_bad_options(tmp_path):
    sc = random_scene(5, 0)
    with pytest.raises(OptionError, match="up_axis"):
        save_usd(sc, tmp_path / "a.usda", up_axis="X")
    with pytest.raises(OptionError, match="meters_per_unit"):
        save_usd(sc, tmp_path / "a.usda", meters_per_unit=0)
    with pytest.raises(OptionError, match="output folder does not exist"):
        save_usd(sc, tmp_path / "missing" / "a.usda")
    with pytest.raises(OptionError, match="fps"):
        UsdSequenceWriter(tmp_path / "a.usda", sc, torch.ones(5, dtype=torch.bool), fps=0)
    with pytest.raises(OptionError, match=r"\(5,\) bool mask"):
        UsdSequenceWriter(tmp_path / "a.usda", sc, torch.ones(4, dtype=torch.bool), fps=24)
    assert os.listdir(tmp_path) == []


def test_rewrite_seen_by_later_load_in_same_process(tmp_path):
    """A layer of the destination already open in this process is reloaded after the rename."""
    path = tmp_path / "r.usdc"
    save_usd(random_scene(5, 0, seed=1), path)
    held = Usd.Stage.Open(str(path))  # keeps the old layer in the registry
    second = random_scene(7, 0, seed=2)
    save_usd(second, path)
    assert load_usd(path).num_gaussians == 7
    assert len(splat(held, "Gaussians").GetPositionsAttr().Get()) == 7


def test_missing_pxr_message(monkeypatch, tmp_path):
    require_pxr()  # installed here: no error
    monkeypatch.setitem(sys.modules, "pxr", None)  # makes `from pxr import ...` raise ImportError
    with pytest.raises(OptionError, match="needs usd-core"):
        require_pxr()
    with pytest.raises(OptionError, match=r"OpenUSD export needs usd-core: pip install 'physskin_gs\[usd\]'"):
        save_usd(random_scene(3, 0), tmp_path / "a.usd")
    with pytest.raises(OptionError, match="needs usd-core"):
        load_usd(tmp_path / "a.usd")
    assert os.listdir(tmp_path) == []


def test_a_stages_units_carry_over_to_info_and_convert(tmp_path, capsys):
    """A stage in centimetres (metersPerUnit 0.01): ``info`` says so, and ``convert`` to glTF (metres by the glTF
    spec) scales it into metres, so the object is not 100x too large; ``--meters-per-unit`` still overrides.
    ``info`` names an animation's frames."""
    from pathlib import Path

    from physskin_gs.cli import main
    from physskin_gs.io.gltf import load_gltf

    spot = Path(__file__).resolve().parents[1] / "data" / "spot_mesh2splat_10k.splat"
    cm = tmp_path / "cm.usda"
    assert main(["convert", str(spot), str(cm), "--meters-per-unit", "0.01"]) == 0
    capsys.readouterr()
    assert main(["info", str(cm)]) == 0
    out = capsys.readouterr().out
    assert "0.01 m per unit" in out and "frames:" not in out
    src = load_usd(cm).means.numpy()
    glb = tmp_path / "cm.glb"
    assert main(["convert", str(cm), str(glb)]) == 0
    assert "units of 0.01 m" in capsys.readouterr().err
    ext = np.ptp(load_gltf(str(glb)).means.numpy(), axis=0)
    np.testing.assert_allclose(np.sort(ext), np.sort(0.01 * np.ptp(src, axis=0)), rtol=1e-5)
    assert main(["convert", str(cm), str(tmp_path / "m.glb"), "--meters-per-unit", "1"]) == 0
    ext1 = np.ptp(load_gltf(str(tmp_path / "m.glb")).means.numpy(), axis=0)
    np.testing.assert_allclose(np.sort(ext1), np.sort(np.ptp(src, axis=0)), rtol=1e-5)
    # an animation: info names its frames
    rest = random_scene(200, 3, seed=4)
    moving = torch.ones(200, dtype=torch.bool)
    with UsdSequenceWriter(tmp_path / "anim.usdc", rest, moving, fps=30.0) as w:
        for k, fr in enumerate(make_frames(rest, moving, 3), 1):
            w.write_frame(k, fr)
    assert main(["info", str(tmp_path / "anim.usdc")]) == 0
    assert "frames:        1-3" in capsys.readouterr().out


def test_transforms_added_in_a_dcc_tool_move_the_gaussians_read_back(tmp_path):
    """A fresh user moved our exported splats in a DCC tool (``xformOp:translate`` on /Splats) and read the file
    back: the positions came back unchanged, without a word. Now every transform but our own up rotation is applied:
    the untouched file reads back exactly; with a translation, a uniform scale or a rotation added, each Gaussian
    is where the stage shows it (the prim's local-to-world transform, undone by our orientation only), covariances
    follow (A Sigma A^T) and view-dependent colour turns with the rotation; a foreign stage's /World transform
    applies too; a mirror is refused."""
    from physskin_gs.errors import SceneFormatError
    from physskin_gs.sh import eval_sh

    sc = random_scene(40, k=8)
    path = save_usd(sc, tmp_path / "s.usda", up=(0.0, -1.0, 0.0))
    base = load_usd(path)
    assert_scene_close(base, sc)  # our own export: its only transform is the up rotation
    stage = Usd.Stage.Open(str(path))
    root = UsdGeom.Xformable(stage.GetPrimAtPath("/Splats"))
    root.AddTranslateOp().Set(Gf.Vec3d(10.0, 0.0, 0.0))
    root.AddRotateZOp().Set(30.0)
    root.AddScaleOp().Set(Gf.Vec3f(2.0, 2.0, 2.0))
    stage.GetRootLayer().Save()
    moved = load_usd(path)
    prim = stage.GetPrimAtPath("/Splats/Gaussians")
    M = np.array(UsdGeom.Xformable(prim).ComputeLocalToWorldTransform(Usd.TimeCode.Default()))  # row vectors
    O = np.array(UsdGeom.Xformable(stage.GetPrimAtPath("/Splats")).GetOrderedXformOps()[0].GetOpTransform(
        Usd.TimeCode.Default()))
    D = M @ np.linalg.inv(O)
    want = np.c_[sc.means.double().numpy(), np.ones(40)] @ D
    np.testing.assert_allclose(moved.means.double().numpy(), want[:, :3], atol=1e-4)
    A = torch.from_numpy(D[:3, :3].T)  # column vectors
    cov = A @ sc.covariances().double() @ A.T
    np.testing.assert_allclose(moved.covariances().double().numpy(), cov.numpy(), rtol=1e-4, atol=1e-9)
    R = A / 2.0  # the rotation part (uniform scale 2)
    d = torch.nn.functional.normalize(torch.randn(40, 3, dtype=torch.float64), dim=1)
    got = eval_sh(moved.sh.double(), (R @ d.T).T)  # seen from the turned direction ...
    np.testing.assert_allclose(got.numpy(), eval_sh(sc.sh.double(), d).numpy(), atol=1e-4)  # ... as before
    assert moved.up_hint == base.up_hint
    # a foreign stage: a /World transform (no orientation of ours) moves the Gaussians
    other = Usd.Stage.CreateNew(str(tmp_path / "f.usda"))
    UsdGeom.SetStageUpAxis(other, UsdGeom.Tokens.z)
    world = UsdGeom.Xform.Define(other, "/World")
    world.AddTranslateOp().Set(Gf.Vec3d(0.0, 0.0, 100.0))
    gs = UsdVol.ParticleField3DGaussianSplat.Define(other, "/World/G")
    gs.CreatePositionsAttr(Vt.Vec3fArray([Gf.Vec3f(1.0, 2.0, 3.0)]))
    other.SetDefaultPrim(world.GetPrim())
    other.GetRootLayer().Save()
    f = load_usd(tmp_path / "f.usda")
    np.testing.assert_allclose(f.means.numpy(), [[1.0, 2.0, 103.0]], atol=1e-5)
    world.AddScaleOp().Set(Gf.Vec3f(-1.0, 1.0, 1.0))
    other.GetRootLayer().Save()
    with pytest.raises(SceneFormatError, match="mirrors"):
        load_usd(tmp_path / "f.usda")
