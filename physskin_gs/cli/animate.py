"""`physskin-gs animate PATH`: physics animation of a splat (or mesh), headless export or the browser viewer.

Headless (``--headless``): simulate ``--frames`` frames and write ``DIR/frame0001.ply ...`` (INRIA layout, SH
rotated per Gaussian by R_F; frame 1 is the rest state) plus ``DIR/sequence.json``; mesh inputs write
``DIR/frame0001.obj ...``. ``--video OUT.mp4`` renders an orbit camera through the CPU rasteriser (view-dependent
colour through R_F). ``--script MOTION.json`` scripts drags::

    {"drags": [
      {"handle": 3, "keyframes": [{"frame": 10, "offset": [0, 0.3, 0]}, {"frame": 40, "offset": [0, 0.5, 0.2]}],
       "end_frame": 50},
      {"point": [0.1, 0.2, 0.0], "radius": 0.1, "start_frame": 5,
       "keyframes": [{"frame": 5, "target": [0.1, 0.2, 0.0]}, {"frame": 30, "target": [0.4, 0.6, 0.0]}]}
    ]}

``target`` is a world position (scene units), ``offset`` is relative to the grabbed point; targets are linearly
interpolated between keyframes and held after the last one; the drag starts at ``start_frame`` (default: first
keyframe) and is released after ``end_frame`` (default: last keyframe; -1 = never). With several bodies
(``--select auto`` on a capture with several objects on its support) ``"body": K`` names the body a drag grabs
(numbered as the log lists them: heaviest first with ``auto``, in box order with a box list); a point drag without
it grabs the body nearest its point. With several bodies a ``"freezes"`` list holds bodies still:
``{"body": K, "frame": F, "until": G}`` freezes body K where it is at frame F (its velocity zeroed; an obstacle the
others rest on) and lets it go after frame G (default -1: to the end).

Without ``--headless`` the browser viewer starts (``physskin_gs_viewer.app.run_viewer``) on --host/--port.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
import warnings
from pathlib import Path
from typing import List, Optional

from physskin_gs.cli._common import (OutputError, check_int, check_number, require_input_file, strict_json,
                                     verify_written, warn_option)
from physskin_gs.cli._common import axis_name as _axis_name
from physskin_gs.cli._common import given_options, remember_defaults, scene_summary, stand_lines
from physskin_gs.cli._skinning import add_skinning_arguments, check_handles
from physskin_gs.errors import OptionError, PhysSkinError
from physskin_gs.io._shared import recorded_path
from physskin_gs.materials import DEFAULT_MATERIAL, MATERIALS, material

FRAME_PATTERN = "frame%04d"
#: File names of an exported sequence (frames of either kind, and the metadata).
_SEQUENCE_FILE = re.compile(r"^(frame\d{4,}\.(ply|obj|compressed\.ply)|animation\.usdc|row_order\.npy)$")
_PNG_FILE = re.compile(r"^frame\d{4,}\.png$")
#: Temporary files of the writers (:func:`physskin_gs.io._shared.atomic_output`: ``.NAME.XXXXXXXX.tmp.EXT``; earlier
#: releases: ``NAME.tmp.EXT``, ``NAME.tmp``) for any name a sequence or PNG export writes: an interrupted or killed
#: run's leftovers, removed by the next run that holds the folder's lock.
_SEQUENCE_TEMP = re.compile(r"^\.?(frame\d{4,}\.(ply|obj|compressed\.ply|png)|animation\.usdc|row_order\.npy|"
                            r"sequence\.json)(\.[A-Za-z0-9_]{8})?\.tmp(\.[A-Za-z0-9]+)*$")


class _SelectAction(argparse.Action):
    """``--select`` given several times: the values joined by ``;`` (several boxes, one body each), where argparse
    would keep only the last."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        given = getattr(namespace, "_select_given", None)
        value = str(values) if given is None else f"{given};{values}"
        namespace._select_given = value
        setattr(namespace, self.dest, value)


class _GivenOnce(argparse.Action):
    """An option that takes one value: given twice it is refused (argparse keeps the last without a word, and a
    user's ``--pin below:0.1 --pin below:0.2`` pinned only the second)."""

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, self.dest, None) is not None:
            parser.error(f"{option_string} given twice ({getattr(namespace, self.dest)!r} and {values!r}): it takes "
                         "one value")
        setattr(namespace, self.dest, values)


#: m: a simulated object smaller than this gets a warning (its motion is not resolved)
SMALLEST_OBJECT_M = 1e-3


def register(sub) -> None:
    p = sub.add_parser(
        "animate",
        help="physics animation of a splat or mesh (browser viewer, or --headless export / video)",
        description="Simulate a Gaussian splat (or mesh) with PhysSkin skinning and a subspace Neo-Hookean "
                    "simulator. Without --headless, open the browser viewer.",
    )
    p.add_argument("path", help="input splat (.ply/.splat/compressed .ply) or mesh (.obj/.ply/.stl/.glb)")
    p.add_argument("--headless", action="store_true", help="simulate and export without the viewer")
    p.add_argument("--frames", type=int, default=60, help="number of frames (frame 1 = rest state; default 60)")
    p.add_argument("--steps-per-frame", type=int, default=1, help="simulation steps per frame (default 1)")
    p.add_argument("--export", metavar="DIR", help="write DIR/frame0001.ply ... and DIR/sequence.json")
    p.add_argument("--export-format", dest="export_format", default="ply", choices=("ply", "compressed-ply", "usd"),
                   help="frames as INRIA PLYs (default; frame0001.ply ...), PlayCanvas compressed PLYs "
                        "(frame0001.compressed.ply ..., about 1/4 of the size, SuperSplat imports either sequence) or "
                        "one OpenUSD file with time samples (animation.usdc; needs usd-core: pip install "
                        "'physskin_gs[usd]'); a mesh input exports .obj frames (the default only)")
    p.add_argument("--video", metavar="OUT.mp4", help="render an orbit-camera video")
    p.add_argument("--png", metavar="DIR", help="write every frame as a PNG file into DIR (the frames the video "
                   "would show; with or without --video)")
    p.add_argument("--overwrite", "--force", dest="overwrite", action="store_true",
                   help="replace an existing --video file, and the frames and sequence.json of an earlier run in "
                        "--export / --png (without it they are refused before anything is simulated)")
    p.add_argument("--width", type=int, default=384,
                   help="frame width in pixels (default 384; a video's: a multiple of 16, PNG frames any)")
    p.add_argument("--height", type=int, default=384,
                   help="frame height in pixels (default 384; a video's: a multiple of 16, PNG frames any)")
    p.add_argument("--orbit", type=float, default=90.0, help="degrees the video camera orbits over the clip (default 90)")
    p.add_argument("--script", metavar="MOTION.json", help='scripted drags: {"drags": [{"body": 1, "handle": 3 | "point": [x,y,z], "radius": r, "keyframes": [{"frame": 10, "offset"|"target": [x,y,z]}], "start_frame": 5, "end_frame": 50}], "freezes": [{"body": 2, "frame": 10, "until": 40}]} (targets in scene units; "body": K, as the log lists the bodies, when the scene has several; freezes need several bodies; see docs/usage.md)')
    add_skinning_arguments(p)
    p.add_argument("--material", default=None, metavar="NAME",
                   help="a material by name, setting E, nu and density at once: " + ", ".join(
                       f"{m.name} (E {m.E:g} Pa, nu {m.nu:g}, {m.density:g} kg/m^3)" for m in MATERIALS.values())
                   + "; default soft. --E / --nu / --density override its values")
    p.add_argument("--E", dest="E", type=pressure, default=None,
                   help="Young's modulus in Pa, or with a unit: 100kPa, 2MPa, 1.3GPa (default: the --material's; "
                        "without one, 1e5 raised until the object's own weight bends it at most 1 %% of its height, "
                        "which the log gives)")
    p.add_argument("--nu", type=float, default=None, help="Poisson ratio (default 0.45, or the --material's)")
    p.add_argument("--density", type=float, default=None, help="density in kg/m^3 (default 100, or the "
                   "--material's)")
    p.add_argument("--dt", type=float, default=0.03, help="time step in s (default 0.03)")
    p.add_argument("--gravity", type=float, default=9.8, help="gravity in m/s^2 along -up (default 9.8)")
    p.add_argument("--damping", type=float, default=0.02, help="Rayleigh damping coefficient (default 0.02)")
    p.add_argument("--friction", type=float, default=10.0,
                   help="viscous floor friction in 1/s on the weight the floor carries (default 10: a sliding object "
                        "loses 1 - e^-1 of its speed in 0.1 s; 0 = none)")
    p.add_argument("--floor", dest="floor_spec", default="auto",
                   help="floor height along up in scene units, 'auto' (the support plane the object stands on, found "
                        "by the scene analysis; without one 25%% of the object height below it) or 'off'")
    p.add_argument("--pin", action=_GivenOnce,
                   help="pin region: 'below:0.1' (bottom 10%% of the height), 'base' (the part touching "
                   "the support: the bottom 15%%) or 'box:xmin,ymin,zmin,xmax,ymax,zmax' (one region: a box "
                   "around both parts to hold two)")
    p.add_argument("--region", dest="regions", action="append", default=None, metavar="REGION=MATERIAL",
                   help="a part of the object made of another material, e.g. 'base=wood' (a stiff base keeps a tall "
                        "object standing), 'box:xmin,ymin,zmin,xmax,ymax,zmax=rubber' or 'sphere:x,y,z,r=foam'; "
                        "REGION as --pin's or a sphere, MATERIAL "
                        "one of " + ", ".join(MATERIALS) + ". The region takes the material's E and density, the "
                        "Poisson ratio stays the object's. Repeatable; later regions win where they overlap")
    p.add_argument("--up", default="auto",
                   help="up axis: auto (default: the support plane's normal (within 30 degrees of the up axis a "
                   "file records, which wins without one); without one the file "
                   "axis the object stands on most stably when that is clear, else the format's convention: "
                   ".splat/compressed -y, INRIA PLY +z, meshes +y, glTF +y), y, -y, z, -z, x, -x or 'ux,uy,uz'")
    p.add_argument("--scale", type=float, help="metres per scene unit (default: the object is 1 m across)")
    p.add_argument("--select", default="auto", action=_SelectAction,
                   help="moving part: auto (default: every object the scene analysis finds standing on the support, "
                        "each a body of its own, in contact with the others and the static scene; the support, "
                        "background and floaters stay static but are rendered and exported), largest (only the "
                        "heaviest object), all, a box "
                        "'xmin,ymin,zmin,xmax,ymax,zmax' (scene units) or a rule like 'opacity>0.1'; give --select "
                        "once per box (or 'BOX;BOX') for several bodies, one per box")
    p.add_argument("--cubature", dest="num_cubature", type=int, default=None,
                   help="about this many cubature points sampled from the object's volume (one per cell of a grid "
                        "over it). Default: one per voxel of the skinning basis' voxel mesh (a splat's modes or "
                        "voxel basis: about 1024, so a mirror-symmetric object stays symmetric), else 1024")
    p.add_argument("--field-eval", dest="field_eval", choices=("auto", "grid", "direct"), default="auto",
                   help="skinning weights and gradients at the moving Gaussians: evaluated at every centre (direct), "
                        "or interpolated from a sparse grid built from the field (grid; max error against direct "
                        "printed and in sequence.json); auto (default): the grid from 50k moving Gaussians on, where "
                        "it is faster")
    p.add_argument("--newton-iters", dest="newton_iters", type=int, default=5, help="Newton iterations per step")
    p.add_argument("--solver", choices=("adaptive", "chord", "newton"), default="adaptive",
                   help="Hessian policy: 'newton' refactors the Hessian every iteration, 'chord' once per step, "
                        "'adaptive' (default) hands a converged step's factor on to the next step")
    p.add_argument("--mesh-gaussians", dest="mesh_gaussians", type=int, default=20000,
                   help="Gaussians sampled on a mesh input's surface (default 20000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--host", default="127.0.0.1", help="viewer host (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="viewer port (default 8080)")
    p.add_argument("--record-dir", metavar="DIR", default=None,
                   help="where the viewer's recordings go, one time-stamped folder each (default ./recordings)")
    p.set_defaults(func=run)
    remember_defaults(p)


def config_from_args(args):
    """AnimationConfig from parsed args (``--material`` resolved first). Raises OptionError for a bad --floor or
    --material."""
    from physskin_gs.pipeline import STAND_SAG, AnimationConfig

    resolve_material(args)
    floor, floor_height = True, None
    spec = str(getattr(args, "floor_spec", "auto") or "auto").strip().lower()
    if spec in ("off", "none", "false", "no"):
        floor = False
    elif spec != "auto":
        try:
            floor_height = float(spec)
        except ValueError:
            raise OptionError(f"--floor {args.floor_spec!r}: expected a height, 'auto' or 'off'") from None
        if not math.isfinite(floor_height):
            raise OptionError(f"--floor {args.floor_spec!r}: the height must be a finite number (scene units), "
                              "'auto' or 'off'")
    return AnimationConfig(
        E=args.E, nu=args.nu, density=args.density, material=getattr(args, "material", None), dt=args.dt,
        gravity=args.gravity, up=args.up, floor=floor,
        floor_height=floor_height, damping=args.damping, num_cubature=args.num_cubature,
        newton_iters=args.newton_iters, skinning=args.skinning, checkpoint=args.checkpoint,
        num_handles=getattr(args, "num_handles", 16),
        fit_seconds=args.fit_seconds, select=args.select, scale=args.scale, pin=args.pin, seed=args.seed,
        friction=args.friction, solver=getattr(args, "solver", "adaptive"),
        field_eval=getattr(args, "field_eval", "auto") or "auto",
        regions=parse_regions(getattr(args, "regions", None)),
        # no material chosen (nor regions): the soft default, stiffened where the object would not stand
        stand_sag=None if getattr(args, "material_chosen", True) or getattr(args, "regions", None) else STAND_SAG,
    )


def parse_regions(items) -> tuple:
    """``--region REGION=MATERIAL`` values -> ``((region, material name), ...)``, checked before any work: the
    region's form (``below:F`` with 0 < F <= 1, ``base``, ``box:`` with six numbers, lower <= upper) and the
    material's name. Raises OptionError naming the bad value. (Whether a region holds any of the object is known
    only once it is prepared.)"""
    out = []
    for item in items or ():
        text = str(item).strip()
        spec, sep, name = text.rpartition("=")
        spec, name = spec.strip(), name.strip()
        if not sep or not spec or not name or "=" in spec:
            raise OptionError(f"--region {item!r}: expected REGION=MATERIAL with one '=', e.g. base=wood "
                              "(repeat --region for several regions)")
        try:
            material(name)
        except KeyError as exc:
            raise OptionError(f"--region {item!r}: {exc.args[0]}") from None
        from physskin_gs.pipeline import parse_region

        parse_region(spec, f"--region {item!r}:")
        out.append((spec, material(name).name))
    return tuple(out)


# ------------------------------------------------------------------------------------------------ motion script
class MotionScript:
    """Parsed MOTION.json: a list of drags with keyframed targets (see the module docstring)."""

    def __init__(self, drags: List[dict], path: str, freezes: Optional[List[dict]] = None) -> None:
        self.drags = drags
        self.path = path
        self.freezes = list(freezes or [])  # {"body", "frame", "until"} (several bodies: SceneBodies.set_frozen)
        self.active = {}  # index -> drag id

    #: Known keys of the script, of a drag, of a keyframe and of a freeze ("comment" is allowed everywhere and
    #: ignored).
    SCRIPT_KEYS = ("drags", "freezes", "comment")
    FREEZE_KEYS = ("body", "frame", "until", "comment")
    DRAG_KEYS = ("handle", "point", "body", "radius", "keyframes", "start_frame", "end_frame", "comment")
    KEYFRAME_KEYS = ("frame", "target", "offset", "comment")
    #: what a drag's or freeze's "body" must be
    BODY_INT = "an integer >= 0 (the bodies as the log lists them)"

    @classmethod
    def load(cls, path: str) -> "MotionScript":
        """Read and check MOTION.json against the schema of the module docstring (types, ranges, known keys).

        Raises FileNotFoundError (``--script PATH: input file not found``) or OptionError naming the file and the
        offending key path, e.g. ``motion.json: drags[0].keyframes[1].frame must be an integer >= 1, got 'abc'``.
        """
        require_input_file(path, "--script")
        try:
            with open(path, "r", encoding="utf-8") as fh:
                data = json.load(fh, object_pairs_hook=_no_duplicate_keys)
        except (OSError, ValueError, RecursionError) as exc:  # ValueError: JSONDecodeError, UnicodeDecodeError, an
            # integer over Python's 4300-digit conversion limit
            raise OptionError(f"{path}: not a readable JSON motion script ({exc})") from None
        if isinstance(data, dict):
            _known_keys(data, cls.SCRIPT_KEYS, f"{path}: the script")  # first: a misspelt 'drags' is named as such
        lists = isinstance(data, dict) and all(isinstance(data.get(k, []), list) for k in ("drags", "freezes"))
        if not (lists and ("drags" in data or "freezes" in data)):
            raise OptionError(f"{path}: a motion script is an object with a 'drags' list (and, with several bodies, "
                              "a 'freezes' list)")
        freezes = []
        for i, z in enumerate(data.get("freezes", [])):
            where = f"{path}: freezes[{i}]"
            if not isinstance(z, dict) or "body" not in z or "frame" not in z:
                raise OptionError(f"{where} must be an object with 'body' and 'frame' (and optionally 'until')")
            _known_keys(z, cls.FREEZE_KEYS, where)
            fz = {"body": _script_int(z["body"], f"{where}.body", 0, cls.BODY_INT),
                  "frame": _script_int(z["frame"], f"{where}.frame", 1, "an integer >= 1 (frame 1 is the rest state)"),
                  "until": -1}
            if "until" in z:
                until = z["until"]
                if not (_is_int(until) and (int(until) == -1 or int(until) >= fz["frame"])):
                    raise OptionError(f"{where}.until must be an integer >= its frame ({fz['frame']}), or -1 (frozen "
                                      f"to the end), got {until!r}")
                fz["until"] = int(until)
            end = float("inf") if fz["until"] < 0 else fz["until"]
            for j, o in enumerate(freezes):  # (one body's freezes overlapping ended at the first one's end)
                o_end = float("inf") if o["until"] < 0 else o["until"]
                if o["body"] == fz["body"] and fz["frame"] <= o_end and o["frame"] <= end:
                    span = lambda a, b: f"frames {a}-{'end' if b == float('inf') else int(b)}"  # noqa: E731
                    last = max(end, o_end)
                    raise OptionError(
                        f"{where} (body {fz['body']}, {span(fz['frame'], end)}) overlaps freezes[{j}] "
                        f"({span(o['frame'], o_end)}); give that body one freeze from frame "
                        f"{min(fz['frame'], o['frame'])} until {-1 if last == float('inf') else int(last)}")
            freezes.append(fz)
        drags = []
        for i, d in enumerate(data.get("drags", [])):
            where = f"{path}: drags[{i}]"
            if not isinstance(d, dict):
                raise OptionError(f"{where} must be an object")
            _known_keys(d, cls.DRAG_KEYS, where)
            if ("handle" in d) == ("point" in d):
                raise OptionError(f"{where} needs exactly one of 'handle' or 'point'")
            drag = {}
            if "point" in d:
                drag["point"] = _vec3(d["point"], f"{where}.point")
                if "radius" in d:
                    r = d["radius"]
                    if isinstance(r, bool) or not isinstance(r, (int, float)) or not _finite(r) or r <= 0:
                        raise OptionError(f"{where}.radius must be a positive number (scene units), got {r!r}")
                    drag["radius"] = float(r)
            else:
                drag["handle"] = _script_int(d["handle"], f"{where}.handle", 0, "an integer >= 0")
                if "radius" in d:
                    raise OptionError(f"{where}.radius applies to a 'point' drag only (a handle drag grabs the "
                                      "handle's own region)")
            if "body" in d:
                drag["body"] = _script_int(d["body"], f"{where}.body", 0, cls.BODY_INT)
            kfs = d.get("keyframes")
            if not isinstance(kfs, list) or not kfs:
                raise OptionError(f"{where}.keyframes must be a non-empty list")
            parsed = []
            for j, k in enumerate(kfs):
                kw = f"{where}.keyframes[{j}]"
                if not isinstance(k, dict):
                    raise OptionError(f"{kw} must be an object with 'frame' and one of 'target' or 'offset'")
                _known_keys(k, cls.KEYFRAME_KEYS, kw)
                if "frame" not in k or (("target" in k) == ("offset" in k)):
                    raise OptionError(f"{kw} needs 'frame' and one of 'target' or 'offset'")
                kind = "target" if "target" in k else "offset"
                frame = _script_int(k["frame"], f"{kw}.frame", 1, "an integer >= 1 (frame 1 is the rest state)")
                parsed.append((frame, kind, _vec3(k[kind], f"{kw}.{kind}")))
            parsed.sort(key=lambda t: t[0])
            kinds = {p[1] for p in parsed}
            if len(kinds) != 1:
                raise OptionError(f"{where}: keyframes must all use 'target' or all use 'offset'")
            drag["_kf"] = parsed
            start = parsed[0][0]
            if "start_frame" in d:
                start = _script_int(d["start_frame"], f"{where}.start_frame", 1,
                                    "an integer >= 1 (leave it out for the first keyframe)")
            end = parsed[-1][0]
            if "end_frame" in d:
                end = d["end_frame"]
                if not (_is_int(end) and (int(end) == -1 or int(end) >= 1)):
                    raise OptionError(f"{where}.end_frame must be an integer >= 1, or -1 (never released), "
                                      f"got {end!r}")
                end = int(end)
            if end != -1 and end < start:
                raise OptionError(f"{where}: end_frame {end} is before start_frame {start}; the drag would never "
                                  "run")
            drag["_start"], drag["_end"] = start, end
            drags.append(drag)
        return cls(drags, path, freezes)

    #: how the bodies are numbered, for the errors of :meth:`check_bodies` (which run before the log lists them)
    NUMBERING = ("numbered as the log lists them once prepared: heaviest first with --select auto, in box order with "
                 "a box list")

    def check_bodies(self, n: int) -> None:
        """Check the script's body numbers against a scene of ``n`` bodies (``prepare_bodies``' ``on_bodies``: once
        the scene analysis has counted them, before they are prepared). Raises OptionError naming the script and
        the drag or freeze."""
        for i, z in enumerate(self.freezes):
            if n < 2:
                raise OptionError(f"{self.path}: freezes[{i}]: freezing holds one body still among several; the scene "
                                  "has one moving object (--select auto on a capture with several objects on its "
                                  "support, or one --select box per body)")
            if z["body"] >= n:
                raise OptionError(f"{self.path}: freezes[{i}].body {z['body']}: the scene has {n} bodies (0..{n - 1}; "
                                  f"{self.NUMBERING})")
        for i, d in enumerate(self.drags):
            k = d.get("body", 0)
            if k >= n:
                raise OptionError(f"{self.path}: drags[{i}].body {k}: the scene has {n} bod{'ies' if n > 1 else 'y'} "
                                  f"(0..{n - 1}" + (f"; {self.NUMBERING})" if n > 1 else ")"))

    def validate(self, anim, frames: Optional[int] = None) -> None:
        """Check the script against the prepared scene (before any frame is simulated or written): handle and body
        indices (:meth:`check_bodies`), and a point drag's point within one object height of the object it grabs (a
        point farther off grabs nothing of it: refused). With ``frames`` (the run's frame count), a drag that starts
        after the last frame, or keyframes it never reaches, get a one-line warning. Raises OptionError naming the
        script and the drag."""
        bodies = getattr(anim, "bodies", None)
        self.check_bodies(len(bodies) if bodies else 1)
        if not self.drags and not self.freezes:
            warn_option(f"{self.path}: the script has no drags and no freezes: nothing is scripted")
        for i, z in enumerate(self.freezes):
            if frames is not None and z["frame"] > frames:
                warn_option(f"{self.path}: freezes[{i}] starts at frame {z['frame']}, after the last frame ({frames}; "
                            "--frames): it never runs")
        for i, d in enumerate(self.drags):
            if frames is not None and d["_start"] > frames:
                warn_option(f"{self.path}: drags[{i}] starts at frame {d['_start']}, after the last frame ({frames}; "
                            "--frames): it never runs")
            elif frames is not None and d["_kf"][-1][0] > frames:
                warn_option(f"{self.path}: drags[{i}]'s keyframes run to frame {d['_kf'][-1][0]}, past the last "
                            f"frame ({frames}; --frames): the run ends before them")
            if "point" in d:
                self._check_point(anim, i, d)
            k = d.get("body", 0)
            nh = bodies[k].num_handles if bodies and "body" in d else anim.num_handles  # (no body: global index)
            if "handle" in d and not 0 <= d["handle"] < nh - 1:
                raise OptionError(f"{self.path}: drags[{i}].handle {d['handle']} outside [0, {nh - 2}] "
                                  f"(the {nh - 1} learned handles; the constant handle is not draggable)")
            self._warn_frozen_drag(anim, i, d, frames)

    def _warn_frozen_drag(self, anim, i: int, d: dict, frames: Optional[int]) -> None:
        """A one-line warning when drags[i] pulls a body that one freeze holds for all of the drag's frames (it
        would move nothing; a user's misnumbered body, or a freeze meant to end earlier)."""
        if not self.freezes or not getattr(anim, "bodies", None):
            return
        if "body" in d:
            k = d["body"]
        elif "handle" in d:
            k = anim.handle_owner(d["handle"])[0]
        else:
            k = anim.nearest_body(d["point"])
        last = frames if frames is not None else float("inf")
        end = last if d["_end"] == -1 else min(d["_end"], last)
        for j, z in enumerate(self.freezes):
            until = last if z["until"] == -1 else z["until"]
            if z["body"] == k and z["frame"] <= d["_start"] and until >= end:
                span = f"frames {z['frame']}-{'end' if z['until'] == -1 else z['until']}"
                warn_option(f"{self.path}: drags[{i}] pulls body {k}, which freezes[{j}] holds still for all of its "
                            f"frames ({span}): the drag moves nothing")
                return

    def _check_point(self, anim, i: int, d: dict) -> None:
        """Refuse drags[i]'s point when it lies more than the grabbed object's height (scene units) from all of
        its cubature points: the drag would spring the nearest 8 toward a place the object is not."""
        import torch

        bodies = getattr(anim, "bodies", None)
        if d.get("body", 0) >= (len(bodies) if bodies else 1):
            return  # the body index check below names that (a drag of body 1 when one object moves, say)
        if bodies:
            k = d["body"] if "body" in d else anim.nearest_body(d["point"])
            obj, name = bodies[k], f"body {k}"
        else:
            obj, name = anim, "the object"
        if not hasattr(obj, "cubature_positions"):  # (a stand-in scene of the tests)
            return
        x = obj.cubature_positions()
        dist = float((x - torch.tensor(d["point"], dtype=torch.float32)).norm(dim=1).min())
        if dist > obj.height_scene:
            lo, hi = x.min(0).values.tolist(), x.max(0).values.tolist()
            box = lambda v: "[" + ", ".join(f"{c:.3g}" for c in v) + "]"  # noqa: E731
            raise OptionError(f"{self.path}: drags[{i}].point {box(d['point'])} is {dist:.3g} scene units from "
                              f"{name} (its height {obj.height_scene:.3g}; it spans {box(lo)} to {box(hi)}): a point "
                              "drag grabs the object around its point, so put the point on or near it")

    @staticmethod
    def _interp(kf, frame: int):
        if frame <= kf[0][0]:
            return kf[0][2]
        for (f0, _, v0), (f1, _, v1) in zip(kf[:-1], kf[1:]):
            if f0 <= frame <= f1:
                t = 0.0 if f1 == f0 else (frame - f0) / (f1 - f0)
                return [a + t * (b - a) for a, b in zip(v0, v1)]
        return kf[-1][2]

    def apply(self, anim, frame: int) -> None:
        """Freeze or unfreeze bodies, and start, update or end drags, for ``frame`` (1-based)."""
        for z in self.freezes:
            if frame == z["frame"]:
                anim.set_frozen(z["body"], True)
                print(f"[physskin-gs] frame {frame}: body {z['body']} frozen"
                      + ("" if z["until"] < 0 else f" until frame {z['until']}"), file=sys.stderr)
            elif z["until"] >= 0 and frame == z["until"] + 1:
                anim.set_frozen(z["body"], False)
                print(f"[physskin-gs] frame {frame}: body {z['body']} unfrozen", file=sys.stderr)
        for i, d in enumerate(self.drags):
            if i not in self.active and d["_start"] <= frame and (d["_end"] < 0 or frame <= d["_end"]):
                kw = {"body": d["body"]} if "body" in d and hasattr(anim, "bodies") else {}
                if "handle" in d:
                    did = anim.start_handle_drag(d["handle"], **kw)
                    grab = anim.handle_positions(**kw)[d["handle"]].tolist()
                else:
                    did = anim.start_drag(d["point"], d.get("radius"), **kw)
                    grab = list(d["point"])
                self.active[i] = (did, grab)
                at = f"[{', '.join(f'{v:.3g}' for v in d.get('point', ()))}]"
                g = getattr(anim, "last_grab", None) if "point" in d else None
                if "handle" in d:
                    what = f"handle {d['handle']}"
                elif g is None or g["within"]:
                    what = (f"the {g['points']} cubature points" if g else "the points") + \
                        (f" within {g['radius']:.3g} of {at}" if g else f" near {at}")
                else:
                    what = (f"the {g['points']} cubature points nearest {at} (none within {g['radius']:.3g}; the "
                            f"nearest {g['nearest']:.3g} away)")
                end = "never released" if d["_end"] < 0 else f"released after frame {d['_end']}"
                whose = f" of body {d['body']}" if kw else ""
                if not kw and getattr(anim, "num_bodies", 1) > 1:  # no "body": say which one it grabbed
                    if "handle" in d:
                        k, local = anim.handle_owner(d["handle"])
                        whose = f" (body {k}'s handle {local})"
                    else:
                        whose = f" of body {g['body']} (the nearest)"
                print(f"[physskin-gs] frame {frame}: drag {i} grabs {what}{whose} ({end})", file=sys.stderr)
            if i in self.active:
                did, grab = self.active[i]
                if d["_end"] >= 0 and frame > d["_end"]:
                    anim.end_drag(did)
                    self.active.pop(i)
                    d["_start"] = 1 << 30  # never restart
                    continue
                v = self._interp(d["_kf"], frame)
                tgt = [g + o for g, o in zip(grab, v)] if d["_kf"][0][1] == "offset" else v
                anim.update_drag(did, tgt)

    def framing_points(self, box) -> List[List[float]]:
        """Points (scene units) a headless camera should keep in view for this script: the corners of ``box``
        ((lo, hi), two 3-lists: what moves) moved by each keyframe's offset, and each keyframe's target (a fresh
        user's pushed bust fell out of the frame). Raises nothing."""
        lo, hi = box
        corners = [[(hi if i >> k & 1 else lo)[k] for k in range(3)] for i in range(8)]
        out: List[List[float]] = []
        for d in self.drags:
            for _, kind, v in d.get("_kf", []):
                out += [[c + o for c, o in zip(cn, v)] for cn in corners] if kind == "offset" else [list(v)]
        return out


def _vec3(v, where: str) -> List[float]:
    if not isinstance(v, (list, tuple)) or len(v) != 3 \
            or any(isinstance(x, bool) or not isinstance(x, (int, float)) for x in v):
        raise OptionError(f"{where} must be a list of 3 numbers, got {v!r}")
    if not all(_finite(x) for x in v):
        raise OptionError(f"{where} must be finite, got {v!r}")
    return [float(x) for x in v]


def _finite(x) -> bool:
    """math.isfinite for a JSON number, False (not OverflowError) for an integer too large for a float."""
    try:
        return math.isfinite(x)
    except OverflowError:
        return False


def _is_int(v) -> bool:
    """True for a JSON integer (or an integral float such as 10.0), never for a bool."""
    if isinstance(v, bool):
        return False
    if isinstance(v, int):
        return True
    return isinstance(v, float) and math.isfinite(v) and v.is_integer()


def _script_int(v, where: str, lo: int, what: str) -> int:
    if not _is_int(v) or int(v) < lo:
        raise OptionError(f"{where} must be {what}, got {v!r}")
    return int(v)


def _known_keys(obj: dict, known, where: str) -> None:
    """Raise OptionError naming the first key of ``obj`` not in ``known`` (with the closest known key, if one is
    close: a misspelling), and the known keys."""
    import difflib

    unknown = [k for k in obj if k not in known]
    if unknown:
        close = difflib.get_close_matches(str(unknown[0]), list(known), n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise OptionError(f"{where}: unknown key {unknown[0]!r}{hint} (known keys: {', '.join(known)})")


# ------------------------------------------------------------------------------------------------ video
class OrbitVideo:
    """Orbit-camera renderer for the headless video (CPU torch rasteriser; floor drawn as a checker of flat
    Gaussians when enabled)."""

    def __init__(self, anim, width: int, height: int, frames: int, orbit_deg: float, script=None) -> None:
        import torch

        from physskin_gs.render import orbit_camera

        if width <= 0 or height <= 0:  # (multiples of 16 for a video: checked with the options)
            raise OptionError(f"--width/--height must be positive, got {width}x{height}")
        self.anim, self.width, self.height = anim, width, height
        self.frames = max(1, frames)
        self.orbit = orbit_deg
        up = anim.up_vector
        self.up = up
        m = anim.scene.means[anim.moving].double()
        floor_h = None
        counts = (getattr(anim, "info", None) or {}).get("scene_analysis", {}).get("counts", {})
        captured = counts.get("support", 0) > 0 and not bool(anim.moving.all())  # the support is in the picture
        if anim.floor_scene is not None and (not hasattr(anim, "bodies") or anim.support_height is None):
            # (several bodies on a captured support: it is finite, and an endless checker floor at its height would
            # hide a body falling past its edge; without a support their floor is endless, and drawn)
            floor_h = anim.floor_scene
            # frame the object where it starts and where it lands: a mesh starts a quarter of its height above the
            # floor, and framing the start alone cut its bottom off once it fell (a fresh user's find)
            u = up.to(m)
            drop = float((m @ u).min()) - float(floor_h)
            if drop > 0:
                m = torch.cat([m, m - drop * u])
        if script is not None:  # where the script drags it (MotionScript.framing_points)
            box = (m.min(0).values.tolist(), m.max(0).values.tolist())
            pts = script.framing_points(box)
            if pts:
                m = torch.cat([m, torch.tensor(pts, dtype=m.dtype)])
        lo, hi = m.min(0).values, m.max(0).values
        center = 0.5 * (lo + hi)
        radius = 0.5 * float((hi - lo).norm())
        if floor_h is not None:
            # look a bit lower so the floor contact stays in view
            center = center - 0.5 * (float(center @ up) - floor_h) * up * 0.5
        self.target = center
        self._orbit_camera = orbit_camera
        self.distance = self._fit_distance(m, up.to(m), center, 3.4 * radius)
        # the checker stands in for a floor nobody captured: a captured support is drawn as it is (a checker at its
        # top hid the seal's pavement and its plate's sides: a fresh user's find)
        self.floor = self._floor_gaussians(center, radius, floor_h, up) if floor_h is not None and not captured \
            else None
        self.torch = torch

    def _fit_distance(self, m, up, target, distance: float, margin: float = 0.05) -> float:
        """The camera distance (scene units) at which the box of ``m`` (M, 3) (the moving rows, and where they
        land), in the frame of ``up`` (3,), projects inside the frame with ``margin`` of its size to spare at every
        azimuth the orbit passes (9 of them), starting from ``distance`` and backing off 5 % at a time (at most 40
        times): a tall object's top touched the frame's edge once the target was lowered to keep the floor contact
        in view (a fresh user's headpiece). A box that fits at ``distance`` keeps it. Raises nothing."""
        import torch

        from physskin_gs.geometry.support import plane_axes

        B = torch.from_numpy(plane_axes(up.numpy())).to(m)  # [2, 3]
        frame = torch.cat([B, up[None]])  # [3, 3] rows: two horizontal axes and up
        loc = m @ frame.T  # [M, 3]
        lo, hi = loc.min(0).values, loc.max(0).values
        sel = torch.tensor([[i >> k & 1 for k in range(3)] for i in range(8)], dtype=m.dtype)  # [8, 3]
        corners = (lo + sel * (hi - lo)) @ frame  # [8, 3] scene units
        azimuths = [30.0 + self.orbit * t / 8.0 for t in range(9)]
        for _ in range(40):
            inside = True
            for az in azimuths:
                cam = self._orbit_camera(az, 15.0, distance, target, self.up, self.width, self.height)
                vm, K = cam.viewmat.double(), cam.K.double()
                pc = corners.double() @ vm[:3, :3].T + vm[:3, 3]  # [8, 3] camera frame
                if bool((pc[:, 2] <= 1e-9).any()):
                    inside = False
                    break
                u = K[0, 0] * pc[:, 0] / pc[:, 2] + K[0, 2]
                v = K[1, 1] * pc[:, 1] / pc[:, 2] + K[1, 2]
                if bool((u < margin * self.width).any() or (u > (1 - margin) * self.width).any()
                        or (v < margin * self.height).any() or (v > (1 - margin) * self.height).any()):
                    inside = False
                    break
            if inside:
                break
            distance *= 1.05
        return float(distance)

    def _floor_gaussians(self, center, radius, h, up):
        import torch

        # orthonormal floor basis
        a = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)
        if abs(float(a @ up)) > 0.9:
            a = torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64)
        e1 = torch.nn.functional.normalize(a - (a @ up) * up, dim=0)
        e2 = torch.linalg.cross(up, e1)
        n = 48
        extent = 2.4 * radius
        cell = 2 * extent / n
        g = torch.arange(n, dtype=torch.float64)
        ii, jj = torch.meshgrid(g, g, indexing="ij")
        u = -extent + (ii.reshape(-1) + 0.5) * cell
        v = -extent + (jj.reshape(-1) + 0.5) * cell
        base = center - (center @ up - h) * up
        means = base + u[:, None] * e1 + v[:, None] * e2
        L = torch.stack([e1 * cell * 0.45, e2 * cell * 0.45, up * cell * 0.02], dim=-1)  # [3, 3]
        cov = (L @ L.T).expand(means.shape[0], 3, 3)
        checker = ((ii.reshape(-1) // 4 + jj.reshape(-1) // 4) % 2).double()
        col = (0.55 + 0.2 * checker)[:, None].expand(-1, 3)
        return means.float(), cov.float().contiguous(), torch.full((means.shape[0],), 0.9), col.float().contiguous()

    def render(self, k: int):
        """RGB uint8 (H, W, 3) of the current state for video frame k (0-based)."""
        import torch

        from physskin_gs.render import rasterize, sh_to_rgb, to_uint8

        cam = self._orbit_camera(30.0 + self.orbit * k / max(1, self.frames - 1), 15.0, self.distance,
                                 self.target, self.up, self.width, self.height)
        dg = self.anim.deformed_gaussians()
        colors = sh_to_rgb(dg.sh, dg.means, cam.center.to(dg.means.dtype), dg.view_rotations)
        means, covs, ops = dg.means, dg.covars, dg.opacities
        if self.floor is not None:
            fm, fc, fo, fcol = self.floor
            means = torch.cat([means, fm])
            covs = torch.cat([covs, fc])
            ops = torch.cat([ops, fo])
            colors = torch.cat([colors.float(), fcol])
        out = rasterize(means, covs, ops, colors.float(), cam.viewmat, cam.K, self.width, self.height,
                        background=torch.tensor([0.13, 0.14, 0.17]))
        return to_uint8(out.rgb)


# ------------------------------------------------------------------------------------------------ run


def resolve_material(args) -> None:
    """Fill ``args.E`` / ``args.nu`` / ``args.density`` that were not given from ``--material`` (default
    :data:`physskin_gs.materials.DEFAULT_MATERIAL`); an explicit value wins. Sets ``args.material`` to the
    preset's name. Raises OptionError for an unknown or empty name."""
    name = getattr(args, "material", None)
    first = not hasattr(args, "material_chosen")  # the first call sees what the user gave (later ones the preset)
    if first:
        # the stiffness is the user's with --material or --E (--nu or --density alone keep the default's E, raised
        # until the object stands: pipeline.stiffen_to_stand)
        args.material_chosen = name is not None or getattr(args, "E", None) is not None
        args.material_overrides = [f"--{f}" for f in ("E", "nu", "density") if getattr(args, f, None) is not None]
    if name is not None and not str(name).strip():
        raise OptionError("--material is empty; give a name (" + ", ".join(MATERIALS) + ")")
    try:
        mat = material(name if name is not None else DEFAULT_MATERIAL)
    except KeyError as exc:
        raise OptionError(f"--material: {exc.args[0]}") from None
    if first:
        # what the log calls the material: the preset's name, "NAME with --density" when some of its values were
        # overridden (`--material rubber --density 30` was logged and recorded as plain rubber), or "custom" when
        # values were given without one
        given = args.material_overrides
        args.material_label = None if not given else (
            f"{mat.name} with {', '.join(given)}" if name is not None
            else f"custom ({', '.join(given)}; the rest from {mat.name})")
    args.material = mat.name
    for field in ("E", "nu", "density"):
        if getattr(args, field, None) is None:
            setattr(args, field, getattr(mat, field))


def validate_args(args) -> None:
    """Cheap checks of every option value, run before any loading or precomputation: finite, in range (the range is
    in the message); legal but unusual values print a warning. Raises OptionError."""
    from physskin_gs.elastic import lame_parameters

    e_given = getattr(args, "E", None) is not None  # (a material's own E, e.g. plastic's 2e9, is no surprise)
    resolve_material(args)
    E = check_number("--E (Young's modulus)", args.E, 0.0, 1e12, lo_open=True, unit="Pa")
    nu = check_number("--nu (Poisson ratio)", args.nu, -1.0, 0.5, lo_open=True, hi_open=True)
    try:
        lame_parameters(E, nu)
    except ValueError as exc:
        raise OptionError(str(exc)) from None
    check_number("--density", args.density, 0.0, 1e5, lo_open=True, unit="kg/m^3")
    dt = check_number("--dt", args.dt, 1e-6, 1.0, unit="s")
    g = check_number("--gravity", args.gravity, -1000.0, 1000.0, unit="m/s^2")
    check_number("--damping", args.damping, 0.0, 100.0)
    check_number("--friction", args.friction, 0.0, 1000.0, unit="1/s")
    check_int("--newton-iters", args.newton_iters, 1, 100)
    if args.num_cubature is not None:
        check_int("--cubature", args.num_cubature, 16, 100_000)
    check_handles(args)
    check_int("--frames", args.frames, 1, 100_000)
    check_int("--steps-per-frame", args.steps_per_frame, 1, 1000)
    check_int("--mesh-gaussians", args.mesh_gaussians, 16, 10_000_000)
    check_int("--seed", args.seed, 0, 2 ** 32 - 1)
    check_int("--port", args.port, 0, 65535)
    check_number("--fit-seconds", args.fit_seconds, 0.0, 86400.0, lo_open=True, unit="s")
    check_number("--orbit", args.orbit, -3600.0, 3600.0, unit="degrees")
    if args.scale is not None:
        check_number("--scale", args.scale, 0.0, 1e9, lo_open=True, unit="m per scene unit")
    from physskin_gs.pipeline import parse_selection_spec

    parse_selection_spec(getattr(args, "select", None))  # syntax only; the rows are counted after loading
    from physskin_gs.pipeline import resolve_up

    resolve_up(args.up)  # an axis name or 'ux,uy,uz'
    if getattr(args, "headless", False) and (args.video or args.png):
        w, h = args.width, args.height
        if isinstance(w, bool) or isinstance(h, bool) or w <= 0 or h <= 0 or w > 8192 or h > 8192:
            raise OptionError(f"--width/--height must be positive, up to 8192, got {w}x{h}")
        if args.video and (w % 16 or h % 16):  # (a video's macroblocks; PNG frames take any size, as render does)
            raise OptionError(f"--width/--height must be positive multiples of 16 up to 8192 for a video, got "
                              f"{w}x{h}")
    pin = getattr(args, "pin", None)
    if pin:
        from physskin_gs.pipeline import parse_region

        parse_region(pin, "--pin")  # the region's form; whether it holds part of the object is known once prepared
    config_from_args(args)  # --floor, --material, --region
    fmt = getattr(args, "export_format", "ply") or "ply"
    if fmt != "ply":
        from physskin_gs.io.sequence import check_export_format

        check_export_format(fmt)  # usd without usd-core fails here, before any work
        from physskin_gs.io import detect_format

        if os.path.isfile(args.path) and detect_format(args.path) in ("mesh", "mesh-ply"):
            raise OptionError(f"--export-format {fmt}: a mesh input is exported as a mesh sequence (.obj frames); "
                              "use the default --export-format ply")
    # legal but unusual: say so
    if dt > 0.1:
        warn_option(f"--dt {dt:g} s is a large time step (default 0.03): the motion may be inaccurate or damped")
    elif dt < 1e-3:
        per_frame = dt * args.steps_per_frame
        warn_option(f"--dt {dt:g} s is a very small time step: each frame advances {per_frame:g} s, so the motion "
                    "will look nearly frozen (raise --steps-per-frame or --dt)")
    if g < 0:
        warn_option(f"--gravity {g:g} is negative: gravity pulls along +up")
    if e_given and (E < 1e2 or E > 1e9):
        warn_option(f"--E {E:g} Pa is {'extremely soft' if E < 1e2 else 'extremely stiff'} (default 1e5): "
                    + ("the object may collapse" if E < 1e2 else "the object will barely deform"))


def _existing_frames(folder: Path, pattern) -> List[Path]:
    """Files in ``folder`` whose names match ``pattern`` (an exported sequence's frames), sorted."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if pattern.match(p.name))


#: output names that look like a file rather than a folder (refused for --export / --png unless such a folder exists)
_FILE_LIKE = (".ply", ".splat", ".usd", ".usda", ".usdc", ".usdz", ".glb", ".gltf", ".mp4", ".png", ".json", ".obj")


def _no_duplicate_keys(pairs):
    """json ``object_pairs_hook``: a dict, or ValueError for a key given twice (json keeps the last silently: a
    script with two "drags" lists ran the second, empty one without a word)."""
    out = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"the key {k!r} is given twice in one object")
        out[k] = v
    return out


def pressure(text: str) -> float:
    """argparse type of ``--E``: :func:`physskin_gs.materials.parse_pressure` (pascals, or a number with Pa / kPa /
    MPa / GPa). Raises ValueError (argparse's "invalid pressure value") otherwise."""
    from physskin_gs.materials import parse_pressure

    return parse_pressure(text)


def _export_name(name: str) -> bool:
    """A name an export writes or replaces in its folder: frames, the USD file, the row order, sequence.json."""
    return bool(_SEQUENCE_FILE.match(name)) or name == "sequence.json"


def _output_list(args) -> list:
    """The headless run's outputs, for :func:`physskin_gs.cli._outputs.claim_outputs`."""
    from physskin_gs.cli._outputs import Output

    overwrite = bool(getattr(args, "overwrite", False))
    return [Output("--video", args.video, replace=overwrite, flag="--overwrite"),
            Output("--export", args.export, folder=True, replace=overwrite, flag="--overwrite", writes=_export_name),
            Output("--png", args.png, folder=True, replace=overwrite, flag="--overwrite",
                   writes=lambda n: bool(_PNG_FILE.match(n)))]


def check_outputs(args, src: str) -> None:
    """Refuse, before anything is loaded or simulated, every output that cannot be written or would replace
    something without ``--overwrite``, by the one rule of :mod:`physskin_gs.cli._outputs` (never an input, not a
    folder where a file is expected, writable, missing folders made, one live run per output): --video (a video
    extension; an existing file only with --overwrite), --export and --png (folders that hold no frames of another
    run unless --overwrite; none of their frame names is an input). Raises OptionError / OutputError."""
    from physskin_gs.cli._outputs import claim_outputs, refuse_inputs

    overwrite = bool(getattr(args, "overwrite", False))
    if not args.export and not args.video and not args.png:
        raise OptionError("--headless writes nothing without --export DIR, --video OUT.mp4 or --png DIR; "
                          "add one of them")
    outputs = _output_list(args)
    inputs = [src, getattr(args, "script", None), getattr(args, "checkpoint", None)]
    refuse_inputs(outputs, inputs)
    if args.video and not str(args.video).lower().endswith((".mp4", ".mov", ".mkv", ".webm", ".gif")):
        raise OptionError(f"--video {args.video}: use a .mp4 (or .mov/.mkv/.webm/.gif) file name")
    for option, folder in (("--export", args.export), ("--png", args.png)):
        # a folder named like a scene file (`--export out/seq.ply` made a folder 'seq.ply' of frames)
        if folder and not Path(folder).is_dir() and str(folder).lower().endswith(_FILE_LIKE):
            raise OptionError(f"{option} {folder}: {option} takes a folder (frames are written into it as "
                              f"{'frame0001.ply ...' if option == '--export' else 'frame0001.png ...'}), and this "
                              f"name looks like a file's; give a folder such as {Path(folder).with_suffix('')}")

    def refuse_other_runs() -> None:
        for option, folder, pattern in (("--export", args.export, _SEQUENCE_FILE), ("--png", args.png, _PNG_FILE)):
            if not folder:
                continue
            d = Path(folder)
            old = _existing_frames(d, pattern)
            recorded = option == "--export" and (d / "sequence.json").exists()
            if recorded:
                old.append(d / "sequence.json")
            if old and not overwrite:
                names = ", ".join(p.name for p in old[:3]) + (f" ... ({len(old)} files)" if len(old) > 3 else "")
                whose = ("the files of another run" if recorded or option == "--png" else
                         "frame files that no sequence.json describes (a killed run's, or files of your own)")
                raise OptionError(f"{option} {d} already holds {whose} ({names}); use --overwrite to replace them, "
                                  "or choose an empty folder")

    refuse_other_runs()  # before the lock: a refused run makes no folder
    claim_outputs(outputs, inputs)
    refuse_other_runs()  # again with the lock held: a run that finished in between left its frames


def _remove_old_run(folder: Path, pattern, with_meta: bool) -> int:
    """Delete the frames (and sequence.json) an earlier run left in ``folder`` (``--overwrite``); returns how many."""
    old = _existing_frames(folder, pattern)
    if with_meta and (folder / "sequence.json").exists():
        old.append(folder / "sequence.json")
    for p in old:
        try:
            p.unlink()
        except OSError as exc:
            raise OutputError(f"--overwrite: cannot remove {p} ({exc.strerror or exc})") from None
    return len(old)


#: Prefix of the hidden folder an --overwrite run writes into before its files replace the earlier run's.
_STAGE_PREFIX = ".physskin-gs-new-"


def _new_stage(folder: Path) -> Path:
    """A new hidden folder inside ``folder`` for this run's files (``--overwrite`` over an earlier run)."""
    import tempfile

    try:
        return Path(tempfile.mkdtemp(prefix=_STAGE_PREFIX, dir=folder))
    except OSError as exc:
        raise OutputError(f"--overwrite: cannot create a folder in {folder} ({exc.strerror or exc})") from None


def _drop_stage(stage: Path) -> None:
    import shutil

    shutil.rmtree(stage, ignore_errors=True)


def _remove_stages(folder: Path) -> int:
    """Remove the stage folders a killed run left in ``folder`` (this run holds its lock); returns how many."""
    n = 0
    for p in folder.glob(_STAGE_PREFIX + "*") if folder.is_dir() else []:
        if p.is_dir() and not p.is_symlink():
            _drop_stage(p)
            n += 1
    return n


def _commit_stage(stage: Path, folder: Path, kinds) -> int:
    """Replace the earlier run's files in ``folder`` by the complete run in ``stage`` (each ``(pattern, with
    sequence.json)`` of ``kinds`` names the earlier files), in an order that never leaves a ``sequence.json``
    beside frames it does not list, even if the process is killed half-way: the earlier sequence.json goes first,
    then this run's frames are renamed over the earlier ones (one atomic rename each, same file system), then the
    earlier frames this run does not have are removed, and this run's sequence.json comes last; the stage is then
    removed. Returns how many earlier files went. Raises OutputError (this run's files are then in the stage)."""
    try:
        names = sorted(p.name for p in stage.iterdir())
        old = set()
        for pattern, with_meta in kinds:
            old.update(p.name for p in _existing_frames(folder, pattern))
            if with_meta and (folder / "sequence.json").exists():
                (folder / "sequence.json").unlink()
                old.add("sequence.json")
        for name in names:
            if name != "sequence.json":
                os.replace(stage / name, folder / name)
        for name in sorted(old - set(names)):
            (folder / name).unlink()
        if "sequence.json" in names:
            os.replace(stage / "sequence.json", folder / "sequence.json")
    except OSError as exc:
        raise OutputError(f"--overwrite: cannot move this run's files from {stage} into {folder} "
                          f"({exc.strerror or exc}); they are in {stage}") from None
    _drop_stage(stage)
    return len(old)


def sequence_json_text(meta: dict) -> str:
    """``sequence.json`` as strict JSON (no NaN / Infinity): non-finite numbers are written as null and listed
    under ``null_values`` with a note."""
    clean, paths = strict_json(meta)
    if paths:
        clean["null_values"] = {"note": "these values were not finite numbers (NaN or infinity) and are written "
                                        "as null", "keys": paths}
    return json.dumps(clean, indent=1, allow_nan=False)


#: options of one mode only: the viewer's, and the headless video's (the headless run's outputs and --script are
#: refused in the viewer)
VIEWER_ONLY = ("host", "port", "record_dir")
VIDEO_ONLY = ("frames", "width", "height", "orbit")


def other_mode_notes(args) -> list:
    """Lines naming the options given (:func:`physskin_gs.cli._common.given_options`) that the chosen mode does not
    use: the viewer's ``--host``, ``--port``, ``--record-dir`` in a headless run; the headless video's ``--frames``,
    ``--width``, ``--height``, ``--orbit`` in the viewer."""
    headless = bool(getattr(args, "headless", False))
    given = [f"--{n.replace('_', '-')}" for n in given_options(args, VIEWER_ONLY if headless else VIDEO_ONLY)]
    if not given:
        return []
    what = ("the browser viewer's; a --headless run does not use them" if headless else
            "a --headless run's; the viewer runs until you stop it and records from its Record folder")
    return [f"{', '.join(given)}: {'options' if len(given) > 1 else 'an option'} of {what}"]


def run(args) -> int:
    """``physskin-gs animate``: the input file and every option are checked first (same rules in both modes), then
    the browser viewer starts, or :func:`run_headless` runs."""
    for line in other_mode_notes(args):
        print(f"[physskin-gs] note: {line}", file=sys.stderr)
    if getattr(args, "headless", False):
        return run_headless(args)
    require_input_file(args.path)
    given = [f"{o} {v}" for o, v in (("--export", args.export), ("--video", args.video), ("--png", args.png),
                                     ("--script", getattr(args, "script", None))) if v]
    if given:  # the viewer writes its recordings itself: these would be silently ignored
        raise OptionError(f"{', '.join(given)}: for --headless runs only (the viewer takes its drags from the "
                          "browser); add --headless, or open the viewer without them and record from its Record "
                          "folder (into --record-dir, default ./recordings)")
    validate_args(args)
    args.config = config_from_args(args)
    if args.record_dir:
        from physskin_gs.cli._common import check_output_folder

        check_output_folder(os.path.join(args.record_dir, "rec"), "--record-dir", shown=args.record_dir)
    try:
        from physskin_gs_viewer.app import run_viewer
    except ImportError as exc:
        raise PhysSkinError(f"the browser viewer is not available ({exc}); use --headless") from None
    return run_viewer(args)


def run_headless(args) -> int:
    """Headless simulation, export and video (module docstring). Returns 0.

    Every option and output is checked before the scene is loaded (:func:`validate_args`, :func:`check_outputs`).
    The exported frames and sequence.json are written before the video, so a video that cannot be written (an
    error, exit code 2) still leaves the simulated sequence."""
    import torch

    from physskin_gs.cli._outputs import discard_created_folders
    from physskin_gs.io.sequence import open_sequence_exporter
    from physskin_gs.bodies import prepare_bodies
    from physskin_gs.pipeline import load_for_animation

    src = os.path.abspath(require_input_file(args.path))
    validate_args(args)
    config = config_from_args(args)
    script = MotionScript.load(args.script) if args.script else None
    check_outputs(args, src)
    export = Path(args.export) if args.export else None

    t0 = time.perf_counter()
    scene = load_for_animation(src, num_mesh_gaussians=args.mesh_gaussians, seed=args.seed)
    if scene.format != "mesh":
        from physskin_gs.cli._common import warn_scene

        warn_scene(scene, src)
    is_mesh = scene.format == "mesh"
    last = [""]

    def progress(stage, frac):
        if stage != last[0]:
            print(f"[physskin-gs] {stage}", file=sys.stderr, flush=True)
            last[0] = stage

    with warnings.catch_warnings():
        warnings.simplefilter("default")
        try:
            anim = prepare_bodies(scene, config, progress=progress,
                                  on_bodies=None if script is None else script.check_bodies)
        except PhysSkinError:
            discard_created_folders()  # nothing was written: no empty output folders left behind
            raise
        except ValueError as exc:  # the geometry / basis layers reject an unusable input with a ValueError
            discard_created_folders()
            raise PhysSkinError(f"{args.path}: cannot prepare the animation: {exc}") from None
    gap = _start_gap(anim)  # (of its height above the floor it falls onto, its lowest point) or None
    if config.floor_height is not None:  # a floor given above the object's lowest point starts it inside the floor
        if gap is not None and gap[0] < -FLOOR_INSIDE:
            discard_created_folders()
            raise OptionError(
                f"--floor {args.floor_spec}: that floor lies {-gap[0]:.0%} of the object's height above the "
                f"object's lowest point ({gap[1]:.4g} along up {_axis_name(anim.up_vector)}, scene units): the object "
                f"would start inside it, and be pushed away or swallowed; pass --floor {gap[1]:.4g} (its lowest "
                "point) or lower, or auto")
    stand = anim.info.get("stand")
    if stand:
        args.E = stand["E_to"]
    up_name = args.up if args.up != "auto" else "auto -> " + _axis_name(anim.up_vector)
    if anim.num_invalid:
        print(f"[physskin-gs] warning: {anim.num_invalid} rows hold NaN/Inf values: they stay static and are written "
              "to the exported frames as invisible points (no NaN in the output)", file=sys.stderr)
    for line in scene_summary(anim, config):  # (the viewer prints the same lines: physskin_gs_viewer.app)
        print(f"[physskin-gs] {line}", file=sys.stderr)
    if str(args.up).strip().lower() != "auto" and anim.info.get("scene_analysis") is not None:
        _note_support_against_up(scene, anim.up_vector, args.up)
    from physskin_gs.bodies import body_lines

    for line in body_lines(anim):
        print(f"[physskin-gs] {line}", file=sys.stderr)
    col = anim.info.get("collider")
    few = [(i, b["cubature_points"]) for i, b in enumerate(anim.info.get("bodies") or [])
           if b["cubature_points"] < CONTACT_CUBATURE]
    if few and (col or len(anim.info.get("bodies") or []) > 1):
        names = ", ".join(f"body {i} has {n}" for i, n in few)
        print(f"[physskin-gs] note: {names} cubature points: contact is resolved at their spacing, and with fewer "
              f"than {CONTACT_CUBATURE} a body sinks into the support or other bodies or passes through them (the "
              "table capture: 64 sank 4 % of a body's height, 32 up to 13 %, 16 fell through the table); pass "
              f"--cubature {CONTACT_CUBATURE} or more", file=sys.stderr)
    if col:
        if col.get("support_region"):
            where = (f"the support holds the bodies where it was captured ({col['support_region']['cells']} cells of "
                     f"{col['support_region']['cell_m']:.3g} m)" + (f", ground {col['ground']}" if col.get("ground")
                                                                   else ""))
        elif col.get("ground"):
            where = col["ground"]
        else:
            where = "the floor as set (--floor)"
        touching = col.get("touching_at_rest") or 0
        rest = (f"; {touching} pairs of cubature points of two bodies overlap as they start and are held at that "
                "distance, so the bodies rest as captured" if touching else "")
        print(f"[physskin-gs] contact: {where}; {col['static_points']} static points of the scene collide{rest}",
              file=sys.stderr)
    nh = anim.num_handles
    bodies = anim.info.get("bodies")
    sources = [str(b.get("skinning", anim.skinning_source)) for b in bodies] if bodies else []
    hand = (f"{len(bodies)} bodies of {', '.join(str(b['handles']) for b in bodies)} handles (each with its constant "
            f"one; {sources[0] if len(set(sources)) == 1 else ', '.join(sources)})"
            if bodies else f"{nh} handle{'s' if nh != 1 else ''} ({nh - 1} + constant; {anim.skinning_source})")
    asked = int(getattr(args, "num_handles", 16) or 16)
    learned = [b["handles"] - 1 for b in bodies] if bodies else [nh - 1]
    # fewer than asked with no note (a note says when too few usable Gaussians bound them): the cluster rules
    basis = str(anim.skinning_source)
    kind = "eigen" if "eigen" in basis else "modes" if basis.startswith("modes") else None
    if not anim.info.get("handles", {}).get("note") and any(m < asked for m in learned) and kind:
        why = "a cluster of nearly equal eigenvalues" if kind == "eigen" else "a pair of equal mode fields"
        ask = f"--handles {asked}" if getattr(args, "num_handles_given", False) else f"{asked} handles, the default"
        hand += (f" ({ask}: the {kind} basis keeps {', '.join(str(m) for m in learned)}, so as not to "
                 f"split {why})")
    for line in stand_lines(stand, args.material):
        print(f"[physskin-gs] {line}", file=sys.stderr)
    nm = anim.info["num_moving"]
    print(f"[physskin-gs] {nm} moving Gaussian{'s' if nm != 1 else ''}, {hand}, {anim.info['num_cubature']} "
          f"cubature points, up {up_name}, scale {anim.sim_scale:.4g} m/unit, material "
          f"{getattr(args, 'material_label', None) or getattr(args, 'material', None) or 'custom'} "
          f"(E {args.E:g} Pa, nu {args.nu:g}, {args.density:g} kg/m^3), "
          f"prepared in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    size_m = float(getattr(getattr(anim, "sim", None), "size", 1.0) or 1.0)  # the cubature points' extent, m
    if size_m < SMALLEST_OBJECT_M:  # (a fresh user's 1 um column hovered; 10 um ones fell through the floor)
        print(f"[physskin-gs] warning: the object is simulated {size_m * 1e3:.2g} mm across (--scale "
              f"{anim.sim_scale:.4g} m/unit): below about {SMALLEST_OBJECT_M * 1e3:g} mm its motion is not resolved "
              "(the time step and the solver's tolerances are for objects of millimetres and up)", file=sys.stderr)
    for r in getattr(anim, "regions", []):
        over = r.get("overridden", 0)
        print(f"[physskin-gs] region {r['spec']}: {r['material']} (E {r['E']:.3g} Pa, {r['density']:g} kg/m^3), "
              f"{r['cubature_points']} of {anim.info['num_cubature']} cubature points"
              + (f" ({'all' if over == r['cubature_points'] else over} of them taken by a later --region, which wins "
                 "where they overlap)" if over else ""), file=sys.stderr)
    if getattr(anim, "regions", None) and not getattr(args, "material_chosen", True):
        # (a fresh user's guitar: --region base=wood, as the README suggests for a tall object, left the rest 24x
        # softer than the run without it, and it bent)
        print(f"[physskin-gs] note: with --region, the rest of the object keeps the {args.material} material as it is "
              f"(E {args.E:g} Pa): it is not raised until the object stands, as it is without --region, and a tall "
              "object may bend; give the rest a stiffer one with --material or --E", file=sys.stderr)
    if getattr(args, "material_chosen", False) and args.gravity > 0 and not getattr(args, "regions", None):
        # a chosen material is used as given; say when its own weight will make it slump (a fresh user's armadillo
        # in foam, a cow in jelly: both collapsed without a word, though the estimate is the default's raise rule)
        from physskin_gs.pipeline import SLUMP_NOTE, standing_sag

        sag = max(standing_sag(b) for b in (getattr(anim, "bodies", None) or [anim]))
        if sag > SLUMP_NOTE:
            print(f"[physskin-gs] note: in this material its own weight bends it about {sag:.0%} of its height (a "
                  f"linear estimate with its base held, E {args.E:g} Pa, {args.density:g} kg/m^3, "
                  f"{anim.sim_scale:.4g} m/unit), so it will slump; for something that stands pass "
                  f"{_stiffer_materials(args.E, args.density)}, or --scale with its true size (a smaller object is "
                  "relatively stiffer)", file=sys.stderr)
    args.starts_on_floor = gap is None or gap[0] <= 0.02
    args.floor_at_base = None if gap is None else gap[1]
    if getattr(args, "pin", None) and not args.starts_on_floor:
        print(f"[physskin-gs] note: the pinned points are held where they are, and the object starts {gap[0]:.0%} of "
              f"its height above its floor, so it hangs there; to stand it on the floor, put the floor at its lowest "
              f"point: --floor {gap[1]:.4g}", file=sys.stderr)
    if config.pin:
        held = [(k, int(b.sim.pin.idx.numel()), b.sim.n) for k, b in enumerate(getattr(anim, "bodies", [anim]))
                if b.sim.pin is not None]
        where = (f"{held[0][1]} of {held[0][2]} cubature points" if len(held) == 1 and not hasattr(anim, "bodies")
                 else ", ".join(f"body {k}: {m} of {n}" for k, m, n in held) + " cubature points")
        print(f"[physskin-gs] pin {config.pin}: {where} held at their rest positions", file=sys.stderr)

    if script is not None:  # (after the log lists the bodies and handles its errors refer to)
        script.validate(anim, frames=args.frames)
    fe = anim.info.get("field_eval") or {}
    if fe.get("mode") == "grid" and fe.get("error"):
        er = fe["error"]
        print(f"[physskin-gs] skinning field at the Gaussians: sparse grid ({fe.get('num_nodes')} nodes, "
              f"{fe.get('num_fallback', 0)} centres evaluated directly); error against direct evaluation on "
              f"{er['num_points']} centres: W max {er['w_max_rel']:.1e} / mean {er['w_mean_rel']:.1e}, grad W max "
              f"{er['g_max_rel']:.1e} / mean {er['g_mean_rel']:.1e} of their RMS", file=sys.stderr)
    video = None
    png_dir = Path(args.png) if args.png else None
    if args.video or png_dir:
        video = OrbitVideo(anim, args.width, args.height, args.frames, args.orbit, script=script)
    for folder in (export, png_dir):  # temporary files an interrupted or killed run left (this run holds the lock)
        stale = (_remove_old_run(folder, _SEQUENCE_TEMP, False) + _remove_stages(folder)) if folder is not None else 0
        if stale:
            print(f"[physskin-gs] removed {stale} temporary files an interrupted run left in {folder}/",
                  file=sys.stderr)
    # --overwrite over an earlier run: this run writes into a hidden folder inside (a stage) and its files replace
    # the earlier run's only once it is complete; an interrupt or a failure leaves the earlier run as it was
    stages = {}  # final folder (resolved) -> (stage, folder, [(pattern, with sequence.json)]); --png and --export
    # may name one folder: one stage, both kinds of earlier files replaced
    if getattr(args, "overwrite", False):
        for folder, pattern, meta in ((export, _SEQUENCE_FILE, True), (png_dir, _PNG_FILE, False)):
            if folder is not None and (_existing_frames(folder, pattern)
                                       or (meta and (folder / "sequence.json").exists())):
                key = folder.resolve()
                if key not in stages:
                    stages[key] = (_new_stage(folder), folder, [])
                stages[key][2].append((pattern, meta))
    final_export, final_png = export, png_dir
    if export is not None and export.resolve() in stages:
        export = stages[export.resolve()][0]
    if png_dir is not None and png_dir.resolve() in stages:
        png_dir = stages[png_dir.resolve()][0]
    fps = 1.0 / (anim.dt * args.steps_per_frame)
    fmt = getattr(args, "export_format", "ply") or "ply"
    if export is not None:
        from physskin_gs.cli._common import dropped_extras_note

        dropped = dropped_extras_note(anim.scene, fmt)  # (as convert says; they were dropped without a word)
        if dropped:
            print(f"[physskin-gs] {dropped}", file=sys.stderr)
    from physskin_gs import interrupts
    from physskin_gs.io._shared import atomic_output, write_text_atomic

    exporter = None
    mesh_frames: List[Path] = []
    frames_rgb = []
    stats_log = []
    from physskin_gs.cli._common import progress_bar

    rest_sample = _moving_sample(anim)  # per body, for the closing notes (_note_motion)
    bar = progress_bar(range(1, args.frames + 1), "animate", "frame", dynamic_ncols=True)
    video_seconds = 0.0
    t_loop = time.perf_counter()
    try:
        for f in bar:
            interrupts.check()
            if f > 1:
                if script is not None:
                    script.apply(anim, f)
                st = anim.step(args.steps_per_frame)
                row = {"frame": f, "ms": round(st["ms"], 2), "newton_iters": st["newton_iters"],
                       "hessians": st.get("hessians", 0), "rejected": st["rejected"]}
                if "contacts_body" in st:  # several bodies: contacts at the end of the frame's steps
                    row.update(contacts_body=st["contacts_body"], contacts_static=st["contacts_static"],
                               contacts_support=st["contacts_support"], max_overlap_m=round(st["max_overlap_m"], 6),
                               body_ms=[round(v, 2) for v in st.get("body_ms", [])])
                stats_log.append(row)
                bar.set_postfix(ms=f"{st['ms']:.0f}", it=st["newton_iters"])
            elif script is not None:
                script.apply(anim, f)
            if export is not None:
                if is_mesh:  # written and counted together: a Ctrl-C between the two miscounted the frames kept
                    with interrupts.deferred():
                        mesh_frames.append(_write_mesh_frame(anim, export / f"{FRAME_PATTERN % f}.obj"))
                else:
                    if exporter is None:
                        exporter = open_sequence_exporter(anim, export, fmt, fps)
                        for note in exporter.notes:
                            bar.write(f"[physskin-gs] note: {note}", file=sys.stderr)
                    exporter.add(f, anim.deformed_rows())
            if video is not None:
                t_v = time.perf_counter()
                img = video.render(f - 1)
                video_seconds += time.perf_counter() - t_v
                frames_rgb.append(img)
                if png_dir:
                    import imageio.v2 as iio

                    png = png_dir / f"{FRAME_PATTERN % f}.png"
                    try:
                        with atomic_output(png) as tmp:
                            iio.imwrite(tmp, img)
                    except OSError as exc:
                        raise OutputError(f"could not write {png}: {exc.strerror or exc}") from None
                    verify_written(png, "PNG frame")
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: keep what was simulated (PLY frames stay; USD is finished)
        kept = len(mesh_frames)
        if exporter is not None:
            try:
                kept = exporter.close()["frames"]
            except Exception:  # noqa: BLE001 - the interrupt is what the user sees
                exporter.abort()
                kept = None
        for stage, final, _ in stages.values():  # an earlier run --overwrite was to replace: kept whole
            _drop_stage(stage)
            print(f"[physskin-gs] interrupted: {final}/ keeps the earlier run's files as they were (--overwrite "
                  "replaces them only with a complete run); this run's frames were discarded", file=sys.stderr)
        if export is not None and kept is not None and final_export.resolve() not in stages:
            print(f"[physskin-gs] interrupted: kept {kept} frames in {export}/ (every one complete; no sequence.json)",
                  file=sys.stderr)
        if png_dir is not None and final_png.resolve() not in stages:  # each PNG is written whole: the folder's count
            pngs = len(_existing_frames(png_dir, _PNG_FILE))
            print(f"[physskin-gs] interrupted: kept {pngs} PNG frames in {png_dir}/", file=sys.stderr)
        if video is not None and args.video:  # encoded once every frame is rendered (a fresh user's find: it went
            # unmentioned)
            print(f"[physskin-gs] interrupted: the video {args.video} was not written (it is encoded after the last "
                  "frame; --png keeps each frame as it is made)", file=sys.stderr)
        raise
    except BaseException:
        if exporter is not None:  # a failed run keeps its PLY frames; a partial USD file is removed
            exporter.abort()
        for stage, _, _ in stages.values():  # (an earlier run it was to replace stays as it was)
            _drop_stage(stage)
        raise
    try:
        bar.close()
        export_summary = None
        if exporter is not None:
            export_summary = exporter.close()  # OutputError if a frame could not be written
            for path in export_summary["files"]:
                verify_written(path, "frame")
        if export is not None:
            meta = {
                "format": "physskin_gs sequence 1",
                # relative to the sequence's folder (io._shared.recorded_path): no machine's absolute path
                "source": recorded_path(src, final_export),
                "frames": args.frames,
                "pattern": FRAME_PATTERN + ".obj" if is_mesh else export_summary["pattern"],
                "export_format": "obj (mesh sequence)" if is_mesh else fmt,
                "first_frame_is_rest_state": True,
                "fps": fps,
                "dt": anim.dt,
                "steps_per_frame": args.steps_per_frame,
                "up_axis": [float(v) for v in anim.up_vector],
                "scale_m_per_unit": anim.sim_scale,
                "sh": "mesh sequence (no SH)" if is_mesh else anim.sh_handling(),
                "skinning": anim.skinning_source,
                "num_gaussians": anim.scene.num_gaussians,
                "num_moving": anim.info["num_moving"],
                "num_handles": anim.num_handles,
                "handles": anim.info.get("handles"),
                "cubature": {"points": anim.info.get("num_cubature"), "rule": anim.info.get("cubature")},
                # name: the preset the values came from; overrides: the options that replaced some of its values
                "material": {"name": config.material, "overrides": list(getattr(args, "material_overrides", [])),
                             "E": config.E, "nu": config.nu, "density": config.density,
                             # the default's E raised until the object stands (pipeline.stiffen_to_stand), or None
                             "raised": dict(anim.info["stand"]) if anim.info.get("stand") else None},
                "gravity": config.gravity,
                "damping": config.damping,
                "solver": config.solver,
                "newton_iters": config.newton_iters,
                "floor": anim.floor_scene,
                "pin": config.pin,
                "regions": anim.regions if hasattr(anim, "regions") else [],
                "select": config.select,
                "scene_analysis": anim.info.get("scene_analysis"),
                "field_eval": anim.info.get("field_eval"),
                "prepare_seconds": anim.info.get("timings"),
                "invalid_rows": {"count": anim.num_invalid, "written_as": "static, sanitised: mean at the object's "
                                 "centre, identity rotation, log-scale -20, opacity logit -20, SH 0"},
                "script": recorded_path(args.script, final_export) if args.script else None,
                "bodies": anim.info.get("bodies"),
                "collider": anim.info.get("collider"),
                "step_stats": stats_log,
            }
            if export_summary is not None:
                meta["export"] = {"bytes": export_summary["bytes"],
                                  "bytes_per_gaussian_per_frame": export_summary["bytes"] / max(1, args.frames)
                                  / max(1, anim.scene.num_gaussians),
                                  "write_seconds": round(export_summary["write_seconds"], 3),
                                  "simulation_waited_seconds": round(export_summary["wait_seconds"], 3)}
                if fmt == "compressed-ply":
                    meta["row_order"] = ("row_order.npy: file row r of every frame is scene row row_order[r] (the moving "
                                         "rows first, then the static ones, each in Morton order of the rest means)")
                if fmt == "usd":
                    meta["usd"] = ("animation.usdc: prims /Splats/Static (written once) and /Splats/Moving (time samples "
                                   "1..frames at fps time codes per second)")
            written = mesh_frames if is_mesh else [Path(p) for p in export_summary["files"]]
            _check_sequence_folder(export, written, args.frames)
            meta["files"] = sorted(p.name for p in written)
            try:
                write_text_atomic(export / "sequence.json", sequence_json_text(meta))
            except OSError as exc:
                raise OutputError(f"could not write {export / 'sequence.json'}: {exc.strerror or exc}") from None
            verify_written(export / "sequence.json", "sequence metadata")
        # the video before the folders are swapped in: an interrupt while it is encoded keeps every earlier output
        # (the folders had been replaced while an earlier X.mp4 stayed); a failed video still lets the frames in
        video_error = written_video = None
        video_existed = bool(args.video) and os.path.exists(args.video)
        if args.video:
            try:
                written_video = _write_video(args.video, frames_rgb, fps)
                if not written_video.is_dir():  # a folder of PNG frames when imageio-ffmpeg is missing (it warns)
                    verify_written(written_video, "video")
            except PhysSkinError as exc:
                video_error = exc
    except BaseException as exc:  # (finishing the frames, sequence.json or the video failed or was interrupted)
        for stage, final, _ in stages.values():  # an earlier run --overwrite was to replace stays as it was
            _drop_stage(stage)
            if isinstance(exc, KeyboardInterrupt):
                print(f"[physskin-gs] interrupted: {final}/ keeps the earlier run's files as they were (--overwrite "
                      "replaces them only with a complete run); this run's frames were discarded", file=sys.stderr)
        if isinstance(exc, KeyboardInterrupt) and args.video:
            print(f"[physskin-gs] interrupted: the video {args.video} was not written"
                  + (" (the earlier file there is kept as it was)" if os.path.exists(args.video) else ""),
                  file=sys.stderr)
        raise
    with interrupts.deferred():  # the swap is a few renames: a Ctrl-C waits for it, never leaves it half done
        replaced = [(final, _commit_stage(stage, final, kinds)) for stage, final, kinds in stages.values()]
    for final, removed in replaced:
        print(f"[physskin-gs] --overwrite: {removed} earlier frame file{'s' if removed != 1 else ''} in {final}/ "
              f"gave way to this run's (other files there were kept)", file=sys.stderr)
    export, png_dir = final_export, final_png
    same = export is not None and png_dir is not None and export.resolve() == png_dir.resolve()
    for folder, pattern, what, option in ((export, _PNG_FILE, "PNG frames", "--png"),
                                          (png_dir, _SEQUENCE_FILE, "sequence files", "--export")):
        # an earlier run's other kind of frames in the same folder are not this run's (a fresh user's --export D
        # --overwrite left D's PNG frames of another material beside the new PLY frames, without a word)
        stale = [] if folder is None or same else _existing_frames(folder, pattern)
        if stale:
            print(f"[physskin-gs] note: {folder}/ also holds {len(stale)} {what} of an earlier run ({stale[0].name} "
                  f"...), not this run's: this run wrote no {option} there", file=sys.stderr)
    if stats_log:  # the speed a user asks first, also where no progress bar shows (a log file)
        ms = sorted(r["ms"] for r in stats_log)
        its = sorted(r["newton_iters"] for r in stats_log)
        per = f" ({args.steps_per_frame} steps each)" if args.steps_per_frame != 1 else ""
        it_mid = its[len(its) // 2]
        print(f"[physskin-gs] simulation: {len(ms)} frame{'s' if len(ms) != 1 else ''} after the rest frame{per}, "
              f"median {ms[len(ms) // 2]:.1f} ms a frame (slowest {ms[-1]:.1f}), median {it_mid} Newton "
              f"iteration{'s' if it_mid != 1 else ''}, "
              f"{sum(r['hessians'] for r in stats_log) / len(ms):.2f} Hessian factors a frame; the frames took "
              f"{time.perf_counter() - t_loop:.1f} s with deformation, rendering and writing", file=sys.stderr)
    if export is not None:
        print(f"[physskin-gs] wrote {args.frames} frame{'s' if args.frames != 1 else ''} to {export}/",
              file=sys.stderr)
    if png_dir is not None:
        print(f"[physskin-gs] wrote {args.frames} PNG frame{'s' if args.frames != 1 else ''} to {png_dir}/",
              file=sys.stderr)
    if args.video:
        if video_error is not None:
            kept = f"; the {args.frames} simulated frames are in {export}/" if export is not None else ""
            earlier = (f"; {args.video} still holds the earlier run's video" if video_existed
                       and os.path.exists(args.video) else "")
            raise OutputError(f"{video_error}{kept}{earlier}") from None
        written = written_video
        loop = time.perf_counter() - t_loop
        print(f"[physskin-gs] wrote {written} ({len(frames_rgb)} frame{'s' if len(frames_rgb) != 1 else ''}, "
              f"{fps:.1f} fps); rendering the video's frames on the CPU took {video_seconds:.1f} s of the above, "
              f"{loop:.1f} s in all with the video file (--width / --height {args.width}x{args.height} set its size "
              "and cost)", file=sys.stderr)
    if not all(bool(torch.isfinite(b.sim.q).all()) for b in getattr(anim, "bodies", [anim])):  # pragma: no cover
        raise PhysSkinError("simulation state became non-finite")
    _note_motion(anim, args, rest_sample)
    return 0


#: A headless run whose object's shape moved more than this share of its size (largest extent) from any rigid
#: motion (the RMS residual of the best rigid fit of its Gaussians) in the default material says so: a bent guitar
#: neck 0.042, a cow landing 0.005, statues and a box at rest 0.001-0.002.
BEND_NOTE = 0.02
#: cubature points per body below which contact with the support or other bodies is too coarse (a fresh user's find
#: on the table capture: 128 and more rest on the table, 64 sank 4 % of a body's height, 16 fell through it)
CONTACT_CUBATURE = 128
#: ... and one whose up axis turned more than this (degrees, the best rigid fit's tilt; a turn about up, or a thin
#: line's undefined spin about itself, is not a tilt) as a rigid body, unpinned, says it
#: tipped over (a bust on its plinth in the soft default: it sags at its base, then topples; 0.002 of its size from
#: rigid at the end; in wood it stands).
TIP_NOTE = 30.0


def _moving_sample(anim, means=None):
    """The moving rows for the closing notes (:func:`_note_motion`), one group per body: a list of (name, idx,
    points) with ``name`` "the object" (one body) or "body K", ``idx`` a fixed subsample (at most 20000) of its rows
    and ``points`` (k, 3) float64 numpy of ``means`` (N, 3; default the rest means) at them."""
    import numpy as np

    bodies = getattr(anim, "bodies", None)
    groups = ([("the object", np.flatnonzero(anim.moving.numpy()))] if not bodies
              else [(f"body {k}", np.sort(b.moving_index.numpy())) for k, b in enumerate(bodies)])
    means = anim.scene.means if means is None else means
    out = []
    for name, idx in groups:
        if idx.size > 20000:
            idx = np.sort(np.random.default_rng(0).choice(idx, 20000, replace=False))
        out.append((name, idx, means[idx].double().numpy()))
    return out


def _rigid_fit(X, Y, up=None):
    """Best rigid motion of the points X (k, 3) onto Y (k, 3), same units (scipy's ``Rotation.align_vectors`` of
    the centred points, a Kabsch fit): (angle in degrees, RMS residual in the points' units). The angle is the
    rotation's whole angle, or with ``up`` (3,) the tilt it gives the up axis: a turn about up is no tilt, and for
    a thin line along up (whose turn about itself no fit can tell) it is still well defined."""
    import warnings

    import numpy as np
    from scipy.spatial.transform import Rotation

    with warnings.catch_warnings():  # a line's turn about itself is undefined: the tilt below does not need it
        warnings.simplefilter("ignore", UserWarning)
        rot, rssd = Rotation.align_vectors(Y - Y.mean(0), X - X.mean(0))  # rssd: root of the summed squares
    if up is None:
        angle = float(np.degrees(rot.magnitude()))
    else:
        u = np.asarray(up, dtype=np.float64)
        u = u / np.linalg.norm(u)
        angle = float(np.degrees(np.arccos(np.clip(float(rot.apply(u) @ u), -1.0, 1.0))))
    return angle, float(rssd) / np.sqrt(X.shape[0])


def _note_support_against_up(scene, up, given: str) -> None:
    """With ``--up`` given: one note when the automatic analysis finds, sure of it, a support plane that carries the
    object with an up more than 30 degrees from the given one (a fresh user's ``--up y`` turned a sign on grass
    upside down without a word). ``up``: (3,) the up used. Raises nothing (an analysis that fails says nothing)."""
    import numpy as np

    from physskin_gs.pipeline import analyze_for_animation

    try:
        auto = analyze_for_animation(scene)
    except Exception:  # (the run goes on with the given up; this is advice only)
        return
    if auto.up_source != "support-plane" or getattr(auto, "unsure", False):
        return
    u = np.asarray(up, dtype=np.float64)
    deg = float(np.degrees(np.arccos(np.clip(float(auto.up @ u) / float(np.linalg.norm(u)), -1.0, 1.0))))
    if deg > 30.0:
        print(f"[physskin-gs] note: without --up, a support plane carries the object with up {_axis_name(auto.up)} "
              f"({deg:.0f} degrees from --up {given}); the given up is used (--up auto takes the support's)",
              file=sys.stderr)


#: a --floor more than this fraction of the object's height above its lowest point is refused (:func:`_start_gap`)
FLOOR_INSIDE = 0.02


def _start_gap(anim) -> Optional[tuple]:
    """(how far the moving rows' lowest point (0.5 % quantile along up) starts above the floor the simulation uses,
    over their height (0.5-99.5 % along up); that lowest point's height along up, scene units, as ``--floor`` takes
    it), or None with no floor or several bodies (their support is captured). Raises nothing."""
    from physskin_gs.pipeline import robust_range

    floor = getattr(anim, "floor_scene", None)
    if floor is None or hasattr(anim, "bodies") or not bool(anim.moving.any()):
        return None
    lo, hi = robust_range((anim.scene.means[anim.moving].double() @ anim.up_vector.double()).numpy())
    return ((lo - float(floor)) / (hi - lo), lo) if hi > lo else None


def _stiffer_materials(E: float, density: float) -> str:
    """The named materials at least as stiff as E (Pa) that sag under their own weight at most 2/3 as much as E at
    ``density`` (kg/m^3) does (:func:`physskin_gs.materials.stiffer_materials`: a sag goes as density / E; rubber is
    stiffer than the soft default, but not than the soft default raised 2.4x so that Spot stands), the three least
    stiff of them as
    ``--material a, b or c``, or ``--E`` with a value 10x E when none is."""
    from physskin_gs.materials import stiffer_materials

    names = stiffer_materials(E, density)
    if not names:
        return f"--E {10.0 * E:g}"
    return "--material " + (names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}")


def _note_motion(anim, args, rest) -> None:
    """At the end of a headless run, per body (:func:`_moving_sample`): one line when it bent a lot in the default
    material (not chosen by the user: the fix is one option; ``--region base=wood`` is named only for one body and
    when no ``--region`` was given), and one when it tipped over (whatever the material: a wrong up axis, or a base
    that cannot hold it; not when scripted drags moved it). ``rest``: :func:`_moving_sample` of the rest means, or
    None. Raises nothing."""
    import numpy as np

    if not rest:
        return
    from physskin_gs.materials import DEFAULT_MATERIAL, MATERIALS

    means = anim.deformed_gaussians(view_rotations=False).means
    single = len(rest) == 1
    density = getattr(args, "density", None) or MATERIALS[DEFAULT_MATERIAL].density  # kg/m^3
    for name, idx, X in rest:
        if X.shape[0] < 4:
            continue
        size = float(np.ptp(X, axis=0).max())
        if not size > 0:
            continue
        up = getattr(anim, "up_vector", None)
        angle, resid = _rigid_fit(X, means[idx].double().numpy(),
                                  None if up is None else np.asarray(up, dtype=np.float64))  # the tilt
        bent = resid > BEND_NOTE * size
        if bent and not getattr(args, "material_chosen", True):
            region = (", or --region base=wood to keep a tall object standing"
                      if single and not getattr(args, "regions", None) else "")
            print(f"[physskin-gs] note: {name} bent (its shape moved {resid / size:.0%} of its size, RMS, from any "
                  f"rigid motion) in the default material, a soft toy (E {args.E:g} Pa); for something stiffer pass "
                  f"{_stiffer_materials(args.E, density)}{region}", file=sys.stderr)
        # bent or not: a chair can bend and fall on its back; not after scripted drags, which may turn it on purpose
        # (a pushed crate tipped, and the advice to pin its base would have cancelled the push)
        if angle > TIP_NOTE and not getattr(args, "pin", None) and not getattr(args, "script", None):
            said = bent and not getattr(args, "material_chosen", True)  # the bent note named the materials already
            # a stiff base first: a fresh user's bouquet still tipped 40 degrees as rubber, and stood with a wood base
            base_region = "" if getattr(args, "regions", None) else "--region base=wood (a stiff base) or "
            soft = "" if getattr(args, "material_chosen", True) or said else (
                ", or stiffen it (the default soft material lets a tall object sag and topple: "
                f"{base_region}{_stiffer_materials(args.E, density)})")
            # a pin holds the base where it is: only where the base starts on its floor (no drop) does it stand
            on_floor = getattr(args, "starts_on_floor", True)
            base = getattr(args, "floor_at_base", None)
            pin = (" or hold its base (--pin below:0.1)" if on_floor or base is None else
                   f" or stand it on a floor at its base and hold that (it starts above its floor: --floor {base:.4g} "
                   "--pin below:0.1)")
            print(f"[physskin-gs] note: {name} tilted {angle:.0f} degrees (it tipped over); if it should stand, "
                  f"check the up axis (--up){pin}{soft}", file=sys.stderr)


def write_obj(path, vertices, faces, rgb=None, normals=None) -> int:
    """Write a triangle mesh as a Wavefront OBJ, atomically; returns its size in bytes. ``v`` lines (with the
    common ``v x y z r g b`` vertex-colour extension when ``rgb`` is given: MeshLab, Blender, trimesh read it),
    ``vn`` per-vertex normals (``normals`` (V, 3), default the area-weighted face normals of these positions) and
    ``f v//vn`` faces.

    ``vertices``: (V, 3) float32 or float64, scene units; each value is written with as many significant digits
    as its type needs to read back exactly (9 for float32, 17 for float64), whatever the object's size.
    ``faces``: (F, 3) integer vertex indices, 0-based (written 1-based). ``rgb``: optional (V, 3) colours in
    [0, 1]. Raises OSError when it cannot be written.
    """
    import numpy as np

    from physskin_gs.io._shared import atomic_output

    V = np.asarray(vertices)
    digits = 9 if V.dtype == np.float32 else 17
    F0 = np.asarray(faces, dtype=np.int64)
    if normals is None:
        from physskin_gs.io.mesh import area_weighted_normals

        normals = area_weighted_normals(V, F0)
    vn = np.asarray(normals, dtype=np.float64)
    F = F0 + 1
    with atomic_output(path) as tmp:
        with open(tmp, "w", encoding="ascii") as fh:
            fh.write("# physskin_gs mesh frame\n")
            if rgb is None:
                np.savetxt(fh, V, fmt=f"v %.{digits}g %.{digits}g %.{digits}g")
            else:
                vc = np.concatenate([V.astype(np.float64), np.clip(np.asarray(rgb, np.float64), 0.0, 1.0)], axis=1)
                np.savetxt(fh, vc, fmt=f"v %.{digits}g %.{digits}g %.{digits}g %.4f %.4f %.4f")
            np.savetxt(fh, vn, fmt="vn %.6f %.6f %.6f")
            np.savetxt(fh, np.repeat(F, 2, axis=1), fmt="f %d//%d %d//%d %d//%d")
    return os.path.getsize(path)


def _write_mesh_frame(anim, path: Path) -> Path:
    """One frame of a mesh sequence (:func:`write_obj` of the deformed source mesh); returns its path. Raises
    OutputError when it cannot be written (what was there before stays)."""
    try:
        mesh = anim.scene.mesh
        vertex, faces = mesh.export_layout()  # the file's own vertices (order, seams, hard edges)
        deformed = anim.deformed_mesh_vertices()  # [V, 3] the welded mesh, as simulated
        write_obj(path, deformed[vertex], faces, mesh.vertex_rgb(), mesh.export_normals(deformed))
    except OSError as exc:
        raise OutputError(f"could not write frame {path}: {exc.strerror or exc}") from None
    verify_written(path, "frame")
    return path


def _check_sequence_folder(folder: Path, written: List[Path], frames: int) -> None:
    """Before ``sequence.json`` is written: the folder's frame files are exactly the ones this run wrote (one per
    frame). Raises OutputError naming the files that do not belong (a sequence.json must never describe other
    frames than the ones beside it)."""
    mine = {p.name for p in written}
    frame_files = {p.name for p in _existing_frames(folder, _SEQUENCE_FILE)} - {"row_order.npy", "animation.usdc"}
    frame_names = {n for n in mine if n.startswith("frame")}
    extra, missing = sorted(frame_files - mine), sorted(frame_names - frame_files)
    if extra or missing or (frame_names and len(frame_names) != frames):
        what = (f"{len(extra)} frame files of another run ({', '.join(extra[:3])})" if extra
                else f"{len(missing) or frames - len(frame_names)} of this run's frames are missing")
        raise OutputError(f"{folder}: {what}; sequence.json was not written (its frames would not match the "
                          "folder)")


def _write_video(path: str, frames, fps: float) -> Path:
    """The video via the render package's writer (:func:`physskin_gs.render.write_video`: mp4 and other containers
    checked after writing, GIF through imageio). Returns the path written. Raises PhysSkinError when the video could
    not be written."""
    from physskin_gs.render import write_video

    return Path(write_video(frames, path, fps=fps))
