#!/usr/bin/env python
"""The FEM reference of a splat on shifted voxel grids (issue 23): is a basis's frequency ratio on a capture a
property of the basis, or of where the reference's grid happens to fall?

A splat has no tet mesh of its own. ``physskin-gs evaluate --reference fem`` meshes the object's volume points as the
largest face-connected part of the voxels they occupy, on a grid whose corner sits at the points' minimum, and its
``laplacian-fem`` row is the Laplacian eigenbasis of that very mesh: the comparator lives on the reference's own
grid, every product basis on another one. On thin leaves and stems one or two cells thick, which cells are
connected depends on where the grid falls, so the comparator has an advantage no basis built from the points can
have.

Here each capture's reference is built on three grids of the same cell size, their origins moved by 0, 1/4 and 1/2
of a cell along every axis (``tetmesh_for_object(grid_offset=...)``), and scored with:

* ``modes`` and ``voxel``: the product's bases (``build_skinning``, the same call ``animate`` makes), built once;
* ``laplacian, own grid``: the Laplacian eigenbasis of the reference's own mesh (``evaluate``'s ``laplacian-fem``);
* ``laplacian, other grid``: the Laplacian eigenbasis of the reference protocol's mesh moved by half a cell from
  the reference (offset + 1/2): a tet mesh of the same shape at the same resolution, not the reference's;
* ``modes, other grid``: the elastic-mode fields of that same moved mesh (the ``modes`` construction on the
  reference protocol's grid).

Every number is the geometric mean over the 10 lowest non-rigid modes of sqrt(Rayleigh-Ritz / FEM eigenvalue)
(1 = exact), 16 + 1 handles, E 1e5 Pa, nu 0.45; the table gives the mean over the three reference grids and their
range.

Usage:
  python scripts/eval_splat_grids.py CAPTURE [CAPTURE ...] [--nodes 3000] [--handles 16] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from physskin_gs._runtime import application_threads

application_threads()  # as the CLI does: thread settings before torch and numpy load

import numpy as np  # noqa: E402

OFFSETS = (0.0, 0.25, 0.5)


def _ratio(ref, W) -> float:
    from physskin_gs.physics.subspace_eval import evaluate_basis

    return float(evaluate_basis(ref, W)["freq_ratio_geomean"])


def capture_rows(path: Path, nodes: int, handles: int) -> dict:
    """Frequency ratios of every basis against the references on the shifted grids of one splat capture."""
    import torch

    from physskin_gs.cli.evaluate_fem import tetmesh_for_object
    from physskin_gs.cli.skin import prepare_object
    from physskin_gs.model.bases import SkinningOptions, build_skinning
    from physskin_gs.model.tet_field import TetSkinningField
    from physskin_gs.physics.fem import elastic_mode_weights, laplacian_eigenbasis
    from physskin_gs.physics.subspace_eval import fem_reference

    obj = prepare_object(path, seed=0)
    if obj.kind != "splat":
        raise SystemExit(f"{path}: not a splat (a mesh's reference is its own TetGen mesh, not a voxel grid)")
    opts = SkinningOptions(num_handles=handles)
    opts.max_handles = getattr(obj, "max_handles", None)
    fields = {name: build_skinning(name, obj.surface, obj.volume, opts)[0] for name in ("modes", "voxel")}
    out = {k: [] for k in ("modes", "voxel", "laplacian, own grid", "laplacian, other grid", "modes, other grid")}
    for off in OFFSETS:
        tm = tetmesh_for_object(path, obj, nodes, grid_offset=off)
        ref = fem_reference(tm, E=1e5, nu=0.45, density=1000.0, k=10)
        at = torch.from_numpy(tm.nodes.astype(np.float32))
        for name, field in fields.items():
            out[name].append(_ratio(ref, field.weights(at).double().numpy()))
        out["laplacian, own grid"].append(_ratio(ref, laplacian_eigenbasis(tm, m=handles)))
        other = tetmesh_for_object(path, obj, nodes, grid_offset=off + 0.5)
        for name, W in (("laplacian, other grid", laplacian_eigenbasis(other, m=handles)),
                        ("modes, other grid", elastic_mode_weights(other, m=handles))):
            moved = TetSkinningField(other.nodes, other.tets, W).weights(at).double().numpy()
            out[name].append(_ratio(ref, moved))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("captures", nargs="+", type=Path)
    ap.add_argument("--nodes", type=int, default=3000, help="reference tet-mesh nodes (as evaluate --nodes)")
    ap.add_argument("--handles", type=int, default=16)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--force", action="store_true", help="replace an existing --json file")
    args = ap.parse_args()
    if args.json is not None and args.json.exists() and not args.force:
        raise SystemExit(f"{args.json} exists; pass --force to replace it")
    missing = [str(p) for p in args.captures if not p.is_file()]
    if missing:
        raise SystemExit(f"not found: {', '.join(missing)}")
    rows = {}
    for p in args.captures:
        t0 = time.perf_counter()
        rows[p.name] = capture_rows(p, args.nodes, args.handles)
        print(f"{p.name}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    names = list(next(iter(rows.values())))
    print("| capture | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for cap, r in rows.items():
        print(f"| {cap} | " + " | ".join(f"{np.mean(r[k]):.3f} ({min(r[k]):.2f}-{max(r[k]):.2f})" for k in names)
              + " |")
    gm = {k: math.exp(float(np.mean([np.log(np.mean(r[k])) for r in rows.values()]))) for k in names}
    print("| geometric mean | " + " | ".join(f"{gm[k]:.3f}" for k in names) + " |")
    if args.json is not None:
        args.json.write_text(json.dumps({"offsets": OFFSETS, "nodes": args.nodes, "handles": args.handles,
                                         "rows": rows, "geometric_mean": gm}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
