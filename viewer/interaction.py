"""Picking and dragging: the handle gizmos, click-to-grab, and where a click in the scene goes.

:class:`Interaction` owns every transform-control gizmo that drives the simulation: one per skinning handle
(shared by all tabs) and at most one grab gizmo per tab (put where a click hits the object). Gizmo events are
turned into drag commands of the simulation worker (``begin_handle_drag`` / ``begin_point_drag`` /
``move_drag`` / ``end_drag``); the worker applies them between steps.

A click goes to a one-shot *pick handler* when one is armed (:meth:`arm_pick`, used by the selection's "pick a
connected component"), else to click-to-grab when that is enabled.

The app surface used: ``live``, ``server``, ``report_error(where, exc, tb)``.
"""

from __future__ import annotations

import threading
import traceback
from typing import Any, Callable, Dict, Optional

import numpy as np

from .sim import to_numpy
from .splats import PALETTE, pick_on_ray

#: Search radii (fractions of the object's extent) tried in turn when picking along a click ray.
PICK_RADII = (0.01, 0.03, 0.08)


class Interaction:
    """Handle gizmos, click-to-grab and click dispatch.

    Attributes:
        grabs: client id -> that tab's grab gizmo.
        click_enabled: clicks grab the object (the "click to grab" checkbox).
        show_handles: handle gizmos are visible (the "show handles" checkbox).
    """

    def __init__(self, app) -> None:
        self.app = app
        self.grabs: Dict[int, Any] = {}
        self.click_enabled = True
        self.show_handles = True
        self._pick: Optional[Callable[[Any, np.ndarray, np.ndarray], None]] = None
        self._pick_lock = threading.Lock()

    # ------------------------------------------------------------------ handle gizmos
    def add_handle_gizmos(self, live, handle_positions) -> None:
        """One translate-only gizmo per handle at ``handle_positions`` (H, 3), each with a coloured marker."""
        server = self.app.server
        live.handle_offset = 0  # handle i is skinning-weight column i (the constant column comes last)
        lim = ((-1e9, 1e9),) * 3
        for i, p in enumerate(handle_positions):
            g = server.scene.add_transform_controls(
                f"/handles/h{i}",
                scale=live.gizmo_scale,
                disable_rotations=True,
                disable_sliders=True,
                translation_limits=lim,
                position=tuple(float(x) for x in p),
                visible=self.show_handles,
            )
            color = tuple(int(255 * c) for c in PALETTE[(i + live.handle_offset) % len(PALETTE)])
            server.scene.add_icosphere(f"/handles/h{i}/marker", radius=0.025 * live.extent, color=color)
            g.on_update(self._handle_callback(live, i, g))
            live.handle_gizmos.append(g)

    def _handle_callback(self, live, index: int, gizmo):
        async def on_update(event) -> None:
            key = (event.client_id, gizmo.name)
            pos = np.asarray(gizmo.position, dtype=np.float64)
            if event.phase == "start":
                live.worker.begin_handle_drag(key, index, target=pos)
            elif event.phase == "update":
                live.worker.move_drag(key, pos)
            elif event.phase == "end":
                live.worker.end_drag(key)

        return on_update

    def set_show_handles(self, on: bool) -> None:
        """Show or hide the live scene's handle gizmos (and those of later scenes)."""
        self.show_handles = bool(on)
        live = self.app.live
        if live is not None:
            for gz in live.handle_gizmos:
                gz.visible = self.show_handles

    def sync_handle_gizmos(self, live, frame) -> None:
        """Move the gizmos of handles nobody drags to the frame's handle positions (display thread)."""
        dragged = live.worker.open_drag_names()
        hp = frame.handle_positions
        tol = 1e-4 * live.extent
        for i, g in enumerate(live.handle_gizmos):
            if i >= len(hp) or g.name in dragged:
                continue
            if np.linalg.norm(np.asarray(g.position) - hp[i]) > tol:
                g.position = tuple(float(x) for x in hp[i])

    # ------------------------------------------------------------------ click-to-grab
    def grab_at_ray(self, client, origin, direction) -> Optional[np.ndarray]:
        """Click-to-grab: pick the object's nearest Gaussian along the ray and put a grab gizmo there.

        Returns the picked point (3,) or None when the ray misses the object.
        """
        live = self.app.live
        if live is None:
            return None
        frame = live.worker.slot.get()
        pos = live.live_pos_t
        # the live rows' deformed centres only (no deformation of the static rows, which cannot be grabbed)
        pts = frame.with_moving(lambda m, c: to_numpy(m if pos is None else m[pos]), live.moving_rows_t)
        pick = pick_on_ray(pts, origin, direction, live.extent, PICK_RADII)
        if pick is None:
            return None
        point = pick.point
        old = self.grabs.pop(client.client_id, None)
        if old is not None:
            live.worker.end_drag((client.client_id, "/grab"))
            _remove(old)
        g = client.scene.add_transform_controls(
            "/grab",
            scale=live.gizmo_scale,
            disable_rotations=True,
            disable_sliders=True,
            translation_limits=((-1e9, 1e9),) * 3,
            position=tuple(float(x) for x in point),
        )
        client.scene.add_icosphere("/grab/marker", radius=0.02 * live.extent, color=(255, 255, 255))
        key = (client.client_id, "/grab")

        async def on_update(event) -> None:
            pos = np.asarray(g.position, dtype=np.float64)
            if event.phase == "start":
                live.worker.begin_point_drag(key, point)
                live.worker.move_drag(key, pos)
            elif event.phase == "update":
                live.worker.move_drag(key, pos)
            elif event.phase == "end":
                live.worker.end_drag(key)
                if self.grabs.get(client.client_id) is g:
                    self.grabs.pop(client.client_id, None)
                    g.remove()

        g.on_update(on_update)
        self.grabs[client.client_id] = g
        return point

    # ------------------------------------------------------------------ clicks
    def arm_pick(self, handler: Optional[Callable[[Any, np.ndarray, np.ndarray], None]]) -> None:
        """Send the next click to ``handler(client, origin, direction)`` instead of click-to-grab (None: disarm)."""
        with self._pick_lock:
            self._pick = handler

    @property
    def pick_armed(self) -> bool:
        """A pick handler waits for the next click."""
        return self._pick is not None

    def on_click(self, event) -> None:
        """viser scene click: an armed pick handler gets it (once), else click-to-grab when enabled."""
        if event.ray_origin is None or event.ray_direction is None:
            return
        origin = np.asarray(event.ray_origin, dtype=np.float64)
        direction = np.asarray(event.ray_direction, dtype=np.float64)
        with self._pick_lock:
            handler, self._pick = self._pick, None
        if handler is not None:
            try:
                handler(event.client, origin, direction)
            except Exception as exc:  # noqa: BLE001
                self.app.report_error("pick", exc, traceback.format_exc())
            return
        if not self.click_enabled or self.app.live is None:
            return
        try:
            self.grab_at_ray(event.client, origin, direction)
        except Exception as exc:  # noqa: BLE001
            self.app.report_error("click-to-grab", exc, traceback.format_exc())

    # ------------------------------------------------------------------ lifetime
    def on_disconnect(self, client) -> None:
        """A tab went away: end its drags, forget its grab gizmo."""
        live = self.app.live
        if live is not None:
            live.worker.end_drags_of(client.client_id)
        self.grabs.pop(client.client_id, None)

    def teardown(self, live) -> None:
        """Remove the handle gizmos of ``live`` and every grab gizmo (the AnimatedScene is replaced)."""
        for g in live.handle_gizmos:
            _remove(g)
        live.handle_gizmos.clear()
        for g in list(self.grabs.values()):
            _remove(g)
        self.grabs.clear()


def _remove(handle) -> None:
    """Remove a gizmo and drop its callbacks: viser may keep a removed gizmo's state (and so the callbacks, which
    hold the replaced scene: a fresh user's ten re-preparations of a three-body capture grew the process by
    100 MB each)."""
    try:
        handle.remove_update_callback("all")
    except Exception:  # noqa: BLE001 - not a gizmo, or already gone
        pass
    try:
        handle.remove()
    except Exception:  # noqa: BLE001 - already gone with its client
        pass
