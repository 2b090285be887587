"""Rules every command shares: input files, option ranges, outputs that are checked after writing, strict JSON.

* Input files: a missing one is ``PATH: input file not found`` in every command (:func:`require_input_file`).
* Numeric options are checked before anything is loaded (:func:`check_number`, :func:`check_int`): finite, in
  range, and the range is in the message; legal but unusual values give a warning (:func:`warn_option`).
* Outputs: an existing output is never replaced without ``--force`` / ``--overwrite`` (:func:`refuse_existing`);
  the folder an output goes to is checked before any work (:func:`check_output_folder`), and what a writer wrote
  is checked afterwards (:func:`verify_written`): a missing or empty file is an error, never "wrote ...".
* JSON written by the tools is strict (no NaN / Infinity): :func:`strict_json` turns non-finite numbers into null
  and returns where it did, so the file can say so.
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, List, Optional, Tuple

from physskin_gs.errors import OptionError, OutputError  # noqa: F401 (OutputError re-exported)


# ------------------------------------------------------------------------------------------------ input files
def input_not_found(path) -> FileNotFoundError:
    """The one error for a missing input file: ``PATH: input file not found``."""
    return FileNotFoundError(f"{os.fspath(path)}: input file not found")


def require_input_file(path, option: str = "") -> str:
    """Check that ``path`` is an existing file; returns it as str.

    ``option`` (e.g. ``"--script"``) is put in front of the message for files given through an option.
    Raises FileNotFoundError (``[OPTION ]PATH: input file not found``) or OptionError for a folder.
    """
    p = os.fspath(path)
    lead = f"{option} " if option else ""
    if not os.path.exists(p):
        raise FileNotFoundError(f"{lead}{p}: input file not found")
    if os.path.isdir(p):
        raise OptionError(f"{lead}{p}: is a folder, expected an input file")
    if not os.path.isfile(p):  # a device or a FIFO: reading it never ends or reads nothing the size says
        raise OptionError(f"{lead}{p}: is not a regular file (a device, FIFO or socket), expected an input file")
    return p


# ------------------------------------------------------------------------------------------------ options
def _fmt(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _range_text(lo, hi, lo_open: bool, hi_open: bool) -> str:
    if lo is None and hi is None:
        return "a finite number"
    if hi is None:
        return f"{'>' if lo_open else '>='} {_fmt(lo)}"
    if lo is None:
        return f"{'<' if hi_open else '<='} {_fmt(hi)}"
    return f"in {'(' if lo_open else '['}{_fmt(lo)}, {_fmt(hi)}{')' if hi_open else ']'}"


def check_number(name: str, value, lo: Optional[float] = None, hi: Optional[float] = None, *,
                 lo_open: bool = False, hi_open: bool = False, unit: str = "") -> float:
    """``value`` as a finite float within [lo, hi] (open ends with ``lo_open`` / ``hi_open``); returns it.

    Raises OptionError ``NAME must be a finite number in [lo, hi] UNIT, got VALUE``.
    """
    rng = _range_text(lo, hi, lo_open, hi_open)
    what = rng if rng == "a finite number" else f"a finite number {rng}"
    tail = f" {unit}" if unit else ""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise OptionError(f"{name} must be {what}{tail}, got {value!r}") from None
    ok = math.isfinite(v)
    if ok and lo is not None:
        ok = v > lo if lo_open else v >= lo
    if ok and hi is not None:
        ok = v < hi if hi_open else v <= hi
    if not ok:
        raise OptionError(f"{name} must be {what}{tail}, got {_fmt(v)}")
    return v


def check_int(name: str, value, lo: Optional[int] = None, hi: Optional[int] = None, unit: str = "") -> int:
    """``value`` as an int within [lo, hi]; returns it. Raises OptionError ``NAME must be an integer in [lo, hi]``."""
    rng = _range_text(lo, hi, False, False)
    what = "an integer" if rng == "a finite number" else f"an integer {rng}"
    tail = f" {unit}" if unit else ""
    if isinstance(value, bool) or not isinstance(value, int):
        raise OptionError(f"{name} must be {what}{tail}, got {value!r}")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise OptionError(f"{name} must be {what}{tail}, got {value}")
    return value


def warn_option(message: str) -> None:
    """A warning about a legal but unusual option value: one line on stderr (``[physskin-gs] warning: ...``)."""
    print(f"[physskin-gs] warning: {message}", file=sys.stderr, flush=True)


def remember_defaults(p) -> None:
    """Record the parser ``p``'s option defaults on the parsed namespace (``args.option_defaults``: dest ->
    default), for :func:`given_options`. Call after the last ``add_argument``."""
    p.set_defaults(option_defaults={a.dest: a.default for a in p._actions})


def given_options(args, dests) -> List[str]:
    """The option destinations among ``dests`` whose parsed value differs from the parser's default
    (:func:`remember_defaults`): the options the user gave, as far as the namespace can tell. [] when the
    namespace carries no defaults (built by hand)."""
    defaults = getattr(args, "option_defaults", None) or {}
    return [d for d in dests if d in defaults and getattr(args, d, None) != defaults[d]]


def axis_name(u) -> str:
    """The axis name ("y", "-z", ...) of the unit vector ``u`` (3,) when it is within 1 degree of an axis, else its
    three components as ``[+x.xxx, +y.yyy, +z.zzz]``. Raises nothing for a finite 3-vector."""
    names = {(0, 1, 0): "y", (0, -1, 0): "-y", (0, 0, 1): "z", (0, 0, -1): "-z", (1, 0, 0): "x", (-1, 0, 0): "-x"}
    v = [float(c) for c in u]
    name = names.get(tuple(int(round(c)) for c in v))
    if name is not None and max(abs(c) for c in v) >= math.cos(math.radians(1.0)):
        return name
    return "[" + ", ".join(f"{c:+.3f}" for c in v) + "]"


# ------------------------------------------------------------------------------------------------ --up
def parse_up(text: str):
    """``y`` / ``-y`` / ... or ``'ux,uy,uz'`` -> value accepted by :func:`physskin_gs.render.up_vector`: the
    text itself, or a list of three floats. Raises OptionError when a comma-separated value is not numbers."""
    if "," in text:
        try:
            return [float(v) for v in text.split(",")]
        except ValueError:
            raise OptionError(f"--up {text!r}: expected an axis name or three comma-separated numbers") from None
    return text


def resolve_up_option(value) -> Tuple[bool, Any]:
    """The ``--up`` option, checked before anything is loaded: ``(auto, up)``.

    ``auto`` is True for ``"auto"`` (any case and surrounding blanks; then ``up`` is None and the caller asks
    :func:`scene_up` once the scene is loaded); otherwise ``up`` is :func:`parse_up` of ``value`` (an axis name
    or three floats, not normalised), already validated with :func:`physskin_gs.render.up_vector`.

    Raises OptionError for an unknown axis name or a zero / non-finite / non-3 vector.
    """
    if str(value).strip().lower() == "auto":
        return True, None
    from physskin_gs.render import up_vector

    up = parse_up(value)
    try:
        up_vector(up)  # validate early
    except (OptionError, ValueError) as exc:
        msg = str(exc)
        raise OptionError(msg if msg.startswith("--up") else f"--up {value!r}: {msg}") from None
    return False, up


#: where an analysis' up came from, in words (animate's scene line, render's and convert's note; the analysis'
#: reason that follows says why there was no support or no clear base)
UP_SOURCES = {"support-plane": "the normal of the support it stands on",
              "stable-base": "the side it stands on most stably",
              "format-prior": "the file (an up axis it records, or its format's convention)",
              "cameras": "the capture's cameras",
              "default": "the default"}


def up_sentence(up, source: str, reason: str) -> str:
    """``up -y, from the normal of the support it stands on: REASON``: the analysis' up ``up`` (3,) by its axis name
    (:func:`axis_name`: within 1 degree of an axis, else its components), where it came from (``source``, a key of
    :data:`UP_SOURCES`) and the analysis' ``reason``, with no nested brackets. Raises nothing."""
    return f"up {axis_name(up)}, from {UP_SOURCES.get(source, source)}: {reason}"


#: with no support found, a plane turned down that holds at least this share of the sampled points gets a note: it
#: moves with the object (a photo frame's table 55 %, a hovering robot's ground 79 %; of objects cut free of their
#: support in the corpus, none above 21 %)
FLAT_PART_NOTE = 0.3
#: a part of the capture apart from the object, left as floaters, at least this heavy relative to the object (its
#: opacity mass) is named with the boxes that would move it (:func:`scene_summary`)
FAR_PART_NOTE = 0.25


def dropped_extras_note(scene, fmt: str) -> Optional[str]:
    """The note for extra per-Gaussian properties (``scene.extra``) that a ``fmt`` output cannot hold (every
    format but ``ply``), or None when nothing is dropped; ``convert`` and ``animate --export-format`` print it.
    ``scene``: a GaussianScene (or anything with ``extra``: name -> (N,) values); ``fmt``: an output format name
    ("ply", "compressed-ply", "usd", "glb", ...). Raises nothing."""
    if not getattr(scene, "extra", None) or fmt == "ply":  # (a .ply keeps them, type included)
        return None
    names = sorted(scene.extra)
    return (f"note: {len(names)} extra per-Gaussian propert{'ies' if len(names) > 1 else 'y'} "
            f"({', '.join(names[:6])}{', ...' if len(names) > 6 else ''}) not written: a {fmt} file has no place "
            "for them; a .ply output keeps them")


def scene_summary(anim, config) -> List[str]:
    """The lines (without the ``[physskin-gs]`` prefix) that say what the scene analysis found and what moves, as
    ``animate`` prints them and the viewer too: the up and where it came from, the selection's counts, and the notes
    (a floor under the support, an unsure up, a large flat part moving with the object when no support was found,
    objects left static by ``--select largest``). ``anim``: an
    AnimatedScene or SceneBodies with ``info["scene_analysis"]`` (no lines without it, or without ``info``);
    ``config``: its AnimationConfig (``up``, ``select``, ``floor``, ``floor_height``). Raises nothing."""
    sa = (getattr(anim, "info", None) or {}).get("scene_analysis")
    if sa is None:
        return []
    lines = []
    c = sa["counts"]
    # rows of the selection with a NaN / Inf value never move (written sanitised): counted as static, invalid
    moving = anim.info["num_moving"] - int(sa.get("moving_invalid", 0))
    static = anim.scene.num_gaussians - moving
    given_up = str(config.up).strip().lower() != "auto"
    if given_up:  # the analysis took the given up as known: its support (if any) agrees with it
        found = "a support plane found near it" if sa["up_source"] == "support-plane" else "no support plane near it"
        lines.append(f"scene: up {config.up} as given (--up); {found}: {sa['reason']}")
    else:
        lines.append(f"scene: {up_sentence(sa['up'], sa['up_source'], sa['reason'])}")
    auto_select = str(config.select).strip().lower() == "auto"
    ob = anim.info.get("other_bodies_rows", (0, 0))  # the other bodies' rows: counted as background (or
    # transparent) by the analysis, moving here
    lines.append(f"selection {anim.info['selection']}: moving {moving}, static {static}"
                 + (f" (support {c['support']}, background {c['background'] - ob[0]}, floaters {c['floater']}, "
                    f"transparent {c['transparent'] - sa['moving_transparent'] - ob[1]}, invalid {c['invalid']})"
                    if auto_select else "")
                 + ("; floor = support plane" if anim.support_height is not None and config.floor
                    and config.floor_height is None else ""))
    if anim.info.get("support_below_moving") is not None and config.floor and config.floor_height is None:
        lines.append("note: what moves reaches below the support, so the floor is a quarter of its height under it, "
                     "not the support (a floor at the support would throw the rows under it up)")
    if sa.get("unsure") and not given_up:
        lines.append(f"note: {unsure_up_note(sa.get('up_candidates'))}")
    flat = float(sa.get("flat_part") or 0.0)
    if sa.get("support_plane") is None and flat >= FLAT_PART_NOTE and auto_select:
        lines.append(f"note: no support was found, and a flat part holding {flat:.0%} of the capture's points moves "
                     "with the object; if the object stands on it (a table, the ground), pick the object with --select "
                     "(a box, see docs/usage.md) so that it stays")
    parts = [fp for fp in sa.get("far_parts") or [] if fp["mass_ratio"] >= FAR_PART_NOTE]
    hovering = list(sa.get("hovering_parts") or [])
    if hovering and auto_select and anim.info["num_moving"]:
        lines.append(_parts_note(anim, hovering, "above the support without standing on it"))
    if parts and auto_select and anim.info["num_moving"]:
        lines.append(_parts_note(anim, parts, "apart from"))
    k = int(sa.get("other_objects") or 0)
    if k and str(config.select).strip().lower() == "largest":
        lines.append(f"note: {k} more object{'s stand' if k > 1 else ' stands'} on the support and "
                     f"stay{'s' if k == 1 else ''} static (--select largest); pass --select auto to move every object")
    return lines


def _parts_note(anim, parts, where: str) -> str:
    """The note on parts of a capture that stay static although they look like objects (``parts``: the scene
    analysis' ``far_parts`` or ``hovering_parts`` records; ``where``: "apart from" or how they lie), with one
    ``--select`` box per moving body and per part that moves them all."""
    # (a fresh user's two equal columns side by side: one fell, its twin hung in the air as "floaters"; a ball
    # held above the crate among several bodies stayed in the air with no word)
    boxes = []
    for b in getattr(anim, "bodies", None) or [anim]:
        P = b.scene.means[b.moving].double()
        boxes.append((P.min(0).values.tolist(), P.max(0).values.tolist()))
    moving = "the object" if len(boxes) == 1 else f"the {len(boxes)} objects"
    boxes += [(fp["lo"], fp["hi"]) for fp in parts]
    pad = 0.02 * max(max(h - l for l, h in zip(lo, hi)) for lo, hi in boxes)
    sel = " ".join("--select=" + ",".join(f"{v:.4g}" for v in [x - pad for x in lo] + [x + pad for x in hi])
                   for lo, hi in boxes)
    heavy = " and ".join(f"{fp['mass_ratio']:.0%}" for fp in parts)
    what = "a part" if len(parts) == 1 else f"{len(parts)} parts"
    one = len(boxes) == len(parts) + 1
    if where == "apart from":
        how = f"apart from {moving}, {heavy} as heavy as {'it' if one else 'the heaviest'}, " \
              f"stay{'s' if len(parts) == 1 else ''} static as floaters"
    else:
        how = f"{heavy} as heavy as {'the object' if one else 'the heaviest object'}, " \
              f"{'lies' if len(parts) == 1 else 'lie'} {where} and stay{'s' if len(parts) == 1 else ''} static"
    return (f"note: {what} of the capture {how} (only {moving} move{'s' if one else ''}); to move "
            f"{'both' if len(boxes) == 2 else 'them all'}, each a body of its own: {sel}")


def scene_up(scene) -> List[float]:
    """``--up auto``: the (3,) unit up vector of the scene analysis (the support plane's normal, else the axis
    the object stands on most stably or the format's convention, as animate does), as floats; prints
    ``note: up -y, from ...: reason`` (:func:`up_sentence`, as animate's scene line) on stderr.
    Raises DegenerateGeometryError (from the scene analysis) when no row is valid and opaque."""
    from physskin_gs.pipeline import analyze_for_animation

    analysis = analyze_for_animation(scene)
    up = [float(v) for v in analysis.up]
    print(f"note: {up_sentence(up, analysis.up_source, analysis.reason)}", file=sys.stderr)
    if getattr(analysis, "unsure", False):
        print(f"note: {unsure_up_note(getattr(analysis, 'up_candidates', None))}", file=sys.stderr)
    return up


def progress_bar(iterable, desc: str, unit: str, total: Optional[int] = None, **kwargs):
    """A tqdm bar on stderr when stderr is a terminal; elsewhere (a log file, a pipe) one line when the stage
    starts (``[physskin-gs] DESC: N UNITs``) and nothing per item, so a log gets no carriage-return updates. Extra
    keyword arguments go to tqdm (``set_postfix`` and friends still work on the silent bar)."""
    from tqdm import tqdm

    tty = bool(getattr(sys.stderr, "isatty", lambda: False)())
    if not tty:
        n = total if total is not None else (len(iterable) if hasattr(iterable, "__len__") else None)
        print(f"[physskin-gs] {desc}" + (f": {n} {unit}{'s' if n != 1 else ''}" if n is not None else ""),
              file=sys.stderr, flush=True)
    kwargs.setdefault("disable", False)
    kwargs["disable"] = kwargs["disable"] or not tty
    return tqdm(iterable, desc=desc, unit=unit, total=total, file=sys.stderr, **kwargs)


#: The one line said when the scene analysis is not sure of the up axis (no support found, or two candidates).
UNSURE_UP = ("the scene analysis is not sure which way is up; if the result is not upright, pass --up "
             "(y, -y, z, -z, x, -x or 'ux,uy,uz')")


def unsure_up_note(candidates=None) -> str:
    """:data:`UNSURE_UP`, with the other axes the object stands on (``candidates``: axis names such as "-z", most
    stable first; :attr:`~physskin_gs.geometry.scene_analysis.SceneAnalysis.up_candidates`) named as the ``--up``
    values to try first (held-out captures that came out on their side or upside down got only the generic list)."""
    names = [str(c).lstrip("+") for c in (candidates or [])][:2]
    if not names:
        return UNSURE_UP
    return UNSURE_UP + "; it also stands with " + " or ".join(f"--up {n}" for n in names) + (
        " (most stably the first)" if len(names) > 1 else "")


# ------------------------------------------------------------------------------------------------ outputs
def refuse_existing(path, allowed: bool, flag: str = "--force") -> None:
    """OptionError when ``path`` exists (a dangling symlink counts) and replacing it was not asked for with
    ``flag``; also, even with ``flag``, when it is not a regular file (a device, a FIFO, a socket: replacing it by a
    regular file would break whatever it is)."""
    p = Path(path)
    if p.exists() and not p.is_file() and not p.is_dir():
        raise OptionError(f"{p}: exists and is not a regular file (a device, FIFO or socket); refusing to replace "
                          "it, also with " + flag)
    if (p.exists() or p.is_symlink()) and not allowed:
        what = "exists" if p.exists() else "is a symlink to a missing file"
        raise OptionError(f"{p}: {what}; refusing to replace it (use {flag} to overwrite)")


def check_output_folder(path, option: str = "", create: bool = False, shown=None) -> Path:
    """Check, before any work, that a file can be written at ``path``: the nearest existing folder above it is a
    folder (not a file) that this process may write. With ``create``, missing folders are made. ``shown``: what
    the messages call the output (default ``path``; a folder output is checked through a file in it).

    Returns the output's folder. Raises OutputError naming ``option`` and the folder.
    """
    p = Path(path)
    name = p if shown is None else shown
    lead = f"{option} {name}" if option else str(name)
    if p.is_dir():
        raise OutputError(f"{lead}: is a folder, expected a file name")
    folder = p.parent if str(p.parent) else Path(".")
    probe = folder
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        raise OutputError(f"{lead}: cannot be written: {probe} is a file, not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise OutputError(f"{lead}: cannot be written: no permission to write in {probe}")
    if create and not folder.exists():
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputError(f"{lead}: cannot create the folder {folder} ({exc.strerror or exc})") from None
    if folder.is_dir():
        _remove_dead_probes(folder)
        try:  # permission bits do not tell everything (read-only mounts, ACLs): try to create a file
            fd, tmp = tempfile.mkstemp(prefix=f"{WRITE_PROBE}{os.getpid()}-", dir=folder)
        except OSError as exc:
            raise OutputError(f"{lead}: cannot be written in {folder} ({exc.strerror or exc})") from None
        os.close(fd)
        os.unlink(tmp)
    return folder


#: name prefix of the file a write check creates and removes at once (then the process id and a random part)
WRITE_PROBE = ".physskin-write-test-"


def _remove_dead_probes(folder: Path) -> None:
    """Remove write-check files in ``folder`` left by a process that is gone (killed between creating and
    removing one: a fresh user's ``kill -9`` left ``.physskin-write-test-*`` files). Raises nothing."""
    try:
        names = [n for n in os.listdir(folder) if n.startswith(WRITE_PROBE)]
    except OSError:
        return
    for name in names:
        pid = name[len(WRITE_PROBE):].split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
            continue  # alive (or not ours to signal): its probe is its own
        except ProcessLookupError:
            pass
        except OSError:
            continue
        try:
            os.unlink(folder / name)
        except OSError:
            pass


def verify_written(path, what: str = "output", min_bytes: int = 1) -> int:
    """Check that a writer really wrote ``path``: a file of at least ``min_bytes`` bytes; returns its size.

    Raises OutputError ``could not write WHAT PATH: ...`` otherwise."""
    p = Path(path)
    if not p.is_file():
        raise OutputError(f"could not write {what} {p}: the file does not exist after writing")
    size = p.stat().st_size
    if size < min_bytes:
        raise OutputError(f"could not write {what} {p}: {size} bytes written, expected at least {min_bytes}")
    return size


# ------------------------------------------------------------------------------------------------ JSON
def strict_json(obj: Any, where: str = "") -> Tuple[Any, List[str]]:
    """A copy of ``obj`` (dicts, lists, tuples, numbers, strings) with every non-finite float replaced by None,
    and the key paths where that happened (``step_stats[3].ms``), so ``json.dumps(..., allow_nan=False)`` works.
    """
    paths: List[str] = []

    def walk(x, at):
        if isinstance(x, bool) or x is None or isinstance(x, (int, str)):
            return x
        if isinstance(x, float):
            if math.isfinite(x):
                return x
            paths.append(at or "(value)")
            return None
        if isinstance(x, dict):
            return {k: walk(v, f"{at}.{k}" if at else str(k)) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [walk(v, f"{at}[{i}]") for i, v in enumerate(x)]
        try:  # numpy / torch scalars
            return walk(float(x), at)
        except (TypeError, ValueError):
            return x

    return walk(obj, where), paths


def finite_or_none(x: Any) -> Any:
    """:func:`strict_json` without the paths."""
    return strict_json(x)[0]


# ------------------------------------------------------------------------------------------------ loading
def scene_load_warnings(scene) -> List[str]:
    """What a user should hear about a freshly loaded splat scene, the same in every command that loads one:
    the sanitising report of :func:`physskin_gs.io.validate` (NaN/Inf rows with counts, zero quaternions,
    already-activated opacities or exponentiated scales, extreme log-scales), and floaters that dominate the
    extent (the min/max box more than 3x the 1-99 % quantile box of the opaque centres)."""
    import torch

    from physskin_gs.io import validate

    out = list(validate(scene).get("warnings", []))
    m = scene.means
    ok = torch.isfinite(m).all(1) & torch.isfinite(scene.opacity_logits) & (torch.sigmoid(scene.opacity_logits) >= 0.05)
    pts = m[ok].double()
    if pts.shape[0] >= 100:
        if pts.shape[0] > 200000:
            pts = pts[torch.randperm(pts.shape[0], generator=torch.Generator().manual_seed(0))[:200000]]
        q = torch.quantile(pts, torch.tensor([0.01, 0.99], dtype=torch.float64), dim=0)
        robust = float((q[1] - q[0]).max())
        full = float((pts.max(0).values - pts.min(0).values).max())
        if robust > 0 and full > 3 * robust:
            out.append(f"the bounding box of the opaque Gaussians is {full / robust:.0f}x their 1-99 % extent: "
                       "floaters dominate it (animate ignores them by default; render frames the robust extent)")
    return out


def warn_scene(scene, path) -> None:
    """Print :func:`scene_load_warnings` as ``[physskin-gs] warning: PATH: ...`` lines on stderr."""
    for w in scene_load_warnings(scene):
        warn_option(f"{path}: {w}")


def load_scene_or_mesh(path, quat_order: str = "wxyz", mesh_gaussians: int = 20000, frame: Optional[int] = None):
    """The Gaussian scene of ``path`` for ``render`` and ``convert``: a scene file as :func:`physskin_gs.io.load_scene`
    reads it; a mesh (.obj, .stl, .glb/.gltf without Gaussians, .off, a mesh .ply) as the ``mesh_gaussians`` flat
    Gaussians ``animate`` samples on its surface (:func:`physskin_gs.pipeline.load_for_animation`: the file's colours,
    shaded from above), with a note on stderr saying so. ``frame``: the time code to read from an animated OpenUSD
    file (an exported ``--export-format usd`` sequence, frames 1..F); without it such a file gives its rest state
    and a note names the frames it holds. Raises OptionError (``frame`` given for a file that is not an animated
    USD, or outside its frames), FileNotFoundError or SceneFormatError as the loaders do."""
    from physskin_gs.io import detect_format, load_scene

    fmt = detect_format(str(path))
    if fmt == "usd":
        from physskin_gs.io.usd import load_usd, usd_frame_range

        span = usd_frame_range(path)
        if frame is None:
            if span is not None:
                print(f"note: {path} is an animation (frames {span[0]:g}-{span[1]:g}); this is its rest state, "
                      "--frame K reads frame K", file=sys.stderr)
            return load_usd(path)
        if span is None:
            raise OptionError(f"--frame {frame}: {path} holds no animation (no time samples); leave --frame out")
        if not span[0] <= frame <= span[1]:
            raise OptionError(f"--frame {frame}: {path} holds frames {span[0]:g}-{span[1]:g}")
        return load_usd(path, time=frame)
    if frame is not None:
        raise OptionError(f"--frame reads one frame of an animated OpenUSD file (--export-format usd); {path} is a "
                          f"single scene ({fmt}); an exported PLY or OBJ sequence has a file per frame")
    if fmt not in ("mesh", "mesh-ply"):
        from physskin_gs.pipeline import with_camera_up

        return with_camera_up(load_scene(path, quat_order=quat_order), path)
    from physskin_gs.pipeline import load_for_animation

    scene = load_for_animation(path, num_mesh_gaussians=mesh_gaussians)
    print(f"note: {path} is a mesh: {scene.num_gaussians:,} Gaussians sampled on its surface, as animate samples "
          "them (--mesh-gaussians)", file=sys.stderr)
    return scene


def stand_lines(stand: Optional[dict], material_name: Optional[str]) -> List[str]:
    """The lines (without the ``[physskin-gs]`` prefix) that say the default material was raised until the object
    stands (``anim.info["stand"]``: E_from, E_to, sag_before, sag_after, body; :func:`physskin_gs.pipeline.
    stiffen_to_stand`), as ``animate`` and the viewer print them; [] for None. Raises nothing."""
    if not stand:
        return []
    from physskin_gs.pipeline import STAND_MAX_FACTOR, STAND_SAG

    who = "" if stand.get("body") is None else f" (body {stand['body']} the most)"
    capped = stand["sag_after"] > 1.05 * STAND_SAG  # the raise stopped at its cap, short of the target
    why = (f"as far as the raise goes ({STAND_MAX_FACTOR:g}x): its own weight still bends it "
           f"{stand['sag_after']:.1%} of its height, not {STAND_SAG:.0%}" if capped else
           f"so that its own weight bends it {stand['sag_after']:.1%} of its height")
    before = stand["sag_before"]  # two decimals near the 1 % target (a raise from "1.0%" read as a contradiction)
    before_s = f"{before:.2%}" if before < 3 * STAND_SAG else f"{before:.1%}"
    lines = [f"material {material_name or 'soft'}: E {stand['E_from']:g} -> {stand['E_to']:g} Pa, {why} "
             f"({before_s} at {stand['E_from']:g} Pa{who}; a linear estimate with its base held: a "
             "top-heavy object on a small base can still lean over in a long run); --material or --E sets the "
             "stiffness yourself"]
    if stand["sag_after"] > 10.0 * STAND_SAG:  # the raise hit its cap far from standing: not one object
        lines.append(f"note: even at {STAND_MAX_FACTOR:g}x the default stiffness its own weight bends it "
                     f"{stand['sag_after']:.0%} of its height: what moves is probably not one free-standing object (a "
                     "patch of ground, a room, a fragment of a scene); pick the object with --select (a box, see "
                     "docs/usage.md) or set the stiffness with --material / --E")
    return lines


def prepared_line(anim, material_name: Optional[str], E: float, nu: float, density: float) -> str:
    """``N moving Gaussians, H handles, C cubature points, scale S m/unit, material M (E .. Pa, nu .., .. kg/m^3)``:
    what the viewer prepared (``animate`` prints a longer line of its own). Raises nothing."""
    info = getattr(anim, "info", None) or {}
    nm = int(info.get("num_moving", 0))
    bodies = info.get("bodies")
    nh = int(getattr(anim, "num_handles", 0))
    hand = (f"{len(bodies)} bodies of {', '.join(str(b['handles']) for b in bodies)} handles (each with its constant "
            "one)" if bodies else f"{nh} handle{'s' if nh != 1 else ''} ({nh - 1} + constant)")
    return (f"{nm} moving Gaussian{'s' if nm != 1 else ''}, {hand}, {info.get('num_cubature', '?')} cubature points, "
            f"scale {float(getattr(anim, 'sim_scale', 1.0)):.4g} m/unit, material {material_name or 'custom'} "
            f"(E {E:g} Pa, nu {nu:g}, {density:g} kg/m^3)")


def add_mesh_and_frame_arguments(p, verb: str) -> None:
    """``--mesh-gaussians`` and ``--frame`` of ``render`` and ``convert`` (see :func:`load_scene_or_mesh`); ``verb``
    says what happens to a mesh ("drawn", "converted")."""
    p.add_argument("--mesh-gaussians", dest="mesh_gaussians", type=int, default=20000,
                   help=f"a mesh input (.obj, .stl, .glb, .off, mesh .ply) is {verb} as this many flat Gaussians "
                        "sampled on its surface, coloured and shaded as animate makes them (default 20000)")
    p.add_argument("--frame", type=int, default=None, metavar="K",
                   help="of an animated OpenUSD file (animate --export-format usd): read frame K (1..F) instead of "
                        "its rest state")
