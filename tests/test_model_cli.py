"""`physskin-gs skin` and `physskin-gs evaluate` on real files with a tiny checkpoint (the shared torus; without the
shared data, the MIT pyvista hex nut from tests/data, also a closed genus-1 mesh)."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from physskin_gs.cli import main
from physskin_gs.model import save_checkpoint
from physskin_gs.model.network import NetConfig, PhysSkinNet


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def torus(mesh_file):
    return mesh_file("pybullet_torus.obj", fallback="pyvista_nut.ply")


@pytest.fixture
def tiny_ckpt(tmp_path):
    torch.manual_seed(0)
    net = PhysSkinNet(NetConfig(num_handles=6, width=32, heads=2, latents=8, enc_layers=1, handle_tokens=8,
                                head_hidden=32, ff_mult=1))
    return save_checkpoint(net, tmp_path / "tiny.safetensors", {"train": {"combine": "sum", "cubature": 100}})


def test_skin_mesh_and_splat(tmp_path, torus, splat_file, tiny_ckpt):
    out = tmp_path / "w.npz"
    assert main(["skin", str(torus), "-o", str(out), "--skinning", "network", "--checkpoint", str(tiny_ckpt)]) == 0
    z = np.load(out, allow_pickle=False)
    n = z["weights"].shape[0]
    assert z["weights"].shape == (n, 7) and z["grads"].shape == (n, 7, 3) and z["valid"].all()
    assert np.allclose(z["weights"][:, -1], 1.0) and np.all(z["grads"][:, -1] == 0)
    m = json.loads(str(z["metrics"]))
    assert 0 < m["excluding_constant"]["h_spec"] <= 1
    # the stored normalisation maps the vertices into about [-1, 1]
    import trimesh

    v = trimesh.load(str(torus), force="mesh").vertices
    vn = (v - z["center"]) / z["scale"]
    assert np.abs(vn).max() == pytest.approx(1.0, abs=0.02)
    # existing output is not overwritten without --force
    assert main(["skin", str(torus), "-o", str(out), "--skinning", "network", "--checkpoint", str(tiny_ckpt)]) == 2
    out2 = tmp_path / "s.npz"
    assert main(["skin", str(splat_file("spot_mesh2splat_10k.splat")), "-o", str(out2),
                 "--skinning", "network", "--checkpoint", str(tiny_ckpt)]) == 0
    assert np.load(out2)["weights"].shape == (10000, 7)


def test_skin_bad_inputs(tmp_path, tiny_ckpt, capsys):
    assert main(["skin", str(tmp_path / "nope.ply"), "-o", str(tmp_path / "o.npz")]) == 2
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"not a checkpoint")
    mesh = tmp_path / "tet.obj"
    mesh.write_text("v 0 0 0\nv 1 0 0\nv 0 1 0\nv 0 0 1\nf 1 2 3\nf 1 2 4\nf 1 3 4\nf 2 3 4\n")
    assert main(["skin", str(mesh), "-o", str(tmp_path / "o.npz"), "--skinning", "network", "--checkpoint", str(junk)]) == 2
    assert "junk.safetensors" in capsys.readouterr().err


def test_evaluate_network_vs_fit(tmp_path, torus, tiny_ckpt):
    js = tmp_path / "eval.json"
    assert main(["evaluate", "--checkpoint", str(tiny_ckpt), "--data", str(torus),
                 "--points", "300", "--fit-seconds", "2", "--transforms", "4", "--json", str(js)]) == 0
    r = json.loads(js.read_text())
    row = r["shapes"][0]
    for method in ("network", "fit"):
        for k in ("omega_orth_x1e2", "kappa_log", "h_spec", "energy_nh", "seconds"):
            assert np.isfinite(row[method][k]), (method, k)
        assert row[method]["energy_nh"] > 0
    assert r["fit_config"]["combine"] == "sum"  # the fit optimises the network's objective
    assert "energy_ratio_network_over_fit" in r["summary"]


def test_evaluate_against_fem_prints_every_basis_side_by_side(tmp_path, torus, capsys):
    """`evaluate --reference fem`: every basis scored against the same tet FEM; Rayleigh-Ritz ratios >= 1 (min-max),
    the constant handle gives exactly 6 zero eigenvalues, a Galerkin subspace is never more compliant than the FEM."""
    js = tmp_path / "fem.json"
    assert main(["evaluate", "--reference", "fem", "--data", str(torus), "--bases",
                 "eigen,rbf,modes", "--fit-seconds", "0", "--nodes", "500", "--json", str(js)]) == 0
    out = capsys.readouterr().out
    assert "laplacian-fem" in out and "eigen" in out and "over shapes" in out
    r = json.loads(js.read_text())
    row = r["shapes"][0]
    assert set(row["bases"]) == {"eigen", "rbf", "modes", "laplacian-fem"}
    for name, b in row["bases"].items():
        assert b["near_zero"] == 6, name
        assert min(b["freq_ratios"]) >= 1 - 1e-9 and b["freq_ratio_geomean"] < 3, name
        for st in b["static"]:
            assert 0 < st["compliance_ratio"] <= 1 + 1e-9, name
    assert r["summary"]["eigen"]["shapes"] == 1 and row["bases"]["eigen"]["build_seconds"] < 30


def test_evaluate_against_fem_on_a_splat(tmp_path, capsys):
    """A splat has no surface mesh: the reference is a voxel tet mesh of its volume points (runs on a fresh clone)."""
    spot = Path(__file__).resolve().parents[1] / "data" / "spot_mesh2splat_10k.splat"
    js = tmp_path / "fem.json"
    assert main(["evaluate", "--reference", "fem", "--data", str(spot), "--bases", "rbf", "--fit-seconds", "0",
                 "--nodes", "400", "--json", str(js)]) == 0
    row = json.loads(js.read_text())["shapes"][0]
    assert row["tet_mesh"]["method"] == "voxel" and row["tet_mesh"]["nodes"] > 100
    assert row["bases"]["rbf"]["near_zero"] == 6 and min(row["bases"]["rbf"]["freq_ratios"]) >= 1 - 1e-9


def test_evaluate_skips_a_folders_files_that_are_not_shapes(tmp_path, capsys):
    """A --data folder holding a manifest beside its shape is evaluated (the manifest skipped with a note before
    any work) instead of failing after every shape was computed; a non-shape file named on its own is refused."""
    import shutil

    spot = Path(__file__).resolve().parents[1] / "data" / "spot_mesh2splat_10k.splat"
    folder = tmp_path / "set"
    folder.mkdir()
    shutil.copy(spot, folder / spot.name)
    (folder / "manifest.json").write_text('{"files": []}')
    js = tmp_path / "fem.json"
    assert main(["evaluate", "--reference", "fem", "--data", str(folder), "--bases", "rbf", "--fit-seconds", "0",
                 "--nodes", "400", "--json", str(js)]) == 0
    assert "skipping" in capsys.readouterr().err
    assert [Path(r["shape"]).name for r in json.loads(js.read_text())["shapes"]] == [spot.name]
    assert main(["evaluate", "--reference", "fem", "--data", str(folder / "manifest.json"), "--bases", "rbf",
                 "--nodes", "400"]) == 2


def test_evaluate_refuses_to_replace_its_json_without_force(tmp_path, capsys):
    js = tmp_path / "old.json"
    js.write_text("{}")
    box = tmp_path / "box.obj"  # a mesh of our own: the refusal must not depend on the shared data being there
    box.write_text("".join(f"v {x} {y} {z}\n" for x in (0, 1) for y in (0, 1) for z in (0, 1))
                   + "f 1 3 4 2\nf 5 6 8 7\nf 1 2 6 5\nf 3 7 8 4\nf 1 5 7 3\nf 2 4 8 6\n")
    assert main(["evaluate", "--reference", "fem", "--data", str(box), "--json", str(js)]) == 2
    assert "--force" in capsys.readouterr().err and js.read_text() == "{}"


def test_evaluate_names_options_its_mode_does_not_use(tmp_path, capsys):
    """Options of the other evaluation mode are named (they were accepted and ignored without a word), and the
    reference mesh's node count is said where the mesher's count is far from --nodes."""
    spot = Path(__file__).resolve().parents[1] / "data" / "spot_mesh2splat_10k.splat"
    assert main(["evaluate", "--reference", "fem", "--data", str(spot), "--bases", "rbf", "--fit-seconds", "0",
                 "--nodes", "400", "--transforms", "3", "--sigma", "0.2"]) == 0
    cap = capsys.readouterr()
    text = cap.err + cap.out
    assert "--transforms, --sigma: not used by --reference fem" in text
    assert "nodes for --nodes 400" in text


def test_handles_are_checked_against_the_checkpoints_own(tmp_path, torus, tiny_ckpt, capsys):
    """A fresh user's 8-handle checkpoint: ``--handles 8`` was refused ("fixes its handles (16)") and ``--handles
    16`` accepted, giving 9 columns. The count is now the checkpoint's own; the .npz records the checkpoint only
    where the network made the weights."""
    out = tmp_path / "w.npz"
    assert main(["skin", str(torus), "-o", str(out), "--skinning", "network", "--checkpoint", str(tiny_ckpt),
                 "--handles", "6"]) == 0
    assert np.load(out)["weights"].shape[1] == 7
    capsys.readouterr()
    assert main(["skin", str(torus), "-o", str(tmp_path / "x.npz"), "--skinning", "network", "--checkpoint",
                 str(tiny_ckpt), "--handles", "16"]) == 2
    assert "has 6 handles" in capsys.readouterr().err and not (tmp_path / "x.npz").exists()
    other = tmp_path / "m.npz"
    assert main(["skin", str(torus), "-o", str(other), "--skinning", "eigen", "--checkpoint", str(tiny_ckpt)]) == 0
    assert json.loads(str(np.load(other)["metrics"]))["checkpoint"] is None
    assert json.loads(str(np.load(out)["metrics"]))["checkpoint"] == str(tiny_ckpt)


def test_fem_evaluation_checks_every_input_and_the_fit_budget_before_any_work(tmp_path, torus, capsys, monkeypatch):
    """A bad file at the end of the list failed after the shapes before it had been evaluated (their results lost,
    no JSON), and ``--bases fit --fit-seconds 0`` failed after the first reference was built: both are refused
    before any reference is built now."""
    import physskin_gs.cli.evaluate_fem as ev

    built = []
    monkeypatch.setattr(ev, "evaluate_shape", lambda *a, **k: built.append(a[0]) or {})
    bad = tmp_path / "bad.obj"
    bad.write_text("this is not an obj file\nv 1 2\nf 1 2 3\n")
    js = tmp_path / "r.json"
    assert main(["evaluate", "--reference", "fem", "--data", str(torus), str(bad), "--bases", "rbf",
                 "--fit-seconds", "0", "--json", str(js)]) == 2
    assert "bad.obj" in capsys.readouterr().err and built == [] and not js.exists()
    assert main(["evaluate", "--reference", "fem", "--data", str(torus), "--bases", "fit,rbf",
                 "--fit-seconds", "0"]) == 2
    assert "--bases fit needs --fit-seconds > 0" in capsys.readouterr().err and built == []
