"""Animated exports in every ``--export-format`` (issue #14) and the background frame writer (issue #13 item 4).

The scene is the licence-clean demo capture (``scripts/make_demo_capture.py``: the CC0 Spot splat on a floor disc
with floaters), so these tests run on a fresh clone: the cow moves, the floor and the floaters stay static.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from physskin_gs.cli import main
from physskin_gs.errors import OptionError, OutputError
from physskin_gs.io import load_scene, save_scene
from physskin_gs.io.sequence import SequenceExporter, _moving_first_order
from physskin_gs.scene import GaussianScene

ROOT = Path(__file__).resolve().parents[1]
FAST = ["--cubature", "64", "--newton-iters", "3", "--skinning", "rbf"]


def _random_scene(n: int, k: int = 3, seed: int = 0) -> GaussianScene:
    g = torch.Generator().manual_seed(seed)
    return GaussianScene(means=torch.randn(n, 3, generator=g), quats=torch.randn(n, 4, generator=g),
                         log_scales=torch.randn(n, 3, generator=g) - 3, opacity_logits=torch.randn(n, generator=g),
                         sh_dc=torch.randn(n, 3, generator=g), sh_rest=0.2 * torch.randn(n, k, 3, generator=g))


def _frame_rows(idx: torch.Tensor, frame: int, k: int) -> dict:
    g = torch.Generator().manual_seed(100 + frame)
    m = idx.numel()
    q = torch.randn(m, 4, generator=g)
    return {"index": idx, "means": torch.randn(m, 3, generator=g) + frame, "quats": q / q.norm(dim=1, keepdim=True),
            "log_scales": torch.randn(m, 3, generator=g) - 2, "sh_rest": torch.randn(m, k, 3, generator=g)}


def _with_rows(rest: GaussianScene, idx: torch.Tensor, rows: dict) -> GaussianScene:
    """The whole frame: ``rest`` with the moving rows ``idx`` replaced by ``rows`` (the reference for an exporter)."""
    full = replace(rest, means=rest.means.clone(), quats=rest.quats.clone(), log_scales=rest.log_scales.clone(),
                   sh_rest=rest.sh_rest.clone())
    full.means[idx], full.quats[idx], full.log_scales[idx], full.sh_rest[idx] = (
        rows["means"], rows["quats"], rows["log_scales"], rows["sh_rest"])
    return full


@pytest.fixture(scope="module")
def capture(tmp_path_factory) -> Path:
    spec = importlib.util.spec_from_file_location("make_demo_capture", ROOT / "scripts" / "make_demo_capture.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    scene, _ = mod.make_capture(rotate_seed=7, n_floor=3000, n_floaters=100)
    g = torch.Generator().manual_seed(3)
    scene = replace(scene, sh_rest=0.3 * torch.randn(scene.num_gaussians, 3, 3, generator=g))  # SH degree 1
    path = tmp_path_factory.mktemp("capture") / "capture.ply"
    save_scene(scene, str(path))
    return path


# ------------------------------------------------------------------------------------------------ the exporter
def test_ply_exporter_writes_each_frame_and_keeps_static_rows(tmp_path):
    rest = _random_scene(700, k=8)
    idx = torch.arange(100, 400)
    ex = SequenceExporter(tmp_path, "ply", rest, idx, fps=30.0)
    sent = {f: _frame_rows(idx, f, 8) for f in range(1, 6)}
    for f, rows in sent.items():
        ex.add(f, rows)
    summary = ex.close()
    assert summary["frames"] == 5 and summary["pattern"] == "frame%04d.ply"
    static = torch.ones(700, dtype=torch.bool)
    static[idx] = False
    for f, rows in sent.items():  # two alternating buffers: no frame may carry another frame's rows
        back = load_scene(tmp_path / f"frame{f:04d}.ply")
        assert torch.equal(back.means[idx], rows["means"]) and torch.equal(back.quats[idx], rows["quats"])
        assert torch.equal(back.log_scales[idx], rows["log_scales"]) and torch.equal(back.sh_rest[idx], rows["sh_rest"])
        for name in ("means", "quats", "log_scales", "opacity_logits", "sh_dc", "sh_rest"):
            assert torch.equal(getattr(back, name)[static], getattr(rest, name)[static]), (f, name)
        assert torch.equal(back.opacity_logits, rest.opacity_logits) and torch.equal(back.sh_dc, rest.sh_dc)
    assert summary["bytes"] == sum(p.stat().st_size for p in tmp_path.glob("frame*.ply"))


@pytest.mark.parametrize("fmt", ["ply", "compressed-ply", "usd"])
def test_exporter_with_no_moving_rows_writes_the_rest_scene(tmp_path, fmt):
    """A selection that moves nothing (M = 0) still exports: every frame is the rest scene."""
    if fmt == "usd":
        pytest.importorskip("pxr")
    rest = _random_scene(300, k=3)
    idx = torch.zeros(0, dtype=torch.long)
    ex = SequenceExporter(tmp_path, fmt, rest, idx, fps=10.0)
    for f in (1, 2):
        ex.add(f, _frame_rows(idx, f, 3))
    summary = ex.close()
    assert summary["frames"] == 2
    if fmt == "usd":
        assert len(list(tmp_path.glob("*.usd*"))) == 1
        return
    back = load_scene(tmp_path / (ex.pattern % 2))
    order = ex.row_order if ex.row_order is not None else np.arange(300)  # file row -> scene row
    tol = 0.0 if fmt == "ply" else 0.02 * float((rest.means.max(0).values - rest.means.min(0).values).max())
    assert back.num_gaussians == 300
    assert float((back.means - rest.means[torch.as_tensor(order)]).abs().max()) <= tol


def test_ply_exporter_matches_save_scene_bytes(tmp_path):
    """A frame is byte-identical to the full scene written by save_scene (same header, same layout)."""
    rest = _random_scene(300, k=3)
    idx = torch.tensor([0, 5, 17, 299])
    rows = _frame_rows(idx, 1, 3)
    ex = SequenceExporter(tmp_path / "seq", "ply", rest, idx, fps=10.0)
    ex.add(1, rows)
    ex.close()
    full = _with_rows(rest, idx, rows)
    save_scene(full, str(tmp_path / "full.ply"))
    assert (tmp_path / "seq" / "frame0001.ply").read_bytes() == (tmp_path / "full.ply").read_bytes()


def test_exporter_reports_a_failed_write_and_keeps_earlier_frames(tmp_path, monkeypatch):
    import physskin_gs.io.inria_ply as inria

    rest = _random_scene(200, k=0)
    idx = torch.arange(50)
    real = inria.write_atomic
    calls = []

    def flaky(path, parts, fsync=True):
        calls.append(path)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real(path, parts, fsync=fsync)

    monkeypatch.setattr(inria, "write_atomic", flaky)
    ex = SequenceExporter(tmp_path, "ply", rest, idx, fps=30.0)
    with pytest.raises(OutputError, match="frame 2.*No space left"):
        for f in range(1, 6):
            ex.add(f, _frame_rows(idx, f, 0))
        ex.close()
    ex.abort()
    assert (tmp_path / "frame0001.ply").is_file() and not (tmp_path / "frame0002.ply").exists()
    assert not list(tmp_path.glob(".*.tmp"))  # no temporary file left behind


def test_exporter_refuses_wrong_row_count_and_unknown_format(tmp_path):
    rest = _random_scene(100, k=0)
    with pytest.raises(OptionError, match="--export-format"):
        SequenceExporter(tmp_path, "splat", rest, torch.arange(10), fps=30.0)
    ex = SequenceExporter(tmp_path, "ply", rest, torch.arange(10), fps=30.0)
    with pytest.raises(OptionError, match="expected 10"):
        ex.add(1, _frame_rows(torch.arange(11), 1, 0))
    ex.close()


def test_compressed_exporter_order_keeps_moving_and_static_chunks_apart(tmp_path):
    from physskin_gs.io.compressed_ply import CHUNK_SIZE

    rest = _random_scene(2000, k=3)
    idx = torch.arange(300, 1300)  # 1000 moving rows
    order = _moving_first_order(rest.means.numpy(), idx.numpy())
    assert sorted(order.tolist()) == list(range(2000))
    moving = np.zeros(2000, dtype=bool)
    moving[idx.numpy()] = True
    chunks = moving[order][: (2000 // CHUNK_SIZE) * CHUNK_SIZE].reshape(-1, CHUNK_SIZE)
    mixed = [(c.any() and not c.all()) for c in chunks]
    assert sum(mixed) <= 1  # only the chunk where the moving rows end may hold both
    ex = SequenceExporter(tmp_path, "compressed-ply", rest, idx, fps=30.0)
    rows = _frame_rows(idx, 2, 3)
    ex.add(2, rows)
    s = ex.close()
    assert s["files"] == [str(tmp_path / "frame0002.compressed.ply")]
    back = load_scene(tmp_path / "frame0002.compressed.ply")
    full = rest.means.clone()
    full[idx] = rows["means"]
    err = (back.means - full[order]).abs()
    ext_moving = (rows["means"].max(0).values - rows["means"].min(0).values)
    assert float(err[: idx.numel()].max()) <= float(ext_moving.max()) / 1023 / 2 * 1.01  # within half a step


# ------------------------------------------------------------------------------------------------ the CLI
def _headless(capture: Path, out: Path, fmt: str, frames: int = 4):
    return main(["animate", str(capture), "--headless", "--frames", str(frames), "--export", str(out),
                 "--export-format", fmt, *FAST])


def test_headless_compressed_frames_match_ply_frames(capture, tmp_path):
    """The same animation as PLY and compressed PLY: every compressed frame k equals PLY frame k (through
    row_order.npy) within the layout's quantisation, and is at most a third of the size."""
    assert _headless(capture, tmp_path / "ply", "ply") == 0
    assert _headless(capture, tmp_path / "cply", "compressed-ply") == 0
    meta = json.loads((tmp_path / "cply" / "sequence.json").read_text())
    assert meta["pattern"] == "frame%04d.compressed.ply" and meta["export_format"] == "compressed-ply"
    order = np.load(tmp_path / "cply" / "row_order.npy")
    n = load_scene(tmp_path / "ply" / "frame0001.ply").num_gaussians
    assert sorted(order.tolist()) == list(range(n))
    for k in (1, 4):
        a = load_scene(tmp_path / "ply" / f"frame{k:04d}.ply")
        b = load_scene(tmp_path / "cply" / f"frame{k:04d}.compressed.ply")
        a_means = a.means[order]
        # per-chunk bound: half a quantisation step of the chunk's extent on each axis (11/10/11 bits)
        m = a_means.numpy()
        nch = -(-n // 256)
        pad = nch * 256 - n
        mm = np.concatenate([m, np.repeat(m[-1:], pad, 0)]).reshape(nch, 256, 3)
        step = (mm.max(1) - mm.min(1)) / np.array([2047.0, 1023.0, 2047.0])  # [C, 3]
        bound = np.repeat(step, 256, 0)[:n] / 2 + 1e-6
        assert (np.abs(b.means.numpy() - m) <= bound).all()
        assert torch.allclose(torch.sigmoid(b.opacity_logits), torch.sigmoid(a.opacity_logits[order]), atol=1 / 510 + 1e-6)
        ra = torch.nn.functional.normalize(a.quats[order], dim=1)
        dot = (ra * b.quats).sum(1).abs().clamp(max=1.0)
        assert float((2 * torch.acos(dot)).max()) < 0.0049  # 10-bit smallest three
        assert (tmp_path / "cply" / f"frame{k:04d}.compressed.ply").stat().st_size * 3 <= \
            (tmp_path / "ply" / f"frame{k:04d}.ply").stat().st_size
    assert meta["export"]["bytes_per_gaussian_per_frame"] < 68 / 3 + 9 / 3  # 16 B + 9 SH bytes vs 68 + 36


def test_headless_refuses_mesh_with_compressed_format(mesh_file, tmp_path, capsys):
    rc = main(["animate", str(mesh_file("c3d_spot.obj")), "--headless", "--frames", "2", "--export",
               str(tmp_path / "m"), "--export-format", "compressed-ply"])
    assert rc == 2 and "mesh sequence" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


def test_headless_refuses_a_folder_with_another_runs_compressed_frames(capture, tmp_path, capsys):
    out = tmp_path / "c"
    out.mkdir()
    (out / "frame0001.compressed.ply").write_bytes(b"old")
    rc = _headless(capture, out, "compressed-ply", frames=2)
    assert rc == 2 and "--overwrite" in capsys.readouterr().err
    assert (out / "frame0001.compressed.ply").read_bytes() == b"old"


# ------------------------------------------------------------------------------------------------ convert
def test_convert_to_compressed_and_glb(capture, tmp_path, capsys):
    from physskin_gs.io.gltf import load_gltf, up_to_gltf_rotation

    src = load_scene(capture)
    out = tmp_path / "c.compressed.ply"
    assert main(["convert", str(capture), str(out)]) == 0
    assert "as compressed-ply" in capsys.readouterr().out
    back = load_scene(out)
    assert back.format == "compressed-ply" and back.num_gaussians == src.num_gaussians
    # Morton order: match rows by nearest neighbour is not needed; the multiset of opacities is preserved
    assert torch.allclose(torch.sigmoid(back.opacity_logits).sort().values,
                          torch.sigmoid(src.opacity_logits).sort().values, atol=1 / 510 + 1e-6)
    glb = tmp_path / "c.glb"
    assert main(["convert", str(capture), str(glb), "--up", "z", "--meters-per-unit", "0.5"]) == 0
    g = load_gltf(glb)
    R = torch.from_numpy(up_to_gltf_rotation([0.0, 0.0, 1.0])).float()
    assert torch.allclose(g.means, 0.5 * src.means @ R.T, atol=1e-5)  # +z up -> +Y up, in metres
    assert torch.allclose(g.log_scales, src.log_scales + np.log(0.5), atol=1e-5)
    assert main(["convert", str(capture), str(glb)]) == 2  # exists: needs --force
    assert "--force" in capsys.readouterr().err


def test_convert_format_from_name_and_refusals(capture, tmp_path, capsys):
    from physskin_gs.cli.convert import output_format

    assert output_format("a.compressed.ply") == "compressed-ply" and output_format("a.PLY") == "ply"
    assert output_format("a.usda") == "usd" and output_format("x.glb") == "glb"
    with pytest.raises(OptionError, match="cannot tell"):
        output_format("a.gltf")
    with pytest.raises(OptionError, match="must end in"):
        output_format("a.ply", "glb")
    assert main(["convert", str(capture), str(tmp_path / "x.splat")]) == 2
    assert "cannot tell the output format" in capsys.readouterr().err
    bad = load_scene(capture)
    m = bad.means.clone()
    m[3] = float("nan")
    save_scene(replace(bad, means=m), str(tmp_path / "nan.ply"))
    assert main(["convert", str(tmp_path / "nan.ply"), str(tmp_path / "n.glb")]) == 2
    assert "--drop-invalid" in capsys.readouterr().err and not (tmp_path / "n.glb").exists()
    assert main(["convert", str(tmp_path / "nan.ply"), str(tmp_path / "n.glb"), "--drop-invalid"]) == 0


# ------------------------------------------------------------------------------------------------ OpenUSD
def test_headless_usd_matches_ply_frames(capture, tmp_path):
    """One animation.usdc: the static prim holds no time samples, the moving prim one per frame, and the scene
    read back at time k (original row order) equals PLY frame k (positions, rotations, scales, SH, opacities)."""
    pytest.importorskip("pxr", reason="usd-core (the [usd] extra) is not installed")
    from pxr import Usd, UsdVol

    from physskin_gs.io.usd import load_usd

    assert _headless(capture, tmp_path / "ply", "ply", frames=3) == 0
    assert _headless(capture, tmp_path / "usd", "usd", frames=3) == 0
    path = tmp_path / "usd" / "animation.usdc"
    meta = json.loads((tmp_path / "usd" / "sequence.json").read_text())
    assert meta["pattern"] == "animation.usdc" and meta["export_format"] == "usd"
    stage = Usd.Stage.Open(str(path))
    assert stage.GetTimeCodesPerSecond() == pytest.approx(meta["fps"])
    assert stage.GetStartTimeCode() == 1 and stage.GetEndTimeCode() == 3
    static = UsdVol.ParticleField3DGaussianSplat(stage.GetPrimAtPath("/Splats/Static"))
    moving = UsdVol.ParticleField3DGaussianSplat(stage.GetPrimAtPath("/Splats/Moving"))
    assert static.GetPrim().IsValid() and moving.GetPrim().IsValid()
    assert static.GetPrim().GetAttribute("positions").GetNumTimeSamples() == 0
    assert moving.GetPrim().GetAttribute("positions").GetNumTimeSamples() == 3
    assert len(moving.GetPrim().GetAttribute("positions").Get(1)) == meta["num_moving"]
    del stage
    for k in (1, 3):
        a = load_scene(tmp_path / "ply" / f"frame{k:04d}.ply")
        b = load_usd(path, time=k)
        assert b.num_gaussians == a.num_gaussians
        assert torch.allclose(b.means, a.means, atol=1e-6)
        qa = torch.nn.functional.normalize(a.quats, dim=1)
        assert torch.allclose((qa * b.quats).sum(1).abs(), torch.ones(a.num_gaussians), atol=1e-5)
        assert torch.allclose(b.log_scales, a.log_scales, atol=1e-5)
        assert torch.allclose(torch.sigmoid(b.opacity_logits), torch.sigmoid(a.opacity_logits), atol=1e-6)
        assert torch.allclose(b.sh_dc, a.sh_dc, atol=1e-6) and torch.allclose(b.sh_rest, a.sh_rest, atol=1e-5)


def test_render_reads_a_frame_of_an_animated_usd(capture, tmp_path, capsys):
    """``render --frame K`` of an exported animation.usdc draws frame K: the same image as PLY frame K (the same
    up, recorded by both); without --frame a note names the frames it holds; a frame outside them, or --frame on a
    single scene, is refused before anything is written."""
    pytest.importorskip("pxr", reason="usd-core (the [usd] extra) is not installed")
    import imageio.v2 as imageio

    assert _headless(capture, tmp_path / "ply", "ply", frames=3) == 0
    assert _headless(capture, tmp_path / "usd", "usd", frames=3) == 0
    usd, size = tmp_path / "usd" / "animation.usdc", ["--width", "48", "--height", "48"]
    capsys.readouterr()
    assert main(["render", str(usd), "-o", str(tmp_path / "u3.png"), "--frame", "3", *size]) == 0
    assert main(["render", str(tmp_path / "ply" / "frame0003.ply"), "-o", str(tmp_path / "p3.png"), *size]) == 0
    assert main(["render", str(tmp_path / "ply" / "frame0001.ply"), "-o", str(tmp_path / "p1.png"), *size]) == 0
    u3, p3, p1 = (imageio.imread(tmp_path / f).astype(int) for f in ("u3.png", "p3.png", "p1.png"))
    assert np.abs(u3 - p3).max() <= 1 and np.abs(p3 - p1).max() > 10  # frame 3, not the rest
    assert main(["render", str(usd), "-o", str(tmp_path / "u.png"), *size]) == 0
    assert "is an animation (frames 1-3); this is its rest state, --frame K reads frame K" in capsys.readouterr().err
    assert main(["render", str(usd), "-o", str(tmp_path / "u4.png"), "--frame", "4", *size]) == 2
    assert "holds frames 1-3" in capsys.readouterr().err and not (tmp_path / "u4.png").exists()
    assert main(["convert", str(capture), str(tmp_path / "c.ply"), "--frame", "2"]) == 2
    assert "--frame reads one frame of an animated OpenUSD file" in capsys.readouterr().err
    assert not (tmp_path / "c.ply").exists()


def test_convert_to_usd(capture, tmp_path):
    pytest.importorskip("pxr", reason="usd-core (the [usd] extra) is not installed")
    from physskin_gs.io.usd import load_usd

    out = tmp_path / "c.usda"
    assert main(["convert", str(capture), str(out), "--up", "z"]) == 0
    a, b = load_scene(capture), load_usd(out)
    assert torch.allclose(a.means, b.means, atol=1e-6) and torch.allclose(a.log_scales, b.log_scales, atol=1e-5)
    assert "upAxis = \"Z\"" in out.read_text()


def test_compressed_frames_equal_a_full_encode(tmp_path):
    """Frames that re-encode only the moving chunks are byte-identical to encoding the whole frame."""
    from physskin_gs.io.compressed_ply import save_compressed_ply

    rest = _random_scene(3000, k=3)
    idx = torch.arange(0, 3000, 7)  # 429 moving rows spread over the scene
    ex = SequenceExporter(tmp_path / "seq", "compressed-ply", rest, idx, fps=30.0)
    rows = _frame_rows(idx, 3, 3)
    ex.add(3, rows)
    ex.close()
    full = _with_rows(rest, idx, rows)
    save_compressed_ply(full, tmp_path / "full.compressed.ply", order=ex.row_order)
    assert (tmp_path / "seq" / "frame0003.compressed.ply").read_bytes() == (tmp_path / "full.compressed.ply").read_bytes()


def test_glb_splats_load_by_content_and_render_like_the_source(tmp_path):
    """A .glb we wrote is detected by its JSON (KHR_gaussian_splatting) and loads through load_scene, with the
    glTF +y format prior; a plain mesh .glb is still a mesh. The demo splat rendered from the .glb (turned to +Y
    up) looks like the .splat itself (both renders use the same auto up rule)."""
    import trimesh

    from physskin_gs.io import detect_format

    src = ROOT / "data" / "spot_mesh2splat_10k.splat"
    glb = tmp_path / "spot.glb"
    assert main(["convert", str(src), str(glb)]) == 0
    assert detect_format(glb) == "gltf-splat"
    sc = load_scene(glb)
    assert sc.num_gaussians == 10000 and sc.format == "gltf-gaussian-splatting"
    from physskin_gs.pipeline import resolve_up

    assert resolve_up("auto", sc).tolist() == [0.0, 1.0, 0.0]
    assert sc.up_hint == (0.0, 1.0, 0.0)  # fixed by the glTF specification: recorded, not a guess
    from physskin_gs.io.gltf import load_gltf

    # the demo's -y up, found by the analysis on the .splat, is glTF's +Y turned back into the source frame
    assert np.allclose(load_gltf(glb, source_frame=True).up_hint, (0.0, -1.0, 0.0), atol=1e-6)
    mesh = tmp_path / "box.glb"
    trimesh.creation.box().export(str(mesh))
    assert detect_format(mesh) == "mesh"
    import imageio.v2 as iio

    for name, path in (("a", src), ("b", glb)):
        assert main(["render", str(path), "-o", str(tmp_path / f"{name}.png"), "--width", "96", "--height", "96"]) == 0
    a = iio.imread(tmp_path / "a.png").astype(int)
    b = iio.imread(tmp_path / "b.png").astype(int)
    assert a.std() > 5 and np.abs(a - b).mean() < 1.0  # same picture (up to rounding)


@pytest.mark.parametrize("fmt", ["compressed-ply", "usd"])
def test_viewer_recorder_writes_the_chosen_format(tmp_path, fmt):
    """The viewer's recorder writes through the same exporter: compressed frames or one USD file, and a
    sequence.json that names the pattern and the format."""
    if fmt == "usd":
        pytest.importorskip("pxr", reason="usd-core (the [usd] extra) is not installed")
    pytest.importorskip("viser", reason="the viewer needs viser")
    from physskin_gs_viewer.recorder import Recorder
    from physskin_gs_viewer.testing import FakeAnimatedScene

    anim = FakeAnimatedScene(_random_scene(600, k=0, seed=4), num_handles=2)
    rec = Recorder(tmp_path / "rec", dt=0.02, meta={"source": "x.ply"}, export_format=fmt)
    for _ in range(3):
        anim.u += 0.05
        rec.add(anim)
    out = rec.stop()
    assert rec.error is None and rec.written == 3
    meta = json.loads((out / "sequence.json").read_text())
    assert meta["export_format"] == fmt and meta["frames"] == 3
    if fmt == "compressed-ply":
        assert meta["pattern"] == "frame%04d.compressed.ply"
        order = np.load(out / "row_order.npy")
        back = load_scene(out / "frame0003.compressed.ply")
        want = anim.deformed_scene().means[order]
        extent = float((want.max(0).values - want.min(0).values).max())
        assert float((back.means - want).abs().max()) <= extent / 1023 / 2 * 1.01  # half a step of any chunk
    else:
        from physskin_gs.io.usd import load_usd

        assert meta["pattern"] == "animation.usdc"
        assert torch.allclose(load_usd(out / "animation.usdc", time=3).means, anim.deformed_scene().means, atol=1e-6)
    with pytest.raises(OptionError, match="already holds a recording"):
        Recorder(out, dt=0.02, export_format=fmt)


def test_interrupted_usd_export_keeps_the_frames_written(capture, tmp_path, monkeypatch, capsys):
    """Ctrl-C (or SIGTERM, which the CLI raises the same way) during a USD export finishes the file with the frames
    simulated so far and leaves no temporary file."""
    pytest.importorskip("pxr", reason="usd-core (the [usd] extra) is not installed")
    from physskin_gs.io.usd import load_usd
    from physskin_gs.pipeline import AnimatedScene

    real_step, calls = AnimatedScene.step, []

    def step(self, n=1):
        calls.append(n)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real_step(self, n)

    monkeypatch.setattr(AnimatedScene, "step", step)
    out = tmp_path / "usd"
    assert _headless(capture, out, "usd", frames=10) == 130
    assert "kept 3 frames" in capsys.readouterr().err
    assert not list(out.glob(".*tmp*"))
    from pxr import Usd

    stage = Usd.Stage.Open(str(out / "animation.usdc"))
    assert stage.GetEndTimeCode() == 3
    del stage
    assert load_usd(out / "animation.usdc", time=3).num_gaussians == load_scene(capture).num_gaussians


def test_sigterm_is_an_interrupt(tmp_path):
    """SIGTERM ends a command like Ctrl-C (exit 143, cleanup runs), not with Python's default kill."""
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "seq"
    p = subprocess.Popen([sys.executable, "-m", "physskin_gs", "animate", str(ROOT / "data" / "spot_mesh2splat_10k.splat"),
                          "--headless", "--frames", "100000", "--export", str(out), *FAST],
                         stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and p.poll() is None and not (out / "frame0002.ply").exists():
            time.sleep(0.2)
        assert p.poll() is None, f"the command ended (exit {p.returncode}) before frame 2:\n{p.communicate()[1][-3000:]}"
        assert (out / "frame0002.ply").is_file(), "frame0002.ply not written within 120 s"
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:  # a failed wait above: do not leave the child running
            p.kill()
            p.communicate()
    assert p.returncode == 143 and "terminated" in err and "kept" in err
    assert (out / "frame0001.ply").is_file() and not list(out.glob(".*.tmp"))
    assert os.path.getsize(out / "frame0001.ply") == os.path.getsize(out / "frame0002.ply")


def test_axis_name_only_for_an_axis():
    from physskin_gs.cli.animate import _axis_name

    assert _axis_name([0.0, -1.0, 0.0]) == "-y"
    assert _axis_name([-0.975, 0.014, 0.222]) == "[-0.975, +0.014, +0.222]"  # 12.8 degrees off -x


def test_convert_warns_about_options_without_effect_and_refuses_a_misleading_name(capture, tmp_path, capsys):
    assert main(["convert", str(capture), str(tmp_path / "a.ply"), "--meters-per-unit", "0.01"]) == 0
    assert "--meters-per-unit has no effect" in capsys.readouterr().err
    assert main(["convert", str(capture), str(tmp_path / "b.compressed.ply"), "--format", "ply"]) == 2
    assert "compressed PLY by other tools" in capsys.readouterr().err


def test_skin_reports_a_failed_write(tmp_path, monkeypatch, capsys):
    import numpy

    def fail(*a, **k):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(numpy, "savez", fail)
    rc = main(["skin", str(ROOT / "data" / "spot_mesh2splat_10k.splat"), "-o", str(tmp_path / "w.npz"),
               "--skinning", "rbf"])
    assert rc == 2 and "could not write" in capsys.readouterr().err and not (tmp_path / "w.npz").exists()


def test_usd_output_reads_back_through_load_scene(tmp_path):
    pytest.importorskip("pxr", reason="usd-core (the [usd] extra) is not installed")
    from physskin_gs.io import detect_format

    src = ROOT / "data" / "spot_mesh2splat_10k.splat"
    for name in ("s.usdc", "s.usda"):
        assert main(["convert", str(src), str(tmp_path / name)]) == 0
        assert detect_format(tmp_path / name) == "usd"
        back = load_scene(tmp_path / name)
        assert back.format == "openusd" and torch.allclose(back.means, load_scene(src).means, atol=1e-6)


@pytest.mark.parametrize("fmt, pattern", [("ply", "frame0002.ply"), ("compressed-ply", "frame0002.compressed.ply"),
                                          ("usd", "animation.usdc")])
def test_exported_frames_record_the_up_axis(tmp_path, fmt, pattern):
    """Frames carry the simulation's up axis in a header comment; the auto up rule (render, animate) uses it, so a
    frame of a -y-up .splat source is not rendered on its side as an INRIA (+z) file; convert keeps it."""
    from physskin_gs.pipeline import resolve_up

    src = ROOT / "data" / "spot_mesh2splat_10k.splat"
    out = tmp_path / "seq"
    assert main(["animate", str(src), "--headless", "--frames", "2", "--export", str(out), "--export-format", fmt,
                 *FAST]) == 0
    if fmt == "usd":
        pytest.importorskip("pxr", reason="usd-core (the [usd] extra) is not installed")
    frame = load_scene(out / pattern)  # a USD stage: Y up, the -y scene under a half turn on /Splats
    assert frame.up_hint == pytest.approx((0.0, -1.0, 0.0))
    assert resolve_up("auto", frame).tolist() == [0.0, -1.0, 0.0]
    assert main(["convert", str(out / pattern), str(tmp_path / "copy.ply")]) == 0
    assert load_scene(tmp_path / "copy.ply").up_hint == pytest.approx((0.0, -1.0, 0.0))
    assert load_scene(src).up_hint is None and resolve_up("auto", load_scene(ROOT / "data" / "plant_capture.splat")).tolist() == [0.0, -1.0, 0.0]


def test_up_comment_parsing():
    from physskin_gs.io.ply_header import up_comment, up_from_comments

    assert up_from_comments([up_comment((0, 0, 2))]) == (0.0, 0.0, 1.0)
    assert up_from_comments(["physskin_gs up_axis 1 nan 0"]) is None
    assert up_from_comments(["physskin_gs up_axis 0 0"]) is None and up_from_comments(["Generated by x"]) is None


def test_convert_keeps_the_up_axis_the_input_stands_on(tmp_path, capsys):
    """A .splat (-y up by convention) converted to an INRIA PLY (+z by convention) records the up axis animate uses
    on the input, so the PLY stands the same way (a fresh user's converted room turned 90 degrees); a compressed PLY
    shares the .splat's convention and records nothing; --up is recorded as given."""
    from physskin_gs.io import load_scene
    from physskin_gs.pipeline import analyze_for_animation

    src = ROOT / "data" / "spot_mesh2splat_10k.splat"
    before = np.asarray(analyze_for_animation(load_scene(str(src))).up, dtype=np.float64)
    assert main(["convert", str(src), str(tmp_path / "a.ply")]) == 0
    assert "recorded in the output (the inria-ply convention is z up, the splat one -y)" in capsys.readouterr().err
    converted = load_scene(str(tmp_path / "a.ply"))
    assert converted.up_hint is not None and np.allclose(converted.up_hint, before)
    assert np.allclose(np.asarray(analyze_for_animation(converted).up, dtype=np.float64), before, atol=1e-6)
    assert main(["convert", str(src), str(tmp_path / "b.compressed.ply")]) == 0
    assert load_scene(str(tmp_path / "b.compressed.ply")).up_hint is None
    assert main(["convert", str(src), str(tmp_path / "c.ply"), "--up", "0,0,2"]) == 0
    assert "recorded in the output (--up)" in capsys.readouterr().err
    assert np.allclose(load_scene(str(tmp_path / "c.ply")).up_hint, (0.0, 0.0, 1.0))


def test_converting_our_own_outputs_back_and_forth_changes_nothing(tmp_path, capsys):
    """glb -> usdc -> glb of a captured card box on its mat: the up each file records (glTF's +Y, the stage's
    upAxis) is taken as it is, so the last glb equals the first (positions and scales exactly, rotations to float32
    rounding; the scene analysis re-levelled it on its support by 0.003 degrees at each step)."""
    from pathlib import Path

    from physskin_gs.cli import main
    from physskin_gs.io.gltf import load_gltf

    pytest.importorskip("pxr", reason="usd-core (optional extra physskin_gs[usd]) is not installed")
    src = next((Path(__file__).resolve().parents[1] / "data" / "captures").glob("*.splat"))
    a, b, c = tmp_path / "a.glb", tmp_path / "b.usdc", tmp_path / "c.glb"
    assert main(["convert", str(src), str(a)]) == 0
    assert main(["convert", str(a), str(b)]) == 0
    assert main(["convert", str(b), str(c)]) == 0
    assert "recorded in the file" in capsys.readouterr().err
    ga, gc = load_gltf(str(a)), load_gltf(str(c))
    assert torch.equal(ga.means, gc.means) and torch.equal(ga.log_scales, gc.log_scales)
    torch.testing.assert_close(gc.quats, ga.quats, rtol=0, atol=1e-6)  # (float32 re-normalisation in the USD)


def test_quat_order_is_refused_for_formats_that_fix_it(tmp_path, capsys):
    """--quat-order xyzw on a glTF file (xyzw by its extension) is refused with the reason, as on a compressed PLY,
    instead of being ignored; on an INRIA PLY it reorders the rotations."""
    from physskin_gs.cli import main

    spot = Path(__file__).resolve().parents[1] / "data" / "spot_mesh2splat_10k.splat"
    glb = tmp_path / "s.glb"
    assert main(["convert", str(spot), str(glb), "--up", "y"]) == 0
    capsys.readouterr()
    assert main(["info", str(glb), "--quat-order", "xyzw"]) == 2
    assert "a glTF file stores xyzw rotations" in capsys.readouterr().err
    cply = tmp_path / "s.compressed.ply"
    assert main(["convert", str(spot), str(cply)]) == 0
    capsys.readouterr()
    assert main(["info", str(cply), "--quat-order", "xyzw"]) == 2
    assert "leave the order at wxyz" in capsys.readouterr().err


def test_a_mesh_converted_to_splats_stays_one_object(tmp_path):
    """``convert chair.obj chair.ply`` records that the Gaussians are one object (sampled on a mesh), so animating
    the PLY moves all of it, as animating the mesh does: an office chair's round foot is not taken for its floor
    (without the record, the foot became a support and a quarter of the chair stayed static)."""
    trimesh = pytest.importorskip("trimesh")
    from physskin_gs.pipeline import analyze_for_animation

    turn = trimesh.transformations.rotation_matrix(np.pi / 2, (1, 0, 0))
    parts = [trimesh.creation.cylinder(radius=0.5, height=0.03).apply_transform(turn).apply_translation((0, 0.015, 0)),
             trimesh.creation.cylinder(radius=0.03, height=0.45).apply_transform(turn).apply_translation((0, 0.25, 0)),
             trimesh.creation.box((0.5, 0.06, 0.5)).apply_translation((0, 0.5, 0)),
             trimesh.creation.box((0.5, 0.5, 0.05)).apply_translation((0, 0.8, -0.25))]
    trimesh.util.concatenate(parts).export(tmp_path / "chair.obj")
    assert main(["convert", str(tmp_path / "chair.obj"), str(tmp_path / "chair.ply")]) == 0
    scene = load_scene(tmp_path / "chair.ply")
    assert scene.object_only
    a = analyze_for_animation(scene)
    assert a.plane is None and int(np.asarray(a.object).sum()) == scene.num_gaussians
    b = analyze_for_animation(replace(scene, object_only=False))  # the same Gaussians without the record
    assert b.plane is not None and int(np.asarray(b.object).sum()) < 0.8 * scene.num_gaussians
    save_scene(scene, tmp_path / "again.ply")  # the record survives a round trip
    assert load_scene(tmp_path / "again.ply").object_only


def test_headless_export_names_the_extra_properties_a_format_drops(capture, tmp_path, capsys):
    """A capture with extra per-Gaussian properties: a .ply export keeps them, and a compressed-PLY export says
    which it drops, as convert does (they went without a word)."""
    from physskin_gs.io import save_scene

    scene = load_scene(capture)
    n = scene.num_gaussians
    scene.extra["confidence"] = torch.linspace(0.0, 1.0, n)
    src = tmp_path / "extra.ply"
    save_scene(scene, src)
    capsys.readouterr()
    assert _headless(src, tmp_path / "ply", "ply", frames=2) == 0
    assert "not written" not in capsys.readouterr().err
    assert torch.equal(load_scene(tmp_path / "ply" / "frame0002.ply").extra["confidence"], scene.extra["confidence"])
    assert _headless(src, tmp_path / "cply", "compressed-ply", frames=2) == 0
    err = capsys.readouterr().err
    assert ("1 extra per-Gaussian property (confidence) not written: a compressed-ply file has no place for them"
            in err), err


def test_info_shows_the_extent_of_a_box_far_from_the_origin_and_convert_bounds_its_units(capture, tmp_path,
                                                                                        capsys):
    """``info`` prints a box 1e5 units out with the digits its extent needs (four digits printed [1e+05, ...] for
    both corners of a 1-unit scene); near the origin, four as before. ``convert --meters-per-unit`` refuses values
    under 1e-9 m (1e-40 wrote float32 denormals: every position lost)."""
    import re

    from physskin_gs.io import save_scene

    scene = load_scene(capture)
    far = replace(scene, means=scene.means.double().add(1.0e5).float())
    src = tmp_path / "far.ply"
    save_scene(far, src)
    for path in (src, capture):
        capsys.readouterr()
        assert main(["info", str(path)]) == 0
        out = capsys.readouterr().out
        lo = [float(v) for v in re.search(r"bbox min:\s+\[(.*)\]", out).group(1).split(",")]
        hi = [float(v) for v in re.search(r"bbox max:\s+\[(.*)\]", out).group(1).split(",")]
        true_lo = far.means.min(0).values if path == src else scene.means.min(0).values
        true_hi = far.means.max(0).values if path == src else scene.means.max(0).values
        ext = (true_hi - true_lo).double()
        assert (torch.tensor(hi, dtype=torch.float64) - torch.tensor(lo, dtype=torch.float64) - ext).abs().max() \
            < 0.01 * float(ext.max()), out
    assert main(["convert", str(capture), str(tmp_path / "o.glb"), "--meters-per-unit", "1e-40"]) == 2
    assert "--meters-per-unit must be a finite number in [1e-09, 1e+09] m" in capsys.readouterr().err


def test_a_files_normals_are_kept_and_turn_with_the_moving_gaussians(capture, tmp_path):
    """A PLY with real normals (nx ny nz: here each Gaussian's shortest axis, as some trainers write them): they
    were written back as zeros by every frame and by convert. Now frame 1 keeps them, static rows keep them bit for
    bit, moving rows' normals stay unit and turn with their Gaussians (each stays along its Gaussian's shortest
    axis), and convert keeps them; a file whose normals are all zero gains no extra properties."""
    from physskin_gs.deform import rest_covariances

    scene = load_scene(capture)
    assert "nx" not in scene.extra  # the INRIA writer's zero normals are not carried as data
    cov = rest_covariances(scene.quats, scene.log_scales).double()
    shortest = torch.linalg.eigh(cov)[1][:, :, 0].float()  # [N, 3]
    for j, k in enumerate(("nx", "ny", "nz")):
        scene.extra[k] = shortest[:, j].contiguous()
    src = tmp_path / "normals.ply"
    save_scene(scene, src)
    back = load_scene(src)
    assert list(back.extra) == ["nx", "ny", "nz"] and torch.equal(back.extra["nz"], shortest[:, 2])
    assert _headless(src, tmp_path / "out", "ply", frames=12) == 0
    first = load_scene(tmp_path / "out" / "frame0001.ply")
    n0 = torch.stack([first.extra[k] for k in ("nx", "ny", "nz")], 1)
    assert float((n0 - shortest).abs().max()) < 1e-5
    last = load_scene(tmp_path / "out" / "frame0012.ply")
    n1 = torch.stack([last.extra[k] for k in ("nx", "ny", "nz")], 1)
    moved = (last.means - first.means).norm(dim=1) > 1e-6
    assert int(moved.sum()) > 1000 and torch.equal(n1[~moved], shortest[~moved])
    assert float((n1[moved].norm(dim=1) - 1).abs().max()) < 1e-5
    axis = torch.linalg.eigh(rest_covariances(last.quats, last.log_scales).double())[1][:, :, 0].float()
    cos = (axis[moved] * n1[moved]).sum(1).abs()
    flat = (last.log_scales[moved].sort(1).values[:, 1] - last.log_scales[moved].min(1).values) > 0.5
    assert float(cos[flat].median()) > 0.999  # along the shortest axis where one is clear
    assert main(["convert", str(src), str(tmp_path / "conv.ply")]) == 0
    assert torch.equal(load_scene(tmp_path / "conv.ply").extra["ny"], shortest[:, 1])
