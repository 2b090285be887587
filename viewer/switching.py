"""Re-preparing the animation while the server runs: skinning source, selection and up axis.

:class:`SceneSwitcher` takes requests (``request(what, **config_changes)``), merges those that arrive while a
preparation runs, and prepares the next AnimatedScene on one background thread with
``app._prepare(config)``; the result replaces the live one through ``app._activate(anim)`` (the same path as the
first preparation). The settings the panel shows (material, damping, dt, gravity, floor, pin) are carried into
the new config, so a switch keeps what the user set. ``app.config`` becomes the new config only once the
preparation succeeded; a failure is shown in the page and the old animation keeps running.

The app surface used: ``config``, ``source_scene``, ``_prepare``, ``_activate``, ``_stop`` (the stop event),
``panel.set_status``, ``panel.config_settings``, ``summary()``, ``report_error``.
"""

from __future__ import annotations

import dataclasses
import threading
import traceback
from typing import Any, Dict, List, Optional

from physskin_gs.errors import PhysSkinError
from physskin_gs.model.bases import resolve_skinning


class PreparationCancelled(Exception):
    """Raised from the progress callback of a preparation (:meth:`ViewerApp._prepare`) when the app stops: it ends
    that preparation at its next stage, so no worker thread is left inside torch or numpy when the interpreter
    exits."""


def normalize_up(choice) -> str:
    """``AnimationConfig.up`` for an up-axis dropdown entry: ``"+z"`` -> ``"z"``, ``"-y"`` stays, ``"auto"`` stays."""
    s = str(choice).strip().lower()
    return s[1:] if s.startswith("+") else s


class SceneSwitcher:
    """Background re-preparation of the AnimatedScene (see the module docstring).

    Attributes:
        generation: re-preparations finished (successful or not); tests wait on it.
        last_error: ``"Type: message"`` of the last failed re-preparation, None after a success.
    """

    def __init__(self, app) -> None:
        self.app = app
        self._lock = threading.Lock()
        self._pending: Dict[str, Any] = {}
        self._what: List[str] = []
        self._thread: Optional[threading.Thread] = None
        self._idle = threading.Event()
        self._idle.set()
        self.generation = 0
        self.last_error: Optional[str] = None

    # ------------------------------------------------------------------ requests
    @property
    def available(self) -> bool:
        """Re-preparation needs the source scene and a config (the app was given a path, not an AnimatedScene)."""
        return self.app.source_scene is not None and self.app.config is not None

    @property
    def busy(self) -> bool:
        """A re-preparation runs or is pending."""
        return not self._idle.is_set()

    def effective(self, name: str, default=None):
        """The value of config field ``name`` once the pending requests are applied."""
        with self._lock:
            if name in self._pending:
                return self._pending[name]
        return getattr(self.app.config, name, default)

    def switch_skinning(self, source: str) -> bool:
        """Re-prepare with skinning basis ``source`` (no-op when it is the current one)."""
        if not self.available:
            return False
        if resolve_skinning(self.effective("skinning")) == resolve_skinning(source):
            return False
        return self.request(f"skinning ({source})", skinning=source)

    def set_up(self, choice: str) -> bool:
        """Re-prepare with up axis ``choice`` (``auto``, ``+x``, ``-y``, ...; no-op when it is the current one)."""
        if not self.available:
            return False
        up = normalize_up(choice)
        if normalize_up(self.effective("up", "auto")) == up:
            return False
        return self.request(f"up axis ({choice})", up=up)

    def set_selection(self, spec: str) -> bool:
        """Re-prepare with ``select = spec`` (always: the same box may be applied again after a failure)."""
        return self.request(f"selection ({spec})", select=spec)

    def request(self, what: str, **changes) -> bool:
        """Queue a re-preparation with the config fields ``changes``; returns False when it cannot happen."""
        app = self.app
        if not self.available:
            app.report_error(what, RuntimeError("re-preparation needs a scene file (the viewer was given an "
                                                "AnimatedScene)"))
            return False
        names = {f.name for f in dataclasses.fields(app.config)}
        unknown = sorted(set(changes) - names)
        if unknown:
            app.report_error(what, RuntimeError(f"the animation config has no field {', '.join(unknown)}"))
            return False
        with self._lock:
            self._pending.update(changes)
            self._what.append(what)
            if self._thread is not None:
                return True  # the running thread picks it up next
            self._idle.clear()
            self._thread = threading.Thread(target=self._run, name="physskin-reprepare", daemon=True)
            self._thread.start()
        return True

    def wait_idle(self, timeout: float = 60.0) -> bool:
        """Block until no re-preparation runs or is pending (True) or ``timeout`` s pass (False)."""
        return self._idle.wait(timeout)

    # ------------------------------------------------------------------ the thread
    def _run(self) -> None:
        app = self.app
        while True:
            with self._lock:
                changes, self._pending = self._pending, {}
                what, self._what = ", ".join(dict.fromkeys(self._what)), []
                if not changes:
                    self._thread = None
                    self._idle.set()
                    return
            old = app.config
            same_object = "select" not in changes and "up" not in changes
            settings = app.panel.config_settings(old, keep_floor_height=same_object)
            cfg = dataclasses.replace(old, **{**settings, **changes})
            app.panel.set_status(f"Preparing {what}…", 0.0)
            try:
                anim = app._prepare(cfg)
            except PreparationCancelled:  # the app is stopping
                with self._lock:
                    self._pending.clear()
                continue
            except Exception as exc:  # noqa: BLE001 - shown in the page; the old animation keeps running
                self.last_error = f"{type(exc).__name__}: {exc}"
                app.panel.set_status(app.summary(), None)
                # a refused choice (an empty box, an unusable up) is the user's to change: its message, no
                # traceback (a fresh user's terminal got one for "box 3 keeps no Gaussian")
                user = isinstance(exc, PhysSkinError)
                if user and "--select box" in str(exc):  # in the page's words: its boxes, not the CLI's option
                    exc = type(exc)(str(exc).replace("--select box", "selection box")
                                    + " (change or clear the boxes in the Scene folder)")
                app.report_error(f"re-preparation: {what}", exc, "" if user else traceback.format_exc())
                app.panel.show_running(app.config)  # the dropdowns name what runs again, not the refused choice
            else:
                if app._stop.is_set():  # the app stopped meanwhile: nothing to show it on
                    with self._lock:
                        self._pending.clear()
                    continue
                app.config = cfg
                self.last_error = None
                app.panel.clear_error()  # an earlier failed re-preparation's line is stale now
                if all(getattr(cfg, k, None) == getattr(old, k, None) for k in ("select", "up")):
                    _keep_body_states(app.live.anim if app.live is not None else None, anim)
                app._activate(anim)
            self.generation += 1


def _keep_body_states(old, new) -> None:
    """The per-body pins and freezes of ``old`` given to ``new`` when both are the same bodies (the same selection
    and up, as many bodies): "apply selection" with an unchanged selection (or a new material) dropped them while
    the Bodies folder had shown them. Raises nothing (a body's pin that no longer holds part of it is left off)."""
    if old is None or not hasattr(old, "bodies") or not hasattr(new, "bodies"):
        return
    if getattr(old, "num_bodies", 0) != getattr(new, "num_bodies", -1):
        return
    pins = list(getattr(old, "pins", []) or [])
    env = pins and all(p == pins[0] for p in pins)  # one pin on every body: the config's, already carried
    for k in range(new.num_bodies):
        try:
            if pins and pins[k] and not env:
                new.set_pin(pins[k], body=k)
            if old.frozen[k]:
                new.set_frozen(k, True)
        except Exception:  # noqa: BLE001 - advice-level state: the body simply starts without it
            pass
