"""The panel's "Bodies" folder: per-body pin and freeze when several objects move (issue 24).

Shown only while the live animation has several bodies (:class:`physskin_gs.bodies.SceneBodies`, ``--select auto``
on a capture with several objects on its support, or several boxes): a ``body`` dropdown, "pin its base" (the
body's own bottom, :data:`~.constants.DEFAULT_PIN` or the configured ``--pin``), "freeze" (the body holds its pose
and becomes an obstacle the others rest on and bounce off: ``SceneBodies.set_frozen``) and a table of every body
(Gaussians, handles, pinned, frozen). The checkboxes show the chosen body's state; changing one posts the command
to the simulation worker. The per-body step times are on the panel's stats line (:mod:`.display`).

The app surface used: ``gui`` (``app.gui``, the panel's widgets by name), ``live`` (``anim``, ``worker``),
``config`` (``pin``).
"""

from __future__ import annotations

import threading
from typing import List, Optional

from .constants import DEFAULT_PIN
from .sim import viser_wakeup_race


def body_label(k: int, gaussians: Optional[int] = None) -> str:
    """The dropdown entry of body ``k`` (numbered as the log lists the bodies and ``--script``'s ``"body"`` counts
    them: heaviest first with ``auto``, in box order with a box list), with its Gaussian count when given."""
    return f"body {k}" + ("" if gaussians is None else f" ({gaussians:,} Gaussians)")


def bodies_markdown(anim) -> str:
    """A markdown table of ``anim``'s bodies: Gaussians, handles, pinned region, frozen."""
    pins = list(getattr(anim, "pins", [None] * anim.num_bodies))
    frozen = list(getattr(anim, "frozen", [False] * anim.num_bodies))
    rows = ["| body | Gaussians | handles | pinned | frozen |", "|---|---|---|---|---|"]
    for k, b in enumerate(anim.bodies):
        n = int(b.moving_index.numel())
        rows.append(f"| {k} | {n:,} | {b.num_handles - 1} + 1 | {pins[k] or '-'} | {'yes' if frozen[k] else '-'} |")
    return "\n".join(rows)


class BodiesControl:
    """The "Bodies" folder's widgets (in ``app.gui``): ``bodies_folder``, ``body`` (dropdown), ``body_pin``,
    ``body_freeze`` (checkboxes, the chosen body's state) and ``bodies_table`` (markdown)."""

    def __init__(self, app) -> None:
        self.app = app
        self._syncing = threading.local()

    # ------------------------------------------------------------------ building
    def build(self, gui) -> None:
        """Add the folder (hidden until a live animation has several bodies)."""
        g = self.app.gui
        g["bodies_folder"] = gui.add_folder("Bodies", visible=False)
        with g["bodies_folder"]:
            g["body"] = gui.add_dropdown(
                "body", [body_label(0)], initial_value=body_label(0),
                hint="the object the two boxes below act on (numbered as the console lists the bodies)")
            g["body_pin"] = gui.add_checkbox(
                "pin its base", False,
                hint="hold the body's bottom where it was captured (its own pin region; the Environment folder's "
                     "'pin region' pins every body)")
            g["body_freeze"] = gui.add_checkbox(
                "freeze", False,
                hint="the body stops where it is and holds still: the others rest on it and bounce off it; drags "
                     "and gravity do not move it until it is unfrozen")
            g["bodies_table"] = gui.add_markdown("")
        self._wire()

    def _wire(self) -> None:
        g = self.app.gui

        # Coroutines: viser awaits them on its event loop right after it sets the value, in the order the browser
        # sent the clicks. Plain callbacks run on a thread pool, where the dropdown's sync (setting the boxes to the
        # newly chosen body's state) could run after a freeze click that followed it had set its box, and the freeze
        # callback then read the box as sync left it (seen under load: the click was lost).
        @g["body"].on_update
        async def _(_e) -> None:
            self.sync()

        # Only a click posts: the boxes set by :meth:`sync` (from the server) run these coroutines later on the event
        # loop's thread, where the thread-local flag is not set, and one that ran after the dropdown had moved on
        # to another body posted the first body's box to it (seen under load: a frozen body thawed after "apply
        # selection")
        @g["body_pin"].on_update
        async def _(_e) -> None:
            if getattr(self._syncing, "on", False) or getattr(_e, "client", None) is None:
                return
            k, on = self.chosen(), bool(g["body_pin"].value)
            spec = (getattr(self.app.config, "pin", None) or DEFAULT_PIN) if on else None
            self._post(f"pin body {k}", lambda a: a.set_pin(spec, body=k))

        @g["body_freeze"].on_update
        async def _(_e) -> None:
            if getattr(self._syncing, "on", False) or getattr(_e, "client", None) is None:
                return
            k, on = self.chosen(), bool(g["body_freeze"].value)
            self._post(f"{'freeze' if on else 'unfreeze'} body {k}", lambda a: a.set_frozen(k, on))

    # ------------------------------------------------------------------ state
    def _anim(self):
        live = self.app.live
        anim = None if live is None else live.anim
        return anim if int(getattr(anim, "num_bodies", 1)) > 1 else None

    def chosen(self) -> int:
        """The body index the dropdown shows."""
        g = self.app.gui
        try:
            return int(str(g["body"].value).split()[1])
        except (IndexError, ValueError):
            return 0

    def _post(self, name: str, fn) -> None:
        """Run ``fn(anim)`` on the simulation worker, then show the bodies' new state."""
        live = self.app.live
        if live is None or self._anim() is None:
            return

        def run(a) -> None:
            fn(a)
            self.show(a)

        live.worker.submit(name, run, publish=True)

    def show(self, anim) -> None:
        """Refresh the table and the checkboxes from ``anim`` (any thread)."""
        g = self.app.gui
        if "bodies_table" not in g or int(getattr(anim, "num_bodies", 1)) < 2:
            return
        try:
            g["bodies_table"].content = bodies_markdown(anim)
            self.sync(anim)
        except RuntimeError as exc:  # set from the simulation thread: the values are set, the page's wake-up
            if not viser_wakeup_race(exc):  # comes with the next message
                raise

    def sync(self, anim=None) -> None:
        """Set the checkboxes to the chosen body's pin and freeze (their callbacks post nothing then)."""
        anim = anim if anim is not None else self._anim()
        if anim is None:
            return
        g = self.app.gui
        k = min(self.chosen(), anim.num_bodies - 1)
        self._syncing.on = True
        try:
            g["body_pin"].value = anim.pins[k] is not None
            g["body_freeze"].value = bool(anim.frozen[k])
        finally:
            self._syncing.on = False

    def on_live(self, live) -> None:
        """A new animation is live: show the folder for several bodies (dropdown entries, table), hide it else."""
        g = self.app.gui
        if "bodies_folder" not in g:
            return
        anim = live.anim
        n = int(getattr(anim, "num_bodies", 1))
        g["bodies_folder"].visible = n > 1
        if n < 2:
            return
        labels: List[str] = [body_label(k, int(b.moving_index.numel())) for k, b in enumerate(anim.bodies)]
        g["body"].options = labels
        if g["body"].value not in labels:
            g["body"].value = labels[0]
        self.show(anim)


def body_times_line(stats: dict) -> Optional[str]:
    """The stats line of the per-body step times (ms a step; bodies solved together share one number), or None
    without them (one body). ``stats``: one step's statistics (``body_ms``, ``solved_together``, ``frozen``: what
    ``SceneBodies.step(1)`` returns; the viewer's worker steps one at a time)."""
    ms = stats.get("body_ms")
    if not ms or len(ms) < 2:
        return None
    groups = stats.get("solved_together") or [[k] for k in range(len(ms))]
    frozen = stats.get("frozen") or [False] * len(ms)
    parts = []
    for grp in groups:
        grp = [int(k) for k in grp]
        name = "+".join(str(k) for k in grp)
        cold = "" if not all(frozen[k] for k in grp) else " (frozen)"
        parts.append(f"{name} **{ms[grp[0]]:.1f}**{cold}")
    return "per body, ms/step: " + " · ".join(parts) + (" (a + joins bodies solved together)"
                                                       if any(len(g) > 1 for g in groups) else "")


__all__ = ["BodiesControl", "bodies_markdown", "body_label", "body_times_line"]
