"""A synthetic capture of several objects on a table of finite size: three objects on a table top, one of them
near the table's edge, the table on four legs over the room's floor.

    python scripts/make_table_capture.py out/table.ply [--seed 0] [--force]

Writes an INRIA-layout PLY (SH 0, -y up as INRIA-trained scenes are) and ``OUT.truth.json`` beside it: the true up
vector, the table top's height and extent, and the row ranges of each object, the table and the floor. Objects: the
CC0 Spot splat of ``data/`` and procedural shapes (:mod:`make_hard_captures`): all licence-clean.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_hard_captures import _object, _rect, _vertical, parts_to_scene  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

#: table top: x in [-TABLE_X, TABLE_X], z in [-TABLE_Z, TABLE_Z] at y = 0 (scene units before the world flip)
TABLE_X, TABLE_Z, TABLE_LEG = 1.5, 1.0, 1.0
#: (kind, height, x, z) of the three objects; the last stands near the table's +x edge
OBJECTS = (("spot", 0.6, -0.7, 0.1), ("crate", 0.45, 0.15, -0.35), ("ball", 0.45, 1.15, 0.25))


def make_table_capture(seed: int = 0):
    """(GaussianScene, truth dict) of the capture (module docstring); every random draw comes from ``seed``."""
    rng = np.random.default_rng(seed)
    parts = []
    for i, (kind, h, x, z) in enumerate(OBJECTS):
        p = _object(kind, h, rng)
        if p.quats is None:  # the bottom face lies on the table, where no camera sees it: a capture has no rows there
            seen = ~((p.normals[:, 1] < -0.9) & (p.means[:, 1] < 0.01 * h))
            p.means, p.normals, p.size, p.rgb, p.opacity = (p.means[seen], p.normals[seen], p.size[seen],
                                                            p.rgb[seen], p.opacity[seen])
        p.means = p.means + np.array([x, 0.0, z])
        parts.append((f"object{i}", p))
    wood = np.array([0.55, 0.38, 0.22])
    parts.append(("table", _rect(-TABLE_X, TABLE_X, -TABLE_Z, TABLE_Z, 0.0, 16000, rng, wood)))
    for z in (-TABLE_Z, TABLE_Z):  # the top's long edges (5 cm thick) and its short ones
        parts.append(("table", _vertical(-TABLE_X, TABLE_X, -0.05, 0.0, z, 800, rng, wood * 0.8,
                                         normal=(0.0, 0.0, np.sign(z)))))
    for x in (-TABLE_X, TABLE_X):
        p = _vertical(-TABLE_Z, TABLE_Z, -0.05, 0.0, 0.0, 600, rng, wood * 0.8, normal=(1.0, 0.0, 0.0))
        p.means = p.means[:, [2, 1, 0]] + np.array([x, 0.0, 0.0])
        p.normals = np.tile([np.sign(x), 0.0, 0.0], (p.means.shape[0], 1))
        parts.append(("table", p))
    for sx in (-1, 1):  # four legs, 8 cm square
        for sz in (-1, 1):
            cx, cz = sx * (TABLE_X - 0.1), sz * (TABLE_Z - 0.1)
            for f in (-1, 1):
                parts.append(("table", _vertical(cx - 0.04, cx + 0.04, -TABLE_LEG, -0.05, cz + 0.04 * f, 300, rng,
                                                 wood * 0.7, normal=(0.0, 0.0, float(f)))))
    parts.append(("floor", _rect(-3.0, 3.0, -2.5, 2.5, -TABLE_LEG, 20000, rng, np.array([0.45, 0.47, 0.5]))))

    R = np.diag([1.0, -1.0, -1.0])  # y up -> -y up (the INRIA convention)
    scene, rows = parts_to_scene(parts, R)
    rows = {k: [list(r) for r in v] for k, v in rows.items()}
    truth = {"up": (R @ np.array([0.0, 1.0, 0.0])).tolist(), "table_top_height_along_up": 0.0,
             "table_x": [-TABLE_X, TABLE_X], "table_z": [-TABLE_Z, TABLE_Z], "floor_height_along_up": -TABLE_LEG,
             "objects": [{"kind": k, "height": h, "x": x, "z": z, "base_in_file": (R @ np.array([x, 0.0, z])).tolist()}
                         for k, h, x, z in OBJECTS], "rows": rows,
             "frame": "table_x, table_z and the objects' x, z are in the table's own frame (y up); the file's "
                      "coordinates are R times them (R = diag(1, -1, -1): z changes sign); base_in_file is where "
                      "each object stands in the file",
             "seed": seed}
    return scene, truth


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("out", help="output .ply")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--force", action="store_true", help="replace an existing file")
    args = ap.parse_args(argv)
    from physskin_gs.io import save_scene

    out = Path(args.out)
    truth_path = out.with_suffix(".truth.json")
    for p in (out, truth_path):
        if p.exists() and not args.force:
            print(f"{p} exists; pass --force to replace it", file=sys.stderr)
            return 2
    out.parent.mkdir(parents=True, exist_ok=True)
    scene, truth = make_table_capture(args.seed)
    save_scene(scene, str(out))
    truth_path.write_text(json.dumps(truth, indent=1))
    print(f"wrote {out} ({scene.num_gaussians} Gaussians) and {truth_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
