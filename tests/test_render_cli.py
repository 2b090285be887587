"""Real files through the renderer and the ``physskin-gs render`` command (the shared lego and LoD tile; without the
shared data, the licence-clean SH-3 stand-in of ``conftest.inria_sh3``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from physskin_gs.cli import main
from physskin_gs.render import auto_frame, rasterize


@pytest.fixture(scope="module")
def lego(inria_sh3):
    from physskin_gs.io import load_scene

    return load_scene(inria_sh3("lego_gsplat_sh3.ply").path)


def test_lego_silhouette_matches_projected_bounds(lego):
    W = H = 96
    cam = auto_frame(lego.means, up="z", azimuth=30.0, elevation=25.0, width=W, height=H)
    out = rasterize(lego.means, lego.covariances(), lego.opacities, lego.sh, cam.viewmat, cam.K, W, H)
    a = out.alpha[..., 0]
    assert float((a > 0.5).float().mean()) > 0.05  # shows the object
    assert torch.isfinite(out.rgb).all() and float(out.rgb.max()) <= 1.5
    ys, xs = torch.nonzero(a > 0.5, as_tuple=True)
    # projected centres of the Gaussians that matter (opaque ones), robust 0.5-99.5 % box
    keep = lego.opacities > 0.5
    p = lego.means[keep] @ cam.viewmat[:3, :3].T + cam.viewmat[:3, 3]
    uv = p @ cam.K.T
    uv = uv[:, :2] / uv[:, 2:]
    lo = torch.quantile(uv, 0.005, dim=0)
    hi = torch.quantile(uv, 0.995, dim=0)
    tol = 0.08 * W
    assert abs(float(xs.min()) - float(lo[0])) < tol and abs(float(xs.max()) - float(hi[0])) < tol
    assert abs(float(ys.min()) - float(lo[1])) < tol and abs(float(ys.max()) - float(hi[1])) < tol


def test_cli_render_png(inria_sh3, tmp_path, capsys):
    import imageio.v2 as imageio

    out = tmp_path / "lego.png"
    code = main([
        "render", str(inria_sh3("lego_gsplat_sh3.ply").path), "-o", str(out), "--width", "64", "--height", "48",
        "--up", "z", "--background", "black",
    ])
    assert code == 0
    img = imageio.imread(out)
    assert img.shape == (48, 64, 3)
    assert (img.max(axis=2) > 30).mean() > 0.05  # object pixels on a black background
    assert (img[0, 0] == 0).all()  # corner is background
    assert "wrote" in capsys.readouterr().out


def test_cli_render_splat_file(splat_file, tmp_path):
    import imageio.v2 as imageio

    out = tmp_path / "spot.png"
    assert main(["render", str(splat_file("spot_mesh2splat_10k.splat")), "-o", str(out), "--width", "48", "--height", "48"]) == 0
    img = imageio.imread(out)
    assert (img.min(axis=2) < 200).mean() > 0.05  # non-white pixels on the white background


def test_cli_refuses_to_overwrite_input_and_bad_options(inria_sh3, tmp_path, capsys):
    src = tmp_path / "copy.ply"
    src.write_bytes(inria_sh3("scene_tile_lod5_sh3.ply").path.read_bytes())
    before = src.read_bytes()
    # same path, and same file through another name
    assert main(["render", str(src), "-o", str(src)]) == 2
    assert "overwrite" in capsys.readouterr().err
    assert src.read_bytes() == before
    assert main(["render", str(src), "-o", str(tmp_path / "x.txt")]) == 2
    assert main(["render", str(src), "-o", str(tmp_path / "x.png"), "--up", "q"]) == 2
    assert "up axis" in capsys.readouterr().err
    assert main(["render", str(src), "-o", str(tmp_path / "x.png"), "--turntable", "3"]) == 2
    assert main(["render", str(tmp_path / "missing.ply"), "-o", str(tmp_path / "x.png")]) == 2
    assert main(["render", str(src), "-o", str(tmp_path / "x.png"), "--distance", "-1"]) == 2
    # one rule for every command's outputs: a missing output folder is created (as animate --video does)
    assert main(["render", str(src), "-o", str(tmp_path / "nodir" / "x.png"), "--width", "32", "--height", "32"]) == 0
    assert (tmp_path / "nodir" / "x.png").stat().st_size > 0
    (tmp_path / "afile").write_bytes(b"x")
    assert main(["render", str(src), "-o", str(tmp_path / "afile" / "x.png")]) == 2
    assert "afile is a file, not a folder" in capsys.readouterr().err


def test_cli_turntable_video(inria_sh3, tmp_path):
    pytest.importorskip("imageio_ffmpeg")
    import imageio.v2 as imageio

    out = tmp_path / "turn.mp4"
    code = main([
        "render", str(inria_sh3("scene_tile_lod5_sh3.ply").path), "-o", str(out), "--turntable", "3",
        "--width", "40", "--height", "30", "--fps", "5",
    ])
    assert code == 0 and out.stat().st_size > 0
    r = imageio.get_reader(str(out))
    frames = [f for f in r]
    r.close()
    assert len(frames) == 3 and frames[0].shape == (32, 48, 3)  # rounded to multiples of 16


def test_cli_render_says_the_up_as_animate_does(tmp_path, capsys):
    """``render`` with ``--up auto`` names the analysis' up as ``animate``'s scene line does: the axis (the tarot
    box's paper is 0.6 degrees off -y: "-y", not "+0.007, -1.000, +0.008"), where it came from, then the reason,
    with no bracket around a reason that holds brackets of its own."""
    from conftest import DATA_DIR

    src = DATA_DIR / "captures" / "tarot_box_on_paper_padilla.splat"
    assert main(["render", str(src), "-o", str(tmp_path / "t.png"), "--width", "48", "--height", "48"]) == 0
    note = next(x for x in capsys.readouterr().err.splitlines() if x.startswith("note: up "))
    assert note.startswith("note: up -y, from the normal of the support it stands on: support plane with "), note
    assert "[" not in note and "support-plane" not in note, note


def test_up_sentence_names_the_axis_and_its_source():
    from physskin_gs.cli._common import up_sentence

    assert up_sentence([0.0, -1.0, 0.0], "stable-base", "r (x)") == (
        "up -y, from the side it stands on most stably: r (x)")
    assert up_sentence([0.6, 0.8, 0.0], "support-plane", "r").startswith("up [+0.600, +0.800, +0.000], from the normal")


def test_render_and_convert_take_a_mesh_as_animate_samples_it(tmp_path, capsys):
    """A mesh (an exported ``frame*.obj`` is one) is drawn and converted as the Gaussians ``animate`` samples on
    its surface: ``--mesh-gaussians`` of them, every mean on the box's faces, coloured by the file's red face
    colours; the converted PLY renders to the same image as the mesh itself (same samples, up recorded)."""
    import imageio.v2 as imageio
    import numpy as np
    import trimesh

    from physskin_gs.io import load_scene

    box = trimesh.creation.box(extents=(2.0, 1.0, 0.5))
    box.visual.face_colors = np.tile([200, 30, 30, 255], (len(box.faces), 1))
    src = tmp_path / "box.obj"
    box.export(src)
    img = tmp_path / "box.png"
    assert main(["render", str(src), "-o", str(img), "--width", "64", "--height", "64", "--mesh-gaussians", "3000"]) == 0
    assert "is a mesh: 3,000 Gaussians sampled on its surface" in capsys.readouterr().err
    out = tmp_path / "box.ply"
    assert main(["convert", str(src), str(out), "--mesh-gaussians", "3000"]) == 0
    scene = load_scene(out)
    assert scene.num_gaussians == 3000
    m = scene.means.double().abs().numpy()
    half = np.array([1.0, 0.5, 0.25])
    on_face = np.abs(m - half).min(1)  # distance to the nearest face plane, each point inside the box
    assert (m <= half + 1e-5).all() and on_face.max() < 1e-5
    rgb = scene.sh_dc.numpy() * 0.28209479177387814 + 0.5  # [N, 3], shaded red
    assert (rgb[:, 0] > 2.5 * rgb[:, 1]).all() and (rgb[:, 0] > 0.2).all()
    img2 = tmp_path / "box_ply.png"
    assert main(["render", str(out), "-o", str(img2), "--width", "64", "--height", "64"]) == 0
    a, b = imageio.imread(img).astype(int), imageio.imread(img2).astype(int)
    assert (a[..., :3] < 250).any(axis=-1).mean() > 0.05  # the box is in view
    assert np.abs(a - b).max() <= 1


def test_a_single_gaussian_is_framed_by_its_own_size(tmp_path):
    """One Gaussian (its centres' box is a point): the default camera frames the blob itself (3 sigma), not a
    point, so the image shows it instead of coming out blank."""
    import imageio.v2 as imageio

    from physskin_gs.io import load_scene, save_scene

    spot = load_scene(Path(__file__).resolve().parents[1] / "data" / "spot_mesh2splat_10k.splat")
    one = replace(spot, means=spot.means[:1], quats=spot.quats[:1], log_scales=torch.full((1, 3), -3.0),
                  opacity_logits=torch.full((1,), 5.0), sh_dc=spot.sh_dc[:1], sh_rest=spot.sh_rest[:1])
    save_scene(one, tmp_path / "one.ply")
    assert main(["render", str(tmp_path / "one.ply"), "-o", str(tmp_path / "one.png"), "--width", "96",
                 "--height", "96", "--backend", "torch"]) == 0
    img = imageio.imread(tmp_path / "one.png")[..., :3].astype(int)
    covered = (img.min(axis=2) < 235).mean()
    assert 0.02 < covered < 0.6, covered
