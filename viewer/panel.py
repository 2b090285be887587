"""The GUI panel: status lines, the control folders and what each control does.

:class:`ControlPanel` builds the page's panel (status, progress and error lines first; the controls once a
scene is live) and keeps every widget in ``gui`` by name (``app.gui`` is the same dict). Its callbacks only
post commands to the simulation worker or call the part that owns the feature:

===============  ============================================================================================
folder           controls -> owner
===============  ============================================================================================
Simulation       play / step / reset / dt / fast solver -> the worker
Material         E, nu, density, damping -> the worker
Environment      gravity, its direction, floor, floor height, pin -> the worker (+ the floor grid, here)
Bodies           (several bodies only) body, pin its base, freeze -> :class:`~physskin_gs_viewer.bodies_panel.
                 BodiesControl` -> the worker
Scene            moving / static / floater counts, up vector and source (here); select, box, pick component,
                 apply selection -> :class:`~physskin_gs_viewer.selection.SelectionControl`; up axis ->
                 :class:`~physskin_gs_viewer.switching.SceneSwitcher`
Skinning         source -> the switcher; show field -> :class:`~physskin_gs_viewer.display.DisplayLoop`
Display          mode -> ``app.set_display_mode``; show handles, click to grab ->
                 :class:`~physskin_gs_viewer.interaction.Interaction`; x-ray, dim static -> the display
Record           folder, mp4, start / stop -> :class:`~physskin_gs_viewer.recording.RecordingControl`
===============  ============================================================================================

The app surface used: ``server``, ``live``, ``config``, ``path``, ``source_scene``, ``display_mode``,
``display``, ``interaction``, ``recording``, ``switcher``, ``selection``, ``set_display_mode``,
``report_error``, ``_stop`` (the stop event).
"""

from __future__ import annotations

import dataclasses
import math
import threading
import traceback
from types import SimpleNamespace
from typing import Any, Dict, List, Optional

import numpy as np

from physskin_gs.errors import OptionError
from physskin_gs.io.sequence import EXPORT_FORMATS
from physskin_gs.model.bases import resolve_skinning, skinning_names

from .constants import (
    DEFAULT_PIN,
    DISPLAY_CLIENT,
    DISPLAY_GSPLAT,
    DISPLAY_TORCH,
    FIELD_ALL,
    FIELD_NONE,
    GRAVITY_DIRS,
    UP_CHOICES,
)
from .recorder import STEPS_PER_FRAME_MAX
from .render_server import cuda_available
from .selection import facts_markdown, scene_facts
from .sim import to_numpy


def set_fast_solver(anim, on: bool) -> None:
    """The simulator's ``"adaptive"`` solver when ``on`` (a converged step hands its Hessian factor on to the next
    one), else full Newton (``"newton"``: a fresh Hessian every iteration). Same solution either way, fewer
    factorisations; no-op for scenes without a simulator that has named solvers."""
    sim = getattr(anim, "sim", None)
    if sim is not None and "adaptive" in getattr(sim, "SOLVERS", ()):
        sim.solver = "adaptive" if on else "newton"


def default_floor_height(anim, config, up: np.ndarray) -> float:
    """The floor height (scene units along ``up``) the AnimatedScene uses when the panel sets none: the config's,
    else the support plane's, else 25% of the object's height below its lowest point (the pipeline's rule)."""
    fh = getattr(config, "floor_height", None)
    if fh is None:
        fh = getattr(anim, "support_height", None)
    if fh is None and hasattr(anim, "lowest_scene") and hasattr(anim, "height_scene"):
        fh = float(anim.lowest_scene) - 0.25 * float(anim.height_scene)
    if fh is None:
        rest = to_numpy(anim.scene.means)
        fh = float((rest @ up).min()) if rest.size else 0.0
    return float(fh)


def up_choice(up) -> str:
    """The up-axis dropdown entry for ``AnimationConfig.up`` (``"z"`` -> ``"+z"``; unknown names -> ``"auto"``)."""
    s = str(up or "auto").strip().lower()
    if s in ("x", "y", "z"):
        s = "+" + s
    return s if s in UP_CHOICES else "auto"


class ControlPanel:
    """The page's panel (see the module docstring). ``gui``: widget name -> viser handle."""

    def __init__(self, app) -> None:
        self.app = app
        self.gui: Dict[str, Any] = {}
        #: presets beside the named materials (label -> (E Pa, nu, density kg/m^3)): the default raised to stand
        self.presets: Dict[str, tuple] = {}
        #: the named material each of :attr:`presets` was raised from
        self.preset_base: Dict[str, str] = {}
        #: a material was picked or typed in the panel (a re-preparation then keeps it as chosen, not raised)
        self.material_chosen = False
        #: the last value of each number field that was applied to the simulation (a bad entry falls back to it)
        self.applied: Dict[str, float] = {}

    # ================================================================== status
    def build_status(self, title: str) -> None:
        """Add the title (naming ``title``), status, progress and error lines at the top of the panel."""
        gui = self.app.server.gui
        self.gui["title"] = gui.add_markdown(f"**PhysSkin-GS** — `{title}`")
        self.gui["status"] = gui.add_markdown("Loading…")
        self.gui["progress"] = gui.add_progress_bar(0.0, animated=True)
        self.gui["error"] = gui.add_markdown("", visible=False)

    def set_status(self, message: str, pct: Optional[float] = None) -> None:
        """Show ``message`` on the status line and the progress bar at ``pct`` (0-100; None hides the bar)."""
        bar, text = self.gui.get("progress"), self.gui.get("status")
        if text is not None:
            text.content = message
        if bar is not None:
            if pct is None:
                bar.visible = False
            else:
                bar.visible = True
                bar.value = float(pct)

    def set_note(self, message: str) -> None:
        """A line under the scene facts (what a pick did, what to do next); empty hides it."""
        md = self.gui.get("scene_note")
        if md is not None:
            md.content = message
            md.visible = bool(message)

    def clear_error(self) -> None:
        """Hide the error line (what it said no longer holds: a later re-preparation succeeded)."""
        md = self.gui.get("error")
        if md is not None:
            md.visible = False

    def show_error(self, where: str, msg: str) -> None:
        """Show ``msg`` (an error in ``where``) on the error line, with a hint when the simulation paused."""
        md = self.gui.get("error")
        live = self.app.live
        if md is not None:
            paused = live is not None and not live.worker.playing
            hint = "  \nThe simulation is paused; press Reset or Play to go on." if paused else ""
            md.content = f"**Error in {where}:** `{msg}`{hint}"
            md.visible = True
        btn = self.gui.get("play")
        if btn is not None and live is not None and not live.worker.playing:
            btn.label = "Play"

    # ================================================================== controls
    def build_controls(self, anim) -> None:
        """Add the control folders for the first live AnimatedScene; later ones only refresh them."""
        if "play" in self.gui:
            self.refresh(anim)
            return
        app = self.app
        gui = app.server.gui
        cfg = app.config if app.config is not None else SimpleNamespace()
        g = self.gui
        live = app.live
        g["stats"] = gui.add_markdown("")

        with gui.add_folder("Simulation"):
            g["play"] = gui.add_button("Pause", icon=None)
            g["step"] = gui.add_button("Step")
            g["reset"] = gui.add_button("Reset")
            g["dt"] = gui.add_number("dt (s)", float(getattr(anim, "dt", 0.03)), min=1e-4, max=0.2, step=1e-3)
            g["fast"] = gui.add_checkbox(
                "fast solver", True,
                hint="reuse the Hessian factor across Newton iterations and steps (about 2x faster); off = full Newton"
            )
        with gui.add_folder("Material"):
            from physskin_gs.materials import MATERIALS

            names = ("custom",) + tuple(MATERIALS)
            initial = getattr(cfg, "material", None)
            initial = initial if initial in MATERIALS else "custom"
            stand = (getattr(anim, "info", None) or {}).get("stand")
            self.presets = {}
            if stand and initial in MATERIALS:  # the default raised until the object stands: a preset of its own,
                label = f"{initial}, raised to stand"  # so that it can be picked again after trying others
                base = MATERIALS[initial]
                self.presets[label] = (float(stand["E_to"]), min(base.nu, 0.49), base.density)
                self.preset_base[label] = initial
                names = ("custom", label) + tuple(MATERIALS)
                initial = label
            g["material"] = gui.add_dropdown(
                "material", names, initial_value=initial,
                hint="sets E, nu and density to a named material (physskin_gs.materials); custom: keep them; "
                     "'..., raised to stand': the default as animate raised it so that the object stands")
            g["material_note"] = gui.add_markdown("", visible=False)
            # the E that runs: the raised preset's when it is the one chosen (several bodies are raised per scene
            # without the config's E: the field showed 100000 while the bodies ran at 240000, a fresh user's report)
            E0 = self.presets[initial][0] if initial in self.presets else float(getattr(cfg, "E", 2e4))
            # a text field: the browser's number field dropped the "e" of 2e9 (29 Pa); units are read as --E reads
            # them (materials.parse_pressure)
            g["E"] = gui.add_text("E (Pa)", f"{E0:.8g}", hint=f"Young's modulus: pascals (2e9, 240000) or with a "
                                  f"unit (100kPa, 2 MPa, 1.3GPa); {E_RANGE[0]:g} to {E_RANGE[1]:g} Pa")
            g["nu"] = gui.add_slider("nu", 0.0, 0.49, 0.01, float(getattr(cfg, "nu", 0.45)))
            g["density"] = gui.add_number("density (kg/m³)", float(getattr(cfg, "density", 100.0)), min=1e-3, max=1e5, step=1.0)
            g["damping"] = gui.add_slider("damping", 0.0, 1.0, 0.005, float(getattr(cfg, "damping", 0.02)))
            can_regions = callable(getattr(anim, "set_regions", None))
            g["region_spec"] = gui.add_text(
                "region", "base", disabled=not can_regions,
                hint="a part made of another material: 'base' (the part touching the support, bottom 15%), "
                     "'below:0.3' (bottom 30% of the height) or 'box:xmin,ymin,zmin,xmax,ymax,zmax' (scene units; "
                     "the Scene folder's box shows the numbers)")
            g["region_material"] = gui.add_dropdown("region material", tuple(MATERIALS), initial_value="wood",
                                                    disabled=not can_regions)
            g["region_pick"] = gui.add_button(
                "pick region", disabled=not can_regions,
                hint="click the object next: the region becomes a sphere around that point (radius: the slider)")
            g["region_radius"] = gui.add_slider("pick radius", 0.02, 0.5, 0.01, 0.15, disabled=not can_regions,
                                                hint="radius of a picked region, as a fraction of the object's size")
            g["region_add"] = gui.add_button("Add region", disabled=not can_regions,
                                             hint="the region takes the material's E and density (nu stays the "
                                                  "object's); later regions win where they overlap")
            g["region_clear"] = gui.add_button("Clear regions", disabled=not can_regions)
            g["regions"] = gui.add_markdown(regions_markdown(getattr(anim, "regions", []), can_regions))
        with gui.add_folder("Environment"):
            g["gravity"] = gui.add_checkbox("gravity", float(getattr(cfg, "gravity", 9.8) or 0.0) > 0)
            g["gravity_dir"] = gui.add_dropdown("gravity direction", GRAVITY_DIRS, initial_value=GRAVITY_DIRS[0])
            g["floor"] = gui.add_checkbox(
                "floor", bool(getattr(cfg, "floor", True)),
                hint="what the object rests on: the captured support (a table top, the ground) or the virtual floor; "
                     "off, nothing holds it and it falls out of the scene (with several bodies, through the "
                     "captured table too)")
            fh = default_floor_height(anim, cfg, live.up)
            g["floor_height"] = gui.add_number("floor height", fh, step=0.01)
            self.update_floor_grid(bool(g["floor"].value), fh)
            g["pin"] = gui.add_checkbox("pin region", getattr(cfg, "pin", None) is not None)
        app.bodies.build(gui)
        can_switch = app.switcher.available
        if "scene_facts" not in g:
            self._build_scene_folder(cfg, facts_markdown(scene_facts(anim)))
        else:  # built when the first preparation failed (build_recovery)
            self.show_scene_facts(anim)
            self.set_note("")
            g["pick"].disabled = g["add_pick"].disabled = not can_switch
            app.selection.on_live(live)
        with gui.add_folder("Skinning"):
            names = skinning_names(aliases=False)
            scene = app.source_scene if app.source_scene is not None else getattr(anim, "scene", None)
            if getattr(scene, "mesh", None) is None:  # tet meshes the input's own surface: a mesh input only
                names = tuple(n for n in names if n != "tet")
            src = resolve_skinning(getattr(cfg, "skinning", None))
            g["skinning"] = gui.add_dropdown(
                "source", names, initial_value=src if src in names else names[0], disabled=not can_switch,
            )
            g["field"] = gui.add_dropdown("show field", self.field_options(), initial_value=FIELD_NONE)
        with gui.add_folder("Display"):
            modes = [DISPLAY_CLIENT, DISPLAY_TORCH] + ([DISPLAY_GSPLAT] if cuda_available() else [])
            g["display"] = gui.add_dropdown("mode", modes, initial_value=app.display_mode)
            g["handles"] = gui.add_checkbox("show handles", True)
            g["xray"] = gui.add_checkbox("x-ray (see handles inside)", False)
            g["dim_static"] = gui.add_checkbox(
                "dim static", False, hint="grey the Gaussians that do not move (support, background, floaters)"
            )
            g["view_colour"] = gui.add_checkbox(
                # unticked and greyed out for scenes without SH bands (ticked and greyed read as "on")
                "view-dependent colour", bool(app.display.view_colour and live.sh_degree > 0),
                disabled=live.sh_degree == 0,
                hint="evaluate the scene's spherical harmonics for your camera, as render and the exported frames do "
                     "(off: the degree-0 colour); disabled for scenes without SH bands")
            g["click"] = gui.add_checkbox("click to grab", True)
        with gui.add_folder("Record"):
            g["record_dir"] = gui.add_text("folder", str(app.recording.record_dir))
            fmt = getattr(app, "export_format", "ply")
            g["record_format"] = gui.add_dropdown(
                "format", list(EXPORT_FORMATS), initial_value=fmt if fmt in EXPORT_FORMATS else "ply",
                hint="ply: frame0001.ply ...; compressed-ply: frame0001.compressed.ply ... (about 1/4 of the size); "
                     "usd: one animation.usdc with time samples (needs usd-core)",
            )
            g["record_every"] = gui.add_number(
                "steps per frame", int(getattr(app, "steps_per_frame", 1) or 1), min=1, max=STEPS_PER_FRAME_MAX,
                step=1, hint="write one frame every N simulated steps (1: every step; the headless run's "
                             "--steps-per-frame): larger N, smaller recordings and a faster view while recording")
            g["record_mp4"] = gui.add_checkbox("also mp4", False)
            g["record"] = gui.add_button("Start recording", color="red")
            g["record_status"] = gui.add_markdown("")

        self._wire()
        app.bodies.on_live(live)
        app.server.scene.on_click()(app.interaction.on_click)

    def _build_scene_folder(self, cfg, facts_text: str) -> None:
        """The "Scene" folder: facts, a note line, the up-axis dropdown and the selection widgets."""
        app = self.app
        gui = app.server.gui
        g = self.gui
        can_switch = app.switcher.available
        with gui.add_folder("Scene"):
            g["scene_facts"] = gui.add_markdown(facts_text)
            g["scene_note"] = gui.add_markdown("", visible=False)
            g["up"] = gui.add_dropdown(
                "up axis", UP_CHOICES, initial_value=up_choice(getattr(cfg, "up", "auto")), disabled=not can_switch,
                hint="auto: the support plane's normal (else the axis it stands on, or the format's convention); "
                     "re-prepares",
            )
            app.selection.build(gui, cfg)
            if not can_switch:
                for k in ("select", "box_min", "box_max", "pick", "add_pick", "clear_boxes", "apply_select"):
                    g[k].disabled = True

        @g["up"].on_update
        def _(_e) -> None:
            app.switcher.set_up(g["up"].value)

    def build_recovery(self) -> None:
        """The first preparation failed: offer the "Scene" folder alone, so that another selection or up axis can
        be tried without restarting (the other folders follow once a scene is live)."""
        app = self.app
        if "scene_facts" in self.gui or not app.switcher.available or app.server is None:
            return
        self._build_scene_folder(app.config, "**No animation yet**: the preparation failed (see above). Choose "
                                             "another selection or up axis and press apply selection.")
        self.gui["pick"].disabled = True  # nothing is drawn to click on yet

    def field_options(self) -> List[str]:
        """Dropdown entries: scene colours, argmax over handles, one entry per draggable handle."""
        live = self.app.live
        h = len(live.handle_gizmos) if live is not None else 0
        return [FIELD_NONE, FIELD_ALL] + [f"handle {i}" for i in range(h)]

    def pick_region(self, client, origin, direction) -> Optional[str]:
        """The click handler armed by "pick region": the region text becomes ``sphere:x,y,z,r`` around the clicked
        point of the object (rest position, r = the "pick radius" times the object's extent). Returns the spec, or
        None when the ray hits nothing."""
        from .splats import pick_on_ray

        live = self.app.live
        if live is None:
            return None
        frame = live.worker.slot.get()
        pts = frame.means
        if live.moving is not None and not live.moving.all():
            rows = np.nonzero(live.moving)[0]
            pts = pts[rows]
        else:
            rows = None
        pick = pick_on_ray(pts, origin, direction, live.extent)
        if pick is None:
            self.set_note("the click hit nothing; press pick region again")
            return None
        row = int(pick.index) if rows is None else int(rows[pick.index])
        c = to_numpy(live.anim.scene.means)[row]  # the rest position: regions are defined at rest
        rad = float(self.gui["region_radius"].value) * float(live.extent)
        spec = "sphere:" + ",".join(f"{v:.4g}" for v in (*c, rad))
        self.gui["region_spec"].value = spec
        self.set_note(f"region set to {spec}; press Add region")
        return spec

    def refresh_regions(self, anim) -> None:
        """Enable the region controls when ``anim`` supports regions and show its regions."""
        can = callable(getattr(anim, "set_regions", None))
        for key in ("region_spec", "region_material", "region_pick", "region_radius", "region_add", "region_clear"):
            self.gui[key].disabled = not can
        self.gui["regions"].content = regions_markdown(getattr(anim, "regions", []), can)

    def refresh(self, anim) -> None:
        """A new AnimatedScene is live: refresh what depends on it (field entries, dt, floor, scene facts)."""
        app = self.app
        g = self.gui
        g["field"].options = self.field_options()
        g["view_colour"].disabled = app.live.sh_degree == 0
        self.refresh_regions(anim)
        g["dt"].value = float(getattr(anim, "dt", g["dt"].value))
        stand = (getattr(anim, "info", None) or {}).get("stand")
        choice = str(g["material"].value) if "material" in g else None
        if stand and choice in self.preset_base:  # raised again for the new object or up: the preset follows
            E_to = float(stand["E_to"])
            self.presets[choice] = (E_to,) + tuple(self.presets[choice][1:])
            g["E"].value = f"{E_to:.8g}"
        fh = default_floor_height(anim, app.config, app.live.up)
        g["floor_height"].value = fh  # fires the floor callback: the new worker gets the same height
        self.update_floor_grid(bool(g["floor"].value), float(g["floor_height"].value))
        self.show_scene_facts(anim)
        if app.switcher.available:  # the up that runs, or one chosen meanwhile and still to come (setting the
            # running one queued it again over the later choice: "-z" then "+x" ran "-z" twice)
            g["up"].value = up_choice(app.switcher.effective("up", "auto"))
        if g["gravity_dir"].value != GRAVITY_DIRS[0] or not g["gravity"].value:
            self._apply_gravity()
        app.selection.on_live(app.live)
        app.bodies.on_live(app.live)

    def show_running(self, config) -> None:
        """Set the skinning-source and up-axis dropdowns to ``config``'s (what runs), after a refused choice (the
        dropdown kept naming a source that had failed to prepare). Their callbacks see no change to make."""
        g = self.gui
        sw = self.app.switcher  # (a choice made meanwhile and still to come wins over the running one)
        if "skinning" in g:
            src = resolve_skinning(sw.effective("skinning", getattr(config, "skinning", None)))
            if src in g["skinning"].options:
                g["skinning"].value = src
        if "up" in g and sw.available:
            g["up"].value = up_choice(sw.effective("up", getattr(config, "up", "auto")))

    def show_scene_facts(self, anim) -> Dict[str, Any]:
        """Show the scene facts of ``anim`` in the "Scene" folder; returns them (:func:`scene_facts`)."""
        facts = scene_facts(anim)
        md = self.gui.get("scene_facts")
        if md is not None:
            md.content = facts_markdown(facts)
        return facts

    def sync_play_label(self) -> None:
        """Label the play button after the worker's state ("Pause" while playing, else "Play")."""
        btn = self.gui.get("play")
        live = self.app.live
        if btn is not None and live is not None:
            btn.label = "Pause" if live.worker.playing else "Play"

    def config_settings(self, config, keep_floor_height: bool) -> Dict[str, Any]:
        """The panel's simulation settings as ``AnimationConfig`` fields (only those ``config`` has), so that a
        re-preparation keeps them. The floor height only with ``keep_floor_height`` (same object and up axis)."""
        g = self.gui
        if "play" not in g:
            return {}
        out: Dict[str, Any] = {
            "E": self.young_modulus(), "nu": float(g["nu"].value), "density": float(g["density"].value),
            "damping": float(g["damping"].value), "dt": float(g["dt"].value), "floor": bool(g["floor"].value),
            "gravity": self.gravity_magnitude(),
            "pin": (getattr(config, "pin", None) or DEFAULT_PIN) if g["pin"].value else None,
        }
        # the material: "NAME, raised to stand" is prepared again from NAME's own E and raised for the new object
        # or up (it was raised again from the raised E: 240000 -> 2.7e6 Pa after an up switch); a material picked
        # or typed in the panel is the user's choice, kept as it is (not raised), as `animate --material` does
        choice = str(g["material"].value) if "material" in g else None
        if choice in self.preset_base:
            from physskin_gs.materials import MATERIALS

            out["E"] = float(MATERIALS[self.preset_base[choice]].E)
        elif choice is not None and self.material_chosen and getattr(config, "stand_sag", None) is not None:
            out["stand_sag"] = None
            out["material"] = None if choice == "custom" else choice
        if keep_floor_height:
            out["floor_height"] = float(g["floor_height"].value)
            # the regions added in the Material folder (the same object: its region specs still hold)
            anim = self.app.live.anim if self.app.live is not None else None
            if anim is not None and callable(getattr(anim, "set_regions", None)):
                out["regions"] = tuple((r["spec"], r["material"]) for r in anim.regions)
        names = {f.name for f in dataclasses.fields(config)}
        return {k: v for k, v in out.items() if k in names}

    def gravity_magnitude(self) -> float:
        """The config's gravity (m/s², 9.8 when unset) with the "gravity" checkbox on, else 0.0."""
        on = bool(self.gui["gravity"].value)
        return float(getattr(self.app.config, "gravity", 9.8) or 9.8) if on else 0.0

    def gravity_direction(self) -> np.ndarray:
        """Unit gravity direction chosen in the GUI (world axes), (3,) float64."""
        choice = self.gui["gravity_dir"].value
        if choice == GRAVITY_DIRS[0]:
            return -self.app.live.up
        axis = "xyz".index(choice[1])
        d = np.zeros(3)
        d[axis] = 1.0 if choice[0] == "+" else -1.0
        return d

    def update_floor_grid(self, enabled: bool, height: float) -> None:
        """Draw the floor (a grid perpendicular to the up vector at ``height`` along it) or hide it."""
        live = self.app.live
        server = self.app.server
        if live is None or server is None or self.app._stop.is_set():
            return
        from .camera import rotmat_to_wxyz

        up = live.up
        a = np.cross(up, [1.0, 0.0, 0.0]) if abs(up[0]) < 0.9 else np.cross(up, [0.0, 1.0, 0.0])
        a /= np.linalg.norm(a)
        b = np.cross(up, a)
        R = np.stack([a, b, up], axis=1)  # grid's local x, y, z (normal) -> world
        pos = live.center - (float(live.center @ up) - float(height)) * up
        e = live.extent
        server.scene.add_grid(
            "/floor",
            width=3 * e,
            height=3 * e,
            plane="xy",
            cell_size=e / 10,
            section_size=e / 2,
            # no shadows on the floor: only the handle gizmos cast any (splats do not), as grey blobs away from
            # the object (a fresh user's report)
            shadow_opacity=0.0,
            wxyz=tuple(rotmat_to_wxyz(R)),
            position=tuple(float(v) for v in pos),
            visible=bool(enabled),
        )

    # ================================================================== callbacks
    def note_slump(self, anim, mat) -> None:
        """On the simulation thread, after a material was picked: a note under the dropdown when the object's own
        weight will bend it more than a tenth of its height in ``mat`` (as ``animate --material`` says; a jelly
        cow collapsed in the viewer without a word), naming stiffer materials. Raises nothing."""
        from physskin_gs.materials import stiffer_materials
        from physskin_gs.pipeline import SLUMP_NOTE, standing_sag

        md = self.gui.get("material_note")
        try:
            if md is None or not float(getattr(self.app.config, "gravity", 9.8) or 0.0) > 0 or getattr(
                    anim, "regions", None):
                return
            sag = max(standing_sag(b) for b in (getattr(anim, "bodies", None) or [anim]))
        except Exception:  # noqa: BLE001 - advice only (a stand-in scene has no simulator)
            return
        if sag > SLUMP_NOTE:
            names = stiffer_materials(mat.E, mat.density)
            md.content = (f"In {mat.name} its own weight bends it about {sag:.0%} of its height (a linear estimate, "
                          f"base held), so it will slump"
                          + (f"; for something that stands pick {', '.join(names)}" if names else "") + ".")
            md.visible = True

    def young_modulus(self) -> float:
        """The E field's value in Pa (:func:`young_modulus_of`), or the last one applied when it does not read."""
        x = young_modulus_of(self.gui["E"].value)
        return x if math.isfinite(x) else float(self.applied.get("E", 1e5))

    def field_note(self, name: str, message: str) -> None:
        """Say what became of a typed value: under the material dropdown for the material's fields, else under the
        scene facts; an empty message hides it."""
        if name in ("E", "nu", "density", "damping") and "material_note" in self.gui:
            md = self.gui["material_note"]
            if message or md.content.startswith(tuple(f"{n} " for n in ("E", "nu", "density", "damping"))):
                md.content = message
                md.visible = bool(message)
        elif message:
            self.set_note(message)
        else:  # a good value now: a note on this field's earlier value goes ("dt 1000000000.0: ..." stayed up)
            md = self.gui.get("scene_note")
            if md is not None and md.content.startswith(f"{name} "):
                self.set_note("")

    def _material_is_custom(self) -> None:
        """The material dropdown shows "custom" when E, nu and density are no longer its preset's values."""
        from physskin_gs.materials import MATERIALS

        g = self.gui
        name = str(g["material"].value)
        mat = MATERIALS.get(name)
        values = (mat.E, min(mat.nu, 0.49), mat.density) if mat is not None else self.presets.get(name)
        now = (self.young_modulus(), float(g["nu"].value), float(g["density"].value))
        if values is not None and any(abs(a - b) > 1e-9 * max(1.0, abs(b)) for a, b in zip(now, values)):
            g["material"].value = "custom"

    def _submit(self, name: str, fn) -> None:
        live = self.app.live
        if live is not None:
            live.worker.submit(name, fn)

    def _apply_gravity(self, _e=None) -> None:
        mag = self.gravity_magnitude()
        d = self.gravity_direction()
        self._submit("set gravity", lambda a: a.set_gravity(mag, direction=d))

    def _wire(self) -> None:
        app = self.app
        g = self.gui

        @g["play"].on_click
        def _(_e) -> None:
            live = app.live
            if live is None:
                return
            live.worker.set_playing(not live.worker.playing)
            g["error"].visible = False
            self.sync_play_label()

        @g["step"].on_click
        def _(_e) -> None:
            live = app.live
            if live is not None:
                live.worker.set_playing(False)
                live.worker.step_once()
                self.sync_play_label()

        @g["reset"].on_click
        def _(_e) -> None:
            if app.live is not None:
                app.live.worker.reset()
                g["error"].visible = False

        def set_dt(a, v):
            a.dt = float(v)

        setters = {
            "dt": set_dt,
            "E": lambda a, v: a.set_material(E=float(v)),
            "nu": lambda a, v: a.set_material(nu=float(v)),
            "density": lambda a, v: a.set_material(density=float(v)),
            "damping": lambda a, v: a.set_damping(float(v)),
        }
        for name, fn in setters.items():
            def make(name=name, fn=fn):
                def cb(event) -> None:
                    raw = g[name].value
                    # a typed value outside the field's range is brought into it first (the field showed the
                    # bound while the typed value ran: dt 0.5 at 4 steps/s, E -5 Pa paused with a traceback)
                    if name == "E":
                        v = young_modulus_of(raw)
                        lo, hi = E_RANGE
                    else:
                        v, lo, hi = raw, getattr(g[name], "min", None), getattr(g[name], "max", None)
                    fixed = field_value(v, lo, hi, self.applied.get(name))
                    if not (fixed == v):  # (NaN: an unreadable entry)
                        self.field_note(name, f"{name} {raw}: {_outside(v, lo, hi)}; set to {fixed:g}")
                        g[name].value = f"{fixed:.8g}" if name == "E" else fixed  # (its callback applies it)
                    else:
                        self.applied[name] = float(v)
                        if getattr(event, "client", None) is not None:  # a good value typed: an old note goes
                            self.field_note(name, "")
                        self._submit(f"set {name}", lambda a: fn(a, float(v)))
                    if name in ("E", "nu", "density") and getattr(event, "client", None) is not None:
                        self.material_chosen = True
                        self._material_is_custom()  # typed by the user: the preset no longer holds

                return cb

            self.applied[name] = young_modulus_of(g[name].value) if name == "E" else float(g[name].value)
            g[name].on_update(make())

        def apply_fast(_e=None) -> None:
            on = bool(g["fast"].value)
            self._submit("set solver", lambda a: set_fast_solver(a, on))

        def set_regions(regions) -> None:
            def fn(a) -> None:
                try:
                    a.set_regions(regions)  # at once, on the running simulation (OptionError: nothing changes)
                except OptionError as exc:  # a typo in the region field: said under it, the simulation goes on
                    # (it paused with "Error in set regions" and a traceback in the terminal, and named --region)
                    g["regions"].content = (f"**region not added:** {str(exc).replace('--region ', 'region ')}  \n"
                                            + regions_markdown(getattr(a, "regions", [])))
                    return
                g["regions"].content = regions_markdown(a.regions)
                # the default basis (modes) is built for the body's materials, as `animate --region` builds it:
                # re-prepared in the background with the regions (the running simulation goes on until it is ready)
                if basis_follows_materials(a) and app.switcher.available:
                    app.switcher.request("the skinning basis for the parts' materials",
                                         regions=tuple((r["spec"], r["material"]) for r in a.regions))

            self._submit("set regions", fn)

        @g["region_add"].on_click
        def _(_e) -> None:
            live = app.live
            if live is None:
                return
            have = [(r["spec"], r["material"]) for r in getattr(live.anim, "regions", [])]
            set_regions(have + [(str(g["region_spec"].value).strip(), str(g["region_material"].value))])

        @g["region_clear"].on_click
        def _(_e) -> None:
            set_regions([])

        @g["region_pick"].on_click
        def _(_e) -> None:
            app.interaction.arm_pick(self.pick_region)
            self.set_note("click the object: the region will be a sphere around the point you click")

        @g["material"].on_update
        def _(event) -> None:  # the three fields follow the preset; their own callbacks update the simulation
            from physskin_gs.materials import MATERIALS

            name = str(g["material"].value)
            mat = MATERIALS.get(name)
            if mat is not None:
                g["E"].value, g["nu"].value, g["density"].value = f"{mat.E:.8g}", min(mat.nu, 0.49), mat.density
            elif name in self.presets:
                E, nu, density = self.presets[name]
                g["E"].value, g["nu"].value, g["density"].value = f"{E:.8g}", nu, density
            if getattr(event, "client", None) is not None:  # picked by the user: an earlier note goes
                g["material_note"].content, g["material_note"].visible = "", False
                self.material_chosen = True
                if mat is not None:
                    self._submit("material note", lambda a: self.note_slump(a, mat))

        g["fast"].on_update(apply_fast)
        g["gravity"].on_update(self._apply_gravity)
        g["gravity_dir"].on_update(self._apply_gravity)

        def apply_floor(_e=None) -> None:
            raw = g["floor_height"].value
            live_ = app.live
            lo, hi = floor_range(live_.anim if live_ is not None else None,
                                 default_floor_height(live_.anim, app.config, live_.up) if live_ is not None else None)
            h = field_value(raw, lo, hi, self.applied.get("floor_height"))
            if not (h == raw):  # typed outside the range (1e9 ran at 7 steps/s, NaN gave energy nan): brought in
                self.field_note("floor height", f"floor height {raw}: {_outside(raw, lo, hi)}; set to {h:.4g}")
                g["floor_height"].value = float(h)  # (its callback applies it)
                return
            self.applied["floor_height"] = float(h)
            on = bool(g["floor"].value)
            self._submit("set floor", lambda a: a.set_floor(on, height=float(h)))
            self.update_floor_grid(on, float(h))

        g["floor"].on_update(apply_floor)
        g["floor_height"].on_update(apply_floor)

        @g["pin"].on_update
        def _(_e) -> None:
            spec = getattr(app.config, "pin", None) or DEFAULT_PIN
            value = spec if g["pin"].value else None

            def fn(a) -> None:
                a.set_pin(value)
                app.bodies.show(a)  # several bodies: the per-body boxes and table follow

            self._submit("set pin", fn)

        @g["field"].on_update
        def _(_e) -> None:
            app.display.apply_field(g["field"].value)

        @g["skinning"].on_update
        def _(_e) -> None:
            app.switcher.switch_skinning(g["skinning"].value)

        @g["display"].on_update
        def _(_e) -> None:
            try:
                app.set_display_mode(g["display"].value)
            except Exception as exc:  # noqa: BLE001
                app.report_error("display mode", exc, traceback.format_exc())

        @g["handles"].on_update
        def _(_e) -> None:
            app.interaction.set_show_handles(bool(g["handles"].value))

        @g["xray"].on_update
        def _(_e) -> None:
            app.display.set_xray(bool(g["xray"].value))

        @g["dim_static"].on_update
        def _(_e) -> None:
            app.display.set_dim_static(bool(g["dim_static"].value))

        @g["view_colour"].on_update
        def _(_e) -> None:
            app.display.set_view_colour(bool(g["view_colour"].value))

        @g["click"].on_update
        def _(_e) -> None:
            app.interaction.click_enabled = bool(g["click"].value)

        @g["record_every"].on_update
        def _(_e) -> None:
            raw = g["record_every"].value  # shown as typed (0, -3, 1e9) while the recorder used 1 or 1000
            fixed = app.recording.steps_per_frame()
            if fixed != raw:
                g["record_status"].content = f"steps per frame {raw}: a whole number in 1..{STEPS_PER_FRAME_MAX}; " \
                                             f"set to {fixed}"
                g["record_every"].value = fixed

        @g["record"].on_click
        def _(event) -> None:
            try:
                if app.recording.recorder is None:
                    app.recording.start(client=event.client, mp4=bool(g["record_mp4"].value))
                else:
                    threading.Thread(target=app.recording.stop, daemon=True).start()
            except OptionError as exc:  # a user's mistake (the folder): said in the page, no traceback
                app.report_error("recording", exc)
                g["record_status"].content = f"**not recording:** {exc}"
            except Exception as exc:  # noqa: BLE001
                app.report_error("recording", exc, traceback.format_exc())


#: the E the panel takes, in Pa: below 100 Pa (animate's "extremely soft") a body collapses into non-finite
#: values (a fresh user's 2e9 typed into a number field became 29 Pa)
E_RANGE = (100.0, 1e12)


def young_modulus_of(text) -> float:
    """``text`` as a Young's modulus in Pa (:func:`physskin_gs.materials.parse_pressure`), NaN when it does not
    read. Raises nothing."""
    from physskin_gs.materials import parse_pressure

    try:
        return float(parse_pressure(text))
    except (TypeError, ValueError):
        return float("nan")


def _outside(v, lo, hi) -> str:
    """What is wrong with a typed value ``v`` for the range [lo, hi] (None: unbounded): "outside 100..1e+12", or
    "not a number" (1e30 was "not a number in 100..1e+12")."""
    span = f"{lo if lo is not None else '-inf':g}..{hi if hi is not None else 'inf':g}"
    try:
        x = float(v)
    except (TypeError, ValueError):
        x = float("nan")
    return f"outside {span}" if math.isfinite(x) else f"not a number (the range is {span})"


#: the floor-height field's range, in object heights below / above the moving rows' lowest point: far enough
#: below to drop the object a long way, and no higher than animate's --floor takes (FLOOR_INSIDE)
FLOOR_BELOW_HEIGHTS = 10.0


def floor_range(anim, default=None):
    """(lo, hi) scene units along up for the floor-height field: from :data:`FLOOR_BELOW_HEIGHTS` object heights
    under the moving rows' lowest point to :data:`physskin_gs.cli.animate.FLOOR_INSIDE` of a height above it (a
    floor above the object catapulted it once lowered again), widened to hold ``default`` (the floor the scene
    starts with: a support plane can lie a little above the lowest row); (None, None) without an object's extent."""
    from physskin_gs.cli.animate import FLOOR_INSIDE

    low, height = getattr(anim, "lowest_scene", None), getattr(anim, "height_scene", None)
    if low is None or height is None or not (math.isfinite(float(low)) and float(height) > 0):
        return None, None
    lo, hi = float(low) - FLOOR_BELOW_HEIGHTS * float(height), float(low) + FLOOR_INSIDE * float(height)
    if default is not None and math.isfinite(float(default)):
        lo, hi = min(lo, float(default)), max(hi, float(default))
    return lo, hi


def field_value(v, lo, hi, last=None) -> float:
    """A number field's value brought into its range ``[lo, hi]`` (None: unbounded on that side); a non-finite or
    unreadable value becomes ``last`` (the value applied before), or ``lo``. Raises nothing."""
    try:
        x = float(v)
    except (TypeError, ValueError):
        x = float("nan")
    if not math.isfinite(x):
        return float(last) if last is not None else (float(lo) if lo is not None else 0.0)
    if lo is not None and x < lo:
        return float(lo)
    if hi is not None and x > hi:
        return float(hi)
    return v


def basis_follows_materials(anim) -> bool:
    """The live skinning basis depends on the parts' materials (the elastic ``modes``, built for the body with its
    regions' materials: ``AnimationConfig.regions``), so a change of regions re-prepares it."""
    return str(getattr(anim, "skinning_source", "") or "").startswith("modes")


def regions_markdown(regions, available: bool = True) -> str:
    """One line per region of ``AnimatedScene.regions`` (spec, material, cubature points), or a hint when none, or
    (``available`` False: several bodies) why the region controls are off."""
    if not available:
        return "regions act on one object: with several bodies moving, each has the material above"
    if not regions:
        return "one material (add a region to make a part stiffer or softer)"
    return "  \n".join(f"**{r['spec']}**: {r['material']} (E {r['E']:.3g} Pa, {r['density']:g} kg/m³, "
                       f"{r['cubature_points']} cubature points)" for r in regions)
