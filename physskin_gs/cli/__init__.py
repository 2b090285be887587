"""``physskin-gs`` command-line entry point.

Each subcommand lives in its own module in this package and exposes ``register(subparsers)``, which
adds its parser and sets ``func`` (a callable taking the parsed args and returning an exit code).
Errors: any :class:`physskin_gs.errors.PhysSkinError`, or a missing input file, is printed as
``error: ...`` on stderr with exit code 2 (no traceback).
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading
import warnings
from typing import List, Optional

if "torch" not in sys.modules:
    # Application setting (not the library's): OpenMP worker threads that spin while they wait stall a 2-thread
    # torch kernel 3-10x whenever another process holds one of the cores (measured on 2-core machines: a 100k
    # render 0.86-2.3 s -> 0.62 s, a 2-thread GEMM 16 ms -> 4 ms); passive waiting is within noise on idle cores.
    # It must be set before torch loads its OpenMP runtime; an explicit OMP_WAIT_POLICY in the environment wins.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from physskin_gs.errors import PhysSkinError

#: Subcommand modules, in help order.
COMMANDS = ["info", "convert", "render", "skin", "train", "evaluate", "animate"]


def build_parser() -> argparse.ArgumentParser:
    """The ``physskin-gs`` parser with every subcommand in :data:`COMMANDS` registered (imports them)."""
    parser = argparse.ArgumentParser(
        prog="physskin-gs",
        description="Physics-based animation of 3D Gaussian Splatting scenes with PhysSkin neural skinning fields.",
    )
    from physskin_gs import __version__

    parser.add_argument("--version", action="version", version=f"physskin-gs {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        importlib.import_module(f"physskin_gs.cli.{name}").register(sub)
    return parser


#: Options whose values may start with a minus sign (an axis such as -y, a height, a box or a list of numbers).
NEGATIVE_VALUE_OPTIONS = ("--up", "--floor", "--select", "--pin", "--gravity", "--elevation", "--azimuth", "--points")


def join_negative_values(argv: List[str]) -> List[str]:
    """``--up -y`` -> ``--up=-y`` (also for --floor, --select, ...): argparse takes a value that starts with '-' for
    an option unless it is joined with '='. Only the options in :data:`NEGATIVE_VALUE_OPTIONS` are joined, and only
    when the next word is not itself an option name (``--up --help`` stays as it is)."""
    out: List[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in NEGATIVE_VALUE_OPTIONS and i + 1 < len(argv) and argv[i + 1].startswith("-") \
                and not argv[i + 1].startswith("--") and len(argv[i + 1]) > 1 \
                and (argv[i + 1][1].isdigit() or argv[i + 1][1] in ".xyzXYZ"):
            out.append(f"{a}={argv[i + 1]}")
            i += 2
            continue
        out.append(a)
        i += 1
    return out


def _format_warning(message, category, filename, lineno, line=None) -> str:
    """Warnings on the command line read as one plain line, without source file and code."""
    return f"[physskin-gs] warning: {message}\n"


def main(argv: Optional[List[str]] = None) -> int:
    """Run one subcommand; ``argv`` defaults to ``sys.argv[1:]``.

    Returns the exit code: the subcommand's (0 on success), 2 for a :class:`PhysSkinError` or a missing /
    unreadable input (``error: ...`` on stderr, no traceback), 130 on Ctrl-C, 143 on SIGTERM. argparse itself exits with 2
    (``SystemExit``) on bad arguments.
    """
    warnings.formatwarning = _format_warning
    parser = build_parser()
    args = parser.parse_args(join_negative_values(list(sys.argv[1:] if argv is None else argv)))
    previous = _terminate_as_interrupt()
    try:
        code = args.func(args)
    except _Terminated:
        print("terminated", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (PhysSkinError, FileNotFoundError, IsADirectoryError, PermissionError) as exc:
        msg = str(exc)
        if isinstance(exc, FileNotFoundError) and exc.filename and str(exc.filename) not in msg:
            msg = f"{msg}: {exc.filename}"
        print(f"error: {msg}", file=sys.stderr)
        return 2
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return int(code or 0)


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that every command cleans up the same way (temporary files removed, what was
    finished kept)."""


def _terminate_as_interrupt():
    """Turn SIGTERM into :class:`_Terminated` while a command runs (main thread only); returns the previous
    handler to restore, or None when no handler was installed."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum, frame):
        raise _Terminated()

    try:
        return signal.signal(signal.SIGTERM, handler)
    except (ValueError, OSError):  # pragma: no cover - embedded interpreters
        return None


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
