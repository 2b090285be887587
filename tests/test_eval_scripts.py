"""The dynamic protocols through the product (issue 23): ``scripts/eval_cantilever_animate.py`` and
``scripts/eval_cube_drop_animate.py`` run ``physskin-gs animate`` on their inputs and measure the exported frames
against a FEM; here on coarse FEM meshes and small splats, so that the scripts' plumbing (inputs, CLI, frames,
comparison, JSON) is held to real values: at step 1 the product and the FEM have barely moved apart."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(script, tmp_path, *args):
    out = tmp_path / "out.json"
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / script), *args, "--json", str(out)],
                       capture_output=True, text=True, cwd=str(tmp_path), timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(out.read_text(encoding="utf-8")), r.stdout


def test_cube_drop_through_animate_runs_and_lands(tmp_path):
    res, out = _run("eval_cube_drop_animate.py", tmp_path, "--inputs", "splat", "--divisions", "2,2,2",
                    "--splat-count", "3000")
    r = res["results"]["splat"]
    assert r["points"] == 3000 and "| splat | 3000 |" in out
    assert r["chamfer_m2"]["1"] < 1e-6  # one step of free fall: both move 2.5 cm alike
    # the cube fell 0.5 m and rests on the floor (the bottom within 2 % of its 1 m height), as the FEM's does
    assert abs(r["rest_height_mm"]) < 20 and abs(r["fem_rest_height_mm"]) < 5


def test_cantilever_through_animate_refuses_a_foreign_cache_and_runs(tmp_path):
    bad = tmp_path / "bad.npz"
    bad.write_text("{}", encoding="utf-8")
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "eval_cantilever_animate.py"), "--fem-cache", str(bad)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "not a FEM cache" in r.stderr and bad.read_text(encoding="utf-8") == "{}"
    res, _ = _run("eval_cantilever_animate.py", tmp_path, "--inputs", "splat", "--divisions", "4,2,2",
                  "--splat-count", "2000")
    r = res["results"]["splat"]
    assert r["points"] == 2000 and r["chamfer_m2"]["1"] < 1e-4
    assert 0.5 < r["sag_ratio"] < 1.5  # the beam sags as the coarse FEM does, within a factor
