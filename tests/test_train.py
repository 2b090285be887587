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
