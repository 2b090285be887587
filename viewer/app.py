"""``physskin-gs animate``: the live viser viewer.

Layout of the running app:

- a :class:`~physskin_gs_viewer.sim.SimWorker` thread owns the AnimatedScene and steps it at a fixed ``dt``;
  GUI and network callbacks only post commands to it. After each step it publishes only the handle transforms
  (:class:`~physskin_gs_viewer.sim.SplitDeformSource`), so it never waits for the display;
- a display thread takes the newest published frame (older ones are dropped), deforms the moving Gaussians for
  it, packs them straight into viser's 32-byte splat records (:class:`~physskin_gs_viewer.splats.SplatPacker`)
  and updates the client-side splats with one buffer assignment; it also moves the handle gizmos and refreshes
  the stats. Simulation of step k+1 thus overlaps deformation and upload of step k, each thread on its own core
  with one torch thread (two OpenMP teams on two cores stall each other);
- in server-rendered mode, one render thread per browser tab renders that tab's camera and sends a JPEG
  (:mod:`~physskin_gs_viewer.render_server`);
- every exception in a step, a command or a render is shown in the page (and the terminal); the server keeps
  running;
- given a file (or a loaded GaussianScene), the page shows the rest scene as soon as the server starts (one splat
  node, ``/scene/preview``) with a progress bar for the preparation stages (``prepare_animation(...,
  progress=...)``), then the live nodes replace it: the static rows (``AnimatedScene.moving`` False) in
  ``/scene/static``, sent once, and the moving rows in ``/scene/moving``, updated every frame. A tab whose camera
  nobody moved follows from the whole scene to the object.

:class:`ViewerApp` (this module) owns the server, the lifecycle (start / stop), preparation and activation of an
AnimatedScene (:class:`LiveState`: its worker, rows, colours, nodes), errors and status, and the display mode
(server-rendered or not). It composes one part per feature, each in its own module:

==========================================  ========================================================
``app.panel`` (:mod:`.panel`)               the GUI panel: status lines, control folders, callbacks
``app.display`` (:mod:`.display`)           splat nodes, the display thread, colours (field, x-ray,
                                            dim static), stats
``app.interaction`` (:mod:`.interaction`)   handle gizmos, click-to-grab, where a click goes
``app.recording`` (:mod:`.recording`)       live recording (start / stop, sequence.json, mp4)
``app.selection`` (:mod:`.selection`)       scene facts, select dropdown, box gizmo, pick component
``app.bodies`` (:mod:`.bodies_panel`)       several bodies: per-body pin and freeze, the bodies' table
``app.switcher`` (:mod:`.switching`)        re-preparation on a new skinning source / selection / up
==========================================  ========================================================

Each part keeps a reference to the app and uses a few of its attributes (listed in its module docstring); a
part reaches another only through the app (``app.display``, ...). The app's older method names
(``start_recording``, ``set_xray``, ``_apply_field``, ``set_up``, ...) delegate to them.

Entry points: :func:`run_viewer` (the CLI) and :class:`ViewerApp` (programmatic, used by the tests).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from physskin_gs.errors import OptionError, SceneFormatError

from .bodies_panel import BodiesControl
from .constants import DISPLAY_ALIASES, DISPLAY_CLIENT, DISPLAY_GSPLAT, DISPLAY_TORCH, FIELD_NONE
from .constants import XRAY_OPACITY  # noqa: F401 - re-exported under its old name (tests read app.XRAY_OPACITY)
from .display import DisplayLoop
from .interaction import Interaction
from .panel import ControlPanel
from .panel import set_fast_solver as _set_fast_solver
from .recording import RecordingControl
from .render_server import ClientRenderThread, cuda_available
from .selection import SelectionControl
from .sim import SimWorker, default_threads, set_thread_torch_threads, to_numpy
from .splats import SplatPacker, display_scale, robust_extent, sh_dc_to_rgb, subsample_index
from .switching import PreparationCancelled, SceneSwitcher


# ------------------------------------------------------------------------------------------- loading
def validate_scene_path(path) -> Any:
    """Check that ``path`` exists and loads as a Gaussian scene; returns the loaded scene.

    Called before any server starts, so a bad path fails fast with a clear message.

    Raises:
        FileNotFoundError: the path does not exist.
        SceneFormatError: the path is a folder, or the file is not a readable Gaussian scene (the loader's
            message names the file and the problem).
    """
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"scene file not found: {p}")
    if p.is_dir():
        raise SceneFormatError(f"{p} is a folder, expected a Gaussian scene file (.ply or .splat)")
    try:
        from physskin_gs.pipeline import load_for_animation  # type: ignore[attr-defined]
    except ImportError:  # pipeline not available: plain loader
        from physskin_gs.io import load_scene as load_for_animation  # type: ignore[attr-defined]
    scene = load_for_animation(p)
    if scene is None or getattr(scene, "num_gaussians", 0) == 0:
        raise SceneFormatError(f"{p}: the scene holds no Gaussians")
    return scene


def dock_panel_right(server) -> bool:
    """Dock viser's control panel to the right edge of the page, so the 3D canvas is the part left of it.

    A floating panel lies over the canvas's right third, and the initial camera, which centres the object in
    the canvas, put it partly under the panel. Docked, the canvas (and the browser's camera aspect) ends at the
    panel, and the panel can still be collapsed from its corner. True when docked; False on a viser without
    ``gui.main_panel`` (before 1.1), whose floating panel then stays.
    """
    panel = getattr(getattr(server, "gui", None), "main_panel", None)
    if panel is None or not hasattr(panel, "dock_right"):
        return False
    panel.dock_right()
    return True


def side_view_direction(points: np.ndarray, up: np.ndarray) -> np.ndarray:
    """Unit horizontal direction (perpendicular to ``up``) along which ``points`` (N, 3) are thinnest.

    The initial camera sits on this side, so an elongated object is seen side-on rather than end-on.
    """
    up = np.asarray(up, dtype=np.float64)
    a = np.cross(up, [1.0, 0.0, 0.0]) if abs(up[0]) < 0.9 else np.cross(up, [0.0, 1.0, 0.0])
    a /= np.linalg.norm(a)
    b = np.cross(up, a)
    p = np.asarray(points, dtype=np.float64)
    if p.shape[0] < 2:
        return a
    q = p - p.mean(0)
    C = np.cov(np.stack([q @ a, q @ b]))  # 2x2 covariance in the horizontal plane
    w, V = np.linalg.eigh(C)
    d = V[0, 0] * a + V[1, 0] * b  # smallest-variance horizontal axis
    return d / np.linalg.norm(d)


def initial_camera_pose(points: np.ndarray, center, extent: float, up) -> Tuple[np.ndarray, np.ndarray, float, float]:
    """Where the camera starts: ``1.25 * extent`` from ``center``, on the thin side of ``points`` (see
    :func:`side_view_direction`), a little above (along ``up``).

    Args:
        points: (M, 3) the rows to frame (a subsample is enough; at most 200k are used), scene units.
        center: (3,) look-at point; extent: their size (robust diagonal), scene units; up: (3,) unit vector.
    Returns:
        (position (3,), look_at (3,), near, far) float64 / float.
    """
    up = np.asarray(up, dtype=np.float64).reshape(3)
    center = np.asarray(center, dtype=np.float64).reshape(3)
    pts = np.asarray(points)
    if pts.shape[0] > 200_000:
        pts = pts[:: int(np.ceil(pts.shape[0] / 200_000))]
    pts = pts[np.all(np.isfinite(pts), axis=1)]
    side = side_view_direction(pts, up)
    d = 0.8 * side + 0.35 * up
    position = center + 1.25 * extent * d / np.linalg.norm(d)
    return position, center, max(1e-3 * extent, 1e-6), max(100.0 * extent, 10.0)


def preview_up(config, scene) -> np.ndarray:
    """(3,) float64 unit up vector to show ``scene`` before the preparation knows it: the config's axis, or for
    ``"auto"`` the file format's prior (:func:`physskin_gs.pipeline.resolve_up`; the scene analysis may later
    pick the support plane's normal); +z when the pipeline cannot tell."""
    try:
        from physskin_gs.pipeline import resolve_up  # type: ignore[attr-defined]

        up = np.asarray(to_numpy(resolve_up(getattr(config, "up", "auto") or "auto", scene)), dtype=np.float64)
    except Exception:  # noqa: BLE001 - a stand-in pipeline, an unknown name: the default axis
        up = np.array([0.0, 0.0, 1.0])
    n = np.linalg.norm(up)
    return up / n if np.isfinite(n) and n > 0 else np.array([0.0, 0.0, 1.0])


def release_free_memory() -> bool:
    """Hand memory the process has freed back to the OS (glibc ``malloc_trim(0)``); True when it ran.

    Setting up a large scene frees a few hundred bytes of temporaries per Gaussian (wire arrays, viser's packing,
    the preparation's scratch), which glibc keeps mapped: at 1M Gaussians about 170 MiB of resident memory that
    nothing uses. Called once after each activation (and after the preview); a few milliseconds. No-op where
    there is no glibc (macOS, Windows, musl).
    """
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return False
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    trim(0)
    return True


def _is_gaussian_scene(obj) -> bool:
    """True for a :class:`physskin_gs.scene.GaussianScene` (a loaded scene to prepare, not an AnimatedScene)."""
    from physskin_gs.scene import GaussianScene

    return isinstance(obj, GaussianScene)


def config_from_args(args) -> Any:
    """An ``AnimationConfig`` from the CLI's parsed args (fields the args lack keep their defaults)."""
    from physskin_gs.pipeline import AnimationConfig  # type: ignore[attr-defined]

    if hasattr(args, "config") and isinstance(getattr(args, "config"), AnimationConfig):
        return args.config
    kwargs = {}
    for f in dataclasses.fields(AnimationConfig):
        if hasattr(args, f.name):
            v = getattr(args, f.name)
            if v is not None:
                kwargs[f.name] = v
    return AnimationConfig(**kwargs)


class TerminalProgress:
    """Progress callback ``(message, fraction)`` printing to the terminal and mirroring into the page. A message
    starting with ``"note: "`` (the pipeline's one-line notes, e.g. a reduced handle count) is printed once, as it
    is, without a percentage."""

    def __init__(self, stream=None, gui_sink=None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.gui_sink = gui_sink
        self._last: Tuple[str, int] = ("", -1)

    def __call__(self, message: str, fraction: float) -> None:
        pct = int(round(100 * max(0.0, min(1.0, float(fraction)))))
        if message.startswith("note: "):  # a fact about the preparation (fewer handles...): one line, no percentage
            if message != self._last[0]:
                print(f"[physskin-gs] {message}", file=self.stream, flush=True)
        elif (message, pct // 5) != (self._last[0], self._last[1] // 5) or pct == 100:
            if (message, pct) != self._last:
                print(f"[physskin-gs] {message}: {pct:3d}%", file=self.stream, flush=True)
        self._last = (message, pct)
        if self.gui_sink is not None:
            try:
                self.gui_sink(message, pct)
            except Exception:  # noqa: BLE001 - the page is optional for progress
                pass


# ------------------------------------------------------------------------------------------- live state
@dataclasses.dataclass
class LiveState:
    """Everything tied to one AnimatedScene (rebuilt when it is re-prepared: skinning source, selection, up axis)."""

    anim: Any
    worker: SimWorker
    extent: float
    center: np.ndarray
    up: np.ndarray
    s: float  # wire scale (splats.display_scale)
    live_idx: np.ndarray  # rows of the full scene shown live and pickable (moving, maybe subsampled)
    static_idx: np.ndarray  # rows drawn once, never updated (not moving)
    live_pos_in_moving: Optional[np.ndarray]  # positions of live_idx inside the moving rows (for weights)
    base_rgb: np.ndarray  # (N, 3) scene colours
    opac: np.ndarray  # (N,) opacities
    live_rgb: np.ndarray  # (L, 3) colours currently shown for live_idx
    gizmo_scale: float
    moving: Optional[np.ndarray] = None  # (N,) bool, the rows the AnimatedScene moves
    scene_extent: float = 1.0  # robust extent of every row (picking among all rows)
    moving_node: Any = None
    static_node: Any = None
    static_shown: Optional[np.ndarray] = None  # static rows sent to the browser (maybe subsampled)
    handle_gizmos: List[Any] = dataclasses.field(default_factory=list)
    handle_offset: int = 0  # skinning-weight column of handle gizmo 0
    retired: bool = False  # set when its nodes are removed (re-preparation); the display thread then skips it
    live_rgba: Any = None  # (live_rgb it was made from, (L,) uint32 RGBA, xray)
    moving_rows_t: Any = None  # torch int64 moving rows of the full scene, None when every row moves
    live_pos_t: Any = None  # torch int64 rows of the moving Gaussians shown live, None when all are
    packer: Any = None  # SplatPacker for the live splats (display thread only)
    sh_degree: int = 0  # SH degree of the scene (view-dependent colour needs > 0)
    sh_cpu: Any = None  # (sh_dc (N, 3), sh_rest (N, K, 3)) torch CPU tensors of the scene
    live_idx_t: Any = None  # torch int64 live_idx (SH rows of the live splats)
    view_alpha: Any = None  # ((xray, L), (L,) uint8 alpha bytes of the live rows' view-dependent colour words)
    static_alpha: Any = None  # (S,) uint8 alpha bytes of the static rows shown (view-dependent colour words)
    static_means_t: Any = None  # (rest means (S, 3) float32 torch, rows (S,) int64) of the static rows shown


class ViewerApp:
    """The live viewer, programmatic form.

    Args:
        anim_or_path: an AnimatedScene (or any object with its interface), the path of a scene file, or a
            loaded GaussianScene. A path is validated (exists, loads) here, before any server starts. With a
            path or a GaussianScene the app prepares the animation itself after :meth:`start`, showing the rest
            scene and a progress bar in the page meanwhile.
        config: ``AnimationConfig`` for :func:`physskin_gs.pipeline.prepare_animation` (used with a path, and
            when re-preparing on a new skinning source, selection or up axis); defaults to ``AnimationConfig()``.
        host, port: where to serve; 127.0.0.1 unless told otherwise; port 0 picks a free port.
        display: ``"auto"`` (gsplat server render with CUDA, else client splats), ``"client"``, ``"torch"``
            (server-rendered with the CPU rasteriser at reduced resolution) or ``"gsplat"`` (CUDA).
        max_live: most moving Gaussians shown live (a fixed random subset beyond that; all are simulated).
        realtime: pace the simulation to wall-clock time (one step per dt).
        play: start playing as soon as the scene is ready.
        record_dir: parent folder of recordings (each gets a time-stamped subfolder).
        render_fps: target frame rate of server-rendered mode (resolution adapts to it).
        verbose: let viser print its banner.
        split: deform on the display thread, so that simulation and deformation + upload run on two cores
            (:class:`~physskin_gs_viewer.sim.SplitDeformSource`); None: whenever the AnimatedScene supports it.
    """

    def __init__(
        self,
        anim_or_path,
        config=None,
        host: str = "127.0.0.1",
        port: int = 8080,
        *,
        display: str = "auto",
        max_live: int = 200_000,
        realtime: bool = True,
        play: bool = True,
        record_dir="recordings",
        render_fps: Optional[float] = None,
        verbose: bool = False,
        progress_stream=None,
        split: Optional[bool] = None,
    ) -> None:
        self.host = host
        self.split = split
        self.requested_port = int(port)
        self.config = config
        self.path: Optional[Path] = None
        self.source_scene = None
        self._initial_anim = None
        if isinstance(anim_or_path, (str, Path)):
            self.path = Path(anim_or_path)
            self.source_scene = validate_scene_path(self.path)
        elif _is_gaussian_scene(anim_or_path):
            if int(anim_or_path.num_gaussians) == 0:
                raise SceneFormatError("the scene holds no Gaussians")
            self.source_scene = anim_or_path
        else:
            self._initial_anim = anim_or_path
        display = DISPLAY_ALIASES.get(display, display)
        if display not in ("auto", DISPLAY_CLIENT, DISPLAY_TORCH, DISPLAY_GSPLAT):
            raise OptionError(f"unknown display mode {display!r}; use auto, client, torch or gsplat")
        if display == DISPLAY_GSPLAT and not cuda_available():
            raise OptionError("display mode 'gsplat' needs CUDA; none is available (use client or torch)")
        self.display_mode = (DISPLAY_GSPLAT if cuda_available() else DISPLAY_CLIENT) if display == "auto" else display
        self.max_live = int(max_live)
        self.realtime = realtime
        self.play_on_ready = play
        self.record_dir = Path(record_dir)
        self.render_fps = render_fps
        self.verbose = verbose
        self.progress_stream = progress_stream
        self.server = None
        self.live: Optional[LiveState] = None
        self.ready = threading.Event()
        self.failed: Optional[str] = None
        self._stop = threading.Event()
        self._lock = threading.RLock()
        self._preparing: set = set()  # threads inside _prepare (first preparation and re-preparations)
        self._renderers: Dict[int, ClientRenderThread] = {}
        self._last_notify = 0.0
        #: seconds from :meth:`start` to: "preview" (the rest scene's splats handed to viser, path / scene flow
        #: only) and "live" (the first AnimatedScene's nodes in place, physics running)
        self.timings: Dict[str, float] = {}
        self._t_start: Optional[float] = None
        self._preview_camera: Optional[Tuple[np.ndarray, np.ndarray]] = None  # (position, look_at) it set
        self.error_log: List[str] = []
        self.notices: List[str] = []  # what the simulation did on its own (report_notice), newest last
        import torch

        # preparation (field evaluation, fitting) keeps the process's thread count; the live threads set their own
        self._prepare_threads = torch.get_num_threads()
        #: torch intra-op threads of the display thread (deformation + packing); see sim.default_threads
        self.display_threads = default_threads()[1]
        # the parts (each module's docstring says what it uses of the app)
        self.panel = ControlPanel(self)  # GUI panel: status, control folders, their callbacks
        self.gui: Dict[str, Any] = self.panel.gui  # widget name -> viser handle
        self.display = DisplayLoop(self, self._stop, self.display_threads, self.max_live)  # splats, display thread
        self.interaction = Interaction(self)  # handle gizmos, click-to-grab, click dispatch
        self.recording = RecordingControl(self, self.record_dir)  # live recording
        self.selection = SelectionControl(self)  # select dropdown, box gizmo, pick component
        self.bodies = BodiesControl(self)  # several bodies: per-body pin and freeze
        self.switcher = SceneSwitcher(self)  # re-preparation on a new skinning source / selection / up axis

    # ================================================================== parts, under their old names
    @property
    def _grabs(self) -> Dict[int, Any]:
        """client id -> that tab's grab gizmo (:attr:`Interaction.grabs`)."""
        return self.interaction.grabs

    @property
    def _recorder(self):
        """The running :class:`~physskin_gs_viewer.recorder.Recorder`, or None."""
        return self.recording.recorder

    @property
    def _display_thread(self) -> Optional[threading.Thread]:
        """The display thread (:class:`~physskin_gs_viewer.display.DisplayLoop`), None before :meth:`start`
        (scripts/bench_viewer.py reads it)."""
        return self.display._thread

    @property
    def display_updates(self) -> int:
        """Display updates done so far (frames the display thread handled)."""
        return self.display.updates

    def _push_splats(self, live: "LiveState", frame) -> None:
        """Per-frame upload of the live splats (:meth:`DisplayLoop.push_splats`); the display thread calls it here."""
        self.display.push_splats(live, frame)

    def _apply_field(self, choice: str) -> None:
        self.display.apply_field(choice)

    def set_xray(self, on: bool) -> None:
        """Draw the object's splats at :data:`XRAY_OPACITY` of their opacity (client-side mode)."""
        self.display.set_xray(on)

    def start_recording(self, client=None, mp4: bool = False, out_dir=None) -> Path:
        """Start writing the simulated steps (every one, or one in the Record folder's "steps per frame") to a new
        folder; returns it (:meth:`RecordingControl.start`)."""
        return self.recording.start(client=client, mp4=mp4, out_dir=out_dir)

    def stop_recording(self) -> Optional[Path]:
        """Stop the current recording, write sequence.json (and the video); returns its folder, or None when
        nothing was recorded (:meth:`RecordingControl.stop`)."""
        return self.recording.stop()

    def set_up(self, choice: str) -> bool:
        """Re-prepare with up axis ``choice`` ("auto", "+x", "-y", "z", ...) in the background
        (:meth:`SceneSwitcher.set_up`); returns False when nothing is queued (already that axis, or the app was
        given an AnimatedScene)."""
        return self.switcher.set_up(choice)

    # ================================================================== lifecycle
    @property
    def port(self) -> int:
        """The bound TCP port once started (``port=0`` picks a free one), else the requested port."""
        return int(self.server.get_port()) if self.server is not None else self.requested_port

    @property
    def url(self) -> str:
        """``http://host:port`` to open in a browser (``localhost`` for a wildcard bind address)."""
        host = "localhost" if self.host in ("0.0.0.0", "::", "") else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> "ViewerApp":
        """Start serving; loading/preparation continues in the background (``ready`` is set when done).

        Returns the app. Raises what ``viser.ViserServer`` raises when it cannot bind ``host``."""
        import viser

        quiet_dropped_handshakes()
        self.server = viser.ViserServer(host=self.host, port=self.requested_port, verbose=self.verbose)
        if self.requested_port and self.port != self.requested_port:  # viser moves on to the next free port
            print(f"[physskin-gs] port {self.requested_port} is in use; serving on port {self.port} instead",
                  file=sys.stderr, flush=True)
        self._t_start = time.monotonic()
        self.server.gui.configure_theme(control_width="medium")
        dock_panel_right(self.server)
        self.panel.build_status(self.path.name if self.path is not None else "scene")
        self.server.on_client_connect(self._on_connect)
        self.server.on_client_disconnect(self._on_disconnect)
        self.display.start()
        if self._initial_anim is not None:
            anim = self._initial_anim
            threading.Thread(target=self._activate, args=(anim,), name="physskin-setup", daemon=True).start()
        else:
            threading.Thread(target=self._prepare_and_activate, name="physskin-prepare", daemon=True).start()
        return self

    def wait_ready(self, timeout: float = 60.0) -> bool:
        """Block until the scene is live (True) or ``timeout`` s pass / preparation failed (False)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.ready.wait(0.05):
                return True
            if self.failed is not None:
                return False
        return self.ready.is_set()

    PREPARE_JOIN_S = 30.0  # how long stop() waits in all for running preparations to reach their next stage

    def stop(self) -> None:
        """Stop every thread, finish a running recording, stop the server. Idempotent.

        A running preparation (the first one or a re-preparation) ends at its next stage with
        :class:`PreparationCancelled`; this waits up to :attr:`PREPARE_JOIN_S` s in all for that (on top of up to
        5 s for the display thread). :attr:`preparing` tells whether one is still running afterwards."""
        if self._stop.is_set():
            return
        self._stop.set()
        with self._lock:
            renderers = list(self._renderers.values())
            self._renderers.clear()
        for r in renderers:
            r.stop()
        live = self.live
        if live is not None:
            live.worker.stop()
        try:
            self.recording.close()
        except Exception:  # noqa: BLE001
            traceback.print_exc()
        self.selection.teardown()
        self.display.join(5.0)
        if self.server is not None:
            self.server.stop()
        deadline = time.monotonic() + self.PREPARE_JOIN_S
        with self._lock:
            threads = [t for t in self._preparing if t is not threading.current_thread()]
        for t in threads:  # each stops at its next stage (PreparationCancelled)
            t.join(max(0.0, deadline - time.monotonic()))

    @property
    def preparing(self) -> bool:
        """Whether a thread is still inside a preparation (e.g. after :meth:`stop` timed out on a long stage)."""
        with self._lock:
            return any(t.is_alive() for t in self._preparing)

    # ================================================================== errors and status
    def report_error(self, where: str, exc: BaseException, tb: str = "") -> None:
        """Show an exception in the page and the terminal; never raises."""
        msg = f"{type(exc).__name__}: {exc}"
        self.error_log.append(f"{where}: {msg}")
        print(f"[physskin-gs] error in {where}: {msg}", file=sys.stderr)
        if tb:
            print(tb, file=sys.stderr)
        try:
            self.panel.show_error(where, msg)
            now = time.monotonic()
            if self.server is not None and now - self._last_notify > 2.0:
                self._last_notify = now
                for client in self.server.get_clients().values():
                    client.add_notification(f"Error in {where}", msg, color="red", auto_close_seconds=8.0)
        except Exception:  # noqa: BLE001 - reporting must never fail
            traceback.print_exc()

    def report_notice(self, title: str, text: str) -> None:
        """Say something the simulation did on its own (not an error: it goes on) in the terminal, as a notification
        in every tab and in the panel's status line; never raises."""
        print(f"[physskin-gs] {title}: {text}", file=sys.stderr)
        self.notices.append(f"{title}: {text}")
        try:
            self.panel.set_status(f"**{title[:1].upper() + title[1:]}:** {text}", None)
            if self.server is not None:
                for client in self.server.get_clients().values():
                    client.add_notification(title[:1].upper() + title[1:], text, color="blue", auto_close_seconds=10.0)
        except Exception:  # noqa: BLE001 - reporting must never fail
            traceback.print_exc()

    # ================================================================== preparation
    def _prepare(self, config) -> Any:
        import importlib

        pipeline = importlib.import_module("physskin_gs.pipeline")  # (sys.modules' entry: tests stand one in)

        prepare = getattr(pipeline, "prepare_bodies", None) or pipeline.prepare_animation

        set_thread_torch_threads(self._prepare_threads)  # a new thread inherits the last count set anywhere

        def page(stage: str, pct: float) -> None:  # the status line names the stage, the bar shows the fraction
            self.panel.set_status(f"**Preparing the animation** · {stage}…", pct)

        progress = TerminalProgress(self.progress_stream, gui_sink=page)

        def report(stage: str, frac: float) -> None:
            if self._stop.is_set():
                raise PreparationCancelled("the viewer is stopping")
            progress(stage, frac)

        me = threading.current_thread()
        with self._lock:
            self._preparing.add(me)
        try:
            anim = prepare(self.source_scene, config, progress=report)
        finally:
            with self._lock:
                self._preparing.discard(me)
        stream = self.progress_stream if self.progress_stream is not None else sys.stderr
        try:  # what the analysis found and what moves, as animate --headless says it (a fresh user missed it here)
            from physskin_gs.cli._common import UNSURE_UP, prepared_line, scene_summary, stand_lines

            for line in scene_summary(anim, config):
                if UNSURE_UP in line:  # the page has the same choice
                    line += "; in the page, the Scene folder's 'up axis' menu"
                print(f"[physskin-gs] {line}", file=stream, flush=True)
            # the raise of the default material and the scale, as animate says them (a fresh user's viewer showed
            # "soft" at 3x its E with no word of why)
            stand = (getattr(anim, "info", None) or {}).get("stand")
            material = getattr(config, "material", None)
            E = float(stand["E_to"]) if stand else float(getattr(config, "E", 0.0) or 0.0)
            nu, density = (float(getattr(config, k, 0.0) or 0.0) for k in ("nu", "density"))
            for line in stand_lines(stand, material) + [prepared_line(anim, material, E, nu, density)]:
                print(f"[physskin-gs] {line}", file=stream, flush=True)
        except Exception as exc:  # noqa: BLE001 - a summary line must never stop the viewer
            self.report_error("scene summary", exc, traceback.format_exc())
        if int(getattr(anim, "num_bodies", 1)) > 1:  # the bodies, as animate lists them (scripts and the panel's
            from physskin_gs.bodies import body_lines  # Bodies folder number them the same way)

            for line in body_lines(anim):
                print(f"[physskin-gs] {line}", file=stream, flush=True)
        return anim

    def _prepare_and_activate(self) -> None:
        try:
            if self.config is None:
                from physskin_gs.pipeline import AnimationConfig  # type: ignore[attr-defined]

                self.config = AnimationConfig()
        except Exception as exc:  # noqa: BLE001 - as a failed preparation below
            self.failed = f"{type(exc).__name__}: {exc}"
            self.panel.set_status(f"**Preparation failed:** `{self.failed}`", None)
            self.report_error("preparation", exc, traceback.format_exc())
            return
        self.panel.set_status("**Preparing the animation** (the scene is shown at rest meanwhile)…", 0.0)
        try:
            self._show_preview()
        except Exception as exc:  # noqa: BLE001 - the preview is a courtesy; preparation goes on
            self.report_error("preview", exc, traceback.format_exc())
        try:
            anim = self._prepare(self.config)
        except PreparationCancelled:
            return
        except Exception as exc:  # noqa: BLE001 - shown in the page; the server keeps running
            failed = f"{type(exc).__name__}: {exc}"
            self.panel.set_status(f"**Preparation failed:** `{failed}`", None)
            self.report_error("preparation", exc, traceback.format_exc())
            try:
                self.panel.build_recovery()  # another selection / up axis can be tried from the page
            except Exception as exc2:  # noqa: BLE001
                self.report_error("panel", exc2, traceback.format_exc())
            self.failed = failed  # last: whoever waits on it (wait_ready) finds the recovery panel complete
            return
        if self._stop.is_set():  # stopped after the last stage: nothing to show it on
            return
        self._activate(anim)

    def _show_preview(self) -> None:
        """Show the rest scene (every row, static and moving alike) in the page before the first preparation
        ends, and frame the camera on it; records ``timings["preview"]``."""
        if self.live is not None or self.server is None or self._stop.is_set():
            return
        center, extent, pts = self.display.show_preview(self.source_scene)
        up = preview_up(self.config, self.source_scene)
        pose = initial_camera_pose(pts, center, extent, up)
        self._set_initial_camera(pose, up)
        self._preview_camera = (pose[0], pose[1])
        if self._t_start is not None:
            self.timings["preview"] = time.monotonic() - self._t_start
        release_free_memory()  # the preview's wire temporaries (about 150 bytes per Gaussian)

    def _set_initial_camera(self, pose, up: np.ndarray) -> None:
        """Up direction and initial camera (new tabs start there) from ``pose`` = :func:`initial_camera_pose`."""
        server = self.server
        position, look_at, near, far = pose
        server.scene.set_up_direction(tuple(float(v) for v in up))
        server.initial_camera.position = tuple(float(v) for v in position)
        self.display.set_camera(position)  # view-dependent colour follows it until a tab reports its camera
        server.initial_camera.look_at = tuple(float(v) for v in look_at)
        server.initial_camera.up = tuple(float(v) for v in up)
        server.initial_camera.near = near
        server.initial_camera.far = far

    def _follow_untouched_cameras(self, old: Tuple[np.ndarray, np.ndarray], pose, up, tol: float) -> int:
        """Move the tabs whose camera still sits where the preview put it (``old`` = (position, look_at)) to
        ``pose``; a camera the user moved stays. Returns how many tabs were moved."""
        moved = 0
        for client in list(self.server.get_clients().values()):
            try:
                cam = client.camera
                if (np.linalg.norm(np.asarray(cam.position) - old[0]) > tol
                        or np.linalg.norm(np.asarray(cam.look_at) - old[1]) > tol):
                    continue
                cam.up_direction = tuple(float(v) for v in up)
                cam.position = tuple(float(v) for v in pose[0])  # moves look_at along (viser), so look_at after
                cam.look_at = tuple(float(v) for v in pose[1])
                moved += 1
            except Exception:  # noqa: BLE001 - a tab that has not reported its camera yet starts at the new pose
                continue
        return moved

    # ================================================================== activation (per AnimatedScene)
    def _activate(self, anim) -> None:
        # live default: the fast solver (Hessian factor reused, about 2x faster); the "fast solver" checkbox toggles it
        fast = self.gui.get("fast")
        _set_fast_solver(anim, True if fast is None else bool(fast.value))
        try:
            self._setup_live(anim)
        except Exception as exc:  # noqa: BLE001
            self.failed = f"{type(exc).__name__}: {exc}"
            self.panel.set_status(f"**Viewer setup failed:** `{self.failed}`", None)
            self.report_error("viewer setup", exc, traceback.format_exc())
            return
        self.panel.set_status(self.summary(), None)
        self.failed = None
        if "live" not in self.timings and self._t_start is not None:
            self.timings["live"] = time.monotonic() - self._t_start
        release_free_memory()  # the setup's and the preparation's temporaries (see the function)
        self.ready.set()

    def summary(self) -> str:
        """The status line of the live scene (Gaussians, live / static rows, handles); "" before one is live."""
        live = self.live
        if live is None:
            return ""
        n = int(live.base_rgb.shape[0])
        shown = len(live.live_idx)
        parts = [f"{n:,} Gaussians", f"{shown:,} moving shown live"]
        if len(live.static_idx):
            parts.append(f"{len(live.static_idx):,} static")
        nb = int(getattr(live.anim, "num_bodies", 1) or 1)  # each body has its own constant handle
        parts.append(f"{len(live.handle_gizmos)} + {nb} handles (learned + constant"
                     + (f", {nb} bodies)" if nb > 1 else ")"))
        return " · ".join(parts)

    def _setup_live(self, anim) -> None:
        """Make ``anim`` the live AnimatedScene: its worker, splat nodes, handle gizmos, camera and controls (the
        previous one, if any, is torn down once the new one is ready to show)."""
        if self.recording.active:  # a recording belongs to one AnimatedScene: it ends here, and says why
            self.recording.stop()
            status = self.gui.get("record_status")
            if status is not None and status.content:
                status.content += " (the recording ended: the scene was prepared again; start a new one to go on)"
        scene = anim.scene
        rest = to_numpy(scene.means)
        n = rest.shape[0]
        moving = getattr(anim, "moving", None)
        moving = np.ones(n, bool) if moving is None else to_numpy(moving, dtype=bool).reshape(-1)
        moving_rows = np.nonzero(moving)[0]
        static_rows = np.nonzero(~moving)[0]
        sub = subsample_index(len(moving_rows), self.max_live)
        live_pos = sub
        live_idx = moving_rows if sub is None else moving_rows[sub]
        obj = rest[moving_rows] if len(moving_rows) else rest  # the moving rows (all rows when none move)
        extent = robust_extent(obj)
        center = np.median(obj, axis=0)
        up = np.asarray(to_numpy(getattr(anim, "up_vector", np.array([0.0, 0.0, 1.0]))), dtype=np.float64).reshape(3)
        up = up / (np.linalg.norm(up) or 1.0)
        s = display_scale(extent)
        base_rgb = sh_dc_to_rgb(to_numpy(scene.sh_dc))
        opac = to_numpy(scene.opacities).reshape(-1)

        worker = SimWorker(anim, realtime=self.realtime, on_error=self.report_error, on_notice=self.report_notice,
                           split=self.split)
        live = LiveState(
            anim=anim,
            worker=worker,
            extent=extent,
            center=center,
            up=up,
            s=s,
            live_idx=live_idx,
            static_idx=static_rows,
            live_pos_in_moving=live_pos,
            base_rgb=base_rgb,
            opac=opac,
            live_rgb=base_rgb[live_idx],
            gizmo_scale=0.2 * extent,
            moving=moving,
            scene_extent=robust_extent(rest) if len(static_rows) else extent,
        )
        import torch

        live.moving_rows_t = None if len(moving_rows) == n else torch.from_numpy(moving_rows.astype(np.int64))
        live.live_pos_t = None if live_pos is None else torch.from_numpy(np.asarray(live_pos, dtype=np.int64))
        live.packer = SplatPacker(len(live_idx))
        live.sh_degree = int(scene.sh_degree)
        live.sh_cpu = (scene.sh_dc.detach().cpu(), scene.sh_rest.detach().cpu())  # no copy when on the CPU
        live.live_idx_t = torch.from_numpy(np.asarray(live_idx, dtype=np.int64))
        worker.start()  # publishes the rest state
        frame = worker.slot.get()

        old = self.live
        if old is not None:
            self._teardown_live(old)

        pose = initial_camera_pose(obj, center, extent, up)
        self._set_initial_camera(pose, up)
        old_cam, self._preview_camera = self._preview_camera, None
        if old_cam is not None:  # the first scene after the preview: tabs nobody steered go to the object
            self._follow_untouched_cameras(old_cam, pose, up, tol=0.02 * float(np.linalg.norm(old_cam[0] - old_cam[1])))

        self.display.add_nodes(live, frame, visible=self.display_mode == DISPLAY_CLIENT)
        self.interaction.add_handle_gizmos(live, frame.handle_positions)

        with self._lock:
            self.live = live
        if self.display_mode != DISPLAY_CLIENT:  # renderers follow the new simulation
            self.set_display_mode(self.display_mode)
        self.panel.build_controls(anim)
        if self.display.field_choice != FIELD_NONE:
            self.display.apply_field(self.display.field_choice)
        if self.play_on_ready:
            worker.set_playing(True)
        self.panel.sync_play_label()

    def _teardown_live(self, live: LiveState) -> None:
        live.worker.stop()
        self.interaction.teardown(live)
        self.display.remove_nodes(live)

    # ================================================================== connections
    def _on_connect(self, client) -> None:
        display = self.display
        client.camera.on_update(lambda cam: display.set_camera(cam.position))  # view-dependent colour follows it
        if self.display_mode != DISPLAY_CLIENT and self.live is not None:
            self._start_renderer(client)

    def _on_disconnect(self, client) -> None:
        self.interaction.on_disconnect(client)
        with self._lock:
            r = self._renderers.pop(client.client_id, None)
        if r is not None:
            r.stop(timeout=0.5)

    # ================================================================== display mode (server-rendered or not)
    def _start_renderer(self, client) -> None:
        with self._lock:
            if client.client_id in self._renderers or self._stop.is_set():
                return
            backend = "gsplat" if self.display_mode == DISPLAY_GSPLAT else "torch"
            fps = self.render_fps or (60.0 if backend == "gsplat" else 6.0)
            r = ClientRenderThread(
                client,
                self.live.worker.slot,
                self.display.colors,
                backend=backend,
                target_fps=fps,
                initial_height=720 if backend == "gsplat" else 160,
                max_height=2160 if backend == "gsplat" else 540,
                on_error=self.report_error,
            )
            self._renderers[client.client_id] = r
        client.camera.on_update(lambda _cam: r.camera_changed())
        r.start()

    def renderer_status(self) -> Optional[str]:
        """The stats line of the server-side renderers (time per frame and height per tab), None without any."""
        with self._lock:
            rs = list(self._renderers.values())
        if not rs:
            return None
        return "render " + ", ".join(f"{r.last_ms:.0f} ms @ {r.height}px" for r in rs)

    def set_display_mode(self, mode: str) -> None:
        """Switch every tab to ``mode`` (``DISPLAY_CLIENT``: client-side splats; ``DISPLAY_TORCH`` /
        ``DISPLAY_GSPLAT``: server-rendered images). Needs a started server.

        Raises:
            OptionError: ``DISPLAY_GSPLAT`` without CUDA.
        """
        if mode == DISPLAY_GSPLAT and not cuda_available():
            raise OptionError("gsplat rendering needs CUDA; none is available")
        self.display_mode = mode
        live = self.live
        with self._lock:
            renderers = list(self._renderers.values())
            self._renderers.clear()
        for r in renderers:
            r.stop()
        client_side = mode == DISPLAY_CLIENT
        if live is not None:
            self.display.set_nodes_visible(live, client_side)
        if client_side:
            for client in self.server.get_clients().values():
                client.scene.set_background_image(None)
        else:
            for client in self.server.get_clients().values():
                self._start_renderer(client)


def _stop_shielded(app) -> None:
    """``app.stop()`` with a second Ctrl-C / SIGTERM held until it is done: the stop finishes a running recording
    (its last frames and sequence.json), and a second signal in the middle of that left the folder without its
    sequence.json (seen once by a fresh user). A signal that came meanwhile is dropped: the viewer is stopping."""
    from physskin_gs import interrupts

    if app.recording.active:
        print("[physskin-gs] finishing the recording (its last frames and sequence.json) before stopping",
              file=sys.stderr, flush=True)
    try:
        with interrupts.deferred():
            app.stop()
    except KeyboardInterrupt:  # the held signal, raised when the block ends: the viewer has stopped already
        interrupts.reset()


class _DroppedHandshake(logging.Filter):
    """Drops websockets' "opening handshake failed" record when the browser went away during the handshake (a tab
    closed or reloaded while connecting: EOFError, a reset connection, an incomplete HTTP request), which printed
    three chained tracebacks in the terminal for nothing; any other handshake failure is kept."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage() != "opening handshake failed" or not record.exc_info:
            return True
        exc = record.exc_info[1]
        while exc is not None:
            if isinstance(exc, (EOFError, ConnectionError)) or type(exc).__name__ == "InvalidMessage":
                return False
            exc = exc.__cause__ or exc.__context__
        return True


def quiet_dropped_handshakes() -> None:
    """Install :class:`_DroppedHandshake` on the ``websockets.server`` logger (once)."""
    log = logging.getLogger("websockets.server")
    if not any(isinstance(f, _DroppedHandshake) for f in log.filters):
        log.addFilter(_DroppedHandshake())


# ------------------------------------------------------------------------------------------- CLI entry
def run_viewer(args) -> int:
    """``physskin-gs animate PATH`` without ``--headless``: serve the live viewer until Ctrl-C.

    ``args`` has ``.path``, ``.host`` (default 127.0.0.1), ``.port`` (default 8080) and the AnimationConfig
    options. The path is validated (exists, loads) before the server starts. Ctrl-C (and SIGTERM, which the CLI
    turns into KeyboardInterrupt) stop the app and return 0; if a preparation stage is still running after
    :meth:`ViewerApp.stop`'s wait, the process ends with ``os._exit(0)`` after flushing stdout and stderr
    (atexit handlers do not run), so the interpreter never finalises under a worker busy in torch.

    Raises:
        FileNotFoundError / SceneFormatError: bad path (the CLI prints ``error: ...`` and exits with code 2).
    """
    host = getattr(args, "host", None) or "127.0.0.1"
    port = int(getattr(args, "port", None) or 8080)
    path = Path(args.path)
    print(f"[physskin-gs] loading {path}", file=sys.stderr, flush=True)
    app = ViewerApp(  # validates the path (exists, loads) before anything else
        path,
        None,
        host=host,
        port=port,
        display=getattr(args, "display", None) or "auto",
        max_live=int(getattr(args, "max_live", None) or 200_000),
        record_dir=getattr(args, "record_dir", None) or "recordings",
    )
    app.config = config_from_args(args)
    app.export_format = getattr(args, "export_format", None) or "ply"  # the Record folder's initial format
    app.steps_per_frame = int(getattr(args, "steps_per_frame", None) or 1)  # ... and its initial steps per frame
    app.start()
    print(f"[physskin-gs] viewer running at {app.url}  (Ctrl-C to stop)", flush=True)
    from .recording import is_loopback

    if not is_loopback(host):
        print(f"[physskin-gs] warning: --host {host}: the viewer is reachable from other machines, and anyone who "
              "can open the page can drive the simulation and start recordings (written under "
              f"{app.recording.record_dir} only); use --host 127.0.0.1 (the default) to keep it to this machine",
              file=sys.stderr, flush=True)
    try:
        _serve_until_interrupt(app)
    except KeyboardInterrupt:  # Ctrl-C is how the viewer is stopped: a normal end (exit 0), not an interrupted run
        from physskin_gs import interrupts

        interrupts.reset()
        print("\n[physskin-gs] shutting down", file=sys.stderr, flush=True)
    finally:
        _stop_shielded(app)
    if app.preparing:  # a stage longer than PREPARE_JOIN_S: leave without finalising under a busy worker thread
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


def _serve_until_interrupt(app: ViewerApp) -> None:
    """Block the main thread until Ctrl-C (KeyboardInterrupt) or until the app is stopped."""
    while not app._stop.wait(0.5):
        pass
