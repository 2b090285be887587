"""Ctrl-C and SIGTERM that are never lost.

Python's own SIGINT handler raises :class:`KeyboardInterrupt` wherever the main thread happens to be; code that
catches ``BaseException`` at that moment (optional-import guards in third-party packages do) swallows it, and the
run goes on as if nothing happened, sometimes with a half-initialised C extension that later crashes the
interpreter. :func:`install` replaces the handler with one that *records* the signal and raises it at once, except
inside an import, where it waits (a SIGALRM timer looks again every 50 ms) until the import is over; a swallowed
interrupt is raised again at the next :func:`check` (every output commit and every loop of the commands calls it),
and the command line still exits 130 (SIGINT) or 143 (SIGTERM).

Pure Python, no filesystem: any layer may call :func:`check`.
"""

from __future__ import annotations

import signal
import threading
from typing import Callable, Optional

__all__ = ["Terminated", "install", "requested", "check", "reset"]


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


def _raise_when_safe(signum, frame) -> None:
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
    code caught and dropped; else return."""
    if _requested is not None:
        raise _exception(_requested)


def reset() -> None:
    """Forget a recorded interrupt (a new command starts)."""
    global _requested
    _requested = None
