"""Recording the live simulation to an exported frame sequence (formats.md section 6).

Same layout as the headless export (``physskin-gs animate --headless --export``, with the same
``--export-format``): one INRIA PLY per recorded frame (every simulated step, or every ``steps_per_frame``-th as the
headless ``--steps-per-frame``), ``frame0001.ply``, ``frame0002.ply``, ... (or
``frame0001.compressed.ply`` ..., or one ``animation.usdc``), written by
:class:`physskin_gs.io.sequence.SequenceExporter` from the moving rows of each step, plus ``sequence.json`` with the headless export's keys (format "physskin_gs sequence 1", frames,
pattern, fps, dt, up_axis, sh, skinning, material, ...; ``first_frame_is_rest_state`` is false: a live recording
starts wherever the simulation is) and, optionally, an mp4 rendered with the scene's renderer.

Frames are handed from the simulation thread to the exporter's writer thread (two frame buffers) and the video
frames to a second thread through a small bounded queue: when the disk is slower than the simulation, the
simulation waits (a recording never drops frames, and never queues without bound).
"""

from __future__ import annotations

import json
import queue
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from physskin_gs.errors import OptionError
from physskin_gs.io.sequence import open_sequence_exporter

_STOP = object()

#: the most steps per recorded frame (the headless ``--steps-per-frame``'s bound)
STEPS_PER_FRAME_MAX = 1000


class Recorder:
    """Writes one PLY per recorded step in a background thread.

    Args:
        out_dir: folder to write into; created if missing. Refuses a folder that already holds a
            ``sequence.json`` or ``frame*.ply`` (never overwrite a previous recording).
        dt: simulation time step, seconds (fps = 1 / dt).
        meta: extra sequence.json fields (source, up_axis, sh, material, ...: the headless export's keys).
        video_renderer: optional ``f(deformed_gaussians) -> (H, W, 3) uint8``; when given, frames are rendered
            and ``video.mp4`` is written at :meth:`stop` (PNG frames when mp4 writing fails).
        save_fn: ``f(scene, path)`` called with ``anim.deformed_scene()`` and ``frame%04d.ply`` instead of the
            exporter (tests).
        export_format: ``ply`` (default), ``compressed-ply`` or ``usd`` (:data:`physskin_gs.io.sequence.EXPORT_FORMATS`).
        steps_per_frame: record one frame every this many simulated steps (1: every step; the headless run's
            ``--steps-per-frame``): the frames' rate is ``1 / (dt * steps_per_frame)`` per second.
    Raises:
        OptionError: if ``out_dir`` already holds a recording or is not a folder, an unknown format, or
            ``steps_per_frame`` is not an integer from 1 to 1000.
    """

    def __init__(
        self,
        out_dir,
        *,
        dt: float,
        meta: Optional[Dict[str, Any]] = None,
        video_renderer: Optional[Callable[[Any], np.ndarray]] = None,
        save_fn: Optional[Callable[[Any, Path], None]] = None,
        max_queue: int = 4,
        export_format: str = "ply",
        steps_per_frame: int = 1,
    ) -> None:
        from physskin_gs.io.sequence import check_export_format

        self.export_format = check_export_format(export_format)
        if isinstance(steps_per_frame, bool) or int(steps_per_frame) != steps_per_frame or not (
                1 <= steps_per_frame <= STEPS_PER_FRAME_MAX):
            raise OptionError(f"steps per frame must be a whole number from 1 to {STEPS_PER_FRAME_MAX}, not "
                              f"{steps_per_frame}")
        self.steps_per_frame = int(steps_per_frame)
        #: simulated steps seen while recording (every ``steps_per_frame``-th is written, the first one included)
        self.steps = 0
        self.out_dir = Path(out_dir)
        if self.out_dir.exists() and not self.out_dir.is_dir():
            raise OptionError(f"recording folder {self.out_dir} exists and is not a folder")
        if self.out_dir.is_dir() and (
            (self.out_dir / "sequence.json").exists() or any(self.out_dir.glob("frame*.ply"))
            or (self.out_dir / "animation.usdc").exists()
        ):
            raise OptionError(f"recording folder {self.out_dir} already holds a recording; choose another folder")
        self._made_folder = not self.out_dir.exists()
        self.out_dir.mkdir(parents=True, exist_ok=True)
        #: True after :meth:`stop` when nothing was recorded (no step ran: paused): no sequence.json is written
        #: and a folder this recording made is removed again
        self.empty = False
        self.dt = float(dt)
        self.meta = dict(meta or {})
        self.video_renderer = video_renderer
        self._save = save_fn
        self._exporter = None
        self.export_summary: Optional[Dict[str, Any]] = None
        self._q: "queue.Queue[Any]" = queue.Queue(maxsize=max_queue)
        self.count = 0
        self._written = 0
        self.video_frames: List[np.ndarray] = []
        self.error: Optional[str] = None
        self.video_path: Optional[Path] = None
        self._thread = threading.Thread(target=self._run, name="physskin-recorder", daemon=True)
        self._thread.start()
        self.started = time.time()

    @property
    def written(self) -> int:
        """Frames written so far (by the exporter's writer thread, or by ``save_fn``)."""
        return self._exporter.frames if self._exporter is not None else self._written

    def add(self, anim) -> None:
        """Queue the AnimatedScene's current deformed state (call on the simulation thread after a step)."""
        if self.error is not None:
            return
        self.steps += 1
        if (self.steps - 1) % self.steps_per_frame:
            return  # between recorded frames
        self.count += 1
        scene = None
        if self._save is not None:
            scene = anim.deformed_scene()
        else:
            try:
                if self._exporter is None:
                    self._exporter = open_sequence_exporter(anim, self.out_dir, self.export_format, self.fps)
                self._exporter.add(self.count, anim.deformed_rows())  # waits when the disk is behind (bounded)
            except Exception as exc:  # noqa: BLE001 - reported through .error and the page
                self.error = f"{type(exc).__name__}: {exc}"
                return
        g = anim.deformed_gaussians() if self.video_renderer is not None else None
        if scene is not None or g is not None:
            self._q.put((self.count, scene, g))  # blocks when the writer is behind (bounded)

    def _run(self) -> None:
        while True:
            item = self._q.get()
            if item is _STOP:
                return
            idx, scene, g = item
            try:
                if scene is not None:
                    self._save(scene, self.out_dir / f"frame{idx:04d}.ply")
                    self._written += 1
                if g is not None:
                    self.video_frames.append(self.video_renderer(g))
            except Exception as exc:  # noqa: BLE001 - reported through .error and the page
                self.error = f"{type(exc).__name__}: {exc}"
                traceback.print_exc()

    def stop(self, timeout: float = 120.0) -> Path:
        """Flush pending frames, write sequence.json (and the video); returns the folder."""
        self._q.put(_STOP)
        self._thread.join(timeout)
        if self.written == 0 and not self.video_frames and self.count == 0:
            # no step ran while recording (the simulation was paused): no sequence.json of 0 frames, and a folder
            # of our own making goes again (an empty rec_... folder with a 0-frame sequence.json was left)
            self.empty = True
            if self._made_folder:
                try:
                    self.out_dir.rmdir()
                except OSError:
                    pass
            return self.out_dir
        pattern = "frame%04d.ply"
        if self._exporter is not None:
            try:
                self.export_summary = self._exporter.close()
                pattern = self.export_summary["pattern"]
            except Exception as exc:  # noqa: BLE001 - reported through .error and the page
                self.error = f"{type(exc).__name__}: {exc}"
        meta = {
            "format": "physskin_gs sequence 1",
            "frames": self.written,
            "pattern": pattern,
            "export_format": self.export_format,
            "first_frame_is_rest_state": False,
            "fps": self.fps if self.dt > 0 else None,
            "dt": self.dt,
            "steps_per_frame": self.steps_per_frame,
        }
        meta.update(self.meta)
        meta["frames"] = self.written
        if self.video_frames:
            self.video_path = self._write_video()
            if self.video_path is not None:
                meta["video"] = self.video_path.name
        from physskin_gs.io._shared import write_text_atomic

        write_text_atomic(self.out_dir / "sequence.json", json.dumps(meta, indent=2) + "\n")  # whole or not at all
        return self.out_dir

    @property
    def fps(self) -> float:
        """Recorded frames per simulated second: ``1 / (dt * steps_per_frame)`` (30 when dt is not positive)."""
        return 1.0 / (self.dt * self.steps_per_frame) if self.dt > 0 else 30.0

    def _write_video(self) -> Optional[Path]:
        fps = self.fps
        path = self.out_dir / "video.mp4"
        try:
            try:
                from physskin_gs.render import write_video  # type: ignore[attr-defined]
            except ImportError:
                write_video = None
            if write_video is not None:
                return Path(write_video(self.video_frames, path, fps=fps))  # mp4, or a PNG folder fallback
            else:
                import imageio.v2 as imageio

                imageio.mimwrite(path, self.video_frames, fps=fps, macro_block_size=16)
            return path
        except Exception as exc:  # noqa: BLE001 - fall back to PNG frames (formats.md section 6)
            import imageio.v2 as imageio

            self.error = f"mp4 failed ({exc}); wrote PNG frames instead"
            png_dir = self.out_dir / "video_frames"
            png_dir.mkdir(exist_ok=True)
            for i, f in enumerate(self.video_frames, 1):
                imageio.imwrite(png_dir / f"frame{i:04d}.png", f)
            return None
