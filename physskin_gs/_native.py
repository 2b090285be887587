"""Build-and-load helper for small optional C kernels (each has a pure-torch fallback and a test against it).

A kernel's C source lives next to its Python caller as a string. :func:`load` compiles it once with the system C
compiler (``$CC`` or ``cc``; ``-O3 -march=native``, retried without ``-march=native``) into a per-user cache
folder and loads it with :mod:`ctypes` (calls release the GIL). The file name carries a hash of the source, the
compiler command and the CPU's feature flags, so a changed kernel or another machine sharing the cache never
loads a stale or unsuitable library. Nothing here raises: on any failure (no compiler, compile error, load error,
or ``PHYSSKIN_NATIVE=0`` in the environment) :func:`load` returns ``(None, reason)`` and the caller falls back.

Cache folder: ``$PHYSSKIN_CACHE_DIR``, else ``$XDG_CACHE_HOME/physskin_gs/native``, else
``~/.cache/physskin_gs/native``. It is created private (0700); a folder or library owned by another user or
writable by group/others is refused (the fallback runs), so nobody else can plant code that we would load. A
library that fails to load is rebuilt once.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Dict, Optional, Tuple

__all__ = ["load", "cache_dir", "bind", "functions"]

_CTYPES = {"p": ctypes.c_void_p, "i": ctypes.c_int, "f": ctypes.c_float, "d": ctypes.c_double}


def bind(lib: ctypes.CDLL, symbol: str, args: str, result: str = "") -> ctypes._CFuncPtr:
    """``lib.symbol`` with its ctypes signature set from type codes, one per argument: ``p`` pointer, ``i`` int,
    ``f`` float, ``d`` double (``result`` likewise, "" for void). Raises AttributeError for a missing symbol and
    KeyError for an unknown code."""
    fn = getattr(lib, symbol)
    fn.argtypes = [_CTYPES[c] for c in args]
    fn.restype = _CTYPES[result] if result else None
    return fn


_LOCK = threading.Lock()
_LOADED: Dict[str, Tuple[Optional[ctypes.CDLL], str]] = {}
_BOUND: Dict[str, Tuple[Optional[Dict[str, ctypes._CFuncPtr]], str]] = {}


def functions(name: str, source: str, signatures: Dict[str, Tuple[str, ...]]):
    """The kernel library ``name`` (:func:`load`) with its functions bound (:func:`bind`), memoised per ``name``
    for the process: ``({key: function}, "")`` for ``signatures`` ``{key: (symbol, args[, result])}``, or
    ``(None, reason)`` when the library is unavailable or a symbol is missing. Never raises."""
    if name not in _BOUND:
        lib, why = load(name, source)
        fns = None
        if lib is not None:
            try:
                fns = {key: bind(lib, *sig) for key, sig in signatures.items()}
            except (AttributeError, KeyError) as e:
                why = f"native kernel {name!r} unavailable: {e}"
        _BOUND[name] = (fns, why if fns is None else "")
    return _BOUND[name]


def user_cache(name: str) -> Path:
    """The per-user cache folder ``name`` (training shapes, eigen targets): ``$PHYSSKIN_CACHE_DIR/name``, else
    ``$XDG_CACHE_HOME/physskin_gs/name``, else ``~/.cache/physskin_gs/name``; never the working folder (train
    wrote ``./.cache/shapes`` wherever it was started)."""
    env = os.environ.get("PHYSSKIN_CACHE_DIR")
    return Path(env) / name if env else _xdg_cache() / name


def cache_dir() -> Path:
    """Folder for compiled kernels (see the module docstring)."""
    env = os.environ.get("PHYSSKIN_CACHE_DIR")
    return Path(env) if env else _xdg_cache() / "native"


def _xdg_cache() -> Path:
    """``$XDG_CACHE_HOME/physskin_gs``, else ``~/.cache/physskin_gs``."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "physskin_gs"


def _cpu_tag() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return line.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _compile(cc: str, flags, src: Path, out: Path) -> Optional[str]:
    try:
        r = subprocess.run([cc, *flags, "-o", str(out), str(src)], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as e:
        return f"{cc}: {e}"
    return None if r.returncode == 0 else f"{cc} failed: {r.stderr.strip()[-400:]}"


def _check_private(path: Path) -> None:
    """Refuse a cache folder or library that another user owns or that others may write (a planted library would
    run as this user's code). Raises PermissionError."""
    st = path.stat()
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise PermissionError(f"{path} is owned by another user")
    if st.st_mode & 0o022:
        raise PermissionError(f"{path} is writable by group or others")


def _build(name: str, source: str, cc: str, variants, folder: Path, lib_path: Path) -> None:
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        src = Path(tmp) / f"{name}.c"
        src.write_text(source, encoding="utf-8")
        out = Path(tmp) / lib_path.name
        errors = []
        for flags in variants:
            err = _compile(cc, flags, src, out)
            if err is None:
                break
            errors.append(err)
        else:
            raise RuntimeError("; ".join(errors))
        os.chmod(out, 0o700)
        os.replace(out, lib_path)  # atomic: concurrent builders never see a partial file


def load(name: str, source: str) -> Tuple[Optional[ctypes.CDLL], str]:
    """Compile (once per source, compiler and CPU) and load C ``source`` as a shared library.

    Returns (library, "") or (None, reason). Thread-safe; results are memoised per process."""
    if os.environ.get("PHYSSKIN_NATIVE", "1").strip() == "0":
        return None, "disabled by PHYSSKIN_NATIVE=0"
    cc = os.environ.get("CC", "cc")
    variants = (["-O3", "-march=native", "-std=gnu11", "-shared", "-fPIC"], ["-O3", "-std=gnu11", "-shared", "-fPIC"])
    tag = "\0".join([source, cc, repr(variants), _cpu_tag(), platform.machine(), platform.system()])
    key = hashlib.sha256(tag.encode()).hexdigest()[:16]
    memo = f"{name}_{key}"
    mkey = f"{cache_dir()}/{memo}"  # per cache folder: a refused folder must not hide a usable one
    with _LOCK:
        if mkey in _LOADED:
            return _LOADED[mkey]
        result: Tuple[Optional[ctypes.CDLL], str]
        try:
            folder = cache_dir()
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            _check_private(folder)
            lib_path = folder / f"{memo}.so"
            for attempt in range(2):
                if not lib_path.exists():
                    _build(name, source, cc, variants, folder, lib_path)
                _check_private(lib_path)
                try:
                    result = (ctypes.CDLL(str(lib_path)), "")
                    break
                except OSError:
                    if attempt:
                        raise
                    lib_path.unlink(missing_ok=True)  # a corrupt or foreign library: rebuild it once
        except Exception as e:  # noqa: BLE001  (any failure means: use the torch fallback)
            result = (None, f"native kernel {name!r} unavailable: {e}")
        _LOADED[mkey] = result
        return result
