"""The display side: splat nodes, the display thread, colours (field view, x-ray, dim static) and the stats line.

:class:`DisplayLoop` runs one thread that takes the newest published simulation frame (older ones are dropped),
deforms the moving Gaussians for it, packs them into viser's 32-byte splat records
(:class:`~physskin_gs_viewer.splats.SplatPacker`) and updates the client-side moving splats with one buffer
assignment (client-splat mode); it also moves the handle gizmos nobody drags and refreshes the stats line.

Two splat nodes per AnimatedScene: ``/scene/moving`` (the live rows, updated every frame) and ``/scene/static``
(the rows that do not move, built from the rest scene and sent once; "dim static" rewrites only their colour
words, once per toggle). viser's client merges every splat node into one buffer and sorts all of them together
by depth (one global sort, per-node transforms), so the two nodes composite correctly. While the first
preparation runs, a third node ``/scene/preview`` shows the whole rest scene (:meth:`DisplayLoop.show_preview`);
it is removed once the live nodes are in place.

View-dependent colour (Display folder, on by default for scenes with SH bands above degree 0): the browser draws one
RGBA per splat, so the SH are evaluated here for the camera of the tab that moved last
(:func:`physskin_gs.render.view_colour.view_rgb`, the colour ``render`` gives): the live rows every update (with
their deformation gradients from the same deformer pass, so a rotated part keeps its highlights), the static rows
when that camera has turned by more than :data:`STATIC_VIEW_ANGLE` degrees and then rests for
:data:`STATIC_VIEW_SETTLE` s (while it keeps turning, at most every :data:`STATIC_VIEW_INTERVAL` s). With several
tabs looking from different sides, the others see the colours of the last one to move.

Bytes the viewer holds per Gaussian (besides the scene and the AnimatedScene; counted by
``scripts/bench_viewer.py --million``): a static row 64 in viser (its 32-byte record twice: in the add message
kept to replay to new tabs, and in the handle's props) + 8 for its row index; a moving row 96 in viser (add
message, props, the last update kept for new tabs) + 156 of ours (packer record and scratch 68, the display
deformer's output 48, row indices, colours); every row 17 (colour, opacity, mask). The process's resident memory
grows by about 190 B per static and 600 B per moving Gaussian in all (scene and AnimatedScene included), and the
viewer's share at 800k static + 200k moving is about 190 MiB while it plays (websocket and packing buffers on top
of the arrays above).

The app surface used: ``live``, ``server``, ``gui``, ``display_mode``, ``_push_splats(live, frame)`` (the
per-frame upload, looked up on the app so that tests can slow it down), ``interaction.sync_handle_gizmos``,
``renderer_status()``, ``recording``, ``report_error``, and the stop event given to the constructor.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections import deque
from typing import Deque, Optional, Tuple

import numpy as np
import torch

from .bodies_panel import body_times_line
from .constants import DIM_GREY, DIM_MIX, DIM_OPACITY, DISPLAY_CLIENT, FIELD_ALL, FIELD_NONE, XRAY_OPACITY
from .sim import Frame, set_thread_torch_threads, to_numpy, viser_wakeup_race
from .splats import (
    display_scale,
    rest_wire,
    rgba_u32,
    robust_extent,
    sh_dc_to_rgb,
    subsample_index,
    to_wire,
    unit_bytes,
    weight_colors,
)

#: Most static Gaussians sent to the browser, as a multiple of ``max_live`` (at least a million).
STATIC_FACTOR = 5
#: The static rows' view-dependent colours are remade when the camera has turned by more than this (degrees)
#: about the object's centre ...
STATIC_VIEW_ANGLE = 3.0
#: ... or moved toward / away from it by more than this fraction of its distance, ...
STATIC_VIEW_DISTANCE = 0.05
#: ... once the camera has rested this long (s) ...
STATIC_VIEW_SETTLE = 0.25
#: ... or, while it keeps moving, at most once per this many seconds (each remake resends the static node: 32
#: bytes per static row).
STATIC_VIEW_INTERVAL = 1.0


def dim_colors(rgb: np.ndarray, opac: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """The "dim static" look of (M, 3) colours and (M,) opacities: blended toward grey, at reduced opacity."""
    rgb = (1.0 - DIM_MIX) * np.asarray(rgb, np.float32) + DIM_MIX * DIM_GREY
    return rgb.astype(np.float32), np.asarray(opac, np.float32) * DIM_OPACITY


class DisplayLoop:
    """Splat nodes, the display thread and everything that decides the colours shown.

    Args:
        app: the :class:`~physskin_gs_viewer.app.ViewerApp` (see the module docstring for what is used).
        stop: event that ends the thread.
        threads: torch intra-op threads of the display thread (deformation + packing).
        max_live: the app's cap on live rows (sets the cap on static rows sent, :data:`STATIC_FACTOR`).

    Attributes:
        updates: display updates done (frames handled).
        field_choice: the "show field" entry (:data:`FIELD_NONE`, :data:`FIELD_ALL` or ``"handle i"``).
        xray: moving splats at :data:`XRAY_OPACITY` of their opacity.
        dim_static: static splats greyed and at :data:`DIM_OPACITY` of their opacity.
    """

    def __init__(self, app, stop: threading.Event, threads: int, max_live: int) -> None:
        self.app = app
        self._stop = stop
        self.threads = int(threads)
        self.max_live = int(max_live)
        self.updates = 0
        self.wakeup_races = 0  # viser wake-up races met and passed over (viser_wakeup_race)
        self._times: Deque[float] = deque(maxlen=30)  # times of the last 30 updates (fps)
        self.field_choice = FIELD_NONE
        self.xray = False
        self.dim_static = False
        self.view_colour = True
        self.camera_position: Optional[np.ndarray] = None  # (3,) float64 scene units: the camera colours follow
        self._static_view: Optional[Tuple[np.ndarray, float]] = None  # (camera position, time) of the static colours
        self._camera_moved = 0.0  # time.monotonic() of the last camera change
        self._colors_cache = None
        self._thread: Optional[threading.Thread] = None
        self.preview_node = None  # /scene/preview while the first preparation runs (show_preview)
        self._preview_lock = threading.Lock()

    # ------------------------------------------------------------------ thread
    def start(self) -> None:
        """Start the display thread (it runs until the stop event is set)."""
        self._thread = threading.Thread(target=self._run, name="physskin-display", daemon=True)
        self._thread.start()

    def join(self, timeout: float = 5.0) -> None:
        """Wait up to ``timeout`` s for the display thread to end (no-op when it never started)."""
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        app = self.app
        set_thread_torch_threads(self.threads)  # OpenMP thread counts are per thread
        version = 0
        shown = None  # the LiveState whose frames ``version`` counts
        paused_shown = False  # the stats line says "paused" (set once per pause)
        last_handles = 0.0
        last_stats = 0.0
        while not self._stop.is_set():
            live = app.live
            if live is None:
                self._stop.wait(0.05)
                continue
            if live is not shown:  # a re-prepared scene's worker counts its frames from 1 again (the display
                shown, version = live, 0  # waited for it to pass the old scene's count: the view froze)
            frame = live.worker.slot.wait_newer(version, 0.1)
            if frame is None and app.live is live and not live.worker.playing and not paused_shown:
                last = live.worker.slot.get()  # paused: the stats line says so (it kept the last running rates)
                if last is not None:
                    try:
                        self.update_stats(live, last, paused=True)
                        paused_shown = True
                    except Exception:  # noqa: BLE001 - a status line only
                        pass
            if frame is None or app.live is not live:
                continue
            paused_shown = False
            version = frame.version
            try:
                if app.display_mode == DISPLAY_CLIENT:
                    app._push_splats(live, frame)
                    self._follow_camera_static(live)
                now = time.monotonic()
                self.updates += 1
                self._times.append(now)
                if now - last_handles > 0.1:
                    last_handles = now
                    app.interaction.sync_handle_gizmos(live, frame)
                if now - last_stats > 0.25:
                    last_stats = now
                    self.update_stats(live, frame)
            except Exception as exc:  # noqa: BLE001 - shown in the page, the loop goes on
                if app.live is not live or live.retired:
                    continue  # the scene was re-prepared meanwhile: its nodes are gone, nothing was lost
                if viser_wakeup_race(exc):
                    self.wakeup_races += 1
                    continue
                app.report_error("display update", exc, traceback.format_exc())
                self._stop.wait(0.5)

    def fps(self) -> float:
        """Splat updates sent per second over the last 30 updates (0.0 with fewer than two)."""
        t = self._times
        if len(t) < 2 or t[-1] <= t[0]:
            return 0.0
        return (len(t) - 1) / (t[-1] - t[0])

    # ------------------------------------------------------------------ splat nodes
    @property
    def static_cap(self) -> int:
        """Most static rows sent to the browser: ``STATIC_FACTOR * max_live``, at least a million."""
        return max(self.max_live * STATIC_FACTOR, 1_000_000)

    def add_nodes(self, live, frame: Frame, visible: bool) -> None:
        """Create ``/scene/static`` (sent once) and ``/scene/moving`` for ``live``, then drop the preview.

        The static rows are drawn from the rest scene (``live.anim.scene``: they never move), so nothing
        deforms the whole scene here; the moving rows come from ``frame`` (deformed, the live subset).
        """
        server = self.app.server
        s = live.s
        if len(live.static_idx):
            st = live.static_idx
            ssub = subsample_index(len(st), self.static_cap, seed=1)
            if ssub is not None:
                st = st[ssub]
            live.static_shown = st
            rgb, op = self._static_rgb(live), live.opac[st]
            if self.dim_static:
                rgb, op = dim_colors(rgb, op)
            c, v = rest_wire(live.anim.scene, st, s)
            live.static_node = server.scene.add_gaussian_splats(
                "/scene/static", c, v, rgb, op[:, None], scale=1.0 / s, visible=visible
            )
            del c, v
        pos = live.live_pos_t

        def wire(means, covars):  # the live rows of the moving Gaussians, on the wire
            if pos is not None:
                means, covars = means[pos], covars[pos]
            return to_wire(to_numpy(means), to_numpy(covars), s)

        c, v = frame.with_moving(wire, live.moving_rows_t)
        live.moving_node = server.scene.add_gaussian_splats(
            "/scene/moving", c, v, live.live_rgb, live.opac[live.live_idx, None], scale=1.0 / s, visible=visible
        )
        self._repack_rgba(live)
        self.remove_preview()

    def show_preview(self, scene) -> Tuple[np.ndarray, float, np.ndarray]:
        """Draw the rest scene as one splat node, ``/scene/preview``, sent once (shown while the first
        preparation runs; :meth:`add_nodes` removes it once the live nodes are in place).

        At most :attr:`static_cap` + ``max_live`` rows are sent (a fixed random subset beyond that, as the live
        nodes would show).

        Args:
            scene: the GaussianScene at rest (N rows).
        Returns:
            (centre (3,) float64 median of the rows shown, robust extent in scene units, (R, 3) float32 rows
            shown) for framing the camera.
        """
        import torch

        n = int(scene.num_gaussians)
        rows = subsample_index(n, self.static_cap + self.max_live, seed=2)
        sel = None if rows is None else torch.from_numpy(rows)

        def pick(t):
            return t if sel is None else t[sel]

        means = to_numpy(pick(scene.means))
        extent = robust_extent(means)
        s = display_scale(extent)
        sh_dc = pick(scene.sh_dc)
        opac = to_numpy(torch.sigmoid(pick(scene.opacity_logits))).reshape(-1, 1)  # the rows shown only
        c, v = rest_wire(scene, rows, s)
        node = self.app.server.scene.add_gaussian_splats(
            "/scene/preview", c, v, sh_dc_to_rgb(to_numpy(sh_dc)), opac, scale=1.0 / s
        )
        del c, v
        with self._preview_lock:
            old, self.preview_node = self.preview_node, node
        if old is not None:
            _remove(old)
        finite = means[np.all(np.isfinite(means), axis=1)]
        center = np.median(finite, axis=0).astype(np.float64) if len(finite) else np.zeros(3)
        return center, extent, means

    def remove_preview(self) -> bool:
        """Remove ``/scene/preview`` (no-op without one); True when one was removed."""
        with self._preview_lock:
            node, self.preview_node = self.preview_node, None
        if node is None:
            return False
        _remove(node)
        return True

    def set_nodes_visible(self, live, on: bool) -> None:
        """Show (``on``) or hide the splat nodes of ``live`` (hidden in server-rendered mode)."""
        for node in (live.moving_node, live.static_node):
            if node is not None:
                node.visible = bool(on)

    def remove_nodes(self, live) -> None:
        """Remove the splat nodes of ``live`` and mark it retired (the display thread then skips it)."""
        live.retired = True  # the display thread may still hold this live: it skips it from now on
        for node in (live.moving_node, live.static_node):
            if node is not None:
                _remove(node)

    # ------------------------------------------------------------------ per frame
    def _repack_rgba(self, live) -> Tuple:
        op = live.opac[live.live_idx] * (XRAY_OPACITY if self.xray else 1.0)
        rgba = live.live_rgba = (live.live_rgb, rgba_u32(live.live_rgb, op), self.xray)
        live.packer.set_rgba(rgba[1])
        return rgba

    def push_splats(self, live, frame: Frame) -> None:
        """Send ``frame``'s live splats: deform (split frames), pack into viser's layout, update the node.

        With view-dependent colour on (:meth:`view_colour_on`, scene colours shown), the live rows' colours are
        evaluated for the current camera from the same deformation pass (:func:`~physskin_gs.render.view_colour.view_rgb`:
        SH at ``R_F^T d``, as ``render`` does), every update."""
        pos = live.live_pos_t
        if self.view_colour_on(live) and self.field_choice == FIELD_NONE:
            from physskin_gs.render.view_colour import view_rgba_words

            cam = self.camera_position
            sh_dc, sh_rest = live.sh_cpu
            key = (self.xray, len(live.live_idx))
            if live.view_alpha is None or live.view_alpha[0] != key:
                op = live.opac[live.live_idx] * (XRAY_OPACITY if self.xray else 1.0)
                live.view_alpha = (key, unit_bytes(op))
            alpha = live.view_alpha[1]

            def pack_view(means, covars, F):  # runs while the deformer's buffers are valid
                if pos is not None:
                    means, covars = means[pos], covars[pos]
                    F = None if F is None else F[pos]
                if means.device.type != "cpu":
                    means, covars = means.cpu(), covars.cpu()
                    F = None if F is None else F.cpu()
                view_rgba_words(means, sh_dc, sh_rest, cam, alpha, live.packer.rgba_view(), F, rows=live.live_idx_t)
                return live.packer.pack(means, covars, live.s)

            buf = frame.with_moving(pack_view, live.moving_rows_t, gradients=True)
            live.live_rgba = None  # the packer holds view colours: the scene colours are repacked when they return
        else:
            rgba = live.live_rgba
            if rgba is None or rgba[0] is not live.live_rgb or rgba[2] != self.xray:  # colours changed: repack once
                self._repack_rgba(live)

            def pack(means, covars):  # runs while the deformer's buffers are valid (see Frame.with_moving)
                if pos is not None:
                    means, covars = means[pos], covars[pos]
                return live.packer.pack(means, covars, live.s)

            buf = frame.with_moving(pack, live.moving_rows_t)
        if live.retired:
            return  # re-prepared while packing: the node is being removed
        live.moving_node.buffer = buf  # viser copies it: the packer may overwrite its buffer next frame

    def update_stats(self, live, frame: Frame, paused: bool = False) -> None:
        """Rewrite the panel's stats line (fps, steps/s, ms/step, Newton iterations, energy, contact counts with
        several bodies, renderers, recording) from ``frame``; ``paused``: the simulation is paused, said in place of
        the rates (they were the last running ones). No-op before the panel has one."""
        app = self.app
        md = app.gui.get("stats")
        if md is None:
            return
        st = frame.stats
        energy = st.get("energy")
        if isinstance(energy, dict):  # the pipeline reports components (J): every one the total holds (gravity,
            # from the rest pose, dominated a total shown with kinetic and elastic only)
            parts = [f"{k} {_fmt(v)}" for k, v in energy.items() if k != "total" and (k in ("kinetic", "elastic")
                                                                                    or abs(float(v or 0.0)) > 0.0)]
            e_txt = f"energy **{_fmt(energy.get('total'))}** J ({', '.join(parts)})"
        else:
            e_txt = f"energy **{_fmt(energy)}**"
        lines = [
            (f"**paused** · frame {frame.sim_frame}" if paused else
             f"display **{self.fps():.1f}** fps · sim **{st.get('steps_per_s', 0.0):.1f}** steps/s · "
             f"frame {frame.sim_frame}"),
            f"**{st.get('ms', 0.0):.0f}** ms/step · Newton **{st.get('newton_iters', '-')}** · {e_txt}",
        ]
        if "contacts_body" in st:  # several bodies / a collider (SceneBodies.step's statistics)
            lines.append(f"contacts: **{st.get('contacts_body', 0)}** between bodies · "
                         f"**{st.get('contacts_static', 0)}** with the scene · **{st.get('contacts_support', 0)}** "
                         f"on the support")
        per_body = body_times_line(st)
        if per_body:
            lines.append(per_body)
        render = app.renderer_status()
        if render:
            lines.append(render)
        rec = app.recording.recorder
        if rec is not None:
            lines.append(f"● recording: {rec.written} frames")
        md.content = "  \n".join(lines)

    # ------------------------------------------------------------------ colours
    def set_xray(self, on: bool) -> None:
        """Draw the object's splats at :data:`XRAY_OPACITY` of their opacity (client-side mode)."""
        self.xray = bool(on)
        live = self.app.live
        if live is not None:
            self.redraw(live)

    def set_dim_static(self, on: bool) -> None:
        """Grey the static rows and lower their opacity (:func:`dim_colors`), or show them as they are."""
        self.dim_static = bool(on)
        live = self.app.live
        if live is not None:
            self._apply_static_look(live)

    def view_colour_on(self, live) -> bool:
        """True when the browser gets view-dependent colour for ``live``: the toggle is on, the scene has SH bands
        above degree 0 and a camera is known."""
        return bool(self.view_colour and live.sh_degree > 0 and self.camera_position is not None)

    def set_view_colour(self, on: bool) -> None:
        """Evaluate the SH for the camera (``on``) or show the degree-0 colour; redraws both nodes."""
        self.view_colour = bool(on)
        live = self.app.live
        if live is not None:
            self._static_view = None
            self._apply_static_look(live)
            self.redraw(live)

    def set_camera(self, position) -> None:
        """The camera whose view the colours follow: (3,) scene units (the tab that moved its camera last)."""
        p = np.asarray(position, dtype=np.float64).reshape(3)
        if np.all(np.isfinite(p)):
            if self.camera_position is None or not np.array_equal(p, self.camera_position):
                self._camera_moved = time.monotonic()
            self.camera_position = p

    def _follow_camera_static(self, live) -> None:
        """Recolour the static node for the camera when it has turned by more than :data:`STATIC_VIEW_ANGLE` (or
        moved by more than :data:`STATIC_VIEW_DISTANCE` of its distance) about the object's centre since the static
        colours were made, once it has rested :data:`STATIC_VIEW_SETTLE` s or, while it keeps moving, at most every
        :data:`STATIC_VIEW_INTERVAL` s (one buffer update of the static rows)."""
        if live.static_node is None or not self.view_colour_on(live):
            return
        cam, last = self.camera_position, self._static_view
        now = time.monotonic()
        if last is not None:
            if now - self._camera_moved < STATIC_VIEW_SETTLE and now - last[1] < STATIC_VIEW_INTERVAL:
                return
            a, b = last[0] - live.center, cam - live.center
            na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
            cos = float(np.dot(a, b)) / max(na * nb, 1e-30)
            if cos > np.cos(np.radians(STATIC_VIEW_ANGLE)) and abs(na - nb) <= STATIC_VIEW_DISTANCE * max(na, 1e-30):
                return
        self._apply_static_look(live)

    def _static_view_inputs(self, live):
        """(rest means (S, 3), rows (S,)) torch of the static rows shown, made once per live scene."""
        if live.static_means_t is None:
            rows = torch.from_numpy(np.asarray(live.static_shown, dtype=np.int64))
            live.static_means_t = (live.anim.scene.means.detach().float().cpu()[rows].contiguous(), rows)
        return live.static_means_t

    def _static_rgb(self, live) -> np.ndarray:
        """(S, 3) colours of the static rows shown: view-dependent for the current camera when on, else the
        degree-0 colour."""
        st = live.static_shown
        if not self.view_colour_on(live):
            self._static_view = None
            return live.base_rgb[st]
        from physskin_gs.render.view_colour import view_rgb

        cam = self.camera_position.copy()
        means, rows = self._static_view_inputs(live)
        rgb = view_rgb(means, *live.sh_cpu, cam, None, rows=rows).numpy()
        self._static_view = (cam, time.monotonic())
        return rgb

    def _apply_static_look(self, live) -> None:
        """Rewrite the static node's colour words (dimmed or as the scene, view-dependent when on), one buffer
        update; positions and covariances are kept as first sent."""
        node, st = live.static_node, live.static_shown
        if node is None or st is None:
            return
        buf = node.buffer
        if self.view_colour_on(live) and not self.dim_static:  # the words straight from the kernel, in a copy
            from physskin_gs.render.view_colour import view_rgba_words

            cam = self.camera_position.copy()
            means, rows = self._static_view_inputs(live)
            if live.static_alpha is None:
                live.static_alpha = unit_bytes(live.opac[st])
            buf = np.array(buf, dtype=np.uint32, copy=True)
            view_rgba_words(means, *live.sh_cpu, cam, live.static_alpha, buf[:, 7:], None, rows=rows)
            self._static_view = (cam, time.monotonic())
            node.buffer = buf
            return
        rgb, op = self._static_rgb(live), live.opac[st]
        if self.dim_static:
            rgb, op = dim_colors(rgb, op)
        words = rgba_u32(rgb, op)
        if np.array_equal(buf[:, 7], words):
            return  # already that look (e.g. dimmed when it was first sent)
        buf = np.array(buf, dtype=np.uint32, copy=True)
        buf[:, 7] = words
        node.buffer = buf

    def apply_field(self, choice: str) -> None:
        """Colour the live splats by skinning weight (``choice``: see :attr:`field_choice`) or by the scene."""
        live = self.app.live
        self.field_choice = choice
        if live is None:
            return
        if choice == FIELD_NONE:
            live.live_rgb = live.base_rgb[live.live_idx]
            self.redraw(live)
            return

        def compute(anim, live=live, choice=choice) -> None:
            w = to_numpy(anim.skinning_weights())  # [M, H]: learned handles first, a constant column last
            h = len(live.handle_gizmos)
            if 0 < h < w.shape[1]:
                w = w[:, :h]
            if live.live_pos_in_moving is not None:
                w = w[live.live_pos_in_moving]
            if choice == FIELD_ALL:
                live.live_rgb = weight_colors(w, None)
            else:
                live.live_rgb = weight_colors(w, int(choice.split()[-1]))

        live.worker.submit("skinning field display", compute, publish=True)

    def redraw(self, live) -> None:
        """Have the worker publish the current state again (the display repacks with the new colours)."""
        live.worker.submit("redraw", lambda a: None, publish=True)

    def colors(self) -> Tuple[np.ndarray, np.ndarray]:
        """(N, 3) colours and (N,) opacities of every Gaussian as currently displayed (server-rendered mode and
        recordings; cached per change). Needs a live scene (``app.live`` not None)."""
        live = self.app.live
        key = (id(live), id(live.live_rgb), self.field_choice, self.dim_static)
        cached = self._colors_cache
        if cached is not None and cached[0] == key:
            return cached[1], cached[2]
        rgb, opac = live.base_rgb, live.opac
        if self.field_choice != FIELD_NONE or (self.dim_static and len(live.static_idx)):
            rgb = rgb.copy()
        if self.field_choice != FIELD_NONE:
            rgb[live.live_idx] = live.live_rgb
        if self.dim_static and len(live.static_idx):
            opac = opac.copy()
            st = live.static_idx
            rgb[st], opac[st] = dim_colors(rgb[st], opac[st])
        self._colors_cache = (key, rgb, opac)
        return rgb, opac


def _remove(node) -> None:
    """``node.remove()``, ignoring a node that is already gone."""
    try:
        node.remove()
    except Exception:  # noqa: BLE001
        pass


def _fmt(v) -> str:
    if v is None:
        return "-"
    try:
        return f"{float(v):.3g}"
    except (TypeError, ValueError):
        return str(v)
