"""scripts/gpu_check.py: the one-call GPU check must fail fast and clearly without CUDA (environment still written),
keep a step's partial result when it is killed at its limit, and its helpers (wheel bundle selection, image
differences, report summary, the device-side deformation it times) must be right. No GPU needed."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.py"


def _load():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = mod
    spec.loader.exec_module(mod)
    return mod


gc = _load()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the no-device path does not apply")
def test_without_cuda_exits_nonzero_names_the_device_and_writes_the_environment(tmp_path):
    out = tmp_path / "gpu_check.json"
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out)], capture_output=True, text=True,
                          timeout=120, cwd=str(ROOT))
    # fails fast: about 2 s measured (the env step only); 30 s leaves room for a loaded machine and stays well
    # under the env step's own 60 s limit (so a run that waited on a step, or tried a GPU step, fails here)
    assert time.monotonic() - t0 < 30
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "no CUDA device" in proc.stderr
    rep = json.loads(out.read_text())
    assert rep["schema"] == gc.SCHEMA and rep["exit_code"] == 2 and rep["ok"] is False
    assert rep["error"].startswith("no CUDA device")
    env = rep["steps"]["env"]
    assert env["status"] == "ok"
    r = env["result"]
    assert r["torch_version"] == torch.__version__
    assert r["cuda_available"] is False
    assert r["python"] == sys.version.split()[0]
    assert "gsplat" in r["packages"] and "cpu_count" in r
    for name in gc.STEPS[1:]:
        assert rep["steps"][name]["status"] == "skipped"
        assert "no CUDA device" in rep["steps"][name]["error"]
    assert out.with_suffix(".log").is_file()
    assert rep["summary"]["torch_version"] == torch.__version__


def test_bad_step_name_is_refused(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "g.json"), "--steps", "bogus"],
                          capture_output=True, text=True, timeout=60, cwd=str(ROOT))
    assert proc.returncode == 3 and "unknown step" in proc.stderr
    assert not (tmp_path / "g.json").exists()


def test_a_step_past_its_limit_is_killed_and_keeps_its_partial_result(tmp_path):
    args = SimpleNamespace(passthrough=[])
    t0 = time.monotonic()
    rec = gc.run_step_subprocess("_test_sleep", 4.0, {"device": "cpu"}, args, tmp_path / "log.txt")
    assert time.monotonic() - t0 < 30
    assert rec["status"] == "timeout" and "limit" in rec["error"]
    assert rec["result"] == {"before_hang": True}
    assert "step _test_sleep" in (tmp_path / "log.txt").read_text()


def test_cpu_self_test_of_the_steps_writes_their_structure(tmp_path):
    out = tmp_path / "g.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out), "--device", "cpu", "--steps", "deform_1m,compare",
         "--n", "3000", "--size", "32", "--reps", "3", "--scenes", "data/spot_mesh2splat_10k.splat", "--budget", "100"],
        capture_output=True, text=True, timeout=120, cwd=str(ROOT))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rep = json.loads(out.read_text())
    assert list(rep["steps"]) == ["env", "deform_1m", "compare"]
    d = rep["steps"]["deform_1m"]["result"]
    assert d["n"] == 3000 and d["handles"] == 16
    # two float32 paths: 2.6e-7 relative on the development machine, 1.15e-4 in one CI run of the same seeded inputs
    # (cause not found: perhaps a singular value at the F clamp's edge); a wrong formula is off by O(1)
    assert d["device_vs_cpu"]["means_max_abs"] < 1e-4 and d["device_vs_cpu"]["covars_max_rel"] < 5e-4
    assert d["ratios"]["device_torch_over_copy"] > 0
    c = rep["steps"]["compare"]["result"]["scenes"]["spot_mesh2splat_10k"]
    assert c["n"] == 10000 and c["time"]["torch_cpu"]["median_ms"] > 0
    assert (tmp_path / c["png"]).is_file()


# ----------------------------------------------------------------------------------------------- helpers
def test_wheel_names_tags_and_compatibility():
    assert gc.wheel_dist_name("typing_extensions-4.16.0-py3-none-any.whl") == "typing-extensions"
    assert gc.wheel_dist_name("Markdown_It_Py-4.3.0-py3-none-any.whl") == "markdown-it-py"
    assert gc.wheel_version("gsplat-1.5.3-py3-none-any.whl") == "1.5.3"
    ms = "msgspec-0.23.0-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"
    assert gc.wheel_tags(ms) == (["cp312"], ["cp312"], ["manylinux2014_x86_64", "manylinux_2_17_x86_64"])
    assert gc.wheel_compatible(ms, (3, 12)) and not gc.wheel_compatible(ms, (3, 11))
    abi3 = "safetensors-0.8.0-cp310-abi3-manylinux_2_17_x86_64.whl"
    assert gc.wheel_compatible(abi3, (3, 12)) and not gc.wheel_compatible(abi3, (3, 9))
    assert gc.wheel_compatible("conflictfree-0.1.8-py2.py3-none-any.whl", (3, 12))
    with pytest.raises(ValueError):
        gc.wheel_dist_name("gsplat-1.5.3.tar.gz")


def test_select_wheels_skips_installed_duplicates_and_other_pythons(tmp_path):
    names = ["gsplat-1.5.3-py3-none-any.whl", "viser-1.1.1-py3-none-any.whl",
             "msgspec-0.23.0-cp312-cp312-manylinux2014_x86_64.whl", "msgspec-0.22.0-cp312-cp312-manylinux2014_x86_64.whl",
             "rich-14.3.4-py3-none-any.whl", "zstandard-0.25.0-cp311-cp311-manylinux2014_x86_64.whl"]
    sel = gc.select_wheels([tmp_path / n for n in names], {"rich": "13.9.0"}, (3, 12))
    assert sorted(p.name for p in sel["install"]) == [
        "gsplat-1.5.3-py3-none-any.whl", "msgspec-0.22.0-cp312-cp312-manylinux2014_x86_64.whl",
        "viser-1.1.1-py3-none-any.whl"]
    assert sel["present"] == [("rich", "13.9.0")]
    assert [p.name for p in sel["duplicate"]] == ["msgspec-0.23.0-cp312-cp312-manylinux2014_x86_64.whl"]
    assert [p.name for p in sel["incompatible"]] == ["zstandard-0.25.0-cp311-cp311-manylinux2014_x86_64.whl"]


def test_check_bundle_flags_two_versions(tmp_path, capsys):
    for n in ("a-1.0-py3-none-any.whl", "a-2.0-py3-none-any.whl", "b-1.0-py3-none-any.whl"):
        (tmp_path / n).write_bytes(b"x" * 10)
    assert gc.check_bundle([str(tmp_path)]) == 1
    assert "a appears 2 times" in capsys.readouterr().err
    (tmp_path / "a-1.0-py3-none-any.whl").unlink()
    assert gc.check_bundle([str(tmp_path)]) == 0


def test_prebuilt_names_round_trip():
    name = gc.prebuilt_name("1.5.3", "2.11.0+cu130", (3, 12), "9.0")
    assert name == "gsplat-1.5.3_torch-2.11.0+cu130_cp312_sm90.csrc.so"
    assert gc.parse_prebuilt_name(name) == {"gsplat": "1.5.3", "torch": "2.11.0+cu130", "python": "3.12",
                                            "arch": "9.0", "compressed": False}
    assert gc.parse_prebuilt_name(name + ".xz")["compressed"] is True
    assert gc.parse_prebuilt_name("gsplat-1.5.3_torch-2.11.0_cp312_sm120.csrc.so")["arch"] == "12.0"
    assert gc.parse_prebuilt_name("something.so") is None


def test_install_prebuilt_without_a_match_changes_nothing(tmp_path, capsys):
    (tmp_path / gc.prebuilt_name("0.0.1", "1.0.0", (3, 12), "9.0")).write_bytes(b"not a library")
    assert gc.install_prebuilt(str(tmp_path)) == 0
    assert "does not match" in capsys.readouterr().out
    assert gc.install_prebuilt(str(tmp_path / "absent")) == 0


def test_image_diff_and_psnr():
    a = np.zeros((4, 4, 3))
    b = np.zeros((4, 4, 3))
    assert gc.image_diff(a, b)["psnr_db"] is None and gc.image_diff(a, b)["max_abs"] == 0.0
    b[0, 0, 0] = 0.5
    d = gc.image_diff(a, b)
    mse = 0.25 / a.size
    assert d["max_abs"] == 0.5 and d["mean_abs"] == pytest.approx(0.5 / a.size, rel=1e-5)
    assert abs(d["psnr_db"] - 10 * np.log10(1 / mse)) < 1e-3
    assert d["frac_px_over_1_255"] == pytest.approx(1 / 16)
    assert gc.image_diff(a, np.full((4, 4, 3), 2.0))["max_abs"] == 1.0  # clamped to [0, 1]
    with pytest.raises(ValueError):
        gc.image_diff(a, np.zeros((2, 2, 3)))


def test_stats_and_finite():
    s = gc.stats_ms([0.004, 0.001, 0.002, 0.003])
    assert s == {"median_ms": 2.5, "min_ms": 1.0, "mean_ms": 2.5, "p90_ms": 4.0, "reps": 4}
    assert gc.stats_ms([]) == {"reps": 0}
    assert gc.finite(float("nan")) is None and gc.finite(1.23456789) == 1.23457


def test_parse_steps_keeps_env_first_and_the_fixed_order():
    assert gc.parse_steps(None) == gc.STEPS
    assert gc.parse_steps("viewer,compare") == ["env", "compare", "viewer"]
    with pytest.raises(ValueError):
        gc.parse_steps("env,nope")


def test_summary_and_markdown_of_a_report():
    rep = {"steps": {
        "env": {"status": "ok", "seconds": 3.0, "result": {"device_name": "NVIDIA H200", "torch_version": "2.11.0"}},
        "gsplat_jit": {"status": "ok", "seconds": 120.0, "result": {"import_s": 118.2, "cached_before": False}},
        "compare": {"status": "ok", "seconds": 9.0, "result": {"scenes": {"plant_capture": {
            "gsplat_vs_torch_cpu": {"psnr_db": 48.1, "max_abs": 0.02, "mean_abs": 1e-4},
            "time": {"gsplat": {"median_ms": 0.9}, "torch_cpu": {"median_ms": 800.0}}}}}},
        "render_1m": {"status": "ok", "seconds": 9.0, "result": {"rgb": {"median_ms": 5.0}}},
        "deform_1m": {"status": "partial", "seconds": 30.0, "error": "device_torch_compiled: boom",
                      "result": {"device_torch": {"median_ms": 1.2}, "ratios": {"device_torch_over_copy": 6.0}}},
        "viewer": {"status": "ok", "seconds": 30.0, "result": {"scenes": {"plant_capture": {
            "adaptive": {"renders_per_s": 55.0, "height_end": 1080}, "fixed_1080p": {"renders_per_s": 50.0},
            "render_frame_loop": {"median_ms": 12.0}}}}},
    }}
    s = gc.summarize(rep)
    assert s["device_name"] == "NVIDIA H200" and s["gsplat_import_s"] == 118.2 and s["gsplat_built_from_scratch"]
    assert s["compare.plant_capture.psnr_db"] == 48.1 and s["compare.plant_capture.gsplat_ms"] == 0.9
    assert s["render_1m.rgb_ms"] == 5.0 and s["render_1m.rgb_fps"] == 200.0
    assert s["deform_1m.device_torch_ms"] == 1.2 and s["deform_1m.ratio.device_torch_over_copy"] == 6.0
    assert s["viewer.plant_capture.adaptive_fps"] == 55.0 and s["viewer.plant_capture.fixed_1080p_fps"] == 50.0
    md = gc.markdown_rows(rep)
    assert "| render_1m.rgb_fps | 200.0 |" in md
    assert "| deform_1m | partial | 30.0 | device_torch_compiled: boom |" in md


def test_torch_deformer_matches_the_reference():
    from physskin_gs.deform import deform_reference
    from physskin_gs.scene import quat_to_rotmat

    means, quats, log_scales, weights, grads, Z = gc.synthetic_deform_inputs(500, 4, seed=3)
    td = gc.TorchDeformer(means, quats, log_scales, weights, grads, "cpu")
    assert td.K == 4 and td.bytes_per_frame() == ((4 * 4 + 12) * 4 * 500, 48 * 500)
    m, c = td.deform(Z)
    L = quat_to_rotmat(quats) * torch.exp(log_scales)[:, None, :]
    xr, cr, _ = deform_reference(means.double(), (L @ L.transpose(1, 2)).double(), weights.double(),
                                 grads.double(), Z.double())
    assert torch.allclose(m.double(), xr, atol=1e-5)
    assert torch.allclose(c.double(), cr, atol=1e-6 * float(cr.abs().max()) + 1e-12)


def test_write_json_is_atomic_and_writes_nan_as_null(tmp_path):
    p = tmp_path / "sub" / "r.json"
    gc.write_json(p, {"a": 1})
    assert json.loads(p.read_text()) == {"a": 1}
    gc.write_json(p, {"a": float("nan"), "b": [float("inf"), (1, 2.5)]})
    assert json.loads(p.read_text()) == {"a": None, "b": [None, [1, 2.5]]}
    class Unprintable:
        def __repr__(self):
            raise RuntimeError("no")

    with pytest.raises(RuntimeError):
        gc.write_json(p, {"a": Unprintable()})
    assert json.loads(p.read_text()) == {"a": None, "b": [None, [1, 2.5]]}  # the old file survives a failed write
    assert [x.name for x in p.parent.iterdir()] == ["r.json"]
