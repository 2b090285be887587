"""Measure the up from the trainer's cameras on real ``cameras.json`` files.

    python scripts/eval_camera_up.py corpus/cameras [--json out.json]

For every folder under ROOT holding a graphdeco-inria ``cameras.json`` (at any depth), prints what
:func:`physskin_gs.geometry.camera_up.camera_up` says (the rule, the roll, the up, or why not), its angle to the
two naive cues (the cameras' mean image up, and the normal of the plane through the camera centres), and, when the
folder also holds the trainer's ``input.ply`` (the SfM points), the angle to the dominant plane of those points
within 45 degrees of the answer (RANSAC, inliers within 0.5 % of the points' extent; reported only when it holds
at least 25 % of the points: a ground or table that fills the capture, the closest thing to a truth these
captures have). ``corpus/cameras/manifest.json`` (``docs/captures.md``) lists where the files came from.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from physskin_gs.geometry.camera_up import camera_up  # noqa: E402
from physskin_gs.io.cameras import read_camera_rotations  # noqa: E402


def _angle(a, b, signed=True) -> float:
    c = float(np.dot(a, b) / np.linalg.norm(a) / np.linalg.norm(b))
    return math.degrees(math.acos(np.clip(c if signed else abs(c), -1.0, 1.0)))


def dominant_plane(points: np.ndarray, near: np.ndarray, seed: int = 0, tries: int = 6000):
    """(normal, inlier share) of the plane with the most points within 0.5 % of the extent among normals within 45
    degrees of ``near`` (RANSAC, refined by a least-squares fit of its inliers), or (None, 0)."""
    lo, hi = np.percentile(points, 2, 0), np.percentile(points, 98, 0)
    X = points[((points >= lo) & (points <= hi)).all(1)]
    thr = 0.005 * float(np.linalg.norm(hi - lo))
    rng = np.random.default_rng(seed)
    best, best_n, best_p = 0, None, None
    for _ in range(tries):
        p = X[rng.choice(len(X), 3, replace=False)]
        n = np.cross(p[1] - p[0], p[2] - p[0])
        if np.linalg.norm(n) < 1e-12:
            continue
        n = n / np.linalg.norm(n)
        if abs(float(n @ near)) < math.cos(math.radians(45)):
            continue
        k = int((np.abs((X - p[0]) @ n) < thr).sum())
        if k > best:
            best, best_n, best_p = k, n, p[0]
    if best_n is None:
        return None, 0.0
    inl = X[np.abs((X - best_p) @ best_n) < thr]
    _, _, vt = np.linalg.svd(inl - inl.mean(0), full_matrices=False)
    return vt[2], len(inl) / len(X)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root", help="folder holding trainer output folders (each with a cameras.json)")
    ap.add_argument("--json", default=None, help="write the rows here too")
    args = ap.parse_args(argv)
    rows = []
    for cams in sorted(glob.glob(os.path.join(args.root, "**", "cameras.json"), recursive=True)):
        folder = os.path.dirname(cams)
        name = os.path.relpath(folder, args.root)
        R = read_camera_rotations(cams)
        est = camera_up(R)
        mean_up = -R[:, :, 1].mean(0)
        centres = np.array([c["position"] for c in json.load(open(cams))], dtype=np.float64)
        _, _, vt = np.linalg.svd(centres - centres.mean(0))
        row = {"name": name, "cameras": len(R), "up": None if est.up is None else [round(float(v), 4) for v in est.up],
               "reason": est.reason, "roll_deg": est.roll_deg}
        if est.up is not None:
            row["deg_to_mean_image_up"] = _angle(est.up, mean_up)
            row["deg_to_orbit_normal"] = _angle(est.up, vt[2], signed=False)
            inp = os.path.join(folder, "input.ply")
            if os.path.isfile(inp):
                from plyfile import PlyData

                v = PlyData.read(inp)["vertex"].data
                pts = np.stack([v["x"], v["y"], v["z"]], 1).astype(np.float64)
                fits = [dominant_plane(pts, est.up, seed=seed) for seed in range(5)]  # the median of 5 RANSACs:
                share = float(np.median([f[1] for f in fits]))  # a bumpy meadow tilts one in five by 10 degrees
                row["plane_share"] = share
                if share >= 0.25 and all(f[0] is not None for f in fits):
                    row["deg_to_ground_plane"] = float(np.median([_angle(est.up, f[0], signed=False) for f in fits]))
        rows.append(row)
    print(f"{'capture':24s} {'cams':>5s} {'roll':>5s}  {'mean up':>7s} {'orbit':>6s} {'ground':>7s}  rule / why not")
    for r in rows:
        if r["up"] is None:
            print(f"{r['name']:24s} {r['cameras']:5d} {'':>5s}  {'':>7s} {'':>6s} {'':>7s}  none: {r['reason']}")
            continue
        g = f"{r['deg_to_ground_plane']:6.1f}" if "deg_to_ground_plane" in r else "     -"
        rule = "around" if "around" in r["reason"] else "one way"
        print(f"{r['name']:24s} {r['cameras']:5d} {r['roll_deg']:5.1f}  {r['deg_to_mean_image_up']:7.1f} "
              f"{r['deg_to_orbit_normal']:6.1f} {g:>7s}  {rule}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
