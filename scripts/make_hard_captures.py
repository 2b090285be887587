"""Hard synthetic captures for the scene analysis: objects on narrow, cut-off, layered, noisy supports.

A real capture's support is rarely a wide, clean floor: it is a table top no wider than 1.1-1.5 times the
object's footprint and cut off where the capture ends, often with a layer on it (paper, a plate), noisy and
slightly curved, with a wall behind, a second object beside the first, the object's base fused into the support,
and arbitrary world axes. :func:`make_hard_capture` builds one such capture from a seed, with its ground truth;
every choice is drawn from the seed, so a seed names a capture.

    python scripts/make_hard_captures.py out/hard --count 50 [--first-seed 0] [--force]

writes ``hard_0000.ply ...`` (INRIA PLYs) and ``truth.json`` (per file: the true up vector, the row ranges of each
object, of the support (table and layer) and of the background, and the draws that made it).

Objects: the CC0 Spot splat of ``data/`` and procedural shapes (a crate, a vase, a capsule figure, a ball on a
foot) covered with surface Gaussians; all licence-clean.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
C0 = 0.28209479177387814
OBJECT_KINDS = ("spot", "crate", "vase", "figure", "ball")


@dataclass
class Part:
    """Gaussians of one part of a capture (scene units before the world rotation), y up."""

    means: np.ndarray  # [n, 3]
    normals: np.ndarray  # [n, 3] unit; the flat axis of each Gaussian
    size: np.ndarray  # [n] tangential scale (sigma), scene units
    rgb: np.ndarray  # [n, 3] in [0, 1]
    opacity: np.ndarray  # [n] in (0, 1)
    flat: float = 0.15  # normal scale / tangential scale
    quats: np.ndarray = None  # [n, 4] wxyz: given orientations (Spot) instead of the normals
    scales: np.ndarray = None  # [n, 3] given scales (with ``quats``)


@dataclass
class Capture:
    """A generated capture and its ground truth (rows in file order)."""

    scene: "object"
    up: np.ndarray  # (3,) true up, world
    rows: Dict[str, List[Tuple[int, int]]] = field(default_factory=dict)  # role -> [(start, stop)]
    draws: Dict[str, object] = field(default_factory=dict)

    def mask(self, role: str) -> np.ndarray:
        m = np.zeros(self.scene.num_gaussians, bool)
        for a, b in self.rows.get(role, []):
            m[a:b] = True
        return m


# ------------------------------------------------------------------------------------------------ parts
def _surface(mesh, n: int, rng, rgb, opacity=0.95) -> Part:
    import trimesh

    pts, face = trimesh.sample.sample_surface(mesh, n, seed=int(rng.integers(1 << 31)))
    nrm = mesh.face_normals[face]
    size = np.full(n, 0.7 * math.sqrt(mesh.area / n))
    col = np.clip(np.asarray(rgb)[None] + rng.normal(0, 0.04, (n, 3)), 0, 1)
    return Part(np.asarray(pts), np.asarray(nrm), size, col, np.full(n, opacity))


def _spot(rng) -> Part:
    from physskin_gs.io import load_scene

    s = load_scene(str(REPO / "data" / "spot_mesh2splat_10k.splat"))  # -y up: flip to y up
    m = s.means.double().numpy() * np.array([1.0, -1.0, -1.0])  # rotation by pi about x
    from physskin_gs.scene import quat_to_rotmat, rotmat_to_quat

    Rx = torch.diag(torch.tensor([1.0, -1.0, -1.0], dtype=torch.float64))
    q = rotmat_to_quat(Rx[None] @ quat_to_rotmat(s.quats).double()).numpy()
    rgb = np.clip(s.sh_dc.double().numpy() * C0 + 0.5, 0, 1)
    sc = np.exp(s.log_scales.double().numpy())
    return Part(m, np.zeros_like(m), sc.max(1), rgb, torch.sigmoid(s.opacity_logits).double().numpy(), quats=q,
                scales=sc)


def _object(kind: str, height: float, rng) -> Part:
    """An object standing on y = 0 with its footprint centred on x = z = 0, ``height`` tall."""
    import trimesh

    rgb = rng.uniform(0.15, 0.9, 3)
    if kind == "spot":
        p = _spot(rng)
        lo, hi = p.means.min(0), p.means.max(0)
        k = height / (hi[1] - lo[1])
        p.means = (p.means - np.array([(lo[0] + hi[0]) / 2, lo[1], (lo[2] + hi[2]) / 2])) * k
        p.size = p.size * k
        p.scales = p.scales * k
        return p
    if kind == "crate":
        w = height * rng.uniform(0.8, 1.6)
        mesh = trimesh.creation.box(extents=(w, height, w * rng.uniform(0.6, 1.0)))
        mesh.apply_translation((0, height / 2, 0))
        return _surface(mesh, 6000, rng, rgb)
    if kind == "vase":
        r = height * rng.uniform(0.2, 0.35)
        mesh = trimesh.creation.cylinder(radius=r, height=height, sections=48)
        mesh.apply_transform(trimesh.transformations.rotation_matrix(-math.pi / 2, (1, 0, 0)))
        mesh.apply_translation((0, height / 2, 0))
        return _surface(mesh, 6000, rng, rgb)
    if kind == "figure":
        r = height * 0.18
        body = trimesh.creation.capsule(height=height * 0.55, radius=r)
        body.apply_transform(trimesh.transformations.rotation_matrix(-math.pi / 2, (1, 0, 0)))
        body.apply_translation((0, r + height * 0.275, 0))
        head = trimesh.creation.icosphere(subdivisions=3, radius=height * 0.14)
        head.apply_translation((0, height * 0.86, 0))
        mesh = trimesh.util.concatenate([body, head])
        return _surface(mesh, 7000, rng, rgb)
    # ball on a foot
    foot = trimesh.creation.cylinder(radius=height * 0.2, height=height * 0.12, sections=40)
    foot.apply_transform(trimesh.transformations.rotation_matrix(-math.pi / 2, (1, 0, 0)))
    foot.apply_translation((0, height * 0.06, 0))
    ball = trimesh.creation.icosphere(subdivisions=4, radius=height * 0.44)
    ball.apply_translation((0, height * 0.56, 0))
    return _surface(trimesh.util.concatenate([foot, ball]), 7000, rng, rgb)


def _rect(x0, x1, z0, z1, y, n, rng, rgb, noise=0.0, curve=0.0, opacity=0.9) -> Part:
    """A horizontal rectangle [x0, x1] x [z0, z1] at height y (normal +y), with height noise and a bowl curve."""
    x = rng.uniform(x0, x1, n)
    z = rng.uniform(z0, z1, n)
    cx, cz = (x0 + x1) / 2, (z0 + z1) / 2
    r2 = ((x - cx) ** 2 + (z - cz) ** 2) / max(1e-12, ((x1 - x0) ** 2 + (z1 - z0) ** 2) / 4)
    yy = y + rng.normal(0, noise, n) + curve * r2
    size = np.full(n, 0.8 * math.sqrt((x1 - x0) * (z1 - z0) / n))
    col = np.clip(np.asarray(rgb)[None] + rng.normal(0, 0.05, (n, 3)), 0, 1)
    nrm = np.tile([0.0, 1.0, 0.0], (n, 1))
    return Part(np.stack([x, yy, z], 1), nrm, size, col, np.full(n, opacity))


def _vertical(x0, x1, y0, y1, z, n, rng, rgb, normal=(0.0, 0.0, 1.0)) -> Part:
    """A vertical rectangle [x0, x1] x [y0, y1] in the plane z = const (a wall or the table's front edge)."""
    x = rng.uniform(x0, x1, n)
    y = rng.uniform(y0, y1, n)
    size = np.full(n, 0.8 * math.sqrt(abs((x1 - x0) * (y1 - y0)) / n))
    col = np.clip(np.asarray(rgb)[None] + rng.normal(0, 0.05, (n, 3)), 0, 1)
    return Part(np.stack([x, y, np.full(n, z)], 1), np.tile(normal, (n, 1)), size, col, np.full(n, 0.9))


# ------------------------------------------------------------------------------------------------ capture
def parts_to_scene(ordered, R: np.ndarray, unit: float = 1.0, offset=0.0):
    """(GaussianScene (INRIA layout, SH 0), rows) of the (role, Part) pairs ``ordered`` rotated by R (3, 3), scaled
    by ``unit`` and shifted by ``offset`` (3,); ``rows``: role -> [(start, stop)] (objects also under "object")."""
    from physskin_gs.scene import GaussianScene, rotmat_to_quat

    means, quats, scales, rgbs, ops = [], [], [], [], []
    rows: Dict[str, List[Tuple[int, int]]] = {}
    start = 0
    for role, p in ordered:
        n = p.means.shape[0]
        means.append((p.means @ R.T) * unit + offset)
        if p.quats is not None:
            from physskin_gs.scene import quat_to_rotmat

            Rl = torch.from_numpy(R)[None] @ quat_to_rotmat(torch.from_numpy(p.quats))
            quats.append(rotmat_to_quat(Rl).numpy())
            scales.append(p.scales * unit)
        else:
            nrm = p.normals @ R.T
            a = np.where(np.abs(nrm[:, :1]) < 0.9, np.array([[1.0, 0, 0]]), np.array([[0, 1.0, 0]]))
            t1 = np.cross(nrm, a)
            t1 /= np.linalg.norm(t1, axis=1, keepdims=True)
            t2 = np.cross(nrm, t1)
            Rl = np.stack([t1, t2, nrm], -1)  # local z = the normal
            quats.append(rotmat_to_quat(torch.from_numpy(Rl)).numpy())
            sc = np.stack([p.size, p.size, p.size * p.flat], 1) * unit
            scales.append(sc)
        rgbs.append(p.rgb)
        ops.append(p.opacity)
        rows.setdefault(role, []).append((start, start + n))
        if role.startswith("object"):
            rows.setdefault("object", []).append((start, start + n))
        start += n
    m = np.concatenate(means)
    op = np.clip(np.concatenate(ops), 1e-4, 1 - 1e-4)
    scene = GaussianScene(
        means=torch.from_numpy(m).float(), quats=torch.from_numpy(np.concatenate(quats)).float(),
        log_scales=torch.from_numpy(np.log(np.maximum(np.concatenate(scales), 1e-12))).float(),
        opacity_logits=torch.from_numpy(np.log(op / (1 - op))).float(),
        sh_dc=torch.from_numpy((np.concatenate(rgbs) - 0.5) / C0).float(), sh_rest=torch.zeros(m.shape[0], 0, 3),
        format="inria-ply")
    return scene, rows


def make_hard_capture(seed: int) -> Capture:
    """One hard capture (module docstring) drawn from ``seed``, with its ground truth.

    Returns a :class:`Capture`: an INRIA-layout GaussianScene (SH 0), the true up vector (3,) in its world frame,
    and the row ranges of the roles ``object`` (every object), ``object0`` / ``object1`` (each), ``support`` (the
    table top, its edge and the layer on it), ``background`` (wall) and ``floater``.
    """

    rng = np.random.default_rng(seed)
    d: Dict[str, object] = {}
    h = 1.0
    kinds = [OBJECT_KINDS[int(rng.integers(len(OBJECT_KINDS)))]]
    if rng.random() < 0.3:
        kinds.append(OBJECT_KINDS[int(rng.integers(len(OBJECT_KINDS)))])
    objs = [_object(k, h * (1.0 if i == 0 else rng.uniform(0.5, 0.9)), rng) for i, k in enumerate(kinds)]
    # side by side along x, a small gap between
    x = 0.0
    spans = []
    for i, o in enumerate(objs):
        lo, hi = o.means.min(0), o.means.max(0)
        shift = x - lo[0]
        o.means = o.means + np.array([shift, 0, 0])
        spans.append((x, x + hi[0] - lo[0]))
        x = x + (hi[0] - lo[0]) + rng.uniform(0.05, 0.3) * h
    allo = np.concatenate([o.means for o in objs])
    flo, fhi = allo.min(0), allo.max(0)
    fw, fd = fhi[0] - flo[0], fhi[2] - flo[2]
    d.update(kinds=kinds, footprint=[float(fw), float(fd)])
    # support: 1.1-1.5 x the footprint, the objects near one or two of its edges (the capture cuts it off there)
    grow = rng.uniform(1.1, 1.5)
    sw, sd = grow * fw, grow * fd
    cut = int(rng.integers(0, 3))  # edges the capture cuts (the object close to them)
    mx = (sw - fw) * (rng.uniform(0.02, 0.15) if cut >= 1 else 0.5)
    mz = (sd - fd) * (rng.uniform(0.02, 0.15) if cut >= 2 else 0.5)
    x0, z0 = flo[0] - mx, flo[2] - mz
    x1, z1 = x0 + sw, z0 + sd
    noise = h * rng.uniform(0.001, 0.008)
    curve = h * rng.uniform(-0.01, 0.01)
    tilt = math.radians(rng.uniform(0, 2.0))  # the top is not quite level with the objects' up
    d.update(support_ratio=float(grow), cut_edges=cut, noise=float(noise), curve=float(curve),
             tilt_deg=float(math.degrees(tilt)))
    n_top = int(rng.integers(4000, 12000))
    table_rgb = rng.uniform(0.3, 0.8, 3)
    parts: List[Tuple[str, Part]] = []
    layer_y = 0.0
    if rng.random() < 0.5:  # paper / a plate on the table, the objects stand on it
        layer_y = h * rng.uniform(0.002, 0.01)
        lw, ld = fw * rng.uniform(0.9, 1.3), fd * rng.uniform(0.9, 1.3)
        lx, lz = (flo[0] + fhi[0]) / 2, (flo[2] + fhi[2]) / 2
        parts.append(("support", _rect(max(x0, lx - lw / 2), min(x1, lx + lw / 2), max(z0, lz - ld / 2),
                                       min(z1, lz + ld / 2), 0.0, int(rng.integers(1500, 4000)), rng,
                                       rng.uniform(0.7, 1.0, 3), noise=noise * 0.3)))
        d["layer_mm_per_m"] = float(layer_y * 1000)
    table_y = -layer_y
    parts.append(("support", _rect(x0, x1, z0, z1, table_y, n_top, rng, table_rgb, noise=noise, curve=curve)))
    thick = h * rng.uniform(0.03, 0.08)
    parts.append(("support", _vertical(x0, x1, table_y - thick, table_y, z1, int(n_top * 0.08), rng,
                                       table_rgb * 0.8)))
    fused = rng.random() < 0.3
    if fused:  # the base sinks into the support (trained captures blur the contact)
        sink = h * rng.uniform(0.005, 0.02)
        for o in objs:
            o.means = o.means - np.array([0, sink, 0])
        d["fused_sink"] = float(sink)
    if rng.random() < 0.4:  # a wall behind the table
        parts.append(("background", _vertical(x0 - 0.2 * sw, x1 + 0.2 * sw, table_y - thick, h * rng.uniform(1.3, 2.0),
                                              z0 - h * rng.uniform(0.02, 0.3), int(rng.integers(3000, 8000)), rng,
                                              rng.uniform(0.5, 0.9, 3))))
        d["wall"] = True
    # tilt the support parts about x (so the objects' up is not exactly the table normal)
    c, s = math.cos(tilt), math.sin(tilt)
    Rt = np.array([[1, 0, 0], [0, c, -s], [0, s, c]])
    for role, p in parts:
        p.means = p.means @ Rt.T
        p.normals = p.normals @ Rt.T
    n_float = int(rng.integers(0, 400))
    if n_float:
        dirs = rng.normal(size=(n_float, 3))
        dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
        centre = (flo + fhi) / 2
        fl = Part(centre + dirs * rng.uniform(1.0, 3.0, (n_float, 1)) * h, dirs, np.full(n_float, 0.01 * h),
                  rng.uniform(0, 1, (n_float, 3)), np.full(n_float, 0.5), flat=1.0)
        parts.append(("floater", fl))
    ordered = [(f"object{i}", o) for i, o in enumerate(objs)] + parts
    # world frame: a random rotation (COLMAP axes are arbitrary) or -y up (the INRIA convention), random units
    if rng.random() < 0.3:
        R = np.diag([1.0, -1.0, -1.0])
        d["frame"] = "-y up"
    else:
        q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
        R = q * np.sign(np.linalg.det(q))
        d["frame"] = "random rotation"
    unit = 10 ** rng.uniform(-1, 1)
    offset = rng.normal(0, 3, 3) * unit
    d["unit"] = float(unit)
    scene, rows = parts_to_scene(ordered, R, unit, offset)
    up = R @ np.array([0.0, 1.0, 0.0])
    return Capture(scene, up, rows, d)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="output folder")
    ap.add_argument("--count", type=int, default=50)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--force", action="store_true", help="replace files in an existing folder")
    args = ap.parse_args(argv)
    from physskin_gs.io import save_scene

    out = Path(args.out)
    if out.exists() and any(out.iterdir()) and not args.force:
        print(f"error: {out} is not empty (use --force)", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    truth = {}
    for seed in range(args.first_seed, args.first_seed + args.count):
        cap = make_hard_capture(seed)
        name = f"hard_{seed:04d}.ply"
        save_scene(cap.scene, str(out / name))
        truth[name] = {"seed": seed, "up": [float(v) for v in cap.up], "rows": cap.rows, "draws": cap.draws}
        print(f"{name}: {cap.scene.num_gaussians} Gaussians, {cap.draws}")
    (out / "truth.json").write_text(json.dumps(truth, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
