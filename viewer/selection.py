"""What moves: the scene facts shown in the panel, and editing the selection (mode, box, picked component).

- :func:`scene_facts` / :func:`facts_markdown`: moving / static / floater counts and the up vector with its
  source, read from the AnimatedScene (``moving``, ``up_vector``, ``info["scene_analysis"]``).
- :func:`box_spec` / :func:`parse_box`: the box selection's ``"xmin,ymin,zmin,xmax,ymax,zmax"`` string, as
  ``AnimationConfig.select`` takes it.
- :func:`component_bounds`: the bounding box of the connected component (occupancy-grid voxels, 26-connected)
  holding a given row; what "pick component" puts into the box.
- :class:`BoxGizmo`: the box in the scene, a wireframe with a transform gizmo on each of its two corners.
- :class:`SelectionControl`: the "Scene" folder's selection widgets (mode dropdown, box min / max inputs kept in
  step with the gizmo, "pick component", "add component" (several boxes, one body each), "apply selection");
  applying goes through
  :meth:`physskin_gs_viewer.switching.SceneSwitcher.request`.

The app surface used: ``live``, ``server``, ``gui``, ``switcher``, ``interaction.arm_pick``,
``panel.set_note``, ``_stop`` (the stop event).
"""

from __future__ import annotations

import threading
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from .constants import SELECT_ALL, SELECT_AUTO, SELECT_BOX, SELECT_CHOICES
from .sim import to_numpy
from .splats import pick_on_ray

#: Most occupancy-grid cells along the longest axis for :func:`component_bounds` (fewer for small scenes, by the
#: scene analysis' rule ``sqrt(N / 24)``, at least 16, so that sparse parts stay connected).
COMPONENT_GRID = 96
#: Rows this transparent or less are left out of the components (they glue separate parts together).
COMPONENT_MIN_OPACITY = 0.05
#: Clearance above the support plane (times the scene's robust size) below which rows are left out of the
#: components, so that an object standing on its support is not one component with it.
COMPONENT_CLEARANCE = 0.015
#: Margin of the picked component's box, times its largest side.
COMPONENT_PAD = 0.01
#: Colour of the selection box.
BOX_COLOR = (255, 190, 0)
#: Colour of the boxes kept before it ("add component": one body each).
OTHER_BOX_COLOR = (90, 200, 255)


# ------------------------------------------------------------------------------------------- facts
def scene_facts(anim) -> Dict[str, Any]:
    """Moving / static / floater counts and the up vector of an AnimatedScene (what the panel shows).

    Returns a dict: ``total``, ``moving``, ``static`` (every row that does not move: support, background,
    floaters, transparent and invalid rows), ``floaters`` / ``support`` (None without a scene analysis), ``up``
    ((3,) list), ``up_source`` (the analysis' ``support-plane`` / ``format-prior`` / ``default``, or ``"set"``
    when the up axis was given), ``selection`` (the selection used) and ``reason`` (how up was chosen; None when
    it was given).
    """
    info = getattr(anim, "info", None) or {}
    n = int(getattr(anim.scene, "num_gaussians", to_numpy(anim.scene.means).shape[0]))
    mv = getattr(anim, "moving", None)
    moving = int(info.get("num_moving", n if mv is None else int(to_numpy(mv, dtype=bool).sum())))
    up = np.asarray(to_numpy(getattr(anim, "up_vector", np.array([0.0, 0.0, 1.0]))), dtype=np.float64).reshape(3)
    sa = info.get("scene_analysis")
    moving -= int((sa or {}).get("moving_invalid", 0))  # rows with a NaN / Inf never move (written sanitised)
    cfg = getattr(anim, "config", None)
    up_cfg = str(getattr(cfg, "up", "auto")).strip().lower()
    counts = (sa or {}).get("counts") or {}
    if sa is not None and up_cfg == "auto":
        up_source, reason = sa.get("up_source", "auto"), sa.get("reason")
    elif cfg is not None and up_cfg != "auto":
        up_source, reason = "set", None
    else:
        up_source, reason = "scene", None
    return {
        "total": n,
        "moving": moving,
        "static": n - moving,
        "floaters": counts.get("floater"),
        "support": counts.get("support"),
        "up": [float(v) for v in up],
        "up_source": up_source,
        "reason": reason,
        "selection": info.get("selection", getattr(cfg, "select", None)),
    }


def facts_markdown(facts: Dict[str, Any]) -> str:
    """The panel's text for :func:`scene_facts`."""
    up = ", ".join(f"{v:+.3f}" for v in facts["up"])
    if facts.get("floaters") is not None:
        sub = f"floaters **{facts['floaters']:,}**"
        if facts.get("support") is not None:
            sub += f" · support {facts['support']:,}"
        sub += " (static)"
    else:
        sub = "floaters: - (no scene analysis: select and up both given)"
    lines = [
        f"moving **{facts['moving']:,}** · static **{facts['static']:,}** of {facts['total']:,}",
        sub,
        f"up [{up}] ({facts['up_source']})",
    ]
    if facts.get("selection") is not None:
        lines.append(f"selection `{facts['selection']}`")
    return "  \n".join(lines)


# ------------------------------------------------------------------------------------------- box spec
def box_spec(lo, hi) -> str:
    """``"xmin,ymin,zmin,xmax,ymax,zmax"`` of a box (the form ``AnimationConfig.select`` takes)."""
    return ",".join(f"{float(v):.6g}" for v in list(lo) + list(hi))


def parse_box(spec) -> Optional[Tuple[np.ndarray, np.ndarray]]:
    """(lo, hi) of a box spec, or None when ``spec`` is not six comma-separated finite numbers."""
    try:
        vals = [float(v) for v in str(spec).split(",")]
    except (TypeError, ValueError):
        return None
    if len(vals) != 6 or not np.all(np.isfinite(vals)):
        return None
    return np.array(vals[:3]), np.array(vals[3:])


def rows_bounds(points: np.ndarray, pad: float = 0.02) -> Tuple[np.ndarray, np.ndarray]:
    """Bounding box of the finite rows of ``points`` (M, 3), grown by ``pad`` times its largest side."""
    p = np.asarray(points, dtype=np.float64)
    p = p[np.all(np.isfinite(p), axis=1)]
    if p.shape[0] == 0:
        return -np.ones(3), np.ones(3)
    lo, hi = p.min(0), p.max(0)
    g = pad * max(float((hi - lo).max()), 1e-9)
    return lo - g, hi + g


def component_bounds(points: np.ndarray, index: int, opacities: Optional[np.ndarray] = None,
                     plane: Optional[Dict[str, Any]] = None, cells: Optional[int] = None,
                     max_cells: int = 8_000_000) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The connected component holding row ``index`` of ``points`` (N, 3): its rows and bounding box.

    Rows (finite, opacity above :data:`COMPONENT_MIN_OPACITY` when ``opacities`` are given) are binned into
    cubic voxels (``cells`` along the longest side of their 1-99 % extent; None: ``sqrt(rows / 24)`` clipped to
    16..:data:`COMPONENT_GRID`, the scene analysis' rule); occupied voxels are labelled 26-connected. With a
    support ``plane`` (``{"normal", "offset"}``; the scene analysis' facts) rows less than
    :data:`COMPONENT_CLEARANCE` times that extent above it are left out first, so an object standing on its
    support is its own component, and a pick on the support itself keeps the rows within half that distance of
    the plane (the support's own slab: a table top, not the objects on it, its legs and the floor under it).

    Returns (rows (K,) int64, lo (3,), hi (3,)): the component's rows and their bounding box, grown by
    :data:`COMPONENT_PAD` times its largest side.
    """
    from scipy import ndimage

    p = np.asarray(points, dtype=np.float64)
    keep = np.all(np.isfinite(p), axis=1)
    if opacities is not None:
        keep &= np.asarray(opacities, dtype=np.float64).reshape(-1) > COMPONENT_MIN_OPACITY
    keep[index] = bool(np.all(np.isfinite(p[index])))
    if not keep[index]:
        raise ValueError("the picked row has no finite position")
    q = np.percentile(p[keep], [1.0, 99.0], axis=0)
    size = max(float((q[1] - q[0]).max()), 1e-9)
    if plane is not None:
        n = np.asarray(plane["normal"], dtype=np.float64)
        sd = p @ n - float(plane["offset"])  # [N] height above the support
        above = keep & (sd > COMPONENT_CLEARANCE * size)
        if above[index]:
            keep = above
        else:  # a pick on the support: its own slab (it took every row: the objects on it, the legs, the floor)
            slab = keep & (np.abs(sd) <= 0.5 * COMPONENT_CLEARANCE * size)
            if slab[index]:
                keep = slab
    rows = np.flatnonzero(keep)
    pts = p[rows]
    lo, hi = pts.min(0), pts.max(0)
    if cells is None:
        cells = int(np.clip(np.sqrt(len(rows) / 24.0), 16, COMPONENT_GRID))
    h = size / cells
    dims = np.maximum(np.ceil((hi - lo) / h).astype(np.int64) + 1, 1)
    while int(np.prod(dims)) > max_cells:  # far outliers: coarser voxels rather than a huge grid
        h *= 2.0
        dims = np.maximum(np.ceil((hi - lo) / h).astype(np.int64) + 1, 1)
    ijk = np.clip(((pts - lo) / h).astype(np.int64), 0, dims - 1)
    flat = np.ravel_multi_index(ijk.T, tuple(dims))
    occ = np.zeros(int(np.prod(dims)), dtype=bool)
    occ[flat] = True
    labels, _ = ndimage.label(occ.reshape(tuple(dims)), structure=np.ones((3, 3, 3), dtype=bool))
    lab = labels.ravel()[flat]
    mine = lab == lab[int(np.searchsorted(rows, index))]
    comp = rows[mine]
    c = pts[mine]
    clo, chi = c.min(0), c.max(0)
    g = COMPONENT_PAD * max(float((chi - clo).max()), 1e-9)
    return comp, clo - g, chi + g


# ------------------------------------------------------------------------------------------- gizmo
class BoxGizmo:
    """An axis-aligned box in the scene: a wireframe and a translate gizmo on each of its corners.

    Dragging a corner gizmo resizes the box (the two corners are kept ordered) and calls ``on_change(lo, hi)``.
    """

    def __init__(self, server, lo, hi, scale: float, on_change=None, visible: bool = True) -> None:
        self.server = server
        self.on_change = on_change
        self.lo = np.asarray(lo, dtype=np.float64).copy()
        self.hi = np.asarray(hi, dtype=np.float64).copy()
        self._visible = bool(visible)
        self.box = server.scene.add_box(
            "/selection/box", color=BOX_COLOR, dimensions=tuple(self.hi - self.lo), wireframe=True,
            position=tuple(0.5 * (self.lo + self.hi)), visible=self._visible,
        )
        self.corners = []
        for name, p in (("min", self.lo), ("max", self.hi)):
            g = server.scene.add_transform_controls(
                f"/selection/{name}", scale=float(scale), disable_rotations=True, disable_sliders=True,
                translation_limits=((-1e9, 1e9),) * 3, position=tuple(float(v) for v in p),
                visible=self._visible,
            )
            g.on_update(self._corner_callback(g))
            self.corners.append(g)

    def _corner_callback(self, gizmo):
        def on_update(_event) -> None:
            a = np.asarray(self.corners[0].position, dtype=np.float64)
            b = np.asarray(self.corners[1].position, dtype=np.float64)
            self._set(np.minimum(a, b), np.maximum(a, b), move_corners=False)
            if self.on_change is not None:
                self.on_change(self.lo.copy(), self.hi.copy())

        return on_update

    def _set(self, lo, hi, move_corners: bool) -> None:
        self.lo, self.hi = np.asarray(lo, dtype=np.float64).copy(), np.asarray(hi, dtype=np.float64).copy()
        self.box.dimensions = tuple(float(v) for v in np.maximum(self.hi - self.lo, 1e-9))
        self.box.position = tuple(float(v) for v in 0.5 * (self.lo + self.hi))
        if move_corners:
            self.corners[0].position = tuple(float(v) for v in self.lo)
            self.corners[1].position = tuple(float(v) for v in self.hi)

    def set(self, lo, hi) -> None:
        """Move the box (and its corner gizmos) to [lo, hi]; does not call ``on_change``."""
        self._set(lo, hi, move_corners=True)

    @property
    def visible(self) -> bool:
        """The box and its corner gizmos are shown."""
        return self._visible

    @visible.setter
    def visible(self, on: bool) -> None:
        self._visible = bool(on)
        for h in (self.box, *self.corners):
            h.visible = self._visible

    def remove(self) -> None:
        """Remove the box and its corner gizmos from the scene."""
        for h in (self.box, *self.corners):
            try:
                h.remove()
            except Exception:  # noqa: BLE001
                pass


# ------------------------------------------------------------------------------------------- panel part
class SelectionControl:
    """The selection widgets of the panel's "Scene" folder and the box gizmo.

    Widgets (in ``app.gui``): ``select`` (auto / all / box, plus the configured rule when it is another one),
    ``box_min`` / ``box_max`` (vector inputs, in step with the gizmo), ``pick`` (the next click in the scene sets
    the box to the clicked connected component), ``add_pick`` (the next click adds the clicked component as one
    more body: the box shown so far is kept as a body of its own), ``box_list`` (markdown: the boxes, one body
    each), ``clear_boxes`` (keep only the box shown), ``apply_select`` (re-prepare on the selection shown).

    Several boxes: :attr:`others` are the boxes added before the one the inputs and the gizmo show (each drawn as a
    wireframe); :meth:`spec` joins them all (``"BOX;BOX"``, one body per box,
    :func:`physskin_gs.bodies.prepare_bodies`).
    """

    def __init__(self, app) -> None:
        self.app = app
        self.gizmo: Optional[BoxGizmo] = None
        #: boxes (lo, hi) kept before the one shown (one body each, in order)
        self.others: List[Tuple[np.ndarray, np.ndarray]] = []
        self._other_nodes: list = []
        self._syncing = threading.local()
        #: the support plane of the last scene analysis seen (scene coordinates; kept when later preparations
        #: skip the analysis), used by :meth:`pick_component`
        self.support_plane: Optional[Dict[str, Any]] = None

    # ------------------------------------------------------------------ building
    def build(self, gui, config) -> None:
        """Add the widgets (inside the caller's folder) for the configured selection ``config.select``."""
        g = self.app.gui
        spec = str(getattr(config, "select", None) or SELECT_ALL).strip()
        boxes = [parse_box(part) for part in spec.split(";") if part.strip()] if ";" in spec else []
        if len(boxes) > 1 and all(b is not None for b in boxes):  # several boxes: the last one shown, the rest kept
            self.others = boxes[:-1]
            spec = box_spec(*boxes[-1])
        box = parse_box(spec)
        if box is not None:
            mode, options = SELECT_BOX, list(SELECT_CHOICES)
        elif spec.lower() in SELECT_CHOICES:
            mode, options = spec.lower(), list(SELECT_CHOICES)
        else:  # a rule such as "opacity>0.1" from the command line: keep it selectable
            mode, options = spec, list(SELECT_CHOICES) + [spec]
        lo, hi = box if box is not None else self._moving_bounds()
        g["select"] = gui.add_dropdown("select", options, initial_value=mode,
                                       hint="what moves: the scene analysis' object (auto), every row, or the box")
        g["box_min"] = gui.add_vector3("box min", tuple(float(v) for v in lo), step=1e-3, visible=mode == SELECT_BOX)
        g["box_max"] = gui.add_vector3("box max", tuple(float(v) for v in hi), step=1e-3, visible=mode == SELECT_BOX)
        g["pick"] = gui.add_button("pick component", visible=mode == SELECT_BOX,
                                   hint="the next click in the scene sets the box to the clicked connected part")
        g["add_pick"] = gui.add_button(
            "add component", visible=mode == SELECT_BOX,
            hint="the next click adds the clicked connected part as one more body (the box shown so far stays a "
                 "body of its own); apply selection moves them all, in contact")
        g["box_list"] = gui.add_markdown("", visible=False)
        g["clear_boxes"] = gui.add_button("clear other boxes", visible=False,
                                          hint="keep only the box shown (one body)")
        g["apply_select"] = gui.add_button("apply selection",
                                           hint="re-prepare the animation on this selection (server keeps running)")
        live = self.app.live
        size = live.extent if live is not None else float(np.linalg.norm(np.asarray(hi) - np.asarray(lo))) or 1.0
        self.gizmo = BoxGizmo(self.app.server, lo, hi, scale=0.15 * size, on_change=self._show_box,
                              visible=mode == SELECT_BOX)
        self._show_others()
        self._wire()
        if live is not None:
            self.on_live(live)

    def _moving_bounds(self) -> Tuple[np.ndarray, np.ndarray]:
        """Bounds of the live scene's moving rows (no live scene: of the source scene's rows)."""
        live = self.app.live
        if live is None:
            src = getattr(self.app, "source_scene", None)
            return rows_bounds(to_numpy(src.means)) if src is not None else (-np.ones(3), np.ones(3))
        rest = to_numpy(live.anim.scene.means)
        rows = np.flatnonzero(live.moving)
        return rows_bounds(rest[rows] if len(rows) else rest)

    def _wire(self) -> None:
        g = self.app.gui

        @g["select"].on_update
        def _(_e) -> None:
            box = g["select"].value == SELECT_BOX
            for k in ("box_min", "box_max", "pick", "add_pick"):
                g[k].visible = box
            if self.gizmo is not None:
                self.gizmo.visible = box
            self._show_others()

        def inputs_changed(_e) -> None:
            if getattr(self._syncing, "on", False) or self.gizmo is None:
                return
            a, b = np.asarray(g["box_min"].value, float), np.asarray(g["box_max"].value, float)
            if not (np.isfinite(a).all() and np.isfinite(b).all()):  # (a NaN reached --select's parser, named)
                self._show_box(self.gizmo.lo, self.gizmo.hi)
                self.app.panel.set_note("box: a corner was not a number; the box stays as it was")
                return
            lo, hi = np.minimum(a, b), np.maximum(a, b)
            self.gizmo.set(lo, hi)
            if (a > b).any():  # the fields show the box that is used (they kept a reversed min / max as typed)
                self._show_box(lo, hi)
                self.app.panel.set_note("box: min and max swapped where min was larger")

        g["box_min"].on_update(inputs_changed)
        g["box_max"].on_update(inputs_changed)

        @g["pick"].on_click
        def _(_e) -> None:
            self.app.interaction.arm_pick(self.pick_component)
            self.app.panel.set_note("click the part to select")

        @g["add_pick"].on_click
        def _(_e) -> None:
            self.app.interaction.arm_pick(self.add_component)
            self.app.panel.set_note("click the part to add as one more body")

        @g["clear_boxes"].on_click
        def _(_e) -> None:
            self.others = []
            self._show_others()

        @g["apply_select"].on_click
        def _(_e) -> None:
            self.apply()

    # ------------------------------------------------------------------ state
    def _show_box(self, lo, hi) -> None:
        g = self.app.gui
        self._syncing.on = True
        try:
            g["box_min"].value = tuple(float(v) for v in lo)
            g["box_max"].value = tuple(float(v) for v in hi)
        finally:
            self._syncing.on = False

    def set_box(self, lo, hi) -> None:
        """Show the box [lo, hi] (inputs and gizmo) and switch the mode to box; applies nothing."""
        lo, hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
        lo, hi = np.minimum(lo, hi), np.maximum(lo, hi)
        g = self.app.gui
        self._show_box(lo, hi)
        if self.gizmo is not None:
            self.gizmo.set(lo, hi)
        g["select"].value = SELECT_BOX

    def box(self) -> Tuple[np.ndarray, np.ndarray]:
        """(lo, hi) (3,) float64 of the box the inputs show (corners ordered)."""
        g = self.app.gui
        a, b = np.asarray(g["box_min"].value, float), np.asarray(g["box_max"].value, float)
        return np.minimum(a, b), np.maximum(a, b)

    def spec(self) -> str:
        """The selection the widgets show, as ``AnimationConfig.select`` takes it (box mode: the boxes kept
        before the one shown, then it, joined by ``;``)."""
        mode = self.app.gui["select"].value
        if mode == SELECT_BOX:
            return ";".join(box_spec(lo, hi) for lo, hi in self.others + [self.box()])
        return mode

    def _show_others(self) -> None:
        """Draw the kept boxes (wireframes, in box mode) and list every box in ``box_list``."""
        g = self.app.gui
        box_mode = g["select"].value == SELECT_BOX
        self._remove_others()
        for i, (lo, hi) in enumerate(self.others):
            self._other_nodes.append(self.app.server.scene.add_box(
                f"/selection/body{i}", color=OTHER_BOX_COLOR, dimensions=tuple(float(v) for v in np.maximum(hi - lo, 1e-9)),
                wireframe=True, position=tuple(float(v) for v in 0.5 * (lo + hi)), visible=box_mode))
        several = bool(self.others)
        g["box_list"].visible = g["clear_boxes"].visible = several and box_mode
        if several:
            lines = [f"**{len(self.others) + 1} boxes, one body each** (the last is the one shown):"]
            lines += [f"{i}. `{box_spec(lo, hi)}`" for i, (lo, hi) in enumerate(self.others + [self.box()])]
            g["box_list"].content = "  \n".join(lines)

    def apply(self) -> None:
        """Re-prepare the animation on :meth:`spec` (in the background; the server keeps running)."""
        self.app.switcher.request("selection", select=self.spec())

    def on_live(self, live) -> None:
        """A new AnimatedScene is live: note its support plane; rescale the gizmo; outside box mode, reset the box
        to its moving rows."""
        sa = (getattr(live.anim, "info", None) or {}).get("scene_analysis")
        if sa is not None:
            self.support_plane = sa.get("support_plane")
        if self.gizmo is None:
            return
        if self.app.gui["select"].value != SELECT_BOX:
            lo, hi = self._moving_bounds()
            self._show_box(lo, hi)
            self.gizmo.set(lo, hi)
        for c in self.gizmo.corners:
            c.scale = 0.15 * live.extent

    # ------------------------------------------------------------------ picking
    def _clicked_component(self, origin, direction, button: str):
        """(rows (K,) int64, lo (3,), hi (3,)) of the connected component under the click's ray (scene units;
        :func:`component_bounds`), or None (the app is stopping, or the ray hits nothing: the note says to press
        ``button`` again)."""
        live = self.app.live
        if live is None or self.app._stop.is_set():
            return None
        pick = pick_on_ray(live.worker.slot.get().means, origin, direction, live.scene_extent)
        if pick is None:
            self.app.panel.set_note(f"the click hit nothing; press {button} again")
            return None
        rest = to_numpy(live.anim.scene.means)
        return component_bounds(rest, int(pick.index), live.opac, plane=self.support_plane)

    def pick_component(self, client, origin, direction) -> Optional[np.ndarray]:
        """The click handler armed by "pick component": set the box to the clicked connected component (the boxes
        kept before it are dropped). Returns the component's rows (None when the ray hits nothing)."""
        got = self._clicked_component(origin, direction, "pick component")
        if got is None:
            return None
        rows, lo, hi = got
        self.others = []
        self.set_box(lo, hi)
        self._show_others()
        self.app.panel.set_note(f"box set to a component of {len(rows):,} Gaussians; press apply selection")
        return rows

    def add_component(self, client, origin, direction) -> Optional[np.ndarray]:
        """The click handler armed by "add component": the box shown so far is kept as a body of its own (in box
        mode) and the box is set to the clicked connected component, one more body. Returns its rows (None when
        the ray hits nothing)."""
        got = self._clicked_component(origin, direction, "add component")
        if got is None:
            return None
        rows, lo, hi = got
        if self.app.gui["select"].value == SELECT_BOX:
            self.others.append(self.box())
        else:
            self.others = []
        self.set_box(lo, hi)
        self._show_others()
        self.app.panel.set_note(f"added a component of {len(rows):,} Gaussians as body {len(self.others)}; "
                                "press apply selection")
        return rows

    def teardown(self) -> None:
        """Remove the box gizmo and the kept boxes' wireframes (the app stops)."""
        if self.gizmo is not None:
            self.gizmo.remove()
            self.gizmo = None
        self._remove_others()

    def _remove_others(self) -> None:
        """Remove the kept boxes' wireframes from the scene."""
        for node in self._other_nodes:
            try:
                node.remove()
            except Exception:  # noqa: BLE001
                pass
        self._other_nodes = []


__all__ = [
    "BoxGizmo", "SelectionControl", "box_spec", "component_bounds", "facts_markdown", "parse_box", "rows_bounds",
    "scene_facts", "SELECT_AUTO", "SELECT_ALL", "SELECT_BOX",
]
