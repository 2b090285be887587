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
import warnings
from typing import List, Optional

from physskin_gs._runtime import application_threads

# Application settings (not the library's): passive OpenMP waiting and single-threaded OpenBLAS, before torch and
# numpy load their runtimes (physskin_gs/_runtime.py gives the measurements); an explicit value in the environment wins.
application_threads()

from physskin_gs.errors import PhysSkinError

#: Subcommand modules, in help order.
COMMANDS = ["info", "convert", "render", "skin", "train", "evaluate", "animate"]


def build_parser() -> argparse.ArgumentParser:
    """The ``physskin-gs`` parser with every subcommand in :data:`COMMANDS` registered (imports them)."""
    parser = argparse.ArgumentParser(
        prog="physskin-gs",
        description="Physics-based animation of 3D Gaussian Splatting scenes with PhysSkin neural skinning fields.",
        allow_abbrev=False,
    )
    from physskin_gs import __version__

    parser.add_argument("--version", action="version", version=f"physskin-gs {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        importlib.import_module(f"physskin_gs.cli.{name}").register(sub)
    for p in sub.choices.values():  # whole option names only: `animate --frame 10` was taken as --frames 10 (and
        p.allow_abbrev = False  # `--frame` is another option of render and convert)
    parser.set_defaults(_subparsers=sub.choices)
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


def refuse_empty_values(argv: List[str]) -> None:
    """An option given an empty or blank value (``--json ''``, ``--export=``) is an error, never "not given": a
    user who typed the option meant something. Raises OptionError naming the option."""
    from physskin_gs.errors import OptionError

    for i, word in enumerate(argv):
        if not word.startswith("-") or word == "--" or len(word) < 2 or word[1].isdigit():
            continue
        if "=" in word and word.startswith("--"):
            name, value = word.split("=", 1)
        elif i + 1 < len(argv) and argv[i + 1].strip() == "" and argv[i + 1] != word:
            name, value = word, argv[i + 1]
        else:
            continue
        if value.strip() == "":
            raise OptionError(f"{name}: empty value; give a value or leave the option out")


def _format_warning(message, category, filename, lineno, line=None) -> str:
    """Warnings on the command line read as one plain line, without source file and code."""
    return f"[physskin-gs] warning: {message}\n"


def main(argv: Optional[List[str]] = None) -> int:
    """Run one subcommand; ``argv`` defaults to ``sys.argv[1:]``.

    Returns the exit code: the subcommand's (0 on success), 2 for a :class:`PhysSkinError` or a missing /
    unreadable input (``error: ...`` on stderr, no traceback), 130 on Ctrl-C, 143 on SIGTERM. argparse itself exits with 2
    (``SystemExit``) on bad arguments. An interrupt always ends the run with 130 / 143, also one that library code
    caught and dropped (:mod:`physskin_gs.interrupts` records it), or one whose signal made a child process (ffmpeg)
    fail first. The output locks the command took (:mod:`physskin_gs.cli._outputs`) are released at the end.
    """
    from physskin_gs import interrupts

    restore = interrupts.install()  # first: a Ctrl-C while the command modules load is an interrupt, not a traceback
    interrupts.WRITTEN.clear()  # (this command's complete files, named if an interrupt lands after them)
    code = 0
    try:
        try:
            warnings.formatwarning = _format_warning
            parser = build_parser()
            words = join_negative_values(list(sys.argv[1:] if argv is None else argv))
            refuse_empty_values(words)
            args, unknown = parser.parse_known_args(words)
            if unknown:  # said with the subcommand's own usage line, not the top-level one
                sub = getattr(args, "_subparsers", {}).get(getattr(args, "command", None))
                (sub or parser).error(f"unrecognized arguments: {' '.join(unknown)}")
            code = args.func(args)
            interrupts.check()  # an interrupt that something swallowed on the way
        except KeyboardInterrupt:
            raise
        except BrokenPipeError:  # stdout closed early (`physskin-gs info x.ply | head`): end quietly, as cat does
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())  # (Python's own flush at exit would raise again)
            return 1
        except (PhysSkinError, FileNotFoundError, IsADirectoryError, PermissionError) as exc:
            interrupts.check()  # an error caused by the interrupt (a child process killed by the same signal)
            msg = str(exc)
            if isinstance(exc, FileNotFoundError) and exc.filename and str(exc.filename) not in msg:
                msg = f"{msg}: {exc.filename}"
            print(f"error: {msg}", file=sys.stderr)
            _discard_created_folders()  # an output folder this run made and left empty goes again
            return 2
        except BaseException:
            interrupts.check()
            raise
    except KeyboardInterrupt as exc:
        terminated = isinstance(exc, interrupts.Terminated) or interrupts.requested() == signal.SIGTERM
        _discard_created_folders()  # (a fresh user's find: interrupted runs left empty output folders)
        done = [p for p in dict.fromkeys(interrupts.WRITTEN) if os.path.isfile(p)]
        after = ""
        if len(done) == 1:  # the one output of convert, render or skin already in place: say it is whole
            after = f", after {done[0]} was written in full"
        print(("terminated" if terminated else "interrupted") + after, file=sys.stderr)
        return 143 if terminated else 130
    finally:
        from physskin_gs.cli._outputs import keep_created_folders, release_all

        release_all()
        keep_created_folders()
        restore()
        interrupts.reset()  # handled (exit 130 / 143): a caller that goes on (main(argv) from Python) starts clean
        if argv is None:  # the process ends now: a late second signal must not turn exit 130 into a signal death
            _ignore_signals()
    return int(code or 0)


def _discard_created_folders() -> None:
    """Release the run's locks and remove the output folders it created and left empty (it failed or was
    interrupted before writing there)."""
    from physskin_gs.cli._outputs import discard_created_folders

    discard_created_folders()


def _ignore_signals() -> None:
    """SIGINT and SIGTERM ignored from here on (the command is over and the interpreter is about to exit; Python's
    finalisation hands signals back to the default action, which would kill the process with no message)."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            signal.signal(sig, signal.SIG_IGN)
        except (ValueError, OSError):  # pragma: no cover - not the main thread
            pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
