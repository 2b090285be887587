"""Private helpers of the io writers and readers: output-path checks, temporary files, value conversions.

Not public API. The error messages are the writers' own (tests match them); each writer calls the checks in the
order it documents.
"""

from __future__ import annotations

import math
import os
import tempfile
from contextlib import contextmanager
from typing import Iterator, Optional, Tuple

import numpy as np
import torch

from physskin_gs.errors import OptionError


# ------------------------------------------------------------------------------------------------ permissions
def _read_umask() -> int:
    """The process umask. ``os.umask`` can only be read by setting it, so it is set and restored once, at import
    (before any writer thread exists), never per file."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


#: The umask at import. ``os.umask`` can only be read by setting it, and it is process-wide: changing it while a
#: background writer thread runs would give files another thread creates in that moment mode 0666.
UMASK = _read_umask()
#: Mode of written files: what a plain ``open(path, "w")`` gives under :data:`UMASK`.
FILE_MODE = 0o666 & ~UMASK


# ------------------------------------------------------------------------------------------------ output paths
def same_file(a: str, b: str) -> bool:
    """True when paths ``a`` and ``b`` name one file: equal absolute or real paths, or ``os.path.samefile``
    (False when either does not exist and the names differ)."""
    if os.path.abspath(a) == os.path.abspath(b) or os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def refuse_directory(path: str) -> None:
    """Raise OptionError ``PATH: output path is a directory`` when ``path`` is a folder."""
    if os.path.isdir(path):
        raise OptionError(f"{path}: output path is a directory")


def refuse_source(path: str, source, *, existing_only: bool = True) -> None:
    """Raise OptionError ``PATH: refusing to overwrite the input file; ...`` when ``path`` is ``source``.

    ``source`` None or empty: nothing to check. ``existing_only``: only when ``path`` exists (False also compares
    the names of a path that does not exist, :func:`same_file`).
    """
    if source and (not existing_only or os.path.exists(path)) and same_file(path, source):
        raise OptionError(f"{path}: refusing to overwrite the input file; choose another output path")


def output_folder(path: str) -> str:
    """The absolute folder of ``path``; raises OptionError ``PATH: output folder does not exist: FOLDER``."""
    out_dir = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(out_dir):
        raise OptionError(f"{path}: output folder does not exist: {out_dir}")
    return out_dir


def recorded_path(path, folder) -> str:
    """``path`` as an output's metadata records it: relative to ``folder`` (the output's folder), with ``/``
    separators, so that a result moved or shared together with its input still names it and no machine's absolute
    path is written; the bare file name when no relative path exists (another drive).

    Example: ``recorded_path("/data/scene.ply", "/data/out")`` -> ``"../scene.ply"``.
    """
    path = os.fspath(path)
    try:
        rel = os.path.relpath(os.path.abspath(path), os.path.abspath(os.fspath(folder)))
    except ValueError:  # Windows: another drive
        return os.path.basename(path)
    return rel.replace(os.sep, "/")


def check_output(path, source: Optional[str] = None) -> Tuple[str, str]:
    """``(path as str, absolute output folder)`` after the usual checks, in this order: ``path`` is not a
    directory, not the existing file ``source`` (skipped when None), and its folder exists.

    Raises:
        OptionError: the messages of :func:`refuse_directory`, :func:`refuse_source`, :func:`output_folder`.
        TypeError: ``path`` is not a str or PathLike.
    """
    path = os.fspath(path)
    refuse_directory(path)
    refuse_source(path, source)
    return path, output_folder(path)


# ------------------------------------------------------------------------------------------------ temporary files
def short_name(name: str) -> str:
    """``name`` as part of a hidden companion file's name (a temporary file, a lock): itself when short, else its
    first 40 characters and a hash of the whole, so that a legal 240-byte output name does not make an illegal
    (over 255 bytes) companion name (a fresh user's long name was refused for its lock file). Raises nothing."""
    if len(name.encode("utf-8", "surrogateescape")) <= 150:
        return name
    import hashlib

    return name[:40] + "~" + hashlib.sha1(name.encode("utf-8", "surrogateescape")).hexdigest()[:12]


def temp_file(path: str, out_dir: str, suffix: str = ".tmp") -> Tuple[int, str]:
    """Create ``.NAME.XXXX<suffix>`` next to the output ``path`` in ``out_dir``, with :data:`FILE_MODE`
    (``mkstemp`` alone gives 0600). Returns ``(open fd, temporary path)``; the caller closes / removes them.

    Raises OSError (nothing is left behind).
    """
    fd, tmp = tempfile.mkstemp(prefix="." + short_name(os.path.basename(path)) + ".", suffix=suffix, dir=out_dir)
    try:
        os.chmod(tmp, FILE_MODE)
    except BaseException:
        os.close(fd)
        unlink_quietly(tmp)
        raise
    return fd, tmp


@contextmanager
def atomic_output(path) -> Iterator[str]:
    """Write ``path`` all at once or not at all: yields a new empty temporary file beside it
    (``.NAME.XXXXXXXX.tmp.EXT``, keeping the extension for writers that choose a format by it; a unique name, so a
    leftover of an earlier run never blocks it) for the block to write; when the block ends without an exception
    and no interrupt is pending (:func:`physskin_gs.interrupts.check`), the file is renamed onto ``path``. On any
    exception, an interrupt included, the temporary file is removed and the exception propagates: ``path`` is
    either the complete new file or what it was before.

    Raises OSError (folder not writable, disk full, ...), KeyboardInterrupt for a pending interrupt.
    """
    from physskin_gs import interrupts

    path = os.fspath(path)
    out_dir = os.path.dirname(os.path.abspath(path))
    ext = os.path.splitext(path)[1]
    fd, tmp = temp_file(path, out_dir, ".tmp" + ext)
    try:
        os.close(fd)
        yield tmp
        interrupts.check()
        os.chmod(tmp, FILE_MODE)  # a writer that recreated the file (safetensors does) left it 0600
        os.replace(tmp, path)
        interrupts.note_written(path)
    except BaseException:
        unlink_quietly(tmp)
        raise


def write_text_atomic(path, text: str) -> int:
    """Write ``text`` (UTF-8) to ``path`` through :func:`atomic_output`; returns the bytes written. Raises OSError."""
    data = text.encode("utf-8")
    with atomic_output(path) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    return len(data)


def unlink_quietly(path: str) -> None:
    """Remove ``path``, ignoring any OSError (a temporary file that may already be gone)."""
    try:
        os.unlink(path)
    except OSError:
        pass


# ------------------------------------------------------------------------------------------------ values
#: Smallest normal float32, 1.1754944e-38: lower clip of linear scales / opacities before a log.
F32_TINY = float(np.finfo(np.float32).tiny)
#: Largest float32 below 1, 1 - 2**-24: upper clip of opacities before the logit (a logit of 16.64).
F32_BELOW_ONE = float(np.nextafter(np.float32(1.0), np.float32(0.0)))


def positive_number(value, name: str, *, invalid: str = "a positive number") -> float:
    """``value`` as a finite float > 0.

    Raises OptionError ``NAME must be a positive number, got VALUE`` when ``float(value)`` fails, and
    ``NAME must be <invalid>, got VALUE`` for NaN, infinite, zero or negative values.
    """
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise OptionError(f"{name} must be a positive number, got {value!r}") from None
    if not (math.isfinite(v) and v > 0):
        raise OptionError(f"{name} must be {invalid}, got {value!r}")
    return v


def as_float32(t) -> np.ndarray:
    """A torch tensor (any device, detached) or array-like as a float32 numpy array of the same shape; no copy
    when it already is a CPU float32 tensor or array (the result may share the caller's memory)."""
    if isinstance(t, torch.Tensor):
        t = t.detach().cpu().numpy()
    return np.asarray(t, dtype=np.float32)


def sigmoid64(logits: np.ndarray) -> np.ndarray:
    """Float64 ``sigmoid(logits)`` in [0, 1], same shape, as ``0.5 (1 + tanh(x / 2))`` (no overflow warning)."""
    return 0.5 * (1.0 + np.tanh(0.5 * np.asarray(logits).astype(np.float64, copy=False)))


def logit64(opacity: np.ndarray) -> np.ndarray:
    """Float64 ``logit`` of opacities clipped to [:data:`F32_TINY`, :data:`F32_BELOW_ONE`] (so finite: about
    -87.3 to 16.64; NaN stays NaN), same shape."""
    p = np.clip(np.asarray(opacity).astype(np.float64, copy=False), F32_TINY, F32_BELOW_ONE)
    return np.log(p) - np.log1p(-p)


def log_scales64(scales: np.ndarray) -> np.ndarray:
    """Float64 ``log(max(scales, F32_TINY))`` (a zero scale gives -87.3), same shape."""
    return np.log(np.maximum(np.asarray(scales).astype(np.float64, copy=False), F32_TINY))
