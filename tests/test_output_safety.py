"""Outputs never destroy what the user did not name as an output (third fresh-user pass, 2026-12-06): the shipped
network, a checkpoint deep inside a training folder, an earlier run replaced with --force but interrupted, special
files, folders of an earlier PNG fallback; and what is written keeps the usual permissions."""

import json
import os
import stat
from pathlib import Path

import pytest
import torch

from physskin_gs.cli import main
from physskin_gs.errors import OptionError

pytestmark = pytest.mark.usefixtures("one_torch_thread")

REPO = Path(__file__).resolve().parents[1]
TINY = ["--handles", "6", "--width", "32", "--heads", "2", "--latents", "8", "--enc-layers", "1",
        "--handle-tokens", "8", "--head-hidden", "32", "--ff-mult", "1", "--cubature", "64", "--transforms", "8",
        "--surface-points", "128", "--val-every", "0", "--synthetic", "--threads", "1", "--log-every", "1"]


def _digest(path: Path) -> bytes:
    return path.read_bytes()


def test_no_output_option_can_name_the_shipped_network(capsys):
    """`evaluate --json data/physskin_m16.safetensors --force` replaced the network with a JSON file: the default
    checkpoint is an input of every command, named or not."""
    from physskin_gs.model.checkpoint import default_checkpoint_path

    ckpt = Path(default_checkpoint_path())
    assert ckpt.is_file()
    before = ckpt.read_bytes()
    demo = REPO / "data" / "spot_mesh2splat_10k.splat"
    assert main(["evaluate", "--data", str(demo), "--json", str(ckpt), "--force"]) == 2
    assert "name a .json file" in capsys.readouterr().err
    assert main(["convert", str(demo), str(ckpt), "--force"]) == 2
    assert ckpt.read_bytes() == before
    record = ckpt.with_suffix(".json")  # the network's training record beside it
    if record.is_file():
        kept = record.read_bytes()
        assert main(["evaluate", "--data", str(demo), "--json", str(record), "--force", "--fit-seconds", "0"]) == 2
        assert "input file" in capsys.readouterr().err and record.read_bytes() == kept


def test_train_refuses_an_init_checkpoint_inside_the_snapshots_it_replaces(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--out", str(out), "--steps", "4", "--snapshot-every", "2", *TINY]) == 0
    init = out / "snapshots" / "step_000004.safetensors"
    before = init.read_bytes()
    assert main(["train", "--out", str(out), "--steps", "4", "--snapshot-every", "2", "--force", "--init", str(init),
                 *TINY]) == 2
    assert "snapshots/step_000004.safetensors" in capsys.readouterr().err
    assert init.read_bytes() == before


def _run_files(out: Path) -> dict:
    files = {n: (out / n).read_bytes() for n in ("model.safetensors", "train_state.safetensors", "config.json",
                                                 "metrics.jsonl")}
    files["snapshots"] = sorted(p.name for p in (out / "snapshots").glob("*.safetensors"))
    return files


def _interrupt_at(monkeypatch, at_step: int):
    """Make the training step raise KeyboardInterrupt (as a Ctrl-C does) when it reaches ``at_step``."""
    import physskin_gs.model.trainer as trainer

    real = trainer.train_step

    def step(model, opt, shape, tcfg, step, *a, **k):
        if step == at_step:
            raise KeyboardInterrupt
        return real(model, opt, shape, tcfg, step, *a, **k)

    monkeypatch.setattr(trainer, "train_step", step)


def test_train_force_keeps_the_earlier_run_until_its_own_first_checkpoint(tmp_path, monkeypatch):
    """--force then Ctrl-C before the first step, or after two steps but before this run's first checkpoint: the
    earlier run is intact (it was deleted up front, and --resume then found nothing; later a 2-step model replaced
    a finished run). Ctrl-C after this run's first checkpoint: a checkpoint of its steps, and the earlier run is
    replaced as a whole: its snapshots and metrics go, none is mixed in."""
    out = tmp_path / "run"
    assert main(["train", "--out", str(out), "--steps", "4", "--snapshot-every", "2", *TINY]) == 0
    earlier = _run_files(out)
    assert earlier["snapshots"] == ["step_000002.safetensors", "step_000004.safetensors"]

    _interrupt_at(monkeypatch, 0)
    assert main(["train", "--out", str(out), "--steps", "3", "--snapshot-every", "3", "--force", "--seed", "1",
                 *TINY]) == 130
    assert _run_files(out) == earlier  # nothing trained: nothing replaced
    assert not (out / ".metrics.jsonl.partial").exists()

    monkeypatch.undo()
    _interrupt_at(monkeypatch, 2)
    assert main(["train", "--out", str(out), "--steps", "3", "--snapshot-every", "3", "--force", "--seed", "1",
                 *TINY]) == 130
    assert _run_files(out) == earlier  # two steps, no checkpoint of this run yet: the earlier run is kept
    assert not (out / ".metrics.jsonl.partial").exists()

    monkeypatch.undo()
    _interrupt_at(monkeypatch, 3)
    assert main(["train", "--out", str(out), "--steps", "5", "--snapshot-every", "2", "--force", "--seed", "1",
                 *TINY]) == 130
    now = _run_files(out)
    assert now["model.safetensors"] != earlier["model.safetensors"]
    assert now["snapshots"] == ["step_000002.safetensors"]  # this run's; the earlier run's went with it
    steps = [json.loads(line)["step"] for line in now["metrics.jsonl"].decode().splitlines()]
    assert steps == [0, 1, 2]  # this run's metrics only
    state = json.loads((out / "config.json").read_text())
    assert state["train"]["seed"] == 1
    from physskin_gs.model.checkpoint import checkpoint_metadata

    assert int(checkpoint_metadata(out / "model.safetensors")["metrics"]["step"]) == 3

    monkeypatch.undo()
    assert main(["train", "--out", str(out), "--steps", "3", "--resume", *TINY]) == 0  # and it resumes


def test_train_options_are_checked_before_any_folder_is_made(tmp_path, capsys):
    for opt, val in (("--lr", "nan"), ("--lr", "-1"), ("--threads", "-2"), ("--handles", "0"),
                     ("--snapshot-every", "0"), ("--log-every", "0"), ("--max-minutes", "-1"),
                     ("--ckpt-every", "nan"), ("--width", "0")):
        out = tmp_path / f"o{opt}{val}"
        args = [a for a in TINY]
        if opt in args:  # replace TINY's own value
            i = args.index(opt)
            del args[i:i + 2]
        assert main(["train", "--out", str(out), "--steps", "2", *args, opt, val]) == 2, (opt, val)
        assert opt in capsys.readouterr().err
        assert not out.exists(), (opt, val)


def test_export_samples_with_force_replaces_the_earlier_set_whole(tmp_path):
    from physskin_gs.cli.train import export_samples
    from physskin_gs.model.data import synthetic_shape

    folder = tmp_path / "s"
    export_samples([synthetic_shape(k, seed=i) for i, k in enumerate(["sphere", "box", "ellipsoid"])], folder)
    (folder / "notes.txt").write_text("mine")
    export_samples([synthetic_shape("box", seed=5)], folder)
    assert sorted(p.name for p in folder.iterdir()) == ["000_box.safetensors", "notes.txt"]


def test_outputs_refuse_special_files_and_count_dangling_links(tmp_path):
    from physskin_gs.cli._common import refuse_existing

    fifo = tmp_path / "fifo.ply"
    os.mkfifo(fifo)
    with pytest.raises(OptionError, match="not a regular file"):
        refuse_existing(fifo, True)
    link = tmp_path / "dang.ply"
    link.symlink_to(tmp_path / "missing" / "x.ply")
    with pytest.raises(OptionError, match="symlink to a missing file"):
        refuse_existing(link, False)
    refuse_existing(link, True)  # --force may replace the link itself
    demo = REPO / "data" / "spot_mesh2splat_10k.splat"
    assert main(["convert", str(demo), str(fifo), "--force"]) == 2
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_checkpoints_are_written_with_the_usual_file_mode(tmp_path):
    """safetensors recreates the file it writes (0600); atomic_output gives it the mode of every other output."""
    from physskin_gs.io._shared import FILE_MODE
    from physskin_gs.model.checkpoint import _atomic_save

    p = tmp_path / "m.safetensors"
    _atomic_save({"a": torch.zeros(3)}, p, {})
    assert stat.S_IMODE(os.stat(p).st_mode) == FILE_MODE


def test_the_png_fallback_never_writes_into_an_earlier_folder(tmp_path, monkeypatch):
    import numpy as np

    from physskin_gs.render import video

    monkeypatch.setattr(video, "_has_ffmpeg", lambda: False)
    earlier = tmp_path / "tv_frames"
    earlier.mkdir()
    (earlier / "frame0001.png").write_bytes(b"mine")
    frames = [np.full((16, 16, 3), 100, np.uint8)] * 2
    with pytest.warns(UserWarning, match="tv_frames_2"):
        got = video.write_video(frames, tmp_path / "tv.mp4", fps=10)
    assert Path(got).name == "tv_frames_2" and len(list(Path(got).glob("*.png"))) == 2
    assert (earlier / "frame0001.png").read_bytes() == b"mine"


def test_viewer_mode_refuses_headless_outputs(tmp_path, capsys):
    demo = REPO / "data" / "spot_mesh2splat_10k.splat"
    assert main(["animate", str(demo), "--export", str(tmp_path / "e"), "--frames", "2"]) == 2
    err = capsys.readouterr().err
    assert "--headless" in err and "--record-dir" in err
    assert not (tmp_path / "e").exists()


def test_an_interrupted_overwrite_keeps_the_earlier_sequence_whole(tmp_path, monkeypatch, capsys):
    """`animate --overwrite` deleted the earlier sequence as soon as it was set up, so a Ctrl-C left a few new
    frames and no sequence.json. Now the new run is written into a hidden folder and replaces the earlier one only
    when complete: interrupted, the earlier frames and sequence.json are byte-identical and nothing else is left;
    complete, exactly the new run's files are there."""
    from physskin_gs import pipeline

    demo = REPO / "data" / "spot_mesh2splat_10k.splat"
    e = tmp_path / "e"
    base = ["animate", str(demo), "--headless", "--export", str(e), "--handles", "4", "--cubature", "64"]
    assert main(base + ["--frames", "3"]) == 0
    before = {p.name: p.read_bytes() for p in e.iterdir() if not p.name.startswith(".")}
    assert sorted(before) == ["frame0001.ply", "frame0002.ply", "frame0003.ply", "sequence.json"]
    (e / "notes.txt").write_text("mine")

    calls = {"n": 0}
    real = pipeline.AnimatedScene.step

    def step(self, *a, **k):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(self, *a, **k)

    monkeypatch.setattr(pipeline.AnimatedScene, "step", step)
    capsys.readouterr()
    assert main(base + ["--frames", "5", "--overwrite"]) == 130
    assert "keeps the earlier run's files as they were" in capsys.readouterr().err
    after = {p.name: p.read_bytes() for p in e.iterdir() if p.name not in ("notes.txt",) and not p.name.startswith(".")}
    assert after == before
    assert [p.name for p in e.iterdir() if p.name.startswith(".physskin-gs-new-")] == []

    monkeypatch.undo()
    assert main(base + ["--frames", "2", "--overwrite"]) == 0
    names = sorted(p.name for p in e.iterdir() if not p.name.startswith("."))
    assert names == ["frame0001.ply", "frame0002.ply", "notes.txt", "sequence.json"]
    assert json.loads((e / "sequence.json").read_text())["frames"] == 2


def test_train_on_a_named_file_that_cannot_be_read_is_an_error(tmp_path, capsys):
    """`train --data trunc.ply` printed one "skip" line and trained on the procedural shapes alone, exit 0."""
    bad = tmp_path / "trunc.splat"
    bad.write_bytes((REPO / "data" / "spot_mesh2splat_10k.splat").read_bytes()[:1000])  # not a multiple of 32 B
    rc = main(["train", "--out", str(tmp_path / "o"), "--data", str(bad), "--procedural", "0", "--steps", "1",
               "--threads", "1"])
    assert rc == 2
    assert "cannot train on" in capsys.readouterr().err
    assert not (tmp_path / "o" / "model.safetensors").exists()


def test_a_usd_write_error_becomes_a_clean_message(monkeypatch, tmp_path):
    """USD reports a full disk only on its own diagnostic output, with an empty exception: the writer says what it
    was (convert gave a raw traceback, animate "could not write frame 7 ...: " with no reason)."""
    import errno
    import shutil
    from collections import namedtuple

    usd = pytest.importorskip("physskin_gs.io.usd")
    Usage = namedtuple("Usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: Usage(10 << 20, 10 << 20, 4096))
    err = usd._usd_error(None, RuntimeError(""), str(tmp_path / "a.usdc"))
    assert err.errno == errno.ENOSPC and "no space left" in err.strerror
    monkeypatch.setattr(shutil, "disk_usage", lambda p: Usage(10 << 20, 0, 10 << 20))
    err = usd._usd_error(None, RuntimeError("Failed to save layer\nmore"), str(tmp_path / "a.usdc"))
    assert err.strerror == "USD could not write the file: Failed to save layer"


def test_small_input_and_name_mistakes_get_their_own_message(tmp_path, capsys):
    import numpy as np

    demo = REPO / "data" / "spot_mesh2splat_10k.splat"
    fifo = tmp_path / "f.ply"
    os.mkfifo(fifo)
    assert main(["info", str(fifo)]) == 2
    assert "not a regular file" in capsys.readouterr().err  # (it said "empty file (0 bytes)")
    assert main(["convert", str(demo), ""]) == 2
    assert "empty value" in capsys.readouterr().err
    assert main(["convert", str(demo), str(tmp_path / "d" / ".ply")]) == 2
    assert "only an extension" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()
    out = tmp_path / "OUT.NPZ"  # upper case, as .PLY / .MP4 are accepted; savez used to write OUT...NPZ.npz beside
    assert main(["skin", str(demo), "-o", str(out), "--handles", "4"]) == 0
    assert np.load(out)["weights"].shape == (10000, 5)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["OUT.NPZ", "f.ply"]


def test_overwrite_into_one_folder_for_frames_and_pngs_replaces_both_kinds(tmp_path):
    """--export and --png naming one folder: one stage, and both kinds of earlier files go (7 -> 5 files)."""
    demo = REPO / "data" / "spot_mesh2splat_10k.splat"
    d = tmp_path / "same"
    base = ["animate", str(demo), "--headless", "--export", str(d), "--png", str(d), "--width", "64", "--height",
            "64", "--handles", "4", "--cubature", "64"]
    assert main(base + ["--frames", "3"]) == 0
    assert main(base + ["--frames", "2", "--overwrite"]) == 0
    assert sorted(p.name for p in d.iterdir()) == ["frame0001.ply", "frame0001.png", "frame0002.ply",
                                                   "frame0002.png", "sequence.json"]


def test_evaluate_refuses_the_tet_basis_for_a_splat_before_any_work(capsys):
    """The error came only after the other bases had run (a fresh user's find)."""
    demo = REPO / "data" / "spot_mesh2splat_10k.splat"
    assert main(["evaluate", "--reference", "fem", "--bases", "modes,tet", "--data", str(demo),
                 "--fit-seconds", "0"]) == 2
    err = capsys.readouterr()
    assert "--bases tet needs mesh inputs" in err.err and "spot_mesh2splat_10k.splat:" not in err.out


def _seq(folder: Path, frames, tag: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for f in frames:
        (folder / f"frame{f:04d}.ply").write_text(f"{tag}{f}")
    (folder / "sequence.json").write_text(json.dumps({"files": [f"frame{f:04d}.ply" for f in frames], "tag": tag}))


def _consistent(folder: Path) -> bool:
    """sequence.json, when there is one, lists exactly the frames beside it, all of its own run."""
    meta = folder / "sequence.json"
    if not meta.exists():
        return True
    m = json.loads(meta.read_text())
    frames = sorted(p.name for p in folder.glob("frame*.ply"))
    return frames == sorted(m["files"]) and all((folder / n).read_text().startswith(m["tag"]) for n in frames)


@pytest.mark.parametrize("crash_at", range(9))
def test_an_overwrite_commit_killed_half_way_never_leaves_a_sequence_json_that_lies(tmp_path, monkeypatch, crash_at):
    """The commit of a staged --overwrite run (a fresh user's find: a Ctrl-C at its first unlink left the earlier
    sequence.json beside 2 of its 5 frames). Ctrl-C and SIGTERM now wait for it (interrupts.deferred); a kill or a
    failure at any of its file operations leaves either no sequence.json or one that lists exactly its own frames."""
    from physskin_gs.cli import animate

    folder, stage = tmp_path / "E", tmp_path / "E" / ".physskin-gs-new-x"
    _seq(folder, range(1, 6), "old")
    _seq(stage, range(1, 4), "new")
    ops = {"n": 0}
    real_replace, real_unlink = os.replace, Path.unlink

    def count():
        ops["n"] += 1
        if ops["n"] > crash_at:
            raise RuntimeError("killed")

    monkeypatch.setattr(animate.os, "replace", lambda a, b: (count(), real_replace(a, b))[1])
    monkeypatch.setattr(Path, "unlink", lambda self, *a, **k: (count(), real_unlink(self, *a, **k))[1])
    try:
        animate._commit_stage(stage, folder, [(animate._SEQUENCE_FILE, True)])
        done = True
    except RuntimeError:
        done = False
    monkeypatch.undo()
    assert _consistent(folder), sorted(p.name for p in folder.iterdir())
    if done:
        assert json.loads((folder / "sequence.json").read_text())["tag"] == "new"
        assert sorted(p.name for p in folder.glob("frame*.ply")) == [f"frame{f:04d}.ply" for f in (1, 2, 3)]


def test_an_interrupt_after_the_last_frame_keeps_the_earlier_sequence(tmp_path, monkeypatch, capsys):
    """Between the last frame and the commit (frames closed, sequence.json being written) an interrupt left the
    stage behind without a word; now the earlier run stays, the stage goes and the log says so."""
    from physskin_gs.cli import animate

    demo = REPO / "data" / "spot_mesh2splat_10k.splat"
    e = tmp_path / "e"
    base = ["animate", str(demo), "--headless", "--export", str(e), "--handles", "4", "--cubature", "64"]
    assert main(base + ["--frames", "2"]) == 0
    before = {p.name: p.read_bytes() for p in e.iterdir()}

    def stop(meta):
        raise KeyboardInterrupt

    monkeypatch.setattr(animate, "sequence_json_text", stop)
    capsys.readouterr()
    assert main(base + ["--frames", "3", "--overwrite"]) == 130
    assert "keeps the earlier run's files as they were" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in e.iterdir()} == before


def test_export_samples_needs_no_run_folder(tmp_path, capsys):
    """`--export-samples` required --out and made it, empty; it writes the shapes and exits."""
    assert main(["train", "--synthetic", "--export-samples", str(tmp_path / "s"), "--threads", "1"]) == 0
    assert len(list((tmp_path / "s").glob("*.safetensors"))) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]
    assert main(["train", "--synthetic", "--steps", "1"]) == 2
    assert "--out DIR is required" in capsys.readouterr().err


def _textured_obj(folder: Path) -> Path:
    """A tetrahedron OBJ with texture coordinates, a material library and its texture image (a real PNG)."""
    import numpy as np
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((4, 4, 3), (200, 30, 30), np.uint8)).save(folder / "tex map.png")
    (folder / "mat.mtl").write_text("newmtl red\nKd 1 1 1\nmap_Kd -s 1 1 1 tex map.png\n")
    (folder / "t.obj").write_text(
        "mtllib mat.mtl\nv 0 0 0\nv 1 0 0\nv 0 1 0\nv 0 0 1\nvt 0 0\nvt 1 0\nvt 0 1\nvt 1 1\nusemtl red\n"
        "f 1/1 3/3 2/2\nf 1/1 2/2 4/4\nf 1/1 4/4 3/3\nf 2/2 3/3 4/4\n")
    return folder / "t.obj"


def test_a_meshs_material_library_and_texture_are_inputs(tmp_path, capsys):
    """`render ball.obj -o material_0.png --force` replaced the mesh's texture with the render (and `evaluate
    --json` the same): the files a mesh reads beside it are inputs of the command, never outputs."""
    from physskin_gs.io.mesh import mesh_sidecars

    obj = _textured_obj(tmp_path / "m")
    assert sorted(Path(p).name for p in mesh_sidecars(str(obj))) == ["mat.mtl", "tex map.png"]
    tex = tmp_path / "m" / "tex map.png"
    before = tex.read_bytes()
    assert main(["render", str(obj), "-o", str(tex), "--force", "--width", "32", "--height", "32"]) == 2
    assert "refusing to overwrite the input file" in capsys.readouterr().err
    assert tex.read_bytes() == before
    # a PLY's texture (comment TextureFile) too
    ply = tmp_path / "m" / "p.ply"
    ply.write_text("ply\nformat ascii 1.0\ncomment TextureFile tex map.png\nelement vertex 3\nproperty float x\n"
                   "property float y\nproperty float z\nelement face 1\nproperty list uchar int vertex_indices\n"
                   "end_header\n0 0 0\n1 0 0\n0 1 0\n3 0 1 2\n")
    assert [Path(p).name for p in mesh_sidecars(str(ply))] == ["tex map.png"]
    assert mesh_sidecars(str(tmp_path / "missing.obj")) == []


def test_evaluate_json_is_a_json_file_and_may_replace_its_own_earlier_results(tmp_path, capsys):
    """`evaluate --json` took any name (`--json shape.obj --force` replaced a file it never wrote), and its own
    earlier results in the --data folder were refused with --force as "the input file"."""
    obj = _textured_obj(tmp_path / "ev")
    for bad in ("t.obj", "out.png", "results"):
        assert main(["evaluate", "--data", str(tmp_path / "ev"), "--json", str(tmp_path / "ev" / bad), "--force",
                     "--fit-seconds", "0", "--points", "500"]) == 2
        assert "name a .json file" in capsys.readouterr().err
    assert obj.read_text().startswith("mtllib")
    res = tmp_path / "ev" / "results.json"
    args = ["evaluate", "--data", str(tmp_path / "ev"), "--json", str(res), "--fit-seconds", "0", "--points", "500"]
    assert main(args) == 0
    first = json.loads(res.read_text())
    assert main(args + ["--force"]) == 0, capsys.readouterr().err
    assert json.loads(res.read_text()).keys() == first.keys()


@pytest.mark.parametrize("fault", ["interrupt", "failure"])
def test_the_video_is_replaced_with_the_folders_or_said_to_be_the_earlier_one(tmp_path, monkeypatch, capsys, fault):
    """`--export X --png P --video X.mp4 --overwrite`: an interrupt while the video was encoded had already let the
    new frames into X/ and P/ while X.mp4 stayed the earlier run's, without a word; now an interrupt there keeps
    every earlier output, and a video that fails still lets the frames in and says that X.mp4 is the earlier run's."""
    from physskin_gs.cli import animate
    from physskin_gs.errors import PhysSkinError

    demo = REPO / "data" / "spot_mesh2splat_10k.splat"
    e, png, video = tmp_path / "e", tmp_path / "p", tmp_path / "clip.mp4"
    base = ["animate", str(demo), "--headless", "--export", str(e), "--png", str(png), "--video", str(video),
            "--width", "32", "--height", "32", "--handles", "4", "--cubature", "64"]
    assert main(base + ["--frames", "2"]) == 0
    before = {p: {q.name: q.read_bytes() for q in p.iterdir()} for p in (e, png)}
    clip = video.read_bytes()

    def broken(path, frames, fps):
        if fault == "interrupt":
            raise KeyboardInterrupt
        raise PhysSkinError(f"could not write video {path}: the new file held 0 of {len(frames)} frames")

    monkeypatch.setattr(animate, "_write_video", broken)
    capsys.readouterr()
    rc = main(base + ["--frames", "3", "--overwrite"])
    err = capsys.readouterr().err
    assert video.read_bytes() == clip
    after = {p: {q.name: q.read_bytes() for q in p.iterdir()} for p in (e, png)}
    if fault == "interrupt":
        assert rc == 130 and after == before, err
        assert f"the video {video} was not written (the earlier file there is kept as it was)" in err
    else:
        assert rc == 2 and len(json.loads((e / "sequence.json").read_text())["files"]) == 3, err
        assert f"{video} still holds the earlier run's video" in err and f"3 simulated frames are in {e}/" in err


def test_an_interrupt_after_the_rename_says_the_file_is_whole(tmp_path, monkeypatch, capsys):
    """`convert --force` interrupted just after its rename said only "interrupted" (exit 130), and a user took the
    earlier file to be kept; now the line names the file that was written in full."""
    from physskin_gs.cli import convert

    demo = REPO / "data" / "spot_mesh2splat_10k.splat"
    out = tmp_path / "x.ply"
    assert main(["convert", str(demo), str(out)]) == 0

    def late(path, what):
        raise KeyboardInterrupt

    monkeypatch.setattr(convert, "verify_written", late)
    capsys.readouterr()
    assert main(["convert", str(demo), str(out), "--force", "--up", "z"]) == 130
    assert f"interrupted, after {out} was written in full" in capsys.readouterr().err
    # an interrupt before any file is whole says nothing more
    monkeypatch.setattr(convert, "verify_written", lambda p, w: os.path.getsize(p))
    monkeypatch.setattr("physskin_gs.io.inria_ply.write_atomic", lambda *a, **k: (_ for _ in ()).throw(
        KeyboardInterrupt()))
    assert main(["convert", str(demo), str(tmp_path / "y.ply")]) == 130
    assert capsys.readouterr().err.strip().endswith("interrupted")


def test_an_earlier_runs_other_frames_in_the_folder_are_said(tmp_path, capsys):
    """`--export D --png D`, then `--export D --overwrite`: D held the first run's PNG frames beside the second
    run's PLY frames, without a word."""
    demo = REPO / "data" / "spot_mesh2splat_10k.splat"
    d = tmp_path / "d"
    base = ["animate", str(demo), "--headless", "--width", "32", "--height", "32", "--handles", "4", "--cubature",
            "64"]
    assert main(base + ["--frames", "3", "--export", str(d), "--png", str(d)]) == 0
    assert "also holds" not in capsys.readouterr().err
    assert main(base + ["--frames", "2", "--export", str(d), "--overwrite"]) == 0
    err = capsys.readouterr().err
    assert f"{d}/ also holds 3 PNG frames of an earlier run (frame0001.png ...)" in err, err


def test_a_long_legal_output_name_is_written(tmp_path):
    """A 244-byte output name is legal (255 is the limit), but its lock and temporary files added 20-odd bytes and
    the write was refused ("File name too long"): companions of long names are shortened with a hash."""
    demo = REPO / "data" / "spot_mesh2splat_10k.splat"
    out = tmp_path / ("a" * 240 + ".ply")
    assert main(["convert", str(demo), str(out)]) == 0
    assert out.is_file() and [p.name for p in tmp_path.iterdir()] == [out.name]  # no companion left behind


def test_a_killed_runs_write_check_file_is_removed_by_the_next_run(tmp_path):
    """A `kill -9` between a write check's create and remove left `.physskin-write-test-*` files in the output
    folder: the next run removes those of processes that are gone (and leaves a live process's alone)."""
    import subprocess
    import sys

    from physskin_gs.cli._common import WRITE_PROBE

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = tmp_path / f"{WRITE_PROBE}{int(gone.stdout)}-abc123"
    dead.write_bytes(b"")
    live = tmp_path / f"{WRITE_PROBE}1-abc123"  # pid 1 is always alive
    live.write_bytes(b"")
    demo = REPO / "data" / "spot_mesh2splat_10k.splat"
    assert main(["convert", str(demo), str(tmp_path / "x.ply")]) == 0
    assert not dead.exists() and live.exists()
