"""Writing an animation's frames: INRIA PLY, compressed PLY or one OpenUSD file, in a background thread.

An animation changes only its moving rows; the static rows (support, background, floaters, invalid rows) are
the same in every frame. :class:`SequenceExporter` therefore takes the rest scene once and, per frame, only the
moving rows (``index`` (M,) int64, ``means`` (M, 3), ``quats`` (M, 4) wxyz, ``log_scales`` (M, 3) and, with SH,
``sh_rest`` (M, K, 3); opacities and the DC colour never change), as
:meth:`physskin_gs.pipeline.AnimatedScene.deformed_rows` gives them.

Formats (``--export-format``):

- ``ply``: one complete INRIA PLY per frame, ``frame0001.ply`` ... (formats.md section 6; SuperSplat imports the
  sequence). The frame's bytes live in two preallocated buffers initialised from the rest scene; a frame
  overwrites only its moving rows' columns, and the writer thread writes one buffer while the next frame fills the
  other. The file write is a single ``write`` of the buffer (no per-frame copy of the static rows).
- ``compressed-ply``: one PlayCanvas compressed PLY per frame, ``frame0001.compressed.ply`` (SuperSplat's sequence
  loader matches ``(.*?)(\\d+)(?:\\.compressed)?\\.ply``). Rows are written in a fixed order for the whole
  sequence: the moving rows first, then the static ones, each in the Morton order of the rest means, so no chunk of
  256 mixes moving and static rows and the chunk bounds stay tight. ``row_order`` gives the permutation (file row r
  is scene row ``row_order[r]``).
- ``usd``: one OpenUSD file ``animation.usdc`` (:mod:`physskin_gs.io.usd`): the static rows in one prim written
  once, the moving rows in a second prim with time-sampled positions, orientations, scales (and SH).

Writes are checked (each file's size equals the bytes handed to the kernel; a failed write or a failed encoder is
raised as :class:`physskin_gs.errors.OutputError` by the next :meth:`SequenceExporter.add` or by
:meth:`SequenceExporter.close`; nothing already written is removed). At most ``max_pending`` frames are held
(two frame buffers for the PLY formats): when the disk is slower than the simulation, :meth:`add` waits, and
the time it waited is reported.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import torch

from physskin_gs.errors import OptionError, OutputError
from physskin_gs.io._shared import as_float32
from physskin_gs.scene import GaussianScene

#: Names accepted by ``--export-format`` (the first is the default).
EXPORT_FORMATS = ("ply", "compressed-ply", "usd")
#: Frame file pattern of each per-frame format.
FRAME_PATTERNS = {"ply": "frame%04d.ply", "compressed-ply": "frame%04d.compressed.ply"}
#: File name of the OpenUSD export inside the export folder.
USD_NAME = "animation.usdc"

_STOP = object()


def check_export_format(fmt: str) -> str:
    """The canonical format name; raises OptionError naming the choices for anything else."""
    name = str(fmt).strip().lower()
    if name not in EXPORT_FORMATS:
        raise OptionError(f"--export-format {fmt!r}: choose one of {', '.join(EXPORT_FORMATS)}")
    if name == "usd":
        from physskin_gs.io.usd import require_pxr

        require_pxr()
    return name


def _moving_first_order(rest_means: np.ndarray, index: np.ndarray) -> np.ndarray:
    """(N,) int64 row order: the moving rows (``index``) then the static rows, each in Morton order of the rest
    means (:func:`physskin_gs.io.compressed_ply.morton_order`)."""
    from physskin_gs.io.compressed_ply import morton_order

    n = rest_means.shape[0]
    static = np.ones(n, dtype=bool)
    static[index] = False
    parts = []
    for rows in (np.asarray(index, dtype=np.int64), np.flatnonzero(static)):
        if rows.size:
            parts.append(rows[morton_order(rest_means[rows])])
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


class _PlyFrames:
    """Double-buffered INRIA PLY frames (see the module docstring)."""

    def __init__(self, rest: GaussianScene, folder: Path) -> None:
        from physskin_gs.io.inria_ply import inria_ply_body

        self.folder = folder
        self.header, body = inria_ply_body(rest)
        self.K = rest.sh_rest.shape[1]
        self.buffers = [body, body.copy()]
        self.c = 9 + 3 * self.K  # column of the opacity
        self.names = body.dtype.names  # None for the plain (N, P) float32 layout

    def scatter(self, buf: np.ndarray, idx: np.ndarray, rows: Dict[str, np.ndarray]) -> None:
        """Overwrite the columns of the moving rows ``idx`` (M,) in ``buf`` (the (N, P) float32 or structured PLY
        body) with ``rows``: means (M, 3), log_scales (M, 3), quats (M, 4), sh_rest (M, K, 3) as channel-major and,
        when present, normals (M, 3)."""
        c, K = self.c, self.K
        groups = [(0, rows["means"]), (c + 1, rows["log_scales"]), (c + 4, rows["quats"])]
        if "normals" in rows:  # a file's normals (nx ny nz), turned with the Gaussians
            groups.append((3, rows["normals"]))
        if K and "sh_rest" in rows:
            groups.append((9, rows["sh_rest"].transpose(0, 2, 1).reshape(-1, 3 * K)))  # [M, K, 3] -> [M, 3K]
        for col, v in groups:
            if self.names is None:
                buf[idx, col:col + v.shape[1]] = v
            else:
                for j in range(v.shape[1]):
                    buf[self.names[col + j]][idx] = v[:, j]

    def write(self, frame: int, buf: np.ndarray) -> List[str]:
        """Write ``buf`` as ``frame%04d.ply`` (size checked, no fsync); returns [path]. Raises OSError."""
        from physskin_gs.io.inria_ply import write_atomic

        path = self.folder / (FRAME_PATTERNS["ply"] % frame)
        write_atomic(path, (self.header, buf), fsync=False)
        return [str(path)]


class _CompressedFrames:
    """Compressed-PLY frames in the sequence's fixed row order (see the module docstring).

    The chunks after the moving rows hold static rows only and are encoded once; a frame re-encodes only the
    first ceil(M / 256) chunks (the moving rows, and the static rows that share their last chunk).
    """

    def __init__(self, rest: GaussianScene, folder: Path, index: np.ndarray, sh: bool = True) -> None:
        from physskin_gs.io.compressed_ply import CHUNK_SIZE, compressed_ply_header, encode_compressed

        self.folder = folder
        n, m = rest.num_gaussians, int(index.size)
        self.order = _moving_first_order(as_float32(rest.means), index)
        head_n = min(n, -(-m // CHUNK_SIZE) * CHUNK_SIZE)  # rows of the chunks that hold moving rows
        head, tail = self.order[:head_n], self.order[head_n:]
        where = np.empty(n, dtype=np.int64)
        where[head] = np.arange(head_n)
        self.head_pos = where[index]  # [M] position in the head of each row of `index`
        self.with_sh = bool(sh) and rest.sh_rest.shape[1] > 0
        full = {k: as_float32(getattr(rest, k))
                for k in ("means", "quats", "log_scales", "opacity_logits", "sh_dc", "sh_rest")}
        base = {k: np.ascontiguousarray(v[head]) for k, v in full.items()}
        self.buffers = [base, {k: v.copy() for k, v in base.items()}]
        self.tail = None
        if tail.size:
            self.tail = encode_compressed(*(full[k][tail] for k in ("means", "quats", "log_scales", "opacity_logits",
                                                                    "sh_dc")),
                                          full["sh_rest"][tail] if self.with_sh else None)
        self.header = compressed_ply_header(n, 3 * rest.sh_rest.shape[1] if self.with_sh else 0, up=rest.up_hint)
        self._encode = encode_compressed

    def scatter(self, buf: Dict[str, np.ndarray], idx: np.ndarray, rows: Dict[str, np.ndarray]) -> None:
        """Put the moving rows (in ``index`` order; ``idx`` is unused, the head positions were computed once) into
        the head arrays of ``buf``."""
        for key in ("means", "quats", "log_scales", "sh_rest"):
            if key in rows:
                buf[key][self.head_pos] = rows[key]

    def write(self, frame: int, buf: Dict[str, np.ndarray]) -> List[str]:
        """Encode the head chunks of ``buf``, write them with the cached static tail as
        ``frame%04d.compressed.ply``; returns [path]. Raises OSError, SceneFormatError (non-finite values)."""
        from physskin_gs.io.inria_ply import write_atomic

        head = self._encode(buf["means"], buf["quats"], buf["log_scales"], buf["opacity_logits"], buf["sh_dc"],
                            buf["sh_rest"] if self.with_sh else None)
        parts = [self.header]
        for e in range(3 if self.with_sh else 2):  # chunk, vertex (, sh): the head's rows then the static tail's
            parts.append(head[e])
            if self.tail is not None:
                parts.append(self.tail[e])
        path = self.folder / (FRAME_PATTERNS["compressed-ply"] % frame)
        write_atomic(path, parts, fsync=False)
        return [str(path)]


#: the highest SH degree compressed-PLY and USD frames store (compressed PLY holds no more; USD as convert writes
#: it, and renderers evaluate no more); a degree-4 scene's band 4 is zero in the exported frames anyway
SEQUENCE_MAX_SH_DEGREE = 3


class SequenceExporter:
    """Writes an animation, frame by frame, in a background thread (module docstring).

    Args:
        folder: export folder (created if missing). The caller has checked that it holds no other run.
        fmt: one of :data:`EXPORT_FORMATS`.
        rest_scene: the rest state as every frame writes its static rows (N rows, finite values; invalid rows
            already sanitised, :meth:`physskin_gs.pipeline.AnimatedScene.export_rest_scene`).
        index: (M,) int64 rows that move (the rows every :meth:`add` gives).
        fps: frames per second of the sequence (the USD time codes per second).
        up: (3,) up vector of the scene (USD: the stage is turned so it is +Y up).
        max_pending: frames handed to the writer thread that may wait to be written (>= 1; used by ``usd``,
            the PLY formats always hold two frame buffers).
        meters_per_unit: metres per scene unit (the USD stage's ``metersPerUnit``; None: 1).

    Raises:
        OptionError: unknown format; ``usd`` without usd-core, or the checks of
            :class:`physskin_gs.io.usd.UsdSequenceWriter` (bad ``fps`` / ``up`` / ``meters_per_unit``, the output
            file is the rest scene's source).
        SceneFormatError: ``compressed-ply``: non-finite means in ``rest_scene`` (the row order is computed
            here) or non-finite values in its static rows (encoded once, here); ``ply``: ``rest_scene.extra`` names
            that clash with INRIA names, or an SH count that is not (d+1)^2 - 1.
        OSError: the export folder cannot be created.
    """

    def __init__(self, folder, fmt: str, rest_scene: GaussianScene, index, *, fps: float,
                 up=(0.0, 0.0, 1.0), max_pending: int = 1, meters_per_unit: Optional[float] = None) -> None:
        self.format = check_export_format(fmt)
        #: what the exporter changed, one line each (SH degree 4 written as degree 3 in compressed PLY and USD)
        self.notes: List[str] = []
        self._sh_keep = None  # (K,) SH coefficients kept per row when the format holds fewer bands than the scene
        if self.format in ("compressed-ply", "usd") and rest_scene.sh_degree > SEQUENCE_MAX_SH_DEGREE:
            d = rest_scene.sh_degree
            rest_scene = rest_scene.with_sh_degree(SEQUENCE_MAX_SH_DEGREE)
            self._sh_keep = (SEQUENCE_MAX_SH_DEGREE + 1) ** 2 - 1
            self.notes.append(f"SH degree {d} -> {SEQUENCE_MAX_SH_DEGREE} in the {self.format} frames (the format "
                              f"stores up to degree {SEQUENCE_MAX_SH_DEGREE}, as convert does; the moving rows' band "
                              f"{d} is zero in every exported frame anyway, only bands 1-3 are rotated); "
                              "--export-format ply keeps every band of the static rows")
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.index = np.asarray(index.cpu().numpy() if isinstance(index, torch.Tensor) else index, dtype=np.int64)
        self.num_rows = rest_scene.num_gaussians
        self.files: List[str] = []
        self.frames = 0
        self.write_seconds = 0.0
        self.wait_seconds = 0.0
        self.error: Optional[str] = None
        self._closed = False
        self._usd = None
        self._frames = None
        if self.format == "usd":
            from physskin_gs.io.usd import UsdSequenceWriter

            moving = torch.zeros(self.num_rows, dtype=torch.bool)
            moving[torch.from_numpy(self.index)] = True
            self._usd = UsdSequenceWriter(self.folder / USD_NAME, rest_scene, moving, fps=fps, up=up,
                                          meters_per_unit=meters_per_unit)
            n_buf = max_pending + 1
            self._free: "queue.Queue" = queue.Queue()
            for _ in range(n_buf):
                self._free.put(None)
        else:
            self._frames = (_PlyFrames(rest_scene, self.folder) if self.format == "ply"
                            else _CompressedFrames(rest_scene, self.folder, self.index))
            self._free = queue.Queue()
            for b in self._frames.buffers:
                self._free.put(b)
        self._work: "queue.Queue" = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="physskin-export", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------------------------------------ API
    @property
    def pattern(self) -> str:
        """``frame%04d.ply``, ``frame%04d.compressed.ply`` or the USD file's name."""
        return FRAME_PATTERNS.get(self.format, USD_NAME)

    @property
    def row_order(self) -> Optional[np.ndarray]:
        """(N,) int64 permutation of the compressed-PLY frames (file row r = scene row ``row_order[r]``), else None."""
        return self._frames.order if isinstance(self._frames, _CompressedFrames) else None

    def add(self, frame: int, rows: Dict[str, torch.Tensor]) -> None:
        """Hand frame ``frame`` (1, 2, ...) to the writer; waits while ``max_pending`` frames are waiting.

        Args:
            frame: frame number >= 1 (the file name's ``%04d``; for ``usd`` the time code, which must increase:
                a bad one fails in the writer thread and is raised as OutputError later).
            rows: the moving rows in the order of ``index`` (torch tensors on any device, or arrays): ``means``
                (M, 3) scene units, ``quats`` (M, 4) wxyz, ``log_scales`` (M, 3) and, with SH, ``sh_rest``
                (M, K, 3); with the scene's normals, ``normals`` (M, 3) (INRIA PLY frames write them; the other
                formats have no normals); other keys (``index``) are ignored. PLY formats copy the rows into a frame
                buffer before returning, so the caller may reuse its tensors. ``usd`` hands CPU float32 tensors and
                arrays to the writer thread without a copy (others are converted, i.e. copied): do not modify them
                in place until :meth:`close` (fresh tensors per frame, as ``deformed_rows`` gives, are safe).

        Raises:
            OptionError: a key's first dimension is not M (the number of moving rows).
            OutputError: the exporter is closed, or an earlier frame could not be written.
        """
        self._raise_if_failed()
        if self._closed:
            raise OutputError("the sequence exporter is closed")
        keep = ("means", "quats", "log_scales", "sh_rest") + (("normals",) if self.format == "ply" else ())
        data = {k: as_float32(v) for k, v in rows.items() if k in keep}
        if self._sh_keep is not None and "sh_rest" in data:
            data["sh_rest"] = data["sh_rest"][:, : self._sh_keep]
        m = self.index.size
        for k, v in data.items():
            if v.shape[0] != m:
                raise OptionError(f"frame {frame}: '{k}' has {v.shape[0]} rows, expected {m} (the moving rows)")
        t = time.perf_counter()
        buf = self._free.get()
        self.wait_seconds += time.perf_counter() - t
        self._raise_if_failed()
        if self._frames is not None:
            self._frames.scatter(buf, self.index, data)
            self._work.put((frame, buf))
        else:
            self._work.put((frame, data))

    def close(self) -> Dict:
        """Write what is pending, finish the file(s) and return a summary: format, pattern, frames, files (paths),
        bytes, write_seconds (writer thread), wait_seconds (time :meth:`add` waited for the disk).

        Raises OutputError if any frame (or the USD file) could not be written."""
        if not self._closed:
            self._closed = True
            self._work.put(_STOP)
            self._thread.join()
            if self._usd is not None and self.error is None:
                try:
                    t = time.perf_counter()
                    self.files.append(self._usd.close())
                    self.write_seconds += time.perf_counter() - t
                except Exception as exc:  # noqa: BLE001 - reported as an OutputError below
                    self.error = f"could not write {self.folder / USD_NAME}: {exc}"
        self._raise_if_failed()
        size = sum(os.path.getsize(f) for f in self.files if os.path.exists(f))
        return {"format": self.format, "pattern": self.pattern, "frames": self.frames, "files": list(self.files),
                "bytes": int(size), "write_seconds": self.write_seconds, "wait_seconds": self.wait_seconds,
                "notes": list(self.notes)}

    def abort(self) -> None:
        """Stop the writer thread without finishing the USD file (its temporary file is removed; PLY frames
        already written stay)."""
        if not self._closed:
            self._closed = True
            self._work.put(_STOP)
            self._thread.join()
        if self._usd is not None:
            self._usd.abort()

    # ------------------------------------------------------------------------------------------------ thread
    def _raise_if_failed(self) -> None:
        if self.error is not None:
            raise OutputError(self.error)

    def _run(self) -> None:
        while True:
            item = self._work.get()
            if item is _STOP:
                return
            frame, buf = item
            if self.error is None:
                t = time.perf_counter()
                try:
                    if self._usd is not None:
                        self._usd.write_rows(frame, buf)
                        buf = None
                    else:
                        self.files.extend(self._frames.write(frame, buf))
                    self.frames += 1
                except Exception as exc:  # noqa: BLE001 - reported by the next add() / close()
                    what = (self.folder / (FRAME_PATTERNS[self.format] % frame) if self.format in FRAME_PATTERNS
                            else self.folder / USD_NAME)
                    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
                    self.error = f"could not write frame {frame} to {what}: {reason}"
                self.write_seconds += time.perf_counter() - t
            self._free.put(buf)


def open_sequence_exporter(anim, folder, fmt: str, fps: float):
    """A :class:`physskin_gs.io.sequence.SequenceExporter` for the frames of ``anim`` in ``folder`` (the headless
    CLI and the viewer's recorder use this one). ``anim``: a :class:`physskin_gs.pipeline.AnimatedScene` (or anything with its
    ``export_rest_scene()``, ``moving_index``, ``up_vector`` and optionally ``sim_scale``, metres per scene unit);
    ``fmt``: "ply", "compressed-ply" or "usd"; ``fps``: frames per second of the sequence. Every frame carries the
    scene's up axis (``up_hint``). For compressed PLY frames ``row_order.npy`` ((N,) int32: file row -> scene row)
    is written into ``folder`` and checked.

    Raises OutputError when ``row_order.npy`` cannot be written, and what SequenceExporter raises (OptionError for
    a bad format or fps, OSError when the folder cannot be created)."""
    up = [float(v) for v in anim.up_vector]
    rest = replace(anim.export_rest_scene(), up_hint=tuple(up))
    ex = SequenceExporter(folder, fmt, rest, anim.moving_index, fps=fps, up=up,
                          meters_per_unit=getattr(anim, "sim_scale", None))
    if ex.row_order is not None:
        path = Path(folder) / "row_order.npy"
        order = ex.row_order.astype(np.int32)
        try:
            np.save(path, order)
        except OSError as exc:
            raise OutputError(f"could not write {path}: {exc.strerror or exc}") from None
        if not path.is_file() or path.stat().st_size < order.nbytes:
            raise OutputError(f"could not write row order {path}: the file is missing or short after writing")
    return ex
