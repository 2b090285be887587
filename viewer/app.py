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
  running.

Entry points: :func:`run_viewer` (the CLI) and :class:`ViewerApp` (programmatic, used by the tests).
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
import traceback
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from physskin_gs.errors import OptionError, SceneFormatError
from physskin_gs.model.bases import resolve_skinning, skinning_names

from .camera import CameraState
from .recorder import Recorder
from .render_server import ClientRenderThread, cuda_available, render_frame
from .sim import Frame, SimWorker, default_threads, set_thread_torch_threads, snapshot_tensor, to_numpy
from .splats import (
    PALETTE,
    SplatPacker,
    display_scale,
    pick_point,
    rgba_u32,
    robust_extent,
    sh_dc_to_rgb,
    subsample_index,
    to_wire,
    weight_colors,
)

DISPLAY_CLIENT = "client splats"
DISPLAY_TORCH = "server render (torch, CPU)"
DISPLAY_GSPLAT = "server render (gsplat, CUDA)"
#: Short names accepted for ``display`` (the CLI's ``--display``).
DISPLAY_ALIASES = {"client": DISPLAY_CLIENT, "torch": DISPLAY_TORCH, "gsplat": DISPLAY_GSPLAT}
FIELD_NONE = "scene colours"
FIELD_ALL = "all handles (argmax)"
def _set_fast_solver(anim, on: bool) -> None:
    """The simulator's ``"adaptive"`` solver when ``on`` (a converged step hands its Hessian factor on to the next
    one), else full Newton (``"newton"``: a fresh Hessian every iteration). Same solution either way, fewer
    factorisations; no-op for scenes without a simulator that has named solvers."""
    sim = getattr(anim, "sim", None)
    if sim is not None and "adaptive" in getattr(sim, "SOLVERS", ()):
        sim.solver = "adaptive" if on else "newton"


#: Pin region used by the "pin region" checkbox when the config names none (bottom 10% of the object).
DEFAULT_PIN = "below:0.1"
#: Opacity factor of the "x-ray" display option (handle markers inside the object become visible).
XRAY_OPACITY = 0.3
GRAVITY_DIRS = ["down (-up)", "-x", "+x", "-y", "+y", "-z", "+z"]


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
    """Progress callback ``(message, fraction)`` printing to the terminal and mirroring into the page."""

    def __init__(self, stream=None, gui_sink=None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.gui_sink = gui_sink
        self._last: Tuple[str, int] = ("", -1)

    def __call__(self, message: str, fraction: float) -> None:
        pct = int(round(100 * max(0.0, min(1.0, float(fraction)))))
        if (message, pct // 5) != (self._last[0], self._last[1] // 5) or pct == 100:
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
    """Everything tied to one AnimatedScene (rebuilt when the skinning source changes)."""

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
    moving_node: Any = None
    static_node: Any = None
    handle_gizmos: List[Any] = dataclasses.field(default_factory=list)
    handle_offset: int = 0  # skinning-weight column of handle gizmo 0
    live_sel: Any = None  # index for live_idx into frame arrays (a slice when it is every row)
    live_rgba: Any = None  # (live_rgb it was made from, (L,) uint32 RGBA, xray)
    moving_rows_t: Any = None  # torch int64 moving rows of the full scene, None when every row moves
    live_pos_t: Any = None  # torch int64 rows of the moving Gaussians shown live, None when all are
    packer: Any = None  # SplatPacker for the live splats (display thread only)


class ViewerApp:
    """The live viewer, programmatic form.

    Args:
        anim_or_path: an AnimatedScene (or any object with its interface) or the path of a scene file. A
            path is validated (exists, loads) here, before any server starts.
        config: ``AnimationConfig`` for :func:`physskin_gs.pipeline.prepare_animation` (used with a path, and
            when switching the skinning source); defaults to ``AnimationConfig()``.
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
        self._display_thread: Optional[threading.Thread] = None
        self._renderers: Dict[int, ClientRenderThread] = {}
        self._grabs: Dict[int, Any] = {}  # client id -> grab gizmo
        self._recorder: Optional[Recorder] = None
        self._last_notify = 0.0
        self.error_log: List[str] = []
        self.display_updates = 0
        self._display_times: List[float] = []
        self.gui: Dict[str, Any] = {}
        self._field_choice = FIELD_NONE
        self._colors_cache = None
        self._click_enabled = True
        #: torch intra-op threads of the display thread (deformation + packing); see sim.default_threads
        self.display_threads = default_threads()[1]
        import torch

        # preparation (field evaluation, fitting) keeps the process's thread count; the live threads set their own
        self._prepare_threads = torch.get_num_threads()
        self._show_handles = True
        self._xray = False

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
        """Start serving; loading/preparation continues in the background (``ready`` is set when done)."""
        import viser

        self.server = viser.ViserServer(host=self.host, port=self.requested_port, verbose=self.verbose)
        self.server.gui.configure_theme(control_width="medium")
        self._build_status_gui()
        self.server.on_client_connect(self._on_connect)
        self.server.on_client_disconnect(self._on_disconnect)
        self._display_thread = threading.Thread(target=self._display_loop, name="physskin-display", daemon=True)
        self._display_thread.start()
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

    def stop(self) -> None:
        """Stop every thread, finish a running recording, stop the server. Idempotent."""
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
        if self._recorder is not None:
            try:
                self._recorder.stop()
            except Exception:  # noqa: BLE001
                traceback.print_exc()
            self._recorder = None
        if self._display_thread is not None:
            self._display_thread.join(5.0)
        if self.server is not None:
            self.server.stop()

    # ================================================================== errors and status
    def report_error(self, where: str, exc: BaseException, tb: str = "") -> None:
        """Show an exception in the page and the terminal; never raises."""
        msg = f"{type(exc).__name__}: {exc}"
        self.error_log.append(f"{where}: {msg}")
        print(f"[physskin-gs] error in {where}: {msg}", file=sys.stderr)
        if tb:
            print(tb, file=sys.stderr)
        try:
            md = self.gui.get("error")
            if md is not None:
                paused = self.live is not None and not self.live.worker.playing
                hint = "  \nThe simulation is paused; press Reset or Play to go on." if paused else ""
                md.content = f"**Error in {where}:** `{msg}`{hint}"
                md.visible = True
            btn = self.gui.get("play")
            if btn is not None and self.live is not None and not self.live.worker.playing:
                btn.label = "Play"
            now = time.monotonic()
            if self.server is not None and now - self._last_notify > 2.0:
                self._last_notify = now
                for client in self.server.get_clients().values():
                    client.add_notification(f"Error in {where}", msg, color="red", auto_close_seconds=8.0)
        except Exception:  # noqa: BLE001 - reporting must never fail
            traceback.print_exc()

    def _set_status(self, message: str, pct: Optional[float] = None) -> None:
        bar, text = self.gui.get("progress"), self.gui.get("status")
        if text is not None:
            text.content = message
        if bar is not None:
            if pct is None:
                bar.visible = False
            else:
                bar.visible = True
                bar.value = float(pct)

    def _build_status_gui(self) -> None:
        gui = self.server.gui
        title = self.path.name if self.path is not None else "scene"
        self.gui["title"] = gui.add_markdown(f"**PhysSkin-GS** — `{title}`")
        self.gui["status"] = gui.add_markdown("Loading…")
        self.gui["progress"] = gui.add_progress_bar(0.0, animated=True)
        self.gui["error"] = gui.add_markdown("", visible=False)

    # ================================================================== preparation
    def _prepare(self, config) -> Any:
        from physskin_gs.pipeline import prepare_animation  # type: ignore[attr-defined]

        set_thread_torch_threads(self._prepare_threads)  # a new thread inherits the last count set anywhere
        progress = TerminalProgress(self.progress_stream, gui_sink=lambda m, p: self._set_status(m, p))
        return prepare_animation(self.source_scene, config, progress=progress)

    def _prepare_and_activate(self) -> None:
        try:
            if self.config is None:
                from physskin_gs.pipeline import AnimationConfig  # type: ignore[attr-defined]

                self.config = AnimationConfig()
            anim = self._prepare(self.config)
        except Exception as exc:  # noqa: BLE001 - shown in the page; the server keeps running
            self.failed = f"{type(exc).__name__}: {exc}"
            self._set_status(f"**Preparation failed:** `{self.failed}`", None)
            self.report_error("preparation", exc, traceback.format_exc())
            return
        self._activate(anim)

    # ================================================================== activation (per AnimatedScene)
    def _activate(self, anim) -> None:
        # live default: the fast solver (Hessian factor reused, about 2x faster); the "fast solver" checkbox toggles it
        fast = self.gui.get("fast")
        _set_fast_solver(anim, True if fast is None else bool(fast.value))
        try:
            self._setup_live(anim)
        except Exception as exc:  # noqa: BLE001
            self.failed = f"{type(exc).__name__}: {exc}"
            self._set_status(f"**Viewer setup failed:** `{self.failed}`", None)
            self.report_error("viewer setup", exc, traceback.format_exc())
            return
        self._set_status(self._summary(), None)
        self.ready.set()

    def _summary(self) -> str:
        live = self.live
        if live is None:
            return ""
        n = int(live.base_rgb.shape[0])
        shown = len(live.live_idx)
        parts = [f"{n:,} Gaussians", f"{shown:,} moving shown live"]
        if len(live.static_idx):
            parts.append(f"{len(live.static_idx):,} static")
        parts.append(f"{len(live.handle_gizmos)} handles")
        return " · ".join(parts)

    def _setup_live(self, anim) -> None:
        server = self.server
        if self._recorder is not None:  # a recording belongs to one AnimatedScene
            self.stop_recording()
        scene = anim.scene
        rest = to_numpy(scene.means)
        n = rest.shape[0]
        moving = getattr(anim, "moving", None)
        moving = np.ones(n, bool) if moving is None else to_numpy(moving, dtype=bool).reshape(-1)
        moving_rows = np.nonzero(moving)[0]
        static_rows = np.nonzero(~moving)[0]
        sub = subsample_index(len(moving_rows), self.max_live)
        live_pos = None if sub is None else sub
        live_idx = moving_rows if sub is None else moving_rows[sub]
        extent = robust_extent(rest[moving_rows] if len(moving_rows) else rest)
        center = np.median(rest[moving_rows] if len(moving_rows) else rest, axis=0)
        up = np.asarray(to_numpy(getattr(anim, "up_vector", np.array([0.0, 0.0, 1.0]))), dtype=np.float64).reshape(3)
        up = up / (np.linalg.norm(up) or 1.0)
        s = display_scale(extent)
        base_rgb = sh_dc_to_rgb(to_numpy(scene.sh_dc))
        opac = to_numpy(scene.opacities).reshape(-1)

        worker = SimWorker(anim, realtime=self.realtime, on_error=self.report_error, split=self.split)
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
        )
        if len(live_idx) == n:
            live.live_sel = slice(None)  # every row: no gather per frame
        else:
            live.live_sel = live_idx
        import torch

        live.moving_rows_t = None if len(moving_rows) == n else torch.from_numpy(moving_rows.astype(np.int64))
        live.live_pos_t = None if live_pos is None else torch.from_numpy(np.asarray(live_pos, dtype=np.int64))
        live.packer = SplatPacker(len(live_idx))
        worker.start()  # publishes the rest state
        frame = worker.slot.get()

        old = self.live
        if old is not None:
            self._teardown_live(old)

        server.scene.set_up_direction(tuple(float(v) for v in up))
        dist = 1.25 * extent
        side = side_view_direction(rest[moving_rows] if len(moving_rows) else rest, up)
        cam_pos = center + dist * (0.8 * side + 0.35 * up) / np.linalg.norm(0.8 * side + 0.35 * up)
        server.initial_camera.position = tuple(float(v) for v in cam_pos)
        server.initial_camera.look_at = tuple(float(v) for v in center)
        server.initial_camera.up = tuple(float(v) for v in up)
        server.initial_camera.near = max(1e-3 * extent, 1e-6)
        server.initial_camera.far = max(100.0 * extent, 10.0)

        visible = self.display_mode == DISPLAY_CLIENT
        if len(static_rows):
            st = static_rows
            ssub = subsample_index(len(st), max(self.max_live * 5, 1_000_000), seed=1)
            if ssub is not None:
                st = st[ssub]
            c, v = to_wire(frame.means[st], frame.covars[st], s)
            live.static_node = server.scene.add_gaussian_splats(
                "/scene/static", c, v, base_rgb[st], opac[st, None], scale=1.0 / s, visible=visible
            )
        c, v = to_wire(frame.means[live_idx], frame.covars[live_idx], s)
        live.moving_node = server.scene.add_gaussian_splats(
            "/scene/moving", c, v, live.live_rgb, opac[live_idx, None], scale=1.0 / s, visible=visible
        )

        # Handle gizmos at the handles' weight-weighted centroids.
        hp = frame.handle_positions
        live.handle_offset = 0  # handle i is skinning-weight column i (the constant column comes last)
        lim = ((-1e9, 1e9),) * 3
        for i, p in enumerate(hp):
            g = server.scene.add_transform_controls(
                f"/handles/h{i}",
                scale=live.gizmo_scale,
                disable_rotations=True,
                disable_sliders=True,
                translation_limits=lim,
                position=tuple(float(x) for x in p),
                visible=self._show_handles,
            )
            color = tuple(int(255 * c) for c in PALETTE[(i + live.handle_offset) % len(PALETTE)])
            server.scene.add_icosphere(f"/handles/h{i}/marker", radius=0.025 * extent, color=color)
            g.on_update(self._make_handle_callback(live, i, g))
            live.handle_gizmos.append(g)

        with self._lock:
            self.live = live
        if self.display_mode != DISPLAY_CLIENT:  # renderers follow the new simulation
            self.set_display_mode(self.display_mode)
        self._build_controls_gui(anim)
        if self._field_choice != FIELD_NONE:
            self._apply_field(self._field_choice)
        if self.play_on_ready:
            worker.set_playing(True)
        self._sync_play_label()

    def _update_floor_grid(self, enabled: bool, height: float) -> None:
        """Draw the floor (a grid perpendicular to the up vector at ``height`` along it) or hide it."""
        live = self.live
        if live is None or self.server is None:
            return
        from .camera import rotmat_to_wxyz

        up = live.up
        a = np.cross(up, [1.0, 0.0, 0.0]) if abs(up[0]) < 0.9 else np.cross(up, [0.0, 1.0, 0.0])
        a /= np.linalg.norm(a)
        b = np.cross(up, a)
        R = np.stack([a, b, up], axis=1)  # grid's local x, y, z (normal) -> world
        pos = live.center - (float(live.center @ up) - float(height)) * up
        e = live.extent
        self.server.scene.add_grid(
            "/floor",
            width=3 * e,
            height=3 * e,
            plane="xy",
            cell_size=e / 10,
            section_size=e / 2,
            wxyz=tuple(rotmat_to_wxyz(R)),
            position=tuple(float(v) for v in pos),
            visible=bool(enabled),
        )

    def _teardown_live(self, live: LiveState) -> None:
        live.worker.stop()
        for g in live.handle_gizmos:
            try:
                g.remove()
            except Exception:  # noqa: BLE001
                pass
        for node in (live.moving_node, live.static_node):
            if node is not None:
                try:
                    node.remove()
                except Exception:  # noqa: BLE001
                    pass
        for cid, g in list(self._grabs.items()):
            try:
                g.remove()
            except Exception:  # noqa: BLE001
                pass
        self._grabs.clear()

    # ================================================================== interaction
    def _make_handle_callback(self, live: LiveState, index: int, gizmo):
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

    def grab_at_ray(self, client, origin, direction) -> Optional[np.ndarray]:
        """Click-to-grab: pick the object's nearest Gaussian along the ray and put a grab gizmo there.

        Returns the picked point (3,) or None when the ray misses the object.
        """
        live = self.live
        if live is None:
            return None
        frame = live.worker.slot.get()
        pts = frame.means[live.live_idx]
        pick = None
        for r in (0.01, 0.03, 0.08):
            pick = pick_point(pts, origin, direction, radius=r * live.extent)
            if pick is not None:
                break
        if pick is None:
            return None
        point = pick.point
        old = self._grabs.pop(client.client_id, None)
        if old is not None:
            live.worker.end_drag((client.client_id, "/grab"))
            try:
                old.remove()
            except Exception:  # noqa: BLE001
                pass
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
                if self._grabs.get(client.client_id) is g:
                    self._grabs.pop(client.client_id, None)
                    g.remove()

        g.on_update(on_update)
        self._grabs[client.client_id] = g
        return point

    def _on_click(self, event) -> None:
        if not self._click_enabled or self.live is None:
            return
        try:
            if event.ray_origin is None or event.ray_direction is None:
                return
            self.grab_at_ray(event.client, event.ray_origin, event.ray_direction)
        except Exception as exc:  # noqa: BLE001
            self.report_error("click-to-grab", exc, traceback.format_exc())

    def _on_connect(self, client) -> None:
        if self.display_mode != DISPLAY_CLIENT and self.live is not None:
            self._start_renderer(client)

    def _on_disconnect(self, client) -> None:
        cid = client.client_id
        live = self.live
        if live is not None:
            live.worker.end_drags_of(cid)
        self._grabs.pop(cid, None)
        with self._lock:
            r = self._renderers.pop(cid, None)
        if r is not None:
            r.stop(timeout=0.5)

    # ================================================================== server-rendered mode
    def _display_colors(self) -> Tuple[np.ndarray, np.ndarray]:
        """(N, 3) colours and (N,) opacities of every Gaussian as currently displayed (cached per change)."""
        live = self.live
        key = (id(live), id(live.live_rgb), self._field_choice)
        cached = self._colors_cache
        if cached is not None and cached[0] == key:
            return cached[1], cached[2]
        rgb = live.base_rgb
        if self._field_choice != FIELD_NONE:
            rgb = rgb.copy()
            rgb[live.live_idx] = live.live_rgb
        self._colors_cache = (key, rgb, live.opac)
        return rgb, live.opac

    def _start_renderer(self, client) -> None:
        with self._lock:
            if client.client_id in self._renderers or self._stop.is_set():
                return
            backend = "gsplat" if self.display_mode == DISPLAY_GSPLAT else "torch"
            fps = self.render_fps or (60.0 if backend == "gsplat" else 6.0)
            r = ClientRenderThread(
                client,
                self.live.worker.slot,
                self._display_colors,
                backend=backend,
                target_fps=fps,
                initial_height=720 if backend == "gsplat" else 160,
                max_height=2160 if backend == "gsplat" else 540,
                on_error=self.report_error,
            )
            self._renderers[client.client_id] = r
        client.camera.on_update(lambda _cam: r.camera_changed())
        r.start()

    def set_xray(self, on: bool) -> None:
        """Draw the object's splats at :data:`XRAY_OPACITY` of their opacity (client-side mode)."""
        self._xray = bool(on)
        live = self.live
        if live is not None:
            self._redraw(live)

    def set_display_mode(self, mode: str) -> None:
        """Switch between client-side splats and server-rendered images (all clients)."""
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
            for node in (live.moving_node, live.static_node):
                if node is not None:
                    node.visible = client_side
        if client_side:
            for client in self.server.get_clients().values():
                client.scene.set_background_image(None)
        else:
            for client in self.server.get_clients().values():
                self._start_renderer(client)

    # ================================================================== display loop
    def _display_loop(self) -> None:
        set_thread_torch_threads(self.display_threads)  # OpenMP thread counts are per thread
        version = 0
        last_handles = 0.0
        last_stats = 0.0
        while not self._stop.is_set():
            live = self.live
            if live is None:
                self._stop.wait(0.05)
                continue
            frame = live.worker.slot.wait_newer(version, 0.1)
            if frame is None or self.live is not live:
                continue
            version = frame.version
            try:
                if self.display_mode == DISPLAY_CLIENT:
                    self._push_splats(live, frame)
                now = time.monotonic()
                self.display_updates += 1
                self._display_times.append(now)
                self._display_times = self._display_times[-30:]
                if now - last_handles > 0.1:
                    last_handles = now
                    self._move_handle_gizmos(live, frame)
                if now - last_stats > 0.25:
                    last_stats = now
                    self._update_stats(live, frame)
            except Exception as exc:  # noqa: BLE001 - shown in the page, the loop goes on
                self.report_error("display update", exc, traceback.format_exc())
                self._stop.wait(0.5)

    def _push_splats(self, live: LiveState, frame: Frame) -> None:
        """Send ``frame``'s live splats: deform (split frames), pack into viser's layout, update the node."""
        rgba = live.live_rgba
        xray = self._xray
        if rgba is None or rgba[0] is not live.live_rgb or rgba[2] != xray:  # colours changed: repack once
            op = live.opac[live.live_idx] * (XRAY_OPACITY if xray else 1.0)
            rgba = live.live_rgba = (live.live_rgb, rgba_u32(live.live_rgb, op), xray)
            live.packer.set_rgba(rgba[1])
        pos = live.live_pos_t

        def pack(means, covars):  # runs while the deformer's buffers are valid (see Frame.with_moving)
            if pos is not None:
                means, covars = means[pos], covars[pos]
            return live.packer.pack(means, covars, live.s)

        buf = frame.with_moving(pack, live.moving_rows_t)
        live.moving_node.buffer = buf  # viser copies it: the packer may overwrite its buffer next frame

    def _move_handle_gizmos(self, live: LiveState, frame: Frame) -> None:
        dragged = live.worker.open_drag_names()
        hp = frame.handle_positions
        tol = 1e-4 * live.extent
        for i, g in enumerate(live.handle_gizmos):
            if i >= len(hp) or g.name in dragged:
                continue
            if np.linalg.norm(np.asarray(g.position) - hp[i]) > tol:
                g.position = tuple(float(x) for x in hp[i])

    def display_fps(self) -> float:
        """Splat updates sent per second over the last 30 updates (0.0 with fewer than two)."""
        t = self._display_times
        if len(t) < 2 or t[-1] <= t[0]:
            return 0.0
        return (len(t) - 1) / (t[-1] - t[0])

    def _update_stats(self, live: LiveState, frame: Frame) -> None:
        md = self.gui.get("stats")
        if md is None:
            return
        st = frame.stats
        energy = st.get("energy")
        if isinstance(energy, dict):  # the pipeline reports components (J)
            e_txt = f"energy **{_fmt(energy.get('total'))}** J (kinetic {_fmt(energy.get('kinetic'))}, " \
                    f"elastic {_fmt(energy.get('elastic'))})"
        else:
            e_txt = f"energy **{_fmt(energy)}**"
        lines = [
            f"display **{self.display_fps():.1f}** fps · sim **{st.get('steps_per_s', 0.0):.1f}** steps/s · "
            f"frame {frame.sim_frame}",
            f"**{st.get('ms', 0.0):.0f}** ms/step · Newton **{st.get('newton_iters', '-')}** · {e_txt}",
        ]
        with self._lock:
            rs = list(self._renderers.values())
        if rs:
            lines.append("render " + ", ".join(f"{r.last_ms:.0f} ms @ {r.height}px" for r in rs))
        if self._recorder is not None:
            lines.append(f"● recording: {self._recorder.written} frames")
        md.content = "  \n".join(lines)

    # ================================================================== skinning field display
    def _apply_field(self, choice: str) -> None:
        live = self.live
        self._field_choice = choice
        if live is None:
            return
        if choice == FIELD_NONE:
            live.live_rgb = live.base_rgb[live.live_idx]
            self._redraw(live)
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
                h = int(choice.split()[-1])
                live.live_rgb = weight_colors(w, h)

        live.worker.submit("skinning field display", compute, publish=True)

    def _redraw(self, live: LiveState) -> None:
        live.worker.submit("redraw", lambda a: None, publish=True)

    # ================================================================== GUI
    def _build_controls_gui(self, anim) -> None:
        if "play" in self.gui:
            self._refresh_controls(anim)
            return
        gui = self.server.gui
        cfg = self.config if self.config is not None else SimpleNamespace()
        g = self.gui
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
            g["E"] = gui.add_number("E (Pa)", float(getattr(cfg, "E", 2e4)), min=1.0, max=1e9, step=100.0)
            g["nu"] = gui.add_slider("nu", 0.0, 0.49, 0.01, float(getattr(cfg, "nu", 0.45)))
            g["density"] = gui.add_number("density (kg/m³)", float(getattr(cfg, "density", 100.0)), min=1e-3, max=1e5, step=1.0)
            g["damping"] = gui.add_slider("damping", 0.0, 1.0, 0.005, float(getattr(cfg, "damping", 0.02)))
        with gui.add_folder("Environment"):
            g["gravity"] = gui.add_checkbox("gravity", float(getattr(cfg, "gravity", 9.8) or 0.0) > 0)
            g["gravity_dir"] = gui.add_dropdown("gravity direction", GRAVITY_DIRS, initial_value=GRAVITY_DIRS[0])
            g["floor"] = gui.add_checkbox("floor", bool(getattr(cfg, "floor", True)))
            fh = getattr(cfg, "floor_height", None)
            if fh is None and hasattr(anim, "lowest_scene") and hasattr(anim, "height_scene"):
                fh = float(anim.lowest_scene) - 0.25 * float(anim.height_scene)  # the pipeline's default
            if fh is None:
                rest = to_numpy(anim.scene.means)
                fh = float((rest @ self.live.up).min()) if rest.size else 0.0
            g["floor_height"] = gui.add_number("floor height", float(fh), step=0.01)
            self._update_floor_grid(bool(g["floor"].value), float(fh))
            g["pin"] = gui.add_checkbox("pin region", getattr(cfg, "pin", None) is not None)
        with gui.add_folder("Skinning"):
            names = skinning_names(aliases=False)
            src = resolve_skinning(getattr(cfg, "skinning", None))
            g["skinning"] = gui.add_dropdown(
                "source", names, initial_value=src if src in names else names[0],
                disabled=self.source_scene is None,
            )
            g["field"] = gui.add_dropdown("show field", self._field_options(anim), initial_value=FIELD_NONE)
        with gui.add_folder("Display"):
            modes = [DISPLAY_CLIENT, DISPLAY_TORCH] + ([DISPLAY_GSPLAT] if cuda_available() else [])
            g["display"] = gui.add_dropdown("mode", modes, initial_value=self.display_mode)
            g["handles"] = gui.add_checkbox("show handles", True)
            g["xray"] = gui.add_checkbox("x-ray (see handles inside)", False)
            g["click"] = gui.add_checkbox("click to grab", True)
        with gui.add_folder("Record"):
            g["record_dir"] = gui.add_text("folder", str(self.record_dir))
            g["record_mp4"] = gui.add_checkbox("also mp4", False)
            g["record"] = gui.add_button("Start recording", color="red")
            g["record_status"] = gui.add_markdown("")

        self._wire_callbacks()
        self.server.scene.on_click()(self._on_click)

    def _field_options(self, anim) -> List[str]:
        """Dropdown entries: scene colours, argmax over handles, one entry per draggable handle."""
        live = self.live
        h = len(live.handle_gizmos) if live is not None else 0
        return [FIELD_NONE, FIELD_ALL] + [f"handle {i}" for i in range(h)]

    def _refresh_controls(self, anim) -> None:
        self.gui["field"].options = self._field_options(anim)
        self.gui["dt"].value = float(getattr(anim, "dt", self.gui["dt"].value))
        self._update_floor_grid(bool(self.gui["floor"].value), float(self.gui["floor_height"].value))

    def _sync_play_label(self) -> None:
        btn = self.gui.get("play")
        if btn is not None and self.live is not None:
            btn.label = "Pause" if self.live.worker.playing else "Play"

    def _submit(self, name: str, fn) -> None:
        live = self.live
        if live is not None:
            live.worker.submit(name, fn)

    def gravity_direction(self) -> np.ndarray:
        """Unit gravity direction chosen in the GUI (world axes), (3,) float64."""
        choice = self.gui["gravity_dir"].value
        if choice == GRAVITY_DIRS[0]:
            return -self.live.up
        axis = "xyz".index(choice[1])
        d = np.zeros(3)
        d[axis] = 1.0 if choice[0] == "+" else -1.0
        return d

    def _wire_callbacks(self) -> None:
        g = self.gui

        @g["play"].on_click
        def _(_e) -> None:
            live = self.live
            if live is None:
                return
            live.worker.set_playing(not live.worker.playing)
            g["error"].visible = False
            self._sync_play_label()

        @g["step"].on_click
        def _(_e) -> None:
            if self.live is not None:
                self.live.worker.set_playing(False)
                self.live.worker.step_once()
                self._sync_play_label()

        @g["reset"].on_click
        def _(_e) -> None:
            if self.live is not None:
                self.live.worker.reset()
                g["error"].visible = False

        def setter(name: str):
            def set_dt(a, v):
                a.dt = float(v)

            return {
                "dt": set_dt,
                "E": lambda a, v: a.set_material(E=float(v)),
                "nu": lambda a, v: a.set_material(nu=float(v)),
                "density": lambda a, v: a.set_material(density=float(v)),
                "damping": lambda a, v: a.set_damping(float(v)),
            }[name]

        for name in ("dt", "E", "nu", "density", "damping"):
            def make(name=name):
                fn = setter(name)

                def cb(_e) -> None:
                    v = g[name].value
                    self._submit(f"set {name}", lambda a: fn(a, v))

                return cb

            g[name].on_update(make())

        def apply_fast(_e=None) -> None:
            on = bool(g["fast"].value)
            self._submit("set solver", lambda a: _set_fast_solver(a, on))

        g["fast"].on_update(apply_fast)

        def apply_gravity(_e=None) -> None:
            on = bool(g["gravity"].value)
            mag = float(getattr(self.config, "gravity", 9.8) or 9.8) if on else 0.0
            d = self.gravity_direction()
            self._submit("set gravity", lambda a: a.set_gravity(mag, direction=d))

        g["gravity"].on_update(apply_gravity)
        g["gravity_dir"].on_update(apply_gravity)

        def apply_floor(_e=None) -> None:
            on, h = bool(g["floor"].value), float(g["floor_height"].value)
            self._submit("set floor", lambda a: a.set_floor(on, height=h))
            self._update_floor_grid(on, h)

        g["floor"].on_update(apply_floor)
        g["floor_height"].on_update(apply_floor)

        @g["pin"].on_update
        def _(_e) -> None:
            spec = getattr(self.config, "pin", None) or DEFAULT_PIN
            value = spec if g["pin"].value else None
            self._submit("set pin", lambda a: a.set_pin(value))

        @g["field"].on_update
        def _(_e) -> None:
            self._apply_field(g["field"].value)

        @g["skinning"].on_update
        def _(_e) -> None:
            self._switch_skinning(g["skinning"].value)

        @g["display"].on_update
        def _(_e) -> None:
            try:
                self.set_display_mode(g["display"].value)
            except Exception as exc:  # noqa: BLE001
                self.report_error("display mode", exc, traceback.format_exc())

        @g["handles"].on_update
        def _(_e) -> None:
            self._show_handles = bool(g["handles"].value)
            if self.live is not None:
                for gz in self.live.handle_gizmos:
                    gz.visible = self._show_handles

        @g["xray"].on_update
        def _(_e) -> None:
            self.set_xray(bool(g["xray"].value))

        @g["click"].on_update
        def _(_e) -> None:
            self._click_enabled = bool(g["click"].value)

        @g["record"].on_click
        def _(event) -> None:
            try:
                if self._recorder is None:
                    self.start_recording(client=event.client, mp4=bool(g["record_mp4"].value))
                else:
                    threading.Thread(target=self.stop_recording, daemon=True).start()
            except Exception as exc:  # noqa: BLE001
                self.report_error("recording", exc, traceback.format_exc())

    def _switch_skinning(self, source: str) -> None:
        if self.source_scene is None or self.config is None:
            return
        if resolve_skinning(getattr(self.config, "skinning", None)) == resolve_skinning(source):
            return
        self.config = dataclasses.replace(self.config, skinning=source)

        def run() -> None:
            self._set_status(f"Preparing skinning ({source})…", 0.0)
            try:
                anim = self._prepare(self.config)
                self._activate(anim)
            except Exception as exc:  # noqa: BLE001
                self._set_status(self._summary(), None)
                self.report_error(f"skinning switch to {source}", exc, traceback.format_exc())

        threading.Thread(target=run, name="physskin-reprepare", daemon=True).start()

    # ================================================================== recording
    def start_recording(self, client=None, mp4: bool = False, out_dir=None) -> Path:
        """Start writing every simulated step to a new folder; returns it."""
        live = self.live
        if live is None:
            raise OptionError("the scene is not ready yet")
        if self._recorder is not None:
            raise OptionError("already recording")
        parent = Path(self.gui["record_dir"].value) if "record_dir" in self.gui else self.record_dir
        out = Path(out_dir) if out_dir is not None else parent / datetime.now().strftime("rec_%Y%m%d_%H%M%S")
        video = self._video_renderer(client) if mp4 else None
        rec = Recorder(out, dt=float(getattr(live.anim, "dt", 0.03)), meta=self._sequence_meta(), video_renderer=video)
        self._recorder = rec
        live.worker.submit("start recording", lambda a: setattr(live.worker, "on_step", lambda a2, st: rec.add(a2)))
        if "record" in self.gui:
            self.gui["record"].label = "Stop recording"
            self.gui["record_status"].content = f"recording to `{out}`"
        return out

    def _sequence_meta(self) -> Dict[str, Any]:
        """sequence.json fields describing the current simulation (the headless export's keys where known)."""
        live = self.live
        anim = live.anim
        g = self.gui
        val = lambda k, d=None: g[k].value if k in g else d  # noqa: E731
        info = getattr(anim, "info", {}) or {}
        sh = anim.sh_handling() if hasattr(anim, "sh_handling") else None
        meta = {
            "source": str(self.path) if self.path is not None else getattr(anim.scene, "source", None),
            "up_axis": [float(v) for v in live.up],
            "scale_m_per_unit": getattr(anim, "sim_scale", None),
            "sh": sh,
            "skinning": getattr(anim, "skinning_source", None),
            "num_gaussians": int(live.base_rgb.shape[0]),
            "num_moving": int(info.get("num_moving", len(live.live_idx))),
            "material": {"E": val("E"), "nu": val("nu"), "density": val("density")},
            "gravity": (float(getattr(self.config, "gravity", 9.8) or 9.8) if val("gravity", True) else 0.0),
            "gravity_direction": [float(v) for v in self.gravity_direction()] if "gravity_dir" in g else None,
            "damping": val("damping"),
            "floor": float(val("floor_height")) if val("floor", False) else None,
            "pin": (getattr(self.config, "pin", None) or DEFAULT_PIN) if val("pin", False) else None,
            "select": getattr(self.config, "select", None),
            "script": None,
            "writer": "physskin-gs animate viewer (live recording)",
        }
        return meta

    def stop_recording(self) -> Optional[Path]:
        """Stop the current recording, write sequence.json (and the video); returns its folder."""
        rec = self._recorder
        live = self.live
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
        self._recorder = None
        out = rec.stop()
        msg = f"wrote {rec.written} frames to `{out}`"
        if rec.video_path is not None:
            msg += f" and `{rec.video_path.name}`"
        if rec.error:
            msg += f" (problem: {rec.error})"
        if "record" in self.gui:
            self.gui["record"].label = "Start recording"
            self.gui["record_status"].content = msg
        return out

    def _video_renderer(self, client):
        live = self.live
        cam = None
        if client is not None:
            try:
                c = client.camera
                cam = CameraState(tuple(c.wxyz), tuple(c.position), float(c.fov), float(c.aspect))
            except Exception:  # noqa: BLE001
                cam = None
        if cam is None:
            from .camera import look_at_wxyz

            pos = np.asarray(self.server.initial_camera.position, dtype=np.float64)
            cam = CameraState(tuple(look_at_wxyz(pos, live.center, live.up)), tuple(pos), 0.9, 4 / 3)
        h = 320
        w = int(round(h * cam.aspect / 16)) * 16 or 16
        backend = "gsplat" if cuda_available() else "torch"
        rgb, opac = self._display_colors()

        def render(g) -> np.ndarray:
            f = Frame(0, 0, snapshot_tensor(g.means), snapshot_tensor(g.covars), np.zeros((0, 3), np.float32))
            return render_frame(f, cam, w, h, rgb, opac, backend)

        return render


def _fmt(v) -> str:
    if v is None:
        return "-"
    try:
        return f"{float(v):.3g}"
    except (TypeError, ValueError):
        return str(v)


# ------------------------------------------------------------------------------------------- CLI entry
def run_viewer(args) -> int:
    """``physskin-gs animate PATH`` without ``--headless``: serve the live viewer until Ctrl-C.

    ``args`` has ``.path``, ``.host`` (default 127.0.0.1), ``.port`` (default 8080) and the AnimationConfig
    options. The path is validated (exists, loads) before the server starts.

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
    app.start()
    print(f"[physskin-gs] viewer running at {app.url}  (Ctrl-C to stop)", flush=True)
    try:
        _serve_until_interrupt(app)
    except KeyboardInterrupt:
        print("\n[physskin-gs] shutting down", file=sys.stderr, flush=True)
    finally:
        app.stop()
    return 0


def _serve_until_interrupt(app: ViewerApp) -> None:
    """Block the main thread until Ctrl-C (KeyboardInterrupt) or until the app is stopped."""
    while not app._stop.wait(0.5):
        pass
