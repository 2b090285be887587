"""Several objects of one capture animated together, in contact with each other and with the captured scene
(issue 24; README, "Several objects, one scene").

:func:`prepare_bodies` is what ``animate`` calls. With ``--select auto`` it runs the scene analysis once (an
explicit ``--up`` must agree with the support's normal within :data:`physskin_gs.pipeline.UP_AGREES_DEG`, else
one object moves); when the analysis finds a support and more than one object standing on it (each a connected
part holding at least :data:`physskin_gs.geometry.scene_analysis.OTHER_OBJECT_MASS` of the heaviest one's opacity
mass), every one of them becomes a **body**: its own :class:`~physskin_gs.pipeline.AnimatedScene` (skinning basis,
handles, cubature points, deformer), all in one simulation frame (centred on the heaviest body, which is 1 m across
unless ``--scale`` says otherwise, so every body keeps its true size relative to the others). Otherwise it returns
the one-object :class:`~physskin_gs.pipeline.AnimatedScene` of :func:`~physskin_gs.pipeline.prepare_animation`.

The bodies step together in one implicit-Euler Newton solve
(:class:`~physskin_gs.physics.contact.BodyContactSystem`): block-diagonal elastic Hessians plus penalty contact
between the bodies' cubature-point spheres and against a **static collider** built once from the static rows:

* **the support** is the analysis' plane, but only where the support was captured: a
  :class:`~physskin_gs.physics.floor_region.FloorRegion` of the support's rows and the bodies' footprints (holes
  under objects filled), so a body pushed past the table's edge falls. Below it the **ground** is the lowest static
  surface of the capture (the room's floor under a table), or, when nothing was captured below the support, a
  plane two body heights down (so a body that falls stays in view);
* **everything else static** (walls, a bowl, the table's edge and legs, objects too light to be bodies) is a point
  collider: the static rows within reach of the bodies (1.5 body sizes around them), thinned to one point per cell
  of half a contact radius, without the rows that touch a body at rest (they would push it on the first step).

Bodies that overlap as they start (two boxes of ``--select`` cutting one object, whose interior fills share up to
a cell; objects leaning on each other) keep each overlapping pair of cubature points at its starting distance
(:meth:`~physskin_gs.physics.contact.BodyContactSystem.touching_pairs`), so they rest as captured instead of being
thrown apart by the overlap's penalty.

Pure pipeline code: no viewer, no file I/O.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import torch

from physskin_gs.errors import OptionError
from physskin_gs.physics.contact import BodyContactSystem, default_contact_radius
from physskin_gs.geometry.support import plane_axes
from physskin_gs.physics.floor_region import floor_region_from_points
from physskin_gs import pipeline as _pipeline
from physskin_gs.pipeline import UP_AGREES_DEG, USABLE_OPACITY, AnimatedScene, AnimationConfig, analyze_for_animation
from physskin_gs.scene import GaussianScene

__all__ = ["SceneBodies", "prepare_bodies", "body_masks", "body_lines", "box_masks"]

#: static rows within this many body sizes of the bodies' rest boxes join the point collider
COLLIDER_REACH = 1.5
#: a body less tall than this fraction of its width gets a note (a sheet: a box that caught one face of an object?)
SHEET = 0.02
#: the support holds a point no deeper than this fraction of a body's height below it (each body its own)
SUPPORT_DEPTH = 0.1
#: with nothing captured under the support, the ground lies this many (largest) body heights below it
GROUND_DROP = 2.0


def body_lines(anim) -> List[str]:
    """One line per body of ``anim`` (a :class:`SceneBodies`; none for one object), as ``animate`` and the viewer
    print them: rows, handles, cubature points, height (metres and scene units), centre (scene units), pin."""
    out = []
    scale = float(getattr(anim, "sim_scale", 1.0) or 1.0)
    for i, b in enumerate((getattr(anim, "info", None) or {}).get("bodies") or []):
        out.append(f"body {i}: {b['rows']} Gaussians, {b['handles']} handles, {b['cubature_points']} cubature points, "
                   f"{b['height_m']:.3g} m tall ({b['height_m'] / scale:.3g} scene units), centre "
                   f"[{', '.join(f'{v:.3g}' for v in b['center_scene'])}] (scene units)"
                   + (f", pinned {b['pin']}" if b.get("pin") else ""))
        width = b.get("width_m")
        if width and b["height_m"] < SHEET * width:  # a box catching one face of an object made a 1e-4 m body
            out[-1] += (f"; note: a sheet {100 * b['height_m'] / width:.2g} % of its width tall: if a box caught "
                        "only a face of an object, draw it around the whole object")
    return out


def _width(anim, up: np.ndarray) -> float:
    """The largest extent across ``up`` (3,) of a body's moving rows (scene units)."""
    p = anim.scene.means[anim.moving_index].double().numpy()  # [M, 3]
    flat = p - np.outer(p @ up, up)
    return float(np.ptp(flat, axis=0).max()) if p.shape[0] else 0.0


def body_masks(scene: GaussianScene, analysis) -> List[torch.Tensor]:
    """(N,) bool row masks of the bodies a scene analysis found: the object (with its transparent rows) first,
    then :attr:`~physskin_gs.geometry.scene_analysis.SceneAnalysis.other_bodies` in order. Empty when the analysis
    found no object."""
    n = scene.num_gaussians
    out = []
    first = torch.from_numpy(analysis.object | analysis.transparent_in_object)
    if bool(first.any()):
        out.append(first)
    for rows, tr in getattr(analysis, "other_bodies", []):
        m = torch.zeros(n, dtype=torch.bool)
        m[torch.from_numpy(np.concatenate([rows, tr]).astype(np.int64))] = True
        out.append(m)
    return out


def prepare_bodies(scene: GaussianScene, config: AnimationConfig, progress: Optional[Callable] = None,
                   on_bodies: Optional[Callable[[int], None]] = None):
    """An :class:`~physskin_gs.pipeline.AnimatedScene` for one object, or :class:`SceneBodies` when ``--select auto``
    finds several objects on a support (module docstring); with ``config.stand_sag`` its E raised so that it
    stands (:func:`~physskin_gs.pipeline.stiffen_to_stand`). ``on_bodies(n)``: called with the number of bodies
    once it is known (after the scene analysis) and before any body is prepared, so that a caller can refuse what
    does not fit (``animate --script`` naming a body the scene does not have) before the costly part. Raises what
    :func:`~physskin_gs.pipeline.prepare_animation` raises, and what ``on_bodies`` raises."""
    anim = _prepare_bodies(scene, config, progress, on_bodies or (lambda n: None))
    if getattr(config, "stand_sag", None):
        _pipeline.stiffen_to_stand(anim, float(config.stand_sag))
    return anim


def box_masks(scene: GaussianScene, boxes, analysis) -> Tuple[List[torch.Tensor], List[str]]:
    """Row masks of the bodies of a box list (``--select BOX --select BOX ...``) and notes on them.

    ``boxes``: a sequence of (lo (3,), hi (3,)) corners, scene units; ``analysis``: the scene analysis (its support
    plane, support rows and parts). Returns (masks: one (N,) bool tensor per box, notes: list of str). Per box: the
    finite rows inside it or under it (with a support: rows whose ray along up enters the box, so that a
    box above the support, as the viewer's picked components are, takes its object's base down to the support),
    without the support's rows and anything under the support's slab (the table a box reaches into stays static; an
    object's base in the slab moves with it) and without rows an earlier box took. A note names each box that takes
    only part (3-97 %) of a connected part the scene analysis found (the rest stays static or is another box's
    body: the object is cut in two). Raises OptionError naming a box that keeps no row, with what is in it."""
    means = scene.means.numpy()
    finite = _pipeline._finite_rows(scene).numpy()
    keep = finite.copy()
    below = np.zeros_like(keep)
    if analysis.plane is not None:
        # the support, anything under its slab, and what lies under its plane within the slab unless the analysis
        # gave it to an object (its base): a box reaching past the table's edge took 212 rows of its rim, and the
        # ball it was drawn around sank through the table with them
        sd = analysis.plane.signed_distance(means)
        below = analysis.support | (sd < -analysis.plane.band) | ((sd < 0) & ~_object_rows(analysis, means.shape[0]))
        keep &= ~below
    taken = np.zeros(scene.num_gaussians, dtype=bool)
    out = []
    for i, (lo, hi) in enumerate(boxes):
        lo, hi = np.asarray(lo, np.float64), np.asarray(hi, np.float64)
        inside = np.all((means >= lo) & (means <= hi), axis=1)
        reach = inside.copy()
        if analysis.plane is not None:  # and the rows under it down to the support: the object's base
            reach |= _under_box(means, lo, hi, analysis.plane.normal)
        m = reach & keep & ~taken
        if not m.any():
            where = ",".join(f"{v:g}" for v in list(lo) + list(hi))
            n_in = int(inside.sum())
            detail = (f"{n_in} rows inside it: {int((inside & below).sum())} of the support or under it, "
                      f"{int((inside & taken).sum())} taken by an earlier box" if n_in else "no row inside it")
            raise OptionError(f"--select box {i + 1} ({where}) keeps no Gaussian of an object above the support "
                              f"({detail}); draw it around an object" if analysis.plane is not None else
                              f"--select box {i + 1} ({where}) keeps no Gaussian ({detail})")
        taken |= m
        out.append(torch.from_numpy(m))
    notes = []
    parts = [analysis.object | analysis.transparent_in_object]
    for rows, tr in getattr(analysis, "other_bodies", []):
        mk = np.zeros(scene.num_gaussians, dtype=bool)
        mk[np.concatenate([rows, tr]).astype(np.int64)] = True
        parts.append(mk)
    for part in parts:
        n = int(part.sum())
        if n < 50:
            continue
        for i, m in enumerate(out):
            frac = float((m.numpy() & part).sum()) / n
            if 0.03 < frac < 0.97:
                c = means[part].mean(0)
                notes.append(f"box {i + 1} takes {frac:.0%} of a connected part of {n} Gaussians centred at "
                             f"[{', '.join(f'{v:.3g}' for v in c)}] (scene units): the rest of it stays static or "
                             "moves as another box's body, so the part is cut in two; draw the box around all of it")
    return out, notes


def _object_rows(analysis, n: int) -> np.ndarray:
    """(n,) bool: the rows of every object the scene analysis found (the heaviest, its transparent rows, and each
    other body's rows and transparent rows)."""
    rows = np.asarray(analysis.object, bool) | np.asarray(analysis.transparent_in_object, bool)
    for part, tr in getattr(analysis, "other_bodies", []):
        rows[np.concatenate([part, tr]).astype(np.int64)] = True
    return rows


def _under_box(points: np.ndarray, lo: np.ndarray, hi: np.ndarray, up: np.ndarray) -> np.ndarray:
    """(N,) bool: the rows whose ray ``p + t up`` (t >= 0) enters the box [lo, hi] (the slab test per axis)."""
    t0 = np.zeros(points.shape[0])
    t1 = np.full(points.shape[0], np.inf)
    ok = np.ones(points.shape[0], dtype=bool)
    for a in range(3):
        if abs(up[a]) < 1e-12:
            ok &= (points[:, a] >= lo[a]) & (points[:, a] <= hi[a])
            continue
        ta, tb = (lo[a] - points[:, a]) / up[a], (hi[a] - points[:, a]) / up[a]
        t0 = np.maximum(t0, np.minimum(ta, tb))
        t1 = np.minimum(t1, np.maximum(ta, tb))
    return ok & (t0 <= t1)


#: the captured base: static rows this far below a selection's lowest point (a fraction of its height) are under it
BASE_BAND_BELOW = 0.1
#: ... and this far above it (the haze of a cloth or a table patch reaches up around the base)
BASE_BAND_ABOVE = 0.05
#: the base's footprint is gridded in cells of this fraction of the selection's height
BASE_CELL = 1.0 / 16.0
#: a selection rests on what was captured under it when static rows lie under at least this fraction of its base
BASE_COVER = 0.25


def captured_base_cover(points: np.ndarray, moving: np.ndarray, static: np.ndarray, up: np.ndarray) -> Tuple[
        float, float, float]:
    """How much of a selection's base has static rows captured under it (the table patch a box cut the object from).

    Args:
        points: (N, 3) Gaussian centres, scene units (non-finite rows are ignored).
        moving: (N,) bool, the selection.
        static: (N,) bool, the static rows that can carry it (the analysis' object and background outside the
            selection: not floaters, transparent or invalid rows).
        up: (3,) up vector (need not be unit).
    Returns (cover, lowest, height): the fraction of the base's footprint cells (its rows within
    :data:`BASE_BAND_BELOW` of its height above its lowest point, on a grid of :data:`BASE_CELL` of its height
    across up) that have a static row in the same or a neighbouring cell, from :data:`BASE_BAND_BELOW` of the height
    below the lowest point to :data:`BASE_BAND_ABOVE` above it; the selection's lowest point along up and its height
    (scene units). (0, lowest, height) when nothing static is near; (0, nan, nan) for an empty selection."""
    u = np.asarray(up, dtype=np.float64)
    u = u / np.linalg.norm(u)
    P = np.asarray(points, dtype=np.float64)
    ok = np.isfinite(P).all(1)
    mov, sta = ok & np.asarray(moving, bool), ok & np.asarray(static, bool) & ~np.asarray(moving, bool)
    if not mov.any():
        return 0.0, float("nan"), float("nan")
    h = P @ u  # [N] height along up
    lowest, height = float(h[mov].min()), float(np.ptp(h[mov]))
    if not sta.any() or height <= 0:
        return 0.0, lowest, height
    a, b = plane_axes(u)  # (3,) each: the grid's axes across up
    cell = BASE_CELL * height
    base = mov & (h <= lowest + BASE_BAND_BELOW * height)
    under = sta & (h >= lowest - BASE_BAND_BELOW * height) & (h <= lowest + BASE_BAND_ABOVE * height)
    if not under.any():
        return 0.0, lowest, height
    ij = lambda rows: np.floor(np.stack([P[rows] @ a, P[rows] @ b], 1) / cell).astype(np.int64)  # noqa: E731
    foot = np.unique(ij(base), axis=0)  # [F, 2] the base's cells
    below = {tuple(c) for c in np.unique(ij(under), axis=0)}
    near = [any((i + di, j + dj) in below for di in (-1, 0, 1) for dj in (-1, 0, 1)) for i, j in foot]
    return float(np.mean(near)), lowest, height


def _analyse(scene: GaussianScene, config: AnimationConfig, progress: Optional[Callable]):
    """(scene analysis, its seconds): with a given ``--up`` taken as known (the support must agree with it)."""
    t0 = time.perf_counter()
    if progress is not None:
        progress("analysing the scene", 0.0)
    given_up = str(getattr(config, "up", "auto")).strip().lower()
    analysis = analyze_for_animation(scene, up=None if given_up == "auto"
                                     else _pipeline.resolve_up(config.up, scene).double().numpy())
    return analysis, time.perf_counter() - t0


def _prepare_bodies(scene: GaussianScene, config: AnimationConfig, progress: Optional[Callable],
                    on_bodies: Callable[[int], None]):
    """:func:`prepare_bodies` before the material is stiffened to stand."""
    kind, boxes = _pipeline.parse_selection_spec(getattr(config, "select", None))
    if kind == "boxes":
        if getattr(scene, "mesh", None) is not None:
            raise OptionError(f"--select with {len(boxes)} boxes makes one body per box of a splat capture; a mesh "
                              "input is one body (give one box or none)")
        on_bodies(len(boxes))
        return _box_bodies(scene, config, boxes, progress)
    if kind == "box" and getattr(scene, "mesh", None) is None:
        on_bodies(1)
        return _one_box(scene, config, boxes, progress)
    auto = kind == "auto" and getattr(scene, "mesh", None) is None
    if not auto:
        on_bodies(1)
        return _pipeline.prepare_animation(scene, config, progress)
    given_up = str(getattr(config, "up", "auto")).strip().lower()
    analysis, seconds = _analyse(scene, config, progress)  # a given --up: the support (and the bodies) agree with it
    masks = body_masks(scene, analysis)
    if given_up != "auto":  # an --up the support agrees with keeps the bodies; else one object
        deg = _pipeline.up_off_support_deg(_pipeline.resolve_up(config.up, scene).double().numpy(), analysis)
        if deg is None or deg >= UP_AGREES_DEG:
            if deg is not None and len(masks) >= 2 and progress is not None:
                progress(f"note: --up {config.up} is {deg:.0f} degrees from the support plane's normal, so the "
                         f"support and the {len(masks) - 1} other object(s) on it are not used: one object moves "
                         "and the rest is static (--up auto moves every object on the support)", 0.0)
            on_bodies(1)
            return _pipeline.prepare_animation(scene, config, progress, analysis=analysis)
    if analysis.plane is None or len(masks) < 2:
        on_bodies(1)
        anim = _pipeline.prepare_animation(scene, config, progress, analysis=analysis)
        anim.info["timings"]["scene_analysis"] = seconds
        return anim
    if getattr(config, "regions", None):  # per-region materials are one object's: that object moves, not all
        if progress is not None:
            progress(f"note: --region applies to one object, so only the largest of the {len(masks)} objects on the "
                     "support moves and the others stay static (without --region every object moves)", 0.0)
        on_bodies(1)
        anim = _pipeline.prepare_animation(scene, config, progress, analysis=analysis)
        anim.info["timings"]["scene_analysis"] = seconds
        return anim
    on_bodies(len(masks))
    return SceneBodies.build(scene, config, analysis, masks, progress, seconds)


def _one_box(scene: GaussianScene, config: AnimationConfig, box, progress: Optional[Callable]):
    """One box: with a support found, the box's body as in a box list (:func:`box_masks`: its rows and those under
    it down to the support, without the support's); without one, every finite row in the box (``parse_selection``)."""
    analysis, seconds = _analyse(scene, config, progress)
    if analysis.plane is None:
        config = _rest_on_captured_base(scene, config, analysis, progress)
        anim = _pipeline.prepare_animation(scene, config, progress, analysis=analysis)
    else:
        masks, notes = box_masks(scene, [box], analysis)
        if progress is not None:
            for note in notes:
                progress(f"note: {note}", 0.0)
        anim = _pipeline.prepare_animation(scene, config, progress, analysis=analysis, moving=masks[0])
        anim.info["selection"] = str(config.select).strip()
    anim.info["timings"]["scene_analysis"] = seconds
    return anim


def _rest_on_captured_base(scene: GaussianScene, config: AnimationConfig, analysis, progress: Optional[Callable]):
    """``config`` with the floor at the box selection's lowest point when no support plane was found but static
    rows were captured under its base (:func:`captured_base_cover` at least :data:`BASE_COVER`: the table patch
    or the object's own lower part that the box cut it from), so that it rests where it stood (it fell through
    them onto the default floor a quarter of its height below); ``config`` itself otherwise, or when ``--floor``
    gives a height or is off."""
    if not config.floor or config.floor_height is not None:
        return config
    moving = _pipeline.parse_selection(config.select, scene).numpy()
    static = (np.asarray(analysis.object, bool) | np.asarray(analysis.background, bool)) & ~moving
    cover, lowest, _ = captured_base_cover(scene.means.numpy(), moving, static, np.asarray(analysis.up, float))
    if cover < BASE_COVER:
        return config
    if progress is not None:
        progress(f"note: no support plane was found, but static rows were captured under {cover:.0%} of the "
                 f"selection's base: it rests on them (a floor at its lowest point, {lowest:.4g} along up; "
                 "--floor HEIGHT sets another)", 0.0)
    return replace(config, floor_height=lowest)


def _box_bodies(scene: GaussianScene, config: AnimationConfig, boxes, progress: Optional[Callable]):
    """One body per box (:func:`box_masks`), with the scene analysis' support (when it finds one) as the floor and
    every other static row (the analysis' object and background outside the boxes) as the collider."""
    analysis, seconds = _analyse(scene, config, progress)
    if getattr(config, "regions", None):
        raise OptionError("--region applies to one object; with several boxes (several bodies) leave it out")
    masks, notes = box_masks(scene, boxes, analysis)
    if progress is not None:
        for note in notes:
            progress(f"note: {note}", 0.0)
    static = analysis.background | analysis.object
    return SceneBodies.build(scene, config, analysis, masks, progress, seconds, static=static,
                             selection=f"{len(masks)} boxes")


class SceneBodies:
    """Several bodies of one capture stepped together with contact (module docstring). Built by
    :func:`prepare_bodies`; it answers what ``animate`` and the exporters ask of an
    :class:`~physskin_gs.pipeline.AnimatedScene` (``step``, ``deformed_rows``, ``deformed_gaussians``, drags, ...),
    for all bodies at once.

    Attributes: scene (GaussianScene, rest), bodies (list of AnimatedScene, the heaviest first), system
    (BodyContactSystem), moving ((N,) bool: every body's rows), up_vector ((3,) float64), sim_scale (metres per
    scene unit, shared), center ((3,) float64, the shared frame's origin), frame (int), info (dict: the heaviest
    body's facts, with ``bodies``, ``collider``, ``num_moving`` and ``num_cubature`` over all bodies).
    """

    def __init__(self, scene: GaussianScene, bodies: List[AnimatedScene], system: BodyContactSystem, info: Dict) -> None:
        self.scene = scene
        self.bodies = bodies
        self.system = system
        self.info = info
        self.frame = 0
        main = bodies[0]
        self.up_vector = main.up_vector
        self.sim_scale = main.sim_scale
        self.center = main.center
        self.moving = torch.zeros(scene.num_gaussians, dtype=torch.bool)
        for b in bodies:
            self.moving |= b.moving
        cat = torch.cat([b.moving_index for b in bodies])  # [M] rows, body after body
        order = torch.argsort(cat)
        self._idx = cat[order]  # [M] the scene's row order, as AnimatedScene.moving_index
        self._dst = torch.empty_like(order)
        self._dst[order] = torch.arange(order.numel())  # [M] where row k of the concatenation goes
        self._starts = np.concatenate([[0], np.cumsum([b.moving_index.numel() for b in bodies])]).astype(int)
        self._learned = [b.num_handles - 1 for b in bodies]
        self._handle_start = np.concatenate([[0], np.cumsum(self._learned)]).astype(int)
        self._drags: Dict[int, tuple] = {}
        self._next_drag = 0
        self.last_grab: Optional[dict] = None  # what the last start_drag grabbed (AnimatedScene.start_drag)
        self._regions_of = [b.sim.floor_region for b in bodies]  # the finite support (re-applied by set_floor)

    # ------------------------------------------------------------------------------------------ building
    @classmethod
    def build(cls, scene: GaussianScene, config: AnimationConfig, analysis, masks: List[torch.Tensor],
              progress: Optional[Callable], analysis_seconds: float, static: Optional[np.ndarray] = None,
              selection: Optional[str] = None) -> "SceneBodies":
        """Prepare every body in the heaviest one's frame (centre, metres per unit; the bodies keep the order of
        ``masks``), then the support region and the static collider (from the
        rows ``static`` (N,) bool, default the analysis' background, less the bodies' rows). Without a support
        plane the floor is an endless plane at the lowest body's lowest point. ``config.pin`` pins the bodies that
        hold part of its region (:meth:`set_pin`; OptionError when none does)."""
        k = len(masks)
        pin = getattr(config, "pin", None)
        config = replace(config, pin=None)  # a pin region is the bodies' together (set_pin below), not each one's

        def part(i):
            if progress is None:
                return None
            return lambda stage, frac: progress(f"body {i} ({i + 1} of {k}): {stage}", (i + frac) / k)

        # the shared frame (centre, metres per unit) is the heaviest body's, whatever the bodies' order (a box list's
        # is the user's): the same scale, and so the same stiffening, for the same objects in any order
        op = scene.opacities.double()
        heaviest = int(np.argmax([float(op[m].sum()) for m in masks]))
        prepared = {heaviest: _pipeline.prepare_animation(scene, config, part(heaviest), analysis=analysis,
                                                          moving=masks[heaviest])}
        frame = (prepared[heaviest].center, prepared[heaviest].sim_scale)
        for i in range(k):
            if i != heaviest:
                prepared[i] = _pipeline.prepare_animation(scene, config, part(i), analysis=analysis, moving=masks[i],
                                                          frame=frame)
        bodies = [prepared[i] for i in range(k)]
        t = time.perf_counter()
        main = bodies[0]
        s, c = main.sim_scale, main.center
        up = main.up_vector.double()
        up_np = up.numpy()
        radii = [default_contact_radius(b.sim.X) for b in bodies]
        heights = [b.height_scene * s for b in bodies]  # [B] metres
        taken = torch.zeros(scene.num_gaussians, dtype=torch.bool)
        for m in masks:
            taken |= m
        to_sim = lambda p: (np.asarray(p, np.float64) - c.numpy()) * s  # noqa: E731 - scene -> simulation frame
        finite = np.isfinite(scene.means.numpy()).all(1)
        collider = {"static_points": 0, "static_radius_m": None, "support_region": None, "ground_m": None}
        static = analysis.background if static is None else np.asarray(static, dtype=bool)
        static_rows = static & ~taken.numpy() & finite & (scene.opacities.numpy() >= USABLE_OPACITY)
        st = to_sim(scene.means.numpy()[static_rows])  # [S, 3]
        st_h = st @ up_np
        depth = SUPPORT_DEPTH * min(heights)
        if analysis.plane is None:  # no support: one endless floor for all, at the lowest body's base (or given)
            low = min(b.lowest_scene for b in bodies) if config.floor_height is None else float(config.floor_height)
            for b in bodies:
                b.set_floor(bool(config.floor), low)
            ground = (low - float(c @ up)) * s
            collider.update(ground_m=ground, ground="no support plane found: a floor at the lowest body's base")
        else:
            sup_sim = (float(analysis.plane.offset) - float(c @ up)) * s  # the support's height along up, metres
            below = st_h[st_h < sup_sim - 2 * depth]
            if below.shape[0] >= 16:
                ground = float(np.quantile(below, 0.005))
                ground_src = "the lowest static surface under the support"
            else:
                ground = sup_sim - GROUND_DROP * max(heights)
                ground_src = f"nothing captured under the support: {GROUND_DROP:g} body heights below it"
        if config.floor and config.floor_height is None and analysis.plane is not None:
            sup_rows = analysis.support & finite
            pts = [to_sim(scene.means.numpy()[sup_rows])]
            pts += [to_sim(scene.means[b.moving_index].numpy()) for b in bodies]  # the footprints under the bodies
            pts = np.concatenate(pts)
            if pts.shape[0] > 400_000:
                pts = pts[np.random.default_rng(config.seed).choice(pts.shape[0], 400_000, replace=False)]
            span = float(np.ptp(pts - np.outer(pts @ up_np, up_np), axis=0).max())
            cell = max(min(radii), span / 1024)
            region = floor_region_from_points(pts, up_np, cell=cell, depth=depth, ground=ground)
            depths = [SUPPORT_DEPTH * h for h in heights]  # [B] each body's own: a sliver body (a box catching one
            # face, 1e-4 m tall) set one depth of 1e-5 m for all, and a ball dropped on the table fell through it
            for b, d in zip(bodies, depths):
                b.sim.set_floor(b.sim.floor_height, replace(region, ground=ground, depth=d))
            collider.update(support_region={"cells": int(region.mask.sum()), "cell_m": cell, "depth_m": depth,
                                            "depth_m_per_body": depths},
                            ground_m=ground, ground=ground_src)
        # static point collider: static rows near the bodies, above the ground, thinned, not touching a body at rest
        r_s = 0.5 * min(radii)
        rest = [b.sim.positions().numpy() for b in bodies]
        allp = np.concatenate(rest)
        grow = COLLIDER_REACH * max(heights)
        lo, hi = allp.min(0) - grow, allp.max(0) + grow
        keep = np.all((st >= lo) & (st <= hi), axis=1) & (st_h > ground + r_s)
        sp = st[keep]
        if sp.shape[0]:
            key = np.floor(sp / r_s).astype(np.int64)
            _, first = np.unique(key, axis=0, return_index=True)
            sp = sp[np.sort(first)]
            from scipy.spatial import cKDTree

            d, _ = cKDTree(allp).query(sp, k=1)
            sp = sp[d > max(radii) + r_s]
        system = BodyContactSystem([b.sim for b in bodies], radii=radii, static_points=sp if sp.shape[0] else None,
                                   static_radius=r_s)
        collider.update(static_points=int(sp.shape[0]), static_radius_m=r_s, touching_at_rest=system.rest_overlaps)
        info = dict(main.info)
        timings = {}
        for b in bodies:
            for name, v in b.info.get("timings", {}).items():
                timings[name] = timings.get(name, 0.0) + v
        timings["scene_analysis"] = analysis_seconds
        timings["contact_setup"] = time.perf_counter() - t
        info.update(
            timings=timings, selection=selection or f"auto ({k} bodies)",
            num_moving=int(sum(b.info["num_moving"] for b in bodies)),
            num_cubature=int(sum(b.info["num_cubature"] for b in bodies)),
            cubature=", ".join(sorted({str(b.info.get("cubature")) for b in bodies})),  # the bodies' rules
            collider=collider,
            other_bodies_rows=(int(sum(len(r) for r, _ in analysis.other_bodies)),
                               int(sum(len(t) for _, t in analysis.other_bodies))),
            bodies=[{"rows": b.info["num_moving"], "handles": b.num_handles, "cubature_points": b.info["num_cubature"],
                     "height_m": h, "width_m": _width(b, up_np) * s, "contact_radius_m": r,
                     "skinning": b.skinning_source,
                     "center_scene": [float(v) for v in b.scene.means[b.moving_index].double().mean(0)]}
                    for b, h, r in zip(bodies, heights, radii)])
        out = cls(scene, bodies, system, info)
        if pin is not None and str(pin).strip():
            out.set_pin(pin)  # every body holding part of the region (OptionError when none does)
            for b_info, spec in zip(info["bodies"], out.pins):
                b_info["pin"] = spec
        return out

    # ------------------------------------------------------------------------------------------ facts
    @property
    def num_bodies(self) -> int:
        """How many bodies move."""
        return len(self.bodies)

    @property
    def num_handles(self) -> int:
        """Every body's learned handles plus one: handle ``i`` (global, ``0 <= i < num_handles - 1``) of
        :meth:`handle_positions` / :meth:`start_handle_drag` is body 0's first, then body 1's, ...
        (``body_handles`` gives each body's own H)."""
        return int(self._handle_start[-1]) + 1

    @property
    def body_handles(self) -> List[int]:
        """H of every body, in order."""
        return [b.num_handles for b in self.bodies]

    @property
    def skinning_source(self) -> str:
        """The first body's basis (every body is built the same way)."""
        return self.bodies[0].skinning_source

    @property
    def support_height(self) -> Optional[float]:
        """The support plane's height along up (scene units)."""
        return self.bodies[0].support_height

    @property
    def floor_scene(self) -> Optional[float]:
        """Where the support holds a body's surface, along up (scene units); None without a floor."""
        return self.bodies[0].floor_scene

    @property
    def height_scene(self) -> float:
        """The tallest body's height (scene units)."""
        return max(b.height_scene for b in self.bodies)

    @property
    def lowest_scene(self) -> float:
        """The lowest body point along up at rest (scene units)."""
        return min(b.lowest_scene for b in self.bodies)

    @property
    def regions(self) -> list:
        """Per-region materials (none with several bodies)."""
        return []

    @property
    def num_invalid(self) -> int:
        """Rows with a non-finite value (never moved)."""
        return self.bodies[0].num_invalid

    def sh_handling(self) -> str:
        """How exported SH are written (the scene's, as for one body)."""
        return self.bodies[0].sh_handling()

    @property
    def dt(self) -> float:
        """Simulation time step in seconds (all bodies); setting a non-positive value raises OptionError."""
        return self.system.dt

    @dt.setter
    def dt(self, value: float) -> None:
        for b in self.bodies:
            b.dt = value
        self.system.dt = float(value)

    def sims_finite(self) -> bool:
        """Whether every body's state is finite."""
        return all(bool(torch.isfinite(b.sim.q).all()) for b in self.bodies)

    # ------------------------------------------------------------------------------------------ stepping
    def step(self, n: int = 1) -> dict:
        """Advance every body n steps together. Returns stats: ms, newton_iters, hessians, substeps,
        contacts_body / contacts_static (sphere pairs at the end), contacts_support (cubature points on the support
        or the ground), max_overlap_m, rejected (0), frame, body_ms ((B,) ms of the solves each body took part in,
        ``ContactStats``), solved_together (lists of the bodies solved together in the last step), frozen ((B,)
        bool), energy (every body's kinetic / elastic / gravity / ... in J summed, with ``contact`` and ``total``:
        :meth:`BodyContactSystem.energies`)."""
        st = self.system.step(n)
        self.frame += n
        for b in self.bodies:
            b.frame += n
            b._cache_key = None
        d = st.as_dict()
        d.update(rejected=0, frame=self.frame, contacts_support=self.support_contacts(), frozen=self.frozen,
                 energy=self.system.energies())
        return d

    def support_contacts(self) -> int:
        """Cubature points of all bodies touching the support or the ground now (within the simulator's contact
        gap); body-body and static-point contacts are :meth:`step`'s ``contacts_body`` / ``contacts_static``."""
        n = 0
        for b in self.bodies:
            sim = b.sim
            if sim.floor_height is None:
                continue
            x = sim.positions().numpy().T  # [3, n]
            n += int(np.count_nonzero(sim._up_np @ x - sim._floor_heights(x) < sim.CONTACT_GAP))
        return n

    def reset(self) -> None:
        """Every body back to its rest state (drags dropped)."""
        self._drags.clear()
        for b in self.bodies:
            b.reset()
        self.system.time = 0.0
        self.system._L = None
        self.frame = 0

    # ------------------------------------------------------------------------------------------ state
    @property
    def moving_index(self) -> torch.Tensor:
        """(M,) int64 rows that move (``nonzero(moving)``: every body's rows, in the scene's order), the order of
        :meth:`deformed_rows`."""
        return self._idx

    def deformed_rows(self) -> Dict[str, torch.Tensor]:
        """Every body's :meth:`~physskin_gs.pipeline.AnimatedScene.deformed_rows`, in the rows' order
        (:attr:`moving_index`)."""
        parts = [b.deformed_rows() for b in self.bodies]
        out = {}
        for key in parts[0]:
            cat = torch.cat([p[key] for p in parts])
            out[key] = torch.empty_like(cat).index_copy_(0, self._dst, cat)
        return out

    def export_rest_scene(self) -> GaussianScene:
        """The rest scene as every exported frame writes its static rows (computed once)."""
        return self.bodies[0].export_rest_scene()

    def deformed_gaussians(self, view_rotations: bool = True):
        """The whole scene deformed: the first body's :meth:`~physskin_gs.pipeline.AnimatedScene.deformed_gaussians`
        with the other bodies' rows put in."""
        dg = self.bodies[0].deformed_gaussians(view_rotations)
        with_vr = self.scene.sh_rest.shape[1] > 0 and view_rotations
        for b in self.bodies[1:]:
            d = b._deform()
            dg.means[b.moving_index] = d.means
            dg.covars[b.moving_index] = d.covars
            if with_vr:
                dg.view_rotations[b.moving_index] = d.view_rotations()
        return dg

    def deformed_scene(self) -> GaussianScene:
        """GaussianScene of the current state for export (static rows as :meth:`export_rest_scene`)."""
        return _pipeline.scene_with_rows(self.export_rest_scene(), self.deformed_rows())

    def body_centres(self) -> np.ndarray:
        """(B, 3) float64 current mass centres of the bodies' cubature points (scene units)."""
        return np.stack([b.cubature_positions().double().mean(0).numpy() for b in self.bodies])

    # ------------------------------------------------------------------------------------------ drags
    def _body(self, body: Optional[int]) -> int:
        if body is None:
            return 0
        if isinstance(body, bool) or not (isinstance(body, (int, np.integer)) and 0 <= int(body) < len(self.bodies)):
            raise OptionError(f"body {body!r} outside [0, {len(self.bodies) - 1}] (the {len(self.bodies)} bodies)")
        return int(body)

    def nearest_body(self, point) -> int:
        """The body whose cubature point lies nearest ``point`` (3,) scene units."""
        p = torch.as_tensor(point, dtype=torch.float32).reshape(1, 3)
        dist = [float((b.cubature_positions() - p).norm(dim=1).min()) for b in self.bodies]
        return int(np.argmin(dist))

    def _add(self, body: int, did: int) -> int:
        gid = self._next_drag
        self._next_drag += 1
        self._drags[gid] = (body, did)
        return gid

    def start_drag(self, point, radius: Optional[float] = None, body: Optional[int] = None) -> int:
        """Grab ``body`` (default: the body nearest ``point``) around ``point`` (3,) scene units
        (:meth:`~physskin_gs.pipeline.AnimatedScene.start_drag`). Returns a drag id."""
        k = self.nearest_body(point) if body is None else self._body(body)
        did = self._add(k, self.bodies[k].start_drag(point, radius))
        self.last_grab = dict(self.bodies[k].last_grab, body=k)
        return did

    def handle_owner(self, handle: int) -> Tuple[int, int]:
        """(body, its own learned-handle index) of global learned handle ``handle`` (:attr:`num_handles`: body 0's
        first). Raises OptionError outside [0, num_handles - 2]."""
        return self._global_handle(handle, None)

    def _global_handle(self, handle: int, body: Optional[int]) -> Tuple[int, int]:
        """(body, local handle) of ``handle``: local to ``body`` when given, else global (:attr:`num_handles`)."""
        if body is not None:
            return self._body(body), int(handle)
        h = int(handle)
        if not 0 <= h < int(self._handle_start[-1]):
            raise OptionError(f"handle index {handle} outside [0, {int(self._handle_start[-1]) - 1}] (the learned "
                              f"handles of all {len(self.bodies)} bodies, body 0's first)")
        k = int(np.searchsorted(self._handle_start, h, side="right")) - 1
        return k, h - int(self._handle_start[k])

    def start_handle_drag(self, handle: int, body: Optional[int] = None) -> int:
        """Grab learned handle ``handle`` of ``body``, or (``body`` None) global handle ``handle`` (:attr:`num_handles`).
        Raises OptionError for a bad index."""
        k, h = self._global_handle(handle, body)
        return self._add(k, self.bodies[k].start_handle_drag(h))

    def handle_positions(self, body: Optional[int] = None) -> torch.Tensor:
        """(L, 3) float32 current handle centres (scene units) of ``body``, or of every body (global order)."""
        if body is not None:
            return self.bodies[self._body(body)].handle_positions()
        return torch.cat([b.handle_positions() for b in self.bodies])

    def handle_transforms_scene(self) -> torch.Tensor:
        """(sum H_b, 3, 4) float64 every body's handle transforms (scene frame), body after body: the state
        :meth:`display_deformer` deforms."""
        return torch.cat([b.handle_transforms_scene() for b in self.bodies])

    def display_deformer(self) -> "BodiesDeformer":
        """A deformer of every moving Gaussian for another thread (the viewer's display), fed with
        :meth:`handle_transforms_scene`; outputs in :attr:`moving_index` order."""
        return BodiesDeformer([b.display_deformer() for b in self.bodies], [b.num_handles for b in self.bodies],
                              self._dst, self._starts)

    def skinning_weights(self) -> torch.Tensor:
        """(M, L + 1) float32 skinning weights of the moving Gaussians (rows in :attr:`moving_index` order): each
        body's learned handles in its own block of columns (global handle order), the constant handle last."""
        L = int(self._handle_start[-1])
        out = torch.zeros(self._idx.numel(), L + 1, dtype=torch.float32)
        for k, b in enumerate(self.bodies):
            w = b.skinning_weights().float()
            rows = self._dst[self._starts[k]:self._starts[k + 1]]
            block = torch.zeros(w.shape[0], L + 1, dtype=torch.float32)
            block[:, self._handle_start[k]:self._handle_start[k + 1]] = w[:, :-1]
            block[:, -1] = w[:, -1]
            out[rows] = block
        return out

    # ------------------------------------------------------------------------------------------ parameters
    def set_material(self, E=None, nu=None, density=None) -> None:
        """Every body's E (Pa), nu, density (kg/m^3); raises OptionError for invalid values."""
        for b in self.bodies:
            b.set_material(E=E, nu=nu, density=density)
        self.system._L = None

    def set_gravity(self, g: float, direction=None) -> None:
        """Gravity magnitude (m/s^2) along ``direction`` (3,) or -up, for every body."""
        for b in self.bodies:
            b.set_gravity(g, direction)

    def set_damping(self, c: float) -> None:
        """Rayleigh damping coefficient c >= 0 of every body."""
        for b in self.bodies:
            b.set_damping(c)
        self.system._L = None

    def set_friction(self, eta: float) -> None:
        """Viscous friction eta >= 0 (1/s) against the support, for every body."""
        for b in self.bodies:
            b.set_friction(eta)

    def set_floor(self, enabled: bool, height: Optional[float] = None) -> None:
        """The support where it was captured (``height`` None or the support's own height, scene units), an endless
        floor plane at ``height``, or none."""
        own = self.floor_scene
        for b, region in zip(self.bodies, self._regions_of):
            if enabled and region is not None and (height is None or (own is not None and abs(float(height) - own)
                                                                       <= 1e-6 * max(1.0, abs(own)))):
                b.sim.set_floor(b._floor_sim(True, None), region)
            else:
                b.set_floor(enabled, height)
        self.system._L = None

    def set_pin(self, spec: Optional[str], body: Optional[int] = None) -> None:
        """Pin the region ``spec`` (:meth:`~physskin_gs.pipeline.AnimatedScene.region_mask`) of every body that
        holds part of it (``base`` / ``below:F``: every body's own); None unpins all. With ``body``: that body only
        (None unpins it; the others keep their pins). Raises OptionError when no body (or ``body``) holds any of
        it, or for a bad body index."""
        if body is not None:
            k = self._body(body)
            self.bodies[k].set_pin(spec)
            self.system._L = None
            return
        if spec is None or str(spec).strip() == "":
            for b in self.bodies:
                b.set_pin(None)
            self.system._L = None
            return
        _pipeline.parse_region(str(spec).strip(), "--pin")  # a malformed spec is said as such, nothing changed
        holds = []
        for b in self.bodies:
            try:
                b.region_mask(str(spec).strip(), "--pin")
                holds.append(True)
            except OptionError:
                holds.append(False)
        if not any(holds):  # nothing changed: every body keeps its pin
            raise OptionError(f"--pin {spec!r} holds none of the {len(self.bodies)} bodies' simulation (cubature) "
                              "points; bodies' centres and heights are in the log (scene units)")
        for b, on in zip(self.bodies, holds):
            b.set_pin(spec if on else None)
        self.system._L = None

    @property
    def pins(self) -> List[Optional[str]]:
        """Each body's pin region (:meth:`set_pin`'s spec), or None where it is not pinned."""
        return [getattr(b, "_pin_spec", None) for b in self.bodies]

    def set_frozen(self, body: int, on: bool) -> None:
        """Freeze body ``body`` where it is now, or let it move again (from rest):
        :meth:`~physskin_gs.physics.simulator.SubspaceSimulator.set_frozen`. A frozen body is an immovable obstacle
        for the others (they rest on it and bounce off it); drags, pins and gravity do not move it. Raises
        OptionError for a bad body index."""
        k = self._body(body)
        self.bodies[k].sim.set_frozen(on)
        self.bodies[k]._cache_key = None
        self.system._L = None

    @property
    def frozen(self) -> List[bool]:
        """Whether each body is frozen (:meth:`set_frozen`)."""
        return [bool(b.sim.frozen) for b in self.bodies]

    def update_drag(self, drag_id: int, target) -> None:
        """Move drag ``drag_id``'s grabbed point to ``target`` (3,) scene units."""
        if drag_id not in self._drags:
            raise OptionError(f"unknown drag id {drag_id}")
        k, did = self._drags[drag_id]
        self.bodies[k].update_drag(did, target)

    def end_drag(self, drag_id: int) -> None:
        """Release a drag; an unknown or already released id is ignored (a release is idempotent, as a mouse-up
        after a reset must be)."""
        if drag_id in self._drags:
            k, did = self._drags.pop(drag_id)
            self.bodies[k].end_drag(did)

    def deformed_mesh_vertices(self):
        """None: several bodies come from splat captures only."""
        return None


class BodiesDeformer:
    """Deforms every body's Gaussians for their concatenated handle transforms (``SceneBodies.display_deformer``).

    ``deform(Z, gradients=None)``: Z (sum H_b, 3, 4) scene frame, body after body; returns (means (M, 3), covars
    (M, 3, 3)) float32 buffers in the scene's row order (overwritten by the next call), and with ``gradients`` an
    (M, 3, 3) float32 tensor also receives F, as :meth:`physskin_gs.deform.GaussianDeformer.deform` does."""

    #: deform() fills a ``gradients`` tensor with F (the viewer's view-dependent colour uses it)
    GIVES_GRADIENTS = True

    def __init__(self, deformers, handles: List[int], dst: torch.Tensor, starts) -> None:
        self.deformers = deformers
        self.handles = [int(h) for h in handles]
        self.dst = dst
        self.starts = [int(v) for v in starts]
        self.N = int(dst.numel())
        self.means = torch.empty(self.N, 3, dtype=torch.float32)
        self.covars = torch.empty(self.N, 3, 3, dtype=torch.float32)
        self._F = [None] * len(deformers)

    def deform(self, Z: torch.Tensor, gradients: Optional[torch.Tensor] = None):
        """See the class docstring."""
        o = 0
        for k, (d, h) in enumerate(zip(self.deformers, self.handles)):
            rows = self.dst[self.starts[k]:self.starts[k + 1]]
            F = None
            if gradients is not None:
                F = self._F[k]
                if F is None or F.shape[0] != rows.numel():
                    F = self._F[k] = torch.empty(rows.numel(), 3, 3, dtype=torch.float32)
            m, c = d.deform(Z[o:o + h], gradients=F) if F is not None else d.deform(Z[o:o + h])
            o += h
            self.means.index_copy_(0, rows, m)
            self.covars.index_copy_(0, rows, c)
            if F is not None:
                gradients.index_copy_(0, rows, F)
        return self.means, self.covars
