"""From a Gaussian scene to an interactive physics animation (used by the headless CLI and the browser viewer).

:func:`prepare_animation` builds an :class:`AnimatedScene`:

1. Selection (``config.select``): an axis-aligned box ``"xmin,ymin,zmin,xmax,ymax,zmax"`` (scene units) or an
   opacity rule (``"opacity>0.1"``); only selected, finite Gaussians move, the rest stays static.
2. Frames (method.md 3, 7): the skinning field lives in the normalised frame ``X_norm = (X - c_n) / s_n``
   (:func:`physskin_gs.geometry.normalize.normalize_points`); the simulation runs in metres,
   ``X_sim = s (X - c)``, with s = ``config.scale`` (metres per scene unit) or, when None, the value that makes
   the selected object 1 m across. Weight gradients follow the chain rule: ``grad_sim W = grad_norm W / (s s_n)``.
3. Volume: interior fill of the selected splat (method.md 8), cubature points sampled from it (default 1024;
   one volume point per occupied cell of a grid with faces on the bounding box's mid-planes, from at most
   :data:`CUBATURE_POOL` random volume points); the basis is built from at most 20000 random volume points.
   A sparse selection (fewer than :data:`physskin_gs.geometry.interior.SPARSE_SPLAT_GAUSSIANS` usable rows:
   finite, opacity >= :data:`USABLE_OPACITY`) has no interior to fill: its volume is the solid convex hull of the
   usable Gaussians' 2-sigma ellipsoids (:func:`physskin_gs.geometry.interior.sparse_splat_body`), which also
   sets its extent, scale, mass and height above the floor.
4. Skinning: the basis named by ``config.skinning`` (``auto`` by default: the elastic ``modes``; also ``tet``,
   ``voxel``, ``eigen``, ``network``/``pretrained``, ``fit``, ``rbf``), built through the one registry
   :data:`physskin_gs.model.bases.SKINNING_BASES`, with at most
   ``usable - 1`` learned handles (W at N Gaussians has rank at most N): 9 usable Gaussians get 8 handles, a
   single one is one rigid body (H = 1, the constant handle). A reduction is said once, as a progress stage
   ``"note: 9 usable Gaussians: 8 handles instead of 16"``, and recorded in ``info["handles"]`` and the skinning
   source.
5. Simulation (:class:`physskin_gs.physics.simulator.SubspaceSimulator`) and Gaussian deformation
   (:class:`physskin_gs.deform.GaussianDeformer`); handle transforms are converted from the simulation frame to
   the scene frame, ``Z_scene = [A | b / s - A c]``.
6. Field evaluation at the Gaussians (``config.field_eval``): W and grad W at every moving centre, directly or
   through a sparse-grid interpolant of the field (:class:`physskin_gs.model.grid_field.GridSkinningField`,
   tricubic Hermite with an analytic gradient; "auto" uses it from :data:`GRID_AUTO_MIN_GAUSSIANS` moving
   Gaussians). The cubature points and the handle centres are always evaluated directly. The choice, the grid's
   size and build time and its error against direct evaluation on a random subsample are in ``info["field_eval"]``;
   the seconds of every preparation stage are in ``info["timings"]``.

Defaults show physics with no options: gravity along -up and a floor 25% of the object's height below it, so the
object falls, lands and jiggles.
"""

from __future__ import annotations

import math
import os
import re
import time
import warnings
from dataclasses import dataclass, replace
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import torch

from physskin_gs.deform import DeformedGaussians, GaussianDeformer, rest_covariances, rotate_sh
from physskin_gs.errors import OptionError, PhysSkinError
# Every preparation runs the scene analysis, the interior fill and the field build: their modules (and the scipy
# submodules they need, about 0.3 s of imports) load with this module, once per process, rather than inside the
# first preparation, where they would count against the capture (issue 13: load to first frame).
from physskin_gs.geometry.interior import (SPARSE_SPLAT_GAUSSIANS, fill_splat_interior, sample_cubature,
                                           sparse_splat_body)
from physskin_gs.geometry.normalize import normalize_points
from physskin_gs.geometry.scene_analysis import analyze_scene
from physskin_gs.io.inria_ply import NORMALS, split_normals
from physskin_gs.model import grid_field
from physskin_gs.model.bases import DEFAULT_SKINNING, reduced_handles_note, resolve_skinning
from physskin_gs.model.grid_field import (GridSkinningField, evaluate_field, grid_error_report, pilot_sample,
                                         plan_grid)
from physskin_gs.physics import _hessian_native
from physskin_gs.physics.simulator import SubspaceSimulator
from physskin_gs.scene import C0, GaussianScene

__all__ = [
    "AnimationConfig",
    "AnimatedScene",
    "prepare_animation",
    "load_for_animation",
    "parse_selection",
    "resolve_up",
    "PipelineWarning",
]

ProgressFn = Optional[Callable[[str, float], None]]

#: ``AnimationConfig.field_eval`` values.
FIELD_EVAL_MODES = ("auto", "grid", "direct")
#: "auto" field evaluation considers the grid from this many moving Gaussians on. Measured crossovers on the
#: 1M bench capture's object, 2 cores (``scripts/bench_prepare.py``): network about 35k moving Gaussians (50k:
#: grid 0.92 s vs direct 1.22 s; 25k: 0.79 vs 0.61 s); below 50k the gain is at most a few tenths of a second.
#: The eigen field's direct evaluation (C kernel, about 1 us per point per core) is cheaper than any grid
#: (198k: 0.19 s direct vs 0.58 s grid); without the kernel (numpy reference) its crossover is about 120k.
GRID_AUTO_MIN_GAUSSIANS = 50_000
#: Cost model of "auto" above the threshold (seconds, 2 cores, measured on the bench capture): the grid is used
#: when ``(nodes + checks + GRID_FALLBACK_SHARE N) c + N GRID_INTERP_SECONDS (H / 17) + nodes
#: GRID_NODE_OVERHEAD_SECONDS`` is below ``GRID_AUTO_MARGIN`` times the direct ``N c``, with c the pilot's
#: measured direct time per point. When even the interpolation term alone is not below that margin (the eigen
#: field's C kernel: about 1 us per point per core), the grid is not planned at all.
GRID_INTERP_SECONDS = 1.5e-6
GRID_NODE_OVERHEAD_SECONDS = 3e-6
GRID_FALLBACK_SHARE = 0.1
GRID_AUTO_MARGIN = 0.8
#: A moving row is usable (part of the object's volume, counted for the handles) from this opacity on (finite rows
#: only): the interior fill's and the skin command's rule.
USABLE_OPACITY = 0.05
#: ``"base"`` region (the part touching the support): this bottom fraction of the object's height along up.
BASE_REGION_FRACTION = 0.15
#: Moving centres on which the grid is compared with direct evaluation (``info["field_eval"]["error"]``).
GRID_REPORT_POINTS = 2000
#: Cubature points are farthest points of at most this many random volume points (the whole set when smaller).
CUBATURE_POOL = 65536
#: Cubature points sampled from the volume when the basis has no voxel cells (``--cubature`` not given).
DEFAULT_CUBATURE = 1024
#: The skinning basis gets at most this many random shell points as its surface (the network's encoder input is
#: 2048 farthest points of them).
ENCODER_POOL = 65536
#: The grid's node budget is ``min(grid_field.MAX_NODES, max(GRID_NODE_FLOOR, number of moving Gaussians))``.
GRID_NODE_FLOOR = 4096

_UP = {"y": (0.0, 1.0, 0.0), "-y": (0.0, -1.0, 0.0), "z": (0.0, 0.0, 1.0), "-z": (0.0, 0.0, -1.0),
       "x": (1.0, 0.0, 0.0), "-x": (-1.0, 0.0, 0.0)}


def parse_region(spec: str, option: str = "--region") -> tuple:
    """A region of the object (``--pin``, ``--region``) -> ``(kind, values)``: ``("below", [F])`` for ``below:F``
    (0 < F <= 1) and ``base`` (:data:`BASE_REGION_FRACTION`), ``("box", [xmin, ymin, zmin, xmax, ymax, zmax])``
    (finite, min <= max) or ``("sphere", [x, y, z, r])`` (finite, r > 0), scene units. Raises OptionError naming
    ``option`` and the value for anything else. Pure parsing: whether it holds part of an object is
    :meth:`AnimatedScene.region_mask`'s question."""
    s = str(spec).strip()
    if s == "base":
        return "below", [BASE_REGION_FRACTION]
    kind, sep, rest = s.partition(":")
    forms = {"below": (1, "below:FRACTION with 0 < FRACTION <= 1, e.g. below:0.1"),
             "box": (6, "box:xmin,ymin,zmin,xmax,ymax,zmax (scene units, min <= max)"),
             "sphere": (4, "sphere:x,y,z,radius (scene units, radius > 0)")}
    if not sep or kind not in forms:
        raise OptionError(f"{option} {spec!r}: expected 'base', 'below:F', 'box:xmin,ymin,zmin,xmax,ymax,zmax' or "
                          "'sphere:x,y,z,r'")
    count, form = forms[kind]
    try:
        vals = [float(v) for v in rest.split(",")]
    except ValueError:
        vals = []
    ok = len(vals) == count and all(math.isfinite(v) for v in vals)
    if ok and kind == "below":
        ok = 0 < vals[0] <= 1
    elif ok and kind == "box":
        ok = all(vals[i] <= vals[i + 3] for i in range(3))
    elif ok:
        ok = vals[3] > 0
    if not ok:
        raise OptionError(f"{option} {spec!r}: expected {form}")
    return kind, vals


class PipelineWarning(UserWarning):
    """A fallback was taken while preparing an animation (no checkpoint, no fit, shell-only volume...)."""


@dataclass
class AnimationConfig:
    """Options of an animation. Units: E Pa, density kg/m^3, dt s, gravity m/s^2, scale metres per scene unit,
    ``material``: the name of the :mod:`physskin_gs.materials` preset E, nu and density came from (a record only),
    floor_height scene units along up (None = 25% of the object's height below its lowest point).

    ``up``: 'auto' (from the scene analysis: the normal of the support plane the object stands on; without one,
    the format prior of :func:`resolve_up`), or 'y', '-y', 'z', '-z', 'x', '-x'.
    ``select``: 'auto' (the object found by the scene analysis moves; support, background and floaters stay
    static), 'all' (every finite row moves), a box or an opacity rule (:func:`parse_selection`).
    ``floor_height`` None: the support plane when one is found, else 25% of the object's height below it
    (:func:`physskin_gs.bodies.prepare_bodies` sets it for one ``--select`` box resting on static rows).
    ``pin``: None, ``"below:F"`` (the bottom fraction F of the object's height) or ``"box:xmin,...,zmax"``
    (scene units). ``regions``: per-region materials, ``(spec, material name)`` pairs, later ones winning where
    they overlap; a spec as ``pin``'s or ``"base"`` (the part touching the support, the bottom
    :data:`BASE_REGION_FRACTION` of the height); a region takes the material's E and density, the Poisson ratio
    stays ``nu``. ``damping``: Rayleigh coefficient c (beta = c dt; see the simulator). ``friction``: viscous
    floor friction (1/s). ``solver``: the simulator's Hessian policy, "adaptive" (default), "chord" or "newton"
    (see :class:`physskin_gs.physics.simulator.SubspaceSimulator`).
    ``clamp_anisotropy``: clamp F's singular values to [0.2, 5] for the Gaussians (needle guard).
    ``field_eval``: how W and grad W are evaluated at the moving Gaussians: "direct" (the skinning field at every
    centre), "grid" (a sparse-grid interpolant built from the field, :mod:`physskin_gs.model.grid_field`) or
    "auto" (default: "grid" from :data:`GRID_AUTO_MIN_GAUSSIANS` moving Gaussians on when the cost model of
    :data:`GRID_INTERP_SECONDS` estimates it faster than direct evaluation; "direct" otherwise).
    ``stand_sag``: None (E as given), or a fraction of the object's height: :func:`prepare_bodies` raises E until
    the object's own weight, its base held, bends it at most that much (:func:`stiffen_to_stand`; ``animate`` sets
    :data:`STAND_SAG` when no material was chosen).
    """

    E: float = 1e5
    nu: float = 0.45
    density: float = 100.0
    material: Optional[str] = None  # the name of the preset E, nu and density came from (physskin_gs.materials)
    dt: float = 0.03
    gravity: float = 9.8
    up: str = "auto"
    floor: bool = True
    floor_height: Optional[float] = None
    damping: float = 0.02
    num_cubature: Optional[int] = None  # None: the voxel cells of a voxel-mesh basis, else DEFAULT_CUBATURE samples
    newton_iters: int = 5
    skinning: str = DEFAULT_SKINNING  # a name of physskin_gs.model.bases.SKINNING_BASES
    checkpoint: Optional[str] = None
    fit_seconds: float = 60.0
    select: Optional[str] = "auto"
    scale: Optional[float] = None
    pin: Optional[str] = None
    regions: Tuple[Tuple[str, str], ...] = ()
    seed: int = 0
    clamp_anisotropy: bool = True
    num_handles: int = 16
    friction: float = 10.0  # viscous floor friction, 1/s (0 = frictionless floor)
    solver: str = "adaptive"  # Hessian policy of the Newton solve: "adaptive", "chord" or "newton"
    field_eval: str = "auto"  # W / grad W at the moving Gaussians: "auto", "grid" or "direct"
    stand_sag: Optional[float] = None  # None, or the sag (fraction of the height) E is raised to keep under


# ------------------------------------------------------------------------------------------------ helpers
def _report(progress: ProgressFn, stage: str, frac: float) -> None:
    if progress is not None:
        progress(stage, float(frac))


def resolve_up(up: str, scene: Optional[GaussianScene] = None) -> torch.Tensor:
    """(3,) float64 unit up vector from a name. 'auto' here is the FORMAT PRIOR only (what
    :func:`prepare_animation` and ``render`` use when the scene analysis finds no support plane): meshes +y (OBJ
    convention), antimatter15 .splat and PlayCanvas compressed PLY -y (COLMAP-style captures; both spot and
    plant files are -y up), INRIA PLY +z (Blender / NeRF-synthetic exports such as lego), glTF +y (the glTF
    convention), unless the file records its up axis (``scene.up_hint``: the frames physskin_gs exports, an OpenUSD
    stage's authored ``upAxis``, and +y for glTF meshes and splats, whose specification fixes it). A capture
    that stands
    on a support gets its up axis from the support plane instead, whatever its format.

    A vector ``'ux,uy,uz'`` (any length, not zero) is normalised.

    Raises OptionError for an unknown name or a vector that is not three finite numbers, or zero."""
    key = str(up).strip().lower().lstrip("+")
    if "," in key:
        try:
            v = torch.tensor([float(c) for c in key.split(",")], dtype=torch.float64)
        except ValueError:
            v = None
        if v is None or v.shape != (3,) or not bool(torch.isfinite(v).all()) or float(v.norm()) == 0.0:
            raise OptionError(f"--up {up!r}: expected an axis name or three finite numbers 'ux,uy,uz', not all 0")
        return v / v.norm()
    if key == "auto":
        if scene is not None and scene.up_hint is not None:  # recorded in the file (a physskin_gs export)
            return torch.tensor(scene.up_hint, dtype=torch.float64)
        fmt = (scene.format or "") if scene is not None else ""
        key = {"mesh": "y", "splat": "-y", "compressed-ply": "-y", "gltf-gaussian-splatting": "y"}.get(fmt, "z")
    if key not in _UP:
        raise OptionError(f"unknown up axis {up!r}; use auto, y, -y, z, -z, x, -x or 'ux,uy,uz'")
    return torch.tensor(_UP[key], dtype=torch.float64)


_RULE = re.compile(r"^\s*opacity\s*(>=|<=|>|<)\s*([-+0-9.eE]+)\s*$")


def _finite_rows(scene: GaussianScene, idx: Optional[torch.Tensor] = None) -> torch.Tensor:
    """(N,) bool (or (len(idx),) for the rows idx): means, log-scales, quats and opacity logit all finite."""
    sel = (lambda t: t) if idx is None else (lambda t: t[idx])
    return torch.isfinite(sel(scene.means)).all(1) & torch.isfinite(sel(scene.log_scales)).all(1) \
        & torch.isfinite(sel(scene.quats)).all(1) & torch.isfinite(sel(scene.opacity_logits))


def parse_selection_spec(spec: Optional[str]):
    """Check a ``--select`` value without a scene (before any file is loaded).

    Returns ``("all", None)`` for None (no selection given: every finite row) or ``"all"``, ``("auto", None)``
    (every object the scene analysis finds on the support), ``("largest", None)`` (the heaviest of them),
    ``("rule", (op, value))`` for ``"opacity>0.1"`` (also >=, <, <=; value finite) or ``("box", (lo, hi))`` for
    ``"xmin,ymin,zmin,xmax,ymax,zmax"`` (two lists of 3 floats, scene units, max > min on every axis). Names are
    case-insensitive and surrounding blanks are ignored.

    Several boxes separated by ``;`` (``--select`` given once per box) give ``("boxes", [(lo, hi), ...])``: each box
    a body of its own (:func:`physskin_gs.bodies.prepare_bodies`); one box with empty neighbours (``"BOX;"``) is
    that box.

    Raises:
        OptionError: an empty or blank string (an explicitly given empty value never means "all"), a list holding
            something other than boxes, or any other malformed value; the message lists the accepted forms.
    """
    if spec is None:
        return "all", None
    s = str(spec).strip()
    if ";" in s:
        parts = [p.strip() for p in s.split(";") if p.strip()]
        if not parts:
            return parse_selection_spec("")
        boxes = []
        for i, part in enumerate(parts):
            try:
                kind, val = parse_selection_spec(part)
            except OptionError as exc:
                raise OptionError(f"--select {spec!r}: several selections must all be boxes "
                                  f"'xmin,ymin,zmin,xmax,ymax,zmax' (one body each); value {i + 1} ({part!r}): "
                                  f"{str(exc).split(': ', 1)[-1]}") from None
            if kind != "box":
                raise OptionError(f"--select {spec!r}: several selections must all be boxes "
                                  f"'xmin,ymin,zmin,xmax,ymax,zmax' (one body each); value {i + 1} is {part!r}")
            boxes.append(val)
        return ("box", boxes[0]) if len(boxes) == 1 else ("boxes", boxes)
    if not s:
        raise OptionError(f"--select {spec!r}: empty value; use auto (the objects the scene analysis finds), largest "
                          "(the heaviest of them), all "
                          "(every finite row), a box 'xmin,ymin,zmin,xmax,ymax,zmax' (scene units) or a rule like "
                          "'opacity>0.1'")
    if s.lower() == "all":
        return "all", None
    if s.lower() in ("auto", "largest"):
        return s.lower(), None
    m = _RULE.match(s)
    if m:
        try:
            val = float(m.group(2))
        except ValueError:
            val = float("nan")
        if not math.isfinite(val):
            raise OptionError(f"--select {spec!r}: the opacity threshold must be a finite number")
        return "rule", (m.group(1), val)
    try:
        vals = [float(v) for v in s.split(",")]
    except ValueError:
        vals = []
    if len(vals) != 6 or not all(math.isfinite(v) for v in vals):
        raise OptionError(f"--select {spec!r}: expected auto, largest, all, 'xmin,ymin,zmin,xmax,ymax,zmax' or a rule like "
                          "'opacity>0.1'")
    if any(b <= a for a, b in zip(vals[:3], vals[3:])):
        raise OptionError(f"--select {spec!r}: box max must exceed min on every axis")
    return "box", (vals[:3], vals[3:])


def parse_selection(spec: Optional[str], scene: GaussianScene) -> torch.Tensor:
    """(N,) bool mask of the Gaussians that move: finite rows matching ``spec``.

    ``spec``: None or 'all' (every finite row), a box ``"xmin,ymin,zmin,xmax,ymax,zmax"`` (scene units) or ``"opacity>0.1"``
    (also >=, <, <=; opacity is the activated value in [0, 1]). Raises OptionError for a malformed spec or an
    empty selection (a single Gaussian is enough: it moves as one rigid body, :func:`prepare_animation`).
    """
    kind, val = parse_selection_spec(spec)
    finite = _finite_rows(scene)
    if kind in ("auto", "largest"):
        raise OptionError(f"--select {kind} is resolved by the scene analysis (prepare_animation), not as a mask")
    if kind == "boxes":
        raise OptionError(f"--select with {len(val)} boxes makes {len(val)} bodies "
                          "(physskin_gs.bodies.prepare_bodies), not one mask")
    if kind == "all":
        mask = finite
    elif kind == "rule":
        op, v = val
        o = scene.opacities
        mask = {">": o > v, ">=": o >= v, "<": o < v, "<=": o <= v}[op] & finite
    else:
        lo, hi = torch.tensor(val[0]), torch.tensor(val[1])
        mask = ((scene.means >= lo) & (scene.means <= hi)).all(1) & finite
    if not bool(mask.any()):
        raise OptionError(f"selection {spec!r} keeps no Gaussian (finite rows); at least 1 is needed to animate")
    return mask


def load_for_animation(path, num_mesh_gaussians: int = 20000, seed: int = 0) -> GaussianScene:
    """A scene to animate: a Gaussian splat via :func:`physskin_gs.io.load_scene`, or a mesh (obj/ply/stl/glb...)
    converted to small flat Gaussians on its surface (area-uniform samples, oriented by the face normal), coloured
    by the file's base colour where it has one (vertex or face colours, a texture, a material; a light clay without)
    and shaded once, at rest, by a light from above (:func:`mesh_shading`: a flat colour hides the shape).

    For a mesh the returned scene has ``format == "mesh"`` and an extra attribute ``mesh``
    (:class:`physskin_gs.io.mesh.Mesh`) so a mesh sequence can be exported. Raises FileNotFoundError or
    SceneFormatError as the loaders do.
    """
    import os

    from physskin_gs import io as pio

    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no such file: {path}")
    fmt = pio.detect_format(path)
    if fmt not in ("mesh", "mesh-ply"):
        return with_camera_up(pio.load_scene(path), path)
    mesh = pio.load_mesh(path)
    from physskin_gs.geometry.sampling import sample_surface_faces
    from physskin_gs.scene import rotmat_to_quat

    pts, nrm, face, bary = sample_surface_faces(mesh.vertices, mesh.faces, num_mesh_gaussians, seed=seed)
    pts_t = torch.from_numpy(pts)
    n = torch.from_numpy(nrm)
    n = torch.where(n.norm(dim=1, keepdim=True) > 0.5, n, torch.tensor([0.0, 0.0, 1.0]))
    a = torch.where((n[:, :1].abs() < 0.9), torch.tensor([1.0, 0.0, 0.0]), torch.tensor([0.0, 1.0, 0.0]))
    t1 = torch.nn.functional.normalize(torch.linalg.cross(n, a), dim=1)
    t2 = torch.linalg.cross(n, t1)
    R = torch.stack([t1, t2, n], dim=-1)
    tri = mesh.triangles()
    area = 0.5 * np.linalg.norm(np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]), axis=1).sum()
    r = math.sqrt(max(area, 1e-30) / num_mesh_gaussians)
    N = pts_t.shape[0]
    log_scales = torch.log(torch.tensor([r, r, 0.1 * r])).expand(N, 3).clone()
    rgb = mesh.colours.at(face, bary) if mesh.colours is not None else np.tile(MESH_CLAY, (N, 1))  # [N, 3]
    rgb = rgb * mesh_shading(nrm, mesh.vertices, mesh.faces)[:, None]
    scene = GaussianScene(
        means=pts_t, quats=rotmat_to_quat(R), log_scales=log_scales,
        opacity_logits=torch.full((N,), 4.0), sh_dc=torch.from_numpy(((rgb - 0.5) / C0).astype(np.float32)),
        sh_rest=torch.zeros(N, 0, 3),
        source=os.path.abspath(path), format="mesh",
        # glTF fixes +y as up in its specification ("glTF uses a right-handed coordinate system ... +Y is up"): a
        # recorded fact, not a guess to weigh against the stable-base evidence (which lays tall or reclining
        # objects down: a Kenney desk chair came out on its back)
        up_hint=(0.0, 1.0, 0.0) if path.lower().endswith((".glb", ".gltf")) else None,
    )
    scene.mesh = mesh  # type: ignore[attr-defined]
    return scene


#: the power of |W| that weights the cubature points into a handle's centre (AnimatedScene: where its field is large)
HANDLE_CENTRE_POWER = 4


#: how the log names an up found from the trainer's cameras (``GaussianScene.up_hint_source``)
CAMERAS_SOURCE = "the capture's cameras"


def with_camera_up(scene: GaussianScene, path) -> GaussianScene:
    """``scene`` (an INRIA PLY read from ``path``) with the up direction of its trainer's cameras as its
    ``up_hint`` (``up_hint_source`` :data:`CAMERAS_SOURCE` plus the file and the rule), when a ``cameras.json``
    is where the trainer writes it (:func:`physskin_gs.io.cameras.find_cameras_json`) and the cameras are held
    level (:func:`physskin_gs.geometry.camera_up.camera_up`). The scene analysis then takes that up as known, as
    it does an up recorded in the file: a support plane within 30 degrees of it still levels the capture. Other
    formats, and scenes whose file records an up, are returned as they are. An unreadable ``cameras.json``, or
    cameras that do not say, give a SceneWarning and the scene unchanged. Raises nothing else."""
    if scene.format != "inria-ply" or scene.up_hint is not None:
        return scene
    from physskin_gs.geometry.camera_up import camera_up
    from physskin_gs.io.cameras import find_cameras_json, read_camera_rotations
    from physskin_gs.io.ply_header import SceneFormatError, SceneWarning

    found = find_cameras_json(path)
    if found is None:
        return scene
    try:
        est = camera_up(read_camera_rotations(found))
    except (OSError, SceneFormatError) as exc:
        warnings.warn(f"{found}: not used for the up axis: {exc}", SceneWarning, stacklevel=2)
        return scene
    if est.up is None:
        warnings.warn(f"{found}: not used for the up axis: {est.reason}", SceneWarning, stacklevel=2)
        return scene
    return replace(scene, up_hint=tuple(float(v) for v in est.up),
                   up_hint_source=f"{CAMERAS_SOURCE}, {os.path.basename(found)}: {est.reason}")


#: RGB of a mesh whose file gives no colour: a light clay (a grey one vanished against the video's grey floor).
MESH_CLAY = np.array([0.80, 0.72, 0.62], dtype=np.float32)
#: Direction the light of :func:`mesh_shading` comes from, in the file's frame (meshes are +y up by convention).
MESH_LIGHT = (0.3, 1.0, 0.5)


def mesh_shading(normals: np.ndarray, vertices: np.ndarray, faces: np.ndarray, ambient: float = 0.4) -> np.ndarray:
    """(n,) float32 Lambert factor ``ambient + (1 - ambient) max(0, n . l)`` of surface samples with face normals
    ``normals`` (n, 3) (the mesh's winding; turned outward first when the mesh's signed volume is negative, i.e.
    its faces wind inward), ``l`` the unit :data:`MESH_LIGHT`. Baked into a mesh's Gaussians at rest: the light
    turns with the object as it moves, which is enough to read its shape. ``vertices`` (V, 3), ``faces`` (F, 3):
    the mesh, for its signed volume (trimesh's). Raises nothing."""
    import trimesh

    signed_volume = float(trimesh.Trimesh(np.asarray(vertices, np.float64), np.asarray(faces), process=False).volume)
    light = np.asarray(MESH_LIGHT, dtype=np.float64)
    light /= np.linalg.norm(light)
    ndl = np.asarray(normals, dtype=np.float64) @ light * (-1.0 if signed_volume < 0 else 1.0)  # [n]
    return (ambient + (1.0 - ambient) * np.maximum(ndl, 0.0)).astype(np.float32)


def sanitize_invalid_rows(scene: GaussianScene, center: torch.Tensor,
                          bad: Optional[torch.Tensor] = None) -> GaussianScene:
    """The scene with every invalid row (``bad`` (N,) bool, default :func:`physskin_gs.io.invalid_mask`) made
    harmless and finite, so exported frames keep every row and hold no NaN/Inf: mean = ``center`` (3,) scene
    units, identity quaternion, log-scale -20 (a point), opacity logit -20 (invisible), SH 0. Rows that were valid
    are not touched; a scene without invalid rows is returned as it is. Raises nothing."""
    if bad is None:
        from physskin_gs.io import invalid_mask

        bad = invalid_mask(scene)
    if not bool(bad.any()):
        return scene
    means, quats, ls = scene.means.clone(), scene.quats.clone(), scene.log_scales.clone()
    op, dc, rest = scene.opacity_logits.clone(), scene.sh_dc.clone(), scene.sh_rest.clone()
    means[bad] = center.to(means.dtype)
    quats[bad] = torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=quats.dtype)
    ls[bad] = -20.0
    op[bad] = -20.0
    dc[bad] = 0.0
    rest[bad] = 0.0
    return replace(scene, means=means, quats=quats, log_scales=ls, opacity_logits=op, sh_dc=dc, sh_rest=rest)


#: an explicit --up within this many degrees of the support plane's normal still uses that support (its height is
#: the floor, and with --select auto every object on it is a body: physskin_gs.bodies); further off, the analysis'
#: support does not apply
UP_AGREES_DEG = 5.0


def up_off_support_deg(up, analysis) -> Optional[float]:
    """Degrees between an up vector (3,) (any length, scene axes) and the scene analysis' support normal, or None
    when the analysis found no support plane. Below :data:`UP_AGREES_DEG` an explicit ``--up`` keeps the support."""
    if analysis is None or analysis.plane is None:
        return None
    u = np.asarray(up, dtype=np.float64).reshape(3)
    c = float(u @ np.asarray(analysis.up, dtype=np.float64)) / max(float(np.linalg.norm(u)), 1e-300)
    return math.degrees(math.acos(max(-1.0, min(1.0, c))))


#: the handle count (constant included) whose Hessian assembly every cubature point pays for; above it the
#: simulator assembles the Hessian from a cubature subset of the same cost (:func:`hessian_points_for`)
HESSIAN_FULL_HANDLES = 17


def hessian_points_for(num_cubature: int, num_handles: int) -> Optional[int]:
    """Cubature points the simulator's Hessian sums for ``num_handles`` handles (constant included): all (None) up
    to :data:`HESSIAN_FULL_HANDLES`; above, ``n (17 / H)^2`` (at least 256), so the assembly, whose cost grows as
    n H^2, costs what it costs at 17 handles (33 handles, 2048 points: 544). The energy and gradient keep every
    point (:class:`~physskin_gs.physics.simulator.SubspaceSimulator`, ``hessian_points``)."""
    if num_handles <= HESSIAN_FULL_HANDLES:
        return None
    k = max(256, int(round(num_cubature * (HESSIAN_FULL_HANDLES / num_handles) ** 2)))
    return None if k >= num_cubature else k


def robust_range(values: np.ndarray, q: float = 0.005) -> Tuple[float, float]:
    """(the q and 1 - q quantiles) of values (M,) float, M >= 1, by one partition (no sort; any size, where
    torch.quantile stops at 16M): the robust extent of heights along up, in their units. Raises nothing."""
    k = int(q * (values.shape[0] - 1))
    part = np.partition(values, (k, values.shape[0] - 1 - k))
    return float(part[k]), float(part[values.shape[0] - 1 - k])


def analyze_for_animation(scene: GaussianScene, up: Optional[np.ndarray] = None):
    """:func:`physskin_gs.geometry.scene_analysis.analyze_scene` of a scene (means in scene units, activated
    opacities), with the format prior of :func:`resolve_up` for scenes without a support plane (after the
    stable-base evidence of :mod:`physskin_gs.geometry.upright`, unless the file records its up axis). ``up``: a
    (3,) unit up vector the user gave (``--up``): it is taken as known, as an up recorded in the file is (only
    support planes within 30 degrees of it are examined, so the support and the object follow it). Returns a
    ``SceneAnalysis`` whose masks are (N,) over the scene's rows. Raises DegenerateGeometryError when no valid
    opaque row is left."""
    if up is not None:
        a = analyze_scene(scene.means, scene.opacities, scene.log_scales,
                          format_prior_up=np.asarray(up, dtype=np.float64), prior_name="the up given (--up)",
                          stable_base=False, prior_if_it_stands=False, prior_recorded=True,
                          support_search=scene.format != "mesh" and not scene.object_only, seed=0,
                          quats=scene.quats, colors=scene.colors())
        if a.up_source == "format-prior":  # (the "prior" is the user's: say so)
            a.up_source = "given"
            a.reason = "the up given (--up); no support plane within 30 degrees of it carries the object"
        return a
    prior = resolve_up("auto", scene).numpy()
    name = ("glTF's +y up (fixed by the format)" if scene.up_hint is not None and scene.format == "mesh"
            else scene.up_hint_source if scene.up_hint is not None and scene.up_hint_source
            else "the up axis recorded in the file" if scene.up_hint is not None
            else f"the up-axis convention of {scene.format} files" if scene.format else "the format prior")
    # an up axis recorded in the file (our own exports) is the truth; a format's convention is only a guess, and
    # the axis the object stands on most stably is evidence against it
    a = analyze_scene(scene.means, scene.opacities, scene.log_scales, format_prior_up=prior, prior_name=name,
                      stable_base=scene.up_hint is None, prior_if_it_stands=scene.format == "mesh",
                      prior_recorded=scene.up_hint is not None,
                      support_search=scene.format != "mesh" and not scene.object_only,
                      seed=0, quats=scene.quats, colors=scene.colors())
    if a.up_source == "format-prior" and scene.up_hint is not None and (scene.up_hint_source or "").startswith(
            CAMERAS_SOURCE):
        a.up_source = "cameras"
    return a


def _parts_facts(parts) -> List[Dict]:
    """JSON-ready records of the scene analysis' ``far_parts`` / ``hovering_parts``: (mass ratio, lo (3,), hi (3,)
    scene units) -> {"mass_ratio", "lo", "hi"}."""
    return [{"mass_ratio": float(r), "lo": [float(v) for v in lo], "hi": [float(v) for v in hi]} for r, lo, hi in parts]


def scene_analysis_facts(analysis) -> Dict:
    """JSON-ready facts of a scene analysis (up vector in scene coordinates, its source and reason, whether it is
    unsure, the support
    plane n.x = d with d in scene units, row counts per class, robust centre and size in scene units, seconds).
    Raises nothing."""
    plane = None
    if analysis.plane is not None:
        p = analysis.plane
        plane = {"normal": [float(v) for v in p.normal], "offset": float(p.offset), "inliers": int(p.inliers),
                 "width_ratio": float(p.width_ratio), "confidence": float(p.confidence)}
    return {"up": [float(v) for v in analysis.up], "up_source": analysis.up_source, "reason": analysis.reason,
            "unsure": bool(getattr(analysis, "unsure", False)),
            "other_objects": int(getattr(analysis, "other_objects", 0)),
            "flat_part": float(getattr(analysis, "flat_part", 0.0)),
            "up_candidates": list(getattr(analysis, "up_candidates", [])),
            "far_parts": _parts_facts(getattr(analysis, "far_parts", [])),
            "hovering_parts": _parts_facts(getattr(analysis, "hovering_parts", [])),
            "support_plane": plane, "counts": analysis.counts,
            "moving_transparent": int(analysis.transparent_in_object.sum()),
            "robust_center": [float(v) for v in analysis.center], "robust_size": [float(v) for v in analysis.size],
            "seconds": float(sum(analysis.timings.values())), "summary": analysis.summary()}


def count_invalid_rows(facts: Dict, analysis, invalid: np.ndarray, moving: np.ndarray) -> None:
    """Recount :func:`scene_analysis_facts` ``facts`` (in place) with every row that is ``invalid`` (N,) bool (a
    non-finite mean, scale, quaternion, opacity or SH value: :func:`physskin_gs.io.validate.invalid_mask`) as
    invalid: the analysis itself marks only non-finite means and opacities, so a static row with a NaN scale was
    counted as support or background, and the selection line's classes did not add up to the static count (a fresh
    user's report). An invalid row among the ``moving`` (N,) bool rows never moves either (it is written sanitised,
    :meth:`AnimatedScene.deformed_scene`): it is counted as invalid, and ``facts["moving_invalid"]`` says how many
    such rows the selection holds (the selection line counts them as static). Raises nothing."""
    moving = np.asarray(moving, dtype=bool)
    inv = np.asarray(invalid, dtype=bool) | analysis.invalid
    facts["moving_invalid"] = int((inv & moving).sum())
    counts = dict(facts["counts"])
    for k in ("transparent", "floater", "support", "object", "background"):
        counts[k] = int((getattr(analysis, k) & ~inv).sum())
    counts["invalid"] = int(inv.sum())
    facts["counts"] = counts
    facts["moving_transparent"] = int((analysis.transparent_in_object & ~inv).sum())


def region_material(spec, mat):
    """The :class:`physskin_gs.materials.Material` of a ``--region SPEC=MATERIAL`` (``mat`` one, or its name).
    Raises OptionError for an unknown name."""
    from physskin_gs.materials import Material, material

    if isinstance(mat, Material):
        return mat
    try:
        return material(mat)
    except KeyError as exc:
        raise OptionError(f"--region {spec}={mat}: {exc.args[0]}") from None


def points_in_region(kind: str, vals, X: torch.Tensor, up: torch.Tensor, heights: Tuple[float, float]) -> torch.Tensor:
    """(n,) bool mask of the points X (n, 3) float64, scene units, in the parsed region ``(kind, vals)`` of
    :func:`parse_region`: ``below`` the bottom fraction vals[0] of the object's height range ``heights`` (lowest,
    highest along the unit ``up`` (3,) float64), ``box`` / ``sphere`` as given. Raises nothing."""
    if kind == "below":
        lo, hi = heights
        return X @ up <= lo + vals[0] * (hi - lo)
    if kind == "box":
        lo, hi = torch.tensor(vals[:3], dtype=torch.float64), torch.tensor(vals[3:], dtype=torch.float64)
        return ((X >= lo) & (X <= hi)).all(1)
    return (X - torch.tensor(vals[:3], dtype=torch.float64)).norm(dim=1) <= vals[3]  # sphere


def region_materials(regions, E: float, density: float, norm, up, heights: Tuple[float, float]):
    """``materials(points (k, 3) normalised frame) -> (E factor (k,), density factor (k,))`` of the per-region
    materials ``regions`` (``(spec, material name or Material)`` pairs, later ones winning, as
    :meth:`AnimatedScene.set_regions`) relative to the object's ``E`` (Pa) and ``density`` (kg/m^3), for the
    skinning basis (:class:`physskin_gs.model.bases.SkinningOptions`); ``norm`` the normalisation, ``up`` (3,)
    and ``heights`` (lowest, highest) of the object along up (scene units) for ``below:F`` / ``base``. None without
    regions. Raises OptionError for a bad spec or material name."""
    if not regions:
        return None
    parsed = []
    for spec, mat in regions:
        mat = region_material(spec, mat)
        parsed.append((parse_region(spec, "--region"), float(mat.E) / float(E), float(mat.density) / float(density)))
    u = torch.as_tensor(up, dtype=torch.float64).reshape(3)
    span = (float(heights[0]), float(heights[1]))

    def materials(points: np.ndarray):
        X = norm.to_world(torch.as_tensor(np.asarray(points), dtype=torch.float64))  # [k, 3] scene units
        e, d = np.ones(X.shape[0]), np.ones(X.shape[0])
        for (kind, vals), fe, fd in parsed:
            mask = points_in_region(kind, vals, X, u, span).numpy()
            e[mask], d[mask] = fe, fd
        return e, d

    return materials


def _build_field(config: AnimationConfig, surface_norm: torch.Tensor, volume_norm: torch.Tensor,
                 progress: ProgressFn, max_handles: Optional[int] = None, mesh_norm=None, bounds_norm=None,
                 materials=None):
    """SkinningField in the normalised frame from the basis named by ``config.skinning``
    (:func:`physskin_gs.model.bases.build_skinning`), with at most ``max_handles`` learned handles (None: no
    bound); ``mesh_norm`` the input's surface mesh (vertices, faces) in the normalised frame, for ``tet``;
    ``bounds_norm`` (lo (3,), hi (3,)) the object's box in the normalised frame, for the voxel meshes;
    ``materials`` the parts' materials (:func:`region_materials`), for ``modes``. Returns
    (field, source string, the :class:`~physskin_gs.model.bases.SkinningReducedWarning` of a
    reduced handle count or None)."""
    from physskin_gs.model.bases import (SkinningFallbackWarning, SkinningOptions, SkinningReducedWarning,
                                         build_skinning)

    opts = SkinningOptions(num_handles=config.num_handles, checkpoint=config.checkpoint,
                           fit_seconds=config.fit_seconds, seed=config.seed, max_handles=max_handles, mesh=mesh_norm,
                           bounds=bounds_norm, materials=materials)
    reduced = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SkinningFallbackWarning)
        warnings.simplefilter("always", SkinningReducedWarning)
        field, source = build_skinning(config.skinning, surface_norm, volume_norm, opts, progress)
    for w in caught:
        if issubclass(w.category, SkinningReducedWarning):
            reduced = w.message  # said once by the caller, as a note
            continue
        warnings.warn(str(w.message), PipelineWarning if issubclass(w.category, SkinningFallbackWarning)
                      else w.category, stacklevel=3)
    return field, source, reduced


def _stage_clock(timings: Dict[str, float]) -> Callable[[str], None]:
    """``lap(stage)``: adds the seconds since the previous lap (or since this call) to ``timings[stage]``."""
    clock = [time.perf_counter()]

    def lap(stage: str) -> None:
        now = time.perf_counter()
        timings[stage] = timings.get(stage, 0.0) + now - clock[0]
        clock[0] = now

    return lap


def _weights_chunked(field, x_norm: torch.Tensor, chunk: int = 65536):
    Ws, Gs = [], []
    for s in range(0, x_norm.shape[0], chunk):
        W, G = field.weights_and_grads(x_norm[s:s + chunk].float())
        Ws.append(W.float())
        Gs.append(G.float())
    return torch.cat(Ws), torch.cat(Gs)


#: Most voxel cells taken as cubature points (:func:`voxel_cubature`); a finer voxel mesh samples instead.
MAX_CELL_CUBATURE = 16384


def voxel_cubature(field, norm, num_cubature: Optional[int]):
    """The cubature of a basis on a voxel mesh (the ``voxel`` and ``modes`` bases of a splat, a glued voxel fill):
    one point per occupied voxel, at its centre, with W there and the voxel's mean grad W
    (:meth:`physskin_gs.model.tet_field.TetSkinningField.voxel_cells`), all of one volume. This integrates the basis
    the way its mesh does: a mirror-symmetric body keeps a mirror-symmetric reduced model, where points sampled from
    random Gaussians integrate a cross-section's bending stiffness only to about 1 % near a clamped root, enough to
    split a square beam's two equal bendings and swing it sideways by 10-35 mm (docs/skinning.md).

    One point per voxel leaves the variation of F within a voxel free (a soft column sagged 41 % too far under its
    own weight), so the voxels' 6 tets come along as the simulator's ``stabilization`` sub-points: the quadratic
    part of the energy is integrated over them (selective reduced integration, :class:`SubspaceSimulator`).

    Returns (centres (C, 3) float64 scene units, W (C, H) float32, grad W (C, H, 3) float32 normalised frame,
    tets: (centroids (6C, 3) float64 scene units, W (6C, H), grad W (6C, H, 3) normalised frame, owner (6C,)
    int64) or None), or None when ``num_cubature`` is given (the user's count of sampled points wins), the field
    has no voxel cells, or they are fewer than 16 or more than :data:`MAX_CELL_CUBATURE`."""
    if num_cubature is not None or not hasattr(field, "voxel_cells"):
        return None
    cells = field.voxel_cells()
    if cells is None or not 16 <= cells[0].shape[0] <= MAX_CELL_CUBATURE:
        return None
    centres, _, W, G = cells
    tets = field.voxel_tets() if hasattr(field, "voxel_tets") else None
    if tets is not None:
        tets = (norm.to_world(torch.from_numpy(tets[0])).double(),) + tuple(tets[1:])
    return norm.to_world(torch.from_numpy(centres)).double(), W, G, tets


def _gaussian_weights(field, x_norm: torch.Tensor, mode: str, seed: int = 0):
    """W (N, H) and grad W (N, H, 3) (float32, normalised frame) of the moving Gaussians at x_norm (N, 3), by
    ``mode`` ("direct", "grid" or "auto", :class:`AnimationConfig` ``field_eval``), and the facts of the choice
    (JSON-ready): ``mode`` (what was used), ``requested``, ``reason``, ``seconds``; for the grid also its
    :meth:`~physskin_gs.model.grid_field.GridSkinningField.facts` (scheme, cell, node count, build seconds...),
    ``num_refined`` (centres served by the refined grid of the cells that failed the check), ``num_fallback``
    (centres evaluated directly: outside both grids, or in a refined cell that failed the check too) and
    ``error``, :func:`~physskin_gs.model.grid_field.grid_error_report` on :data:`GRID_REPORT_POINTS` random
    centres (the resolution rule's pilot sample, evaluated directly once). The grid's node budget is
    ``min(grid_field.MAX_NODES, max(GRID_NODE_FLOOR, N))``. Raises OptionError for an unknown mode, and what the
    field raises."""
    if mode not in FIELD_EVAL_MODES:
        raise OptionError(f"--field-eval must be one of {', '.join(FIELD_EVAL_MODES)}, got {mode!r}")
    t0 = time.perf_counter()
    N = int(x_norm.shape[0])
    facts: Dict = {"requested": mode, "num_points": N}
    plan = None
    # node budget: the resolution rule's cap, and never more nodes than the centres they serve (beyond a floor)
    budget = min(grid_field.MAX_NODES, max(GRID_NODE_FLOOR, N))
    if mode == "direct":
        use, facts["reason"] = "direct", "asked for"
    elif mode == "grid":
        use, facts["reason"] = "grid", "asked for"
    elif N < GRID_AUTO_MIN_GAUSSIANS:
        use, facts["reason"] = "direct", f"{N} moving Gaussians < {GRID_AUTO_MIN_GAUSSIANS}"
    else:
        pilot = pilot_sample(field, x_norm, GRID_REPORT_POINTS, seed)
        c = pilot.seconds_per_point
        direct_s = N * c
        floor_s = N * GRID_INTERP_SECONDS * field.num_handles / 17.0  # the grid's interpolation alone
        if floor_s >= GRID_AUTO_MARGIN * direct_s:  # no grid can pay (the eigen field's C kernel): no plan
            grid_s = floor_s
            plan = None
        else:
            plan = plan_grid(field, x_norm, pilot=GRID_REPORT_POINTS, seed=seed, max_nodes=budget, pilot_data=pilot)
            grid_s = ((plan.num_nodes + plan.num_occupied + GRID_FALLBACK_SHARE * N) * c + floor_s
                      + plan.num_nodes * GRID_NODE_OVERHEAD_SECONDS)
        facts["estimate_seconds"] = {"direct": direct_s, "grid": grid_s}
        if plan is None:
            use = "direct"
            facts["reason"] = (f"a grid's interpolation alone ({floor_s:.2f} s estimated) is not below "
                               f"{GRID_AUTO_MARGIN:g} x {direct_s:.2f} s direct: no grid planned")
        elif grid_s < GRID_AUTO_MARGIN * direct_s:
            use = "grid"
            facts["reason"] = (f"{N} moving Gaussians >= {GRID_AUTO_MIN_GAUSSIANS} and a grid of {plan.num_nodes} "
                               f"nodes is estimated at {grid_s:.2f} s vs {direct_s:.2f} s direct")
        else:
            use = "direct"
            facts["reason"] = (f"a grid of {plan.num_nodes} nodes + {plan.num_occupied} checks is estimated at "
                               f"{grid_s:.2f} s, not below {GRID_AUTO_MARGIN:g} x {direct_s:.2f} s direct")
    facts["mode"] = use
    if use == "direct":
        W, G = evaluate_field(field, x_norm)  # chunks shared by the torch threads (same values as one pass)
        facts["seconds"] = time.perf_counter() - t0
        return W, G, facts
    if plan is None:
        plan = plan_grid(field, x_norm, pilot=GRID_REPORT_POINTS, seed=seed, max_nodes=budget)
    grid = GridSkinningField(field, x_norm, plan=plan)
    t1 = time.perf_counter()
    W, G = grid.weights_and_grads(x_norm)
    facts.update(grid.facts())
    facts["plan_seconds"] = plan.seconds
    facts["interpolation_seconds"] = time.perf_counter() - t1
    facts["num_fallback"] = grid.last_fallback
    facts["num_refined"] = grid.last_refined
    facts["error"] = grid_error_report(field, grid, plan.pilot_points, reference=(plan.pilot_W, plan.pilot_G))
    facts["seconds"] = time.perf_counter() - t0
    return W, G, facts


# ------------------------------------------------------------------------------------------------ scene
def scene_with_rows(rest: GaussianScene, rows: Dict[str, torch.Tensor]) -> GaussianScene:
    """``rest`` with the rows ``rows["index"]`` (M,) replaced by ``rows``' means (M, 3), quats (M, 4), log_scales
    (M, 3) and, when present, sh_rest (M, K, 3) and normals (M, 3) (the ``nx ny nz`` extras) (the dict of
    :meth:`AnimatedScene.deformed_rows`); ``rest`` is not changed."""
    idx = rows["index"]
    means, quats, log_scales = rest.means.clone(), rest.quats.clone(), rest.log_scales.clone()
    means[idx], quats[idx], log_scales[idx] = rows["means"], rows["quats"], rows["log_scales"]
    sh_rest = rest.sh_rest
    if "sh_rest" in rows:
        sh_rest = sh_rest.clone()
        sh_rest[idx] = rows["sh_rest"]
    extra = rest.extra
    if "normals" in rows:
        extra = dict(extra)
        for j, k in enumerate(NORMALS):
            col = torch.as_tensor(extra[k]).clone()
            col[idx] = rows["normals"][:, j].to(col.dtype)
            extra[k] = col
    return replace(rest, means=means, quats=quats, log_scales=log_scales, sh_rest=sh_rest, extra=extra)


class AnimatedScene:
    """A scene whose selected Gaussians are driven by the subspace simulator (see the module docstring).

    ``extent_points`` (K, 3) scene units: the points whose extent along up sets ``height_scene`` and
    ``lowest_scene`` (the default floor and drag radius); None = the moving centres (a sparse splat passes its
    body, whose ellipsoids reach beyond the centres).

    Attributes: scene (GaussianScene, rest state), moving ((N,) bool), num_handles (H = m + 1), up_vector ((3,)
    float64), frame (int, steps taken since reset), sim (SubspaceSimulator), config (AnimationConfig),
    sim_scale (metres per scene unit), center ((3,) scene-frame origin of the simulation frame),
    skinning_source (str), volume (SplatVolume or None), info (dict of preparation facts).
    """

    def __init__(self, scene: GaussianScene, moving: torch.Tensor, config: AnimationConfig, field, norm,
                 up: torch.Tensor, sim_scale: float, center: torch.Tensor, cubature_scene: torch.Tensor,
                 volume_scene: float, skinning_source: str, info: Dict,
                 extent_points: Optional[torch.Tensor] = None,
                 cubature_fields: Optional[Tuple[torch.Tensor, torch.Tensor]] = None,
                 cubature_tets: Optional[tuple] = None) -> None:
        self.scene = scene
        self.moving = moving
        self.config = config
        self.field = field
        self.norm = norm
        self.up_vector = up
        self.sim_scale = float(sim_scale)
        self.center = center.double()
        self.skinning_source = skinning_source
        self.info = info
        self.frame = 0
        self._idx = torch.nonzero(moving).flatten()
        s_n = float(norm.scale)
        lap = _stage_clock(info.setdefault("timings", {}))

        # cubature points: weights in the normalised frame, gradients chain-ruled to the simulation frame
        if cubature_fields is None:
            Wc, Gc = _weights_chunked(field, norm.to_normalized(cubature_scene.double()).float())
        else:
            Wc, Gc = (t.float() for t in cubature_fields)
        self.num_handles = int(Wc.shape[1])
        X_sim = (cubature_scene.double() - self.center) * self.sim_scale
        self._cub_rest_scene = cubature_scene.double()
        self._Wc = Wc.double()
        # the object's height along up: its moving centres, or (a sparse splat) the body around them
        ext = scene.means[self._idx] if extent_points is None else extent_points
        lo_u = float((ext.double() @ up).min())
        hi_u = float((ext.double() @ up).max())
        self.height_scene = max(hi_u - lo_u, 1e-12)
        self.lowest_scene = lo_u
        #: the support plane's height along up (scene units) when the scene analysis found one, else None
        self.support_height = info.get("support_height")
        # the floor acts on the cubature points, which lie inside the object; its surface reaches lower, by a
        # different gap in each column (a base cut through its cells, a curved base): each point of the lowest
        # layer meets the floor when the surface under it does (its lift, metres)
        #: (n,) float64 metres, simulation frame: each cubature point's lift (:meth:`_floor_lifts`)
        self.floor_lift = self._floor_lifts(cubature_scene.double(), ext.double(), up.double(), config.seed)
        floor_sim = self._floor_sim(config.floor, config.floor_height)
        _hessian_native.available()  # compile/load the Hessian kernel now, not inside the first step
        stab = None
        if cubature_tets is not None:  # a voxel cubature's tets: the simulator integrates mu/2 |F|^2 over them
            Pt, Wt, Gt, owner = cubature_tets
            stab = ((Pt.double() - self.center) * self.sim_scale, Wt.float(), Gt.float() / (s_n * self.sim_scale),
                    torch.as_tensor(owner), torch.full((len(owner),), 1.0 / 6.0, dtype=torch.float64))
        self.sim = SubspaceSimulator(
            X_sim, Wc, Gc / (s_n * self.sim_scale), volume=volume_scene * self.sim_scale ** 3,
            E=config.E, nu=config.nu, density=config.density, dt=config.dt, gravity=config.gravity,
            up=up, floor_height=floor_sim, damping=config.damping, newton_iters=config.newton_iters,
            friction=config.friction, solver=config.solver,
            hessian_points=hessian_points_for(X_sim.shape[0], int(Wc.shape[1])), stabilization=stab)
        self.sim.set_floor_lift(self.floor_lift)  # also for a floor set later (the viewer's floor toggle)
        lap("cubature_weights")
        # Gaussians: weights and scene-frame gradients once (directly or through the grid), then the deformer
        mov_means = scene.means[self._idx]  # only what the deformer needs (no copy of the SH of the moving rows)
        Wg, Gg, facts = _gaussian_weights(field, norm.to_normalized(mov_means.double()).float(),
                                          getattr(config, "field_eval", "auto"), seed=config.seed)
        info["field_eval"] = facts
        self._Wg = Wg
        lap("gaussian_weights")
        clamp = (0.2, 5.0) if config.clamp_anisotropy else None
        Gg /= s_n
        self.deformer = GaussianDeformer(mov_means, scene.quats[self._idx], scene.log_scales[self._idx], Wg, Gg,
                                         singular_clamp=clamp)
        del Gg
        lap("deformer_setup")
        # handle centres: centroids of the cubature points weighted by |W|^4 (learned handles only), i.e. where each
        # field is large. Weighted by |W| the centres of global fields (elastic modes, eigenvectors, which span the
        # whole object) all fell within 5 % of the object's size of its centre of mass, one clump of 16 gizmos in
        # the viewer that no one could pick apart; by |W|^4 they spread over 18-22 % (Spot, the Cheburashka)
        aw = self._Wc[:, :-1].abs()
        aw = (aw / aw.max(0).values.clamp_min(1e-30)) ** HANDLE_CENTRE_POWER  # [n_c, H-1], each column's max 1
        cen = (aw.T @ self._cub_rest_scene) / aw.sum(0).clamp_min(1e-12)[:, None]  # [H-1, 3]
        self._handle_rest = cen
        self._handle_W = field.weights(norm.to_normalized(cen).float()).double()
        self._drag_info: Dict[int, dict] = {}
        self.last_grab: Optional[dict] = None  # what the last start_drag grabbed (its docstring)
        self._pin_spec = None
        self.set_pin(config.pin)
        self._regions = []
        if config.regions:
            self.set_regions(config.regions)
        self._cache_key = None
        self._cache = None
        lap("handles_pins")

    # -------------------------------------------------------------------------------- frames / parameters
    #: Most surface rows the floor lifts are computed from (a random subset beyond: the column bottoms are quantiles).
    LIFT_ROWS = 65_536

    def _floor_lifts(self, cubature_scene: torch.Tensor, ext: torch.Tensor, up: torch.Tensor, seed: int) -> np.ndarray:
        """(n,) float64 metres (simulation frame): each cubature point's height above the body's surface in its
        column, for the points of its lowest layer (:func:`~physskin_gs.geometry.bottom.lifts_above_bottom`,
        spacing: the cubature points' median nearest-neighbour distance; no column's bottom below the body's 0.5 %
        height quantile, as stray rows under a column would hold it off the floor); 0 for the others."""
        from scipy.spatial import cKDTree

        from physskin_gs.geometry.bottom import lifts_above_bottom

        X = cubature_scene.numpy()
        P = ext.numpy()
        if P.shape[0] > self.LIFT_ROWS:
            P = P[np.random.default_rng(seed).choice(P.shape[0], self.LIFT_ROWS, replace=False)]
        if X.shape[0] < 2 or P.shape[0] == 0:
            return np.zeros(X.shape[0])
        d = cKDTree(X).query(X, k=2)[0][:, 1]
        spacing = float(np.median(d))
        if not spacing > 0:
            return np.zeros(X.shape[0])
        h = P @ up.numpy()
        k = int(0.005 * (h.shape[0] - 1))
        lowest = float(np.partition(h, k)[k])  # the 0.5 % height quantile (a selection, no sort)
        return lifts_above_bottom(X, P, up.numpy(), spacing, lowest=lowest) * self.sim_scale

    def _floor_sim(self, enabled: bool, height: Optional[float]) -> Optional[float]:
        if not enabled:
            return None
        if height is not None:
            h = float(height)
        elif self.support_height is not None:
            h = float(self.support_height)
        else:
            h = self.lowest_scene - 0.25 * self.height_scene
        return (h - float(self.center @ self.up_vector)) * self.sim_scale

    @property
    def floor_scene(self) -> Optional[float]:
        """The floor's height along up (scene units), where the object's surface comes to rest (each cubature point
        of the lowest layer meets it :attr:`floor_lift` above it); None without a floor."""
        if self.sim.floor_height is None:
            return None
        return self.sim.floor_height / self.sim_scale + float(self.center @ self.up_vector)

    @property
    def dt(self) -> float:
        """Simulation time step in seconds; setting a non-positive or non-finite value raises OptionError."""
        return self.sim.dt

    @dt.setter
    def dt(self, value: float) -> None:
        if not (value > 0 and math.isfinite(value)):
            raise OptionError(f"dt must be positive, got {value}")
        self.sim.dt = float(value)

    def set_material(self, E=None, nu=None, density=None) -> None:
        """Change the object's E (Pa), nu, density (kg/m^3) at any time (regions of :meth:`set_regions` keep their
        own E and density); raises OptionError for invalid values."""
        self.sim.set_material(E=E, nu=nu, density=density)
        if getattr(self, "_regions", None):
            self._apply_regions()

    def set_gravity(self, g: float, direction=None) -> None:
        """Gravity magnitude (m/s^2) along ``direction`` (3,) or -up."""
        self.sim.set_gravity(g, direction)

    def set_floor(self, enabled: bool, height: Optional[float] = None) -> None:
        """Enable/disable the floor; ``height`` in scene units along up (None: 25% of the height below)."""
        self.sim.set_floor(self._floor_sim(enabled, height))

    def set_damping(self, c: float) -> None:
        """Rayleigh damping coefficient c >= 0 (beta = c dt)."""
        self.sim.set_damping(c)

    def set_friction(self, eta: float) -> None:
        """Viscous floor friction eta >= 0 in 1/s."""
        self.sim.set_friction(eta)

    def region_mask(self, spec: str, option: str = "--pin", label: Optional[str] = None) -> torch.Tensor:
        """(n,) bool mask of the cubature points (at rest) in the region ``spec``: ``"below:F"`` (the bottom
        fraction F of the object's height along up), ``"base"`` (the part touching the support: ``below:0.15``),
        ``"box:xmin,ymin,zmin,xmax,ymax,zmax"`` or ``"sphere:x,y,z,r"`` (scene units; the viewer's "pick region"
        makes a sphere around the clicked point). ``option`` names the option in errors, ``label`` the value
        (default: ``spec``). Raises OptionError for a malformed spec or one that holds none of the object's
        cubature points (the message gives the object's bounds and the points' spacing)."""
        kind, vals = parse_region(spec, option)
        X = self._cub_rest_scene
        hgt = X @ self.up_vector
        mask = points_in_region(kind, vals, X, self.up_vector, (float(hgt.min()), float(hgt.max())))
        if not bool(mask.any()):
            lo, hi = X.min(0).values.tolist(), X.max(0).values.tolist()
            spacing = float(np.prod(np.maximum(np.subtract(hi, lo), 1e-12)) / max(X.shape[0], 1)) ** (1 / 3)
            raise OptionError(
                f"{option} {label or repr(spec)} holds none of the object's {X.shape[0]} simulation (cubature) points: "
                f"they span x {lo[0]:.3g}..{hi[0]:.3g}, y {lo[1]:.3g}..{hi[1]:.3g}, z {lo[2]:.3g}..{hi[2]:.3g} "
                f"(scene units), about {spacing:.2g} apart; move the region onto the object or make it larger")
        return mask

    def set_pin(self, spec: Optional[str]) -> None:
        """Pin cubature points: None, or a region of :meth:`region_mask` (``"below:F"``, ``"base"``,
        ``"box:xmin,ymin,zmin,xmax,ymax,zmax"``). Pins hold points at their rest positions.
        Raises OptionError for a malformed spec or an empty pin set."""
        if spec is None or str(spec).strip() == "":
            self.sim.set_pins(None)
            self._pin_spec = None
            return
        s = str(spec).strip()
        idx = torch.nonzero(self.region_mask(s, "--pin")).flatten()
        self.sim.set_pins(idx)
        self._pin_spec = s

    def set_regions(self, regions) -> None:
        """Per-region materials: ``regions`` a sequence of ``(spec, material)`` pairs, later ones winning where they
        overlap; ``spec`` a region of :meth:`region_mask`, ``material`` a :class:`physskin_gs.materials.Material`
        or its name. The cubature points in a region take its Young's modulus and density; the Poisson ratio
        stays the object's (:meth:`physskin_gs.physics.simulator.SubspaceSimulator.set_point_materials`). An
        empty sequence makes the object one material again. Raises OptionError for a bad spec or material name
        (nothing changes then)."""
        parsed = []
        for spec, mat in regions:
            mat = region_material(spec, mat)
            parsed.append((str(spec).strip(), mat, self.region_mask(spec, "--region", f"'{spec}={mat.name}'")))
        self._regions = parsed
        self._apply_regions()

    @property
    def regions(self) -> list:
        """The per-region materials: a list of dicts (spec, material, E, density, cubature points, and
        ``overridden``: how many of those a later region takes, the later one winning where they overlap)."""
        regs = getattr(self, "_regions", [])
        out = []
        for i, (sp, m, k) in enumerate(regs):
            later = torch.zeros_like(k)
            for _, _, k2 in regs[i + 1:]:
                later |= k2
            out.append({"spec": sp, "material": m.name, "E": m.E, "density": m.density,
                        "cubature_points": int(k.sum()), "overridden": int((k & later).sum())})
        return out

    def _apply_regions(self) -> None:
        """Per-point factors of the regions relative to the object's current E and density."""
        regions = getattr(self, "_regions", [])
        if not regions:
            self.sim.set_point_materials(None, None)
            return
        n = int(self._cub_rest_scene.shape[0])
        stiff, dens = np.ones(n), np.ones(n)
        for _, mat, mask in regions:
            m = mask.numpy()
            stiff[m] = mat.E / self.sim.E
            dens[m] = mat.density / self.sim.density
        self.sim.set_point_materials(stiff, dens)

    # -------------------------------------------------------------------------------- stepping
    def step(self, n: int = 1) -> dict:
        """Advance n simulation steps. Returns stats: ms, newton_iters, grad_norm, substeps, rejected, energy
        (kinetic/elastic/gravity/... in J), frame."""
        st = self.sim.step(n)
        self.frame += n
        d = st.as_dict()
        d["energy"] = self.sim.energies()
        d["frame"] = self.frame
        self._cache_key = None
        return d

    def reset(self) -> None:
        """Back to the rest state (drags dropped, pins kept)."""
        for did in list(self._drag_info):
            self.end_drag(did)
        self.sim.reset()
        self.frame = 0
        self._cache_key = None

    # -------------------------------------------------------------------------------- transforms
    def handle_transforms_scene(self) -> torch.Tensor:
        """(H, 3, 4) float64 handle transforms in the scene frame: ``Z_scene = [A | b / s - A c]``."""
        Z = self.sim.handle_transforms()
        A, b = Z[..., :3], Z[..., 3]
        out = Z.clone()
        out[..., 3] = b / self.sim_scale - A @ self.center
        return out

    def _deform(self):
        key = (self.frame, float(self.sim.time), id(self.sim.q))
        if self._cache_key != key:
            Z = self.handle_transforms_scene()
            self.deformer.deform(Z)
            self._cache_key = key
        return self.deformer

    def display_deformer(self) -> GaussianDeformer:
        """A deformer of the moving Gaussians for another thread (the viewer's display): it shares this scene's
        precomputed data and has its own buffers (:meth:`GaussianDeformer.fork`); feed it
        :meth:`handle_transforms_scene`. Static rows are the scene's own (``moving`` selects the deformed ones)."""
        return self.deformer.fork()

    def deformed_gaussians(self, view_rotations: bool = True) -> DeformedGaussians:
        """The whole scene deformed (static part unchanged): means (N, 3), covars (N, 3, 3), view_rotations
        (N, 3, 3) (identity for static rows and for DC-only scenes), opacities (N,), sh (N, K+1, 3).

        ``view_rotations=False`` skips the per-Gaussian polar decomposition (R_F = identity is returned), for
        callers that only use the DC colour."""
        d = self._deform()
        sc = self.scene
        N = sc.num_gaussians
        means = sc.means.clone()
        means[self._idx] = d.means
        if getattr(self, "_rest_covars", None) is None:
            self._rest_covars = rest_covariances(sc.quats, sc.log_scales)  # static rows: computed once
        covars = self._rest_covars.clone()
        covars[self._idx] = d.covars
        if sc.sh_rest.shape[1] > 0 and view_rotations:
            vr = torch.eye(3).expand(N, 3, 3).clone()
            vr[self._idx] = d.view_rotations()
        else:
            vr = torch.eye(3).expand(N, 3, 3)
        return DeformedGaussians(means=means, covars=covars, view_rotations=vr, opacities=sc.opacities, sh=sc.sh)

    @property
    def moving_index(self) -> torch.Tensor:
        """(M,) int64 rows of the scene that move (``nonzero(moving)``), the order of :meth:`deformed_rows`."""
        return self._idx

    def deformed_rows(self) -> Dict[str, torch.Tensor]:
        """The current state of the moving rows only, for exporters (:mod:`physskin_gs.io.sequence`).

        Returns a dict of fresh float32 tensors for the rows ``index`` (M,) int64 of the scene: ``means`` (M, 3)
        scene units, ``quats`` (M, 4) unit wxyz and ``log_scales`` (M, 3) from the SVD of F L (det U = +1), and
        ``sh_rest`` (M, K, 3) rotated per Gaussian by R_F (degree <= 3; degree 4 keeps bands 1-3 rotated and
        zeroes band 4), and, when the scene has normals (a file's non-zero ``nx ny nz``), ``normals`` (M, 3) turned
        by R_F. Opacities and the DC colour never change. Static rows are those of :meth:`export_rest_scene`.
        """
        d = self._deform()
        rest = self._moving_export_rest()
        q, ls = d.export_quats_scales()
        out = {"index": self._idx, "means": d.means.clone(), "quats": q, "log_scales": ls}
        K = rest["num_sh_rest"]
        R = d.view_rotations() if K > 0 or rest["normals"] is not None else None  # [M, 3, 3]
        if rest["normals"] is not None:
            out["normals"] = torch.einsum("mab,mb->ma", R, rest["normals"])
        if K > 0:
            rot = rotate_sh(rest["sh"], R)  # [M, 1 + k3, 3]
            sh = torch.zeros(self._idx.numel(), K, 3)
            sh[:, :rot.shape[1] - 1] = rot[:, 1:]
            out["sh_rest"] = sh
        bad = rest["bad"]  # [M] moving rows with a non-finite SH value: written as the rest does
        if bad is not None:
            out["means"][bad] = rest["means"]
            out["quats"][bad] = rest["quats"]
            out["log_scales"][bad] = rest["log_scales"]
            if "normals" in out:
                out["normals"][bad] = rest["normals"][bad]
        return out

    def _moving_export_rest(self) -> Dict:
        """What :meth:`deformed_rows` takes from the rest scene for the moving rows, gathered once: ``sh``
        (M, 1 + k3, 3) DC and the first k3 = min(K, 15) SH-rest coefficients (SH of a row with a NaN SH value are
        zero, :meth:`export_rest_scene`), ``num_sh_rest`` K, and ``bad`` (M,) bool or None with the rest means
        (B, 3), quats (B, 4) and log_scales (B, 3) of those B invalid moving rows."""
        if getattr(self, "_moving_rest", None) is None:
            sc = self.export_rest_scene()
            K = sc.sh_rest.shape[1]
            nrm = split_normals(sc.extra)[0]
            rest: Dict = {"num_sh_rest": K, "bad": None, "normals": None if nrm is None else torch.stack(
                [torch.as_tensor(nrm[k]).float()[self._idx] for k in NORMALS], 1)}  # [M, 3]
            if K > 0:
                rest["sh"] = torch.cat([sc.sh_dc[self._idx][:, None], sc.sh_rest[self._idx, :min(K, 15)]], dim=1)
            bad = self._invalid_rows()[self._idx]
            if bool(bad.any()):
                rows = self._idx[bad]
                rest.update(bad=bad, means=sc.means[rows], quats=sc.quats[rows], log_scales=sc.log_scales[rows])
            self._moving_rest = rest
        return self._moving_rest

    def export_rest_scene(self) -> GaussianScene:
        """The rest scene as every exported frame writes its static rows: invalid rows sanitised
        (:func:`sanitize_invalid_rows`), all other rows the input's raw values. Computed once."""
        if getattr(self, "_export_rest", None) is None:
            self._export_rest = sanitize_invalid_rows(self.scene, self.center.float(), self._invalid_rows())
        return self._export_rest

    def deformed_scene(self) -> GaussianScene:
        """GaussianScene of the current state for export: the static rows of :meth:`export_rest_scene` and the
        moving rows of :meth:`deformed_rows` (means, quats/log-scales from the SVD of F L, SH rotated by R_F)."""
        return scene_with_rows(self.export_rest_scene(), self.deformed_rows())

    def _invalid_rows(self) -> torch.Tensor:
        """(N,) bool invalid rows of the rest scene (:func:`physskin_gs.io.invalid_mask`), computed once."""
        if getattr(self, "_invalid", None) is None:
            from physskin_gs.io import invalid_mask

            self._invalid = invalid_mask(self.scene)
        return self._invalid

    @property
    def num_invalid(self) -> int:
        """Rows with a non-finite value (never moved; written sanitised by :meth:`deformed_scene`)."""
        return int(self._invalid_rows().sum())

    def sh_handling(self) -> str:
        """How exported SH are written: 'rotated per Gaussian by R_F' or 'DC only'."""
        K = self.scene.sh_rest.shape[1]
        if K == 0:
            return "DC only (the input has no higher SH bands)"
        if K > 15:
            return "bands 1-3 rotated per Gaussian by R_F; band 4 zeroed"
        return "rotated per Gaussian by R_F (docs/method.md 10)"

    def skinning_weights(self) -> torch.Tensor:
        """(N_moving, H) float32 skinning weights of the moving Gaussians (field basis, constant last)."""
        return self._Wg

    def handle_positions(self) -> torch.Tensor:
        """(H-1, 3) float32 current world positions of the learned handles' centres (centroids of the cubature
        points at rest weighted by |W|^4, where each field is large: :data:`HANDLE_CENTRE_POWER`; moved by LBS)."""
        Z = self.handle_transforms_scene()
        Xh = torch.cat([self._handle_rest, torch.ones(self._handle_rest.shape[0], 1, dtype=torch.float64)], 1)
        disp = torch.einsum("nh,hab,nb->na", self._handle_W, Z, Xh)
        return (self._handle_rest + disp).float()

    def cubature_positions(self) -> torch.Tensor:
        """(n_c, 3) float32 current cubature points in scene units."""
        return (self.sim.positions() / self.sim_scale + self.center).float()

    # -------------------------------------------------------------------------------- drags
    def _to_sim(self, p) -> torch.Tensor:
        return (torch.as_tensor(p, dtype=torch.float64).reshape(3) - self.center) * self.sim_scale

    def start_drag(self, point, radius: Optional[float] = None) -> int:
        """Grab the cubature points within ``radius`` (scene units; default 15% of the object's size) of
        ``point`` (3,) world, or the 8 nearest if none. Returns a drag id for :meth:`update_drag`; what was grabbed
        is in :attr:`last_grab` (``points``: how many, ``within``: False for the nearest-8 fallback, ``nearest``:
        the nearest point's distance, ``radius``: the radius used, both in scene units)."""
        p = self._to_sim(point)
        if not torch.isfinite(p).all():
            raise OptionError("drag point must be finite")
        x = self.sim.positions()
        r = (0.15 * self.height_scene if radius is None else float(radius)) * self.sim_scale
        dist = (x - p).norm(dim=1)
        idx = torch.nonzero(dist <= r).flatten()
        within = idx.numel() > 0
        if not within:
            idx = dist.argsort()[: min(8, dist.numel())]
        self.last_grab = {"points": int(idx.numel()), "within": within,
                          "nearest": float(dist.min()) / self.sim_scale, "radius": r / self.sim_scale}
        return self._start(idx, p)

    def start_handle_drag(self, handle: int) -> int:
        """Grab the cubature points dominated by learned handle ``handle`` (largest |W|); the grab point is the
        handle's current centre. Raises OptionError for a bad index."""
        if not 0 <= int(handle) < self.num_handles - 1:
            raise OptionError(f"handle index {handle} outside [0, {self.num_handles - 2}] (the {self.num_handles - 1} "
                              f"learned handles; the constant handle, number {self.num_handles - 1}, is not draggable)")
        dom = self._Wc[:, :-1].abs().argmax(1)
        idx = torch.nonzero(dom == int(handle)).flatten()
        if idx.numel() == 0:
            idx = self._Wc[:, int(handle)].abs().argsort(descending=True)[:8]
        p = self._to_sim(self.handle_positions()[int(handle)].double())
        return self._start(idx, p)

    def _start(self, idx: torch.Tensor, p_sim: torch.Tensor) -> int:
        x0 = self.sim.positions()[idx].clone()
        did = self.sim.add_drag(idx, x0)
        self._drag_info[did] = {"x0": x0, "p0": p_sim.clone()}
        return did

    def update_drag(self, drag_id: int, target) -> None:
        """Move drag ``drag_id``'s grabbed point to ``target`` (3,) world: the motion since drag start is applied
        to every selected point's start position. Non-finite targets are ignored."""
        if drag_id not in self._drag_info:
            raise OptionError(f"unknown drag id {drag_id}")
        t = self._to_sim(target)
        if not torch.isfinite(t).all():
            return
        info = self._drag_info[drag_id]
        self.sim.update_drag(drag_id, info["x0"] + (t - info["p0"]))

    def end_drag(self, drag_id: int) -> None:
        """Release a drag (its spring is removed); an unknown or already released id is ignored (idempotent)."""
        self._drag_info.pop(drag_id, None)
        self.sim.remove_drag(drag_id)

    # -------------------------------------------------------------------------------- meshes
    def deformed_mesh_vertices(self) -> Optional[np.ndarray]:
        """(V, 3) float32 deformed vertices of the source mesh (mesh inputs only), else None."""
        mesh = getattr(self.scene, "mesh", None)
        if mesh is None:
            return None
        if not hasattr(self, "_mesh_W"):
            V = torch.from_numpy(mesh.vertices).double()
            self._mesh_W = _weights_chunked(self.field, self.norm.to_normalized(V).float())[0].double()
            self._mesh_V = V
        Z = self.handle_transforms_scene()
        Xh = torch.cat([self._mesh_V, torch.ones(self._mesh_V.shape[0], 1, dtype=torch.float64)], 1)
        return (self._mesh_V + torch.einsum("nh,hab,nb->na", self._mesh_W, Z, Xh)).float().numpy()


# ------------------------------------------------------------------------------------------------ prepare
def prepare_animation(scene: GaussianScene, config: AnimationConfig, progress: ProgressFn = None, *,
                      analysis=None, moving: Optional[torch.Tensor] = None,
                      frame: Optional[Tuple[torch.Tensor, float]] = None) -> AnimatedScene:
    """Build an :class:`AnimatedScene` (module docstring). ``progress(stage, fraction)`` is called along the way.

    For one body of several (:func:`physskin_gs.bodies.prepare_bodies`): ``analysis`` a scene analysis already
    made (used for up and the support instead of a new one), ``moving`` (N,) bool the rows to animate instead of
    ``config.select``, ``frame`` ``(center (3,) scene units, metres per scene unit)`` the simulation frame shared
    with the other bodies (default: the object's own, centred on it, 1 m across or ``config.scale``).

    ``info["timings"]`` of the result holds the seconds of each stage: scene_analysis, selection,
    interior_fill, normalisation (normalisation, robust extent, the basis' point subsets), field_build, cubature
    (the voxel cells or the sampled points, :func:`voxel_cubature`), cubature_weights
    (with the simulator set-up), gaussian_weights (W, grad W at the moving Gaussians, ``config.field_eval``),
    deformer_setup and handles_pins.

    Few usable Gaussians (module docstring, 3-4): the object is the hull of their ellipsoids and the field has at
    most ``usable - 1`` learned handles; ``info["handles"]`` holds ``requested``, ``learned``, ``usable`` and
    ``note`` (the one-line note, also reported once through ``progress`` as ``"note: ..."``; None when nothing
    was reduced), ``info["sparse_body"]`` the body's facts (None for the interior fill).

    Raises OptionError for bad options (selection, up axis, material, pin, field evaluation) and PhysSkinError
    when the selected object has no usable geometry (no row at all, or only transparent ones).
    """
    if not isinstance(config, AnimationConfig):
        raise OptionError("config must be an AnimationConfig")
    if config.num_cubature is not None and config.num_cubature < 16:
        raise OptionError(f"num_cubature must be >= 16, got {config.num_cubature}")
    if config.scale is not None and not (config.scale > 0 and math.isfinite(config.scale)):
        raise OptionError(f"--scale must be positive, got {config.scale}")
    if not (config.dt > 0 and math.isfinite(config.dt)):
        raise OptionError(f"--dt must be positive, got {config.dt}")
    resolve_skinning(config.skinning)  # unknown names fail before any work
    moving_given = moving is not None
    if config.field_eval not in FIELD_EVAL_MODES:
        raise OptionError(f"--field-eval must be one of {', '.join(FIELD_EVAL_MODES)}, got {config.field_eval!r}")
    timings: Dict[str, float] = {}
    lap = _stage_clock(timings)

    if analysis is None:
        _report(progress, "analysing the scene", 0.0)
    select_auto = moving is None and str(config.select or "").strip().lower() in ("auto", "largest")
    if analysis is None and (select_auto or str(config.up).strip().lower() == "auto"):
        given = None if str(config.up).strip().lower() == "auto" else resolve_up(config.up, scene).numpy()
        analysis = analyze_for_animation(scene, up=given)  # a given --up: the support and the object follow it
    lap("scene_analysis")
    if str(config.up).strip().lower() == "auto":
        up = torch.as_tensor(analysis.up, dtype=torch.float64)
    else:
        up = resolve_up(config.up, scene)
    if moving is not None:
        moving = torch.as_tensor(moving, dtype=torch.bool).reshape(-1)
        if moving.shape[0] != scene.num_gaussians or not bool(moving.any()):
            raise OptionError(f"moving must be an ({scene.num_gaussians},) bool mask selecting at least one row")
        moving = moving & _finite_rows(scene)
    elif select_auto:
        # the analysis' object rows that are finite in every parameter (parse_selection's rule, on those rows only)
        cand = torch.from_numpy(np.flatnonzero(analysis.object | analysis.transparent_in_object))
        moving = torch.zeros(scene.num_gaussians, dtype=torch.bool)
        moving[cand[_finite_rows(scene, cand)]] = True
        if not bool(moving.any()):
            raise OptionError(f"the scene analysis found no object to animate ({analysis.summary()}); pass --select "
                              "all or a box")
    else:
        moving = parse_selection(config.select, scene)
    idx = torch.nonzero(moving).flatten()
    mov_means = scene.means[idx]
    # usable rows (finite, opacity >= USABLE_OPACITY; moving rows are finite) make the object's volume
    usable = scene.opacities[idx] >= USABLE_OPACITY
    num_usable = int(usable.sum())
    if num_usable == 0:
        raise PhysSkinError(f"the {idx.numel()} moving Gaussians are all transparent (opacity < {USABLE_OPACITY:g}); "
                            "nothing to simulate")
    lap("selection")
    body = None
    fill_msgs = []
    if num_usable < SPARSE_SPLAT_GAUSSIANS:  # a handful of Gaussians: the solid hull of their ellipsoids
        _report(progress, f"sampling the body of {num_usable} sparse Gaussians", 0.05)
        ui = idx[usable]
        body = sparse_splat_body(scene.means[ui], scene.log_scales[ui], scene.quats[ui], seed=config.seed)
        pts = body.volume
        extent_pts = torch.cat([mov_means.float(), body.volume])  # the moving rows and the body around them
        fill_fallback = False
    else:
        _report(progress, "filling the interior", 0.05)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            vol = fill_splat_interior(mov_means, scene.log_scales[idx], scene.opacities[idx], seed=config.seed,
                                      quats=scene.quats[idx])
        fill_msgs = [str(w.message) for w in caught]
        for msg in fill_msgs:
            warnings.warn(msg, PipelineWarning, stacklevel=2)
        pts = vol.points
        if pts.shape[0] < 4:
            pts = mov_means
        extent_pts = mov_means
        fill_fallback = bool(vol.fallback)
    lap("interior_fill")
    # normalisation of the selected object (learning frame) from the kept centres (and a sparse body)
    _, norm = normalize_points(extent_pts.double(), allow_flat=True, what="selected Gaussians")
    lo, hi = extent_pts.min(0).values.double(), extent_pts.max(0).values.double()
    center = 0.5 * (lo + hi) if frame is None else torch.as_tensor(frame[0], dtype=torch.float64).reshape(3)
    extent = float((hi - lo).max())
    if not extent > 0:
        raise PhysSkinError("the selected Gaussians have zero extent; nothing to simulate")
    # the default scale (the object is 1 m across) from a robust extent: 0.5-99.5 % quantiles, so a few stray
    # rows in the selection cannot shrink the object
    sub = extent_pts.double()[torch.randperm(extent_pts.shape[0], generator=torch.Generator()
                              .manual_seed(config.seed))[:200000]].numpy()
    q = np.quantile(sub, [0.005, 0.995], axis=0)  # torch.quantile's linear rule, by partition (no full sort)
    robust_extent = float((q[1] - q[0]).max())
    robust_extent = robust_extent if robust_extent > 0 else extent
    sim_scale = float(config.scale) if config.scale is not None else 1.0 / robust_extent
    if frame is not None:
        sim_scale = float(frame[1])
    if body is not None:
        volume = body.measure
    else:
        volume = float(vol.volume)
        if vol.fallback or not volume > 0:
            # shell only: approximate the solid by half its bounding box
            volume = 0.5 * float(torch.prod((hi - lo).clamp_min(extent * 1e-3)))
    if body is not None:
        shell = body.surface
    else:
        shell = vol.shell if vol.shell.shape[0] >= 4 else mov_means
    if shell.shape[0] > ENCODER_POOL:  # the encoder's farthest point sampling is O(pool x 2048)
        g = torch.Generator().manual_seed(config.seed + 1)
        shell = shell[torch.randperm(shell.shape[0], generator=g)[:ENCODER_POOL]]
    surface_norm = norm.to_normalized(shell.double()).float()
    volume_norm = norm.to_normalized(pts.double()).float()
    if volume_norm.shape[0] > 20000:  # a random subset (a grid-cell subset keeps symmetry but cost 0.3 s at 200k)
        g = torch.Generator().manual_seed(config.seed)
        volume_norm = volume_norm[torch.randperm(volume_norm.shape[0], generator=g)[:20000]]
    lap("normalisation")
    mesh = getattr(scene, "mesh", None)
    mesh_norm = None
    if mesh is not None:  # a mesh input: its own surface for the tet basis
        mesh_norm = (norm.to_normalized(torch.from_numpy(np.asarray(mesh.vertices, np.float64))).numpy(),
                     np.asarray(mesh.faces))
    bounds_norm = tuple(norm.to_normalized(b).numpy() for b in (lo, hi))  # the object's box (its centres')
    mats = None
    if config.regions:  # parts of other materials: the basis is built for that body (region heights as the cubature's)
        hts = pts.double() @ up.double()
        mats = region_materials(config.regions, config.E, config.density, norm, up,
                                (float(hts.min()), float(hts.max())))
    field, source, reduced = _build_field(config, surface_norm, volume_norm, progress, max_handles=num_usable - 1,
                                          mesh_norm=mesh_norm, bounds_norm=bounds_norm, materials=mats)
    lap("field_build")
    _report(progress, "choosing cubature points", 0.75)
    cells = voxel_cubature(field, norm, config.num_cubature)
    cub_tets = None
    if cells is not None:
        cub, cub_fields, cub_tets, cub_rule = cells[0], cells[1:3], cells[3], "voxel cells"
    else:
        cub_pool = pts
        if pts.shape[0] > CUBATURE_POOL:  # bounds the grid search on a huge fallback (the centres themselves)
            g = torch.Generator().manual_seed(config.seed)
            cub_pool = pts[torch.randperm(pts.shape[0], generator=g)[:CUBATURE_POOL]]
        n_cub = DEFAULT_CUBATURE if config.num_cubature is None else config.num_cubature
        cub = sample_cubature(cub_pool, n=n_cub, seed=config.seed).double()
        cub_fields, cub_rule = None, "samples"
    lap("cubature")
    handles = {"requested": int(config.num_handles), "learned": int(field.num_handles) - 1, "usable": num_usable,
               "note": None}
    if reduced is not None:  # fewer handles than the basis builds: said once, through progress, and recorded
        note = reduced_handles_note(num_usable, "Gaussians", reduced.requested, field.num_handles - 1)
        handles.update(requested=reduced.requested, note=note)
        source = f"{source} [{note}]"
        _report(progress, f"note: {note}", 0.8)
    _report(progress, "precomputing the simulator and the deformer", 0.8)
    info = {"volume_scene_units3": volume, "fill_fallback": fill_fallback, "fill_messages": fill_msgs,
            "num_moving": int(idx.numel()), "num_usable": num_usable, "num_cubature": int(cub.shape[0]),
            "cubature": cub_rule,
            "sim_scale_m_per_unit": sim_scale, "skinning": source, "handles": handles,
            "sparse_body": None if body is None else {"gaussians": body.num_gaussians, "volume_scene_units3":
                                                       body.measure, "rule": "convex hull of the 2-sigma ellipsoids"},
            "up": up.tolist(), "robust_extent_scene": robust_extent,
            "selection": (str(config.select).strip().lower() if select_auto
                          else ("rows" if moving_given else (config.select or "all"))),
            "timings": timings}
    if analysis is not None:
        info["scene_analysis"] = scene_analysis_facts(analysis)
        if analysis.plane is not None:
            n_up = np.asarray(analysis.up, dtype=np.float64)
            u = up.double().numpy()
            if str(config.up).strip().lower() == "auto":
                info["support_height"] = float(analysis.plane.offset)  # the plane n.x = d with n = up
            elif up_off_support_deg(u, analysis) < UP_AGREES_DEG:  # an --up the support agrees with
                c = mov_means.double().mean(0).numpy()  # the support's height under the object, along the given up
                info["support_height"] = float(u @ (c - (float(n_up @ c) - float(analysis.plane.offset)) * n_up))
            lo_mov, hi_mov = robust_range((mov_means.double() @ up.double()).numpy())  # the moving rows along up
            if "support_height" in info and lo_mov < info["support_height"] - 0.05 * (hi_mov - lo_mov):
                # what moves reaches below the support (--select all, a box through the table): a floor there would
                # throw it up, so the floor goes under what moves, as without a support
                info["support_below_moving"] = info.pop("support_height")
    anim = AnimatedScene(scene, moving, config, field, norm, up, sim_scale, center, cub.float(), volume, source, info,
                         extent_points=extent_pts if body is not None else None, cubature_fields=cub_fields,
                         cubature_tets=cub_tets)
    if analysis is not None and anim.num_invalid:
        count_invalid_rows(info["scene_analysis"], analysis, anim._invalid_rows().numpy(), anim.moving.numpy())
    _report(progress, "ready", 1.0)
    return anim


#: The default material's sag limit (``animate`` without ``--material``, ``--E`` or ``--region``): the
#: soft default is raised to the E at which the object's own weight, its base held, bends it at most this fraction
#: of its height (:func:`stiffen_to_stand`). A fresh user's biker knelt, a horse splayed onto its belly and a desk
#: chair fell over in the soft default.
STAND_SAG = 0.01
#: A material the user chose whose own weight bends the object more than this fraction of its height (standing_sag)
#: gets a note naming stiffer ones (animate's log, the viewer's Material folder)
SLUMP_NOTE = 0.1
#: The base :func:`standing_sag` holds: the cubature points within this fraction of the height of the lowest.
STAND_BASE_BAND = 0.05
#: The fewest base points :func:`standing_sag` estimates from (a handful of cubature points, or a base in a line:
#: no estimate, 0.0).
STAND_MIN_BASE = 8
#: The most :func:`stiffen_to_stand` multiplies E by (beyond, a linear estimate is no guide).
STAND_MAX_FACTOR = 100.0


def standing_sag(anim) -> float:
    """How far the object's own weight bends it with its base held, as a fraction of its height: the largest
    cubature-point displacement of the linear static problem (K0 + P) u = f in the simulator's handle space (K0:
    the elastic stiffness at rest; P: springs of ``pin_stiffness`` on the points within :data:`STAND_BASE_BAND` of
    the height of the lowest, along up; f: gravity on every point), less the rigid motion that fits the base's
    displacement best (a base of a few points in a line lets the object turn on it, which is not bending), over the
    height of the cubature points along up.
    A linear estimate at the current material (u scales as 1 / E); 0.0 for a flat object, or a base of fewer than
    :data:`STAND_MIN_BASE` points or of points in a line.
    ``anim``: an :class:`AnimatedScene`. Raises nothing."""
    sim = anim.sim
    X = sim.X.double()  # [n, 3] simulation frame (m)
    h = X @ sim.up.double()  # [n] height along up
    height = float(h.max() - h.min())
    if not height > 0:
        return 0.0
    base = h <= float(h.min()) + STAND_BASE_BAND * height
    if int(base.sum()) < STAND_MIN_BASE:
        return 0.0
    sv = torch.linalg.svdvals(X[base] - X[base].mean(0))
    if not float(sv[1]) > 1e-3 * float(sv[0]):  # the base points in a line: no estimate
        return 0.0
    Phi = sim.Phi.double()  # [n, K4]
    K4 = Phi.shape[1]
    K = sim._rest_stiffness().clone()  # [3 K4, 3 K4], q order (axis-major)
    mass = sim.m_p * (torch.ones(sim.n, dtype=torch.float64) if sim._m_pt is None
                      else torch.as_tensor(sim._m_pt, dtype=torch.float64))  # [n] kg
    Pb = Phi[base]
    # base springs, and a tiny mass term that keeps the solve finite where the base does not hold every rigid motion
    # (a few points in a line; the rigid part of the answer is taken out below); the same block on every axis
    blk = sim.pin_stiffness() * ((Pb.T * mass[base]) @ Pb + 1e-6 * sim.Mblk.double())  # [K4, K4] N/m
    for a in range(3):
        K[a * K4:(a + 1) * K4, a * K4:(a + 1) * K4] += blk
    f = torch.outer(sim.g_vec.double(), Phi.T @ mass).reshape(-1)  # [3 K4] generalised gravity (N)
    try:
        u = torch.linalg.solve(K, f)
    except RuntimeError:  # singular
        return 0.0
    d = Phi @ u.view(3, K4).T  # [n, 3] displacements (m)
    # the deformation: d less the rigid motion t + w x (X - c) that fits the base's points best (the base turning
    # on springs that hold only a few points, in a line, is not bending; the body bending over its base is)
    r = X - X[base].mean(0)
    A = torch.zeros(X.shape[0], 3, 6, dtype=torch.float64)
    A[:, :, :3] = torch.eye(3, dtype=torch.float64)
    A[:, 0, 4], A[:, 0, 5] = r[:, 2], -r[:, 1]
    A[:, 1, 3], A[:, 1, 5] = -r[:, 2], r[:, 0]
    A[:, 2, 3], A[:, 2, 4] = r[:, 1], -r[:, 0]
    rigid = torch.linalg.lstsq(A[base].reshape(-1, 6), d[base].reshape(-1, 1)).solution  # min-norm if degenerate
    d = d - (A.reshape(-1, 6) @ rigid).view(-1, 3)
    sag = float(d.norm(dim=1).max()) / height
    return sag if math.isfinite(sag) else 0.0


def stiffen_to_stand(anim, target: float) -> Optional[dict]:
    """Raise the material's E (every body alike) until :func:`standing_sag` is at most ``target`` (a fraction of the
    height) on every body, where it is larger: E times the largest sag over ``target`` (the sag is linear in 1 / E; at
    most :data:`STAND_MAX_FACTOR` times), rounded up to two significant digits. ``anim``: an AnimatedScene or
    SceneBodies. Returns None when nothing changed, else ``{"E_from", "E_to" (Pa), "sag_before", "sag_after"
    (fractions), "body"}`` (the body that needed it most, None for one object), also kept in ``anim.info["stand"]``.
    Raises OptionError from ``set_material``."""
    bodies = list(getattr(anim, "bodies", None) or [anim])
    sags = [standing_sag(b) for b in bodies]
    k = int(np.argmax(sags))
    worst = sags[k]
    if not worst > target > 0:
        return None
    E0 = float(bodies[k].sim.E)
    E1 = E0 * min(worst / target, STAND_MAX_FACTOR)
    mag = 10.0 ** math.floor(math.log10(E1))
    E1 = math.ceil(E1 / mag * 10.0 - 1e-9) * mag / 10.0
    anim.set_material(E=E1)
    after = max(standing_sag(b) for b in bodies)
    if after > target and E1 < E0 * STAND_MAX_FACTOR:
        # E1 exactly at the needed factor (x3.0) leaves the sag a hair above the target: the float32 Hessian's
        # round-off in the static solve (1e-4 relative, either sign); one more step of the second digit
        E1 = (round(E1 / mag * 10.0) + 1) * mag / 10.0
        anim.set_material(E=E1)
        after = max(standing_sag(b) for b in bodies)
    for b in bodies:  # (the bodies share one config)
        b.config.E = E1
    out = {"E_from": E0, "E_to": E1, "sag_before": worst, "sag_after": after, "body": k if len(bodies) > 1 else None}
    anim.info["stand"] = out
    return out


def prepare_bodies(scene: GaussianScene, config: AnimationConfig, progress: ProgressFn = None):
    """:func:`physskin_gs.bodies.prepare_bodies`: an :class:`AnimatedScene` for one object, a
    :class:`physskin_gs.bodies.SceneBodies` when ``--select auto`` finds several on the support."""
    from physskin_gs.bodies import prepare_bodies as prepare

    return prepare(scene, config, progress)
