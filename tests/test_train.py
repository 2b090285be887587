"""Training step, CLI training, resume, determinism and a 2-process torchrun job (method.md 6)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from physskin_gs.cli import main
from physskin_gs.model import load_checkpoint
from physskin_gs.model.checkpoint import checkpoint_metadata
from physskin_gs.model.data import synthetic_shape
from physskin_gs.model.losses import elastic_loss, network_fields, orthogonality_loss, sample_transforms
from physskin_gs.model.network import NetConfig, PhysSkinNet
from physskin_gs.model.trainer import TrainConfig, lr_at, train_step


pytestmark = pytest.mark.usefixtures("one_torch_thread")

TINY = ["--handles", "6", "--width", "32", "--heads", "2", "--latents", "8", "--enc-layers", "1",
        "--handle-tokens", "8", "--head-hidden", "32", "--ff-mult", "1", "--cubature", "64", "--transforms", "8",
        "--surface-points", "128", "--val-every", "0", "--synthetic", "--threads", "1", "--log-every", "1"]


def tiny_net(seed=0):
    torch.manual_seed(seed)
    return PhysSkinNet(NetConfig(num_handles=6, width=32, heads=2, latents=8, enc_layers=1, handle_tokens=8,
                                 head_hidden=32, ff_mult=1))


def _eval_losses(net, shape, X, Z):
    with torch.no_grad():
        cache = net.encode(shape.surface)
        W, G = network_fields(net, cache, X)
        return float(elastic_loss(X, W, G, Z, blend=0.0)), float(orthogonality_loss(W[:, :-1]))


@pytest.mark.parametrize("combine", ["config", "sum"])
def test_few_steps_lower_the_loss(combine):
    torch.set_num_threads(1)
    net = tiny_net()
    shape = synthetic_shape("sphere", n_surface=128, n_volume=400)
    g = torch.Generator().manual_seed(0)
    X = shape.volume[torch.randperm(shape.volume.shape[0], generator=g)[:200]]
    Z = sample_transforms(16, 7, 0.02, g)
    pot0, orth0 = _eval_losses(net, shape, X, Z)
    cfg = TrainConfig(steps=40, lr=2e-3, lr_min=2e-3, cubature=128, transforms=16, surface_points=128,
                      augment=False, combine=combine, smooth=False)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    recs = [train_step(net, opt, shape, cfg, i, g) for i in range(15)]
    pot1, orth1 = _eval_losses(net, shape, X, Z)
    assert pot1 < 0.5 * pot0
    if combine == "config":
        assert all(r["cos_pot"] > 0 and r["cos_orth"] > 0 for r in recs[1:])


def test_orthogonality_warmup_lowers_orth_loss():
    net = tiny_net(1)
    shape = synthetic_shape("box", n_surface=128, n_volume=400)
    g = torch.Generator().manual_seed(0)
    X = shape.volume[:200]
    Z = sample_transforms(4, 7, 0.02, g)
    _, orth0 = _eval_losses(net, shape, X, Z)
    cfg = TrainConfig(steps=20, lr=3e-3, lr_min=3e-3, cubature=200, transforms=4, surface_points=128,
                      augment=False, orth_only_frac=1.0)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    for i in range(20):
        train_step(net, opt, shape, cfg, i, g)
    _, orth1 = _eval_losses(net, shape, X, Z)
    assert orth1 < 0.5 * orth0


def test_lr_schedule():
    cfg = TrainConfig(steps=1000, lr=5e-4, lr_min=5e-5, warmup_frac=0.01)
    assert lr_at(0, cfg) == pytest.approx(5e-4 / 10)
    assert lr_at(10, cfg) == pytest.approx(5e-4)
    assert lr_at(1000, cfg) == pytest.approx(5e-5)
    assert 5e-5 < lr_at(500, cfg) < 5e-4


def test_cli_train_resume_and_determinism(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    assert main(["train", "--out", str(a), "--steps", "5", "--stop-after", "3", *TINY]) == 0
    for f in ("model.safetensors", "train_state.safetensors", "config.json", "metrics.jsonl"):
        assert (a / f).is_file(), f
    lines = [json.loads(l) for l in (a / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines] == [0, 1, 2]
    # resume to 5 steps == uninterrupted 5 steps (deterministic seed, restored Adam + RNG state)
    capsys.readouterr()
    assert main(["train", "--out", str(a), "--steps", "5", "--resume", *TINY]) == 0
    assert "ignored" not in capsys.readouterr().err  # the run's own settings given again: nothing to say
    assert main(["train", "--out", str(b), "--steps", "5", *TINY]) == 0
    ma, mb = load_checkpoint(a / "model.safetensors"), load_checkpoint(b / "model.safetensors")
    for k, v in ma.state_dict().items():
        assert torch.allclose(v, mb.state_dict()[k], atol=1e-6), k
    # options a resumed run does not take are named (a fresh user's --lr 0.1 was dropped without a word)
    tiny = [v if v != "32" else "48" for v in TINY]  # --width 48, --head-hidden 48
    assert main(["train", "--out", str(a), "--steps", "6", "--resume", "--lr", "0.1", *tiny]) == 0
    err = capsys.readouterr().err
    assert "--lr ignored (the run has lr = 0.0005" in err and "--width ignored (the run has width = 32" in err
    assert "--steps" not in err


def test_cli_train_bad_options(tmp_path, capsys):
    assert main(["train", "--out", str(tmp_path / "x"), "--steps", "2", "--resume", *TINY]) == 2
    assert "no checkpoint to resume" in capsys.readouterr().err
    assert main(["train", "--out", str(tmp_path / "y"), "--data", str(tmp_path / "nope"), "--steps", "1"]) == 2


def test_torchrun_two_processes(tmp_path):
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable))
    if torchrun is None:
        pytest.skip("torchrun not installed")
    exe = shutil.which("physskin-gs", path=os.path.dirname(sys.executable))
    out = tmp_path / "ddp"
    cmd = [torchrun, "--standalone", "--nproc_per_node=2", exe, "train", "--out", str(out), "--steps", "3", *TINY,
           "--combine", "config"]  # the per-loss gradient all-reduce path
    env = dict(os.environ, OMP_NUM_THREADS="1")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["world_size"] == 2
    lines = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [0, 1, 2]
    assert load_checkpoint(out / "model.safetensors") is not None


def test_existing_run_is_not_restarted_silently(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--out", str(out), "--steps", "2", *TINY]) == 0
    before = (out / "model.safetensors").read_bytes()
    assert main(["train", "--out", str(out), "--steps", "2", *TINY]) == 2
    assert "--resume" in capsys.readouterr().err
    assert (out / "model.safetensors").read_bytes() == before  # nothing replaced
    assert main(["train", "--out", str(out), "--steps", "2", "--force", *TINY]) == 0


def test_export_samples_with_force_replaces_only_shape_samples(tmp_path, capsys):
    """A user's trained run folder given as --export-samples: without --force a model is not taken for samples
    (written), with --force only earlier shape samples are replaced, and the model and its optimiser state stay
    byte for byte (they were deleted as ``*.safetensors``); --samples on that folder trains on the samples and
    says it skipped the model."""
    from physskin_gs.cli.train import load_sample_dir

    run = tmp_path / "run"
    assert main(["train", "--out", str(run), "--steps", "2", *TINY]) == 0
    kept = {n: (run / n).read_bytes() for n in ("model.safetensors", "train_state.safetensors")}
    assert main(["train", "--out", str(tmp_path / "x"), "--export-samples", str(run), *TINY]) == 0  # no samples yet
    assert main(["train", "--out", str(tmp_path / "y"), "--export-samples", str(run), *TINY]) == 2
    assert "already holds shape samples" in capsys.readouterr().err
    assert main(["train", "--out", str(tmp_path / "z"), "--export-samples", str(run), "--force", *TINY]) == 0
    assert {n: (run / n).read_bytes() for n in kept} == kept
    assert len(list(run.glob("0*_*.safetensors"))) == 3
    capsys.readouterr()
    assert [s.name for s in load_sample_dir(run)] == ["sphere", "box", "ellipsoid"]
    assert "skipping 2 safetensors files that are not shape samples" in capsys.readouterr().err


def test_export_samples_and_train_from_them_with_a_subspace_target(tmp_path):
    """--export-samples writes the shapes; --samples trains from them (no mesh files); --w-sub trains toward
    each shape's eigen basis (cached) and lowers the subspace loss on that shape."""
    from physskin_gs.cli.train import attach_eigen_target, load_sample_dir
    from physskin_gs.model.losses import subspace_loss

    samples = tmp_path / "samples"
    assert main(["train", "--out", str(tmp_path / "x"), "--export-samples", str(samples), *TINY]) == 0
    shapes = load_sample_dir(samples)
    assert [s.name for s in shapes] == ["sphere", "box", "ellipsoid"]
    ref = synthetic_shape("box", seed=1)
    assert torch.equal(shapes[1].volume, ref.volume) and torch.equal(shapes[1].surface, ref.surface)

    torch.manual_seed(0)
    net = tiny_net()
    shape = attach_eigen_target(shapes[0], 6, cache_dir=str(tmp_path / "targets"), log=lambda *a: None)
    # 6 learned columns + the constant, give or take a cluster of equal eigenvalues (the sphere's l = 1, 2)
    V, H = shape.target.shape
    assert V == shape.volume.shape[0] and 3 <= H <= 11
    assert torch.all(shape.target[:, -1] == 1.0)  # the constant handle last
    again = attach_eigen_target(shapes[0], 6, cache_dir=str(tmp_path / "targets"), log=lambda *a: None)
    assert torch.equal(again.target, shape.target)  # from the cache

    def sub_now():
        with torch.no_grad():
            cache = net.encode(shape.surface[:128])
            W, _ = network_fields(net, cache, shape.volume[:400], scheme="forward")
            return float(subspace_loss(W, shape.target[:400]))

    s0 = sub_now()
    cfg = TrainConfig(steps=60, lr=3e-3, lr_min=3e-3, cubature=200, transforms=4, surface_points=128,
                      augment=False, smooth=False, orth_only_frac=0.0, w_pot=0.0, w_orth=1.0, w_sub=10.0)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    g = torch.Generator().manual_seed(0)
    recs = [train_step(net, opt, shape, cfg, i, g) for i in range(60)]
    assert "sub" in recs[0] and "pot" not in [k for k in recs[0] if k.startswith("cos_")]
    assert sub_now() < 0.6 * s0

    out = tmp_path / "run"
    assert main(["train", "--out", str(out), "--steps", "3", "--samples", str(samples), "--w-sub", "1e3",
                 *[a for a in TINY if a != "--synthetic"]]) == 0
    recs = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
    assert all("sub" in r for r in recs if not r.get("val"))


def test_a_held_out_shape_named_for_training_says_how_to_include_it(tmp_path, capsys):
    """`train --data c3d_spot.obj` (a held-out evaluation mesh): the refusal names --include-held-out instead of
    calling the usable mesh unusable; a checkpoint folder given as --checkpoint names the file in it."""
    spot = Path(__file__).resolve().parent / "data" / "c3d_spot.obj"
    assert main(["train", "--out", str(tmp_path / "run"), "--data", str(spot), "--steps", "1", "--procedural", "0",
                 *[a for a in TINY if a != "--synthetic"]]) == 2
    err = capsys.readouterr().err
    assert "held-out" in err and "--include-held-out" in err
    run = tmp_path / "r"
    assert main(["train", "--out", str(run), "--steps", "1", *TINY]) == 0
    assert main(["skin", str(spot), "-o", str(tmp_path / "w.npz"), "--skinning", "network",
                 "--checkpoint", str(run)]) == 2
    assert f"is a folder; give the checkpoint file in it ({run / 'model.safetensors'})" in capsys.readouterr().err


def test_train_caches_its_shapes_in_the_user_cache_not_the_working_folder(tmp_path, monkeypatch, capsys):
    """`train --data MESH` wrote ./.cache/shapes wherever it was started ("files go where you name them"); the
    sampled shapes now go to the user cache ($PHYSSKIN_CACHE_DIR/shapes here), and the working folder stays empty."""
    from pathlib import Path

    mesh = Path(__file__).resolve().parent / "data" / "robosuite_lemon.stl"
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("PHYSSKIN_CACHE_DIR", str(tmp_path / "cache"))
    tiny = [a for a in TINY if a != "--synthetic"]
    assert main(["train", "--out", str(tmp_path / "run"), "--steps", "1", "--data", str(mesh), "--procedural", "0",
                 "--include-held-out", *tiny]) == 0
    assert list(work.iterdir()) == []
    assert list((tmp_path / "cache" / "shapes").glob("*.safetensors"))


def test_resume_keeps_the_runs_own_schedule_and_refuses_what_it_cannot_do(tmp_path, capsys):
    """A fresh user's pass: ``--resume`` without ``--steps`` lengthened a 30-step run to 4000 steps (the learning
    rate schedule and the loss blend follow the step count); ``--steps`` below the run's step reported success and
    rewrote config.json; a finished run resumed says there is nothing to do; a run stopped before its first
    checkpoint names --force; --data given on resume is named as ignored; the recorded time carries on from the
    training state, not from the last metrics line."""
    run = tmp_path / "run"
    assert main(["train", "--synthetic", "--out", str(run), "--steps", "6", "--stop-after", "2", *TINY]) == 0
    capsys.readouterr()
    assert main(["train", "--out", str(run), "--resume", "--stop-after", "2", *TINY]) == 0
    out = capsys.readouterr().out
    assert "steps 2 -> 6" in out, out
    assert json.loads((run / "config.json").read_text())["train"]["steps"] == 6
    state = checkpoint_metadata(run / "model.safetensors")["metrics"]
    assert state["step"] == 4
    # the recorded time is the state's own: it never goes back
    from physskin_gs.model.checkpoint import read_checkpoint

    extra = json.loads(read_checkpoint(run / "train_state.safetensors")[1]["extra"])
    assert extra["elapsed_s"] == pytest.approx(state["elapsed_s"])
    from physskin_gs.model.checkpoint import CheckpointError

    with pytest.raises(CheckpointError, match="a training state .* use model.safetensors beside it"):
        load_checkpoint(run / "train_state.safetensors")
    cfg_before = (run / "config.json").read_text()
    assert main(["train", "--out", str(run), "--resume", "--steps", "3", *TINY]) == 2
    assert "already at step 4" in capsys.readouterr().err
    assert (run / "config.json").read_text() == cfg_before
    assert main(["train", "--out", str(run), "--resume", "--data", str(tmp_path), *TINY]) == 0
    cap = capsys.readouterr()
    assert "--data ignored" in cap.err and "--synthetic" in cap.err
    assert "steps 4 -> 6" in cap.out
    assert main(["train", "--out", str(run), "--resume", *TINY]) == 0
    assert "nothing to do: the run" in capsys.readouterr().out
    # a run whose first checkpoint never came (killed before it): --resume says to use --force
    (tmp_path / "k").mkdir()
    (tmp_path / "k" / "config.json").write_text(cfg_before)
    assert main(["train", "--out", str(tmp_path / "k"), "--resume", *TINY]) == 2
    assert "stopped before its first checkpoint" in capsys.readouterr().err


def test_resume_refuses_a_model_and_state_of_different_steps(tmp_path, capsys):
    """The model and its training state are one pair: a save cut short by a second Ctrl-C left a step-36 model
    beside a step-31 state, and --resume trained on from the mismatch; now such a pair is refused, naming both
    steps and the way out (--init)."""
    import shutil

    run = tmp_path / "run"
    assert main(["train", "--synthetic", "--out", str(run), "--steps", "6", "--stop-after", "2", *TINY]) == 0
    older = tmp_path / "state_at_2.safetensors"
    shutil.copy(run / "train_state.safetensors", older)
    assert main(["train", "--out", str(run), "--resume", "--stop-after", "1", *TINY]) == 0
    shutil.copy(older, run / "train_state.safetensors")  # model at step 3, state at step 2
    capsys.readouterr()
    assert main(["train", "--out", str(run), "--resume", *TINY]) == 2
    err = capsys.readouterr().err
    assert "model.safetensors is at step 3 but train_state.safetensors at step 2" in err and "--init" in err


def test_a_saved_pair_survives_a_second_interrupt(tmp_path, monkeypatch):
    """A Ctrl-C while the pair is saved waits until both files are written: here one lands right after the model's
    write of a regular checkpoint, and a second one right after the model's write of the checkpoint the first one's
    handler saves (before, the second left a model one step ahead of its training state)."""
    import signal

    from physskin_gs.model import checkpoint as ck
    from physskin_gs.model.checkpoint import read_checkpoint

    real = ck.save_checkpoint
    calls = []

    def save_then_interrupt(model, path, *a, **k):
        out = real(model, path, *a, **k)
        if Path(path).name == "model.safetensors":
            calls.append(path)
            if len(calls) in (3, 4):
                os.kill(os.getpid(), signal.SIGINT)  # between the model's and the state's writes
        return out

    monkeypatch.setattr(ck, "save_checkpoint", save_then_interrupt)
    run = tmp_path / "run"
    try:
        code = main(["train", "--out", str(run), "--steps", "8", "--ckpt-every", "1e-9", *TINY])
    except KeyboardInterrupt:
        code = 130
    assert code == 130 and len(calls) == 4
    m = checkpoint_metadata(run / "model.safetensors")["metrics"]["step"]
    assert int(read_checkpoint(run / "train_state.safetensors")[1]["step"]) == m


def test_init_names_the_model_options_its_checkpoint_fixes(tmp_path, capsys):
    """``--init CKPT --handles 8 --width 64`` trained the checkpoint's own network without a word; the options it
    fixes are named now, as --resume names them."""
    a = tmp_path / "a"
    assert main(["train", "--out", str(a), "--steps", "1", *TINY]) == 0
    capsys.readouterr()
    tiny = [v if v != "6" else "8" for v in TINY]  # --handles 8
    assert main(["train", "--out", str(tmp_path / "b"), "--steps", "1", "--init", str(a / "model.safetensors"),
                 *tiny]) == 0
    err = capsys.readouterr().err
    assert "--init takes the checkpoint's network: --handles ignored (it has num_handles = 6)" in err
    assert load_checkpoint(tmp_path / "b" / "model.safetensors").config.num_handles == 6
