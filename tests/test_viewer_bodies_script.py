"""scripts/viewer_bodies_screenshots.py checks its options before it starts anything: a missing capture and
screenshots already in --out (without --overwrite) are refused with a clear message, and nothing is written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "viewer_bodies_screenshots.py"


def _run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=120)


def test_a_missing_capture_is_refused(tmp_path):
    r = _run(tmp_path / "nope.ply", "--out", tmp_path / "shots")
    assert r.returncode == 2 and "no such file" in r.stderr
    assert not (tmp_path / "shots").exists()


def test_existing_screenshots_are_not_replaced_without_overwrite(tmp_path):
    scene = tmp_path / "scene.ply"
    scene.write_bytes(b"ply\n")  # refused before it is read
    out = tmp_path / "shots"
    out.mkdir()
    (out / "viewer_bodies_after.png").write_bytes(b"keep")
    r = _run(scene, "--out", out)
    assert r.returncode == 2 and "--overwrite" in r.stderr and "viewer_bodies_after.png" in r.stderr
    assert (out / "viewer_bodies_after.png").read_bytes() == b"keep"
