"""The live simulation loop: one worker thread owns the AnimatedScene.

Every call into the AnimatedScene (step, drags, material changes, reset) happens on the worker thread, so the
physics code needs no locks. GUI and network callbacks only *post* commands; drag targets are coalesced
(latest wins), so a fast mouse never builds a backlog. After each step the worker publishes a :class:`Frame`
into a :class:`LatestSlot`, which keeps only the newest frame: display and render threads that fall behind
skip frames instead of queueing them.

The simulation advances at a fixed ``dt`` per step. With ``realtime=True`` steps are paced to wall-clock time
(one step per ``dt`` seconds, or slower when a step takes longer); with ``realtime=False`` it runs flat out.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections import deque
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


def snapshot_tensor(x):
    """A private copy of ``x`` (torch tensor, detached, same device; numpy/array-like -> CPU tensor).

    The AnimatedScene may reuse its output buffers in place; published frames must not alias them.
    """
    import torch

    if isinstance(x, torch.Tensor):
        return x.detach().clone()
    return torch.tensor(np.asarray(x))


class Frame:
    """One published simulation state, safe to read from any thread.

    Attributes:
        version: increases by one per publication.
        sim_frame: the AnimatedScene's frame counter.
        means_t: (N, 3) torch float tensor, deformed centres, world units (a private copy; CPU or CUDA).
        covars_t: (N, 3, 3) torch float tensor, deformed covariances, world units squared (private copy).
        handle_positions: (Hd, 3) float32 numpy, draggable handle centres, world units.
        stats: the last step's stats dict (ms, newton_iters, energy, ...) plus ``steps_per_s``.
        means, covars: float32 numpy views of the above, converted on first use (so a GPU run that only
            renders on the server never copies them to the host).
    """

    def __init__(self, version, sim_frame, means_t, covars_t, handle_positions, stats=None) -> None:
        self.version = int(version)
        self.sim_frame = int(sim_frame)
        self.means_t = means_t
        self.covars_t = covars_t
        self.handle_positions = handle_positions
        self.stats: Dict[str, float] = dict(stats or {})
        self._np: Dict[str, np.ndarray] = {}

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
        publish_every_step: publish a Frame after every step (True) or only when a consumer asked for one since
            the last publication (``request_frame``); benchmarks use True.
    """

    def __init__(
        self,
        anim,
        *,
        realtime: bool = True,
        on_error: Optional[Callable[[str, BaseException, str], None]] = None,
        on_step: Optional[Callable[[Any, Dict[str, float]], None]] = None,
    ) -> None:
        self.anim = anim
        self.realtime = realtime
        self.on_error = on_error
        self.on_step = on_step
        self.slot = LatestSlot()
        self.playing = False
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._cmds: Deque[Tuple[str, Callable[[Any], Any]]] = deque()
        self._steps_pending = 0
        self._targets: Dict[DragKey, np.ndarray] = {}  # coalesced drag targets (latest wins)
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
        """End every drag, reset the AnimatedScene to rest, publish the rest state."""
        with self._lock:
            keys = list(self._open)
        for k in keys:
            self.end_drag(k)
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
            if target is not None:
                self._targets[key] = np.asarray(target, dtype=np.float64).copy()

        def run(a, key=key):
            old = self._drag_ids.pop(key, None)
            if old is not None:
                a.end_drag(old)
            self._drag_ids[key] = start(a)

        self.submit(f"start drag {key[1]}", run)

    def move_drag(self, key: DragKey, target) -> None:
        """Set the target (3,) of an open drag (ignored when the drag is not open)."""
        with self._lock:
            if not self._open.get(key):
                return
            self._targets[key] = np.asarray(target, dtype=np.float64).copy()
        self._wake.set()

    def end_drag(self, key: DragKey) -> None:
        """Release a drag: its spring is removed before the next step."""
        with self._lock:
            if not self._open.pop(key, False):
                return
            self._targets.pop(key, None)

        def run(a, key=key):
            did = self._drag_ids.pop(key, None)
            if did is not None:
                a.end_drag(did)

        self.submit(f"end drag {key[1]}", run)

    def end_drags_of(self, client_id: Hashable) -> int:
        """End every open drag of ``client_id`` (a closed tab); returns how many."""
        with self._lock:
            keys = [k for k in self._open if k[0] == client_id]
        for k in keys:
            self.end_drag(k)
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
    def _report(self, where: str, exc: BaseException) -> None:
        self.errors += 1
        tb = traceback.format_exc()
        if self.on_error is not None:
            try:
                self.on_error(where, exc, tb)
            except Exception:  # noqa: BLE001 - the reporter must never kill the loop
                traceback.print_exc()

    def _process_commands(self) -> None:
        while True:
            with self._lock:
                if not self._cmds:
                    targets = {k: v for k, v in self._targets.items() if k in self._drag_ids}
                    break
                name, fn = self._cmds.popleft()
            try:
                fn(self.anim)
            except Exception as exc:  # noqa: BLE001
                self.playing = False
                self._report(name, exc)
        for key, target in targets.items():
            try:
                self.anim.update_drag(self._drag_ids[key], target)
            except Exception as exc:  # noqa: BLE001
                self._report(f"update drag {key[1]}", exc)
                with self._lock:
                    self._targets.pop(key, None)

    def _publish(self, stats: Optional[Dict[str, float]] = None) -> None:
        a = self.anim
        g = a.deformed_gaussians()
        now = time.perf_counter()
        if self._hp is None or now - self._hp[0] > self.handle_period or stats is None:
            hp = a.handle_positions()  # only the gizmos use these: refreshed at most every handle_period s
            hp = to_numpy(hp).reshape(-1, 3).copy() if hp is not None else np.zeros((0, 3), np.float32)
            self._hp = (now, hp)
        hp = self._hp[1]
        self._version += 1
        st = dict(self.last_stats if stats is None else stats)
        self.slot.put(
            Frame(
                self._version,
                int(getattr(a, "frame", 0)),
                snapshot_tensor(g.means),
                snapshot_tensor(g.covars),
                hp,
                st,
            )
        )

    def _run(self) -> None:
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
                if self.on_step is not None:
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
