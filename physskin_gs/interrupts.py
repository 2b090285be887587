"""Ctrl-C and SIGTERM that are never lost.

Python's own SIGINT handler raises :class:`KeyboardInterrupt` wherever the main thread happens to be; code that
catches ``BaseException`` at that moment (optional-import guards in third-party packages do) swallows it, and the
run goes on as if nothing happened. :func:`install` replaces the handler with one that also *records* the signal,
so a swallowed interrupt is raised again at the next :func:`check` (every output commit and every loop of the
commands calls it) and the command line still exits 130 (SIGINT) or 143 (SIGTERM).

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


def _handler(signum, frame):  # noqa: ARG001 - signal handler signature
    global _requested
    if _requested is None:
        _requested = signum
    raise _exception(signum)


def install() -> Callable[[], None]:
    """Record SIGINT and SIGTERM (and raise them as :class:`KeyboardInterrupt` / :class:`Terminated`) while a command
    runs. Main thread only; elsewhere a no-op. Clears an earlier record. Returns a function that restores the
    previous handlers."""
    reset()
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            previous[sig] = signal.signal(sig, _handler)
        except (ValueError, OSError):  # pragma: no cover - embedded interpreters
            pass

    def restore() -> None:
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
