#!/usr/bin/env python
"""Kaolin's cantilever through the product (issue 23, deliverable 4): ``physskin-gs animate --headless`` on a beam
given as a mesh and as a random splat, against a full-space Neo-Hookean FEM.

The beam is the box [0, 1] x [-0.1, 0.1] x [-0.1, 0.1] m (z up), E 1e5 Pa, nu 0.45, 500 kg/m^3, the x <= 0.02 m end
pinned, gravity 9.8 m/s^2, backward Euler at dt 0.05 s, 100 steps (kaolin's setup; ``eval_cantilever.py`` runs the
same protocol inside one process with chosen bases and samples). Here nothing is arranged for the simulator: each
input goes through the CLI as a user would run it, with the setup given as options only::

    physskin-gs animate BEAM --headless --frames 101 --dt 0.05 --E 1e5 --nu 0.45 --density 500 --gravity 9.8 \\
        --damping 0 --friction 0 --floor off --up z --scale 1 --pin box:-1,-1,-1,0.02,1,1 --export DIR

Inputs: ``mesh``: the beam as a triangle mesh (OBJ, faces split to 2 cm edges; the default ``--skinning auto`` is
the tet basis of the mesh's own tet mesh; the exported deformed mesh's vertices are what is compared);
``splat``: an INRIA PLY of 20000 Gaussians at uniformly random points of the beam's volume (``--seed``; the
default basis for splats, eigen).

Measured on the exported frames (frame 1 = rest, frame 101 = step 100): kaolin's symmetric squared Chamfer (m^2)
between the exported points (mesh vertices; Gaussian centres) and the FEM's motion of the same rest points (P1
interpolation of the FEM nodes' displacements) at steps 1 and 100, the tip's first sag and oscillation period
against the FEM's (the mean displacement of the points within 2 cm of the free end), and the tip's sideways drift
(mm; the FEM's is ~0).
Targets (issue 23): mesh Chamfer@100 <= 0.005 m^2; splat <= 0.008 m^2 with drift <= 5 mm.

Usage:
  python scripts/eval_cantilever_animate.py [--inputs mesh,splat] [--divisions 20,4,4] [--fem-cache fem.npz]
      [--json out.json] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from physskin_gs.physics.fem_dynamics import (  # noqa: E402
    cantilever_protocol,
    chamfer_distance,
    interpolate_p1,
    tip_metrics,
)

SIZE = (1.0, 0.2, 0.2)
STEPS, DT = 100, 0.05
TARGETS = {"mesh": {"chamfer_m2": 0.005}, "splat": {"chamfer_m2": 0.008, "drift_mm": 5.0}}


def write_box_mesh(path: Path, edge: float = 0.02, size=SIZE, centre=(SIZE[0] / 2, 0.0, 0.0)) -> None:
    """The beam (or another box: ``size``, ``centre``, metres) as a closed triangle mesh: trimesh's box with its
    faces split to edges of at most ``edge`` (so the exported vertices sample the surface; a 12-triangle box would
    leave only its 8 corners to compare)."""
    import trimesh

    box = trimesh.creation.box(extents=size)
    box.apply_translation(list(centre))
    v, f = trimesh.remesh.subdivide_to_size(box.vertices, box.faces, max_edge=edge)
    trimesh.Trimesh(v, f, process=True).export(str(path))


def write_box_splat(path: Path, n: int, seed: int, size=SIZE, lo=(0.0, -SIZE[1] / 2, -SIZE[2] / 2)) -> None:
    """An INRIA PLY of n Gaussians at uniform random points of the beam's volume (or another box: ``size`` from
    corner ``lo``, metres; isotropic, 5 mm, opaque, grey)."""
    import torch

    from physskin_gs.io import save_scene
    from physskin_gs.scene import GaussianScene

    rng = np.random.default_rng(seed)
    means = np.asarray(lo, np.float64) + rng.random((n, 3)) * np.asarray(size, np.float64)
    scene = GaussianScene(
        means=torch.from_numpy(means.astype(np.float32)),
        quats=torch.tensor([[1.0, 0.0, 0.0, 0.0]]).repeat(n, 1),
        log_scales=torch.full((n, 3), math.log(0.005)),
        opacity_logits=torch.full((n,), 4.0),
        sh_dc=torch.zeros(n, 3),
        sh_rest=torch.zeros(n, 0, 3),
    )
    save_scene(scene, str(path))


CANTILEVER_OPTIONS = ["--E", "1e5", "--floor", "off", "--up", "z", "--pin", "box:-1,-1,-1,0.02,1,1"]


def run_animate(src: Path, out: Path, options=tuple(CANTILEVER_OPTIONS)) -> float:
    """The product's CLI on ``src`` with a protocol's setup as options (default: the cantilever's; always dt 0.05,
    nu 0.45, 500 kg/m^3, g 9.8, no damping or floor friction, scale 1, 101 frames); returns its wall-clock seconds.
    Raises RuntimeError with the CLI's output when it fails."""
    cmd = [sys.executable, "-m", "physskin_gs", "animate", str(src), "--headless", "--frames", str(STEPS + 1),
           "--dt", str(DT), "--nu", "0.45", "--density", "500", "--gravity", "9.8", "--damping", "0",
           "--friction", "0", "--scale", "1", *options, "--export", str(out)]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=str(ROOT))
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return time.perf_counter() - t0


def read_frames(folder: Path) -> np.ndarray:
    """(frames, N, 3) points of an exported sequence (``sequence.json``'s pattern), metres: the deformed mesh's
    vertices for a mesh input (OBJ frames), the Gaussians' centres for a splat (PLY frames)."""
    from physskin_gs.io import load_scene

    seq = json.loads((folder / "sequence.json").read_text(encoding="utf-8"))
    files = [folder / (seq["pattern"] % k) for k in range(1, seq["frames"] + 1)]
    if len(files) != STEPS + 1 or not all(f.exists() for f in files):
        raise RuntimeError(f"{folder}: expected {STEPS + 1} frames ({seq['pattern']})")
    if seq["pattern"].endswith(".obj"):
        import trimesh

        return np.stack([np.asarray(trimesh.load(str(f), process=False).vertices, np.float64) for f in files])
    return np.stack([load_scene(str(f)).means.numpy().astype(np.float64) for f in files])


def compare(traj: np.ndarray, fem: dict) -> dict:
    """Chamfer, sag, period and drift of an exported trajectory (frames, N, 3) against the FEM run."""
    tm, ftraj = fem["tm"], fem["traj"]
    rest = traj[0]
    disp = interpolate_p1(tm, ftraj[STEPS] - ftraj[0], rest)  # [N, 3] the FEM's motion of the same rest points
    disp1 = interpolate_p1(tm, ftraj[1] - ftraj[0], rest)
    tip = rest[:, 0] > SIZE[0] - 0.02
    fem_tip = ftraj[:, np.asarray(tm.nodes)[:, 0] > SIZE[0] - 0.02].mean(1) - np.asarray(tm.nodes)[
        np.asarray(tm.nodes)[:, 0] > SIZE[0] - 0.02].mean(0)
    ours_tip = traj[:, tip].mean(1) - rest[tip].mean(0)
    down, side = np.array([0.0, 0.0, -1.0]), np.array([0.0, 1.0, 0.0])
    mf, mo = tip_metrics(fem_tip, DT, down, side), tip_metrics(ours_tip, DT, down, side)
    return {"points": int(rest.shape[0]), "tip_points": int(tip.sum()),
            "chamfer_m2": {"1": chamfer_distance(traj[1], rest + disp1),
                           str(STEPS): chamfer_distance(traj[STEPS], rest + disp)},
            "rms_m": float(np.sqrt(((traj[STEPS] - rest - disp) ** 2).sum(1).mean())),
            "sag_ratio": mo["first_sag_m"] / mf["first_sag_m"], "period_ratio": mo["period_s"] / mf["period_s"],
            "drift_mm": 1e3 * mo["side_max_m"], "fem_drift_mm": 1e3 * mf["side_max_m"], "tip": mo, "fem_tip": mf}


def read_fem_cache(path: Path, divisions) -> dict:
    """The FEM run stored by :func:`fem_run` in ``path`` (.npz). Raises ValueError for a file that is not one, or
    one of other divisions (it is never replaced: choose another path)."""
    from physskin_gs.geometry.tetmesh import TetMesh

    try:
        z = np.load(path, allow_pickle=False)
        got = [int(v) for v in z["divisions"]]
        fem = {"tm": TetMesh(z["nodes"], z["tets"]), "traj": z["traj"]}
    except (OSError, ValueError, KeyError):
        raise ValueError(f"--fem-cache {path} is not a FEM cache of this script (an .npz it wrote): choose another "
                         "path (it is not replaced)") from None
    if got != list(divisions):
        raise ValueError(f"--fem-cache {path} holds the FEM run of divisions {got}, not {list(divisions)}: choose "
                         "another path (it is not replaced)")
    return fem


def fem_run(divisions, cache) -> dict:
    common = dict(size=SIZE, divisions=divisions, steps=STEPS, dt=DT, E=1e5, nu=0.45, density=500.0, gravity=9.8,
                  pin_width=0.02)
    if cache and Path(cache).exists():
        return read_fem_cache(Path(cache), divisions)
    fem = cantilever_protocol(None, **common)["fem_cache"]
    if cache:
        np.savez(cache, divisions=np.asarray(divisions), nodes=np.asarray(fem["tm"].nodes),
                 tets=np.asarray(fem["tm"].tets), traj=fem["traj"])
    return fem


def protocol_arguments(ap: argparse.ArgumentParser, divisions: str, divisions_help: str) -> None:
    """The options both protocols share (inputs, splat, FEM divisions, outputs)."""
    ap.add_argument("--inputs", default="mesh,splat", help="comma-separated: mesh, splat")
    ap.add_argument("--splat-count", type=int, default=20000, help="Gaussians of the splat input (default 20000)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the splat's random points (default 0)")
    ap.add_argument("--divisions", default=divisions,
                    help=f"FEM cells per axis, {divisions_help} (default {divisions})")
    ap.add_argument("--json", default=None, help="write the results here (refused if it exists)")
    ap.add_argument("--keep", default=None, help="keep the inputs and exported frames in this new folder")


def check_arguments(ap: argparse.ArgumentParser, args, even_axes, min_cells: int, divisions_help: str):
    """(inputs, divisions) of the shared options, or ``ap.error`` (exit 2) before any work."""
    inputs = [s.strip() for s in args.inputs.split(",") if s.strip()]
    if not inputs or any(s not in ("mesh", "splat") for s in inputs):
        ap.error(f"--inputs: choose from mesh, splat (got {args.inputs!r})")
    try:
        divisions = [int(v) for v in args.divisions.split(",")]
    except ValueError:
        divisions = []
    if len(divisions) != 3 or min(divisions) < min_cells or any(divisions[a] % 2 for a in even_axes):
        ap.error(f"--divisions: {divisions_help} (got {args.divisions!r})")
    if args.splat_count < 100:
        ap.error(f"--splat-count: at least 100 (got {args.splat_count})")
    if args.json and Path(args.json).exists():
        ap.error(f"--json {args.json} exists")
    if args.keep and Path(args.keep).exists():
        ap.error(f"--keep {args.keep} exists")
    return inputs, divisions


def run_inputs(args, inputs, prefix: str, write_input, options) -> dict:
    """Each input written by ``write_input(kind, folder) -> path``, animated with ``options``: {kind: (exported
    points (frames, N, 3), seconds)}; the work folder is ``--keep`` or a temporary one (removed afterwards)."""
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix=prefix))
    work.mkdir(parents=True, exist_ok=not args.keep)
    out = {}
    try:
        for kind in inputs:
            secs = run_animate(write_input(kind, work), work / f"{kind}_frames", options)
            out[kind] = (read_frames(work / f"{kind}_frames"), secs)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return out


def report(args, header: str, rows, payload: dict) -> None:
    """Print the markdown table (``header``: its column names joined by " | ") and write ``--json``."""
    print()
    print(f"| {header} |")
    print("|" + "---|" * (header.count(" | ") + 1))
    for row in rows:
        print(f"| {row} |")
    if args.json:
        with open(args.json, "x", encoding="utf-8") as f:
            json.dump(payload, f, indent=1)


def _beam_input(args):
    def write(kind: str, folder: Path) -> Path:
        src = folder / ("beam.obj" if kind == "mesh" else "beam_splat.ply")
        if kind == "mesh":
            write_box_mesh(src)
        else:
            write_box_splat(src, args.splat_count, args.seed)
        return src
    return write


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    protocol_arguments(ap, "20,4,4", "y and z even")
    ap.add_argument("--fem-cache", default=None, help="an .npz to reuse the FEM run from, or store it in when it does "
                                                      "not exist (one of other divisions is refused, not replaced)")
    args = ap.parse_args()
    inputs, divisions = check_arguments(ap, args, (1, 2), 1, "three positive integers, the last two even")
    if args.fem_cache and Path(args.fem_cache).exists():
        try:
            read_fem_cache(Path(args.fem_cache), divisions)
        except ValueError as exc:
            ap.error(str(exc))
    t0 = time.perf_counter()
    fem = fem_run(divisions, args.fem_cache)
    print(f"FEM {divisions}: {time.perf_counter() - t0:.1f} s")
    results = {}
    for kind, (traj, secs) in run_inputs(args, inputs, "cantilever_", _beam_input(args), CANTILEVER_OPTIONS).items():
        res = compare(traj, fem)
        res["animate_seconds"] = secs
        res["targets"] = TARGETS[kind]
        res["pass"] = bool(res["chamfer_m2"][str(STEPS)] <= TARGETS[kind]["chamfer_m2"]
                           and res["drift_mm"] <= TARGETS[kind].get("drift_mm", math.inf))
        results[kind] = res
    rows = []
    for kind, r in results.items():
        t = r["targets"]
        tgt = f"Chamfer <= {t['chamfer_m2']}" + (f", drift <= {t['drift_mm']} mm" if "drift_mm" in t else "")
        rows.append(f"{kind} | {r['points']} | {r['chamfer_m2']['1']:.2e} | {r['chamfer_m2'][str(STEPS)]:.2e} | "
                    f"{1e3 * r['rms_m']:.1f} | {r['sag_ratio']:.3f} | {r['period_ratio']:.3f} | {r['drift_mm']:.2f} | "
                    f"{r['animate_seconds']:.0f} | {tgt}: {'PASS' if r['pass'] else 'FAIL'}")
    report(args, "input | points | Chamfer@1 (m^2) | Chamfer@100 (m^2) | RMS@100 (mm) | sag ratio | period ratio | "
           "tip drift (mm) | animate (s) | target", rows, {"fem_divisions": divisions, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
