#!/usr/bin/env python
"""Kaolin's cube drop through the product (issue 23, deliverable 4, the second dynamic protocol): ``physskin-gs
animate --headless`` on a unit cube given as a mesh and as a random splat, dropped on a floor, against a full-space
Neo-Hookean FEM with the same floor.

Setup (kaolin's ``test_cube_drop``: a 1 m cube, E 1e4 Pa, nu 0.45, 500 kg/m^3, dt 0.05 s, 100 steps, gravity
9.8 m/s^2 along -y, a floor at y = -1): the cube is [-0.5, 0.5]^3 m, so it falls 0.5 m, lands at about 3 m/s and
comes to rest on the floor. Both sides use the product's floor, the penalty ``m k d^2`` per point with k =
``SubspaceSimulator.FLOOR_K`` (kaolin's own floor penalty is not ours, so its FEM trajectory is not the reference
here), frictionless. The product runs as a user would, with options only::

    physskin-gs animate CUBE --headless --frames 101 --dt 0.05 --E 1e4 --nu 0.45 --density 500 --gravity 9.8 \\
        --damping 0 --friction 0 --floor -1 --up y --scale 1 --export DIR

Inputs as in ``eval_cantilever_animate.py``: ``mesh`` (the cube's surface, faces split to 5 cm edges; default
basis tet) and ``splat`` (20000 Gaussians at uniformly random points of its volume; default basis eigen). The FEM
is the mirror-symmetric 8 x 8 x 8 box mesh (``--divisions``). Measured on the exported frames: kaolin's symmetric
squared Chamfer (m^2) against the FEM's motion of the same rest points at steps 1 and 100 (kaolin's tolerances:
1.5e-3^2 at step 1 and 1.5e-3 at step 100), the bottom's height above the floor at the end (the 0.5 % height
quantile of the points, the product's own measure of an object's bottom; mm, negative: in the floor), and the
deepest the bottom went during the landing (mm).

Usage:
  python scripts/eval_cube_drop_animate.py [--inputs mesh,splat] [--divisions 8,8,8] [--json out.json]
      [--keep DIR]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from eval_cantilever_animate import (  # noqa: E402
    DT,
    STEPS,
    check_arguments,
    protocol_arguments,
    report,
    run_inputs,
    write_box_mesh,
    write_box_splat,
)

from physskin_gs.physics.fem_dynamics import (  # noqa: E402
    FullSpaceNeoHookean,
    chamfer_distance,
    interpolate_p1,
    symmetric_box_tetmesh,
)

SIZE = (1.0, 1.0, 1.0)
LO = (-0.5, -0.5, -0.5)
FLOOR = -1.0
OPTIONS = ["--E", "1e4", "--floor", str(FLOOR), "--up", "y"]
TOL = 1.5e-3  # kaolin's test_cube_drop tolerance: Chamfer@100 < TOL, frames 0 and 1 < TOL^2


def fem_run(divisions) -> dict:
    """The FEM reference: (tm, traj (STEPS + 1, n, 3)) of the cube falling onto the floor."""
    from physskin_gs.physics.simulator import SubspaceSimulator

    tm = symmetric_box_tetmesh(SIZE, divisions, LO)
    sim = FullSpaceNeoHookean(tm, 1e4, 0.45, 500.0, dt=DT, gravity=9.8, up=(0.0, 1.0, 0.0), floor_height=FLOOR,
                              floor_k=SubspaceSimulator.FLOOR_K)
    traj = [sim.x.copy()]
    for _ in range(STEPS):
        sim.step()
        traj.append(sim.x.copy())
    return {"tm": tm, "traj": np.stack(traj)}


def compare(traj: np.ndarray, fem: dict) -> dict:
    tm, ftraj = fem["tm"], fem["traj"]
    rest = traj[0]
    disp1 = interpolate_p1(tm, ftraj[1] - ftraj[0], rest)
    disp = interpolate_p1(tm, ftraj[STEPS] - ftraj[0], rest)
    low = np.quantile(traj[:, :, 1], 0.005, axis=1) - FLOOR  # [frames] the bottom above the floor (m)
    flow = np.quantile(ftraj[:, :, 1], 0.005, axis=1) - FLOOR
    return {"points": int(rest.shape[0]),
            "chamfer_m2": {"1": chamfer_distance(traj[1], rest + disp1),
                           str(STEPS): chamfer_distance(traj[STEPS], rest + disp)},
            "rms_m": float(np.sqrt(((traj[STEPS] - rest - disp) ** 2).sum(1).mean())),
            "rest_height_mm": 1e3 * float(low[-1]), "fem_rest_height_mm": 1e3 * float(flow[-1]),
            "deepest_mm": 1e3 * float(low.min()), "fem_deepest_mm": 1e3 * float(flow.min())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    protocol_arguments(ap, "8,8,8", "each even")
    args = ap.parse_args()
    inputs, divisions = check_arguments(ap, args, (0, 1, 2), 2, "three even integers >= 2")
    t0 = time.perf_counter()
    fem = fem_run(divisions)
    print(f"FEM {divisions}: {time.perf_counter() - t0:.1f} s")

    def write(kind: str, folder: Path) -> Path:
        src = folder / ("cube.obj" if kind == "mesh" else "cube_splat.ply")
        if kind == "mesh":
            write_box_mesh(src, edge=0.05, size=SIZE, centre=(0.0, 0.0, 0.0))
        else:
            write_box_splat(src, args.splat_count, args.seed, size=SIZE, lo=LO)
        return src

    results, rows = {}, []
    for kind, (traj, secs) in run_inputs(args, inputs, "cube_drop_", write, OPTIONS).items():
        r = compare(traj, fem)
        r["animate_seconds"] = secs
        r["pass"] = bool(r["chamfer_m2"]["1"] < TOL * TOL and r["chamfer_m2"][str(STEPS)] < TOL)
        results[kind] = r
        rows.append(f"{kind} | {r['points']} | {r['chamfer_m2']['1']:.2e} | {r['chamfer_m2'][str(STEPS)]:.2e} | "
                    f"{1e3 * r['rms_m']:.1f} | {r['rest_height_mm']:.1f} ({r['fem_rest_height_mm']:.1f}) | "
                    f"{r['deepest_mm']:.1f} ({r['fem_deepest_mm']:.1f}) | {r['animate_seconds']:.0f} | "
                    f"< {TOL:g}: {'PASS' if r['pass'] else 'FAIL'}")
    report(args, "input | points | Chamfer@1 (m^2) | Chamfer@100 (m^2) | RMS@100 (mm) | bottom at the end (mm; FEM) | "
           "deepest bottom (mm; FEM) | animate (s) | kaolin's tolerance", rows,
           {"fem_divisions": divisions, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
