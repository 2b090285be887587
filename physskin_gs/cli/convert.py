"""``physskin-gs convert IN OUT [--format ...]``: any supported scene to an INRIA 3DGS PLY, a PlayCanvas compressed
PLY, an OpenUSD file (``UsdVol.ParticleField3DGaussianSplat``) or a glTF binary with ``KHR_gaussian_splatting``.

The output format comes from the file name (``.compressed.ply``, ``.ply``, ``.usd`` / ``.usdc`` / ``.usda``,
``.glb``) unless ``--format`` names it. glTF is +Y up in metres: the scene is turned so that its up axis
(``--up``, default ``auto``: the same rule as ``animate`` and ``render``) becomes +Y, and ``--meters-per-unit``
scales it; OpenUSD keeps the scene's coordinates and states the up axis on the stage.

PLY outputs keep the input's axes and record its up axis in a header comment (``comment physskin_gs up_axis``,
as exported frames do) when ``--up`` names one, or when the two formats' up conventions differ (a ``.splat``,
-y by convention, written as an INRIA PLY, +z by convention): then the up axis ``animate`` would use on the input
is recorded, so the converted file stands the same way.
"""

from __future__ import annotations

import os

import sys
import warnings

from physskin_gs.cli._common import (OutputError, add_mesh_and_frame_arguments, axis_name, check_int, check_number,
                                     dropped_extras_note, require_input_file, resolve_up_option, scene_up,
                                     verify_written, warn_option)
from physskin_gs.cli._outputs import Output, claim_outputs, refuse_inputs
from physskin_gs.errors import OptionError

#: Highest SH degree each output format stores (an INRIA PLY stores any).
MAX_SH_DEGREE = {"ply": None, "compressed-ply": 3, "usd": 3, "glb": 3}

#: ``--format`` names and the file names each expects.
CONVERT_FORMATS = {"ply": (".ply",), "compressed-ply": (".ply",), "usd": (".usd", ".usdc", ".usda"), "glb": (".glb",)}


def output_format(path: str, fmt: str = "auto") -> str:
    """The output format of ``path``: ``fmt`` when given, else from the name (``x.compressed.ply`` is compressed).

    Raises OptionError for an unknown format or a name that does not fit the format."""
    name = str(path).lower()
    fmt = str(fmt or "auto").strip().lower()
    if fmt == "auto":
        if name.endswith(".compressed.ply"):
            return "compressed-ply"
        for f, exts in CONVERT_FORMATS.items():
            if name.endswith(exts):
                return f
        raise OptionError(f"{path}: cannot tell the output format from the name; use .ply, .compressed.ply, "
                          ".usd/.usdc/.usda or .glb (or --format)")
    if fmt not in CONVERT_FORMATS:
        raise OptionError(f"--format {fmt!r}: choose one of auto, {', '.join(CONVERT_FORMATS)}")
    if not name.endswith(CONVERT_FORMATS[fmt]):
        raise OptionError(f"{path}: a {fmt} file must end in {' or '.join(CONVERT_FORMATS[fmt])}")
    if fmt == "ply" and name.endswith(".compressed.ply"):
        raise OptionError(f"{path}: a name ending in .compressed.ply is read as a compressed PLY by other tools; "
                          "use --format compressed-ply or another name")
    return fmt


def register(sub) -> None:
    """Add the ``convert`` parser to ``sub`` (an argparse subparsers object)."""
    p = sub.add_parser(
        "convert",
        help="convert a Gaussian scene (or a mesh, sampled as animate does) to an INRIA PLY, a compressed PLY, "
             "OpenUSD or glTF (.glb)",
        description="Convert any supported Gaussian scene (INRIA PLY, .splat, compressed PLY) to a binary INRIA "
                    "3DGS PLY with raw values (.ply), a PlayCanvas/SuperSplat compressed PLY (.compressed.ply), an "
                    "OpenUSD ParticleField3DGaussianSplat (.usd/.usdc/.usda; needs usd-core) or a glTF binary with "
                    "KHR_gaussian_splatting (.glb, +Y up). A mesh input (.obj, .stl, .glb, .off, mesh .ply) is "
                    "first turned into the flat Gaussians animate samples on its surface.",
    )
    p.add_argument("input", help="input scene file (INRIA PLY, .splat, compressed PLY, glTF .glb / .gltf splat, "
                                 "OpenUSD) or mesh (.obj/.ply/.stl/.glb)")
    p.add_argument("output", help="output path (must differ from the input); its name selects the format")
    p.add_argument("--format", default="auto", choices=["auto"] + list(CONVERT_FORMATS),
                   help="output format (default auto: from the output's name)")
    p.add_argument("--up", default="auto",
                   help="the scene's up axis for .glb (turned to +Y), .usd (the stage's up axis) and .ply (recorded in "
                        "the header): auto (default: an up the input records (our exports, glTF, USD stages) as "
                        "it is, else the support plane's normal, else the axis it stands on most stably or the "
                        "format's convention, as animate and render), y, -y, z, -z, x, -x or 'ux,uy,uz'")
    p.add_argument("--meters-per-unit", dest="meters_per_unit", type=float,
                   help="metres per scene unit for .glb (scaled into metres) and .usd (metersPerUnit); default: "
                        "an OpenUSD input's stage metersPerUnit, else 1 (scene units written as metres)")
    p.add_argument("--drop-invalid", action="store_true",
                   help="remove Gaussians with NaN/Inf values and report how many (zero-norm quaternions are the "
                        "identity rotation and are kept)")
    p.add_argument("--quat-order", choices=["wxyz", "xyzw"], default="wxyz",
                   help="component order of the input's stored quaternions (default wxyz)")
    p.add_argument("--sh-degree", dest="sh_degree", type=int, default=None, metavar="N",
                   help="keep spherical harmonics up to degree N (0-4; default: all the input has). Compressed PLY, "
                        ".glb and .usd store at most degree 3")
    add_mesh_and_frame_arguments(p, "converted")
    p.add_argument("--force", action="store_true", help="replace an existing output file")
    p.set_defaults(func=run)


def run(args) -> int:
    """Load ``args.input``, optionally drop invalid rows, write ``args.output`` in its format; returns 0.

    Raises:
        OptionError: an output name that fits no format, the same file as the input (never overwritten), an
            existing file without ``--force``, a bad --up / --meters-per-unit, .usd without usd-core, or invalid
            rows for a format that cannot store NaN (without ``--drop-invalid``).
        SceneFormatError / FileNotFoundError: unreadable input (see :func:`physskin_gs.io.load_scene`).
        OutputError: the output folder cannot be written, or the written file is missing.
    """
    from physskin_gs.cli._common import load_scene_or_mesh
    from physskin_gs.io import drop_invalid, save_scene, validate

    require_input_file(args.input)
    if not str(args.output).strip():
        raise OptionError("OUT: empty value; give the output file name")
    base = os.path.basename(str(args.output))
    if base.startswith(".") and (base.lower() in (".ply", ".usd", ".usdc", ".usda", ".glb")
                                 or base.lower() == ".compressed.ply"):
        raise OptionError(f"{args.output}: the file name is only an extension (a hidden file named {base}); "
                          "give it a name, e.g. out" + base)
    target = Output("output", args.output, replace=args.force)
    refuse_inputs([target], [args.input])  # before the name is looked at: the input's name fits a format
    fmt = output_format(args.output, getattr(args, "format", "auto"))
    sh_degree = getattr(args, "sh_degree", None)
    if sh_degree is not None:
        check_int("--sh-degree", sh_degree, 0, 4)
        if MAX_SH_DEGREE[fmt] is not None and sh_degree > MAX_SH_DEGREE[fmt]:
            raise OptionError(f"--sh-degree {sh_degree}: a {fmt} file stores SH up to degree {MAX_SH_DEGREE[fmt]}")
    auto_up, up_given = resolve_up_option(str(getattr(args, "up", "auto") or "auto"))
    mpu = getattr(args, "meters_per_unit", None)
    if mpu is not None:
        check_number("--meters-per-unit", mpu, 1e-9, 1e9, unit="m")  # (1e-40 gave float32 denormals: all lost)
    if fmt == "usd":
        from physskin_gs.io.usd import require_pxr

        require_pxr()
    if fmt in ("ply", "compressed-ply") and mpu is not None:
        warn_option(f"--meters-per-unit has no effect on a {fmt} output (the values are written in the input's own "
                    "units); it applies to .glb and .usd")
    mesh_gaussians, frame = int(getattr(args, "mesh_gaussians", 20000)), getattr(args, "frame", None)
    check_int("--mesh-gaussians", mesh_gaussians, 16, 10_000_000)
    if frame is not None:
        check_int("--frame", frame, 1, 10_000_000)
    claim_outputs([target], inputs=[args.input])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scene = load_scene_or_mesh(args.input, args.quat_order, mesh_gaussians, frame=frame)
    for w in caught:
        print(f"warning: {w.message}", file=sys.stderr)
    if getattr(scene, "mesh", None) is None:  # what info, render and animate say of a splat file (activated
        # opacities, exponentiated scales, extreme log-scales, floaters dominating the box): convert was silent
        from physskin_gs.cli._common import warn_scene

        warn_scene(scene, args.input)
    if mpu is None and fmt in ("glb", "usd") and getattr(scene, "format", None) == "openusd":
        from physskin_gs.io.usd import usd_meters_per_unit

        src = usd_meters_per_unit(args.input)
        if abs(src - 1.0) > 1e-12:  # the stage's units carry over (a glb is in metres; a USD keeps its units)
            mpu = src
            print(f"note: {args.input} is in units of {src:g} m (its stage's metersPerUnit); "
                  f"{'scaled into metres' if fmt == 'glb' else 'written with the same metersPerUnit'} "
                  "(--meters-per-unit overrides)", file=sys.stderr)
    top = MAX_SH_DEGREE[fmt]
    if sh_degree is not None and sh_degree < scene.sh_degree:
        print(f"note: SH degree {scene.sh_degree} -> {sh_degree} (--sh-degree)", file=sys.stderr)
        scene = scene.with_sh_degree(sh_degree)
    elif top is not None and scene.sh_degree > top:
        raise OptionError(f"{args.input}: SH degree {scene.sh_degree}; a {fmt} file stores SH up to degree {top}: add "
                          f"--sh-degree {top} to keep bands 0-{top} (or write a .ply, which keeps every band)")
    if args.drop_invalid:
        scene, n = drop_invalid(scene)
        print(f"dropped {n} invalid Gaussians", file=sys.stderr)
    else:
        rep = validate(scene)
        if rep["num_invalid"]:
            if fmt != "ply":
                raise OptionError(f"{args.input}: {rep['num_invalid']} Gaussians hold NaN/Inf values, which a {fmt} "
                                  "file cannot store; add --drop-invalid to remove them")
            print(f"warning: {rep['num_invalid']} invalid Gaussians kept (use --drop-invalid to remove them)",
                  file=sys.stderr)
    dropped = dropped_extras_note(scene, fmt)
    if dropped:
        print(dropped, file=sys.stderr)
    up = None
    if fmt in ("usd", "glb") and auto_up and scene.up_hint is not None and scene.up_hint_source is None:
        # an up the file records (our exports, glTF's +Y, a stage's upAxis): taken as it is, so converting back
        # and forth changes nothing (the scene analysis would level it on its support by a hair each time)
        up = [float(v) for v in scene.up_hint]
        print(f"note: up {axis_name(up)}, recorded in the file", file=sys.stderr)
    elif fmt in ("usd", "glb"):
        up = scene_up(scene) if auto_up else _up_list(up_given)
    else:
        scene = _with_recorded_up(scene, fmt, None if auto_up else _up_list(up_given))
    note = ""
    try:
        if fmt == "ply":
            out = save_scene(scene, args.output)
        elif fmt == "compressed-ply":
            from physskin_gs.io.compressed_ply import morton_order, save_compressed_ply

            out = save_compressed_ply(scene, args.output, order=morton_order(scene.means.numpy()))
            note = ", rows in Morton order"
        elif fmt == "usd":
            from physskin_gs.io.usd import save_usd

            out = save_usd(scene, args.output, up=up, meters_per_unit=mpu)
        else:
            from physskin_gs.io.gltf import save_gltf

            out = save_gltf(scene, args.output, up=up, meters_per_unit=mpu)
            note = ", turned to +Y up" + (f", {mpu:g} m per unit" if mpu is not None else "")
    except OSError as exc:
        raise OutputError(f"could not write {args.output}: {exc.strerror or exc}") from None
    size = verify_written(out, "scene")
    n = scene.num_gaussians
    print(f"wrote {n} Gaussian{'' if n == 1 else 's'} (SH degree {scene.sh_degree}, from {scene.format}) to {out} "
          f"as {fmt} ({size / scene.num_gaussians:.1f} bytes per Gaussian{note})")
    return 0


def _with_recorded_up(scene, fmt: str, up):
    """``scene`` with the up axis a PLY output of format ``fmt`` records (``up_hint``): ``up`` (an explicit
    ``--up``, (3,) unit list) when given; else the input's own recorded one; else, when the input format's up
    convention differs from the output's (:func:`physskin_gs.pipeline.resolve_up`), the scene analysis' up axis
    (:func:`scene_up`, what ``animate`` uses on the input; it prints its note); else the scene as it is."""
    from dataclasses import replace

    from physskin_gs.pipeline import resolve_up

    if up is not None:
        print(f"note: up axis {', '.join(f'{v:+.3f}' for v in up)} recorded in the output (--up)", file=sys.stderr)
        return replace(scene, up_hint=tuple(float(v) for v in up))
    if scene.up_hint is not None:
        return scene
    written = replace(scene, format="inria-ply" if fmt == "ply" else "compressed-ply")
    src, dst = resolve_up("auto", scene), resolve_up("auto", written)
    if bool((src == dst).all()):
        return scene
    auto = scene_up(scene)
    print(f"note: that up axis is recorded in the output (the {written.format} convention is {axis_name(dst)} up, "
          f"the {scene.format} one {axis_name(src)})", file=sys.stderr)
    return replace(scene, up_hint=tuple(auto))


def _up_list(up) -> list:
    """A checked ``--up`` value (:func:`~physskin_gs.cli._common.resolve_up_option`) as a (3,) unit vector list."""
    from physskin_gs.render import up_vector

    return [float(v) for v in up_vector(up)]
