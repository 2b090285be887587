"""Ctrl-C and SIGTERM that are never lost.

Python's own SIGINT handler raises :class:`KeyboardInterrupt` wherever the main thread happens to be; code that
catches ``BaseException`` at that moment (optional-import guards in third-party packages do) swallows it, and the
run goes on as if nothing happened, sometimes with a half-initialised C extension that later crashes the
interpreter. :func:`install` replaces the handler with one that *records* the signal and raises it at once, except
inside an import, where it waits (a SIGALRM timer looks again every 50 ms) until the import is over; a swallowed
interrupt is raised again at the next :func:`check` (every output commit and every loop of the commands calls it),
and the command line still exits 130 (SIGINT) or 143 (SIGTERM). Inside :func:`deferred` (a call that hands work to
threads it must join, such as ``cKDTree.query(workers=-1)``) an interrupt is recorded and raised when the block ends,
so that no thread is left running on memory the interpreter frees on its way out.

Pure Python, no filesystem: any layer may call :func:`check` and :func:`note_written`.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Callable, Iterator, Optional

__all__ = ["Terminated", "install", "requested", "check", "reset", "deferred", "note_written", "WRITTEN"]

#: Files the atomic writers put in place, in order (:func:`note_written`): the command line names them when an
#: interrupt lands after a file was already whole (a convert interrupted just after its rename said only
#: "interrupted", and the earlier file was gone). The command line clears it when a command starts.
WRITTEN: list = []


def note_written(path) -> None:
    """Record that ``path`` (str or PathLike) is now a complete new file (:data:`WRITTEN`). Raises nothing."""
    import os

    WRITTEN.append(os.fspath(path))


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that every command cleans up the same way (temporary files removed, what
    was finished kept)."""


#: The first signal received since :func:`install` / :func:`reset` (``signal.SIGINT`` / ``SIGTERM``), or None.
_requested: Optional[int] = None


def _exception(signum: int) -> KeyboardInterrupt:
    return Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


#: Seconds between the re-checks of an interrupt deferred during an import.
_RETRY_S = 0.05


def _importing(frame) -> bool:
    """Whether ``frame`` (the main thread's, where a signal handler runs) is inside an import: an exception raised
    there leaves a C extension half-initialised, and code that catches it and goes on (optional-import guards) may
    then crash the interpreter."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


#: Depth of :func:`deferred` blocks the main thread is in (the handler only records while it is > 0).
_deferred = 0


def _raise_when_safe(signum, frame) -> None:
    if _deferred > 0:  # raised when the block ends
        return
    if _importing(frame):  # not now: once the import is done (a timer looks again)
        try:
            signal.setitimer(signal.ITIMER_REAL, _RETRY_S)
        except (ValueError, OSError, AttributeError):  # pragma: no cover - no itimer: the next check() raises
            pass
        return
    raise _exception(signum)


def _handler(signum, frame):
    global _requested
    if _requested is None:
        _requested = signum
    _raise_when_safe(signum, frame)


def _retry(signum, frame):  # noqa: ARG001 - SIGALRM: a deferred interrupt, raised once the import is over
    if _requested is not None:
        _raise_when_safe(_requested, frame)


def install() -> Callable[[], None]:
    """Record SIGINT and SIGTERM (and raise them as :class:`KeyboardInterrupt` / :class:`Terminated`) while a command
    runs. Main thread only; elsewhere a no-op. Clears an earlier record. Returns a function that restores the
    previous handlers."""
    reset()
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {}
    for sig, h in ((signal.SIGINT, _handler), (signal.SIGTERM, _handler), (getattr(signal, "SIGALRM", None), _retry)):
        if sig is None:  # pragma: no cover - platforms without SIGALRM
            continue
        try:
            previous[sig] = signal.signal(sig, h)
        except (ValueError, OSError):  # pragma: no cover - embedded interpreters
            pass

    def restore() -> None:
        try:
            signal.setitimer(signal.ITIMER_REAL, 0)
        except (ValueError, OSError, AttributeError):  # pragma: no cover
            pass
        for sig, h in previous.items():
            try:
                signal.signal(sig, h)
            except (ValueError, OSError, TypeError):  # pragma: no cover
                pass

    return restore


def requested() -> Optional[int]:
    """The signal number recorded since :func:`install` (SIGINT or SIGTERM), or None."""
    return _requested


def check() -> None:
    """Raise :class:`KeyboardInterrupt` (or :class:`Terminated`) when an interrupt was recorded, even one that some
    code caught and dropped; else return. Inside a :func:`deferred` block it returns: the block's end raises it (an
    atomic write inside one, such as a checkpoint saved with its training state as a pair, completes)."""
    if _requested is not None and _deferred == 0:
        raise _exception(_requested)


def reset() -> None:
    """Forget a recorded interrupt (a new command starts)."""
    global _requested
    _requested = None


@contextmanager
def deferred() -> Iterator[None]:
    """Run the block without being interrupted: SIGINT / SIGTERM arriving inside it are recorded and raised (as
    :class:`KeyboardInterrupt` / :class:`Terminated`) when it ends. For calls that start threads and join them
    (scipy's ``cKDTree.query(workers=-1)``, :func:`physskin_gs._threads.run_on_workers`): an exception in the middle
    of the join would leave those threads running, and the interpreter's exit then frees memory under them (a
    segmentation fault instead of exit 130). Keep such blocks short (they delay Ctrl-C).

    Works with or without :func:`install` (without it, Python's default SIGINT handler is replaced by a recording
    one for the block; other handlers are left alone). Nests. In other threads (signals only reach the main
    thread) the block just runs.
    """
    global _deferred, _requested
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    own = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            if signal.getsignal(sig) is signal.default_int_handler:  # Python's own: would raise mid-join
                own[sig] = signal.signal(sig, _handler)
        except (ValueError, OSError, TypeError):  # pragma: no cover - embedded interpreters
            pass
    saved = _requested
    if own:  # not installed: the record of this block alone, the module's record left as it was
        _requested = None
    _deferred += 1
    try:
        yield
    finally:
        _deferred -= 1
        for sig, h in own.items():
            try:
                signal.signal(sig, h)
            except (ValueError, OSError, TypeError):  # pragma: no cover
                pass
        if own:
            got, _requested = _requested, saved
    if own:
        if got is not None:
            raise _exception(got)
    elif _deferred == 0:
        check()
