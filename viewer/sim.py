"""The live simulation loop: one worker thread owns the AnimatedScene.

Every call into the AnimatedScene (step, drags, material changes, reset) happens on the worker thread, so the
physics code needs no locks. The one exception is the deformation of the Gaussians for display: when the
AnimatedScene supports it, a frame carries only the step's handle transforms and the displaying thread deforms
(:class:`SplitDeformSource`, which serialises every use of the shared deformer). GUI and network callbacks
only *post* commands. A drag's pointer path is kept and replayed in simulated time (:attr:`SimWorker.REPLAY_TAU`):
a simulation slower than real time sees the gesture at the speed it was made, not the pointer's jump since its last
step (which made every slow step slower: a push of one body into another stalled); paused or not in real time, the
latest target wins, so a fast mouse never builds a backlog. After
each step the worker publishes a :class:`Frame` into a :class:`LatestSlot`, which keeps only the newest frame:
display and render threads that fall behind skip frames instead of queueing them.

The simulation advances at a fixed ``dt`` per step. With ``realtime=True`` steps are paced to wall-clock time
(one step per ``dt`` seconds, or slower when a step takes longer); with ``realtime=False`` it runs flat out.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections import deque
from contextlib import contextmanager, nullcontext
from typing import Any, Callable, Deque, Dict, Hashable, Optional, Tuple

import numpy as np


def to_numpy(x, dtype=np.float32) -> np.ndarray:
    """torch tensor / array-like -> contiguous numpy array of ``dtype`` (detached, on the CPU)."""
    if hasattr(x, "detach"):
        x = x.detach()
        if getattr(x, "device", None) is not None and x.device.type != "cpu":
            x = x.cpu()
        x = x.numpy()
    return np.ascontiguousarray(np.asarray(x, dtype=dtype))


def _takes_view_rotations(anim) -> bool:
    """Whether ``anim.deformed_gaussians`` accepts ``view_rotations=`` (the display needs no SH rotations)."""
    import inspect

    try:
        return "view_rotations" in inspect.signature(anim.deformed_gaussians).parameters
    except (TypeError, ValueError):
        return False


def snapshot_tensor(x):
    """A private copy of ``x`` (torch tensor, detached, same device; numpy/array-like -> CPU tensor).

    The AnimatedScene may reuse its output buffers in place; published frames must not alias them.
    """
    import torch

    if isinstance(x, torch.Tensor):
        return x.detach().clone()
    return torch.tensor(np.asarray(x))



def viser_wakeup_race(exc: BaseException) -> bool:
    """Whether ``exc`` is viser's cross-thread wake-up race: a message queued from a thread other than the server's
    event loop (our display and simulation threads) sets the buffer's ``asyncio.Event`` there, which can meet the
    loop iterating the event's waiters ("deque mutated during iteration"). The message is already in the buffer
    when that is raised (viser's ``AsyncMessageBuffer.push`` appends, then wakes), and the next message wakes the
    loop: nothing is lost, the update need not be reported (seen once in ~1200 browser-test updates under load)."""
    return isinstance(exc, RuntimeError) and "mutated during iteration" in str(exc)

class Frame:
    """One published simulation state, safe to read from any thread.

    A frame holds either the deformed Gaussians themselves (``means_t``/``covars_t`` given: the *eager* path,
    used for AnimatedScenes the viewer cannot deform itself) or only the small simulation state ``state`` (the
    handle transforms) plus the :class:`SplitDeformSource` that deforms the Gaussians for it on demand, on the
    thread that asks (the *split* path: the simulation thread never deforms, so stepping and deformation run on
    two cores at once).

    Attributes:
        version: increases by one per publication.
        sim_frame: the AnimatedScene's frame counter.
        handle_positions: (Hd, 3) float32 numpy, draggable handle centres, world units.
        stats: the last step's stats dict (ms, newton_iters, energy, ...) plus ``steps_per_s``.
        state: the split path's simulation state (``(H, 3, 4)`` handle transforms), else None.
        means_t: (N, 3) torch float tensor, deformed centres, world units (a private copy; CPU or CUDA; computed
            on first use on the split path).
        covars_t: (N, 3, 3) torch float tensor, deformed covariances, world units squared (private copy).
        means, covars: float32 numpy views of the above, converted on first use (so a GPU run that only
            renders on the server never copies them to the host).
    """

    def __init__(self, version, sim_frame, means_t, covars_t, handle_positions, stats=None, *,
                 state=None, source: "Optional[SplitDeformSource]" = None) -> None:
        self.version = int(version)
        self.sim_frame = int(sim_frame)
        self._means_t = means_t
        self._covars_t = covars_t
        self.handle_positions = handle_positions
        self.stats: Dict[str, float] = dict(stats or {})
        self.state = state
        self.source = source
        self._np: Dict[str, np.ndarray] = {}
        self._full_lock = threading.Lock()

    @property
    def split(self) -> bool:
        """True when the Gaussians are deformed on demand from ``state`` (see the class docstring)."""
        return self.source is not None

    def _full(self) -> None:
        with self._full_lock:
            if self._means_t is None and self.source is not None:
                self._means_t, self._covars_t = self.source.full(self.state)

    @property
    def means_t(self):
        """(N, 3) float32 torch tensor, deformed centres (every Gaussian, static ones included)."""
        if self._means_t is None:
            self._full()
        return self._means_t

    @property
    def covars_t(self):
        """(N, 3, 3) float32 torch tensor, deformed covariances (every Gaussian)."""
        if self._covars_t is None:
            self._full()
        return self._covars_t

    def with_moving(self, fn: Callable[..., Any], moving_rows=None, gradients: bool = False) -> Any:
        """``fn(means (M, 3), covars (M, 3, 3))`` on the moving Gaussians' deformed state; returns its result.

        On the split path this deforms on the calling thread and the tensors are the deformer's own buffers:
        they are valid only inside ``fn`` (copy what must outlive it). On the eager path they are rows
        ``moving_rows`` (None: every row) of ``means_t``/``covars_t``.

        With ``gradients`` the call is ``fn(means, covars, F)``: F (M, 3, 3) float32, the deformation gradients
        at the centres, from the same deformer pass on the split path (when the deformer offers them), else None
        (the eager path, or an already deformed frame).
        """
        src = self.source
        if src is not None:
            if self._means_t is None:
                return src.run_moving(self.state, fn, gradients=gradients)
            moving_rows = None if src.all_moving else src.moving_idx  # already deformed: reuse it
        m, c = self.means_t, self.covars_t
        if moving_rows is not None:
            m, c = m[moving_rows], c[moving_rows]
        return fn(m, c, None) if gradients else fn(m, c)

    def _numpy(self, key: str, t) -> np.ndarray:
        arr = self._np.get(key)
        if arr is None:
            arr = to_numpy(t)
            self._np[key] = arr
        return arr

    @property
    def means(self) -> np.ndarray:
        """(N, 3) float32 deformed means in scene units (numpy copy of ``means_t``, made once)."""
        return self._numpy("means", self.means_t)

    @property
    def covars(self) -> np.ndarray:
        """(N, 3, 3) float32 deformed covariances in scene units^2 (numpy copy of ``covars_t``, made once)."""
        return self._numpy("covars", self.covars_t)


class SplitDeformSource:
    """Deforms an AnimatedScene's Gaussians for a published simulation state, off the simulation thread.

    The simulation thread only records the handle transforms ``Z = anim.handle_transforms_scene()`` (H, 3, 4)
    after each step (:meth:`snapshot`, well under a millisecond); whichever thread displays a frame applies them
    with the scene's :class:`~physskin_gs.deform.GaussianDeformer` (:meth:`run_moving`). This is exactly what
    ``AnimatedScene.deformed_gaussians()`` computes (``deformer.deform(handle_transforms_scene())``, tested), but
    the step of frame k+1 overlaps the deformation and upload of frame k.

    The deformer's output buffers are shared: every use of them -- this class's, and the simulation thread's
    own calls into the AnimatedScene that deform (the recorder hook, commands), which :class:`SimWorker` wraps
    in :meth:`sim_side` -- holds :attr:`lock`. ``sim_side`` also drops the AnimatedScene's cached deformation,
    which a display-side ``deform`` leaves stale.

    When the AnimatedScene offers ``display_deformer()`` (a deformer of its own for the display, sharing the
    precomputed factors), that one is used and the simulation thread never waits for the display.

    Args:
        anim: the AnimatedScene; see :meth:`supported`.
    """

    def __init__(self, anim) -> None:
        import torch

        self.anim = anim
        self.lock = threading.Lock()
        factory = getattr(anim, "display_deformer", None)
        self.private = callable(factory)
        self.deformer = factory() if self.private else anim.deformer
        moving = to_numpy(anim.moving, dtype=bool).reshape(-1)
        self.moving_idx = torch.from_numpy(np.nonzero(moving)[0].astype(np.int64))
        self.num_moving = int(self.moving_idx.numel())
        self.all_moving = self.num_moving == moving.shape[0]
        self._rest = None  # (means (N, 3), covars (N, 3, 3)) float32, for the static rows of full()
        self._F = None  # (M, 3, 3) float32 deformation gradients (run_moving with gradients)

    @staticmethod
    def supported(anim) -> bool:
        """True when ``anim`` exposes what the split path needs: ``handle_transforms_scene()``, ``moving``,
        ``scene`` and a ``deformer`` (or ``display_deformer()``) whose ``deform(Z)`` returns (means, covars) of
        the moving Gaussians."""
        d = getattr(anim, "deformer", None)
        return (
            callable(getattr(anim, "handle_transforms_scene", None))
            and getattr(anim, "moving", None) is not None
            and getattr(anim, "scene", None) is not None
            and (callable(getattr(anim, "display_deformer", None)) or callable(getattr(d, "deform", None)))
        )

    def snapshot(self):
        """The current simulation state to deform later: (H, 3, 4) handle transforms (a private copy). Sim thread."""
        return self.anim.handle_transforms_scene().detach().clone()

    def run_moving(self, state, fn: Callable[..., Any], gradients: bool = False) -> Any:
        """Deform the moving Gaussians for ``state`` and return ``fn(means (M, 3), covars (M, 3, 3))``, or with
        ``gradients`` ``fn(means, covars, F)``: F (M, 3, 3) float32 from the same pass, or None when the deformer
        cannot give it (see :meth:`Frame.with_moving`).

        The tensors are the deformer's float32 buffers, valid only inside ``fn``; any thread.
        """
        with self.lock:
            if not gradients:
                means, covars = self.deformer.deform(state)
                return fn(means, covars)
            from physskin_gs.deform import GaussianDeformer

            F = None
            if isinstance(self.deformer, GaussianDeformer) or getattr(self.deformer, "GIVES_GRADIENTS", False):
                # F in the same pass (several bodies' deformer too; a test fake cannot give it)
                import torch

                F, n = self._F, int(self.deformer.N)  # the deformer holds the moving rows
                if F is None or F.shape[0] != n:
                    F = self._F = torch.empty(n, 3, 3, dtype=torch.float32)
                means, covars = self.deformer.deform(state, gradients=F)
            else:
                means, covars = self.deformer.deform(state)
            return fn(means, covars, F)

    def full(self, state):
        """(means (N, 3), covars (N, 3, 3)) float32 private tensors of every Gaussian for ``state`` (static rows at
        rest), as ``anim.deformed_gaussians()`` returns them."""
        if self._rest is None:
            from physskin_gs.deform import rest_covariances  # GaussianScene.covariances(), compiled

            sc = self.anim.scene
            self._rest = (sc.means.detach().float(), rest_covariances(sc.quats, sc.log_scales))
        rest_m, rest_c = self._rest

        def scatter(m, c):
            if self.all_moving:
                return m.detach().clone(), c.detach().clone()
            mm, cc = rest_m.clone(), rest_c.clone()
            mm[self.moving_idx] = m.to(mm.dtype)
            cc[self.moving_idx] = c.to(cc.dtype)
            return mm, cc

        return self.run_moving(state, scatter)

    @contextmanager
    def sim_side(self):
        """Context for simulation-thread code that may deform through the AnimatedScene (exclusive with
        :meth:`run_moving` when the deformer is shared; drops the AnimatedScene's cached deformation)."""
        if self.private:
            yield
            return
        with self.lock:
            if hasattr(self.anim, "_cache_key"):
                self.anim._cache_key = None  # the display may have overwritten the cached buffers
            try:
                yield
            finally:
                if hasattr(self.anim, "_cache_key"):
                    self.anim._cache_key = None


def default_threads() -> Tuple[int, int]:
    """(simulation, display) torch intra-op threads for this machine.

    The simulation step is many small kernels and gains nothing from a second thread (measured), while two
    OpenMP teams on two cores fight for them (a 2-thread kernel stalls whenever the other thread holds a core).
    So: 1 thread for the simulation and the rest (at least 1, at most 8) for the display thread's deformation.
    """
    from physskin_gs.physics.simulator import usable_cores

    cores = usable_cores()
    return 1, max(1, min(8, cores - 1))


def set_thread_torch_threads(n: Optional[int]) -> None:
    """``torch.set_num_threads(n)`` for the calling thread (OpenMP keeps the count per thread); None: no-op."""
    if n is None or n <= 0:
        return
    try:
        import torch

        if torch.get_num_threads() != n:
            torch.set_num_threads(int(n))
    except Exception:  # noqa: BLE001 - a tuning knob, never fatal
        pass


class LatestSlot:
    """A one-element mailbox: ``put`` replaces the content, ``wait_newer`` blocks (bounded) for a newer one."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._item: Optional[Frame] = None
        self._version = 0

    def put(self, item: Frame) -> None:
        """Replace the content with ``item`` (older frames are dropped, not queued) and wake waiters."""
        with self._cond:
            self._item = item
            self._version = item.version
            self._cond.notify_all()

    def get(self) -> Optional[Frame]:
        """The current frame without waiting, or None before the first ``put``."""
        with self._cond:
            return self._item

    def wait_newer(self, version: int, timeout: float) -> Optional[Frame]:
        """The current frame if its version is > ``version``, waiting at most ``timeout`` s; else None."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._version <= version:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._cond.wait(remaining)
            return self._item


DragKey = Tuple[Hashable, str]  # (client id, gizmo name)


class SimWorker:
    """Owns an AnimatedScene and steps it in a background thread.

    Args:
        anim: an object with the AnimatedScene interface (``step``, ``reset``, ``deformed_gaussians``,
            ``handle_positions``, ``start_drag``, ``start_handle_drag``, ``update_drag``, ``end_drag``, ``dt``).
        realtime: pace steps to wall-clock time (one step per ``dt`` seconds).
        on_error: called as ``on_error(where: str, exc: BaseException, tb: str)`` from the worker thread when a
            command or a step raises; the worker pauses itself and keeps running.
        on_step: called as ``on_step(anim, stats)`` on the worker thread after each step (recording hook).
        split: deform off the simulation thread (frames carry only the handle transforms, see
            :class:`SplitDeformSource`): True, False, or None for "when the AnimatedScene supports it".
        threads: torch intra-op threads of the simulation thread (None: :func:`default_threads`).
    """

    #: drags follow the pointer's path in simulated time: each real-time step moves a drag's replay of the path on by
    #: its dt x (1 + lag / REPLAY_TAU), lag being how many wall seconds the replay is behind the pointer. A
    #: simulation that keeps up follows the pointer as before; one that falls behind sees the gesture at the speed it
    #: was made, catching up smoothly, instead of the pointer's jump since its last step: a push of the table
    #: capture's crate into the cow (0.97 units in 3 s) stepped at 1.5-3 s a step with 100-160 Newton iterations as
    #: each slow step saw a longer jump, a feedback loop (2026-12-07)
    REPLAY_TAU = 0.5
    #: this many steps in a row that the solver could not take (the state kept, the velocity zeroed: stats
    #: ``failed``) restart the simulation from rest, with a notice: a cow flattened at E 100 Pa and then given
    #: 240000 Pa stayed flat, stepping at 3-5 steps/s with 80-166 Newton iterations, until a Reset
    STUCK_STEPS = 6

    def __init__(
        self,
        anim,
        *,
        realtime: bool = True,
        on_error: Optional[Callable[[str, BaseException, str], None]] = None,
        on_notice: Optional[Callable[[str, str], None]] = None,
        on_step: Optional[Callable[[Any, Dict[str, float]], None]] = None,
        split: Optional[bool] = None,
        threads: Optional[int] = None,
    ) -> None:
        self.anim = anim
        if split is None:
            split = SplitDeformSource.supported(anim)
        self.source: Optional[SplitDeformSource] = SplitDeformSource(anim) if split else None
        self.threads = default_threads()[0] if threads is None else int(threads)
        sim = getattr(anim, "sim", None)
        if sim is not None and hasattr(sim, "hessian_threads"):
            sim.hessian_threads = self.threads  # its assembly GEMM too: the display thread holds the other core
        self._vr_kw = _takes_view_rotations(anim)
        self.realtime = realtime
        self.on_error = on_error
        self.on_notice = on_notice
        self.on_step = on_step
        self._failed_run = 0  # steps in a row the solver could not take (STUCK_STEPS)
        self.slot = LatestSlot()
        self.playing = False
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._cmds: Deque[Tuple[str, Callable[[Any], Any]]] = deque()
        self._steps_pending = 0
        # each open drag's pointer path [(wall time s, target (3,))] and how far along it (wall time) the simulation
        # has replayed it (:meth:`_drag_targets`); a released drag ends once its replay reaches its release
        self._paths: Dict[DragKey, Deque[Tuple[float, np.ndarray]]] = {}
        self._replay: Dict[DragKey, float] = {}
        self._release_at: Dict[DragKey, float] = {}
        self._last_target_sent: set = set()  # released drags whose replay reached the release: ended after one step
        self._open: Dict[DragKey, bool] = {}  # drags begun and not ended, as seen by the callers
        self._drag_ids: Dict[DragKey, Any] = {}  # sim-thread only: key -> anim drag id
        self._version = 0
        self._step_times: Deque[float] = deque(maxlen=30)
        self._thread: Optional[threading.Thread] = None
        self.last_stats: Dict[str, float] = {}
        self.errors = 0
        self.handle_period = 0.1  # s between handle_positions() refreshes during play
        self._hp = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "SimWorker":
        """Publish the rest state and start the simulation thread; returns self."""
        self._publish()  # the rest state, so displays have something before the first step
        self._thread = threading.Thread(target=self._run, name="physskin-sim", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Ask the thread to stop and join it for at most ``timeout`` seconds (no error if it is still running)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # ------------------------------------------------------------------ commands (any thread)
    def submit(self, name: str, fn: Callable[[Any], Any], publish: bool = False) -> None:
        """Run ``fn(anim)`` on the worker thread before the next step; with ``publish`` a frame follows it."""
        with self._lock:
            self._cmds.append((name, fn))
            if publish:
                self._cmds.append(("publish", lambda a: self._publish()))
        self._wake.set()

    def set_playing(self, playing: bool) -> None:
        """Run steps continuously (True) or pause (False); any thread."""
        self.playing = bool(playing)
        self._wake.set()

    def step_once(self, n: int = 1) -> None:
        """Queue ``n`` single steps (used while paused); any thread."""
        with self._lock:
            self._steps_pending += int(n)
        self._wake.set()

    def reset(self) -> None:
        """End every drag (those still replaying a release too), reset the AnimatedScene to rest, publish the rest
        state."""
        with self._lock:
            keys = set(self._open) | set(self._paths)
        for k in keys:
            self.end_drag(k, finish=False)
        self.submit("reset", lambda a: a.reset(), publish=True)

    def begin_handle_drag(self, key: DragKey, handle: int, target=None) -> None:
        """Start pulling handle ``handle`` (index into ``handle_positions()``) toward coalesced targets."""
        self._begin(key, lambda a: a.start_handle_drag(int(handle)), target)

    def begin_point_drag(self, key: DragKey, point, radius: Optional[float] = None) -> None:
        """Start pulling the Gaussians near ``point`` (3,) (world units) toward coalesced targets."""
        p = np.asarray(point, dtype=np.float64).copy()
        self._begin(key, lambda a: a.start_drag(p, radius=radius) if radius is not None else a.start_drag(p), p)

    def _begin(self, key: DragKey, start: Callable[[Any], Any], target) -> None:
        with self._lock:
            if self._open.get(key):
                return
            self._open[key] = True
            now = time.perf_counter()
            self._release_at.pop(key, None)  # a release still replaying under this key is cut short
            self._last_target_sent.discard(key)
            self._replay[key] = now
            self._paths[key] = deque()
            if target is not None:
                self._paths[key].append((now, np.asarray(target, dtype=np.float64).copy()))

        def run(a, key=key):
            old = self._drag_ids.pop(key, None)
            if old is not None:
                a.end_drag(old)
            self._drag_ids[key] = start(a)

        self.submit(f"start drag {key[1]}", run)

    def move_drag(self, key: DragKey, target) -> None:
        """Move the target (3,) of an open drag (ignored when the drag is not open). The simulation follows the
        pointer's path in simulated time (:data:`REPLAY_TAU`)."""
        with self._lock:
            if not self._open.get(key):
                return
            self._paths[key].append((time.perf_counter(), np.asarray(target, dtype=np.float64).copy()))
        self._wake.set()

    def end_drag(self, key: DragKey, finish: bool = True) -> None:
        """Release a drag. Its spring is removed before the next step, or, with ``finish`` while playing in real
        time, once the simulation has replayed the pointer's path up to the release (:data:`REPLAY_TAU`): a
        simulation behind the pointer completes the gesture instead of letting go halfway."""
        with self._lock:
            was_open = self._open.pop(key, False)
            if not was_open and key not in self._release_at:
                return
            if was_open and finish and self.realtime and self.playing and self._paths.get(key):
                self._release_at[key] = time.perf_counter()
                self._wake.set()
                return
            self._drop_path(key)

        def run(a, key=key):
            did = self._drag_ids.pop(key, None)
            if did is not None:
                a.end_drag(did)

        self.submit(f"end drag {key[1]}", run)

    def end_drags_of(self, client_id: Hashable) -> int:
        """End every open drag of ``client_id`` (a closed tab) at once, those still replaying a release too;
        returns how many were open."""
        with self._lock:
            keys = [k for k in self._open if k[0] == client_id]
            releasing = [k for k in self._release_at if k[0] == client_id]
        for k in keys + releasing:
            self.end_drag(k, finish=False)
        return len(keys)

    def open_drags(self) -> int:
        """Number of drags open on the worker (all clients)."""
        with self._lock:
            return len(self._open)

    def open_drag_names(self) -> set:
        """Gizmo names with an open drag (any client)."""
        with self._lock:
            return {k[1] for k in self._open}

    def active_anim_drags(self) -> int:
        """Drags the AnimatedScene currently holds (as started by this worker)."""
        return len(self._drag_ids)

    # ------------------------------------------------------------------ worker thread
    def _watch_failures(self, stats: Dict[str, Any]) -> None:
        """Sim thread: after :data:`STUCK_STEPS` steps in a row that failed (``stats["failed"]``), restart from rest
        (drags ended, as :meth:`reset`) and say so through ``on_notice(title, text)``."""
        self._failed_run = self._failed_run + 1 if stats.get("failed") else 0
        if self._failed_run < self.STUCK_STEPS:
            return
        self._failed_run = 0
        self.reset()
        if self.on_notice is not None:
            try:
                self.on_notice("restarted from rest", f"the solver could not take {self.STUCK_STEPS} steps in a row "
                               "from the object's state (a much stiffer material after a large deformation, or an "
                               "extreme setting), so the simulation restarted from rest with the current settings")
            except Exception:  # noqa: BLE001 - the notice must never kill the loop
                traceback.print_exc()

    def _report(self, where: str, exc: BaseException) -> None:
        self.errors += 1
        tb = traceback.format_exc()
        if self.on_error is not None:
            try:
                self.on_error(where, exc, tb)
            except Exception:  # noqa: BLE001 - the reporter must never kill the loop
                traceback.print_exc()

    def _drop_path(self, key: DragKey) -> None:
        """Forget a drag's pointer path and replay state (lock held)."""
        self._paths.pop(key, None)
        self._replay.pop(key, None)
        self._release_at.pop(key, None)
        self._last_target_sent.discard(key)

    def _drag_targets(self) -> Tuple[Dict[DragKey, np.ndarray], list]:
        """({key: target (3,)} at each drag's replay time, the released keys whose replay has reached their
        release). The target is the pointer's path interpolated linearly between the samples around the replay
        time; paused, stepping singly or not in real time, the replay is the pointer's latest position."""
        now = time.perf_counter()
        live = self.realtime and self.playing
        targets, due = {}, []
        with self._lock:
            for key, path in self._paths.items():
                r = self._replay.get(key, now) if live else now
                self._replay[key] = r
                while len(path) >= 2 and path[1][0] <= r:  # samples the replay has passed: one kept before r
                    path.popleft()
                if path:
                    (t0, p0) = path[0]
                    if len(path) >= 2 and r > t0:
                        t1, p1 = path[1]
                        targets[key] = p0 + ((r - t0) / (t1 - t0)) * (p1 - p0)
                    else:
                        targets[key] = p0
                rel = self._release_at.get(key)
                if rel is not None and r >= rel:  # the last target: one step with it, then the drag ends
                    if key in self._last_target_sent:
                        due.append(key)
                    self._last_target_sent.add(key)
        return targets, due

    def _advance_replay(self, dt: float) -> None:
        """After a real-time step of ``dt`` simulated seconds: every drag's replay moves on by dt x (1 + lag /
        REPLAY_TAU), lag being how far (wall seconds) it is behind now, and never past now."""
        now = time.perf_counter()
        with self._lock:
            for key in self._paths:
                r = self._replay.get(key, now)
                self._replay[key] = min(now, r + dt * (1.0 + max(0.0, now - r) / self.REPLAY_TAU))

    def _process_commands(self) -> None:
        while True:
            with self._lock:
                if not self._cmds:
                    break
                name, fn = self._cmds.popleft()
            try:
                with self._sim_side():
                    fn(self.anim)
            except Exception as exc:  # noqa: BLE001
                self.playing = False
                self._report(name, exc)
        targets, due = self._drag_targets()
        for key, target in targets.items():
            if key not in self._drag_ids:
                continue
            try:
                self.anim.update_drag(self._drag_ids[key], target)
            except Exception as exc:  # noqa: BLE001
                self._report(f"update drag {key[1]}", exc)
                with self._lock:
                    self._paths.pop(key, None)
        for key in due:  # a released drag whose replay has reached its release
            with self._lock:
                if key not in self._release_at:  # begun again meanwhile
                    continue
                self._drop_path(key)
            did = self._drag_ids.pop(key, None)
            if did is not None:
                try:
                    self.anim.end_drag(did)
                except Exception as exc:  # noqa: BLE001
                    self._report(f"end drag {key[1]}", exc)

    def _sim_side(self):
        """Context for worker-thread code that may deform through the AnimatedScene (see SplitDeformSource)."""
        return self.source.sim_side() if self.source is not None else nullcontext()

    def _publish(self, stats: Optional[Dict[str, float]] = None) -> None:
        a = self.anim
        src = self.source
        if src is not None:
            state, means, covars = src.snapshot(), None, None  # deformed later, by whoever displays it
        else:
            g = a.deformed_gaussians(view_rotations=False) if self._vr_kw else a.deformed_gaussians()
            state, means, covars = None, snapshot_tensor(g.means), snapshot_tensor(g.covars)
        now = time.perf_counter()
        if self._hp is None or now - self._hp[0] > self.handle_period or stats is None:
            hp = a.handle_positions()  # only the gizmos use these: refreshed at most every handle_period s
            hp = to_numpy(hp).reshape(-1, 3).copy() if hp is not None else np.zeros((0, 3), np.float32)
            self._hp = (now, hp)
        hp = self._hp[1]
        self._version += 1
        st = dict(self.last_stats if stats is None else stats)
        self.slot.put(Frame(self._version, int(getattr(a, "frame", 0)), means, covars, hp, st, state=state, source=src))

    def _run(self) -> None:
        set_thread_torch_threads(self.threads)
        next_t = time.perf_counter()
        while not self._stop.is_set():
            self._process_commands()
            with self._lock:
                single = self._steps_pending > 0
                if single:
                    self._steps_pending -= 1
            if not (self.playing or single):
                self._wake.wait(0.05)
                self._wake.clear()
                next_t = time.perf_counter()
                continue
            try:
                t0 = time.perf_counter()
                stats = dict(self.anim.step(1) or {})
                t1 = time.perf_counter()
                stats.setdefault("ms", (t1 - t0) * 1e3)
                self._step_times.append(t1)
                if len(self._step_times) >= 2:
                    span = self._step_times[-1] - self._step_times[0]
                    stats["steps_per_s"] = (len(self._step_times) - 1) / span if span > 0 else 0.0
                self.last_stats = stats
                self._watch_failures(stats)
                if self.realtime and self.playing:
                    self._advance_replay(float(getattr(self.anim, "dt", 0.03) or 0.03))
                if self.on_step is not None:
                    with self._sim_side():
                        self.on_step(self.anim, stats)
                self._publish(stats)
            except Exception as exc:  # noqa: BLE001 - shown in the page; the server keeps running
                self.playing = False
                self._report("simulation step", exc)
                continue
            if self.realtime and self.playing:
                dt = float(getattr(self.anim, "dt", 0.03) or 0.03)
                next_t += dt
                now = time.perf_counter()
                if next_t < now - dt:  # fell behind by more than a step: do not try to catch up
                    next_t = now
                elif next_t > now:
                    self._stop.wait(next_t - now)
