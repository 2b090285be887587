"""Live recording: the "Record" folder's start / stop, what goes into sequence.json, the optional mp4.

:class:`RecordingControl` attaches a :class:`~physskin_gs_viewer.recorder.Recorder` (the frame writer) to the
simulation worker's ``on_step`` hook so that every simulated step is written, and detaches it again. It reads
the app through a small surface only: ``live`` (the current :class:`~physskin_gs_viewer.app.LiveState`),
``gui`` (the panel's widgets by name), ``config``, ``path``, ``server``, ``panel.gravity_direction()`` and
``display.colors()``.
"""

from __future__ import annotations

import ipaddress
import math
import threading
from datetime import datetime
from pathlib import Path
from typing import Any, Dict, Optional

import numpy as np

from physskin_gs.errors import OptionError
from physskin_gs.io._shared import recorded_path

from .camera import CameraState
from .constants import DEFAULT_PIN
from .recorder import STEPS_PER_FRAME_MAX, Recorder
from .render_server import cuda_available, render_frame
from .sim import Frame, snapshot_tensor


def _number(v, parse: bool = False):
    """A panel field's value as a float (``parse``: a pressure text such as "100kPa", as ``--E`` reads it:
    :func:`~physskin_gs_viewer.panel.young_modulus_of`), or None when it is empty or unreadable."""
    from .panel import young_modulus_of

    try:
        x = young_modulus_of(v) if parse else float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


class RecordingControl:
    """Start / stop recordings of the live simulation (one at a time).

    Args:
        app: the :class:`~physskin_gs_viewer.app.ViewerApp` (see the module docstring for what is used).
        record_dir: parent folder of recordings when the panel has no "folder" field yet.
    """

    def __init__(self, app, record_dir) -> None:
        self.app = app
        self.record_dir = Path(record_dir)
        self.recorder: Optional[Recorder] = None

    @property
    def active(self) -> bool:
        """A recording runs."""
        return self.recorder is not None

    def start(self, client=None, mp4: bool = False, out_dir=None) -> Path:
        """Start writing the simulated steps (every one, or one in the Record folder's "steps per frame") to a new
        folder.

        Args:
            client: the tab whose camera the mp4 is rendered from (None: the initial camera).
            mp4: also render an mp4 of the recording.
            out_dir: the recording's folder (None: a time-stamped one under the panel's "folder" field).

        Returns the recording's folder.

        Raises:
            OptionError: no scene is live yet, or a recording already runs.
        """
        app = self.app
        live = app.live
        if live is None:
            raise OptionError("the scene is not ready yet")
        if self.recorder is not None:
            raise OptionError("already recording")
        gui = app.gui
        parent = self._parent(str(gui["record_dir"].value)) if "record_dir" in gui else self.record_dir
        if out_dir is not None:
            out = Path(out_dir)
        else:  # time-stamped; a second recording started within the same second gets _2, _3, ...
            stamp = datetime.now().strftime("rec_%Y%m%d_%H%M%S")
            out, k = parent / stamp, 2
            while out.exists():
                out, k = parent / f"{stamp}_{k}", k + 1
        if parent.exists() and not parent.is_dir():
            raise OptionError(f"the Record folder {parent} is a file, not a folder; name a folder")
        video = self._video_renderer(client) if mp4 else None
        fmt = gui["record_format"].value if "record_format" in gui else getattr(app, "export_format", "ply")
        every = self.steps_per_frame()
        try:
            rec = Recorder(out, dt=float(getattr(live.anim, "dt", 0.03)), meta=self.sequence_meta(out),
                           video_renderer=video, export_format=fmt, steps_per_frame=every)
        except OSError as exc:  # the folder cannot be made (no permission, a file in the way, a read-only disk)
            raise OptionError(f"cannot record to {out}: {exc.strerror or exc}") from None
        self.recorder = rec
        live.worker.submit("start recording", lambda a: setattr(live.worker, "on_step", lambda a2, st: rec.add(a2)))
        if "record" in gui:
            gui["record"].label = "Stop recording"
            which = "every step is" if every == 1 else f"one step in {every} is"
            gui["record_status"].content = (f"recording to `{out}` at {rec.fps:.3g} frames per simulated second: "
                                            f"{which} written, and the simulation waits for the writing when the "
                                            "disk is behind (large scenes; raise `steps per frame` to write less)")
        return out

    def steps_per_frame(self) -> int:
        """The Record folder's "steps per frame" field (the app's ``steps_per_frame``, from ``--steps-per-frame``,
        before the panel is built), brought into 1 .. :data:`~physskin_gs_viewer.recorder.STEPS_PER_FRAME_MAX`
        and rounded (a browser number field can send any value)."""
        from .panel import field_value

        gui = self.app.gui
        v = gui["record_every"].value if "record_every" in gui else getattr(self.app, "steps_per_frame", 1)
        return int(round(field_value(v, 1, STEPS_PER_FRAME_MAX, 1)))

    def _parent(self, text: str) -> Path:
        """The Record field's folder. When the viewer is reachable from other machines (``--host`` not a loopback
        address) it must lie inside the ``--record-dir`` it started with (a relative path, no ``..``): anyone who
        can open the page can start a recording, and must not choose where on this machine it is written. Raises
        OptionError otherwise, or for an empty field."""
        text = text.strip()
        if not text:
            raise OptionError("the Record folder is empty; name a folder")
        path = Path(text)
        if is_loopback(getattr(self.app, "host", "127.0.0.1")):
            return path
        root = self.record_dir.resolve()
        full = (path if path.is_absolute() else Path.cwd() / path).resolve()
        if full != root and root not in full.parents:
            raise OptionError(f"the viewer is reachable from the network (--host {self.app.host}): recordings go "
                              f"under {self.record_dir} only (--record-dir), not {text}")
        return full

    def stop(self) -> Optional[Path]:
        """Stop the current recording, write sequence.json (and the video); returns its folder (None: none ran, or
        nothing was recorded because no step ran: then no folder is kept and the panel says so)."""
        rec = self.recorder
        live = self.app.live
        if rec is None:
            return None
        done = threading.Event()

        def detach(a) -> None:
            if live is not None:
                live.worker.on_step = None
            done.set()

        if live is not None and live.worker.alive:
            live.worker.submit("stop recording", detach)
            done.wait(10.0)
        self.recorder = None
        gui = self.app.gui
        try:
            out = rec.stop()
        except Exception as exc:  # noqa: BLE001 - the folder went away, the disk filled: said, and the button
            # is "Start recording" again (it stayed "Stop recording", and the next click started a new recording)
            if "record" in gui:
                gui["record"].label = "Start recording"
                gui["record_status"].content = (f"**the recording stopped with a problem:** {type(exc).__name__}: "
                                                f"{exc} ({rec.written} frames were written to `{rec.out_dir}`)")
            self.app.report_error("stop recording", exc)
            return None
        if rec.empty:
            msg = ("nothing recorded: the simulation did not step while recording (it was paused; press Play, then "
                   "record)")
            gui = self.app.gui
            if "record" in gui:
                gui["record"].label = "Start recording"
                gui["record_status"].content = msg
            return None
        msg = f"wrote {rec.written} frame{'' if rec.written == 1 else 's'} to `{out}`"
        if rec.video_path is not None:
            msg += f" and `{rec.video_path.name}`"
        if rec.error:
            msg += f" (problem: {rec.error})"
        gui = self.app.gui
        if "record" in gui:
            gui["record"].label = "Start recording"
            gui["record_status"].content = msg
        return out

    def close(self) -> None:
        """Finish a running recording without going through the worker (shutdown: the worker is stopped)."""
        rec, self.recorder = self.recorder, None
        if rec is not None:
            rec.stop()

    def sequence_meta(self, folder=None) -> Dict[str, Any]:
        """sequence.json fields describing the current simulation (the headless export's keys where known).

        ``folder``: the recording's folder, which the source's path is recorded relative to (as the headless export
        does); None: the source's file name only."""
        app = self.app
        live = app.live
        anim = live.anim
        g = app.gui
        val = lambda k, d=None: g[k].value if k in g else d  # noqa: E731
        info = getattr(anim, "info", {}) or {}
        sh = anim.sh_handling() if hasattr(anim, "sh_handling") else None
        cfg = app.config
        return {
            "source": _source_name(app.path if app.path is not None else getattr(anim.scene, "source", None), folder),
            "up_axis": [float(v) for v in live.up],
            "scale_m_per_unit": getattr(anim, "sim_scale", None),
            "sh": sh,
            "skinning": getattr(anim, "skinning_source", None),
            "num_handles": getattr(anim, "num_handles", None),
            "handles": info.get("handles"),
            "cubature": {"points": info.get("num_cubature"), "rule": info.get("cubature")},
            "num_gaussians": int(live.base_rgb.shape[0]),
            "num_moving": int(info.get("num_moving", int(live.moving.sum()))),
            # numbers, as the headless export writes them (E was the field's text: "100kPa"), and the preset's name
            "material": {"name": val("material"), "E": _number(val("E"), parse=True), "nu": _number(val("nu")),
                         "density": _number(val("density"))},
            "gravity": (float(getattr(cfg, "gravity", 9.8) or 9.8) if val("gravity", True) else 0.0),
            "gravity_direction": [float(v) for v in app.panel.gravity_direction()] if "gravity_dir" in g else None,
            "damping": val("damping"),
            "floor": float(val("floor_height")) if val("floor", False) else None,
            "pin": (getattr(cfg, "pin", None) or DEFAULT_PIN) if val("pin", False) else None,
            "regions": list(getattr(anim, "regions", []) or []),
            "select": info.get("selection", getattr(cfg, "select", None)),
            "scene_analysis": info.get("scene_analysis"),
            # several bodies: each body's rows, handles, size and contact radius, and the collider, as the headless
            # export writes them (a fresh user's recording of three bodies had none of it)
            "bodies": info.get("bodies"),
            "collider": info.get("collider"),
            "script": None,
            "writer": "physskin-gs animate viewer (live recording)",
        }

    def _video_renderer(self, client):
        app = self.app
        live = app.live
        cam = None
        if client is not None:
            try:
                c = client.camera
                cam = CameraState(tuple(c.wxyz), tuple(c.position), float(c.fov), float(c.aspect))
            except Exception:  # noqa: BLE001
                cam = None
        if cam is None:
            from .camera import look_at_wxyz

            pos = np.asarray(app.server.initial_camera.position, dtype=np.float64)
            cam = CameraState(tuple(look_at_wxyz(pos, live.center, live.up)), tuple(pos), 0.9, 4 / 3)
        h = 320
        w = int(round(h * cam.aspect / 16)) * 16 or 16
        backend = "gsplat" if cuda_available() else "torch"
        rgb, opac = app.display.colors()

        def render(g) -> np.ndarray:
            f = Frame(0, 0, snapshot_tensor(g.means), snapshot_tensor(g.covars), np.zeros((0, 3), np.float32))
            return render_frame(f, cam, w, h, rgb, opac, backend)

        return render


def _source_name(path, folder) -> Optional[str]:
    """The input's path as a recording's sequence.json records it: relative to the recording's ``folder``
    (:func:`physskin_gs.io._shared.recorded_path`), its file name without a folder; None without a path."""
    if path is None:
        return None
    return recorded_path(path, folder) if folder is not None else Path(path).name


def is_loopback(host: str) -> bool:
    """Whether ``host`` (the viewer's bind address) reaches this machine only: ``localhost`` or a loopback IP."""
    h = str(host or "").strip().strip("[]").lower()
    if h == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False
