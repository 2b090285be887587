"""PhysSkinNet, NeuralSkinningField, checkpoints, per-object fit (method.md 4, 5)."""

import json
import math
import pathlib

import pytest
import torch

import physskin_gs
from physskin_gs.errors import CheckpointError, OptionError
from physskin_gs.model import (
    NeuralSkinningField,
    PhysSkinNet,
    default_checkpoint_path,
    fit_skinning,
    load_checkpoint,
    save_checkpoint,
    skinning_from_model,
    skinning_metrics,
)
from physskin_gs.model.data import synthetic_shape
from physskin_gs.model.network import NetConfig, oni_weight


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def tiny_net(seed=0, **kw):
    torch.manual_seed(seed)
    cfg = dict(num_handles=6, width=32, heads=2, latents=8, enc_layers=1, handle_tokens=8, head_hidden=32, ff_mult=1)
    cfg.update(kw)
    return PhysSkinNet(NetConfig(**cfg))


def test_forward_shapes_and_chunking():
    net = tiny_net()
    s = synthetic_shape("box", n_surface=128, n_volume=300)
    cache = net.encode(s.surface)
    assert cache["shape"].shape == (8, 32) and cache["handles"].shape == (8, 32)
    with torch.no_grad():
        full = net.decode(s.volume, cache)
        chunked = net.decode_chunked(s.volume, cache, chunk=37)
    assert full.shape == (s.volume.shape[0], 6)
    assert torch.allclose(full, chunked, atol=1e-6)


def test_default_model_size():
    n = sum(p.numel() for p in PhysSkinNet().parameters())
    assert 0.5e6 < n < 2.5e6  # fits the <= 20 MB checkpoint budget with room


@pytest.mark.parametrize("shape", [(6, 32), (32, 6)])
def test_oni_orthogonalises(shape):
    V = torch.randn(*shape, dtype=torch.float64)
    Wt = oni_weight(V, iters=12)
    G = Wt @ Wt.t() if shape[0] <= shape[1] else Wt.t() @ Wt
    assert torch.allclose(G, torch.eye(min(shape), dtype=torch.float64), atol=1e-3)


def test_neural_field_fixed_norms_and_units():
    net = tiny_net()
    s = synthetic_shape("ellipsoid", n_surface=64, n_volume=200)
    ref = s.volume
    field = skinning_from_model(net, s.surface, ref, chunk=50)
    assert isinstance(field, NeuralSkinningField) and field.num_handles == 7
    W = field.weights(ref)
    assert torch.allclose(W[:, -1], torch.ones(len(ref)))
    rms = W[:, :-1].pow(2).mean(0).sqrt()
    assert torch.allclose(rms, torch.ones(6), atol=1e-4)  # RMS 1 over the reference set
    # any other query set reuses the same scale (no per-call re-normalisation)
    sub = field.weights(ref[:23])
    assert torch.allclose(sub, W[:23], atol=1e-5)
    W2, G2 = field.weights_and_grads(ref[:40])
    assert torch.allclose(W2, W[:40], atol=1e-5)
    assert G2.shape == (40, 7, 3) and torch.all(G2[:, -1] == 0)


def test_neural_field_fd_grads_match_jvp():
    net = tiny_net()
    s = synthetic_shape("sphere", n_surface=64, n_volume=100)
    f_fd = skinning_from_model(net, s.surface, s.volume)
    f_jvp = skinning_from_model(net, s.surface, s.volume, grad_mode="jvp")
    X = s.volume[:30] * 0.9
    _, Gf = f_fd.weights_and_grads(X)
    _, Gj = f_jvp.weights_and_grads(X)
    assert (Gf - Gj).norm() / Gj.norm() < 1e-2


def test_save_load_roundtrip(tmp_path):
    net = tiny_net(seed=3)
    p = save_checkpoint(net, tmp_path / "m.safetensors", {"steps": 5}, {"h_spec": 0.9})
    back = load_checkpoint(p)
    sd0, sd1 = net.state_dict(), back.state_dict()
    assert sd0.keys() == sd1.keys()
    for k in sd0:
        assert torch.equal(sd0[k], sd1[k]), k
    assert back.config == net.config
    s = synthetic_shape("box", n_surface=64, n_volume=50)
    with torch.no_grad():
        assert torch.equal(net.eval()(s.surface, s.volume), back(s.surface, s.volume))


def test_bad_checkpoints_raise_checkpoint_error(tmp_path):
    from safetensors.torch import save_file

    with pytest.raises(CheckpointError, match="not found"):
        load_checkpoint(tmp_path / "missing.safetensors")
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"\x00\x01garbage" * 100)
    with pytest.raises(CheckpointError, match="junk.safetensors"):
        load_checkpoint(junk)
    foreign = tmp_path / "foreign.safetensors"
    save_file({"w": torch.zeros(3)}, str(foreign), metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match="not a physskin_gs"):
        load_checkpoint(foreign)
    pickled = tmp_path / "model.pt"
    torch.save(tiny_net().state_dict(), pickled)  # a pickle-based file is never loaded
    with pytest.raises(CheckpointError):
        load_checkpoint(pickled)
    # ours, but truncated
    good = save_checkpoint(tiny_net(), tmp_path / "good.safetensors")
    data = good.read_bytes()
    trunc = tmp_path / "trunc.safetensors"
    trunc.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError):
        load_checkpoint(trunc)
    # ours, but tensors do not match the configuration
    meta = {"physskin_gs": "PhysSkinNet", "format_version": "1", "config": json.dumps(tiny_net().config.to_dict())}
    bad = tmp_path / "bad.safetensors"
    save_file({"latents": torch.zeros(2, 2)}, str(bad), metadata=meta)
    with pytest.raises(CheckpointError, match="do not match"):
        load_checkpoint(bad)


def test_no_pickle_loading_in_package():
    root = pathlib.Path(physskin_gs.__file__).parent
    for f in list((root / "model").glob("*.py")) + list((root / "cli").glob("*.py")):
        text = f.read_text()
        text = text.replace("no pickle", "").replace("allow_pickle=False", "")  # the two safe spellings
        assert "torch.load(" not in text and "pickle" not in text, f


def test_default_checkpoint_path():
    p = default_checkpoint_path()
    assert p.name == "physskin_m16.safetensors" and p.parent.name == "data"
    assert p.parent.parent == pathlib.Path(physskin_gs.__file__).resolve().parents[1]


def test_fit_skinning_budgets_and_output():
    s = synthetic_shape("box", n_surface=128, n_volume=400)
    with pytest.raises(OptionError):
        fit_skinning(s.surface, s.volume, time_budget_s=None, steps=None)
    from dataclasses import replace

    from physskin_gs.model.fit import FIT_CONFIG

    cfg = replace(FIT_CONFIG, cubature=200, transforms=8)
    seen = []
    field = fit_skinning(s.surface, s.volume, time_budget_s=None, steps=12, progress=lambda i, r: seen.append(r),
                         config=cfg)
    assert len(seen) == 12 and list(seen[0]) and "cos_pot" not in seen[0]  # orthogonality-only warm-up
    W, G = field.weights_and_grads(s.volume[:50])
    assert W.shape == (50, 17) and G.shape == (50, 17, 3)
    assert torch.isfinite(W).all() and torch.isfinite(G).all()
    assert torch.allclose(W[:, -1], torch.ones(50))  # constant handle last
    W_all = field.weights(s.volume)
    m = skinning_metrics(W_all)
    assert set(m) == {"omega_orth_x1e2", "kappa_log", "h_spec"}
    from physskin_gs.model.losses import skinning_metrics as metrics_of_columns

    assert m == metrics_of_columns(W_all[:, :-1])  # the constant column is left out by default
    assert skinning_metrics(W_all, include_constant=True) == metrics_of_columns(W_all)
    assert 0 < m["h_spec"] <= 1 and m["omega_orth_x1e2"] >= 0
    # fine-tuning a network leaves the original untouched
    net = tiny_net()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    fit_skinning(s.surface, s.volume, time_budget_s=None, steps=2, init_model=net, config=cfg)
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())
