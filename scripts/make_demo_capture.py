"""Build a licence-clean "capture" for demos and tests: the CC0 Spot splat standing on a floor disc of flat grey
Gaussians, with a cloud of floaters around it and the whole scene rotated (so no coordinate axis is up).

    python scripts/make_demo_capture.py out/spot_capture.ply [--rotate-seed 7] [--floaters 300]

The true up vector is printed and stored in the PLY's comment-free extra property ``truth_up_x/y/z`` is NOT
added (that would change the file layout); it is printed and returned by :func:`make_capture` instead.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Tuple

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]


def make_capture(rotate_seed: int = 7, n_floor: int = 6000, n_floaters: int = 300, seed: int = 0
                 ) -> Tuple["object", np.ndarray]:
    """(GaussianScene, true up (3,)) of Spot on a floor disc with floaters, rotated by a random rotation."""
    from physskin_gs.io import load_scene
    from physskin_gs.scene import GaussianScene

    spot = load_scene(str(REPO / "data" / "spot_mesh2splat_10k.splat"))  # -y up, about 1 unit tall
    rng = np.random.default_rng(seed)
    means = spot.means.double().numpy()
    up = np.array([0.0, -1.0, 0.0])
    ground = float((means @ up).min())  # the hooves' height along up
    # floor disc: radius 1.2, flat Gaussians lying in the plane (normal along y), 1 mm below the hooves
    r = 1.2 * np.sqrt(rng.random(n_floor))
    a = 2 * math.pi * rng.random(n_floor)
    cx, cz = means[:, 0].mean(), means[:, 2].mean()
    floor = np.stack([cx + r * np.cos(a), np.full(n_floor, -(ground - 0.001)), cz + r * np.sin(a)], 1)
    # floaters: a loose shell of small Gaussians 1.5-3 units from the object
    d = rng.normal(size=(n_floaters, 3))
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    floaters = means.mean(0) + d * rng.uniform(1.5, 3.0, (n_floaters, 1))
    allm = np.concatenate([means, floor, floaters])
    N0, Nf, Nl = means.shape[0], n_floor, n_floaters
    # rotate the whole capture (a COLMAP frame has no reason to be axis aligned)
    q, _ = np.linalg.qr(np.random.default_rng(rotate_seed).normal(size=(3, 3)))
    R = q * np.sign(np.linalg.det(q))
    allm = allm @ R.T
    up_rot = R @ up

    def rows(t, n, fill):
        return torch.cat([t, fill.expand(n, *t.shape[1:]).to(t.dtype)])

    # floor quats: a rotation taking z to the rotated y axis (flat Gaussians: the small scale on local z)
    from physskin_gs.scene import rotmat_to_quat

    ex = np.array([1.0, 0.0, 0.0])
    Rf = R @ np.stack([ex, np.array([0.0, 0.0, 1.0]), np.array([0.0, -1.0, 0.0])], 1)  # local z -> world +y
    qf = rotmat_to_quat(torch.from_numpy(Rf)[None].float())[0]
    # spot's own orientations rotate with the scene
    from physskin_gs.scene import quat_to_rotmat

    Rs = torch.from_numpy(R).float() @ quat_to_rotmat(spot.quats)
    q_spot = rotmat_to_quat(Rs)
    quats = torch.cat([q_spot, qf.expand(Nf, 4), torch.tensor([[1.0, 0.0, 0.0, 0.0]]).expand(Nl, 4)])
    ls = torch.cat([spot.log_scales, torch.log(torch.tensor([0.03, 0.03, 0.002])).expand(Nf, 3),
                    torch.full((Nl, 3), math.log(0.01))])
    op = torch.cat([spot.opacity_logits, torch.full((Nf,), 4.0), torch.full((Nl,), 1.0)])
    grey = (0.55 - 0.5) / 0.28209479177387814
    dc = torch.cat([spot.sh_dc, torch.full((Nf, 3), grey), torch.full((Nl, 3), 1.5)])
    scene = GaussianScene(means=torch.from_numpy(allm).float(), quats=quats, log_scales=ls, opacity_logits=op,
                          sh_dc=dc, sh_rest=torch.zeros(N0 + Nf + Nl, 0, 3), format="inria-ply")
    return scene, up_rot


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="output INRIA PLY")
    ap.add_argument("--rotate-seed", type=int, default=7)
    ap.add_argument("--floaters", type=int, default=300)
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args()
    from physskin_gs.io import save_scene

    out = Path(args.out)
    if out.exists() and not args.force:
        raise SystemExit(f"error: {out} exists (use --force)")
    scene, up = make_capture(args.rotate_seed, n_floaters=args.floaters)
    out.parent.mkdir(parents=True, exist_ok=True)
    save_scene(scene, str(out))
    print(f"wrote {out}: {scene.num_gaussians} Gaussians; true up {np.round(up, 4).tolist()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
