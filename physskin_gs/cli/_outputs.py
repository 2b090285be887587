"""One rule for every output of every command, applied before any work starts (:func:`claim_outputs`).

For each output option (``-o``, ``--json``, ``--video``, ``--export DIR``, ``--out DIR``, ...), in this order:

1. it is never one of the command's inputs: not the same path, not a ``./`` spelling of it, not a symlink to it,
   not a hard link of it; for a folder of outputs, none of the names the command writes there is an input. This
   holds with ``--force`` too: ``--force`` / ``--overwrite`` replace an earlier *output*, never an input;
2. a file output is not a folder, a folder output is not a file;
3. an existing file output is replaced only with ``--force`` (the folder rules of a command, such as "holds the
   frames of another run", are the command's own);
4. the folder it goes to can be written (the nearest existing folder above it, permission bits and a real test
   file); missing folders are created, the same for every command;
5. no other live run writes it: a lock file (``DIR/.physskin-gs.lock`` for a folder, ``.NAME.physskin-gs.lock``
   beside a file) holds the owner's pid and host; a lock whose process is gone is stale and is taken over. The
   locks are released when the command ends (:func:`release_all`, called by :func:`physskin_gs.cli.main`).

Files are then written through :func:`physskin_gs.io._shared.atomic_output` (a unique temporary name renamed into
place), so an interrupt or a failure leaves either the complete file or nothing.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, List, Optional, Sequence

from physskin_gs.errors import OptionError, OutputError

__all__ = ["Output", "claim_outputs", "refuse_inputs", "release_all", "lock_path", "held_locks"]

#: Name of the lock file inside a folder output.
FOLDER_LOCK = ".physskin-gs.lock"
#: A lock file that cannot be read (its owner may be writing it right now) counts as live for this many seconds.
_UNREADABLE_GRACE_S = 10.0

_HELD: List[str] = []
#: Folders this process created for its outputs (:func:`claim_outputs`); :func:`discard_created_folders` removes
#: the ones still empty when a run fails before writing anything.
_CREATED: List[str] = []


@dataclass(frozen=True)
class Output:
    """One output of a command.

    ``option``: the option's name as the user typed it (``-o``, ``--json``, ``--export``); ``path``: its value;
    ``folder``: a folder of files (frames, checkpoints) rather than one file; ``replace``: the user asked to replace
    an existing file (``flag``, e.g. ``--force``); ``writes``: for a folder, a test of the file names the command
    writes or removes there (every name when None), used to keep inputs out of it.
    """

    option: str
    path: str
    folder: bool = False
    replace: bool = False
    flag: str = "--force"
    writes: Optional[Callable[[str], bool]] = None


def _same(a: str, b: str) -> bool:
    """True when ``a`` and ``b`` name one file (equal real paths, or one inode: a hard link)."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _shipped_files() -> List[str]:
    """Files of the installation that commands read without being told (the shipped network checkpoint and its
    record, ``physskin_m16.json`` beside it): inputs of every command, so that no output option can name them
    (``evaluate --json data/physskin_m16.safetensors --force`` replaced the network with a JSON file, and
    ``--json data/physskin_m16.json --force`` its training record)."""
    try:
        from physskin_gs.model.checkpoint import default_checkpoint_path

        p = str(default_checkpoint_path())
    except Exception:  # noqa: BLE001 - no checkpoint module or path: nothing to protect
        return []
    return [q for q in (p, os.path.splitext(p)[0] + ".json") if os.path.isfile(q)]


def _input_files(inputs: Iterable) -> List[str]:
    """The existing input files among ``inputs`` (None skipped; a folder stands for the files in it), the files a
    mesh among them reads beside it (its material libraries and textures:
    :func:`physskin_gs.io.mesh.mesh_sidecars`), and the installation's own files (:func:`_shipped_files`)."""
    from physskin_gs.io.mesh import mesh_sidecars

    files: List[str] = _shipped_files()
    for p in inputs:
        if p is None or str(p) == "":
            continue
        p = os.fspath(p)
        if os.path.isdir(p):
            try:
                files += [os.path.join(p, n) for n in sorted(os.listdir(p)) if os.path.isfile(os.path.join(p, n))]
            except OSError:
                continue
        elif os.path.exists(p):
            files.append(p)
            files += mesh_sidecars(p)
    return files


def _refuse_inputs(out: Output, inputs: List[str]) -> None:
    where = f"{out.option} {out.path}"
    if not out.folder:
        for inp in inputs:
            if _same(out.path, inp):
                raise OptionError(f"{where}: is the input file {inp}; refusing to overwrite the input file "
                                  f"({out.flag} replaces an earlier output, never an input)")
        return
    for inp in inputs:
        if _same(out.path, inp):
            raise OptionError(f"{where}: is the input file {inp}, not a folder")
    if not os.path.isdir(out.path):
        return
    real = os.path.realpath(out.path)
    writes = out.writes or (lambda name: True)
    try:
        names = [n for n in os.listdir(out.path) if writes(n)]
    except OSError:
        names = []
    for inp in inputs:
        # an input anywhere under the folder whose path there (relative, "/"-separated: a checkpoint in
        # snapshots/) is one the command writes
        rel = os.path.relpath(os.path.realpath(inp), real)
        inside = not rel.startswith("..") and not os.path.isabs(rel) and writes(rel.replace(os.sep, "/"))
        linked = [n for n in names if _same(os.path.join(out.path, n), inp)]
        if inside or linked:
            name = linked[0] if linked else rel
            raise OptionError(f"{where}: writing {name} there would overwrite the input file {inp} ({out.flag} "
                              "replaces earlier outputs, never inputs); choose another folder")


def refuse_inputs(outputs: Sequence[Output], inputs: Iterable = ()) -> None:
    """Step 1 of the rule alone (no folder is made, no lock taken), for a command that checks it before its other
    options: OptionError when an output is, or would write over, one of ``inputs``."""
    files = _input_files(inputs)
    for out in outputs:
        if out.path is not None and str(out.path) != "":
            _refuse_inputs(out, files)


def lock_path(out: Output) -> str:
    """The lock file of an output: ``DIR/.physskin-gs.lock`` for a folder, ``.NAME.physskin-gs.lock`` beside a file."""
    if out.folder:
        return os.path.join(out.path, FOLDER_LOCK)
    from physskin_gs.io._shared import short_name

    folder, name = os.path.split(os.path.abspath(out.path))
    return os.path.join(folder, f".{short_name(name)}.physskin-gs.lock")


def _owner(lock: str) -> Optional[dict]:
    try:
        with open(lock, "r", encoding="utf-8") as fh:
            d = json.load(fh)
        return d if isinstance(d, dict) and isinstance(d.get("pid"), int) else None
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    except OSError:  # pragma: no cover
        return True
    return True


def _stale(lock: str, owner: Optional[dict]) -> bool:
    """A lock left by a run that is gone: its pid is not running on this host (a foreign host's lock is never
    stale: its pid cannot be checked); an unreadable lock only when older than a few seconds."""
    if owner is None:
        try:
            return time.time() - os.stat(lock).st_mtime > _UNREADABLE_GRACE_S
        except OSError:
            return True
    if owner.get("host") != socket.gethostname():
        return False
    if owner["pid"] == os.getpid():
        return False  # this process, another command in it (not a lock this command holds: those are skipped)
    return not _alive(owner["pid"])


def _acquire(out: Output) -> None:
    lock = lock_path(out)
    if os.path.abspath(lock) in _HELD:
        return
    content = json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                          "started": time.strftime("%Y-%m-%d %H:%M:%S"), "command": " ".join(sys.argv[:2])})
    for _ in range(3):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            owner = _owner(lock)
            if _stale(lock, owner):
                try:
                    os.unlink(lock)
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    raise OutputError(f"{out.option} {out.path}: cannot remove the stale lock {lock} "
                                      f"({exc.strerror or exc})") from None
                print(f"[physskin-gs] note: {out.option} {out.path}: removed a stale lock"
                      + (f" of pid {owner['pid']} (no longer running)" if owner else ""), file=sys.stderr)
                continue
            who = (f"pid {owner['pid']} on {owner.get('host')}, started {owner.get('started')}" if owner
                   else "its lock is being written")
            what = "folder" if out.folder else "file"
            raise OutputError(f"{out.option} {out.path}: another physskin-gs run is writing this {what} ({who}); "
                              f"wait for it to finish or choose another {what} (if that run is gone, remove {lock})")
        except OSError as exc:
            raise OutputError(f"{out.option} {out.path}: cannot create the lock file {lock} "
                              f"({exc.strerror or exc})") from None
        _HELD.append(os.path.abspath(lock))  # at once: an interrupt from here on still releases it
        try:
            os.write(fd, content.encode("utf-8"))
        finally:
            os.close(fd)
        return
    raise OutputError(f"{out.option} {out.path}: could not take the lock {lock}")  # pragma: no cover


def claim_outputs(outputs: Sequence[Output], inputs: Iterable = ()) -> None:
    """Apply the module's rule to every output, before any work: all checks for all outputs first, then the
    missing folders are created and the locks taken.

    ``inputs``: the command's input files and folders (None entries are skipped). Raises OptionError (an output
    that is an input, an existing file without ``flag``, a folder output that is a file) or OutputError (not
    writable, a folder where a file is expected, another live run writes it).
    """
    from physskin_gs.cli._common import check_output_folder, refuse_existing

    outputs = [o for o in outputs if o.path is not None and str(o.path) != ""]
    files = _input_files(inputs)
    for out in outputs:
        _refuse_inputs(out, files)
        if out.folder:
            if os.path.exists(out.path) and not os.path.isdir(out.path):
                raise OptionError(f"{out.option} {out.path}: exists and is not a folder")
            check_output_folder(os.path.join(out.path, FOLDER_LOCK), out.option, shown=out.path)
        else:
            if os.path.isdir(out.path):
                raise OutputError(f"{out.option} {out.path}: is a folder, expected a file name")
            refuse_existing(out.path, out.replace, out.flag)
            check_output_folder(out.path, out.option)
    for out in outputs:
        if out.folder:
            try:
                missing = _missing_folders(out.path)
                Path(out.path).mkdir(parents=True, exist_ok=True)
                _CREATED.extend(missing)
            except OSError as exc:
                raise OutputError(f"{out.option} {out.path}: cannot create the folder ({exc.strerror or exc})") from None
        else:
            missing = _missing_folders(os.path.dirname(os.path.abspath(out.path)))
            check_output_folder(out.path, out.option, create=True)
            _CREATED.extend(missing)
        _acquire(out)
    for out in outputs:  # another run may have finished writing it between the check and the lock
        if not out.folder:
            refuse_existing(out.path, out.replace, out.flag)


def _missing_folders(path) -> List[str]:
    """The folder ``path`` and its parents that do not exist yet, outermost first (absolute paths): what making it
    creates, to be removed again innermost first if the run leaves them empty."""
    missing = []
    d = os.path.abspath(path)
    while not os.path.isdir(d) and os.path.dirname(d) != d:
        missing.insert(0, d)
        d = os.path.dirname(d)
    return missing


def held_locks() -> List[str]:
    """The lock files this process holds (absolute paths)."""
    return list(_HELD)


def release_all() -> None:
    """Remove every lock this process holds (its own: a lock another process has since taken over stays)."""
    while _HELD:
        lock = _HELD.pop()
        owner = _owner(lock)
        if owner is None or owner["pid"] == os.getpid():  # ours (None: interrupted before its content was written)
            try:
                os.unlink(lock)
            except OSError:
                pass


def keep_created_folders() -> None:
    """The run is over (succeeded): the folders it created are its outputs, forget them (the next command run in
    this process must not remove them)."""
    _CREATED.clear()


def discard_created_folders() -> List[str]:
    """A run failed before writing its outputs: release its locks and remove the output folders it created that
    are now empty (a folder that existed before, or holds anything, stays). Returns the removed folders."""
    release_all()
    removed = []
    while _CREATED:
        folder = _CREATED.pop()
        try:
            os.rmdir(folder)  # only succeeds when empty
            removed.append(folder)
        except OSError:
            pass
    return removed


atexit.register(release_all)
